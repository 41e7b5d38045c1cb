/**
 * Setup while apt is busy (issue 18 item 15): scripts/setup.sh's apt step
 * (scripts/lib/apt-wait.sh, apt_get_waiting) waits, bounded, while another
 * process holds apt's lock, and says so, where it used to fail at once.
 * The lock is a real fcntl lock (as apt takes it) on a private lists
 * directory: `apt-get update` runs against an empty source list with its
 * own Dir::State::Lists and Dir::Cache, so the machine's apt state is never
 * locked or touched, and nothing is downloaded.
 * Needs apt-get and /usr/bin/python3 (to hold the lock); skips otherwise.
 */
import { afterAll, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "../..");
const skip = !Bun.which("apt-get")
  ? "no apt-get"
  : !Bun.which("python3", { PATH: "/usr/bin" })
    ? "no /usr/bin/python3"
    : null;
if (skip) console.log(`SKIP test/integration/setup-apt-lock.test.ts: ${skip}`);
const dir = mkdtempSync(join(tmpdir(), "bb-aptlock-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A private apt world: an empty source list, its own lists and cache directories. */
function aptWorld(name: string): { lists: string; args: string[] } {
  const root = join(dir, name);
  mkdirSync(join(root, "lists", "partial"), { recursive: true });
  mkdirSync(join(root, "cache", "archives", "partial"), { recursive: true });
  writeFileSync(join(root, "sources.list"), "");
  return {
    lists: join(root, "lists"),
    args: [
      "-o",
      `Dir::Etc::SourceList=${join(root, "sources.list")}`,
      "-o",
      "Dir::Etc::SourceParts=/dev/null",
      "-o",
      `Dir::State::Lists=${join(root, "lists")}`,
      "-o",
      `Dir::Cache=${join(root, "cache")}`,
      "update",
      "-q",
    ],
  };
}

/** Holds an fcntl write lock on `path` (as apt does) for `seconds`; resolves once it is held. */
async function holdLock(path: string, seconds: number): Promise<ReturnType<typeof Bun.spawn>> {
  const p = Bun.spawn(
    [
      "/usr/bin/python3",
      "-c",
      `import fcntl,sys,time\nf=open(sys.argv[1],"w")\nfcntl.lockf(f, fcntl.LOCK_EX)\nprint("held", flush=True)\ntime.sleep(float(sys.argv[2]))`,
      path,
      String(seconds),
    ],
    { stdout: "pipe", stderr: "inherit" },
  );
  const reader = (p.stdout as ReadableStream<Uint8Array>).getReader();
  await reader.read(); // "held"
  reader.releaseLock();
  return p;
}

/** Runs apt_get_waiting alone, as setup.sh does, with `env`. */
async function aptGetWaiting(
  args: string[],
  env: Record<string, string>,
): Promise<{ code: number; out: string; err: string }> {
  const p = Bun.spawn(
    ["bash", "-c", 'set -euo pipefail; . scripts/lib/apt-wait.sh; apt_get_waiting "$@"', "apt-wait", ...args],
    { cwd: ROOT, env: { ...process.env, ...env }, stdout: "pipe", stderr: "pipe" },
  );
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { code, out, err };
}

test.skipIf(!!skip)(
  "apt busy: setup's apt step waits for a held apt lock and says so, then succeeds",
  async () => {
    const w = aptWorld("wait");
    const holder = await holdLock(join(w.lists, "lock"), 3);
    const r = await aptGetWaiting(w.args, { APT_LOCK_POLL_SECONDS: "1", APT_LOCK_WAIT_SECONDS: "120" });
    await holder.exited;
    expect(r.err).toBe("");
    expect(r.code).toBe(0);
    expect(r.out).toMatch(
      /^setup: waiting for the apt lock \(lock \S+\/lists\/lock held by process \d+ \(python3\)\), up to 120s\n$/,
    );
  },
  60_000,
);

test.skipIf(!!skip)(
  "apt busy: the wait is bounded: past APT_LOCK_WAIT_SECONDS it gives up naming the holder",
  async () => {
    const w = aptWorld("bound");
    const holder = await holdLock(join(w.lists, "lock"), 30);
    try {
      const r = await aptGetWaiting(w.args, { APT_LOCK_POLL_SECONDS: "1", APT_LOCK_WAIT_SECONDS: "1" });
      expect(r.code).toBe(1);
      expect(r.out).toContain("setup: waiting for the apt lock");
      expect(r.err).toMatch(
        /setup: gave up waiting for the apt lock after 1s \(lock \S+ held by process \d+ \(python3\)\)/,
      );
    } finally {
      holder.kill();
      await holder.exited;
    }
  },
  60_000,
);

test.skipIf(!!skip)("apt busy: any other apt failure is reported at once with apt's output", async () => {
  const r = await aptGetWaiting(["-o", "Dir::Etc::SourceList=/nonexistent/sources.list", "--no-such-option"], {
    APT_LOCK_WAIT_SECONDS: "60",
  });
  expect(r.code).toBe(1);
  expect(r.out).toBe("");
  expect(r.err.length).toBeGreaterThan(0);
});
