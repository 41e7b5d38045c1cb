/**
 * The log of the long-running roles (scheduler, agent): one line per event,
 * either a JSON object (`--log-format json`: `time`, `level`, `msg` and the
 * event's fields) for journald and log shippers, or text for a person at a
 * terminal (the default when stderr is a TTY). `BB_LOG_LEVEL` picks how
 * much: 0 errors, 1 warnings, 2–3 info (default 3), 4 debug.
 *
 * Every line passes redaction first: fields named like a secret (token,
 * credential, authorization, payload, secret, private key, password) are
 * replaced, and secret-shaped text anywhere (bearer tokens, host credentials
 * `bbh_…`, enrollment tokens `bbe_…`, PEM private keys) is masked.
 * Spec: "Observability and retention", "Security" (no secret in logs).
 *
 * Lower layer: imports nothing, no logging library either, so every role
 * and the workerd host can use it (flag parsing: logOptions.ts). Must never: write a token, a
 * bootstrap payload or a private key, whatever a caller passes in.
 */
import { type Clock, systemClock } from "../protocol/clock.ts";

/** Output formats. */
export type LogFormat = "json" | "text";
/** Levels, as consola numbers them (BB_LOG_LEVEL). */
export const LOG_LEVELS = { error: 0, warn: 1, info: 3, debug: 4 } as const;
/** A level name. */
export type LogLevelName = keyof typeof LOG_LEVELS;
/** An event's fields: flat, JSON-able values. */
export type LogFields = Record<string, string | number | boolean | null | undefined>;
/** Longest message or field value written, in characters (a peer-influenced string cannot flood the log). */
export const MAX_LOG_VALUE_CHARS = 2_000;

/** The logger every role gets (a port: tests pass one with a capturing sink). */
export interface Logger {
  error(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  debug(msg: string, fields?: LogFields): void;
  /** A logger that adds `fields` to every line (e.g. `{ role: "scheduler" }`). */
  child(fields: LogFields): Logger;
}

/** Where lines go and how they look. */
export interface LogOptions {
  format: LogFormat;
  /** Highest level written (LOG_LEVELS numbers). */
  level: number;
  /** Receives each finished line without its newline (default: stderr). */
  sink: (line: string, level: LogLevelName) => void;
  /** Stamps each line with its wallMs (default systemClock). */
  clock: Clock;
}

const SECRET_FIELD = /token|credential|authori[sz]ation|payload|secret|private.?key|password|cookie/i;
const SECRET_TEXT: [RegExp, string][] = [
  [/-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)/g, "[redacted private key]"],
  [/\b(Bearer|Basic)\s+[\x21-\x7e]+/gi, "$1 [redacted]"],
  [/\b(bbh_[a-z0-9-]{1,63})\.[0-9a-f]{16,}/g, "$1.[redacted]"],
  [/\bbbe_[0-9a-f]{8,}/g, "bbe_[redacted]"],
];

/** `text` with every secret-shaped part masked, cut at MAX_LOG_VALUE_CHARS. */
export function redactText(text: string): string {
  let out = text.length > MAX_LOG_VALUE_CHARS ? `${text.slice(0, MAX_LOG_VALUE_CHARS)}…` : text;
  for (const [re, by] of SECRET_TEXT) out = out.replace(re, by);
  return out;
}

/** `fields` with secret-named fields replaced and every string value passed through redactText. */
export function redactFields(fields: LogFields): LogFields {
  const out: LogFields = {};
  for (const [k, v] of Object.entries(fields)) {
    if (v === undefined) continue;
    out[k] = SECRET_FIELD.test(k) ? "[redacted]" : typeof v === "string" ? redactText(v) : v;
  }
  return out;
}

/** Text lines start as the CLI's messages do (src/command/terminal.ts); the journal or the terminal adds the time. */
const TEXT_PREFIX: Record<LogLevelName, string> = { error: "error: ", warn: "warning: ", info: "", debug: "debug: " };

/** One finished line (no newline). */
export function formatLine(
  format: LogFormat,
  level: LogLevelName,
  msg: string,
  fields: LogFields,
  nowMs: number,
): string {
  const f = redactFields(fields);
  const m = redactText(msg);
  if (format === "json") return JSON.stringify({ time: new Date(nowMs).toISOString(), level, msg: m, ...f });
  const kv = Object.entries(f)
    .map(([k, v]) => `${k}=${typeof v === "string" && /[\s"=]/.test(v) ? JSON.stringify(v) : String(v)}`)
    .join(" ");
  return `${TEXT_PREFIX[level]}${m}${kv ? ` ${kv}` : ""}`;
}

/** A logger writing through `opts` (see the module header). */
export function createLogger(opts: Partial<LogOptions> = {}, base: LogFields = {}): Logger {
  const o: LogOptions = {
    format: opts.format ?? "text",
    level: opts.level ?? LOG_LEVELS.info,
    sink: opts.sink ?? ((line) => void process.stderr.write(`${line}\n`)),
    clock: opts.clock ?? systemClock,
  };
  const write =
    (level: LogLevelName) =>
    (msg: string, fields: LogFields = {}) => {
      if (LOG_LEVELS[level] > o.level) return;
      o.sink(formatLine(o.format, level, msg, { ...base, ...fields }, o.clock.wallMs()), level);
    };
  return {
    error: write("error"),
    warn: write("warn"),
    info: write("info"),
    debug: write("debug"),
    child: (f) => createLogger(o, { ...base, ...f }),
  };
}

/** A logger that writes nothing (tests and simulations that do not look at logs). */
export const silentLogger: Logger = {
  error: () => {},
  warn: () => {},
  info: () => {},
  debug: () => {},
  child: () => silentLogger,
};

function isPlainFields(v: unknown): v is LogFields {
  if (typeof v !== "object" || v === null || Array.isArray(v) || Object.getPrototypeOf(v) !== Object.prototype)
    return false;
  return Object.values(v).every(
    (x) => x === null || x === undefined || ["string", "number", "boolean"].includes(typeof x),
  );
}

/** The part of a consola instance routeConsola needs (so this module imports no logging library). */
export interface ConsolaLike {
  setReporters(reporters: { log: (obj: { type: string; level: number; args: unknown[] }) => void }[]): unknown;
  level: number;
}

/**
 * Sends every line the role's code writes through consola to `logger`
 * instead (same format, same redaction): after this, the process writes
 * one format only. A plain object as the last argument
 * (`consola.info("relay listening", { relayId })`) becomes the line's
 * fields, so a constant message keeps its variables out of its text.
 */
export function routeConsola(consola: ConsolaLike, logger: Logger, level: number): void {
  consola.level = level;
  consola.setReporters([
    {
      log: (obj) => {
        const last = obj.args[obj.args.length - 1];
        const fields = obj.args.length > 1 && isPlainFields(last) ? last : undefined;
        const args = fields ? obj.args.slice(0, -1) : obj.args;
        const msg = args
          .map((a) => (a instanceof Error ? a.message : typeof a === "string" ? a : JSON.stringify(a)))
          .join(" ");
        const name: LogLevelName =
          obj.level <= 0 ? "error" : obj.level === 1 ? "warn" : obj.level >= 4 ? "debug" : "info";
        logger[name](msg, fields);
      },
    },
  ]);
}
