/**
 * Storage faults as the object runtime classifies them (issue "Storage
 * faults look like a healthy server"): a damaged instance (its stored state
 * fails its checks) is quarantined by name; a failing file (read-only,
 * full, I/O error, corrupt) makes the store unhealthy and calls answer
 * STORAGE_UNAVAILABLE instead of INTERNAL.
 * Must never: treat missing or damaged state as a fresh instance.
 */

/**
 * Thrown by object code when its stored state fails a check: a row that
 * does not decode, or state that must exist but is missing. The runtime
 * quarantines the instance and answers OBJECT_DAMAGED naming it.
 */
export class DamagedStateError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DamagedStateError";
  }
}

/** SQLite result codes (by name) that mean the file, not the statement, is at fault. */
const FILE_FAULTS = /^SQLITE_(READONLY|FULL|IOERR|CANTOPEN|CORRUPT|NOTADB|PROTOCOL|NOLFS|PERM)/;

/** True if `e` is an SQLite error caused by the file or the disk (not by a statement or a bug). */
export function isStorageFault(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  return typeof code === "string" && FILE_FAULTS.test(code);
}
