/**
 * The demo with a payload the scheduler would refuse (issue 7 item 5): it
 * used to build the image, boot a VM, print `INTERNAL: HTTP 413` and hang.
 * Now the size is checked before anything starts: `bb dev demo` exits 2 at
 * once with the size and the limit, and its state directory stays empty.
 * (The server side of the same fault, a 413 that always carries
 * PAYLOAD_TOO_LARGE, is in http-edge.test.ts; the hang after an error once
 * the VM runs is in test/e2e/demo-interrupt.test.ts.)
 */
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { MAX_PAYLOAD_BYTES } from "../../src/protocol/api.ts";

const BUN = resolve("node_modules/.bin/bun");
const BB = resolve("bin/bb.ts");
const work = mkdtempSync(join(tmpdir(), "bb-demo-payload-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** Runs `bb dev demo ARGS` and kills it if it is still running after `ms` (it should be long gone). */
async function demo(args: string[], ms = 30_000): Promise<{ code: number | null; out: string }> {
  const p = Bun.spawn([BUN, BB, "dev", "demo", ...args], {
    stdout: "pipe",
    stderr: "pipe",
    env: { ...process.env, NO_COLOR: "1" },
  });
  const killer = setTimeout(() => p.kill("SIGKILL"), ms);
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  clearTimeout(killer);
  return { code: p.signalCode ? null : code, out: out + err };
}

describe("a demo payload too large for the scheduler", () => {
  test("is refused before anything boots: exit 2, the size and the limit named, nothing created", async () => {
    const root = join(work, "root");
    const big = join(work, "big.sh");
    writeFileSync(big, Buffer.alloc(2 * 1024 * 1024, 0x61).toString("base64"));
    const r = await demo(["--root", root, "--payload", big]);
    expect(r.code).toBe(2);
    expect(r.out).toContain(`--payload ${big} is 2796204 bytes`);
    expect(r.out).toContain(`at most ${MAX_PAYLOAD_BYTES} bytes`);
    expect(existsSync(root) ? readdirSync(root) : []).toEqual([]);
  }, 60_000);

  test("a payload file that cannot be read is a usage error too", async () => {
    const r = await demo(["--root", join(work, "root2"), "--payload", join(work, "missing.sh")]);
    expect(r.code).toBe(2);
    expect(r.out).toContain("cannot read --payload");
  }, 60_000);
});
