/**
 * The CLI reference (docs/cli.md), generated from the command definitions
 * so it cannot drift from what the parser accepts: for every command its
 * description, usage line, arguments, options and examples, plus the exit
 * codes and the configuration lookup every client command shares.
 * `bun scripts/cli-reference.ts` writes it; test/cli-definitions.test.ts checks the
 * checked-in file matches.
 *
 * Lower layer. Must never: read the environment or the machine (the output
 * depends on the definitions only).
 */
import { placeholder, type CommandNode } from "./define.ts";
import { flagDescription, flagLabel, usageLine } from "./help.ts";

/** Escapes prose: `<` and `>` would read as HTML. */
function prose(s: string): string {
  return s.replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

/** Escapes a table cell. */
function cell(s: string): string {
  return prose(s).replace(/\|/g, "\\|").replace(/\n/g, " ");
}

/** The anchor GitHub gives a heading `bb allocation create` (`#bb-allocation-create`). */
export function anchorOf(path: readonly string[]): string {
  return path
    .join("-")
    .toLowerCase()
    .replace(/[^a-z0-9-]/g, "");
}

/** The Markdown reference for `nodes` (as walkCommands returns them, root first). */
export function renderReference(nodes: readonly CommandNode[]): string {
  const visible = nodes.filter((n) => !n.meta.hidden);
  const out: string[] = [
    "# CLI reference",
    "",
    "<!-- Generated from the command definitions by `bun scripts/cli-reference.ts`; test/cli-definitions.test.ts fails when this file is stale. Edit the definitions, not this file. -->",
    "",
    "Every command takes `-h`/`--help` (on stdout, exit 0). Flags are",
    "`--name value` or `--name=value`; a switch is `--name`, `--name=false` or",
    "`--no-name`. An unknown flag, a flag without its value, a malformed",
    "number or a missing argument is a usage error: `error: …` on stderr,",
    "then ``Run `bb … --help` for usage.`` when the command line (not a",
    "config file or the environment) is at fault; exit 2, nothing done. Every",
    "command's usage errors take this one form; where a command answers",
    "errors in JSON too (`bb image keygen --json`), that line carries the code",
    "`USAGE`. Results go to stdout; progress, messages and",
    "errors go to stderr. Colour is used only on a terminal and never when",
    "`NO_COLOR` is set; spinners only on a terminal.",
    "",
    "## Exit codes",
    "",
    "| code | meaning |",
    "|---|---|",
    "| 0 | done |",
    "| 1 | error: a stable code and message are printed (`NOT_FOUND: …`); with `--wait`, a failed allocation, or `--timeout` reached while a host holds the allocation (its state is printed) |",
    "| 2 | usage: a flag, an argument or the client configuration is wrong; nothing was sent |",
    "| 3 | `--wait` gave up: no host took the allocation within `--timeout`; why is printed from its latest placement attempt, and it stays pending |",
    "| 4 | authentication or permission refused |",
    "",
    "`bb allocation create --payload FILE --wait` exits with the payload's own",
    "exit code once it exited (0 to 255; a code outside that range exits 1), so",
    "a job's result is the command's, as with `docker run`; the codes above",
    "apply only when no exit code came (the allocation failed, or the wait",
    "ended first). `--no-workload-exit-code` exits 1 for any non-zero code.",
    "",
    "`--wait` and `--follow` on allocations do not poll: they follow the",
    "allocation's events (`GET …/events?follow=1`, held by the scheduler until",
    "the next event), so a wait returns when its event is written. A dropped",
    "connection is resumed after the last event seen; only while the stream",
    "is unavailable (a scheduler without `follow`, or the caller's 16 follows",
    "in use) is the allocation read once a second instead.",
    "",
    "## Client configuration",
    "",
    "`bb allocation …` and `bb host …` find the scheduler URL and token in",
    "this order: `--scheduler`/`--token`; `BB_SCHEDULER_URL`/`BB_TOKEN`; one",
    "config file: the file `BB_CONFIG` names (it must exist), else the first",
    "of `./.bb/client.json` and `~/.config/beachball/client.json`. The file",
    "holds `schedulerUrl`, `token` and, for `bb host …`, `operatorToken`",
    "(`bb scheduler serve --dev` writes it). A malformed file is an error",
    "naming it; a scheduler that cannot be reached is reported with its URL",
    "and where the URL came from. Allocation IDs may be given by a unique",
    "prefix (`3f2a` or `alloc_3f2a`).",
    "",
    "## Commands",
    "",
  ];
  for (const n of visible) {
    const depth = "  ".repeat(Math.max(0, n.path.length - 2));
    if (n.path.length > 1)
      out.push(`${depth}- [\`${n.path.join(" ")}\`](#${anchorOf(n.path)}): ${prose(n.meta.description ?? "")}`);
  }
  out.push("");
  for (const n of visible) {
    if (n.path.length === 1) continue;
    out.push(`### ${n.path.join(" ")}`, "");
    if (n.meta.description) out.push(prose(n.meta.description), "");
    out.push("```", usageLine(n), "```", "");
    const positionals = Object.entries(n.args).filter(([, d]) => d.type === "positional");
    if (positionals.length) {
      out.push("| argument | |", "|---|---|");
      for (const [name, d] of positionals) out.push(`| \`${placeholder(name)}\` | ${cell(d.description ?? "")} |`);
      if (n.extras.variadic) out.push(`| \`${n.extras.variadic}\` | any number more |`);
      out.push("");
    }
    const flags = Object.entries(n.args).filter(([, d]) => d.type !== "positional");
    if (flags.length) {
      out.push("| option | |", "|---|---|");
      for (const [name, d] of flags) out.push(`| \`${flagLabel(name, d)}\` | ${cell(flagDescription(d))} |`);
      out.push("");
    }
    if (n.subCommandNames.length) {
      out.push(`Commands: ${n.subCommandNames.map((c) => `[\`${c}\`](#${anchorOf([...n.path, c])})`).join(", ")}.`, "");
    }
    if (n.extras.examples?.length) out.push("```sh", ...n.extras.examples, "```", "");
  }
  return out.join("\n").replace(/\n+$/, "\n");
}
