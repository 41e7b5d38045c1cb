/**
 * Reading a JSON request body with its bounds enforced before any parsing:
 * a byte limit that holds however the body is framed (Content-Length,
 * chunked, or neither), and a nesting-depth limit checked by a linear scan
 * of the bytes, so a hostile body costs at most one pass over a bounded
 * buffer and one `JSON.parse` of it.
 *
 * Lower layer: imports only src/protocol, so every server role (scheduler,
 * relay, proxy) reads bodies the same way. Must never: buffer more than the
 * limit, hand a body to `JSON.parse` before its depth was checked, or quote
 * the body in an error.
 */
import { BeachballError, type ErrorCode } from "./errors.ts";

/** Deepest JSON nesting (arrays plus objects) any route accepts; the agent envelope needs 5. */
export const MAX_JSON_DEPTH = 16;

/** Longest Content-Length value read as a number, in digits (above 2^53 is not a byte count we could hold). */
const MAX_LENGTH_DIGITS = 15;

const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/**
 * True when the JSON text in `bytes` nests arrays and objects deeper than
 * `maxDepth`. Brackets inside strings do not count. Linear in the length;
 * it checks depth only (JSON.parse checks the grammar afterwards).
 */
export function nestsDeeperThan(bytes: Uint8Array, maxDepth: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < bytes.length; i++) {
    const c = bytes[i]!;
    if (inString) {
      if (c === BACKSLASH) i++;
      else if (c === QUOTE) inString = false;
    } else if (c === QUOTE) inString = true;
    else if (c === OPEN_BRACKET || c === OPEN_BRACE) {
      if (++depth > maxDepth) return true;
    } else if (c === CLOSE_BRACKET || c === CLOSE_BRACE) depth--;
  }
  return false;
}

/**
 * The declared Content-Length of `headers` in bytes, or null when absent.
 * Throws INVALID_CONTENT_LENGTH (400) when it is not a plain decimal count
 * (RFC 9110 §8.6).
 */
export function declaredLength(headers: Headers): number | null {
  const v = headers.get("content-length");
  if (v === null) return null;
  const t = v.trim();
  if (!/^[0-9]+$/.test(t) || t.replace(/^0+(?=\d)/, "").length > MAX_LENGTH_DIGITS) throw new BeachballError("INVALID_CONTENT_LENGTH", "Content-Length must be one decimal byte count");
  return Number(t);
}

/**
 * Reads the whole body of `req` into memory, never holding more than
 * `limitBytes`: a declared length over the limit is refused before reading,
 * and a body of any framing is cut off (and its stream cancelled) as soon as
 * it passes the limit. Throws `tooLarge` (a 413 code) with `limitBytes` in
 * `extra`, INVALID_CONTENT_LENGTH for a malformed length or a body cut
 * short.
 */
export async function readBoundedBody(req: Request, limitBytes: number, tooLarge: ErrorCode): Promise<Uint8Array> {
  const over = () => new BeachballError(tooLarge, `request body is over ${limitBytes} bytes`, { limitBytes });
  const declared = declaredLength(req.headers);
  if (declared !== null && declared > limitBytes) throw over();
  if (!req.body) return new Uint8Array(0);
  const reader = req.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      total += value.byteLength;
      if (total > limitBytes) {
        void reader.cancel().catch(() => undefined);
        throw over();
      }
      chunks.push(value);
    }
  } catch (e) {
    if (e instanceof BeachballError) throw e;
    throw new BeachballError("INVALID_CONTENT_LENGTH", "the request body ended before its declared length");
  }
  if (chunks.length === 1) return chunks[0]!;
  const out = new Uint8Array(total);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.byteLength;
  }
  return out;
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * Parses a JSON body after checking its depth. Throws JSON_TOO_DEEP (400)
 * past `maxDepth`, MALFORMED_JSON (400) for an empty body, invalid UTF-8 or
 * invalid JSON.
 */
export function parseBoundedJson(bytes: Uint8Array, maxDepth = MAX_JSON_DEPTH): unknown {
  if (bytes.length === 0) throw new BeachballError("MALFORMED_JSON", "request body is empty; a JSON document is required");
  if (nestsDeeperThan(bytes, maxDepth)) throw new BeachballError("JSON_TOO_DEEP", `request body nests deeper than ${maxDepth} levels`, { maxDepth });
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    throw new BeachballError("MALFORMED_JSON", "request body is not valid UTF-8");
  }
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new BeachballError("MALFORMED_JSON", "request body is not valid JSON");
  }
}
