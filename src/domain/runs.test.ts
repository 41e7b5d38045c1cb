import { describe, expect, test } from "bun:test";
import type { AllocationView } from "../protocol/api.ts";
import {
  dispatchOrder,
  estimatedStartMs,
  queuedRunExpired,
  runPayload,
  runStep,
  shellQuote,
  type RunProgress,
} from "./runs.ts";

const q = (tenant: string, seq: number) => ({ runId: `${tenant}-${seq}`, tenant, seq });

describe("dispatchOrder", () => {
  test("fewest active first, then least recently dispatched, then oldest", () => {
    const queued = [q("a", 1), q("a", 2), q("a", 3), q("b", 4), q("c", 5)];
    const load = new Map([
      ["a", { active: 0, lastDispatchAtMs: 100 }],
      ["b", { active: 1, lastDispatchAtMs: 50 }],
    ]);
    // a and c have none active; c was never dispatched (0 < 100), so c first; then a (0 active);
    // then a and b both 1 active: b dispatched at 50, a just now, so b; then a.
    expect(dispatchOrder(queued, load).map((r) => r.runId)).toEqual(["c-5", "a-1", "b-4", "a-2", "a-3"]);
  });

  test("a flooding tenant cannot starve the others", () => {
    const queued = [...Array.from({ length: 30 }, (_, i) => q("a", i)), q("b", 100), q("c", 101)];
    const first = dispatchOrder(queued, new Map(), 4).map((r) => r.tenant);
    expect(first.slice(0, 3).sort()).toEqual(["a", "b", "c"]);
    expect(first.filter((t) => t === "a")).toHaveLength(2);
  });

  test("limit cuts the order short and an empty queue gives nothing", () => {
    expect(dispatchOrder([q("a", 1), q("a", 2)], new Map(), 1)).toHaveLength(1);
    expect(dispatchOrder([], new Map(), 4)).toEqual([]);
  });
});

describe("runPayload", () => {
  test("exports the run ID and the variables in name order before the script", () => {
    const p = new TextDecoder().decode(
      runPayload("run_1", { Z: "z", A: "it's" }, new TextEncoder().encode("echo hi\n")),
    );
    expect(p).toBe("export BEACHBALL_RUN_ID='run_1'\nexport A='it'\\''s'\nexport Z='z'\necho hi\n");
    expect(shellQuote("a'b")).toBe("'a'\\''b'");
  });
});

const base: RunProgress = {
  state: "starting",
  outcome: null,
  reason: null,
  exitCode: null,
  budgetMs: 10_000,
  queueDeadlineAtMs: 5_000,
  dispatchedAtMs: 1_000,
  placedAtMs: null,
  readyAtMs: null,
  runningAtMs: null,
  exitedAtMs: null,
  endedAtMs: null,
  hostId: null,
  cleanupPending: false,
  deliveredGeneration: null,
};
const view = (v: Partial<AllocationView>): AllocationView =>
  ({
    state: "pending",
    hostId: null,
    workloadExitCode: null,
    conditions: [],
    reason: null,
    generation: 1,
    ...v,
  }) as AllocationView;

describe("runStep", () => {
  test("a ready allocation gets the payload; placement and readiness are recorded once", () => {
    const s = runStep(base, view({ state: "ready", hostId: "h1" }), 2_000);
    expect(s.deliver).toBe(true);
    expect(s.set).toMatchObject({ placedAtMs: 2_000, readyAtMs: 2_000, hostId: "h1" });
    expect(s.events.map((e) => e.type)).toEqual(["run.placed", "run.ready"]);
    const again = runStep(
      { ...base, ...s.set, state: "running", runningAtMs: 2_100 },
      view({ state: "ready", hostId: "h1" }),
      2_200,
    );
    expect(again.deliver).toBe(false);
    expect(again.events).toEqual([]);
  });

  test("an exit code decides the outcome and releases; the run ends only once the VM is gone", () => {
    const running = {
      ...base,
      state: "running" as const,
      runningAtMs: 2_000,
      hostId: "h1",
      placedAtMs: 1_500,
      readyAtMs: 1_900,
    };
    const s = runStep(running, view({ state: "ready", hostId: "h1", workloadExitCode: 3 }), 3_000);
    expect(s.set).toMatchObject({ exitCode: 3, outcome: "failed", reason: "WORKLOAD_FAILED", state: "finishing" });
    expect(s.release).toBe(true);
    const finishing = { ...running, ...s.set } as RunProgress;
    const pending = runStep(
      finishing,
      view({ state: "released", hostId: "h1", conditions: ["CLEANUP_PENDING"] }),
      3_500,
    );
    expect(pending.set.endedAtMs).toBeUndefined();
    expect(pending.set.cleanupPending).toBe(true);
    const gone = runStep({ ...finishing, cleanupPending: true }, view({ state: "released", hostId: "h1" }), 4_000);
    expect(gone.set).toMatchObject({ state: "failed", endedAtMs: 4_000, cleanupPending: false });
  });

  test("past the budget the run times out; a VM that ends without an exit fails the run with its reason", () => {
    const t = runStep({ ...base, state: "running", runningAtMs: 2_000 }, view({ state: "ready" }), 11_000);
    expect(t.set).toMatchObject({ outcome: "timed_out", reason: "BUDGET_EXCEEDED", state: "finishing" });
    expect(t.release).toBe(true);
    const f = runStep({ ...base, state: "running" }, view({ state: "failed", reason: "VM_EXITED" }), 3_000);
    expect(f.set).toMatchObject({ state: "failed", outcome: "failed", reason: "VM_EXITED", endedAtMs: 3_000 });
  });

  test("queue deadline and the start estimate", () => {
    expect(queuedRunExpired({ queueDeadlineAtMs: 5_000 }, 4_999)).toBeNull();
    expect(queuedRunExpired({ queueDeadlineAtMs: 5_000 }, 5_000)).toBe("QUEUE_DEADLINE_EXCEEDED");
    expect(estimatedStartMs(9, 4, 1_000, 0)).toBe(2_000);
    expect(estimatedStartMs(0, 4, null, 0)).toBeNull();
  });
});
