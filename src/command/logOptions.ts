/**
 * The log options of the long-running roles' commands: `--log-format`
 * (or BB_LOG_FORMAT) and BB_LOG_LEVEL, parsed with usage errors (exit 2)
 * for anything else. Kept apart from log.ts so the logger itself imports
 * nothing (the workerd host bundles it).
 */
import { UsageError } from "./run.ts";
import { LOG_LEVELS, type LogFormat } from "./log.ts";

/** The format a role uses when none is asked for: text on a TTY, JSON otherwise (journald, files, pipes). */
export function defaultLogFormat(stderrIsTty: boolean): LogFormat {
  return stderrIsTty ? "text" : "json";
}

/** Parses `--log-format`/`BB_LOG_FORMAT`. Throws UsageError (exit 2) for another value. */
export function parseLogFormat(v: string | undefined, stderrIsTty: boolean): LogFormat {
  if (v === undefined || v === "") return defaultLogFormat(stderrIsTty);
  if (v === "json" || v === "text") return v;
  throw new UsageError(`--log-format must be json or text, got ${JSON.stringify(v)}`);
}

/** Parses BB_LOG_LEVEL (0..5; default 3). Throws UsageError (exit 2) for another value. */
export function parseLogLevel(v: string | undefined): number {
  if (v === undefined || v === "") return LOG_LEVELS.info;
  if (!/^[0-5]$/.test(v))
    throw new UsageError(`BB_LOG_LEVEL must be a digit from 0 (errors) to 5, got ${JSON.stringify(v)}`, {
      helpHint: false,
    });
  return Number(v);
}
