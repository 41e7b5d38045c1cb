/**
 * The strict command-line parser every `bb` command goes through (issue
 * "CLI conventions"): an unknown flag, a flag without its value, a value
 * for a switch, a missing or an extra argument is a usage error (exit 2)
 * that names the flag, with the closest known flag as a suggestion. citty's
 * own parser accepts all of these silently, so it only supplies the
 * definitions.
 *
 * Accepted forms: `--name value`, `--name=value`, `--switch`,
 * `--switch=true|false`, `--no-switch`, a one-letter alias `-x`, `--`
 * (everything after it is an argument). A repeated flag keeps its last
 * value; a command that takes several reads them all with flagValues,
 * which parses the same words the same way.
 *
 * Lower layer. Must never: print; it returns the parsed arguments or
 * throws UsageError.
 */
import type { ArgDef } from "citty";
import { aliasesOf, placeholder } from "./define.ts";
import { UsageError } from "./run.ts";

/** Parsed arguments in citty's shape: each flag and argument by its declared name, `_` the trailing arguments. */
export type ParsedArgv = { _: string[] } & Record<string, string | boolean | string[] | undefined>;

/** Edit distance (insertions, deletions, substitutions, adjacent swaps) between two short strings. */
export function editDistance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) =>
    Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)),
  );
  for (let i = 1; i <= a.length; i++)
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, d[i - 2]![j - 2]! + 1);
      d[i]![j] = v;
    }
  return d[a.length]![b.length]!;
}

/** The known name closest to `name` (within 2 edits, or one it starts), or null. */
export function closest(name: string, known: readonly string[]): string | null {
  let best: string | null = null;
  let bestD = 3;
  for (const k of known) {
    const dist = editDistance(name, k);
    if (dist < bestD || (dist === bestD && best === null)) [best, bestD] = [k, dist];
  }
  if (best && bestD <= 2) return best;
  return known.find((k) => k.startsWith(name) && name.length >= 3) ?? null;
}

/** Whether `token` looks like a flag (`-x`, `--x`), not an argument (`-` alone is an argument). */
function isFlagToken(token: string): boolean {
  return token.length > 1 && token.startsWith("-");
}

/**
 * Parses `argv` (the words after the command path) against `args`.
 * `variadic`: trailing arguments beyond the declared positionals are kept
 * in `_` instead of being refused. Throws UsageError naming the flag or
 * argument at fault.
 */
export function parseArgv(argv: readonly string[], args: Record<string, ArgDef>, variadic = false): ParsedArgv {
  return scanArgv(argv, args, variadic).out;
}

/**
 * Every value of the string flag `name`, in the order given (`--name V`, `--name=V` or its alias): a
 * repeatable flag such as `bb exec --env`. Words after `--` and values of other flags never count. Parses
 * `argv` as parseArgv does, so it throws the same UsageError for the same bad words.
 */
export function flagValues(
  argv: readonly string[],
  args: Record<string, ArgDef>,
  name: string,
  variadic = false,
): string[] {
  return scanArgv(argv, args, variadic).all.get(name) ?? [];
}

/** parseArgv's work: the parsed arguments, and every value each string flag was given. */
function scanArgv(
  argv: readonly string[],
  args: Record<string, ArgDef>,
  variadic: boolean,
): { out: ParsedArgv; all: Map<string, string[]> } {
  const all = new Map<string, string[]>();
  const flags = new Map<string, { name: string; def: ArgDef }>();
  const positionals: { name: string; def: ArgDef }[] = [];
  for (const [name, def] of Object.entries(args)) {
    if (def.type === "positional") {
      positionals.push({ name, def });
      continue;
    }
    flags.set(`--${name}`, { name, def });
    for (const a of aliasesOf(def)) flags.set(a.length === 1 ? `-${a}` : `--${a}`, { name, def });
  }
  const knownFlags = [...flags.keys()].filter((f) => f.startsWith("--"));
  const unknown = (flag: string) => {
    const guess = closest(flag, knownFlags);
    return new UsageError(`unknown flag ${flag}${guess ? ` (did you mean ${guess}?)` : ""}`);
  };
  const out: ParsedArgv = { _: [] };
  const words: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const token = argv[i]!;
    if (token === "--") {
      words.push(...argv.slice(i + 1));
      break;
    }
    if (!isFlagToken(token)) {
      words.push(token);
      continue;
    }
    const eq = token.indexOf("=");
    const flag = eq > 0 && token.startsWith("--") ? token.slice(0, eq) : token;
    const inline = eq > 0 && token.startsWith("--") ? token.slice(eq + 1) : undefined;
    let found = flags.get(flag);
    if (!found && flag.startsWith("--no-")) {
      const positive = flags.get(`--${flag.slice(5)}`);
      if (positive && positive.def.type === "boolean") {
        if (inline !== undefined) throw new UsageError(`${flag} takes no value`);
        out[positive.name] = false;
        continue;
      }
    }
    if (!found) throw unknown(flag);
    const { name, def } = found;
    if (def.type === "boolean") {
      if (inline === undefined) out[name] = true;
      else if (inline === "true" || inline === "false") out[name] = inline === "true";
      else
        throw new UsageError(
          `${flag} is a switch: give it alone, or as ${flag}=true or ${flag}=false (got ${JSON.stringify(inline)})`,
        );
      continue;
    }
    let v = inline;
    if (v === undefined) {
      const next = argv[i + 1];
      if (next === undefined || (next.startsWith("--") && next.length > 2))
        throw new UsageError(`${flag} needs a value${def.valueHint ? ` (${def.valueHint})` : ""}`);
      v = next;
      i++;
    }
    if (def.type === "enum" && def.options && !def.options.includes(v))
      throw new UsageError(`${flag} must be one of ${def.options.join(", ")} (got ${JSON.stringify(v)})`);
    out[name] = v;
    all.set(name, [...(all.get(name) ?? []), v]);
  }
  for (const { name, def } of positionals) {
    const w = words.shift();
    if (w !== undefined) out[name] = w;
    else if (def.default !== undefined) out[name] = String(def.default);
    else if (def.required !== false) throw new UsageError(`missing argument ${placeholder(name)}`);
  }
  if (words.length > 0 && !variadic) throw new UsageError(`unexpected argument ${JSON.stringify(words[0])}`);
  out._ = words;
  for (const [flag, { name, def }] of flags) {
    if (!flag.startsWith("--") || flag !== `--${name}`) continue;
    if (out[name] === undefined && def.default !== undefined)
      out[name] = def.type === "boolean" ? Boolean(def.default) : String(def.default);
    if (out[name] === undefined && def.required) throw new UsageError(`missing required flag --${name}`);
  }
  return { out, all };
}
