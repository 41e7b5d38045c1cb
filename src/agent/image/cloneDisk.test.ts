import { afterAll, expect, test } from "bun:test";
import {
  closeSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  statSync,
  truncateSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type CommandRunner, cloneRootDisk, spawnCommand } from "./cloneDisk.ts";

const work = mkdtempSync(join(tmpdir(), "bb-clone-test-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** A 64 MiB file with 4 KiB of data in the middle: almost all hole. */
function sparseSource(): string {
  const src = join(work, "src.ext4");
  writeFileSync(src, "");
  const fd = openSync(src, "r+");
  writeSync(fd, Buffer.alloc(4096, 7), 0, 4096, 32 * 2 ** 20);
  closeSync(fd);
  truncateSync(src, 64 * 2 ** 20);
  return src;
}

test("clones with reflink when supported, else a sparse copy; same bytes, mode 0600, holes kept", async () => {
  const src = sparseSource();
  const dst = join(work, "dst.ext4");
  const method = await cloneRootDisk(src, dst);
  expect(["reflink", "sparse-copy"]).toContain(method);
  expect(statSync(dst).size).toBe(64 * 2 ** 20);
  expect(statSync(dst).mode & 0o777).toBe(0o600);
  expect(Bun.hash(readFileSync(dst))).toBe(Bun.hash(readFileSync(src)));
  expect(statSync(dst).blocks * 512).toBeLessThan(2 * 2 ** 20); // not 64 MiB of zeros on disk
  await expect(cloneRootDisk(src, dst)).rejects.toThrow(/exists/);
});

test("falls back to a sparse copy when reflink fails, and reports which method ran", async () => {
  const src = sparseSource();
  const calls: string[] = [];
  const noReflink: CommandRunner = async (argv) => {
    calls.push(argv[1]!);
    return argv[1] === "--reflink=always" ? { exitCode: 1, stderr: "Operation not supported" } : spawnCommand(argv);
  };
  expect(await cloneRootDisk(src, join(work, "fallback.ext4"), noReflink)).toBe("sparse-copy");
  expect(calls).toEqual(["--reflink=always", "--sparse=always"]);
  const reflinkOk: CommandRunner = async (argv) => (
    writeFileSync(argv[argv.length - 1]!, "x"), { exitCode: 0, stderr: "" }
  );
  expect(await cloneRootDisk(src, join(work, "reflinked.ext4"), reflinkOk)).toBe("reflink");
  const broken: CommandRunner = async (argv) => (
    writeFileSync(argv[argv.length - 1]!, "partial"), { exitCode: 1, stderr: "No space left on device" }
  );
  await expect(cloneRootDisk(src, join(work, "broken.ext4"), broken)).rejects.toThrow(/No space/);
  expect(() => statSync(join(work, "broken.ext4"))).toThrow(); // partial copy removed
});
