/**
 * A throwaway systemd container for the package tests: an overlay (tmpfs
 * upper layer) over a read-only lower root, booted with systemd-nspawn into a
 * target that starts only the basic system, with a private network (only
 * loopback) and its own cgroup subtree. Commands run inside with nsenter.
 *
 * Lower roots: `host` is this machine's own root file system (instant; it is
 * a copy of this Debian without the package, not a minimal one); `minbase`
 * is a minimal Debian bookworm with systemd made by mmdebstrap and cached
 * under .bb/cache/packaging/ (about 2-4 minutes to make once).
 * Must never: write to the lower root, touch the host's network, or leave a
 * mount, process, cgroup or directory behind (stop() removes everything it
 * made, also after a failed boot).
 */
import {
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  renameSync,
  rmSync,
  rmdirSync,
  writeFileSync,
} from "node:fs";
import { join, resolve } from "node:path";

/** Result of a command run inside the container. */
export interface ExecResult {
  code: number;
  out: string;
  err: string;
}

/** A booted container. */
export interface TestContainer {
  /** Where the container's root is mounted on this machine (writes land in the tmpfs upper layer). */
  root: string;
  /** PID (in this machine's namespace) of the container's systemd. */
  leader: number;
  /** Runs argv inside every namespace of the container as its root. */
  exec(argv: string[], env?: Record<string, string>): ExecResult;
  /** The container's console output so far (for failure messages). */
  console(): string;
  /** Powers the container off and removes every mount, cgroup and directory it made. */
  stop(): Promise<void>;
}

const PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/** How long the container may take to reach its target, ms. */
const BOOT_TIMEOUT_MS = 90_000;
/** How long a powered-off container may take to exit before it is killed, ms. */
const STOP_TIMEOUT_MS = 30_000;
/** The only unit the container boots into: basic.target and nothing the lower root enables. */
const TEST_TARGET =
  "[Unit]\nDescription=Beachball package test\nRequires=basic.target\nAfter=basic.target\nAllowIsolate=yes\n";
/** Packages of the `minbase` root besides Debian's minbase: systemd, and what the agent runs. */
const MINBASE_INCLUDE = "systemd,systemd-sysv,iproute2,nftables,e2fsprogs";

function sh(argv: string[]): ExecResult {
  const p = Bun.spawnSync(argv, { stdout: "pipe", stderr: "pipe", env: { PATH } });
  return { code: p.exitCode ?? -1, out: p.stdout.toString(), err: p.stderr.toString() };
}

function must(argv: string[]): string {
  const r = sh(argv);
  if (r.code !== 0) throw new Error(`${argv.join(" ")} failed (${r.code}): ${r.err.trim()}`);
  return r.out;
}

/** Why the container tests cannot run here, or null. */
export function containerSkipReason(): string | null {
  if (process.getuid?.() !== 0) return "needs root (mounts, systemd-nspawn)";
  for (const cmd of ["systemd-nspawn", "nsenter", "dpkg-deb", "systemd-analyze"])
    if (!Bun.which(cmd, { PATH })) return `${cmd} missing (bash scripts/setup.sh installs systemd-container)`;
  if (!readFileSync("/proc/filesystems", "utf8").includes("\toverlay\n")) return "no overlayfs in this kernel";
  return null;
}

/** The cgroup hierarchies nspawn places the container in: the unified one and, on hybrid hosts, name=systemd. */
function cgroupMounts(): string[] {
  const out: string[] = [];
  for (const line of readFileSync("/proc/self/mountinfo", "utf8").split("\n")) {
    const [pre, post] = line.split(" - ");
    const mountPoint = pre?.split(" ")[4];
    if (!post || !mountPoint) continue;
    if (post.startsWith("cgroup2 ") || (post.startsWith("cgroup ") && post.includes("name=systemd")))
      out.push(mountPoint);
  }
  return out;
}

/** Removes a cgroup directory tree bottom-up (cgroup directories are removed with rmdir only). */
function removeCgroupTree(dir: string): void {
  if (!existsSync(dir)) return;
  for (const e of readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) removeCgroupTree(join(dir, e.name));
  try {
    rmdirSync(dir);
  } catch {
    /* a process still inside: reported by the caller's leak check */
  }
}

/**
 * The cached minimal Debian root, made with mmdebstrap on first use (from the
 * same Debian mirror apt uses; needs network access to it).
 */
export function minbaseRoot(repoRoot: string, log: (s: string) => void): string {
  const dir = resolve(repoRoot, ".bb/cache/packaging/bookworm-minbase");
  if (existsSync(join(dir, "usr/lib/systemd/systemd")) || existsSync(join(dir, "lib/systemd/systemd"))) return dir;
  if (!Bun.which("mmdebstrap", { PATH }))
    throw new Error("BB_PACKAGING_ROOT=minbase needs mmdebstrap (apt-get install -y mmdebstrap)");
  mkdirSync(resolve(dir, ".."), { recursive: true });
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  const t0 = performance.now();
  must([
    "mmdebstrap",
    "--quiet",
    "--variant=minbase",
    `--include=${MINBASE_INCLUDE}`,
    "--dpkgopt=force-unsafe-io",
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
    // The mirror is a snapshot whose Release files may be past their Valid-Until date.
    '--aptopt=Acquire::Check-Valid-Until "false"',
    '--aptopt=Acquire::Check-Date "false"',
    "bookworm",
    tmp,
    "deb http://deb.debian.org/debian bookworm main",
  ]);
  renameSync(tmp, dir);
  log(`made the minbase root in ${Math.round((performance.now() - t0) / 1000)} s (cached in ${dir})`);
  return dir;
}

/** Boots a container over `lower` (read-only). `name` must be unique on the machine (it names the machine and cgroups). */
export async function bootContainer(lower: string, name: string): Promise<TestContainer> {
  const base = mkdtempSync(`/tmp/${name}-`);
  const uw = join(base, "uw");
  const root = join(base, "root");
  const cgroups = cgroupMounts().map((m) => join(m, name));
  const mounted: string[] = [];
  let nspawn: ReturnType<typeof Bun.spawn> | null = null;
  let leader = 0;

  const stop = async () => {
    if (nspawn && nspawn.exitCode === null) {
      nspawn.kill("SIGTERM"); // nspawn asks the container's systemd to power off
      const killed = setTimeout(() => nspawn?.kill("SIGKILL"), STOP_TIMEOUT_MS);
      await nspawn.exited;
      clearTimeout(killed);
    }
    for (const m of mounted.reverse()) sh(["umount", m]);
    mounted.length = 0;
    for (const cg of cgroups) removeCgroupTree(cg);
    rmSync(base, { recursive: true, force: true });
    // nspawn leaves its (empty) propagation directory behind.
    for (const d of [
      `/run/systemd/nspawn/propagate/${name}`,
      "/run/systemd/nspawn/propagate",
      "/run/systemd/nspawn/locks",
      "/run/systemd/nspawn",
    ])
      try {
        rmdirSync(d);
      } catch {
        /* absent, or still used by another container */
      }
  };

  try {
    mkdirSync(uw);
    mkdirSync(root);
    must(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", uw]);
    mounted.push(uw);
    mkdirSync(join(uw, "upper"));
    mkdirSync(join(uw, "work"));
    must([
      "mount",
      "-t",
      "overlay",
      "overlay",
      "-o",
      `lowerdir=${lower},upperdir=${uw}/upper,workdir=${uw}/work`,
      root,
    ]);
    mounted.push(root);
    mkdirSync(join(root, "etc/systemd/system"), { recursive: true });
    writeFileSync(join(root, "etc/systemd/system/bbpkg-test.target"), TEST_TARGET);
    for (const cg of cgroups) mkdirSync(cg);

    // The launcher moves itself into the container's own cgroups, then becomes nspawn.
    const consoleFd = openSync(join(base, "console.log"), "w");
    const join_ = cgroups.map((cg) => `echo $$ > ${cg}/cgroup.procs`).join(" && ");
    nspawn = Bun.spawn(
      [
        "sh",
        "-c",
        `${join_ || "true"} && exec "$@"`,
        "sh",
        "systemd-nspawn",
        "--quiet",
        "--directory",
        root,
        "--machine",
        name,
        "--register=no",
        "--keep-unit",
        "--private-network",
        "--boot",
        "systemd.unit=bbpkg-test.target",
      ],
      { stdin: "ignore", stdout: consoleFd, stderr: consoleFd, env: { PATH } },
    );
    closeSync(consoleFd);

    const deadline = Date.now() + BOOT_TIMEOUT_MS;
    while (Date.now() < deadline && nspawn.exitCode === null) {
      if (!leader) {
        const kids = existsSync(`/proc/${nspawn.pid}/task/${nspawn.pid}/children`)
          ? readFileSync(`/proc/${nspawn.pid}/task/${nspawn.pid}/children`, "utf8").trim().split(/\s+/).filter(Boolean)
          : [];
        leader = Number(kids.find((k) => readFileSync(`/proc/${k}/comm`, "utf8").trim() === "systemd") ?? 0);
      }
      if (leader) {
        const s = sh(["nsenter", "-t", String(leader), "-a", "--", "systemctl", "is-active", "bbpkg-test.target"]);
        if (s.out.trim() === "active") break;
      }
      await Bun.sleep(250);
    }
    if (!leader || nspawn.exitCode !== null || Date.now() >= deadline)
      throw new Error(
        `the container did not boot (nspawn ${nspawn.exitCode === null ? "running" : `exited ${nspawn.exitCode}`}):\n${readFileSync(join(base, "console.log"), "utf8").slice(-3000)}`,
      );
  } catch (e) {
    await stop();
    throw e;
  }

  return {
    root,
    leader,
    exec: (argv, env = {}) => {
      const p = Bun.spawnSync(["nsenter", "-t", String(leader), "-a", "--", ...argv], {
        stdout: "pipe",
        stderr: "pipe",
        env: { PATH, LANG: "C.UTF-8", ...env },
      });
      return { code: p.exitCode ?? -1, out: p.stdout.toString(), err: p.stderr.toString() };
    },
    console: () => (existsSync(join(base, "console.log")) ? readFileSync(join(base, "console.log"), "utf8") : ""),
    stop,
  };
}
