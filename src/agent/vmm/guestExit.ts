/**
 * What a VM left behind when it ended on its own (issue "a guest crash
 * leaves something to diagnose"): the reason, classified from the serial
 * console and whether the VMM process is still alive, and a bounded,
 * redacted console tail for the VM_EXITED observation.
 *
 * Redaction keeps only the kernel's own lines (`[ seconds.micros] …`, the
 * printk time stamp every kernel line carries on the console) and the
 * guest's job markers; everything the workload printed is dropped, since a
 * script may echo itself or its secrets. Known secrets (the bootstrap
 * nonce) are then scrubbed from what is left, as is any
 * `beachball.bootstrap_nonce=` value a kernel command line echo might show.
 * The tail is the console's last lines within a line and a character bound
 * and, before them, the key lines (panic, Oops, BUG, a trace's first line,
 * OOM, power-off: kernelLines.ts) those bounds left out.
 * Pure apart from readConsoleTail.
 * Must never: put a workload's output, the payload or the nonce into a tail,
 * or lose the line that says why the guest died to a size bound.
 */
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { GUEST_CMDLINE_KEYS, JOB_EXIT_MARKER, JOB_START_MARKER } from "../../protocol/guest.ts";
import { MAX_CONSOLE_TAIL_CHARS, type VmExit, type VmExitReason } from "../../protocol/agent.ts";
import {
  consoleLines,
  KERNEL_LINE,
  kernelLines,
  keyLineKind,
  OOM,
  PANIC,
  POWEROFF,
  UNRELIABLE_FRAME,
} from "./kernelLines.ts";

/** How much of the console's end is read to classify an exit, bytes. */
export const CONSOLE_SCAN_BYTES = 64 * 1024;
/** Most of the last kernel lines a tail keeps. */
export const MAX_TAIL_LINES = 40;
/** Most earlier key lines (panic, Oops, BUG, a trace's first line, OOM, power-off: kernelLines.ts) a tail keeps before the last lines. */
export const MAX_KEY_LINES = 6;
/** Longest line of a tail, characters: a longer one is cut at its end (a `Code:` line is about 220). */
export const MAX_TAIL_LINE_CHARS = 240;
/** Most characters the earlier key lines and their `[...]` lines take of a tail: the rest is the last lines'. */
export const MAX_KEY_CHARS = 1_024;
/** The line between lines of a tail that were not next to each other on the console. */
export const ELIDED = "[...]";

/** The last `maxBytes` of the file at `path` as text ("" when absent). Synchronous: at most CONSOLE_SCAN_BYTES. */
export function readConsoleTail(path: string, maxBytes = CONSOLE_SCAN_BYTES): string {
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch {
    return "";
  }
  try {
    const size = fstatSync(fd).size;
    const n = Math.min(size, maxBytes);
    const buf = Buffer.alloc(n);
    readSync(fd, buf, 0, n, size - n);
    return buf.toString("utf8");
  } finally {
    closeSync(fd);
  }
}

/**
 * Why the VM ended, from its console text and whether its VMM process is
 * still alive: an out-of-memory death before a panic (the OOM path ends in
 * one), then a panic, then a guest-side power-off or reboot; with none of
 * those, a live VMM means the guest's channel closed under a running VM,
 * a dead one that the VMM itself died. Only kernel lines count (a kernel
 * line glued behind unterminated workload output too: kernelLines.ts).
 */
export function classifyVmExit(consoleText: string, vmmAlive: boolean): VmExitReason {
  const kernel = kernelLines(consoleText).join("\n");
  if (OOM.test(kernel)) return "GUEST_OOM";
  if (PANIC.test(kernel)) return "KERNEL_PANIC";
  if (POWEROFF.test(kernel)) return "GUEST_POWEROFF";
  return vmmAlive ? "GUEST_CHANNEL_LOST" : "VMM_CRASHED";
}

/**
 * Which key lines of `lines` a tail keeps wherever the last lines begin:
 * the first line of each kind (KEY_LINE_KINDS, most important first), then
 * the latest of the others, at most MAX_KEY_LINES within MAX_KEY_CHARS
 * (each counted with a `[...]` line). Indexes, ascending.
 */
function keyLineIndexes(lines: readonly string[]): number[] {
  const keys = lines.map((l, i) => ({ i, kind: keyLineKind(l) })).filter((k) => k.kind >= 0);
  const firstOfKind = [...new Map([...keys].reverse().map((k) => [k.kind, k.i])).entries()]
    .sort(([a], [b]) => a - b)
    .map(([, i]) => i);
  const first = new Set(firstOfKind);
  const rest = keys
    .map((k) => k.i)
    .filter((i) => !first.has(i))
    .reverse();
  const chosen: number[] = [];
  let chars = 0;
  for (const i of [...firstOfKind, ...rest]) {
    if (chosen.length === MAX_KEY_LINES) break;
    const cost = lines[i]!.length + ELIDED.length + 2;
    if (chars + cost > MAX_KEY_CHARS) continue;
    chosen.push(i);
    chars += cost;
  }
  return chosen.sort((a, b) => a - b);
}

/**
 * The lines at `indexes` (ascending) of `lines`, one per line, `[...]` wherever lines between them were left
 * out; `positions[i]` is line i's place among the console's tail-worthy lines (a gap there was left out too).
 */
function compose(lines: readonly string[], positions: readonly number[], indexes: readonly number[]): string {
  const out: string[] = [];
  indexes.forEach((i, n) => {
    if (n > 0 && positions[i] !== positions[indexes[n - 1]!]! + 1) out.push(ELIDED);
    out.push(lines[i]!);
  });
  return out.join("\n");
}

/**
 * The observation's tail: kernel lines and job markers only, but no
 * unreliable stack frame (UNRELIABLE_FRAME: each run of them is one `[...]`,
 * so their room goes to the frames that say where the kernel died), every
 * occurrence of `secrets` and any bootstrap nonce argument replaced by
 * `[redacted]`, each line cut to MAX_TAIL_LINE_CHARS. It holds as many of
 * the last lines as fit in MAX_TAIL_LINES lines and MAX_CONSOLE_TAIL_CHARS
 * characters and, before them, the key lines (keyLineIndexes) that fell
 * outside those last lines, by either bound: the line that says why is
 * never pushed out by a long trace or long lines (issue 18). Always at
 * most MAX_CONSOLE_TAIL_CHARS characters, with the console's last line.
 */
export function redactedConsoleTail(consoleText: string, secrets: readonly string[]): string {
  const nonceArg = new RegExp(`${GUEST_CMDLINE_KEYS.nonce.replaceAll(".", "\\.")}=\\S+`, "g");
  const kept: string[] = [];
  const positions: number[] = [];
  let position = -1;
  for (const line of consoleLines(consoleText)) {
    if (!KERNEL_LINE.test(line) && !line.startsWith(JOB_START_MARKER) && !line.startsWith(JOB_EXIT_MARKER)) continue;
    position++;
    if (UNRELIABLE_FRAME.test(line)) continue;
    positions.push(position);
    let clean = line.replace(nonceArg, `${GUEST_CMDLINE_KEYS.nonce}=[redacted]`);
    for (const s of secrets) if (s.length >= 8) clean = clean.replaceAll(s, "[redacted]");
    kept.push(clean.slice(0, MAX_TAIL_LINE_CHARS));
  }
  const keys = keyLineIndexes(kept);
  const indexesFrom = (start: number) => [
    ...keys.filter((i) => i < start),
    ...Array.from({ length: kept.length - start }, (_, n) => start + n),
  ];
  // The last lines grow backwards while both bounds hold; the key lines before them always fit (MAX_KEY_CHARS).
  let start = kept.length;
  while (
    start > 0 &&
    kept.length - (start - 1) <= MAX_TAIL_LINES &&
    compose(kept, positions, indexesFrom(start - 1)).length <= MAX_CONSOLE_TAIL_CHARS
  )
    start--;
  return compose(kept, positions, indexesFrom(start));
}

/** The diagnosis of an exit: reason and redacted tail (see above). */
export function describeVmExit(consoleText: string, vmmAlive: boolean, secrets: readonly string[]): VmExit {
  return { reason: classifyVmExit(consoleText, vmmAlive), consoleTail: redactedConsoleTail(consoleText, secrets) };
}
