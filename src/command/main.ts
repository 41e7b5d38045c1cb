/**
 * Runs a `bb` command line: walks the command tree to the named command,
 * answers `--help` (stdout, exit 0) and `--version`, parses the rest
 * strictly (src/command/argv.ts), and calls the command. Replaces citty's
 * runMain, which ignores unknown flags, exits 1 on usage errors and prints
 * leaf help without the `bb` prefix.
 *
 * Exit codes (src/command/run.ts): a usage error prints `error: …` and a
 * pointer to `--help` on stderr and exits 2; a group named without a
 * subcommand prints its help on stderr and exits 2.
 *
 * Lower layer. Must never: import a role; the entry point hands it the tree.
 */
import { closest, parseArgv } from "./argv.ts";
import { resolveCommand, subCommand, subCommandSummary, type BbCommand, type CommandNode } from "./define.ts";
import { renderHelp, type SubcommandLine } from "./help.ts";
import { EXIT, exitCodeFor, UsageError } from "./run.ts";
import { styles, useColour, type Stream } from "./terminal.ts";
import { usageErrorText } from "./usageText.ts";

/** Where runBb writes (ports, so tests capture them). */
export interface MainIo {
  stdout: Stream;
  stderr: Stream;
}

/** The command a command line names, with the words left for its parser. */
export interface Located {
  node: CommandNode;
  rest: string[];
  /** Whether `--help`/`-h` appears before any `--`. */
  help: boolean;
}

/** Descriptions of a group's subcommands, in declaration order (hidden ones left out); a lazy subcommand with a static summary is not loaded. */
export async function subcommandLines(node: CommandNode): Promise<SubcommandLine[]> {
  const out: SubcommandLine[] = [];
  for (const name of node.subCommandNames) {
    const s = await subCommandSummary(node.def, name);
    if (s && !s.hidden) out.push({ name, description: s.description });
  }
  return out;
}

/**
 * Walks `argv` down from `root` while words name subcommands. Throws
 * UsageError for an unknown subcommand (with the closest name), or for a
 * flag before the subcommand of a group.
 */
export async function locate(root: BbCommand, argv: readonly string[], rootName = "bb"): Promise<Located> {
  const dashes = argv.indexOf("--");
  const help = (dashes < 0 ? argv : argv.slice(0, dashes)).some((a) => a === "--help" || a === "-h");
  let def = root;
  const path = [rootName];
  let i = 0;
  for (;;) {
    const r = await resolveCommand(def);
    const node: CommandNode = { ...r, path: [...path] };
    const word = argv[i];
    if (r.subCommandNames.length === 0 || word === undefined || word.startsWith("-"))
      return { node, rest: argv.slice(i), help };
    let sub = await subCommand(def, word);
    const fallback = (def as BbCommand).defaultSubcommand;
    if (!sub && fallback) {
      // A word that names no subcommand is the default subcommand's first argument (not consumed).
      sub = await subCommand(def, fallback);
      if (sub) {
        path.push(fallback);
        def = sub;
        continue;
      }
    }
    if (!sub) {
      const guess = closest(word, r.subCommandNames);
      throw new UsageError(
        `unknown command ${JSON.stringify(word)} for \`${path.join(" ")}\`${guess ? ` (did you mean \`${path.join(" ")} ${guess}\`?)` : ""}`,
        { commandPath: path.join(" ") },
      );
    }
    path.push(word);
    def = sub;
    i++;
  }
}

/** Runs one command line; sets `process.exitCode` (never calls process.exit). */
export async function runBb(
  root: BbCommand,
  argv: readonly string[] = process.argv.slice(2),
  io: MainIo = { stdout: process.stdout, stderr: process.stderr },
  rootName = "bb",
): Promise<void> {
  const err = styles(useColour(io.stderr));
  let path = rootName;
  try {
    if (argv.length === 1 && argv[0] === "--version") {
      const meta = (await resolveCommand(root)).meta;
      io.stdout.write(`${meta.version ?? "unknown"}\n`);
      return;
    }
    const { node, rest, help } = await locate(root, argv, rootName);
    path = node.path.join(" ");
    const isGroup = node.subCommandNames.length > 0;
    if (help || (isGroup && rest.length === 0)) {
      const out = help ? io.stdout : io.stderr;
      out.write(renderHelp(node, await subcommandLines(node), useColour(out)));
      if (!help) process.exitCode = EXIT.usage;
      return;
    }
    if (isGroup) throw new UsageError(`\`${path}\` needs a command before ${rest[0]}`);
    const args = parseArgv(rest, node.args, !!node.extras.variadic);
    if (!node.def.run) throw new UsageError(`\`${path}\` cannot be run`);
    await node.def.run({ rawArgs: rest, args: args as never, cmd: node.def });
  } catch (e) {
    if (e instanceof UsageError) {
      io.stderr.write(usageErrorText(e.message, e.helpHint ? (e.commandPath ?? path) : undefined, err.red));
      process.exitCode = EXIT.usage;
      return;
    }
    io.stderr.write(`${err.red("error:")} ${(e as Error)?.message ?? String(e)}\n`);
    process.exitCode = exitCodeFor(e);
  }
}
