/**
 * The kernel's own lines in a guest's serial console, and the ones among
 * them that say why a guest died (issue "a guest crash leaves something to
 * diagnose"; issue 18: the sysrq crash's panic line was lost from the tail).
 *
 * A kernel line starts with the printk time stamp (`[ seconds.micros] `)
 * every kernel line carries on the console. Output the workload left
 * without a newline shares its line with the next kernel line
 * (`job output[   49.350000] Kernel panic …`): the kernel part is split off
 * as a line of its own, so classification and the tail see it as the kernel
 * printed it. The "key" lines are those a diagnosis must never lose: the
 * panic, an Oops or BUG, the first line of a trace, an out-of-memory line,
 * a power-off.
 * Pure. Must never: take a workload's line for a kernel line because of
 * what follows the time stamp (only a line that starts with one counts).
 */

/** A line the kernel printed: it starts with the printk time stamp. */
export const KERNEL_LINE = /^\[\s*\d+\.\d+\]\s/;
/**
 * A stack frame the kernel's unwinder is not sure of: `? name+0xoff/0xlen` (the kernel prints `?` for an
 * address found on the stack that may not be a return address). Noise in a diagnosis: a tail leaves it out.
 */
export const UNRELIABLE_FRAME = /^\[\s*\d+\.\d+\]\s+\? \S+\+0x[0-9a-f]+\/0x[0-9a-f]+/;
/** A kernel time stamp inside a line (after output that ended without a newline). */
const GLUED_KERNEL_LINE = /\[\s*\d+\.\d{6}\]\s/;
/** Control characters but tab (no terminal escape reaches a reader). */
const CONTROL = /[\x00-\x08\x0a-\x1f\x7f]/g;

/** An out-of-memory death (the kernel's OOM killer, or nothing left to kill). */
export const OOM = /Out of memory|oom-kill|System is deadlocked on memory|out_of_memory/;
/** A kernel panic. */
export const PANIC = /Kernel panic - not syncing/;
/** A guest-side power-off, halt or reboot. */
export const POWEROFF = /reboot: (Power down|System halted|Restarting system)/;
/** An Oops, a BUG (`BUG: …`, `kernel BUG at …`, a soft lockup's `watchdog: BUG:`) or a fault the kernel could not handle. */
const OOPS = /\bOops\b|\bBUG[: ]|general protection fault|Unable to handle kernel|kernel stack overflow/;
/** The first line of a trace: dump_stack's `CPU: N PID: N Comm:`, a WARN's `[ cut here ]` or `WARNING: CPU: N PID: N`. */
const TRACE_START = /CPU: \d+ PID: \d+ Comm: |-\[ cut here \]-|WARNING: CPU: \d+ PID: \d+/;

/** The kinds of key line, most important first (the order a tail with too many keeps them in). */
export const KEY_LINE_KINDS = [PANIC, OOPS, OOM, POWEROFF, TRACE_START] as const;

/** The kind of key line `line` is (its index in KEY_LINE_KINDS), or -1 for an ordinary line. */
export function keyLineKind(line: string): number {
  return KEY_LINE_KINDS.findIndex((re) => re.test(line));
}

/**
 * The console's lines without carriage returns and control characters, a
 * kernel line glued behind unterminated output split off as its own line
 * (the output before it stays a line of its own, never a kernel line).
 */
export function consoleLines(consoleText: string): string[] {
  const out: string[] = [];
  for (const raw of consoleText.split("\n")) {
    const line = raw.replace(CONTROL, "");
    const glued = KERNEL_LINE.test(line) ? -1 : line.search(GLUED_KERNEL_LINE);
    if (glued > 0) out.push(line.slice(0, glued), line.slice(glued));
    else out.push(line);
  }
  return out;
}

/** The kernel's lines of a console (consoleLines that start with the time stamp). */
export function kernelLines(consoleText: string): string[] {
  return consoleLines(consoleText).filter((l) => KERNEL_LINE.test(l));
}
