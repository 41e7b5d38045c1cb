/**
 * runBb over a small command tree with captured streams: help on stdout
 * (exit 0) or, for a bare group, on stderr (exit 2); usage errors as one
 * `error:` line with a pointer to the right `--help`, exit 2; a command's
 * own error with its exit code; nothing coloured off a terminal; a lazy
 * subcommand with a static summary is loaded only when it is entered.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { BeachballError } from "../protocol/errors.ts";
import { command, lazyCommand, type BbCommand } from "./define.ts";
import { runBb } from "./main.ts";
import { UsageError } from "./run.ts";

const ran: unknown[] = [];
const leaf = command({
  meta: { name: "make", description: "Make a thing" },
  args: {
    name: { type: "positional", required: true, description: "Its name" },
    size: { type: "string", valueHint: "N", default: "1", description: "How big" },
    force: { type: "boolean", default: false },
  },
  examples: ["demo thing make a --size 2"],
  run: async ({ args }) => void ran.push(args),
});
const failing = command({
  meta: { name: "fail", description: "Fails" },
  examples: ["demo thing fail"],
  run: async () => {
    throw new BeachballError("FORBIDDEN", "not yours");
  },
});
const badConfig = command({
  meta: { name: "config", description: "Bad config" },
  examples: ["demo thing config"],
  run: async () => {
    throw new UsageError("config file /x is not valid JSON", { helpHint: false });
  },
});
const root = command({
  meta: { name: "demo", version: "9.9.9", description: "Demo" },
  examples: ["demo thing make a"],
  subCommands: {
    thing: command({
      meta: { name: "thing", description: "Things" },
      examples: ["demo thing make a"],
      subCommands: { make: leaf, fail: failing, config: badConfig },
    }),
  },
});

function io() {
  const s = { out: "", err: "" };
  return {
    s,
    io: {
      stdout: { isTTY: false, write: (t: string) => void (s.out += t) },
      stderr: { isTTY: false, write: (t: string) => void (s.err += t) },
    },
  };
}

async function run(...argv: string[]) {
  const { s, io: streams } = io();
  process.exitCode = 0;
  await runBb(root, argv, streams, "demo");
  return { ...s, code: process.exitCode };
}

afterEach(() => {
  process.exitCode = 0;
  ran.length = 0;
});

describe("runBb", () => {
  test("runs a leaf with parsed arguments and defaults", async () => {
    expect(await run("thing", "make", "a", "--force")).toEqual({ out: "", err: "", code: 0 });
    expect(ran).toEqual([{ _: [], name: "a", force: true, size: "1" }]);
  });

  test("--help anywhere before -- prints help on stdout with the full path; a bare group prints its help on stderr, exit 2", async () => {
    const h = await run("thing", "make", "--help");
    expect(h.code).toBe(0);
    expect(h.out).toStartWith("Make a thing\n\nUsage: demo thing make <NAME> [options]\n");
    expect(h.out).not.toMatch(/\x1b\[/);
    const g = await run("thing");
    expect([g.code, g.out]).toEqual([2, ""]);
    expect(g.err).toContain("Usage: demo thing <command>");
    expect((await run("--version")).out).toBe("9.9.9\n");
    expect(ran).toEqual([]);
  });

  test("usage errors: one line, a pointer to the right --help, exit 2, nothing run", async () => {
    expect(await run("thing", "make", "a", "--sise", "3")).toEqual({
      out: "",
      err: "error: unknown flag --sise (did you mean --size?)\nRun `demo thing make --help` for usage.\n",
      code: 2,
    });
    expect(await run("thing", "mkae")).toEqual({
      out: "",
      err: 'error: unknown command "mkae" for `demo thing` (did you mean `demo thing make`?)\nRun `demo thing --help` for usage.\n',
      code: 2,
    });
    expect((await run("thing", "--force", "make")).err).toStartWith(
      "error: `demo thing` needs a command before --force",
    );
    expect((await run("thing", "make")).err).toStartWith("error: missing argument NAME\n");
    expect(ran).toEqual([]);
  });

  test("a command's own errors keep their exit code; a config fault has no --help pointer", async () => {
    const f = await run("thing", "fail");
    expect([f.code, f.err]).toEqual([4, "error: not yours\n"]);
    const c = await run("thing", "config");
    expect(c).toEqual({ out: "", err: "error: config file /x is not valid JSON\n", code: 2 });
  });

  test("help lists a lazy subcommand from its summary and loads it only when it is entered (kind: help that imports every role)", async () => {
    const loaded: string[] = [];
    const lazy = command({
      meta: { name: "lazy", version: "1.0.0", description: "Lazy" },
      examples: ["lazy thing make a"],
      subCommands: {
        thing: lazyCommand(
          { description: "Things" },
          async () => (loaded.push("thing"), root.subCommands as Record<string, BbCommand>)["thing"]!,
        ),
        secret: lazyCommand({ description: "Not listed", hidden: true }, async () => (loaded.push("secret"), leaf)),
      },
    });
    const { s, io: streams } = io();
    await runBb(lazy, ["--help"], streams, "lazy");
    expect(s.out).toContain("Commands:\n  thing  Things\n");
    expect(s.out).not.toContain("secret");
    await runBb(lazy, ["--version"], streams, "lazy");
    await runBb(lazy, [], streams, "lazy");
    expect(s.err).toContain("  thing  Things\n");
    expect(loaded).toEqual([]);
    await runBb(lazy, ["thing", "make", "x"], streams, "lazy");
    expect(loaded).toEqual(["thing"]);
    expect(ran).toEqual([{ _: [], name: "x", force: false, size: "1" }]);
  });
});
