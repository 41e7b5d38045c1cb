/**
 * Redaction of the console stream the agent pushes to the scheduler (issue
 * 13, "Workload output"; the crash tail's rules in vmm/guestExit.ts are the
 * model): whole lines only, control characters removed (a terminal escape
 * never reaches a reader), the placement's nonce and any
 * `beachball.bootstrap_nonce=` argument replaced by `[redacted]`.
 *
 * The payload reaches the guest over the control channel (virtio-serial
 * `ctl`), never the serial console, and the guest never echoes it: the
 * dev image's shell reads it on stdin, other images find it in a 0400 file
 * (src/guest/workload.ts). Only the workload itself could print it (`set -x`,
 * `cat` of its own script). So, as a second line of defence, a console line
 * that *is* a line of the payload (trimmed, or behind a shell trace's `+ `
 * prefix) is replaced by `[redacted]`. Only SHA-256 digests of the
 * payload's lines are kept, never the bytes.
 * Pure. Must never: emit part of a line that may hold a secret split across
 * reads, or keep payload bytes.
 */
import { createHash } from "node:crypto";
import { GUEST_CMDLINE_KEYS } from "../../protocol/guest.ts";

/** A line longer than this (bytes) is cut and emitted in pieces of this size. */
export const MAX_LINE_BYTES = 4096;
/** Payload lines shorter than this (after trimming) are not digested: too common to be a secret, and redacting them would hide ordinary output. */
export const MIN_SECRET_LINE_CHARS = 8;
/** Most payload line digests kept per placement. */
export const MAX_PAYLOAD_LINE_DIGESTS = 4096;
/** What a redacted line or value becomes. */
export const REDACTED = "[redacted]";

const NONCE_ARG = new RegExp(`${GUEST_CMDLINE_KEYS.nonce.replaceAll(".", "\\.")}=\\S+`, "g");
// C0 controls but tab, DEL and C1 controls (ESC included: no terminal escapes).
const CONTROL = /[\x00-\x08\x0a-\x1f\x7f-\x9f]/g;

function digest(s: string): string {
  return createHash("sha256").update(s).digest("hex");
}

/** SHA-256 digests of the payload's lines (trimmed, at least MIN_SECRET_LINE_CHARS long, at most MAX_PAYLOAD_LINE_DIGESTS). */
export function payloadLineDigests(payload: Uint8Array): Set<string> {
  const out = new Set<string>();
  for (const raw of Buffer.from(payload).toString("utf8").split("\n")) {
    const line = raw.replace(CONTROL, "").trim();
    if (line.length < MIN_SECRET_LINE_CHARS) continue;
    out.add(digest(line));
    if (out.size >= MAX_PAYLOAD_LINE_DIGESTS) break;
  }
  return out;
}

/**
 * One console line (without its newline) made safe to push: control
 * characters removed, nonce arguments and `secrets` (each at least 8
 * characters) replaced, and the whole line replaced when it is a line of
 * the payload (`payloadDigests`).
 */
export function redactLine(line: string, secrets: readonly string[], payloadDigests: ReadonlySet<string>): string {
  let clean = line.replace(CONTROL, "");
  if (payloadDigests.size > 0) {
    const t = clean.trim();
    const untraced = t.replace(/^\++ /, "");
    if ((t.length >= MIN_SECRET_LINE_CHARS && payloadDigests.has(digest(t))) || (untraced.length >= MIN_SECRET_LINE_CHARS && payloadDigests.has(digest(untraced)))) return REDACTED;
  }
  clean = clean.replace(NONCE_ARG, `${GUEST_CMDLINE_KEYS.nonce}=${REDACTED}`);
  for (const s of secrets) if (s.length >= 8) clean = clean.replaceAll(s, REDACTED);
  return clean;
}

/**
 * Turns raw console bytes into redacted whole lines, across reads: a
 * line's start is held until its newline arrives (or it reaches
 * MAX_LINE_BYTES), so a secret split between two reads is still seen whole.
 */
export class ConsoleRedactor {
  private partial: Buffer = Buffer.alloc(0);
  /** Digests of the delivered payload's lines (set when it is delivered). */
  payloadDigests: ReadonlySet<string> = new Set();

  constructor(private readonly secrets: readonly string[]) {}

  /** Feeds raw bytes; returns the redacted complete lines they finish, each ending in "\n" ("" when none). */
  feed(bytes: Uint8Array): string {
    let buf = this.partial.length ? Buffer.concat([this.partial, bytes]) : Buffer.from(bytes);
    const lines: string[] = [];
    for (;;) {
      const nl = buf.indexOf(0x0a);
      if (nl >= 0 && nl <= MAX_LINE_BYTES) {
        lines.push(buf.subarray(0, nl).toString("utf8"));
        buf = buf.subarray(nl + 1);
      } else if (buf.length > MAX_LINE_BYTES) {
        lines.push(buf.subarray(0, MAX_LINE_BYTES).toString("utf8"));
        buf = buf.subarray(MAX_LINE_BYTES);
      } else break;
    }
    this.partial = Buffer.from(buf);
    return lines.map((l) => `${redactLine(l.replace(/\r$/, ""), this.secrets, this.payloadDigests)}\n`).join("");
  }

  /** Forgets a held partial line (bytes were skipped after it). */
  reset(): void {
    this.partial = Buffer.alloc(0);
  }
}
