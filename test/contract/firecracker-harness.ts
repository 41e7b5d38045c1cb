/**
 * Shared fixture of the Firecracker driver contract tests: a placement's files, and a driver
 * whose spawn port plays the jailer by starting the TEST DOUBLE of Firecracker's API server
 * (firecracker-double.ts) as a real detached process at the API socket the jailer argv implies,
 * so isAlive, stop and signals act on a real PID, under the jailer's RLIMIT_FSIZE (via prlimit). Test files call `killSpawned` after each test
 * and `removeWork` after all. Must never: be imported by production code.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import type { VmSpec } from "../../src/agent/vmm/driver.ts";
import { FirecrackerDriver, type FirecrackerPorts, type SpawnedVmm } from "../../src/agent/vmm/firecracker/driver.ts";
import type { RecordedRequest } from "./firecracker-double.ts";

/** The work directory of this test process. */
export const work = mkdtempSync(join(tmpdir(), "bb-fc-contract-"));
const DOUBLE = join(import.meta.dir, "firecracker-double.ts");
/** Every double spawned, in order. */
export const spawned: SpawnedVmm[] = [];
let seq = 0;

/** SIGKILLs every double a test spawned that still runs (call after each test). */
export function killSpawned(): void {
  for (const p of spawned.splice(0)) if (p.exitCode === null && p.signalCode === null) process.kill(p.pid, "SIGKILL");
}

/** Removes the shared work directory (call after all tests of a file). */
export function removeWork(): void {
  rmSync(work, { recursive: true, force: true });
}

/** A placement's files: kernel in a cache dir, ext4 root and sparse scratch disk in the allocation dir. */
export function fixture(): { spec: VmSpec; base: string; cgroupRoot: string } {
  const base = join(work, `case${++seq}`);
  const cache = join(base, "cache");
  const dir = join(base, "alloc");
  mkdirSync(cache, { recursive: true });
  mkdirSync(join(dir, "logs"), { recursive: true });
  writeFileSync(join(cache, "vmlinux"), "kernel");
  writeFileSync(join(dir, "rootfs.ext4"), "");
  truncateSync(join(dir, "rootfs.ext4"), 64 * 1024 * 1024);
  writeFileSync(join(dir, "scratch.ext4"), "");
  truncateSync(join(dir, "scratch.ext4"), 32 * 1024 * 1024);
  const instanceId = `bb-${seq.toString().padStart(24, "0")}`;
  const spec: VmSpec = {
    instanceId,
    dir,
    vcpus: 2,
    memoryMiB: 256,
    kernelPath: join(cache, "vmlinux"),
    rootDiskPath: join(dir, "rootfs.ext4"),
    netns: instanceId,
    tapName: "bbtap0",
    kernelArgs: ["beachball.generation=3", "beachball.ipv4=10.0.0.2/30"],
    consoleLogPath: join(dir, "logs", "console.log"),
    controlSocketPath: join(dir, "control.sock"),
  };
  return { spec, base, cgroupRoot: join(base, "cgroup") };
}

/** A driver with recorded jailer argvs and chowns, and the double's request log. */
export interface Harness {
  driver: FirecrackerDriver;
  argvs: string[][];
  chowns: [string, number, number][];
  logPath: string;
  log: () => RecordedRequest[];
}

/** A driver whose spawn port plays the jailer: creates the cgroup dir the jailer would, then runs the double at the API socket the argv implies. */
export function harness(
  f: ReturnType<typeof fixture>,
  doubleFlags: string[] = [],
  extra: Partial<FirecrackerPorts> = {},
  shutdownWaitMs = 2_000,
): Harness {
  const argvs: string[][] = [];
  const chowns: [string, number, number][] = [];
  const logPath = join(f.base, "requests.ndjson");
  const driver = new FirecrackerDriver({
    firecrackerBinary: "/opt/fc/firecracker",
    jailerBinary: "/opt/fc/jailer",
    chrootBase: join(f.base, "jails"),
    uidRange: { first: 40_000, count: 4 },
    cgroupRoot: f.cgroupRoot,
    startTimeoutMs: 10_000,
    shutdownWaitMs,
    ports: {
      chown: (p, uid, gid) => void chowns.push([p, uid, gid]),
      spawn: (argv, io) => {
        argvs.push(argv);
        const val = (flag: string) => argv[argv.indexOf(flag) + 1]!;
        const root = join(val("--chroot-base-dir"), basename(val("--exec-file")), val("--id"), "root");
        const apiSock = argv[argv.indexOf("--api-sock", argv.indexOf("--")) + 1]!;
        mkdirSync(join(f.cgroupRoot, val("--parent-cgroup"), val("--id")), { recursive: true });
        // The jailer's --resource-limit fsize=N, applied for real: prlimit sets RLIMIT_FSIZE and execs
        // the double in place (same PID), so a file the double writes past N kills it with SIGXFSZ.
        const fsize = argv[argv.indexOf("--resource-limit") + 1]!.replace(/^fsize=/, "");
        const p = Bun.spawn(
          [
            "prlimit",
            `--fsize=${fsize}:${fsize}`,
            "--",
            process.execPath,
            DOUBLE,
            "--api-sock",
            join(root, apiSock),
            "--id",
            val("--id"),
            "--root",
            root,
            "--log",
            logPath,
            ...doubleFlags,
          ],
          {
            cwd: io.cwd,
            detached: true,
            stdin: "ignore",
            stdout: io.logFd,
            stderr: io.logFd,
          },
        );
        spawned.push(p);
        return p;
      },
      ...extra,
    },
  });
  const log = () =>
    existsSync(logPath)
      ? readFileSync(logPath, "utf8")
          .trim()
          .split("\n")
          .map((l) => JSON.parse(l) as RecordedRequest)
      : [];
  return { driver, argvs, chowns, logPath, log };
}

/** True once `pid` is gone or a zombie. */
export const procGone = (pid: number): boolean => {
  try {
    return readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.startsWith("Z");
  } catch {
    return true;
  }
};
