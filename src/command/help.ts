/**
 * `--help` text of every `bb` command, from the same definitions the parser
 * reads: the description, a usage line under the full path (`bb allocation
 * create`, never the bare leaf), the arguments, the options with their
 * value, default and whether they are required, the subcommands, and the
 * examples (issue "CLI conventions").
 *
 * Lower layer. Must never: print; it returns text.
 */
import type { ArgDef } from "citty";
import { aliasesOf, placeholder, type CommandNode } from "./define.ts";
import { styles } from "./terminal.ts";

/** A subcommand as help lists it. */
export interface SubcommandLine {
  name: string;
  description: string;
}

/** The placeholder shown for a flag's value: its valueHint, else its name in upper snake case. */
export function valueHint(name: string, def: ArgDef): string {
  return def.valueHint ?? placeholder(name);
}

/** `-x, --name VALUE` for a flag. */
export function flagLabel(name: string, def: ArgDef): string {
  const aliases = aliasesOf(def).map((a) => (a.length === 1 ? `-${a}` : `--${a}`));
  const value =
    def.type === "boolean"
      ? ""
      : ` ${def.type === "enum" && def.options ? def.options.join("|") : valueHint(name, def)}`;
  return [...aliases, `--${name}`].join(", ") + value;
}

/** A flag's description with "(required)" or "(default: …)" appended. */
export function flagDescription(def: ArgDef): string {
  const parts = [def.description ?? ""];
  if (def.required && def.default === undefined) parts.push("(required)");
  if (def.default !== undefined && def.default !== false && def.default !== "")
    parts.push(`(default: ${String(def.default)})`);
  return parts.filter(Boolean).join(" ");
}

/** The usage line: path, required flags, arguments, then `[options]` or `<command>`. */
export function usageLine(node: CommandNode): string {
  const parts = [...node.path];
  if (node.subCommandNames.length > 0) return `${parts.join(" ")} <command>`;
  for (const [name, def] of Object.entries(node.args)) {
    if (def.type === "positional")
      parts.push(
        def.required === false || def.default !== undefined ? `[${placeholder(name)}]` : `<${placeholder(name)}>`,
      );
    else if (def.required && def.default === undefined) parts.push(`--${name} ${valueHint(name, def)}`);
  }
  if (node.extras.variadic) parts.push(node.extras.variadic);
  if (Object.values(node.args).some((d) => d.type !== "positional" && !(d.required && d.default === undefined)))
    parts.push("[options]");
  return parts.join(" ");
}

/** Two aligned columns; `style` colours the first after padding (so escapes do not skew the widths). */
function columns(rows: [string, string][], style: (t: string) => string): string[] {
  const w = Math.max(...rows.map(([a]) => a.length));
  return rows.map(([a, b]) => `  ${style(a)}${" ".repeat(w - a.length)}  ${b}`.trimEnd());
}

/** The `--help` text of `node`; `subs` are its subcommands' names and descriptions (empty for a leaf). */
export function renderHelp(node: CommandNode, subs: readonly SubcommandLine[], colour = false): string {
  const s = styles(colour);
  const out: string[] = [];
  if (node.meta.description) out.push(node.meta.description, "");
  out.push(`${s.bold("Usage:")} ${usageLine(node)}`, "");
  const positionals = Object.entries(node.args).filter(([, d]) => d.type === "positional");
  if (positionals.length > 0) {
    out.push(
      s.bold("Arguments:"),
      ...columns(
        positionals.map(([n, d]) => [placeholder(n), d.description ?? ""]),
        s.cyan,
      ),
      "",
    );
  }
  const flags = Object.entries(node.args).filter(([, d]) => d.type !== "positional");
  const flagRows: [string, string][] = flags.map(([n, d]) => [flagLabel(n, d), flagDescription(d)]);
  flagRows.push(["-h, --help", "Show this help"]);
  if (node.path.length === 1 && node.meta.version) flagRows.push(["--version", "Print the version"]);
  out.push(s.bold("Options:"), ...columns(flagRows, s.cyan), "");
  if (subs.length > 0)
    out.push(
      s.bold("Commands:"),
      ...columns(
        subs.map((c) => [c.name, c.description]),
        s.cyan,
      ),
      "",
    );
  if (node.extras.examples?.length) out.push(s.bold("Examples:"), ...node.extras.examples.map((e) => `  ${e}`), "");
  if (subs.length > 0) out.push(`Run \`${node.path.join(" ")} <command> --help\` for a command's options.`, "");
  return out.join("\n").replace(/\n+$/, "\n");
}
