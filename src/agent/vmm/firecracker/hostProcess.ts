/**
 * Process-level helpers of the Firecracker driver: the spawn port and its
 * default (a detached session whose output goes to the console log), group
 * signals, and the API-socket readiness probe.
 *
 * Implements the process side of spec "Start (ensure_running)" (the agent
 * captures Firecracker's stdout and stderr) and "Stop (ensure_absent)"
 * (signals go to the Firecracker process group). Must never: signal anything
 * the caller has not verified (isAlive) first.
 */
import { lstatSync } from "node:fs";

/** The process the spawn port started (a Bun Subprocess satisfies it). */
export interface SpawnedVmm {
  readonly pid: number;
  readonly exitCode: number | null;
  readonly signalCode: string | number | null;
}

/** Starts `argv` detached (own session, so PID = process group) with stdout and stderr on `logFd`. */
export type VmmSpawner = (argv: string[], io: { logFd: number; cwd: string }) => SpawnedVmm;

/** Default spawn port: Bun.spawn in a new session, stdin closed, output appended to the console log. */
export const spawnDetached: VmmSpawner = (argv, io) => {
  const p = Bun.spawn(argv, { cwd: io.cwd, detached: true, stdin: "ignore", stdout: io.logFd, stderr: io.logFd });
  p.unref();
  return p;
};

/** Sends `signal` to the process group `pid` leads (the driver spawns in a new session), falling back to the PID alone. Never throws. */
export function signalGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    try {
      process.kill(pid, signal);
    } catch {}
  }
}

/**
 * True when a Unix socket at `path` accepts a connection (closed at once,
 * no request sent). The socket file exists between bind() and listen(), so
 * its presence alone races with Firecracker's startup.
 */
export async function acceptsConnections(path: string): Promise<boolean> {
  try {
    if (!lstatSync(path).isSocket()) return false;
    const s = await Bun.connect({ unix: path, socket: { data: () => {} } });
    s.end();
    return true;
  } catch {
    return false;
  }
}
