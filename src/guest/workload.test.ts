import { describe, expect, test } from "bun:test";
import { resolveUser, workloadPlan } from "./workload.ts";
import { workloadConfigProblem } from "../protocol/guest.ts";

const passwd =
  "root:x:0:0:root:/root:/bin/sh\nci:x:1000:1001:CI:/home/ci:/bin/sh\nweb:x:33:33::/var/www:/usr/sbin/nologin\n";
const group = "root:x:0:\nci:x:1001:\nbuilders:x:2000:ci\n";

describe("resolveUser (OCI config User)", () => {
  test("names, numbers and user:group forms", () => {
    expect(resolveUser("", passwd, group)).toEqual({ uid: 0, gid: 0, home: "/root" });
    expect(resolveUser("ci", passwd, group)).toEqual({ uid: 1000, gid: 1001, home: "/home/ci" });
    expect(resolveUser("ci:builders", passwd, group)).toEqual({ uid: 1000, gid: 2000, home: "/home/ci" });
    expect(resolveUser("33", passwd, group)).toEqual({ uid: 33, gid: 33, home: "/var/www" });
    expect(resolveUser("4242:4343", passwd, group)).toEqual({ uid: 4242, gid: 4343, home: "/" });
  });
  test("unknown names are refused", () => {
    expect(() => resolveUser("nobody-here", passwd, group)).toThrow(/not in \/etc\/passwd/);
    expect(() => resolveUser("ci:nogroup", passwd, group)).toThrow(/not in \/etc\/group/);
  });
});

describe("workloadPlan", () => {
  test("the reference image hands payloads to the adapter, stored in a file; the dev image runs shell scripts from stdin", () => {
    const a = workloadPlan({ BEACHBALL_WORKLOAD_ADAPTER: "/usr/lib/beachball/adapter-shell" });
    expect(a.kind).toBe("adapter");
    expect(a.command).toMatchObject({ argv: ["/usr/lib/beachball/adapter-shell"], storesPayload: true, uid: 0 });
    expect(a.refuses("application/x-anything")).toBeNull();
    const s = workloadPlan({});
    expect(s.kind).toBe("shell");
    expect(s.command.storesPayload).toBe(false);
    expect(s.refuses("text/x-shellscript")).toBeNull();
    expect(s.refuses("application/json")).toMatch(/unsupported content type/);
  });
});

describe("workloadConfigProblem", () => {
  test("accepts a converted image's description and rejects malformed ones", () => {
    const ok = { entrypoint: ["/bin/sh"], cmd: [], env: ["A=1"], workingDir: "", user: "" };
    expect(workloadConfigProblem(ok)).toBeNull();
    expect(workloadConfigProblem({ ...ok, entrypoint: [] })).toMatch(/both empty/);
    expect(workloadConfigProblem({ ...ok, env: ["NOEQUALS"] })).toMatch(/NAME=value/);
    expect(workloadConfigProblem({ ...ok, cmd: "echo" })).toMatch(/cmd/);
    expect(workloadConfigProblem([])).toMatch(/not an object/);
  });
});
