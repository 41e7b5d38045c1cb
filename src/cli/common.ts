/**
 * Shared client-command plumbing: the flags every client command accepts
 * and how a client is resolved from flags, environment and config file.
 * Exit codes and error printing live in src/command/run.ts.
 */
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
