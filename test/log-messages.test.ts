/**
 * Constant log messages (spec "Observability and retention": structured
 * JSON logs; issue 18 item 13): a log line's message names the event and
 * never embeds a variable (`scheduler listening on http://…`); IDs, names,
 * codes, durations and error texts go in the line's fields
 * (src/command/log.ts), so a log shipper can group and search by them.
 * Checked statically over src/: every call on a logger (`log.`, `logger.`,
 * `this.env.log.`, `deps.log.`) and, in the long-running roles, every
 * consola call (routed to the role's logger) whose first argument is a
 * template with `${…}` or a concatenation. The CLI's terminal output
 * (src/cli, src/dev, the agent's join/setup prints) is not a log.
 */
import { expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join, relative, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "..");

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((d) =>
    d.isDirectory()
      ? files(join(dir, d.name))
      : d.name.endsWith(".ts") && !d.name.endsWith(".test.ts")
        ? [join(dir, d.name)]
        : [],
  );
}

/** Role modules whose consola output is their log (routeConsola); the agent's command.ts prints for join/setup at a terminal. */
const ROLE_DIRS = ["src/scheduler/", "src/relay/", "src/agent/"];
const TERMINAL_FILES = new Set(["src/agent/command.ts"]);
const LOGGER_CALL = /\b(?:log|logger)\.(?:info|warn|error|debug)\(\s*(`[^`]*\$\{|"[^"]*"\s*\+|'[^']*'\s*\+)/g;
const CONSOLA_CALL = /\bconsola\.(?:info|warn|error|debug|success)\(\s*(`[^`]*\$\{|"[^"]*"\s*\+)/g;

test("constant log messages: no log line in src/ embeds a variable in its message text", () => {
  const offenders: string[] = [];
  for (const abs of files(join(ROOT, "src"))) {
    const rel = relative(ROOT, abs);
    const text = readFileSync(abs, "utf8");
    const lineOf = (i: number) => text.slice(0, i).split("\n").length;
    for (const m of text.matchAll(LOGGER_CALL)) offenders.push(`${rel}:${lineOf(m.index!)}: ${m[0]}`);
    if (ROLE_DIRS.some((d) => rel.startsWith(d)) && !TERMINAL_FILES.has(rel))
      for (const m of text.matchAll(CONSOLA_CALL)) offenders.push(`${rel}:${lineOf(m.index!)}: ${m[0]}`);
  }
  expect(offenders).toEqual([]);
});
