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
const COMMA = 0x2c;

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
  if (!/^[0-9]+$/.test(t) || t.replace(/^0+(?=\d)/, "").length > MAX_LENGTH_DIGITS)
    throw new BeachballError("INVALID_CONTENT_LENGTH", "Content-Length must be one decimal byte count");
  return Number(t);
}

/**
 * Most bytes read and dropped after refusing a request whose client asked
 * to close the connection: the server closes right after its answer, and a
 * close with unread bytes makes the kernel reset the connection, which can
 * destroy the answer before the client reads it (measured with Bun 1.4.5).
 * Reading the rest first ("lingering close", as nginx does) lets the answer
 * through; past this many bytes or DRAIN_TIMEOUT_MS the client is cut off.
 */
export const MAX_DRAIN_BYTES = 16 * 1024 * 1024;
/** Longest time spent draining a refused request's body, ms (see MAX_DRAIN_BYTES). */
export const DRAIN_TIMEOUT_MS = 5_000;
/** Draining stops once the client sent nothing for this long, ms (it is not uploading, or waits for us). */
export const DRAIN_IDLE_MS = 200;

/**
 * The body of one request, read at most once, with its byte limit, plus
 * the means to drop what is left after a refusal. See readBoundedBody for
 * the common case.
 */
export class RequestBody {
  private reader: {
    read(): Promise<{ done: true; value?: undefined } | { done: false; value: Uint8Array }>;
    cancel(): Promise<void>;
  } | null = null;
  private finished: boolean;
  private readTotal = 0;

  constructor(private readonly req: Request) {
    this.finished = req.body === null;
  }

  /** Bytes of the body read so far, by read() and drain() together (what this process carried of it). */
  get bytesRead(): number {
    return this.readTotal;
  }

  /** True while the body may hold bytes nobody read. */
  get unread(): boolean {
    return !this.finished;
  }

  /**
   * Reads the whole body into memory, never holding more than `limitBytes`:
   * a declared length over the limit is refused before reading, and a body
   * of any framing is cut off as soon as it passes the limit (the rest stays
   * unread: call drain or release). Throws `tooLarge` (a 413 code) with
   * `limitBytes` in `extra`, INVALID_CONTENT_LENGTH for a malformed length
   * or a body cut short.
   */
  async read(limitBytes: number, tooLarge: ErrorCode): Promise<Uint8Array> {
    const over = () => new BeachballError(tooLarge, `request body is over ${limitBytes} bytes`, { limitBytes });
    const declared = declaredLength(this.req.headers);
    if (declared !== null && declared > limitBytes) throw over();
    const reader = this.open();
    if (!reader) return new Uint8Array(0);
    const chunks: Uint8Array[] = [];
    let total = 0;
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        total += value.byteLength;
        this.readTotal += value.byteLength;
        if (total > limitBytes) throw over();
        chunks.push(value);
      }
    } catch (e) {
      if (e instanceof BeachballError) throw e;
      this.finished = true;
      throw new BeachballError("INVALID_CONTENT_LENGTH", "the request body ended before its declared length");
    }
    this.finished = true;
    if (chunks.length === 1) return chunks[0]!;
    const out = new Uint8Array(total);
    let at = 0;
    for (const c of chunks) {
      out.set(c, at);
      at += c.byteLength;
    }
    return out;
  }

  /**
   * Reads and drops what is left of the body, at most `maxBytes` and
   * `timeoutMs`, stopping early when nothing arrives for `idleMs`, then
   * releases it.
   */
  async drain(maxBytes = MAX_DRAIN_BYTES, timeoutMs = DRAIN_TIMEOUT_MS, idleMs = DRAIN_IDLE_MS): Promise<void> {
    // Drained whatever length was declared: a client that declared more than it sends (or more than
    // maxBytes) stops sending, and the idle bound ends the drain before its last bytes could arrive
    // at a closed socket.
    const reader = this.open();
    if (!reader) return;
    const deadline = Date.now() + timeoutMs;
    let total = 0;
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      while (total <= maxBytes) {
        const left = Math.min(deadline - Date.now(), idleMs);
        if (left <= 0) break;
        const next = await Promise.race([
          reader.read(),
          new Promise<null>((r) => (timer = setTimeout(() => r(null), left))),
        ]);
        clearTimeout(timer);
        if (next === null) break;
        if (next.done) {
          this.finished = true;
          return;
        }
        total += next.value.byteLength;
        this.readTotal += next.value.byteLength;
      }
    } catch {
      this.finished = true;
      return;
    }
    this.release();
  }

  /** Stops reading: the rest of the body is left to the server to discard. */
  release(): void {
    if (this.finished) return;
    const reader = this.open();
    this.finished = true;
    void reader?.cancel().catch(() => undefined);
  }

  /** The body's reader (taken once), or null when there is nothing left to read. */
  private open() {
    if (this.finished || !this.req.body) return null;
    this.reader ??= this.req.body.getReader() as unknown as NonNullable<RequestBody["reader"]>;
    return this.reader;
  }
}

/**
 * Reads the whole body of `req` with the bound RequestBody.read describes,
 * releasing the rest when it is over the limit. Throws `tooLarge` or
 * INVALID_CONTENT_LENGTH.
 */
export async function readBoundedBody(req: Request, limitBytes: number, tooLarge: ErrorCode): Promise<Uint8Array> {
  const body = new RequestBody(req);
  try {
    return await body.read(limitBytes, tooLarge);
  } finally {
    body.release();
  }
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * Parses a JSON body after checking its depth. Throws JSON_TOO_DEEP (400)
 * past `maxDepth`, MALFORMED_JSON (400) for an empty body, invalid UTF-8,
 * invalid JSON, or an object that repeats a member name (repeatedKey).
 */
export function parseBoundedJson(bytes: Uint8Array, maxDepth = MAX_JSON_DEPTH): unknown {
  if (bytes.length === 0)
    throw new BeachballError("MALFORMED_JSON", "request body is empty; a JSON document is required");
  if (nestsDeeperThan(bytes, maxDepth))
    throw new BeachballError("JSON_TOO_DEEP", `request body nests deeper than ${maxDepth} levels`, { maxDepth });
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    throw new BeachballError("MALFORMED_JSON", "request body is not valid UTF-8");
  }
  let value: unknown;
  try {
    value = JSON.parse(text) as unknown;
  } catch {
    throw new BeachballError("MALFORMED_JSON", "request body is not valid JSON");
  }
  const repeated = repeatedKey(text);
  if (repeated !== null) {
    const named = /^[A-Za-z_][A-Za-z0-9_.-]{0,63}$/.test(repeated) ? ` "${repeated}"` : "";
    throw new BeachballError(
      "MALFORMED_JSON",
      `request body repeats the field${named} in one object; field names must be unique (RFC 7493 §2.3)`,
    );
  }
  return value;
}

/**
 * The first object member name that `text` repeats within one object, or
 * null. `text` must be valid JSON (call it after JSON.parse accepted it):
 * JSON.parse keeps the last of two equal names silently, so `{"a":1,"a":2}`
 * would mean one thing here and another to a proxy or validator that keeps
 * the first (RFC 7493 §2.3 forbids duplicates). Linear in the length.
 */
export function repeatedKey(text: string): string | null {
  /** One entry per open container: the names seen so far in an object, null for an array. */
  const open: (Set<string> | null)[] = [];
  let expectName = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      let j = i + 1;
      let escaped = false;
      while (text.charCodeAt(j) !== QUOTE) {
        if (text.charCodeAt(j) === BACKSLASH) (escaped = true), j++;
        j++;
      }
      if (expectName) {
        const names = open[open.length - 1]!;
        const name = escaped ? (JSON.parse(text.slice(i, j + 1)) as string) : text.slice(i + 1, j);
        if (names.has(name)) return name;
        names.add(name);
        expectName = false;
      }
      i = j;
    } else if (c === OPEN_BRACE) {
      open.push(new Set());
      expectName = true;
    } else if (c === OPEN_BRACKET) open.push(null);
    else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
      open.pop();
      expectName = false;
    } else if (c === COMMA) expectName = open[open.length - 1] !== null && open.length > 0;
  }
  return null;
}

/** The one media type a JSON route reads (RFC 8259 §11); a `charset` parameter, if any, must be utf-8. */
export const JSON_MEDIA_TYPE = "application/json";
/** A media type that may be repeated in an error: RFC 9110 §8.3.1 token characters, bounded. */
const SAFE_MEDIA_TYPE = /^[a-z0-9!#$&^_.+-]{1,64}\/[a-z0-9!#$&^_.+-]{1,64}$/;

/**
 * Checks, from the headers alone, that a request's body is plain JSON
 * before any of it is read: Content-Type `application/json` (parameters
 * allowed; a charset other than utf-8, a malformed or repeated one is
 * refused) and no Content-Encoding
 * but `identity`. Throws UNSUPPORTED_MEDIA_TYPE (415, RFC 9110 §15.5.16)
 * with `extra.acceptedMediaTypes`; a missing Content-Type is refused too
 * (the body is never sniffed).
 */
export function requireJsonMediaType(headers: Headers): void {
  const extra = { acceptedMediaTypes: [JSON_MEDIA_TYPE] };
  const encoding = headers.get("content-encoding")?.trim().toLowerCase();
  if (encoding && encoding !== "identity")
    throw new BeachballError(
      "UNSUPPORTED_MEDIA_TYPE",
      "request bodies may not be content-encoded; send plain application/json",
      extra,
    );
  const raw = headers.get("content-type");
  if (raw === null || raw.trim() === "")
    throw new BeachballError(
      "UNSUPPORTED_MEDIA_TYPE",
      `this route takes a JSON body: send Content-Type: ${JSON_MEDIA_TYPE}`,
      extra,
    );
  const [type = "", ...params] = raw.split(";").map((p) => p.trim().toLowerCase());
  if (type !== JSON_MEDIA_TYPE) {
    const named = SAFE_MEDIA_TYPE.test(type) ? ` (got ${type})` : "";
    throw new BeachballError(
      "UNSUPPORTED_MEDIA_TYPE",
      `this route takes Content-Type: ${JSON_MEDIA_TYPE}${named}`,
      extra,
    );
  }
  // A parameter named charset counts only as exactly one token or quoted string (RFC 9110 §5.6.6), given once.
  const charsets = params.filter((p) => /^charset\s*(=|$)/.test(p));
  const m = charsets.length === 1 ? /^charset\s*=\s*(?:"([^"\\]*)"|([^\s";\\]+))$/.exec(charsets[0]!) : null;
  const charset = m?.[1] ?? m?.[2];
  if (charsets.length > 0 && charset !== "utf-8" && charset !== "utf8")
    throw new BeachballError("UNSUPPORTED_MEDIA_TYPE", "a JSON body must be UTF-8 (charset=utf-8 or none)", extra);
}
