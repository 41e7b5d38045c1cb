/**
 * How every `bb` command is declared: a citty command definition plus the
 * few facts citty has no field for, which help, the CLI reference
 * (docs/cli.md), shell completion and the strict parser read from the same
 * object: examples (every command shows at least one in `--help`) and
 * whether it takes any number of trailing arguments.
 *
 * A group can name a subcommand lazily with a static summary beside the
 * import (lazyCommand): the group's `--help` lists it from the summary, so
 * `bb --help` loads no role's module (issue 19, "Fast start");
 * test/cli-definitions.test.ts checks every summary against the loaded
 * definition so the two cannot drift.
 *
 * Lower layer: imports nothing of ours. Must never: run anything; it only
 * describes.
 */
import type { ArgDef, ArgsDef, CommandDef, CommandMeta } from "citty";

/** The extra facts of a command beside citty's definition. */
export interface CommandExtras {
  /** Command lines shown under "Examples" in `--help` and docs/cli.md; each starts with the command's full path (`bb allocation create …`). */
  examples?: readonly string[];
  /** Name shown for trailing arguments (e.g. "DIR…") when the command takes any number of them; without it, an extra argument is a usage error. */
  variadic?: string;
  /** For a group: the subcommand a first word that names none runs, with that word as its first argument (`bb run JOB.sh` is `bb run submit JOB.sh`). */
  defaultSubcommand?: string;
}

/** A citty command definition with its extras (`any` by default, as citty's own subcommand tables hold them). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type BbCommand<T extends ArgsDef = any> = CommandDef<T> & CommandExtras;

/** The aliases of a flag (`-q` is alias "q"); none for an argument. */
export function aliasesOf(def: ArgDef): string[] {
  const a = (def as { alias?: string | string[] }).alias;
  return typeof a === "string" ? [a] : (a ?? []);
}

/** How help and errors name an argument or a value: upper snake case (`hostId` and `host-id` are HOST_ID). */
export function placeholder(name: string): string {
  return name
    .replace(/([a-z0-9])([A-Z])/g, "$1_$2")
    .replace(/-/g, "_")
    .toUpperCase();
}

/** Declares a command (citty's defineCommand plus examples and variadic arguments). */
export function command<const T extends ArgsDef = ArgsDef>(def: BbCommand<T>): BbCommand<T> {
  return def;
}

/** What a group's `--help` shows of a subcommand: its one-line description, and whether it is hidden. */
export interface CommandSummary {
  description: string;
  hidden?: boolean;
}

/** A subcommand loader that carries its summary, so help can list it without loading it. */
export type LazyCommand = (() => Promise<BbCommand>) & { readonly summary: CommandSummary };

/**
 * A subcommand imported only when it is run or walked; `summary` must equal
 * the loaded command's `meta.description` and `meta.hidden`
 * (test/cli-definitions.test.ts, "every static summary matches").
 */
export function lazyCommand(summary: CommandSummary, load: () => Promise<BbCommand>): LazyCommand {
  return Object.assign(() => load(), { summary });
}

/** The static summary a subcommand entry carries, or null when it has none (it must be loaded to be described). */
export function staticSummary(entry: unknown): CommandSummary | null {
  return typeof entry === "function" && "summary" in entry ? (entry as LazyCommand).summary : null;
}

/** A resolved command: its definition, metadata, arguments and extras, with lazy parts loaded. */
export interface ResolvedCommand {
  def: BbCommand;
  meta: CommandMeta;
  args: Record<string, ArgDef>;
  extras: CommandExtras;
  /** Subcommand names in declaration order (empty for a leaf). */
  subCommandNames: string[];
}

async function value<T>(v: T | Promise<T> | (() => T) | (() => Promise<T>) | undefined): Promise<T | undefined> {
  return typeof v === "function" ? await (v as () => T | Promise<T>)() : await v;
}

/** Loads a command's lazy parts (meta, args, subcommand names). */
export async function resolveCommand(def: BbCommand): Promise<ResolvedCommand> {
  const meta = (await value(def.meta)) ?? {};
  const args = ((await value(def.args)) ?? {}) as Record<string, ArgDef>;
  const subs = (await value(def.subCommands)) ?? {};
  return {
    def,
    meta,
    args,
    extras: {
      ...(def.examples ? { examples: def.examples } : {}),
      ...(def.variadic ? { variadic: def.variadic } : {}),
    },
    subCommandNames: Object.keys(subs),
  };
}

/** The subcommand `name` of `def`, or null when it has none by that name. */
export async function subCommand(def: BbCommand, name: string): Promise<BbCommand | null> {
  const subs = (await value(def.subCommands)) ?? {};
  if (!Object.hasOwn(subs, name)) return null;
  return ((await value(subs[name])) as BbCommand | undefined) ?? null;
}

/** The summary of subcommand `name` of `def`: its static summary when it has one, else from its loaded meta; null when `def` has no such subcommand. */
export async function subCommandSummary(def: BbCommand, name: string): Promise<CommandSummary | null> {
  const subs = (await value(def.subCommands)) ?? {};
  if (!Object.hasOwn(subs, name)) return null;
  const known = staticSummary(subs[name]);
  if (known) return known;
  const sub = (await value(subs[name])) as BbCommand | undefined;
  if (!sub) return null;
  const meta = (await value(sub.meta)) ?? {};
  return { description: meta.description ?? "", ...(meta.hidden ? { hidden: true } : {}) };
}

/** The raw subcommand entries of `def` (loaders not called), by name in declaration order. */
export async function subCommandEntries(def: BbCommand): Promise<[string, unknown][]> {
  return Object.entries((await value(def.subCommands)) ?? {});
}

/** One command of the tree with its full path (`["bb", "allocation", "create"]`). */
export interface CommandNode extends ResolvedCommand {
  path: string[];
}

/** Every command under `root` (root first, then depth-first in declaration order), lazy parts loaded. */
export async function walkCommands(root: BbCommand, rootName = "bb"): Promise<CommandNode[]> {
  const out: CommandNode[] = [];
  const visit = async (def: BbCommand, path: string[]) => {
    const r = await resolveCommand(def);
    out.push({ ...r, path });
    for (const name of r.subCommandNames) {
      const sub = await subCommand(def, name);
      if (sub) await visit(sub, [...path, name]);
    }
  };
  await visit(root, [rootName]);
  return out;
}
