/**
 * Cloning a cached ext4 root disk into a placement (spec "Prepare
 * (ensure_present)": "An ext4 root is cloned from that copy, with a reflink
 * where the filesystem supports one and otherwise by copying only its data
 * blocks").
 *
 * Tries `cp --reflink=always` (FICLONE: instant, shares blocks until
 * written), else `cp --sparse=always` (holes stay holes). Process spawning
 * sits behind the `CommandRunner` port. Must never: overwrite an existing
 * destination, or leave a partial destination behind when it throws.
 */
import { chmod, lstat, rm } from "node:fs/promises";

/** Runs argv and reports its exit code and stderr. */
export type CommandRunner = (argv: string[]) => Promise<{ exitCode: number; stderr: string }>;

/** The real CommandRunner: Bun.spawn with stdout ignored. */
export const spawnCommand: CommandRunner = async (argv) => {
  const p = Bun.spawn(argv, { stdout: "ignore", stderr: "pipe" });
  const [stderr, exitCode] = await Promise.all([new Response(p.stderr).text(), p.exited]);
  return { exitCode, stderr };
};

/** How cloneRootDisk produced the copy. */
export type CloneMethod = "reflink" | "sparse-copy";

/**
 * Clones `src` to `dst` (which must not exist) and makes `dst` mode 0600,
 * owned by the caller (the placement chowns it later). Returns the method
 * used. Throws an Error when `dst` exists or both methods fail (the partial
 * `dst` is removed).
 */
export async function cloneRootDisk(src: string, dst: string, run: CommandRunner = spawnCommand): Promise<CloneMethod> {
  if (await lstat(dst).catch(() => null)) throw new Error(`clone destination exists: ${dst}`);
  let method: CloneMethod = "reflink";
  const reflink = await run(["cp", "--reflink=always", "--", src, dst]);
  if (reflink.exitCode !== 0) {
    await rm(dst, { force: true });
    method = "sparse-copy";
    const copy = await run(["cp", "--sparse=always", "--", src, dst]);
    if (copy.exitCode !== 0) {
      await rm(dst, { force: true });
      throw new Error(
        `cannot clone ${src}: reflink: ${reflink.stderr.trim().slice(0, 200)}; copy: ${copy.stderr.trim().slice(0, 200)}`,
      );
    }
  }
  await chmod(dst, 0o600);
  return method;
}
