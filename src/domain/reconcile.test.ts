import { describe, expect, test } from "bun:test";
import { DEFAULT_TIMEOUTS, MAX_ALARM_DELAY_MS } from "./allocation.ts";
import {
  afterFenceCheck,
  afterFindHost,
  afterHostCheck,
  afterReserve,
  afterTransitionAnswer,
  applied,
  applyInput,
  CONNECTIONS_NOT_FENCED,
  grantRefusal,
  newAllocationRecord,
  nextAlarmAt,
  nextIntent,
  NO_CAPACITY_CONDITION,
  releaseOrPlace,
  REPLACEMENT_BLOCKED,
  requestRelease,
  transition,
  type AllocationRecord,
  type Change,
} from "./reconcile.ts";

const T = 1_000_000;
const P = DEFAULT_TIMEOUTS;
const base: AllocationRecord = {
  allocationId: "alloc_1",
  identity: "c",
  clientRequestId: "r",
  workloadClass: "small",
  state: "pending",
  desired: "ready",
  generation: 1,
  attempts: 1,
  hostId: null,
  placementId: null,
  reservationKey: null,
  observedState: null,
  reason: null,
  conditions: [],
  triedHosts: [],
  nextAttemptAtMs: T,
  guestReady: false,
  payloadConsumed: false,
  replaceAfterAbsent: false,
  workloadExitCode: null,
  createdAtMs: T,
  updatedAtMs: T,
  stateEnteredAtMs: T,
  expiresAtMs: T + 3600_000,
  replacementAuthorized: false,
  hostCheckAtMs: T + P.hostCheckIntervalMs,
  terminalAtMs: null,
  placement: null,
  networkId: null,
  address: null,
  grantGeneration: 0,
  connectionsFencedGeneration: 0,
  pendingReplacement: null,
};
const rec = (o: Partial<AllocationRecord> = {}): AllocationRecord => ({ ...base, ...o });
const placed = (o: Partial<AllocationRecord> = {}) =>
  rec({ state: "provisioning", hostId: "h1", placementId: "plc_1", reservationKey: "k", ...o });
const obs = (
  state: "running" | "error" | "absent" | "paused" | "suspended",
  o: { errorCode?: string | null; generation?: number; placementId?: string } = {},
) => ({
  kind: "observation" as const,
  hostId: "h1",
  placementId: o.placementId ?? "plc_1",
  generation: o.generation ?? 1,
  state,
  errorCode: o.errorCode ?? null,
  workloadExitCode: null,
  at: "",
});
const states = (c: Change) => c.events.filter((e) => e.toState).map((e) => e.toState);
const noFit = { hostsConsidered: 3, noFit: { INSUFFICIENT_CPU: 2 }, unschedulable: { CLOCK_SKEW: 1 } };

describe("placement and waiting for capacity", () => {
  test("a due pending allocation asks the directory; one that is not due waits", () => {
    expect(nextIntent(rec(), T, P).type).toBe("find_host");
    expect(nextIntent(rec({ nextAttemptAtMs: T + 1 }), T, P).type).toBe("none");
  });
  test("no candidate: NO_CAPACITY condition, the outcome with per-reason counts, one event and alert, and a fallback alarm ≤ 60 s", () => {
    const c = afterFindHost(rec(), { hostId: null, outcome: noFit }, "", "", T);
    const r = applied(rec(), c);
    expect(r.conditions).toEqual([NO_CAPACITY_CONDITION]);
    expect(r.placement).toEqual({ at: new Date(T).toISOString(), result: "no_eligible_host", hostId: null, ...noFit });
    expect(c.events.map((e) => e.type)).toEqual(["allocation.no_eligible_host"]);
    expect(c.alerts).toHaveLength(1);
    expect(r.nextAttemptAtMs).toBe(T + MAX_ALARM_DELAY_MS);
    const again = afterFindHost(r, { hostId: null, outcome: noFit }, "", "", T + 60_000);
    expect(again.events).toEqual([]);
    expect(again.alerts).toEqual([]);
  });
  test("a capacity wake-up brings the next attempt forward; ignored unless pending", () => {
    const waiting = rec({ nextAttemptAtMs: T + 60_000, conditions: [NO_CAPACITY_CONDITION] });
    expect(applyInput(waiting, { kind: "capacity_available", hostId: "h1" }, T + 5, P).patch).toEqual({
      nextAttemptAtMs: T + 5,
    });
    expect(applyInput(placed(), { kind: "capacity_available", hostId: "h1" }, T, P).patch).toEqual({});
  });
  test("a candidate moves to reserving; acceptance to provisioning (clearing NO_CAPACITY); a rejection back to pending with the host tried", () => {
    const waiting = rec({ conditions: [NO_CAPACITY_CONDITION] });
    const reserving = applied(waiting, afterFindHost(waiting, { hostId: "h1", outcome: null }, "plc_1", "k", T));
    expect([reserving.state, reserving.hostId, reserving.placementId]).toEqual(["reserving", "h1", "plc_1"]);
    expect(nextIntent(reserving, T, P)).toEqual({
      type: "reserve",
      hostId: "h1",
      placementId: "plc_1",
      reservationKey: "k",
    });
    const ok = applied(reserving, afterReserve(reserving, { accepted: true }, T));
    expect([ok.state, ok.conditions, ok.placement?.result]).toEqual(["provisioning", [], "reserved"]);
    const no = applied(reserving, afterReserve(reserving, { accepted: false, code: "INSUFFICIENT_CPU" }, T));
    expect([no.state, no.hostId, no.triedHosts, no.placement?.noFit]).toEqual([
      "pending",
      null,
      ["h1"],
      { INSUFFICIENT_CPU: 1 },
    ]);
  });
});

describe("observations", () => {
  test("running makes a provisioning allocation ready; a stale generation or placement changes nothing", () => {
    expect(states(applyInput(placed(), obs("running"), T, P))).toEqual(["ready"]);
    expect(applyInput(placed(), obs("running", { generation: 2 }), T, P)).toEqual({
      patch: {},
      events: [],
      terminal: false,
      alerts: [],
      transition: null,
    });
    expect(applyInput(placed(), obs("running", { placementId: "plc_other" }), T, P).events).toEqual([]);
  });
  test("a templated class's running report says in the event where the VM came from and why it booted cold (ADR 0182)", () => {
    const warm = applyInput(placed(), { ...obs("running"), start: { from: "template", built: true } }, T, P);
    expect(warm.events.find((e) => e.type === "placement.running")?.data).toEqual({
      hostId: "h1",
      startedFrom: "template",
      templateBuilt: true,
    });
    const cold = applyInput(
      placed(),
      { ...obs("running"), start: { from: "boot", fallback: "TEMPLATE_MISMATCH" } },
      T,
      P,
    );
    expect(cold.events.find((e) => e.type === "placement.running")?.data).toEqual({
      hostId: "h1",
      startedFrom: "boot",
      templateFallback: "TEMPLATE_MISMATCH",
    });
    expect(applied(placed(), cold).state).toBe("ready"); // a cold boot is as ready as a warm one
  });
  test("an error before readiness is replaced after absence (next generation, old host tried)", () => {
    const releasing = applied(placed(), applyInput(placed(), obs("error", { errorCode: "VM_EXITED" }), T, P));
    expect([releasing.state, releasing.replaceAfterAbsent, releasing.desired, releasing.reason]).toEqual([
      "releasing",
      true,
      "ready",
      null,
    ]);
    const c = applyInput(releasing, obs("absent"), T, P);
    const next = applied(releasing, c);
    expect([next.state, next.generation, next.attempts, next.placementId, next.triedHosts]).toEqual([
      "pending",
      2,
      2,
      null,
      ["h1"],
    ]);
    expect(c.terminal).toBe(false);
  });
  test("an error after the payload was consumed fails the allocation once absence is observed", () => {
    const ready = placed({ state: "ready", guestReady: true, payloadConsumed: true });
    const releasing = applied(ready, applyInput(ready, obs("error", { errorCode: "VM_EXITED" }), T, P));
    expect([releasing.desired, releasing.reason]).toEqual(["released", "VM_EXITED"]);
    const c = applyInput(releasing, obs("absent"), T, P);
    expect(states(c)).toEqual(["failed"]);
    expect(c.terminal).toBe(true);
  });
  test("a fenced host's absence unblocks replacement even after readiness", () => {
    const ready = placed({ state: "ready", guestReady: true });
    const c = applyInput(ready, obs("absent", { errorCode: "HOST_FENCED" }), T, P);
    expect(states(c)).toEqual(["releasing", "pending"]);
  });
});

describe("host loss", () => {
  const lost = {
    exists: true,
    state: "running",
    leaseExpiresAtMs: T + 1000,
    hostHealth: "lost" as const,
    fenced: false,
  };
  test("before readiness: replaced only after the old lease expired plus grace", () => {
    const r = placed();
    const early = afterHostCheck(r, lost, T, P);
    expect(early.replaceNow).toBe(false);
    expect(early.change.patch.hostCheckAtMs).toBe(Math.min(T + 1000 + P.leaseGraceMs, T + P.hostCheckIntervalMs));
    expect(afterHostCheck(r, lost, T + 1000 + P.leaseGraceMs, P).replaceNow).toBe(true);
  });
  test("after readiness: replacement_blocked (event and alert once) until an authorization", () => {
    const r = placed({ state: "ready", guestReady: true });
    const first = afterHostCheck(r, lost, T, P);
    expect(first.change.events.map((e) => e.type)).toEqual(["allocation.replacement_blocked"]);
    expect(first.change.alerts).toHaveLength(1);
    const blocked = applied(r, first.change);
    expect(blocked.conditions).toEqual([REPLACEMENT_BLOCKED]);
    expect(afterHostCheck(blocked, lost, T + 1, P).change.events).toEqual([]);
    expect(
      afterHostCheck({ ...blocked, replacementAuthorized: true }, lost, T + 1000 + P.leaseGraceMs, P).replaceNow,
    ).toBe(true);
  });
  test("a healthy host only moves the next check", () => {
    expect(afterHostCheck(placed(), { ...lost, hostHealth: "healthy" }, T, P)).toEqual({
      change: {
        patch: { hostCheckAtMs: T + P.hostCheckIntervalMs },
        events: [],
        terminal: false,
        alerts: [],
        transition: null,
      },
      replaceNow: false,
    });
  });
});

describe("release and timeouts", () => {
  test("the client's release of a pending allocation ends it released; a timeout's ends it failed", () => {
    const client = applied(rec(), requestRelease("CLIENT_RELEASE", T));
    expect(releaseOrPlace(client, T)).toMatchObject({ type: "persist", change: { patch: { state: "released" } } });
    const timeout = applied(rec(), requestRelease("NO_CAPACITY", T));
    expect(releaseOrPlace(timeout, T)).toMatchObject({ type: "persist", change: { patch: { state: "failed" } } });
  });
  test("TTL, boot and pending timeouts request release with their reason", () => {
    expect(nextIntent(placed({ state: "ready", expiresAtMs: T }), T, P)).toMatchObject({
      type: "persist",
      change: { patch: { reason: "TTL_EXPIRED" } },
    });
    expect(nextIntent(placed(), T + P.provisioningTimeoutMs, P)).toMatchObject({
      type: "persist",
      change: { patch: { reason: "GUEST_BOOT_TIMEOUT" } },
    });
    expect(nextIntent(rec(), T + P.pendingTimeoutMs, P)).toMatchObject({
      type: "persist",
      change: { patch: { reason: "NO_CAPACITY" } },
    });
  });
  test("a releasing allocation with a placement asks its host for absence", () => {
    expect(releaseOrPlace(placed({ state: "releasing", desired: "released" }), T)).toEqual({
      type: "request_absent",
      hostId: "h1",
      placementId: "plc_1",
    });
  });
  test("the state machine refuses a forbidden transition", () => {
    expect(() => transition(rec({ state: "released" }), "pending", {}, null, T)).toThrow("forbidden transition");
  });
  test("the alarm is never more than 60 s out while non-terminal, and the retention purge once terminal", () => {
    expect(nextAlarmAt(rec({ nextAttemptAtMs: T + 10 * 60_000 }), T, P)).toBe(T + MAX_ALARM_DELAY_MS);
    expect(nextAlarmAt(rec({ state: "released", terminalAtMs: T }), T, P)).toBe(T + P.retentionDays * 86_400_000);
  });
});

describe("connection grants across a replacement (CONNECTIONS_NOT_FENCED)", () => {
  const net = { networkId: "net_1", address: "fd12:3456:789a:1:1::1" };
  const ready = (o: Partial<AllocationRecord> = {}) => placed({ state: "ready", guestReady: false, ...net, ...o });

  test("without a grant for the generation, a lost placement is replaced at once, as before", () => {
    const c = applyInput(ready(), obs("absent", { errorCode: "HOST_FENCED" }), T, P);
    expect(states(c)).toEqual(["releasing", "pending"]);
    expect(applied(ready(), c).generation).toBe(2);
  });

  test("with a grant requested for the generation, the replacement is held: releasing, the condition, one event, and the loop asks the Network", () => {
    const r0 = ready({ grantGeneration: 1 });
    const c = applyInput(r0, obs("absent", { errorCode: "HOST_FENCED" }), T, P);
    const r = applied(r0, c);
    expect(states(c)).toEqual(["releasing"]);
    expect([r.state, r.generation, r.pendingReplacement, r.conditions]).toEqual([
      "releasing",
      1,
      "REPLACEMENT",
      [CONNECTIONS_NOT_FENCED],
    ]);
    expect(c.events.map((e) => e.type)).toEqual([
      "placement.absent",
      "allocation.releasing",
      "allocation.connections_not_fenced",
    ]);
    expect(nextIntent(r, T, P)).toEqual({ type: "fence_connections", networkId: "net_1", generation: 1 });
    // A repeated absence changes nothing more.
    const again = applyInput(r, obs("absent"), T + 1, P);
    expect(again.events).toEqual([]);
    expect(applied(r, again).pendingReplacement).toBe("REPLACEMENT");
  });

  test("not fenced: nothing moves; fenced: the generation advances and the condition clears", () => {
    const r = applied(
      ready({ grantGeneration: 1 }),
      applyInput(ready({ grantGeneration: 1 }), obs("absent", { errorCode: "HOST_FENCED" }), T, P),
    );
    expect(afterFenceCheck(r, false, T + 5_000)).toEqual({
      patch: {},
      events: [],
      terminal: false,
      alerts: [],
      transition: null,
    });
    const c = afterFenceCheck(r, true, T + 5_000);
    const next = applied(r, c);
    expect([
      next.state,
      next.generation,
      next.pendingReplacement,
      next.connectionsFencedGeneration,
      next.conditions,
    ]).toEqual(["pending", 2, null, 1, []]);
    expect(states(c)).toEqual(["pending"]);
  });

  test("a grant for an older generation does not hold a later replacement", () => {
    const r0 = ready({ generation: 2, placementId: "plc_2", grantGeneration: 1, connectionsFencedGeneration: 1 });
    expect(
      states(applyInput(r0, obs("absent", { generation: 2, placementId: "plc_2", errorCode: "HOST_FENCED" }), T, P)),
    ).toEqual(["releasing", "pending"]);
  });

  test("an authorized replacement of a ready allocation is held too (ready → releasing); released while held, it ends released", () => {
    const r0 = ready({ grantGeneration: 1, replacementAuthorized: true });
    const held = applied(r0, afterFenceCheck({ ...r0, pendingReplacement: null }, true, T));
    expect(held).toEqual(r0);
    const c = applyInput(r0, obs("absent"), T, P);
    const r = applied(r0, c);
    expect(r.state).toBe("releasing");
    const rel = applied(r, requestRelease("CLIENT_RELEASE", T + 1));
    const intent = nextIntent(rel, T + 1, P);
    expect(intent.type).toBe("persist");
    const end = applied(rel, (intent as { change: Change }).change);
    expect([end.state, end.conditions, end.pendingReplacement]).toEqual(["released", [], null]);
  });

  test("a grant is refused with a stable code for a released, releasing, replaced or not-ready allocation", () => {
    expect(grantRefusal(ready(), undefined)).toBeNull();
    expect(grantRefusal(ready(), 1)).toBeNull();
    expect(grantRefusal(ready({ generation: 2 }), 1)?.code).toBe("STALE_GENERATION");
    expect(grantRefusal(ready({ state: "released" }), undefined)?.code).toBe("INVALID_STATE");
    expect(grantRefusal(ready({ desired: "released" }), undefined)?.message).toBe("allocation is being released");
    expect(grantRefusal(ready({ state: "releasing" }), undefined)?.code).toBe("INVALID_STATE");
    expect(grantRefusal(placed(net), undefined)?.message).toBe("allocation is provisioning, not ready");
    expect(grantRefusal(ready({ networkId: null, address: null }), undefined)?.code).toBe("INVALID_STATE");
  });
});

describe("a new allocation's record", () => {
  test("pending toward ready, generation 1, placed at once, first host check one interval out, expiring after its TTL", () => {
    const r = newAllocationRecord(
      {
        allocationId: "alloc_9",
        identity: "c",
        clientRequestId: "r9",
        workloadClass: "small",
        ttlMs: 60_000,
        network: { networkId: "net_1", address: "fd00::9" },
      },
      T,
      P,
    );
    expect(r).toMatchObject({ state: "pending", desired: "ready", generation: 1, attempts: 1, hostId: null });
    expect(r.nextAttemptAtMs).toBe(T);
    expect(r.hostCheckAtMs).toBe(T + P.hostCheckIntervalMs);
    expect(r.expiresAtMs).toBe(T + 60_000);
    expect([r.createdAtMs, r.updatedAtMs, r.stateEnteredAtMs]).toEqual([T, T, T]);
    expect([r.networkId, r.address, r.grantGeneration, r.connectionsFencedGeneration]).toEqual([
      "net_1",
      "fd00::9",
      0,
      0,
    ]);
    expect(nextIntent(r, T, P).type).toBe("find_host");
    const plain = newAllocationRecord({ ...r, ttlMs: 1, network: null }, T, P);
    expect([plain.networkId, plain.address]).toEqual([null, null]);
  });
});

describe("pause, suspend and resume (issue 21)", () => {
  const ready = (o: Partial<AllocationRecord> = {}) =>
    placed({ state: "ready", guestReady: true, hostCheckAtMs: T + 60_000, ...o });
  const at = { hostId: "h1", placementId: "plc_1" };

  test("a pause is asked of the host and confirmed by the agent's report; the CPU is the host's business", () => {
    const r = ready({ desired: "paused" });
    expect(nextIntent(r, T, P)).toEqual({ type: "request_pause", ...at });
    expect(afterTransitionAnswer(r, "pause", { done: false }, T).events).toEqual([]);
    expect(states(applyInput(r, obs("paused"), T, P))).toEqual(["paused"]);
    expect(states(afterTransitionAnswer(r, "pause", { done: true }, T))).toEqual(["paused"]);
    // A report for another generation (a late one) changes nothing.
    expect(states(applyInput(r, obs("paused", { generation: 2 }), T, P))).toEqual([]);
  });

  test("a suspend persists suspending before the host is asked, and the report makes it suspended", () => {
    const r = ready({ desired: "suspended" });
    const step = nextIntent(r, T, P);
    expect(step.type).toBe("persist");
    const suspending = applied(r, (step as { change: Change }).change);
    expect(suspending.state).toBe("suspending");
    expect(nextIntent(suspending, T, P)).toEqual({ type: "request_suspend", ...at });
    expect(states(applyInput(suspending, obs("suspended"), T, P))).toEqual(["suspended"]);
  });

  test("a refused pause or suspend (the VM stayed running, with a code) wants the allocation ready again", () => {
    const pausing = ready({ desired: "paused" });
    const c = applyInput(pausing, obs("running", { errorCode: "VMM_UNSUPPORTED" }), T, P);
    expect(applied(pausing, c).desired).toBe("ready");
    expect(c.events.map((e) => [e.type, e.reason])).toContainEqual(["allocation.pause_refused", "VMM_UNSUPPORTED"]);
    const suspending = ready({ state: "suspending", desired: "suspended" });
    const s2 = applyInput(suspending, obs("running", { errorCode: "VMM_UNSUPPORTED" }), T, P);
    expect(applied(suspending, s2)).toMatchObject({ state: "ready", desired: "ready" });
    expect(s2.events.map((e) => e.type)).toContain("allocation.suspend_refused");
    const byHost = afterTransitionAnswer(suspending, "suspend", { refused: "INVALID_STATE" }, T);
    expect(applied(suspending, byHost).state).toBe("ready");
  });

  test("resume of a paused VM keeps the generation; of a suspended one it is the next, provisioning", () => {
    const paused = ready({ state: "paused", desired: "ready" });
    expect(nextIntent(paused, T, P)).toEqual({ type: "request_resume", ...at, nextGeneration: 1 });
    expect(states(afterTransitionAnswer(paused, "resume", { done: false }, T))).toEqual([]);
    expect(states(applyInput(paused, obs("running"), T, P))).toEqual(["ready"]);
    const suspended = ready({ state: "suspended", desired: "ready" });
    expect(nextIntent(suspended, T, P)).toEqual({ type: "request_resume", ...at, nextGeneration: 2 });
    const back = applied(suspended, afterTransitionAnswer(suspended, "resume", { done: false }, T));
    expect(back).toMatchObject({ state: "provisioning", generation: 2, hostId: "h1", placementId: "plc_1" });
    expect(states(applyInput(back, obs("running", { generation: 2 }), T, P))).toEqual(["ready"]);
  });

  test("a resume without room waits with NO_CAPACITY (one event) and looks again soon", () => {
    const paused = ready({ state: "paused", desired: "ready" });
    const c = afterTransitionAnswer(paused, "resume", { refused: "INSUFFICIENT_CPU" }, T);
    const waiting = applied(paused, c);
    expect(waiting.conditions).toEqual([NO_CAPACITY_CONDITION]);
    expect(c.events.map((e) => [e.type, e.reason])).toEqual([["allocation.resume_waiting", "INSUFFICIENT_CPU"]]);
    expect(afterTransitionAnswer(waiting, "resume", { refused: "INSUFFICIENT_CPU" }, T).events).toEqual([]);
    expect(nextAlarmAt(waiting, T, P)).toBeLessThanOrEqual(T + 5_000);
    expect(applied(waiting, afterTransitionAnswer(waiting, "resume", { done: true }, T))).toMatchObject({
      state: "ready",
      conditions: [],
    });
  });

  test("a suspended VM's grants are fenced before it comes back as the next generation", () => {
    const r = ready({
      state: "suspended",
      desired: "ready",
      networkId: "net_1",
      address: "fd00::1",
      grantGeneration: 1,
    });
    expect(nextIntent(r, T, P)).toEqual({ type: "fence_connections", networkId: "net_1", generation: 1 });
    expect(nextIntent({ ...r, connectionsFencedGeneration: 1 }, T, P).type).toBe("request_resume");
  });

  test("paused and suspended allocations still expire, and a suspended one has a longest age", () => {
    expect(nextIntent(ready({ state: "paused", desired: "paused", expiresAtMs: T }), T, P)).toMatchObject({
      type: "persist",
    });
    const old = ready({ state: "suspended", desired: "suspended", stateEnteredAtMs: T - P.suspendedMaxAgeMs });
    const c = (nextIntent(old, T, P) as { change: Change }).change;
    expect(applied(old, c)).toMatchObject({ desired: "released", reason: "SUSPEND_EXPIRED" });
  });

  test("a paused VM that vanished is lost like a running one", () => {
    const r = ready({ state: "paused", desired: "paused" });
    expect(states(applyInput(r, obs("absent"), T, P))).toEqual(["releasing", "failed"]);
  });
});
