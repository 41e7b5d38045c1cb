/**
 * The command definitions hold what users read: every command has
 * examples in its `--help`, every example is a command line the strict
 * parser accepts for that command, help shows the full path (`bb
 * allocation create`, not `allocation create`), and docs/cli.md is what
 * the generator makes of the definitions today. Every subcommand of `bb`
 * carries a static summary equal to its loaded definition, so `bb --help`
 * and `bb --version` import no role (issue 19, "Fast start").
 */
import { beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgv } from "../src/command/argv.ts";
import { staticSummary, subCommand, subCommandEntries, walkCommands, type CommandNode } from "../src/command/define.ts";
import { renderHelp } from "../src/command/help.ts";
import { locate, subcommandLines } from "../src/command/main.ts";
import { renderReference } from "../src/command/reference.ts";
import { bbCommand } from "../bin/root.ts";

const ROOT = resolve(import.meta.dir, "..");
let nodes: CommandNode[];
beforeAll(async () => {
  nodes = await walkCommands(bbCommand);
});

/** The `bb …` words of an example line, up to a shell operator (`|`, `>`, `)`, `;`). */
function bbWords(example: string): string[] {
  const start = example.indexOf("bb ");
  const line = example.slice(start).split(/\s[|>;)]|\)/)[0]!;
  return line
    .trim()
    .split(/\s+/)
    .map((w) => w.replace(/^['"]|['"]$/g, ""));
}

describe("command definitions", () => {
  test("the tree has every role and no command without examples", () => {
    expect(nodes.map((n) => n.path.join(" "))).toContain("bb allocation create");
    expect(nodes.length).toBeGreaterThan(30);
    const without = nodes.filter((n) => !n.extras.examples?.length).map((n) => n.path.join(" "));
    expect(without).toEqual([]);
  });

  test("every example is a command line the parser accepts for its command", async () => {
    const refused: string[] = [];
    for (const n of nodes) {
      for (const ex of n.extras.examples ?? []) {
        const words = bbWords(ex);
        try {
          const { node, rest } = await locate(bbCommand, words.slice(1));
          if (!node.path.join(" ").startsWith(n.path.join(" "))) throw new Error(`names ${node.path.join(" ")}`);
          if (node.subCommandNames.length > 0) throw new Error("names a group");
          parseArgv(rest, node.args, !!node.extras.variadic);
        } catch (e) {
          refused.push(`${n.path.join(" ")}: ${ex}: ${(e as Error).message}`);
        }
      }
    }
    expect(refused).toEqual([]);
  });

  test("help shows the full path, the options and the examples", async () => {
    const create = nodes.find((n) => n.path.join(" ") === "bb allocation create")!;
    const help = renderHelp(create, await subcommandLines(create));
    expect(help).toContain("Usage: bb allocation create --class CLASS [options]");
    expect(help).toContain("--ttl SECONDS");
    expect(help).toContain("Examples:\n  bb allocation create --class ci-small\n");
    expect(help).not.toContain("\x1b[");
    for (const n of nodes) expect(renderHelp(n, await subcommandLines(n))).toContain(`Usage: ${n.path.join(" ")}`);
    expect(renderHelp(nodes[0]!, await subcommandLines(nodes[0]!))).toContain("  --version   Print the version\n");
    expect(help).not.toContain("--version");
  });

  test("every client, operator and image command takes --json (metrics is Prometheus text already)", () => {
    const without = nodes
      .filter(
        (n) =>
          ["allocation", "host", "image"].includes(n.path[1] ?? "") &&
          n.subCommandNames.length === 0 &&
          !("json" in n.args),
      )
      .map((n) => n.path.join(" "));
    expect(without).toEqual(["bb host metrics"]);
  });

  test("docs/cli.md is generated from these definitions (run `bun scripts/cli-reference.ts` after changing a command)", () => {
    expect(readFileSync(join(ROOT, "docs/cli.md"), "utf8")).toBe(renderReference(nodes));
  });

  test("every static summary matches the command it loads (a summary cannot drift from the role's meta)", async () => {
    const drift: string[] = [];
    for (const n of nodes) {
      for (const [name, entry] of await subCommandEntries(n.def)) {
        const summary = staticSummary(entry);
        if (!summary) continue;
        const loaded = nodes.find((m) => m.path.join(" ") === [...n.path, name].join(" "))!.meta;
        const want = { description: loaded.description ?? "", ...(loaded.hidden ? { hidden: true } : {}) };
        if (
          JSON.stringify({ description: summary.description, ...(summary.hidden ? { hidden: true } : {}) }) !==
          JSON.stringify(want)
        )
          drift.push(
            `${n.path.join(" ")} ${name}: summary ${JSON.stringify(summary)}, command ${JSON.stringify(want)}`,
          );
      }
    }
    expect(drift).toEqual([]);
  });

  test("every subcommand of bb has a static summary (bin/root.ts: lazyCommand), so bb --help loads no role", async () => {
    const without = (await subCommandEntries(bbCommand)).filter(([, e]) => !staticSummary(e)).map(([name]) => name);
    expect(without).toEqual([]);
    expect(await subCommand(bbCommand, "allocation")).not.toBeNull();
  });
});

describe("start-up", () => {
  /** Modules of ours a fresh `bun` loads to answer `bb ARG` (runBb on the real tree, output discarded). */
  function modulesLoadedFor(arg: string): string[] {
    const script = `
      const { runBb } = await import(${JSON.stringify(join(ROOT, "src/command/main.ts"))});
      const { bbCommand } = await import(${JSON.stringify(join(ROOT, "bin/root.ts"))});
      const sink = { write: () => true };
      await runBb(bbCommand, [${JSON.stringify(arg)}], { stdout: sink, stderr: sink });
      console.log(JSON.stringify(Object.keys(require.cache)));`;
    const p = Bun.spawnSync([process.execPath, "-e", script], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
    if (p.exitCode !== 0) throw new Error(`bun -e failed: ${p.stderr.toString()}`);
    return (JSON.parse(p.stdout.toString()) as string[])
      .filter((k) => k.startsWith(join(ROOT, "src/")))
      .map((k) => k.slice(ROOT.length + 1));
  }

  test("bb --help and bb --version import no role's module (kind: help that imports every role)", () => {
    for (const arg of ["--help", "--version"]) {
      const outside = modulesLoadedFor(arg).filter(
        (m) => !m.startsWith("src/command/") && !m.startsWith("src/protocol/"),
      );
      expect({ arg, outside }).toEqual({ arg, outside: [] });
    }
  });
});
