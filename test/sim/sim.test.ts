/**
 * The fencing simulation in CI (the real scheduler objects and the real
 * agent, src/agent/agent.ts with src/agent/reconcile/reconciler.ts, over
 * fake ports): at least 1,000 seeds with zero invariant violations
 * (BB_SIM_SEEDS overrides the count), a replayed seed gives the same trace,
 * and every deliberately injected bug is caught within those seeds: the
 * scheduler's (capacity released on lease expiry without observed absence;
 * a replacement that does not wait for the old generation's grants to be
 * gone, CONNECTIONS_NOT_FENCED) and the agent's (a VM started after its
 * execution lease ended).
 */
import { describe, expect, test } from "bun:test";
import { resolve } from "node:path";
import { runSimulation } from "./world.ts";

const SEEDS = Number(process.env["BB_SIM_SEEDS"] ?? 1000);
const RUN = resolve("test/sim/run.ts");

async function sim(args: string[]): Promise<{ code: number; out: string }> {
  const p = Bun.spawn([process.execPath, RUN, ...args], { stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { code, out: out + err };
}

describe("fencing simulation", () => {
  test("a seed replays exactly", async () => {
    const a = await runSimulation({ seed: 7, baseDir: "/tmp/bb-sim-replay" });
    const b = await runSimulation({ seed: 7, baseDir: "/tmp/bb-sim-replay" });
    expect(a.traceHash).toBe(b.traceHash);
    expect(a.stats).toEqual(b.stats);
    expect(a.stats.executions).toBeGreaterThan(0);
  }, 60_000);

  test(`${SEEDS} seeds hold every invariant`, async () => {
    const r = await sim(["--seeds", String(SEEDS), "--workers", "2"]);
    console.log(r.out.trim().split("\n").slice(-12).join("\n"));
    expect(r.out).toContain(`${SEEDS} seeds, 0 with violations`);
    expect(r.code).toBe(0);
  }, 3_600_000);

  test("the injected agent bug (start despite an expired lease) is caught within those seeds", async () => {
    const r = await sim(["--seeds", String(SEEDS), "--workers", "2", "--inject-agent-bug", "--stop-on-violation"]);
    console.log(r.out.trim().split("\n").slice(-4).join("\n"));
    expect(r.out).toMatch(/started a VM for .* but its execution lease ended/);
    expect(r.code).toBe(1);
  }, 3_600_000);

  test("the injected fencing bug (a replacement without CONNECTIONS_NOT_FENCED) is caught within those seeds", async () => {
    const r = await sim([
      "--seeds",
      String(SEEDS),
      "--workers",
      "2",
      "--inject-connections-bug",
      "--stop-on-violation",
    ]);
    console.log(r.out.trim().split("\n").slice(-4).join("\n"));
    expect(r.out).toMatch(/address is routed through .* at once|still routes its address for generation/);
    expect(r.code).toBe(1);
  }, 3_600_000);

  test("the injected resume bug (capacity not taken back on resume) is caught within those seeds", async () => {
    const r = await sim(["--seeds", String(SEEDS), "--workers", "2", "--inject-resume-bug", "--stop-on-violation"]);
    console.log(r.out.trim().split("\n").slice(-4).join("\n"));
    expect(r.out).toMatch(/runs the vCPUs of .* while the scheduler counts it|over its capacity/);
    expect(r.code).toBe(1);
  }, 3_600_000);

  test("the injected capacity bug is caught within those seeds", async () => {
    const r = await sim(["--seeds", String(SEEDS), "--workers", "2", "--inject-bug", "--stop-on-violation"]);
    console.log(r.out.trim().split("\n").slice(-4).join("\n"));
    expect(r.out).toMatch(/freed the capacity of .* before the agent observed it absent|over its capacity|running VMs/);
    expect(r.code).toBe(1);
  }, 3_600_000);
});
