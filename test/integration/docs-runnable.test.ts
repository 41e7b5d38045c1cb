/**
 * The commands the documentation shows, run as written (issue 13: "docs/
 * pages exist and the commands in them run"). A fenced block whose info
 * string is `sh runnable` in README.md or docs/*.md is executed by bash
 * (`-e -o pipefail`), in file order, against a real scheduler on loopback
 * with one enrolled host named `host-17` (a scripted agent: the real agent
 * protocol, no VM), with `bb` on PATH running this checkout's bin/bb.ts.
 * Blocks in docs/operate.md run with the operator's token, all others with
 * the controller's. A block that exits non-zero fails the test with its
 * output. Blocks that need a VM host, root or packages stay plain `sh`.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { rawPost, startTestScheduler, type TestScheduler } from "../support/scheduler.ts";
import { ScriptedAgent } from "../support/scriptedAgent.ts";

const ROOT = resolve(import.meta.dir, "../..");
const HOST_ID = "host-17";
const BLOCK_TIMEOUT_MS = 60_000;

/** One `sh runnable` block: where it is and its text. */
interface RunnableBlock {
  file: string;
  line: number;
  script: string;
}

/** Every `sh runnable` block of README.md and docs/*.md, in file order (fences may be indented, as in lists). */
function runnableBlocks(): RunnableBlock[] {
  const files = [
    "README.md",
    ...readdirSync(join(ROOT, "docs"))
      .filter((f) => f.endsWith(".md"))
      .sort()
      .map((f) => `docs/${f}`),
  ];
  const out: RunnableBlock[] = [];
  for (const file of files) {
    const lines = readFileSync(join(ROOT, file), "utf8").split("\n");
    for (let i = 0; i < lines.length; i++) {
      const open = /^(\s*)```sh runnable\s*$/.exec(lines[i]!);
      if (!open) continue;
      const indent = open[1]!.length;
      const body: string[] = [];
      let j = i + 1;
      for (; j < lines.length && !/^\s*```\s*$/.test(lines[j]!); j++)
        body.push(lines[j]!.slice(Math.min(indent, lines[j]!.length - lines[j]!.trimStart().length)));
      if (j === lines.length) throw new Error(`${file}:${i + 1}: a runnable block is never closed`);
      out.push({ file, line: i + 1, script: body.join("\n") });
      i = j;
    }
  }
  return out;
}

let s: TestScheduler;
let work: string;
let agent: ScriptedAgent;
let polling = true;
let poller: Promise<void> = Promise.resolve();

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), "bb-docs-"));
  const bin = join(work, "bin");
  mkdirSync(bin);
  writeFileSync(
    join(bin, "bb"),
    `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} ${JSON.stringify(join(ROOT, "bin/bb.ts"))} "$@"\n`,
  );
  chmodSync(join(bin, "bb"), 0o755);
  s = await startTestScheduler();
  const t = await s.operator.enrollmentToken(HOST_ID);
  const e = await rawPost(
    `${s.url}/v1/agents/enroll`,
    null,
    JSON.stringify({
      token: t.token,
      capacity: { cpuMillis: 2000, memoryMiB: 1024, ephemeralDiskMiB: 4096, maxPlacements: 2 },
      region: "local",
      architecture: "x86_64",
      agentProtocolVersion: "1.0",
      vmmDriver: "qemu-microvm",
    }),
  );
  expect(e.status).toBe(201);
  agent = new ScriptedAgent(s.url, HOST_ID, String(e.body["credential"]));
  await agent.poll();
  // Heartbeats keep the host healthy while the blocks run; a fenced host's polls are refused and ignored.
  poller = (async () => {
    while (polling) await agent.poll(200).catch(() => Bun.sleep(200));
  })();
});

afterAll(async () => {
  polling = false;
  await poller;
  await s?.stop();
  if (work) rmSync(work, { recursive: true, force: true });
});

describe("documentation commands marked `sh runnable`", () => {
  const blocks = runnableBlocks();

  test("the documentation has runnable blocks (operating a fleet at least)", () => {
    expect(blocks.filter((b) => b.file === "docs/operate.md").length).toBeGreaterThanOrEqual(4);
  });

  for (const b of blocks) {
    test(
      `${b.file}:${b.line} runs`,
      async () => {
        const token = b.file === "docs/operate.md" ? s.tokens.operatorToken : s.tokens.token;
        const cwd = join(work, `run-${b.line}`);
        mkdirSync(cwd, { recursive: true });
        const p = Bun.spawn(["bash", "-e", "-o", "pipefail", "-c", b.script], {
          cwd,
          env: {
            PATH: `${join(work, "bin")}:${process.env["PATH"] ?? ""}`,
            HOME: work,
            BB_SCHEDULER_URL: s.url,
            BB_TOKEN: token,
            NO_COLOR: "1",
          },
          stdout: "pipe",
          stderr: "pipe",
        });
        const timer = setTimeout(() => p.kill("SIGKILL"), BLOCK_TIMEOUT_MS);
        const [out, err, code] = await Promise.all([
          new Response(p.stdout).text(),
          new Response(p.stderr).text(),
          p.exited,
        ]);
        clearTimeout(timer);
        expect(
          code,
          `${b.file}:${b.line} exited ${code}\n--- script\n${b.script}\n--- stdout\n${out}\n--- stderr\n${err}`,
        ).toBe(0);
      },
      BLOCK_TIMEOUT_MS + 10_000,
    );
  }
});
