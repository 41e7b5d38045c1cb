/**
 * The agent's exclusive process lock (spec "Agent runtime and local state":
 * a starting agent takes the lock first). A PID file created with O_EXCL; a
 * lock whose PID is gone (or is not a `bb agent`) is stale and taken over.
 */
import { closeSync, openSync, readFileSync, rmSync, writeSync } from "node:fs";

/** Takes the lock at `path`. Throws if a live agent holds it. Returns a release function. */
export function takeAgentLock(path: string): () => void {
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(path, "wx", 0o600);
      writeSync(fd, `${process.pid}\n`);
      closeSync(fd);
      return () => {
        try {
          if (readFileSync(path, "utf8").trim() === String(process.pid)) rmSync(path);
        } catch {
          /* already gone */
        }
      };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
      const pid = Number(readFileSync(path, "utf8").trim());
      if (pid && pid !== process.pid && isLiveAgent(pid)) throw new Error(`another agent (PID ${pid}) holds ${path}`);
      rmSync(path, { force: true });
    }
  }
  throw new Error(`could not take ${path}`);
}

function isLiveAgent(pid: number): boolean {
  try {
    const cmd = readFileSync(`/proc/${pid}/cmdline`, "utf8");
    return cmd.includes("agent");
  } catch {
    return false;
  }
}
