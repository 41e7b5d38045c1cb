/**
 * The committed native/lwip/lwip.wasm is what native/lwip/build.sh produces
 * from Debian's lwIP source package with Debian's clang-14/lld-14/wasi-libc:
 * rebuild into a temporary file and compare SHA-256 digests (the build is
 * reproducible: fixed paths and order, no timestamps). Needs clang-14,
 * wasm-ld-14 and wasi-libc (scripts/setup.sh) and Debian's mirror for the
 * source package; skips with the reason when the tools are missing.
 */
import { afterAll, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const repo = resolve(import.meta.dir, "../..");
const missing = [
  ["clang-14", "clang-14"],
  ["wasm-ld-14", "lld-14"],
]
  .filter(([bin]) => !Bun.which(bin!))
  .map(([, pkg]) => pkg);
if (!existsSync("/usr/lib/wasm32-wasi/libc.a")) missing.push("wasi-libc");
const skipReason = missing.length
  ? `needs ${missing.join(", ")} (apt-get install ${missing.join(" ")}; scripts/setup.sh does)`
  : null;
if (skipReason) console.log(`SKIP test/integration/lwip-build.test.ts: ${skipReason}`);
const work = mkdtempSync(join(tmpdir(), "bb-lwip-build-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const digest = (path: string) => createHash("sha256").update(readFileSync(path)).digest("hex");

test.skipIf(!!skipReason)(
  "rebuilding lwip.wasm from Debian's source package gives the committed bytes",
  async () => {
    const out = join(work, "lwip.wasm");
    const p = Bun.spawn(["bash", join(repo, "native/lwip/build.sh"), "--out", out], { stdout: "pipe", stderr: "pipe" });
    const [stderr, code] = await Promise.all([new Response(p.stderr).text(), p.exited]);
    expect(code, stderr).toBe(0);
    expect(digest(out)).toBe(digest(join(repo, "native/lwip/lwip.wasm")));
  },
  120_000,
);
