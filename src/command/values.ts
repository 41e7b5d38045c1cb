/**
 * Checked flag values: a number on the command line is a plain decimal
 * integer inside the bounds the receiving side accepts, or a usage error
 * (exit 2) naming the flag and the bounds (issue "CLI conventions").
 *
 * Lower layer. Must never: round, clamp or default a malformed value.
 */
import { UsageError } from "./run.ts";

/** Bounds and the unit named in the error message. */
export interface IntegerBounds {
  min: number;
  max: number;
  /** Unit for the message ("seconds"); omitted: "a whole number". */
  unit?: string;
}

/**
 * Parses `raw` as the value of `--flag`: decimal digits only (no sign,
 * exponent, fraction or spaces), within `bounds`. Throws UsageError such as
 * `--ttl must be a whole number of seconds from 10 to 604800 (got "abc")`.
 */
export function integerFlag(flag: string, raw: string, bounds: IntegerBounds): number {
  const what = `${flag} must be a whole number${bounds.unit ? ` of ${bounds.unit}` : ""} from ${bounds.min} to ${bounds.max}`;
  if (!/^\d{1,16}$/.test(raw)) throw new UsageError(`${what} (got ${JSON.stringify(raw)})`);
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n < bounds.min || n > bounds.max) throw new UsageError(`${what} (got ${raw})`);
  return n;
}

/** integerFlag for an optional flag: undefined when the flag was not given. */
export function optionalIntegerFlag(flag: string, raw: string | undefined, bounds: IntegerBounds): number | undefined {
  return raw === undefined ? undefined : integerFlag(flag, raw, bounds);
}

/**
 * Checks that `url` is an absolute http(s) URL without query, fragment or
 * credentials and returns it without trailing slashes. `what` names the
 * value and where it came from (`scheduler URL "x" (from --scheduler)`).
 * Throws UsageError.
 */
export function httpUrlValue(url: string, what: string, helpHint = true): string {
  let u: URL | null = null;
  try {
    u = new URL(url);
  } catch {
    /* reported below */
  }
  if (!u || (u.protocol !== "http:" && u.protocol !== "https:") || u.search || u.hash || u.username || u.password)
    throw new UsageError(`${what} is not an http:// or https:// URL such as http://127.0.0.1:7380`, { helpHint });
  return url.replace(/\/+$/, "");
}
