/**
 * Console logs of failed placements kept for the operator (issue "a guest
 * crash leaves something to diagnose"; AgentConfig.failedConsoleRetentionMs):
 * Stop moves the log to `<dataDir>/failed-consoles/<bb-digest>.<ms>.log`
 * (mode 0600) instead of deleting it; housekeeping deletes each once its
 * retention passed. They hold what the workload printed, so they are kept
 * only when the operator asked, and only as long.
 * Must never: keep a log without a retention, or delete anything else.
 */
import { readdirSync, rmSync } from "node:fs";
import { join } from "node:path";

const KEPT_NAME = /^(bb-[A-Za-z0-9_-]{1,60})\.(\d{13,})\.log$/;

/** Where Stop keeps the console of placement `dirName` that ended at `nowMs`. */
export function keptConsolePath(dir: string, dirName: string, nowMs: number): string {
  return join(dir, `${dirName}.${nowMs}.log`);
}

/** Deletes kept consoles whose name says they are older than `retentionMs` at `nowMs`; returns how many went. Never throws. */
export function pruneKeptConsoles(dir: string, retentionMs: number, nowMs: number): number {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return 0;
  }
  let removed = 0;
  for (const n of names) {
    const m = KEPT_NAME.exec(n);
    if (!m || Number(m[2]) + retentionMs > nowMs) continue;
    try {
      rmSync(join(dir, n), { force: true });
      removed++;
    } catch {
      /* retried next pass */
    }
  }
  return removed;
}
