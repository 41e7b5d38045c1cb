/**
 * The doctor's result type and its rendering (spec "Enrollment" step 5,
 * "Agent runtime and local state": one prerequisite registry for `bb agent
 * doctor` and daemon startup). Pure.
 * Must never: print a secret (results carry paths, versions and names only).
 */

/** Outcome of one prerequisite check. `warn` works but degraded; `skip` was not applicable. */
export type CheckStatus = "pass" | "warn" | "fail" | "skip";

/** One check's result. */
export interface CheckResult {
  /** Stable id, e.g. `kvm`, `cmd.nft`, `netns-probe`. */
  id: string;
  /** Short human title. */
  title: string;
  status: CheckStatus;
  /** What was found (one line). */
  detail: string;
  /** One-line fix, present when status is warn or fail. */
  fix?: string;
}

const MARK: Record<CheckStatus, string> = { pass: "ok  ", warn: "warn", fail: "FAIL", skip: "skip" };
const COLOR: Record<CheckStatus, string> = { pass: "\x1b[32m", warn: "\x1b[33m", fail: "\x1b[31m", skip: "\x1b[2m" };

/** Human text: one line per check, an indented `fix:` line under each warn/fail, then a summary line. */
export function formatResults(results: readonly CheckResult[], color = false): string {
  const lines: string[] = [];
  for (const r of results) {
    const mark = color ? `${COLOR[r.status]}${MARK[r.status]}\x1b[0m` : MARK[r.status];
    lines.push(`${mark} ${r.title}: ${r.detail}`);
    if (r.fix && (r.status === "fail" || r.status === "warn")) lines.push(`     fix: ${r.fix}`);
  }
  const n = (s: CheckStatus) => results.filter((r) => r.status === s).length;
  lines.push(`${n("pass")} passed, ${n("warn")} warnings, ${n("fail")} failed, ${n("skip")} skipped`);
  return lines.join("\n");
}

/** True when no check failed (warnings and skips allowed). */
export function allPassed(results: readonly CheckResult[]): boolean {
  return results.every((r) => r.status !== "fail");
}
