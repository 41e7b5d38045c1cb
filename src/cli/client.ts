/**
 * The CLI's client configuration resolution: flags, then environment
 * (`BB_SCHEDULER_URL`, `BB_TOKEN`), then the config file (`BB_CONFIG`,
 * `./.bb/client.json`, `~/.config/beachball/client.json`); the client class
 * is the public one (src/client), re-exported here.
 * Must never: print the token.
 */
import { existsSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

/** Resolved client settings. */
export interface ClientConfig {
  schedulerUrl: string;
  token: string;
  operatorToken?: string;
}

/** Config file candidates, in order. */
export function configFileCandidates(): string[] {
  return [process.env["BB_CONFIG"], join(process.cwd(), ".bb", "client.json"), join(homedir(), ".config", "beachball", "client.json")].filter((x): x is string => !!x);
}

/** Resolves settings from flags, environment and the first config file found. Throws with exit-code hint 2 when incomplete. */
export function resolveClientConfig(flags: { scheduler?: string | undefined; token?: string | undefined }): ClientConfig {
  let file: Partial<ClientConfig> = {};
  for (const c of configFileCandidates()) {
    if (existsSync(c)) {
      file = JSON.parse(readFileSync(c, "utf8")) as Partial<ClientConfig>;
      break;
    }
  }
  const schedulerUrl = flags.scheduler ?? process.env["BB_SCHEDULER_URL"] ?? file.schedulerUrl;
  const token = flags.token ?? process.env["BB_TOKEN"] ?? file.token;
  if (!schedulerUrl || !token) throw Object.assign(new Error("no scheduler URL or token: pass --scheduler/--token, set BB_SCHEDULER_URL/BB_TOKEN, or run `bb scheduler serve` (it writes .bb/client.json)"), { exitCode: 2 });
  return { schedulerUrl: schedulerUrl.replace(/\/+$/, ""), token, ...(file.operatorToken ? { operatorToken: file.operatorToken } : {}) };
}

// The client itself is public (`beachball/client`, src/client); the CLI uses it as every controller does.
export { retryTransport, SchedulerClient, TRANSPORT_RETRY_MS } from "../client/index.ts";
