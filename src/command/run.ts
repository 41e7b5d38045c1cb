/**
 * Process plumbing every role's command shares: the exit codes and how an
 * error is printed (0 ok, 1 error, 2 usage, 3 not placed in time, 4
 * authentication or permission refused; README.md, "Exit codes";
 * docs/cli.md).
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
  /** The command line (a flag, an argument, the client config) is wrong; nothing was sent. */
  usage: 2,
  /** `--wait` gave up: the allocation was still not placed on a host when `--timeout` ran out (the reason is printed). */
  notPlaced: 3,
  auth: 4,
} as const;

/** The stable code of a usage error, where a command answers in JSON (`bb image … --json`: `{"ok":false,"code":"USAGE",…}`). */
export const USAGE_CODE = "USAGE";

/**
 * A mistake in the command line or the client configuration: exit 2,
 * nothing was done. The one shape of usage error for every command: the
 * entry point prints it as `error: MESSAGE` and a pointer to `--help`
 * (src/command/usageText.ts); test/architecture.test.ts refuses any other
 * error built with exit code 2.
 */
export class UsageError extends Error {
  /** Always EXIT.usage. */
  readonly exitCode = EXIT.usage;
  /** Always USAGE_CODE. */
  readonly code = USAGE_CODE;
  /** Whether the message ends with a pointer to `--help` (not for a faulty config file or environment). */
  readonly helpHint: boolean;
  /** The command whose `--help` to point at, when not the one being run (an unknown subcommand's group). */
  readonly commandPath: string | undefined;
  constructor(message: string, opts: { helpHint?: boolean; commandPath?: string } = {}) {
    super(message);
    this.name = "UsageError";
    this.helpHint = opts.helpHint ?? true;
    this.commandPath = opts.commandPath;
  }
}

/** Error codes that mean "authentication or permission refused" (exit 4). */
const AUTH_CODES: ReadonlySet<ErrorCode> = new Set<ErrorCode>([
  "CONTROL_UNAUTHORIZED",
  "UNAUTHENTICATED",
  "FORBIDDEN",
  "ENROLLMENT_TOKEN_INVALID",
]);

/** The exit code for an error: 4 for refused credentials, its own `exitCode` if it carries one, else 1. */
export function exitCodeFor(e: unknown): number {
  if (e instanceof BeachballError) return AUTH_CODES.has(e.code) ? EXIT.auth : EXIT.error;
  const own = (e as { exitCode?: unknown } | null)?.exitCode;
  return typeof own === "number" ? own : EXIT.error;
}

/**
 * Runs a command body, printing errors with their stable code and setting
 * `process.exitCode`. A UsageError is rethrown so the entry point adds the
 * pointer to `--help` (src/command/main.ts).
 */
export async function runCli(fn: () => Promise<void>): Promise<void> {
  try {
    await fn();
  } catch (e) {
    if (e instanceof UsageError) throw e;
    if (e instanceof BeachballError) consola.error(`${e.code}: ${e.message}`);
    else consola.error((e as Error).message);
    process.exitCode = exitCodeFor(e);
  }
}
