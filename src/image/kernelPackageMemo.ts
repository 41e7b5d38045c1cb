/**
 * Remembering which kernel package `linux-image-amd64` resolves to, for as
 * long as the host's apt state is unchanged, so an image build does not run
 * `apt-cache depends` every time (about 1.4 s of CPU on a host whose apt
 * keeps no binary package cache, as Debian's container images configure:
 * `Dir::Cache::pkgcache ""`, so each apt-cache run parses every package list).
 *
 * The answer of `apt-cache depends` depends only on the package lists, the
 * sources, the apt configuration and preferences and the dpkg status, so
 * the memo is keyed by the identity (name, size, modification time, inode)
 * of each file apt names for APT_STATE_ITEMS: an `apt-get update`, a changed source or
 * an installed package changes the key and the package is resolved again.
 * The memo is one small JSON file in the kernel cache, written by rename.
 *
 * Owns: the memo file and its key. Must never: return a package resolved
 * under another apt state, or fail a build because the memo is missing,
 * unreadable or malformed (it is then resolved again).
 */
import { readdir, readFile, rename, stat, writeFile } from "node:fs/promises";
import { createHash } from "node:crypto";
import { join } from "node:path";

/**
 * apt's configuration items (with `apt-config shell`'s type suffix: /f a
 * file, /d a directory, whose direct entries count) whose files decide what
 * apt-cache resolves. The paths are asked of apt itself rather than written
 * here, so a host with another apt layout is keyed by its own files (and the
 * binary never names dpkg's database: Debian policy, lintian's
 * uses-dpkg-database-directly).
 */
export const APT_STATE_ITEMS: readonly string[] = [
  "Dir::State::lists/d",
  "Dir::Etc::sourcelist/f",
  "Dir::Etc::sourceparts/d",
  "Dir::Etc::preferences/f",
  "Dir::Etc::preferencesparts/d",
  "Dir::Etc::main/f",
  "Dir::Etc::parts/d",
  "Dir::State::status/f",
];
/** Longest `apt-config shell` run waited for, ms (it answers in a few ms). */
const APT_CONFIG_TIMEOUT_MS = 5_000;

/**
 * The files and directories of APT_STATE_ITEMS on this host, from
 * `apt-config shell`; an empty list (so nothing is memoized) when apt-config
 * is missing, fails, or answers for fewer items than asked. Never throws.
 */
export async function aptStatePaths(): Promise<string[]> {
  const args = APT_STATE_ITEMS.flatMap((item, i) => [`P${i}`, item]);
  try {
    const proc = Bun.spawn(["apt-config", "shell", ...args], { stdout: "pipe", stderr: "ignore" });
    const timer = setTimeout(() => proc.kill(), APT_CONFIG_TIMEOUT_MS);
    const out = await new Response(proc.stdout).text();
    clearTimeout(timer);
    if ((await proc.exited) !== 0) return [];
    const paths = [...out.matchAll(/^P\d+='([^']*)'$/gm)].map((m) => m[1]!.replace(/\/$/, ""));
    return paths.length === APT_STATE_ITEMS.length ? paths : [];
  } catch {
    return [];
  }
}

/** Most directory entries taken into the key per directory (apt's lists are a few dozen files). */
export const MAX_APT_STATE_ENTRIES = 10_000;
/** Largest memo file read, bytes. */
const MAX_MEMO_BYTES = 4096;
/** Memo file name under `<cacheDir>/kernel/`. */
export const KERNEL_PACKAGE_MEMO_FILE = "resolved-package.json";

const identity = async (p: string): Promise<string> => {
  const s = await stat(p).catch(() => null);
  return s ? `${p}\0${s.isDirectory() ? "d" : "f"}\0${s.size}\0${s.mtimeMs}\0${s.ino}` : `${p}\0absent`;
};

/**
 * A hex SHA-256 over the identity of every path of `paths` and, for a
 * directory, of each of its direct entries (sorted; at most
 * MAX_APT_STATE_ENTRIES, beyond which the key is "" and nothing is
 * memoized); "" too for an empty list. Missing paths count as absent. Never throws.
 */
export async function aptStateKey(paths: readonly string[]): Promise<string> {
  if (paths.length === 0) return "";
  const h = createHash("sha256");
  for (const p of paths) {
    h.update(`${await identity(p)}\n`);
    const names = await readdir(p).catch(() => null);
    if (!names) continue;
    if (names.length > MAX_APT_STATE_ENTRIES) return "";
    for (const n of names.sort()) h.update(`${await identity(join(p, n))}\n`);
  }
  return h.digest("hex");
}

/**
 * The kernel package name: from the memo in `memoDir` when it was written
 * under the same apt state (aptStateKey of `statePaths`, by default the
 * paths apt-config names), else from
 * `resolve()` (which runs apt), then remembered. Throws only what
 * `resolve` throws.
 */
export async function memoizedKernelPackage(
  memoDir: string,
  resolve: () => Promise<string>,
  statePaths?: readonly string[],
): Promise<string> {
  statePaths ??= await aptStatePaths();
  const key = await aptStateKey(statePaths);
  const file = join(memoDir, KERNEL_PACKAGE_MEMO_FILE);
  if (key !== "") {
    const text = await readFile(file)
      .then((b) => (b.length <= MAX_MEMO_BYTES ? b.toString() : ""))
      .catch(() => "");
    try {
      const m = JSON.parse(text) as { aptState?: unknown; package?: unknown };
      if (m.aptState === key && typeof m.package === "string" && m.package !== "") return m.package;
    } catch {
      // missing or malformed: resolve again
    }
  }
  const name = await resolve();
  // The state is read again: a memo is written only for a state that did not change while apt ran.
  if (key !== "" && (await aptStateKey(statePaths)) === key) {
    const tmp = `${file}.tmp-${process.pid}`;
    try {
      await writeFile(tmp, JSON.stringify({ aptState: key, package: name }) + "\n", { mode: 0o644 });
      await rename(tmp, file);
    } catch {
      // a cache that cannot be written only costs the next build a resolution
    }
  }
  return name;
}
