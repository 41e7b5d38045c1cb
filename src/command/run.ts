/**
 * Process plumbing every role's command shares: the exit codes and how an
 * error is printed (0 ok, 1 error, 2 usage, 4 authentication or
 * permission refused; README.md, "Exit codes").
 *
 * Lower layer: imports only src/protocol, so the scheduler, agent, relay,
 * proxy and client commands can all use it without importing each other.
 * Must never: print a secret (errors print their code and message only).
 */
import { consola } from "consola";
import { BeachballError, type ErrorCode } from "../protocol/errors.ts";

/** Exit codes of every `bb` command. */
export const EXIT = {
  ok: 0,
  error: 1,
  usage: 2,
  auth: 4,
} as const;

/** Error codes that mean "authentication or permission refused" (exit 4). */
const AUTH_CODES: ReadonlySet<ErrorCode> = new Set<ErrorCode>(["UNAUTHENTICATED", "FORBIDDEN", "ENROLLMENT_TOKEN_INVALID"]);

/** The exit code for an error: 4 for refused credentials, its own `exitCode` if it carries one, else 1. */
export function exitCodeFor(e: unknown): number {
  if (e instanceof BeachballError) return AUTH_CODES.has(e.code) ? EXIT.auth : EXIT.error;
  const own = (e as { exitCode?: unknown } | null)?.exitCode;
  return typeof own === "number" ? own : EXIT.error;
}

/** Runs a command body, printing errors with their stable code and setting `process.exitCode`. */
export async function runCli(fn: () => Promise<void>): Promise<void> {
  try {
    await fn();
  } catch (e) {
    if (e instanceof BeachballError) consola.error(`${e.code}: ${e.message}`);
    else consola.error((e as Error).message);
    process.exitCode = exitCodeFor(e);
  }
}
