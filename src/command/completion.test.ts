/**
 * The completion scripts run in the real shells against the real command
 * tree: bash through its completion function, zsh with its completion
 * builtins replaced by printers, fish through `complete -C`.
 */
import { beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { completionScript } from "./completion.ts";
import { walkCommands, type CommandNode } from "./define.ts";
import { bbCommand } from "../../bin/root.ts";

let nodes: CommandNode[];
beforeAll(async () => {
  nodes = await walkCommands(bbCommand);
});

function has(shell: string): boolean {
  return Bun.spawnSync(["which", shell]).exitCode === 0;
}

function inShell(argv: string[], script: string): string[] {
  const dir = mkdtempSync(join(tmpdir(), "bb-completion-"));
  try {
    writeFileSync(join(dir, "script"), script);
    const p = Bun.spawnSync(
      argv.map((a) => a.replaceAll("SCRIPT", join(dir, "script"))),
      { stdout: "pipe", stderr: "pipe", env: { PATH: process.env["PATH"]!, HOME: dir } },
    );
    expect(p.stderr.toString()).toBe("");
    return p.stdout.toString().split("\n").filter(Boolean);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe("bash", () => {
  const complete = (...words: string[]) =>
    inShell(
      [
        "bash",
        "-c",
        `source SCRIPT; COMP_WORDS=(${words.map((w) => `'${w}'`).join(" ")}); COMP_CWORD=${words.length - 1}; _bb_complete; printf '%s\\n' "\${COMPREPLY[@]}"`,
      ],
      completionScript("bash", nodes),
    );
  test("subcommands, flags by prefix, and no flags of another command", () => {
    expect(complete("bb", "al")).toEqual(["allocation"]);
    expect(complete("bb", "allocation", "cr")).toEqual(["create"]);
    expect(complete("bb", "allocation", "create", "--c").sort()).toEqual(["--class", "--client-request-id"]);
    expect(complete("bb", "allocation", "create", "--class", "ci-small", "--t").sort()).toEqual([
      "--timeout",
      "--token",
      "--ttl",
    ]);
    expect(complete("bb", "scheduler", "serve", "--li")).toEqual(["--listen"]);
    expect(complete("bb", "host", "enrollment-token", "")).toEqual(["create"]);
    expect(complete("bb", "allocation", "list", "--cl")).toEqual([]);
  });
});

describe("zsh", () => {
  test.skipIf(!has("zsh"))("offers subcommands and flags with their descriptions", () => {
    const stubs = `compadd() { shift; print -l -- "$@" }; _files() { print FILES }; _describe() { local arr=$4; print -l -- "\${(@P)arr}" }`;
    const complete = (...words: string[]) =>
      inShell(
        [
          "zsh",
          "-f",
          "-c",
          `${stubs}; source SCRIPT 2>/dev/null || true; words=(${words.map((w) => `'${w}'`).join(" ")}); CURRENT=${words.length}; PREFIX='${words.at(-1)}'; _bb`,
        ],
        completionScript("zsh", nodes),
      );
    expect(complete("bb", "allocation", "cr")).toContain(
      "create:Request a VM of a workload class; optionally hand it a payload and wait",
    );
    expect(complete("bb", "allocation", "create", "--")).toContain(
      "--class:Workload class (the manifest's workloadClasses)",
    );
    expect(complete("bb", "allocation", "create", "--payload", "")).toEqual(["FILES"]);
  });
});

describe("fish", () => {
  test.skipIf(!has("fish"))("complete -C offers subcommands and flags", () => {
    const complete = (line: string) =>
      inShell(
        ["fish", "--no-config", "-c", `source SCRIPT; complete -C '${line}'`],
        completionScript("fish", nodes),
      ).map((l) => l.split("\t")[0]);
    expect(complete("bb allocation cr")).toEqual(["create"]);
    expect(complete("bb allocation create --cl").sort()).toEqual(["--class", "--client-request-id"]);
    expect(complete("bb host ")).toContain("enrollment-token");
  });
});
