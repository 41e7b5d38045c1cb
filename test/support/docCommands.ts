/**
 * The `bb …` command lines the documentation shows, and a check of each
 * against the command tree (issue 18 item 22: "a test that fails when a
 * README or docs command or flag no longer exists"). Used by
 * test/docs.test.ts.
 *
 * What counts as a command line:
 * - in a fenced code block, every shell command that starts with `bb`
 *   (or `bun bin/bb.ts`, `./bin/bb.ts`, or `npm run NAME --` whose package.json script runs
 *   `bin/bb.ts`): at the start of a line, after `$ `, `sudo`, `&&`, `||`,
 *   `;`, `|`, `$(`, `VAR=value`, `flock FILE`, `nsenter [options]` or `ip
 *   netns exec NAME`; a line ending in `\` goes on on the next. The flags named in its `#` comment belong to it too
 *   ("`--after N` resumes");
 * - an inline code span holding such a command (`bb agent join --scheduler
 *   URL --token TOKEN`, `nsenter --net=… bb agent run`).
 *
 * The check, per line: every word up to the first flag or placeholder
 * names a subcommand (`a|b|c` names each; a `…`, `<…>` or upper-case
 * placeholder stops the path), and every `--flag` or `-x` after it is one
 * the command reached declares (or `--no-` and a switch, `--help`).
 * Values and positionals are not checked: the docs write placeholders
 * there. Must never: run a command.
 */
import { aliasesOf, subCommand, resolveCommand, type BbCommand } from "../../src/command/define.ts";

/** One command line found in a document. */
export interface DocCommandLine {
  /** Repository-relative path and 1-based line, `README.md:82`. */
  where: string;
  /** The words after `bb` (shell quotes removed). */
  words: string[];
  /** Flags named in the line's `#` comment, checked against the same command. */
  commentFlags: string[];
}

/** Splits a shell command into words, honouring single and double quotes (no expansion). */
export function shellWords(s: string): string[] {
  const out: string[] = [];
  let cur = "";
  let inWord = false;
  let quote: string | null = null;
  for (const ch of s) {
    if (quote) {
      if (ch === quote) quote = null;
      else cur += ch;
    } else if (ch === "'" || ch === '"') {
      quote = ch;
      inWord = true;
    } else if (/\s/.test(ch)) {
      if (inWord) out.push(cur);
      cur = "";
      inWord = false;
    } else {
      cur += ch;
      inWord = true;
    }
  }
  if (inWord) out.push(cur);
  return out;
}

/** Where a shell command may start inside a line (so `echo bb` or `.bb/` never counts). */
const COMMAND_START =
  /(?:^\s*\$\s+|\bsudo\s+|\bip\s+netns\s+exec\s+\S+\s+|\bnsenter\s+(?:-\S+\s+)*|\bflock\s+\S+\s+|\b[A-Z_][A-Z0-9_]*=\S*\s+|^|&&|\|\||;|\s\|\s|\$\()\s*/g;

/** The bb words of each command starting in `code` (one shell line, comment removed), given how `npm run` scripts expand. */
function commandsIn(code: string, npmScripts: Record<string, string>): string[][] {
  const out: string[][] = [];
  const starts: number[] = [];
  // `<allocation-id>` is a placeholder, not a redirection.
  code = code.replace(/<[^<>\s]+>/g, (p) => `\u2039${p.slice(1, -1)}\u203a`);
  for (const m of code.matchAll(COMMAND_START)) starts.push(m.index! + m[0].length);
  for (const at of new Set(starts)) {
    const rest = code.slice(at);
    // The command ends at the next shell operator.
    // The command ends at the next shell operator (`a|b` without spaces is the docs' "a or b").
    const text = rest.split(/&&|\|\||;|\s\|\s|\)|>|</)[0]!;
    const words = shellWords(text);
    let bbWords: string[] | null = null;
    if (words[0] === "bb") bbWords = words.slice(1);
    else if (words[0] === "./bin/bb.ts") bbWords = words.slice(1);
    else if (
      (words[0] === "bun" || words[0] === "node_modules/.bin/bun") &&
      /(?:^|\/)bin\/bb\.ts$/.test(words[1] ?? "")
    )
      bbWords = words.slice(2);
    else if (words[0] === "npm" && words[1] === "run" && words[2]) {
      const script = npmScripts[words[2]] ?? "";
      const m = /(?:^|\s)bun bin\/bb\.ts((?:\s+\S+)*)$/.exec(script);
      if (m) {
        const dashes = words.indexOf("--");
        bbWords = [...shellWords(m[1] ?? ""), ...(dashes > 0 ? words.slice(dashes + 1) : [])];
      }
    }
    if (bbWords) out.push(bbWords.map((w) => w.replace(/\u2039/g, "<").replace(/\u203a/g, ">")));
  }
  return out;
}

/** The flags (`--name`, not `--`) a comment names. */
function flagsIn(comment: string): string[] {
  return [...comment.matchAll(/(?:^|[\s(`])(--[a-z][a-z0-9-]*)/g)].map((m) => m[1]!);
}

/** Splits one shell line into its code and its `#` comment (a `#` starting a word, outside quotes). */
function splitComment(line: string): [string, string] {
  let quote: string | null = null;
  for (let i = 0; i < line.length; i++) {
    const ch = line[i]!;
    if (quote) {
      if (ch === quote) quote = null;
    } else if (ch === "'" || ch === '"') quote = ch;
    else if (ch === "#" && (i === 0 || /\s/.test(line[i - 1]!))) return [line.slice(0, i), line.slice(i + 1)];
  }
  return [line, ""];
}

/**
 * Every bb command line of one Markdown document: fenced blocks (any info
 * string; YAML, JSON and the like simply hold no command start) and inline
 * code spans.
 */
export function docCommandLines(file: string, text: string, npmScripts: Record<string, string> = {}): DocCommandLine[] {
  const out: DocCommandLine[] = [];
  const lines = text.split("\n");
  let fence: string | null = null;
  for (let i = 0; i < lines.length; i++) {
    const raw = lines[i]!;
    const f = /^\s*(```+|~~~+)/.exec(raw);
    if (f) {
      if (fence === null) fence = f[1]!;
      else if (raw.trim().startsWith(fence)) fence = null;
      continue;
    }
    if (fence === null) {
      for (const m of raw.matchAll(/`([^`]+)`/g)) {
        for (const words of commandsIn(m[1]!, npmScripts))
          out.push({ where: `${file}:${i + 1}`, words, commentFlags: [] });
      }
      continue;
    }
    // Join continuation lines; comments of every joined line count.
    let code = "";
    let comments = "";
    const first = i;
    for (;;) {
      const [c, comment] = splitComment(lines[i]!);
      comments += ` ${comment}`;
      if (/\\\s*$/.test(c) && i + 1 < lines.length) {
        code += `${c.replace(/\\\s*$/, "")} `;
        i++;
        continue;
      }
      code += c;
      break;
    }
    const cmds = commandsIn(code, npmScripts);
    cmds.forEach((words, k) =>
      out.push({ where: `${file}:${first + 1}`, words, commentFlags: k === cmds.length - 1 ? flagsIn(comments) : [] }),
    );
  }
  return out;
}

/** A word the docs write in place of a real one: `…`, `...`, `<id>`, `HOST_ID`, `[options]`. */
function isPlaceholder(word: string): boolean {
  return /^(?:…|\.\.\.|<.*>|\[.*\]|[A-Z][A-Z0-9_]*…?)$/.test(word) || word.includes("…");
}

/**
 * What is wrong with one command line against the tree under `root`: an
 * unknown subcommand or an unknown flag, as messages; empty when it holds.
 * `a|b|c` as a subcommand word is checked as each of a, b and c.
 */
export async function checkCommandLine(
  root: BbCommand,
  words: readonly string[],
  commentFlags: readonly string[] = [],
): Promise<string[]> {
  const problems: string[] = [];
  const walk = async (def: BbCommand, path: string[], i: number): Promise<void> => {
    const r = await resolveCommand(def);
    const word = words[i];
    if (r.subCommandNames.length > 0 && word !== undefined && !word.startsWith("-") && !isPlaceholder(word)) {
      const fallback = def.defaultSubcommand;
      if (fallback && !(await subCommand(def, word.split("|")[0]!))) {
        // A group with a default subcommand (`bb run JOB.sh`): the word is that subcommand's first argument.
        const sub = await subCommand(def, fallback);
        if (sub) return walk(sub, [...path, fallback], i);
      }
      for (const name of word.split("|")) {
        const sub = await subCommand(def, name);
        if (!sub) problems.push(`\`${path.join(" ")}\` has no subcommand ${JSON.stringify(name)}`);
        else await walk(sub, [...path, name], i + 1);
      }
      return;
    }
    // `--help` everywhere and `bb --version` are answered by runBb itself (src/command/main.ts).
    const flags = new Map<string, boolean>([
      ["--help", true],
      ["-h", true],
      ...(path.length === 1 ? ([["--version", true]] as const) : []),
    ]);
    for (const [name, a] of Object.entries(r.args)) {
      if (a.type === "positional") continue;
      flags.set(`--${name}`, a.type === "boolean");
      for (const al of aliasesOf(a)) flags.set(al.length === 1 ? `-${al}` : `--${al}`, a.type === "boolean");
    }
    const known = (flag: string) =>
      flags.has(flag) || (flag.startsWith("--no-") && flags.get(`--${flag.slice(5)}`) === true);
    const rest = words.slice(i);
    const dashes = rest.indexOf("--");
    for (const w of dashes < 0 ? rest : rest.slice(0, dashes)) {
      if (!/^-[a-zA-Z]$|^--[a-z]/.test(w)) continue;
      const flag = w.split("=")[0]!;
      if (!known(flag)) problems.push(`\`${path.join(" ")}\` has no flag ${flag}`);
    }
    for (const flag of commentFlags)
      if (!known(flag)) problems.push(`\`${path.join(" ")}\` has no flag ${flag} (named in the comment)`);
  };
  await walk(root, ["bb"], 0);
  return problems;
}
