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
 * (guest/internal/workload). Only the workload itself could print it (`set -x`,
 * `cat` of its own script, `echo $TOKEN`). So, as a second line of defence,
 * a console line that *is* a line of the payload (trimmed, or behind a
 * shell trace's `+ ` prefix) is replaced by `[redacted]`, and so is any word
 * of a line that is a secret-looking word of the payload (at least
 * MIN_SECRET_TOKEN_CHARS long with letters and digits, as tokens and keys
 * are; split at blanks, quotes and `=:;,.!?()<>|&{}[]`). Only SHA-256 digests
 * of the payload's lines and words are kept, never the bytes. Output the
 * workload derives from a secret (encoded, split, transformed) cannot be
 * recognised and is not redacted.
 * Pure. Must never: emit part of a line that may hold a secret split across
 * reads, or keep payload bytes.
 */
import { createHash } from "node:crypto";
import { GUEST_CMDLINE_KEYS } from "../../protocol/guest.ts";

/** A line longer than this (bytes) is cut and emitted in pieces of at most this size (cut between UTF-8 characters). */
export const MAX_LINE_BYTES = 4096;
/** Payload lines shorter than this (after trimming) are not digested: too common to be a secret, and redacting them would hide ordinary output. */
export const MIN_SECRET_LINE_CHARS = 8;
/** Most payload line digests kept per placement (and as many word digests). */
export const MAX_PAYLOAD_LINE_DIGESTS = 4096;
/** Payload words at least this long, with letters and digits, are treated as secrets wherever they appear. */
export const MIN_SECRET_TOKEN_CHARS = 16;
/** What a redacted line or value becomes. */
export const REDACTED = "[redacted]";

/** Where a line is split into words (kept as they are when the words are put back). */
const WORD_SPLIT = /([\s"'`=:;,.!?()<>|&{}[\]]+)/;
const NONCE_ARG = new RegExp(`${GUEST_CMDLINE_KEYS.nonce.replaceAll(".", "\\.")}=\\S+`, "g");
// C0 controls but tab, DEL and C1 controls (ESC included: no terminal escapes).
const CONTROL = /[\x00-\x08\x0a-\x1f\x7f-\x9f]/g;

function digest(s: string): string {
  return createHash("sha256").update(s).digest("hex");
}

/** What is kept of a payload to redact its echoes: digests of its lines and of its secret-looking words. */
export interface PayloadDigests {
  lines: ReadonlySet<string>;
  /** The lengths of those lines (a console line of another length is not hashed). */
  lineLengths: ReadonlySet<number>;
  words: ReadonlySet<string>;
}

/** No payload (yet). */
export const NO_PAYLOAD: PayloadDigests = { lines: new Set(), lineLengths: new Set(), words: new Set() };

/** A run of characters long enough to be a secret-looking word (lines without one are not split). */
const LONG_WORD = /[^\s"'`=:;,.!?()<>|&{}[\]]{16,}/;

function secretLooking(word: string): boolean {
  return word.length >= MIN_SECRET_TOKEN_CHARS && /[0-9]/.test(word) && /[A-Za-z]/.test(word);
}

/**
 * SHA-256 digests of the payload's lines (trimmed, at least
 * MIN_SECRET_LINE_CHARS long) and secret-looking words, at most
 * MAX_PAYLOAD_LINE_DIGESTS of each.
 */
export function payloadDigests(payload: Uint8Array): PayloadDigests {
  const lines = new Set<string>();
  const lineLengths = new Set<number>();
  const words = new Set<string>();
  for (const raw of Buffer.from(payload).toString("utf8").split("\n")) {
    const line = raw.replace(CONTROL, "").trim();
    if (line.length >= MIN_SECRET_LINE_CHARS && lines.size < MAX_PAYLOAD_LINE_DIGESTS) {
      lines.add(digest(line));
      lineLengths.add(line.length);
    }
    for (const w of line.split(WORD_SPLIT))
      if (secretLooking(w) && words.size < MAX_PAYLOAD_LINE_DIGESTS) words.add(digest(w));
  }
  return { lines, lineLengths, words };
}

/**
 * One console line (without its newline) made safe to push: control
 * characters removed, nonce arguments and `secrets` (each at least 8
 * characters) replaced, the whole line replaced when it is a line of the
 * payload, and each secret-looking word of the payload replaced.
 */
export function redactLine(line: string, secrets: readonly string[], payload: PayloadDigests): string {
  let clean = line.replace(CONTROL, "");
  if (payload.lines.size > 0) {
    const t = clean.trim();
    const untraced = t.replace(/^\++ /, "");
    const isLine = (x: string) =>
      x.length >= MIN_SECRET_LINE_CHARS && payload.lineLengths.has(x.length) && payload.lines.has(digest(x));
    if (isLine(t) || (untraced !== t && isLine(untraced))) return REDACTED;
  }
  clean = clean.replace(NONCE_ARG, `${GUEST_CMDLINE_KEYS.nonce}=${REDACTED}`);
  for (const s of secrets) if (s.length >= 8) clean = clean.replaceAll(s, REDACTED);
  if (payload.words.size > 0 && LONG_WORD.test(clean))
    clean = clean
      .split(WORD_SPLIT)
      .map((w) => (secretLooking(w) && payload.words.has(digest(w)) ? REDACTED : w))
      .join("");
  return clean;
}

/**
 * Turns raw console bytes into redacted whole lines, across reads: a
 * line's start is held until its newline arrives (or it reaches
 * MAX_LINE_BYTES), so a secret split between two reads is still seen whole.
 */
export class ConsoleRedactor {
  private partial: Buffer = Buffer.alloc(0);
  /** Digests of the delivered payload's lines and words (set when it is delivered). */
  payloadDigests: PayloadDigests = NO_PAYLOAD;

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
        // Cut before a UTF-8 continuation byte's sequence, so a character is never split in two U+FFFD.
        let cut = MAX_LINE_BYTES;
        while (cut > MAX_LINE_BYTES - 3 && (buf[cut]! & 0xc0) === 0x80) cut--;
        if ((buf[cut]! & 0xc0) === 0x80) cut = MAX_LINE_BYTES; // not UTF-8 there: cut anyway
        lines.push(buf.subarray(0, cut).toString("utf8"));
        buf = buf.subarray(cut);
      } else break;
    }
    this.partial = Buffer.from(buf);
    return lines.map((l) => `${redactLine(l.replace(/\r$/, ""), this.secrets, this.payloadDigests)}\n`).join("");
  }

  /** Bytes of a line start held until its newline (fed, not yet emitted). */
  get heldBytes(): number {
    return this.partial.length;
  }

  /** Forgets a held partial line (bytes were skipped after it). */
  reset(): void {
    this.partial = Buffer.alloc(0);
  }
}
