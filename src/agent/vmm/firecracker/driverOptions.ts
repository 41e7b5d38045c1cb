/**
 * The configuration of a FirecrackerDriver: its side-effect ports (spawn, chown, the API
 * client) and its host options (binaries, jail base, UID range, cgroups, timeouts).
 *
 * Must never: hold per-placement state (everything here is fixed for the driver's life).
 */
import type { FirecrackerApi } from "./apiClient.ts";
import type { VmmSpawner } from "./hostProcess.ts";
import type { ChownPort } from "./jailFs.ts";
import type { IdRange } from "./jailer.ts";

/** Side effects of the driver, replaceable in tests. */
export interface FirecrackerPorts {
  /** Starts the jailer (default spawnDetached). */
  spawn: VmmSpawner;
  /** Hands jail files to the placement UID (default fs.chownSync). */
  chown: ChownPort;
  /** The API client for the socket at `socketPath` with a per-request timeout in ms. */
  api: (socketPath: string, timeoutMs: number) => FirecrackerApi;
}

/** Options of FirecrackerDriver (host configuration, fixed for the driver's life). */
export interface FirecrackerDriverOptions {
  /** Pinned Firecracker binary (default /usr/local/bin/firecracker). */
  firecrackerBinary?: string;
  /** Pinned jailer binary (default /usr/local/bin/jailer). */
  jailerBinary?: string;
  /** Jailer `--chroot-base-dir` (default /srv/jailer, jailer.md). */
  chrootBase?: string;
  /** Jail UID/GID range (spec "Prepare"); default 900000 + 10000. */
  uidRange?: IdRange;
  /** cgroup v2 mount point (default /sys/fs/cgroup). */
  cgroupRoot?: string;
  /** Parent cgroup of every jail (default DEFAULT_PARENT_CGROUP). */
  parentCgroup?: string;
  /** Memory allowed above guest RAM in memory.max, MiB (default DEFAULT_VMM_OVERHEAD_MIB). */
  vmmOverheadMiB?: number;
  /** cgroup pids.max (default DEFAULT_PIDS_MAX). */
  pidsMax?: number;
  /** Per-request API timeout, ms. */
  apiTimeoutMs?: number;
  /** How long start() waits for the API socket, ms. */
  startTimeoutMs?: number;
  /** How long stop() waits after SendCtrlAltDel before SIGTERM, ms. */
  shutdownWaitMs?: number;
  /** Per-request timeout of PUT /snapshot/create and /snapshot/load, ms (default snapshotHost.ts DEFAULT_SNAPSHOT_TIMEOUT_MS). */
  snapshotTimeoutMs?: number;
  /** Replacements for the side-effect ports (tests); unset ones use the real adapters. */
  ports?: Partial<FirecrackerPorts>;
}
