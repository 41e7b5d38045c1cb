/**
 * Byte names: how the image builder carries tar member names, link targets
 * and extended-attribute names without changing a single byte.
 *
 * A Linux file name is a byte string, not text: `caf\xe9` (Latin-1) and
 * `caf\xe8` are two different files, and decoding them as UTF-8 would turn
 * both into `caf\uFFFD`. A byte name is a JS string with one char per byte
 * (char codes 0–255, Node's "latin1" encoding), so `/`, `.`, `..` and the
 * `.wh.` prefixes compare as they do on bytes, string order is byte order,
 * and encoding back gives the exact bytes that were read.
 * Owns: the conversions between bytes, byte names and display text.
 * Must never: decode a name as UTF-8 anywhere but for display.
 */

/** The byte name of `b` (one char per byte). Throws nothing. */
export function byteName(b: Uint8Array): string {
  return Buffer.from(b.buffer, b.byteOffset, b.length).toString("latin1");
}

/** The bytes of byte name `s`. Throws a plain Error when `s` holds a char above 0xFF (not a byte name: a caller bug). */
export function nameBytes(s: string): Buffer {
  for (let i = 0; i < s.length; i++)
    if (s.charCodeAt(i) > 0xff) throw new Error(`not a byte name: ${JSON.stringify(s.slice(0, 80))}`);
  return Buffer.from(s, "latin1");
}

/** The byte name of text `s` (its UTF-8 bytes), for names the builder makes itself. Throws nothing. */
export function textName(s: string): string {
  return Buffer.from(s, "utf8").toString("latin1");
}

const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

/** The text of byte name `s` when its bytes are valid UTF-8, else null. Throws nothing. */
export function utf8Text(s: string): string | null {
  try {
    return strictUtf8.decode(Buffer.from(s, "latin1"));
  } catch {
    return null;
  }
}

/**
 * Byte name `s` quoted for an error message or a report: JSON-quoted text
 * when it is valid UTF-8, else with every byte above 0x7F written as `\xNN`
 * (so two names that differ only in such bytes read differently).
 * At most `max` chars of the name are shown. Throws nothing.
 */
export function showName(s: string, max = 200): string {
  const cut = s.length > max ? s.slice(0, max) : s;
  const more = s.length > max ? "…" : "";
  const text = utf8Text(cut);
  if (text !== null) return JSON.stringify(text + more);
  let out = "";
  for (let i = 0; i < cut.length; i++) {
    const c = cut.charCodeAt(i);
    out +=
      c > 0x7e || c < 0x20
        ? `\\x${c.toString(16).padStart(2, "0")}`
        : cut[i] === '"' || cut[i] === "\\"
          ? `\\${cut[i]}`
          : cut[i];
  }
  return `"${out}${more}"`;
}
