/**
 * `bb agent setup` (spec "Enrollment", step 2: "bb agent join (or bb agent
 * setup)"): gathers what `bb agent join` needs (scheduler URL, one-use
 * token, image directories or source, trusted image keys, most VMs at
 * once), from flags, and, on a terminal, from prompts for whatever the
 * flags left out. It writes them to `<data-dir>/join.json` (mode 0600, the
 * directory 0700) so `bb agent join --data-dir DIR` can enroll later, and
 * can run the join at once (then the file, holding a spent token, is
 * removed).
 *
 * Prompts go through the Prompter port (the real one is @clack/prompts;
 * tests pass a scripted one). Without a terminal, or with `--no-input`,
 * nothing is asked: a missing required value is a usage error naming its
 * flag.
 *
 * Must never: print the token; write join.json with a wider mode; ask a
 * question when it cannot be answered.
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Type, type Static } from "@sinclair/typebox";
import { Value } from "@sinclair/typebox/value";
import { UsageError } from "../command/run.ts";
import { httpUrlValue, integerFlag } from "../command/values.ts";
import { DEFAULT_MAX_PLACEMENTS } from "./join.ts";

/** The file in the data directory that holds the join settings until the join succeeds. */
export const JOIN_FILE = "join.json";
/** Most VMs a host may be set up for. */
export const MAX_SETUP_PLACEMENTS = 1024;

/** What `bb agent join` needs, as join.json holds it. */
export const JoinSettings = Type.Object(
  {
    schedulerUrl: Type.String({ maxLength: 2048 }),
    token: Type.String({ minLength: 1, maxLength: 1024 }),
    imageDirs: Type.Array(Type.String({ maxLength: 4096 }), { maxItems: 64 }),
    imageSource: Type.Optional(Type.String({ maxLength: 4096 })),
    trustedImageKeys: Type.Optional(Type.Array(Type.String({ maxLength: 4096 }), { maxItems: 64 })),
    maxPlacements: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_SETUP_PLACEMENTS })),
  },
  { additionalProperties: false },
);
/** What `bb agent join` needs. */
export type JoinSettings = Static<typeof JoinSettings>;

/** The questions setup may ask (a port: @clack/prompts on a terminal, a script in tests). */
export interface Prompter {
  /** A line of text; `validate` returns an error message or undefined. Resolves to the answer (the default when left empty). */
  text(q: {
    message: string;
    placeholder?: string;
    defaultValue?: string;
    validate?: (v: string) => string | undefined;
  }): Promise<string>;
  /** A secret line (not echoed). */
  password(q: { message: string; validate?: (v: string) => string | undefined }): Promise<string>;
  /** Yes or no. */
  confirm(q: { message: string; initialValue: boolean }): Promise<boolean>;
}

/** Flags of `bb agent setup` as given (undefined: not given). */
export interface SetupFlags {
  scheduler?: string | undefined;
  token?: string | undefined;
  imageDirs?: string[] | undefined;
  imageSource?: string | undefined;
  trustedImageKeys?: string[] | undefined;
  maxPlacements?: string | undefined;
}

/** A prompt validator from a checking function: its error message, or undefined when it passes. */
const asMessage = (check: (v: string) => unknown) => (v: string) => {
  try {
    check(v);
    return undefined;
  } catch (e) {
    return (e as Error).message;
  }
};
const list = (v: string) =>
  v
    .split(",")
    .map((x) => x.trim())
    .filter(Boolean);

/**
 * The join settings from `flags`, asking `prompter` (when given) for each
 * value the flags left out. Throws UsageError naming the flag of a missing
 * or malformed value.
 */
export async function collectJoinSettings(flags: SetupFlags, prompter: Prompter | null): Promise<JoinSettings> {
  const checkUrl = (v: string) => httpUrlValue(v, `--scheduler ${JSON.stringify(v)}`);
  const checkPlacements = (v: string) => integerFlag("--max-placements", v, { min: 1, max: MAX_SETUP_PLACEMENTS });
  let url = flags.scheduler;
  if (url === undefined && prompter)
    url = await prompter.text({
      message: "Scheduler URL",
      placeholder: "http://scheduler.example:7380",
      validate: asMessage(checkUrl),
    });
  if (!url) throw new UsageError("missing --scheduler URL (the scheduler this host joins)");
  let token = flags.token;
  if (token === undefined && prompter)
    token = await prompter.password({
      message: "Enrollment token (from `bb host enrollment-token create HOST_ID`)",
      validate: (v) => (v.trim() ? undefined : "the token is required"),
    });
  if (!token?.trim()) throw new UsageError("missing --token TOKEN (from `bb host enrollment-token create HOST_ID`)");
  let imageSource = flags.imageSource;
  if (imageSource === undefined && prompter)
    imageSource = (
      await prompter.text({
        message:
          "Image source (a directory or http(s) base from `bb image publish`; empty: local image directories only)",
        defaultValue: "",
      })
    ).trim();
  let imageDirs = flags.imageDirs;
  if (imageDirs === undefined && prompter)
    imageDirs = list(
      await prompter.text({
        message: "Local image directories (comma-separated)",
        defaultValue: ".bb/images/dev",
        placeholder: ".bb/images/dev",
      }),
    );
  let keys = flags.trustedImageKeys;
  if (keys === undefined && prompter && imageSource)
    keys = list(
      await prompter.text({
        message: "Trusted image signing keys (base64 or .pub files, comma-separated)",
        defaultValue: "",
      }),
    );
  let placements = flags.maxPlacements;
  if (placements === undefined && prompter)
    placements = await prompter.text({
      message: "Most VMs at once",
      defaultValue: String(DEFAULT_MAX_PLACEMENTS),
      placeholder: String(DEFAULT_MAX_PLACEMENTS),
      validate: (v) => (v === "" ? undefined : asMessage(checkPlacements)(v)),
    });
  return {
    schedulerUrl: checkUrl(url),
    token: token.trim(),
    imageDirs: imageDirs ?? [".bb/images/dev"],
    ...(imageSource ? { imageSource } : {}),
    ...(keys?.length ? { trustedImageKeys: keys } : {}),
    ...(placements ? { maxPlacements: checkPlacements(placements) } : {}),
  };
}

/** Path of join.json in `dataDir`. */
export function joinFilePath(dataDir: string): string {
  return join(dataDir, JOIN_FILE);
}

/** Writes join.json atomically (directory 0700, file 0600). */
export function writeJoinSettings(dataDir: string, s: JoinSettings): string {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const path = joinFilePath(dataDir);
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, JSON.stringify(s, null, 2) + "\n", { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, path);
  return path;
}

/** join.json of `dataDir`, or null when there is none. Throws UsageError naming the file when it is malformed. */
export function readJoinSettings(dataDir: string): JoinSettings | null {
  const path = joinFilePath(dataDir);
  if (!existsSync(path)) return null;
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new UsageError(`${path} is not valid JSON: ${(e as Error).message}`);
  }
  if (!Value.Check(JoinSettings, raw)) {
    const first = Value.Errors(JoinSettings, raw).First();
    throw new UsageError(`${path}: ${first?.path || "/"} ${first?.message ?? "does not match the join settings"}`);
  }
  return raw;
}

/** Removes join.json (after a successful join its token is spent). */
export function removeJoinSettings(dataDir: string): void {
  rmSync(joinFilePath(dataDir), { force: true });
}

/** The Prompter over @clack/prompts, writing to stderr; Ctrl-C at a prompt exits 130. */
export async function clackPrompter(): Promise<Prompter> {
  const clack = await import("@clack/prompts");
  const output = process.stderr;
  function answer<T>(v: T | symbol): Exclude<T, symbol> {
    if (clack.isCancel(v) || typeof v === "symbol")
      throw Object.assign(new Error("setup cancelled"), { exitCode: 130 });
    return v as Exclude<T, symbol>;
  }
  return {
    text: async (q) =>
      answer<string | undefined>(
        await clack.text({
          output,
          message: q.message,
          ...(q.placeholder ? { placeholder: q.placeholder } : {}),
          ...(q.defaultValue !== undefined ? { defaultValue: q.defaultValue } : {}),
          ...(q.validate ? { validate: (v) => q.validate!(v ?? "") } : {}),
        }),
      ) ??
      q.defaultValue ??
      "",
    password: async (q) =>
      answer<string>(
        await clack.password({
          output,
          message: q.message,
          ...(q.validate ? { validate: (v) => q.validate!(v ?? "") } : {}),
        }),
      ),
    confirm: async (q) =>
      answer<boolean>(await clack.confirm({ output, message: q.message, initialValue: q.initialValue })),
  };
}
