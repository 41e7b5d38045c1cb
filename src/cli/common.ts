/**
 * Shared CLI plumbing: client flags, exit codes (0 ok, 1 error, 2 usage,
 * 4 auth; STYLE.md "The user-facing surface") and error printing.
 */
import { consola } from "consola";
import { BeachballError } from "../protocol/errors.ts";
import { resolveClientConfig, SchedulerClient } from "./client.ts";

/** citty args every client command accepts. */
export const clientArgs = {
  scheduler: { type: "string", description: "Scheduler URL (or BB_SCHEDULER_URL)" },
  token: { type: "string", description: "Bearer token (or BB_TOKEN)" },
  json: { type: "boolean", description: "Print JSON", default: false },
} as const;

/** A client from flags, environment or config file; `operator` picks the operator token from the config file when no token flag/env is given. */
export function clientFrom(args: { scheduler?: string | undefined; token?: string | undefined }, operator = false): SchedulerClient {
  const cfg = resolveClientConfig(args);
  const token = operator && !args.token && !process.env["BB_TOKEN"] && cfg.operatorToken ? cfg.operatorToken : cfg.token;
  return new SchedulerClient(cfg.schedulerUrl, token);
}

/** Runs a command body, printing errors with their stable code and setting the exit code. */
export async function runCli(fn: () => Promise<void>): Promise<void> {
  try {
    await fn();
  } catch (e) {
    if (e instanceof BeachballError) {
      consola.error(`${e.code}: ${e.message}`);
      process.exitCode = e.code === "UNAUTHENTICATED" || e.code === "FORBIDDEN" || e.code === "ENROLLMENT_TOKEN_INVALID" ? 4 : 1;
    } else {
      consola.error((e as Error).message);
      process.exitCode = (e as { exitCode?: number }).exitCode ?? 1;
    }
  }
}
