/**
 * What both VMM drivers' snapshots share (issue 21): comparing compatibility
 * descriptors (VmSnapshot.compat), the refusal of a snapshot that does not
 * fit, and flushing a snapshot's files to stable storage. The descriptors
 * themselves are each driver's (firecracker/snapshot.ts snapshotCompat,
 * qemuSnapshot.ts qemuSnapshotCompat).
 */
import { closeSync, fsyncSync, openSync } from "node:fs";
import { AgentError } from "../errors.ts";

/**
 * The keys whose values differ between `want` and `got` (a key present in only one differs
 * too), sorted, skipping `ignore`. Empty when they match. Pure.
 */
export function compatDifferences(
  want: Record<string, string | number>,
  got: Record<string, string | number>,
  ignore: readonly string[] = [],
): string[] {
  const keys = new Set([...Object.keys(want), ...Object.keys(got)]);
  return [...keys].filter((k) => !ignore.includes(k) && want[k] !== got[k]).sort();
}

/** A snapshot a restore refuses: SNAPSHOT_INCOMPATIBLE, `facts.differs` = the differing compat keys, comma-separated. */
export function incompatible(msg: string, keys: string[]): AgentError {
  return new AgentError("SNAPSHOT_INCOMPATIBLE", `${msg} (differs: ${keys.join(", ")})`, {
    subsystem: "vmm",
    facts: { differs: keys.join(",") },
  });
}

/** Flushes `path` (a file or a directory) to stable storage. Throws the fs error. */
export function fsyncPath(path: string): void {
  const fd = openSync(path, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
