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
 * Pure apart from readConsoleTail.
 * Must never: put a workload's output, the payload or the nonce into a tail.
 */
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { GUEST_CMDLINE_KEYS, JOB_EXIT_MARKER, JOB_START_MARKER } from "../../protocol/guest.ts";
import { MAX_CONSOLE_TAIL_CHARS, type VmExit, type VmExitReason } from "../../protocol/agent.ts";

/** How much of the console's end is read to classify an exit, bytes. */
export const CONSOLE_SCAN_BYTES = 64 * 1024;
/** Most of the last kernel lines a tail keeps. */
export const MAX_TAIL_LINES = 40;
/** Most earlier lines saying why (panic, OOM, power-off) a tail keeps before the last lines. */
export const MAX_KEY_LINES = 4;
/** The line between the earlier key lines and the last lines. */
const ELIDED = "[...]";

const KERNEL_LINE = /^\[\s*\d+\.\d+\]\s/;
/** A kernel timestamp inside a line (after output that ended without a newline). */
const GLUED_KERNEL_LINE = /\[\s*\d+\.\d{6}\]\s/;
const OOM = /Out of memory|oom-kill|System is deadlocked on memory|out_of_memory/;
const PANIC = /Kernel panic - not syncing/;
const POWEROFF = /reboot: (Power down|System halted|Restarting system)/;

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
 * a dead one that the VMM itself died.
 */
export function classifyVmExit(consoleText: string, vmmAlive: boolean): VmExitReason {
  const kernel = consoleText
    .split("\n")
    .filter((l) => KERNEL_LINE.test(l.replace(/\r$/, "")))
    .join("\n");
  if (OOM.test(kernel)) return "GUEST_OOM";
  if (PANIC.test(kernel)) return "KERNEL_PANIC";
  if (POWEROFF.test(kernel)) return "GUEST_POWEROFF";
  return vmmAlive ? "GUEST_CHANNEL_LOST" : "VMM_CRASHED";
}

/**
 * The observation's tail: kernel lines and job markers only, every
 * occurrence of `secrets` and any bootstrap nonce argument replaced by
 * `[redacted]`. It holds the last MAX_TAIL_LINES lines and, before them,
 * up to MAX_KEY_LINES earlier lines that say why (the panic, OOM or
 * power-off line a long stack trace would push out), within
 * MAX_CONSOLE_TAIL_CHARS characters: the oldest of the last lines go first.
 */
export function redactedConsoleTail(consoleText: string, secrets: readonly string[]): string {
  const nonceArg = new RegExp(`${GUEST_CMDLINE_KEYS.nonce.replaceAll(".", "\\.")}=\\S+`, "g");
  const kept: string[] = [];
  for (const raw of consoleText.split("\n")) {
    let line = raw.replace(/\r$/, "").replace(/[\x00-\x08\x0b-\x1f\x7f]/g, "");
    // A kernel line printed after workload output that had no newline yet shares its line: keep the kernel part.
    const glued = KERNEL_LINE.test(line) ? -1 : line.search(GLUED_KERNEL_LINE);
    if (glued > 0) line = line.slice(glued);
    if (!KERNEL_LINE.test(line) && !line.startsWith(JOB_START_MARKER) && !line.startsWith(JOB_EXIT_MARKER)) continue;
    let clean = line.replace(nonceArg, `${GUEST_CMDLINE_KEYS.nonce}=[redacted]`);
    for (const s of secrets) if (s.length >= 8) clean = clean.replaceAll(s, "[redacted]");
    kept.push(clean);
  }
  const lastStart = Math.max(0, kept.length - MAX_TAIL_LINES);
  const key = kept
    .slice(0, lastStart)
    .filter((l) => OOM.test(l) || PANIC.test(l) || POWEROFF.test(l))
    .slice(0, MAX_KEY_LINES);
  const last = kept.slice(lastStart);
  const compose = () => [...key, ...(key.length ? [ELIDED] : []), ...last].join("\n");
  let tail = compose();
  while (tail.length > MAX_CONSOLE_TAIL_CHARS && last.length > 1) {
    last.shift();
    tail = compose();
  }
  return tail.length > MAX_CONSOLE_TAIL_CHARS ? tail.slice(tail.length - MAX_CONSOLE_TAIL_CHARS) : tail;
}

/** The diagnosis of an exit: reason and redacted tail (see above). */
export function describeVmExit(consoleText: string, vmmAlive: boolean, secrets: readonly string[]): VmExit {
  return { reason: classifyVmExit(consoleText, vmmAlive), consoleTail: redactedConsoleTail(consoleText, secrets) };
}
