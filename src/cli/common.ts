/**
 * Shared client-command plumbing of the CLI: how a client is made from the
 * client flags (src/command/clientArgs.ts), environment and config file
 * (src/command/clientConfig.ts), and how the scheduler's field errors
 * become flag errors. Exit codes and error printing live in
 * src/command/run.ts.
 */
import { BeachballError } from "../protocol/errors.ts";
import { UsageError } from "../command/run.ts";
import { resolveClientConfig } from "../command/clientConfig.ts";
import { SchedulerClient } from "./client.ts";

/** A client from flags, environment or config file; `operator` picks the operator token from the config file when no token flag/env is given. */
export function clientFrom(
  args: { scheduler?: string | undefined; token?: string | undefined },
  operator = false,
): SchedulerClient {
  const cfg = resolveClientConfig(args);
  const token =
    operator && !args.token && !process.env["BB_TOKEN"] && cfg.operatorToken ? cfg.operatorToken : cfg.token;
  return new SchedulerClient(cfg.schedulerUrl, token, { origin: cfg.urlOrigin });
}

/**
 * Turns the scheduler's VALIDATION_FAILED about a body field (`/ttlSeconds:
 * …`) into a usage error about the flag that set it (`--ttl: …`), and one
 * about a path parameter (`path parameter id (host ID) must match …`) into a
 * usage error about the positional argument named by `flagFor[":id"]`
 * (`HOST_ID must match …`); other errors pass through unchanged.
 */
export function flagError(e: unknown, flagFor: Record<string, string>): unknown {
  if (!(e instanceof BeachballError) || e.code !== "VALIDATION_FAILED") return e;
  const param = /^path parameter (\w+)(?: \([^)]*\))? (must match .*)$/s.exec(e.message);
  const arg = param ? flagFor[`:${param[1]}`] : undefined;
  if (arg) return new UsageError(`${arg} ${param![2]}`);
  const m = /^\/([A-Za-z]+)\b(.*)$/s.exec(e.message);
  const flag = m ? flagFor[m[1]!] : undefined;
  return flag ? new UsageError(`${flag}${m![2]}`) : e;
}
