/**
 * examples/controller.ts, run as its own process against an embedded
 * scheduler (real HTTP, real SQLite objects). The host is the scripted
 * agent (test/support/scriptedAgent.ts: the real agent protocol, no VM;
 * booting real VMs is test/e2e's job) advancing each placement as a real
 * agent would: prepared, running, and absent once told to stop.
 * Also checks that the example imports nothing but the public client.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { EnrollResponse } from "../../src/protocol/agent.ts";
import { rawPost, startTestScheduler, type TestScheduler } from "../support/scheduler.ts";
import { ScriptedAgent } from "../support/scriptedAgent.ts";

const ROOT = resolve(import.meta.dir, "../..");
const EXAMPLE = join(ROOT, "examples/controller.ts");
let s: TestScheduler;

beforeAll(async () => {
  s = await startTestScheduler();
});
afterAll(async () => {
  await s.stop();
});

/** Runs the example to its end; returns exit code and output. */
async function runExample(args: string[]): Promise<{ code: number; lines: Record<string, unknown>[]; stderr: string }> {
  const child = Bun.spawn([process.execPath, EXAMPLE, ...args], {
    cwd: ROOT,
    env: { ...process.env, BB_SCHEDULER_URL: s.url, BB_TOKEN: s.tokens.token },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [out, err, code] = await Promise.all([
    new Response(child.stdout).text(),
    new Response(child.stderr).text(),
    child.exited,
  ]);
  return {
    code,
    lines: out
      .trim()
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, unknown>),
    stderr: err,
  };
}

/** Advances every placement the scripted host is told about until `stop` is set. */
async function hostLoop(agent: ScriptedAgent, stop: { done: boolean }): Promise<void> {
  const handled = new Set<string>();
  while (!stop.done) {
    await agent.poll(200);
    for (const c of agent.commands) {
      if (handled.has(c.commandId)) continue;
      handled.add(c.commandId);
      if (c.type === "ensure_present") await agent.report(c, "prepared");
      else if (c.type === "ensure_running") await agent.report(c, "running");
      else await agent.report(c, "absent");
    }
    for (const d of agent.deliveries) {
      if (handled.has(d.deliveryId + d.allocationId)) continue;
      handled.add(d.deliveryId + d.allocationId);
      const digest = `sha256:${createHash("sha256").update(Buffer.from(d.payloadBase64, "base64")).digest("hex")}`;
      await agent.send({
        deliveryAcks: [
          {
            deliveryId: d.deliveryId,
            placementId: d.placementId,
            generation: d.generation,
            result: "consumed",
            digest,
          },
        ],
      });
    }
  }
}

describe("examples/controller.ts", () => {
  test("imports only the public client", () => {
    const imports = [...readFileSync(EXAMPLE, "utf8").matchAll(/from\s+"([^"]+)"/g)].map((m) => m[1]);
    expect(imports.filter((i) => !i!.startsWith("node:"))).toEqual(["beachball/client"]);
  });

  test("without a host it waits for no longer than asked, says why, exits 3 and releases what it created", async () => {
    const r = await runExample(["--count", "1", "--run-id", "nohost", "--timeout-seconds", "1"]);
    expect(r.code).toBe(3);
    expect(r.stderr).toContain("NO_CAPACITY");
    expect(r.lines.map((l) => l["step"])).toEqual(["created", "released"]);
  });

  test("creates, waits for ready, delivers, releases; a rerun with the same run ID replays the same allocations", async () => {
    const t = await s.operator.enrollmentToken("example-host");
    const cap = { cpuMillis: 4000, memoryMiB: 4096, ephemeralDiskMiB: 16384, maxPlacements: 4 };
    const e = (
      await rawPost(
        `${s.url}/v1/agents/enroll`,
        null,
        JSON.stringify({
          token: t.token,
          capacity: cap,
          region: "local",
          architecture: "x86_64",
          agentProtocolVersion: "1.0",
          vmmDriver: "qemu-microvm",
        }),
      )
    ).body as unknown as EnrollResponse;
    const agent = new ScriptedAgent(s.url, "example-host", e.credential);
    await agent.poll();
    const stop = { done: false };
    const loop = hostLoop(agent, stop);
    try {
      const r = await runExample([
        "--count",
        "2",
        "--run-id",
        "run1",
        "--timeout-seconds",
        "20",
        "--script",
        "echo hello",
      ]);
      expect(r.stderr).toBe("");
      expect(r.code).toBe(0);
      const steps = r.lines.map((l) => (l["step"] === "created" ? "created" : `${l["step"]}:${l["state"]}`));
      expect(steps).toEqual([
        "created",
        "created",
        "ready:ready",
        "ready:ready",
        "delivered:ready",
        "delivered:ready",
        "released:released",
        "released:released",
      ]);
      const digest = `sha256:${createHash("sha256").update("echo hello").digest("hex")}`;
      expect(r.lines.filter((l) => l["step"] === "delivered").map((l) => l["digest"])).toEqual([digest, digest]);
      const ids = new Set(r.lines.map((l) => l["allocationId"]));
      expect(ids.size).toBe(2);
      for (const id of ids)
        expect((await s.controller.get(String(id))).labels).toEqual({ "created-by": "example-controller" });
      const again = await runExample(["--count", "2", "--run-id", "run1", "--timeout-seconds", "20"]);
      expect(
        again.lines
          .filter((l) => l["step"] === "created")
          .map((l) => [l["allocationId"], l["replayed"]])
          .sort(),
      ).toEqual([...ids].map((id) => [id, true]).sort());
    } finally {
      stop.done = true;
      await loop;
    }
  });
});
