import { describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { privateArgsArchive } from "./initrdFragment.ts";

describe("initramfs fragment", () => {
  test("is a newc archive that cpio unpacks into beachball/kernel-args", () => {
    const archive = privateArgsArchive(["beachball.bootstrap_nonce=abc123"]);
    expect(archive.length % 4).toBe(0);
    if (!Bun.which("cpio")) return console.log("SKIP cpio check: cpio is not installed");
    const dir = mkdtempSync(join(tmpdir(), "bb-cpio-"));
    try {
      writeFileSync(join(dir, "a.cpio"), archive);
      const r = Bun.spawnSync(["cpio", "-idm", "--quiet", "-F", join(dir, "a.cpio")], { cwd: dir });
      expect(r.exitCode).toBe(0);
      expect(readFileSync(join(dir, "beachball", "kernel-args"), "utf8")).toBe("beachball.bootstrap_nonce=abc123\n");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
