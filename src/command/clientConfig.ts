/**
 * Client configuration: where the scheduler URL and the tokens come from,
 * in order: flags (`--scheduler`, `--token`), environment
 * (`BB_SCHEDULER_URL`, `BB_TOKEN`), then one config file: `BB_CONFIG` when
 * set (it must exist), else the first of `./.bb/client.json` and
 * `~/.config/beachball/client.json`. Every value keeps where it came from,
 * so an error about it says so (issue "CLI conventions": a missing
 * BB_CONFIG file, a malformed config file, a malformed or dead URL).
 *
 * Lower layer: shared by every command that calls the scheduler (`bb
 * allocation|host|image`, src/cli, and `bb proxy`, src/proxy), so neither
 * role imports the other. Must never: print a token; guess a URL; skip a
 * file it was told to read.
 */
import { existsSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { Type, type Static } from "@sinclair/typebox";
import { Value } from "@sinclair/typebox/value";
import { UsageError } from "./run.ts";
import { httpUrlValue } from "./values.ts";

/** The config file's shape (written by `bb scheduler serve --dev`); unknown fields are refused. */
export const ClientConfigFile = Type.Object(
  {
    schedulerUrl: Type.Optional(Type.String({ maxLength: 2048 })),
    token: Type.Optional(Type.String({ maxLength: 1024 })),
    operatorToken: Type.Optional(Type.String({ maxLength: 1024 })),
    /** `bb proxy`: connection verification keys, key ID → standard base64 Ed25519 public key. */
    connectionKeys: Type.Optional(
      Type.Record(Type.String({ maxLength: 64 }), Type.String({ maxLength: 64 }), { maxProperties: 16 }),
    ),
  },
  { additionalProperties: false },
);
/** The config file's shape. */
export type ClientConfigFile = Static<typeof ClientConfigFile>;

/** Config faults are not about the command line: no pointer to `--help`. */
const NO_HINT = { helpHint: false } as const;

/** Largest config file read, bytes. */
export const MAX_CLIENT_CONFIG_BYTES = 64 * 1024;

/** Resolved client settings, each with where it came from (`--scheduler`, `BB_SCHEDULER_URL`, `schedulerUrl in FILE`). */
export interface ClientConfig {
  schedulerUrl: string;
  token: string;
  operatorToken?: string;
  /** Connection verification keys (`bb proxy`), key ID → base64 Ed25519 public key; from the config file's `connectionKeys`. */
  connectionKeys?: Record<string, string>;
  /** Where schedulerUrl came from, for error messages. */
  urlOrigin: string;
  /** The config file read, if any. */
  file: string | null;
}

/** Config file candidates, in order: BB_CONFIG alone when set, else ./.bb/client.json and ~/.config/beachball/client.json. */
export function configFileCandidates(
  env: Record<string, string | undefined> = process.env,
  cwd = process.cwd(),
  home = homedir(),
): string[] {
  const explicit = env["BB_CONFIG"];
  if (explicit) return [explicit];
  return [join(cwd, ".bb", "client.json"), join(home, ".config", "beachball", "client.json")];
}

/** Reads and checks one config file. Throws UsageError naming the file for every fault. */
export function readConfigFile(path: string): ClientConfigFile {
  let text: string;
  try {
    const buf = readFileSync(path);
    if (buf.length > MAX_CLIENT_CONFIG_BYTES)
      throw new UsageError(
        `config file ${path} is ${buf.length} bytes; a client config is at most ${MAX_CLIENT_CONFIG_BYTES} bytes`,
        NO_HINT,
      );
    text = buf.toString("utf8");
  } catch (e) {
    if (e instanceof UsageError) throw e;
    throw new UsageError(
      `cannot read config file ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`,
      NO_HINT,
    );
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new UsageError(`config file ${path} is not valid JSON: ${(e as Error).message}`, NO_HINT);
  }
  if (!Value.Check(ClientConfigFile, raw)) {
    const first = Value.Errors(ClientConfigFile, raw).First();
    throw new UsageError(
      `config file ${path}: ${first?.path || "/"} ${first?.message ?? "does not match the client config shape"} (it may hold schedulerUrl, token, operatorToken and connectionKeys)`,
      NO_HINT,
    );
  }
  return raw;
}

/**
 * Resolves settings from flags, environment and the config file. Throws
 * UsageError when BB_CONFIG names a missing file, a file is malformed, the
 * URL is malformed, or the URL or token is missing.
 */
export function resolveClientConfig(
  flags: { scheduler?: string | undefined; token?: string | undefined },
  env: Record<string, string | undefined> = process.env,
  candidates: string[] = configFileCandidates(env),
): ClientConfig {
  let file: ClientConfigFile = {};
  let filePath: string | null = null;
  if (env["BB_CONFIG"] && !existsSync(env["BB_CONFIG"]))
    throw new UsageError(`BB_CONFIG names ${env["BB_CONFIG"]}, which does not exist`, NO_HINT);
  for (const c of candidates) {
    if (existsSync(c)) {
      file = readConfigFile(c);
      filePath = c;
      break;
    }
  }
  const url: [string | undefined, string][] = [
    [flags.scheduler, "--scheduler"],
    [env["BB_SCHEDULER_URL"], "BB_SCHEDULER_URL"],
    [file.schedulerUrl, `schedulerUrl in ${filePath}`],
  ];
  const [schedulerUrl, urlOrigin] = url.find(([v]) => v) ?? [undefined, ""];
  const token = flags.token || env["BB_TOKEN"] || file.token;
  if (!schedulerUrl || !token) {
    const missing = [!schedulerUrl && "scheduler URL", !token && "token"].filter(Boolean).join(" and ");
    const looked = filePath ? `config file ${filePath}` : `no config file (looked for ${candidates.join(", ")})`;
    throw new UsageError(
      `no ${missing}: pass --scheduler/--token, set BB_SCHEDULER_URL/BB_TOKEN, or run \`bb scheduler serve --dev\` (it writes .bb/client.json); read: ${looked}`,
      NO_HINT,
    );
  }
  return {
    schedulerUrl: httpUrlValue(
      schedulerUrl,
      `scheduler URL ${JSON.stringify(schedulerUrl)} (from ${urlOrigin})`,
      urlOrigin === "--scheduler",
    ),
    token,
    ...(file.operatorToken ? { operatorToken: file.operatorToken } : {}),
    ...(file.connectionKeys ? { connectionKeys: file.connectionKeys } : {}),
    urlOrigin,
    file: filePath,
  };
}
