/**
 * Which console lines are the job's own output (issue 18 item 11, "logs
 * carry internals"): the serial console interleaves the kernel's lines, the
 * guest's own lines and the job markers with what the workload prints. A
 * reader of `bb allocation logs` gets only the workload's lines: those after
 * the guest's `BEACHBALL_JOB_START` line and before its `BEACHBALL_JOB_EXIT
 * <code>` (src/guest/workload.ts writes both), without
 * - kernel lines (`[ seconds.micros] …`, the printk time stamp every kernel
 *   line carries on the console; vmm/guestExit.ts reads the same lines), and
 * - the agent's own `[... N bytes trimmed ...]` lines (vmm/consoleLog.ts).
 * A workload line that itself starts like a kernel line is dropped too (the
 * console cannot tell them apart); the whole console stays on the host for
 * the operator. A workload can print the exit marker itself, so a marker
 * ends the job only once the guest has reported the exit over its control
 * channel (`exitReported`); before that a marker line is dropped and the
 * lines after it are still the job's. Pure. Must never: pass a marker or a line from before the
 * job's start.
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

/**
 * The job's output among `lines` (each ending in "\n", redacted), the phase
 * after them, and `exitLast`: whether the last job line read so far is an
 * exit marker (`exitLast` before these lines comes in; kernel lines do not
 * change it, a workload line clears it).
 */
export function jobOutput(lines: string, phase: JobPhase, exitReported = true, exitLast = false): { text: string; phase: JobPhase; exitLast: boolean } {
  let text = "";
  for (const withNl of lines.split(/(?<=\n)/)) {
    if (phase === "ended" || !withNl) break;
    const line = withNl.endsWith("\n") ? withNl.slice(0, -1) : withNl;
    if (phase === "boot") {
      if (line === JOB_START_MARKER) phase = "job";
      continue;
    }
    const exit = EXIT_AT_END.exec(line);
    if (exit) {
      text += line.slice(0, exit.index); // output the workload left without a newline
      exitLast = true;
      if (exitReported) phase = "ended";
    } else if (isWorkloadLine(line)) {
      text += withNl;
      exitLast = false;
    }
  }
  return { text, phase, exitLast };
}
