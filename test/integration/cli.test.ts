/**
 * The operator and client CLI against a real scheduler, as subprocesses:
 * host admin states (activate, drain, disable = fence), alerts, metrics,
 * replacement authorization, and the exit codes (0 ok, 1 error, 2 usage,
 * 4 auth).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { resolve } from "node:path";
import { tmpdir } from "node:os";
import { startTestScheduler, rawPost, type TestScheduler } from "../support/scheduler.ts";

let s: TestScheduler;
const BUN = resolve("node_modules/.bin/bun");
const BB = resolve("bin/bb.ts");

async function bb(args: string[], token?: string): Promise<{ code: number; out: string }> {
  const env = { ...process.env, NO_COLOR: "1", BB_CONFIG: "/nonexistent", BB_SCHEDULER_URL: s.url };
  delete (env as Record<string, string | undefined>)["BB_TOKEN"];
  // From an empty directory, so no ./.bb/client.json of the developer's is picked up.
  const p = Bun.spawn([BUN, BB, ...args, ...(token ? ["--token", token] : [])], { stdout: "pipe", stderr: "pipe", env, cwd: tmpdir() });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { code, out: out + err };
}

beforeAll(async () => {
  s = await startTestScheduler();
  const t = await s.operator.enrollmentToken("cli-host");
  const r = await rawPost(`${s.url}/v1/agents/enroll`, null, JSON.stringify({ token: t.token, capacity: { cpuMillis: 2000, memoryMiB: 1024, ephemeralDiskMiB: 4096, maxPlacements: 2 }, region: "local", architecture: "x86_64", agentProtocolVersion: "1.0", vmmDriver: "qemu-microvm" }));
  expect(r.status).toBe(201);
});
afterAll(async () => {
  await s.stop();
});

describe("bb CLI", () => {
  test("host drain, activate and disable (fence) change the admin state", async () => {
    const op = s.tokens.operatorToken;
    expect((await bb(["host", "drain", "cli-host", "--json"], op)).out).toContain('"adminState":"draining"');
    expect((await bb(["host", "activate", "cli-host", "--json"], op)).out).toContain('"adminState":"active"');
    const fenced = await bb(["host", "disable", "cli-host", "--json"], op);
    expect(fenced.code).toBe(0);
    expect(fenced.out).toContain('"adminState":"disabled"');
    expect(fenced.out).toContain('"credentialVersion":2');
    const alerts = await bb(["host", "alerts"], op);
    expect(alerts.out).toContain("host.disabled cli-host [HOST_FENCED]");
    const metrics = await bb(["host", "metrics"], op);
    expect(metrics.out).toContain('bb_host_admin_changes_total{host="cli-host",state="disabled"} 1');
    expect((await bb(["host", "disable", "no-such-host"], op)).code).toBe(1);
  });

  test("exit codes: 4 for a refused token or role, 2 for a missing token, 1 for a stable error", async () => {
    expect((await bb(["host", "list"], "wrong-token")).code).toBe(4);
    expect((await bb(["host", "list"], s.tokens.token)).code).toBe(4);
    expect((await bb(["allocation", "list"])).code).toBe(2);
    const missing = await bb(["allocation", "authorize-replacement", "alloc_00000000000000000000000000000000", "--generation", "1"], s.tokens.token);
    expect(missing.code).toBe(1);
    expect(missing.out).toContain("NOT_FOUND");
    const { view } = await s.controller.create({ clientRequestId: "cli-1", workloadClass: "ci-small" });
    const notBlocked = await bb(["allocation", "authorize-replacement", view.allocationId, "--generation", "1"], s.tokens.token);
    expect(notBlocked.code).toBe(1);
    expect(notBlocked.out).toContain("REPLACEMENT_NOT_BLOCKED");
    await s.controller.release(view.allocationId);
  });
});
