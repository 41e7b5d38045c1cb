/**
 * Which console lines are the job's own output (issue 18 item 11, "logs
 * carry internals"): the serial console interleaves the kernel's lines, the
 * guest's own lines and the job markers with what the workload prints. A
 * reader of `bb allocation logs` gets only the workload's lines: those after
 * the guest's `BEACHBALL_JOB_START` line and before its `BEACHBALL_JOB_EXIT
 * <code>` (guest/internal/workload writes both), without
 * - kernel lines (`[ seconds.micros] …`, the printk time stamp every kernel
 *   line carries on the console; vmm/guestExit.ts reads the same lines), and
 * - the agent's own `[... N bytes trimmed ...]` lines (vmm/consoleLog.ts).
 * A workload line that itself starts like a kernel line is dropped too (the
 * console cannot tell them apart); the whole console stays on the host for
 * the operator. A workload can print the exit marker itself, so a marker
 * ends the job only once the guest has reported the exit over its control
 * channel (`exitReported`), and then only the last marker with the reported
 * code among the lines read, and, when more console remains to be read, only
 * one no job line follows (the guest's marker is the last the job wrote);
 * any other marker line is dropped and the lines after it are still the job's. Text before a marker on its line
 * is kept; its newline is put back once a later job line shows that marker
 * was the workload's (`owedNewline`). Pure. Must never: pass a marker or a
 * line from before the job's start, or join two of the workload's lines.
 */
import { JOB_EXIT_MARKER, JOB_START_MARKER } from "../../protocol/guest.ts";

/** Where a console stream is relative to the job: before its start marker, inside it, or past its exit marker. */
export type JobPhase = "boot" | "job" | "ended";

const KERNEL_LINE = /^\[\s*\d+\.\d+\]\s/;
const TRIM_LINE = /^\[\.\.\. \d+ bytes trimmed \.\.\.\]$/;
/** The exit marker at a line's end (a workload whose last output has no newline leaves its text before it). */
const EXIT_AT_END = new RegExp(`${JOB_EXIT_MARKER} -?\\d+$`);

/** True for a console line inside the job that is the workload's own (not a kernel or trim line). */
export function isWorkloadLine(line: string): boolean {
  return !KERNEL_LINE.test(line) && !TRIM_LINE.test(line);
}

/** What jobOutput knows besides the lines: the guest's report, and what the lines before them left. */
export interface JobOutputState {
  /** The guest reported the workload's exit (with `reportedCode`, when known). */
  exitReported?: boolean;
  reportedCode?: number | null;
  /** These lines reach the console's end read so far (nothing more to read now). */
  atEnd?: boolean;
  /** The last job line read before these is an exit marker. */
  exitLast?: boolean;
  /** That marker had workload text before it, whose newline is written if a job line follows. */
  owedNewline?: boolean;
}

/**
 * The job's output among `lines` (each ending in "\n", redacted), the phase
 * after them, `exitLast`: whether the last job line read so far is an
 * exit marker (kernel lines do not change it, a workload line clears it),
 * `lastCode`: the code of the last marker among these lines (null: none),
 * and `owedNewline` (JobOutputState).
 */
export function jobOutput(
  lines: string,
  phase: JobPhase,
  st: JobOutputState = { exitReported: true, atEnd: true },
): { text: string; phase: JobPhase; exitLast: boolean; lastCode: number | null; owedNewline: boolean } {
  let text = "";
  let exitLast = st.exitLast ?? false;
  let owedNewline = st.owedNewline ?? false;
  let lastCode: number | null = null;
  const code = (l: string): number | null => {
    const m = EXIT_AT_END.exec(l.replace(/\n$/, ""));
    return m ? Number(m[0].slice(JOB_EXIT_MARKER.length + 1)) : null;
  };
  const ends = (c: number) => st.reportedCode === undefined || st.reportedCode === null || c === st.reportedCode;
  const all = lines.split(/(?<=\n)/);
  for (let i = 0; i < all.length; i++) {
    const withNl = all[i]!;
    if (phase === "ended" || !withNl) break;
    const line = withNl.endsWith("\n") ? withNl.slice(0, -1) : withNl;
    if (phase === "boot") {
      if (line === JOB_START_MARKER) phase = "job";
      continue;
    }
    const exit = EXIT_AT_END.exec(line);
    if (exit) {
      if (owedNewline) text += "\n"; // the marker before this one was the workload's
      const before = line.slice(0, exit.index); // output the workload left without a newline
      text += before;
      owedNewline = before.length > 0;
      exitLast = true;
      const rest = all.slice(i + 1);
      const c = code(line)!;
      lastCode = c;
      if (
        st.exitReported &&
        ends(c) &&
        !rest.some((l) => {
          const k = code(l);
          return k !== null && ends(k);
        }) &&
        (st.atEnd || !rest.some((l) => isWorkloadLine(l.replace(/\n$/, ""))))
      )
        phase = "ended";
    } else if (isWorkloadLine(line)) {
      if (owedNewline) text += "\n";
      owedNewline = false;
      text += withNl;
      exitLast = false;
    }
  }
  return { text, phase, exitLast, lastCode, owedNewline: phase === "ended" ? false : owedNewline };
}
