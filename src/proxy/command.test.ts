/**
 * `bb proxy` refuses bad input before it asks the scheduler for anything
 * (docs/cli.md: usage errors exit 2, nothing done). The scheduler URL points
 * at a closed loopback port, so a refusal that reached the network would
 * show up as a connection error with exit code 1 instead.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createServer } from "node:net";
import { relayCaFrom } from "./command.ts";

const BB = resolve(import.meta.dir, "../../bin/bb.ts");
const KEY = `dev-1=${Buffer.alloc(32, 7).toString("base64")}`;
const ID = `alloc_${"ab".repeat(16)}`;

function bbProxy(args: string[], env: Record<string, string> = {}): { code: number; stderr: string } {
  const r = Bun.spawnSync([process.execPath, BB, "proxy", ...args], {
    env: {
      PATH: process.env["PATH"] ?? "",
      HOME: tmpdir(),
      BB_SCHEDULER_URL: "http://127.0.0.1:1",
      BB_TOKEN: "bbt_x",
      BB_CONNECTION_KEYS: KEY,
      ...env,
    },
    stdout: "pipe",
    stderr: "pipe",
  });
  return { code: r.exitCode ?? -1, stderr: r.stderr.toString() };
}

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe("bb proxy usage errors", () => {
  test("an allocation argument that cannot start an ID exits 2 naming it, without a scheduler call", () => {
    const r = bbProxy(["not-an-id", "--local-port", "2222", "--remote-port", "22"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('"not-an-id" is not an allocation ID');
  });

  test("--json is not a flag of bb proxy (it prints progress lines, not a JSON result)", () => {
    const r = bbProxy([ID, "--local-port", "2222", "--remote-port", "22", "--json"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("unknown flag --json");
  });

  test("--ttl takes decimal digits only (0x3c and 1e2 are refused, as ports are)", () => {
    for (const ttl of ["0x3c", "1e2", "60.0", " 60"]) {
      const r = bbProxy([ID, "--local-port", "2222", "--remote-port", "22", "--ttl", ttl]);
      expect(r.code).toBe(2);
      expect(r.stderr).toContain("--ttl must be 30..3600");
    }
  });
});

describe("bb proxy local port", () => {
  test("a --local-port that is already taken exits 2 naming it, before a grant is requested", async () => {
    const holder = createServer();
    await new Promise<void>((r) => holder.listen(0, "127.0.0.1", () => r()));
    const port = (holder.address() as { port: number }).port;
    try {
      const r = bbProxy([ID, "--local-port", String(port), "--remote-port", "22"]);
      expect(r.code).toBe(2);
      expect(r.stderr).toContain(`--local-port ${port}: cannot listen on 127.0.0.1:${port} (EADDRINUSE)`);
    } finally {
      await new Promise<void>((r) => holder.close(() => r()));
    }
  });
});

describe("relayCaFrom", () => {
  test("names BB_RELAY_CA, not the flag, when the path came from the environment", () => {
    const dir = mkdtempSync(join(tmpdir(), "bb-proxy-ca-"));
    dirs.push(dir);
    const notPem = join(dir, "ca.txt");
    writeFileSync(notPem, "not a certificate\n");
    const saved = process.env["BB_RELAY_CA"];
    process.env["BB_RELAY_CA"] = notPem;
    try {
      expect(() => relayCaFrom(undefined)).toThrow(`BB_RELAY_CA ${notPem}: no PEM certificate in the file`);
      expect(() => relayCaFrom(join(dir, "missing.pem"))).toThrow(`--relay-ca ${join(dir, "missing.pem")}: ENOENT`);
    } finally {
      if (saved === undefined) delete process.env["BB_RELAY_CA"];
      else process.env["BB_RELAY_CA"] = saved;
    }
  });
});
