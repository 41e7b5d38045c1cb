/**
 * Agent updates that used to be dropped silently (issue 7 item 13): a
 * placement_update for an unknown placement, or with a huge sequence
 * number, advanced the session's sequence and every later update of that
 * session was ignored. Sequence numbers are now per placement within a
 * session; an update that is not applied comes back in `rejectedUpdates`
 * with a stable code and changes nothing.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { AgentCommand, EnrollResponse, PlacementUpdate } from "../../src/protocol/agent.ts";
import { MAX_WIRE_INTEGER } from "../../src/protocol/api.ts";
import { BeachballError } from "../../src/protocol/errors.ts";
import { rawPost, startTestScheduler, type TestScheduler } from "../support/scheduler.ts";
import { ScriptedAgent } from "../support/scriptedAgent.ts";

let s: TestScheduler;

async function enrolledAgent(hostId: string): Promise<ScriptedAgent> {
  const t = await s.operator.enrollmentToken(hostId);
  const r = await rawPost(
    `${s.url}/v1/agents/enroll`,
    null,
    JSON.stringify({
      token: t.token,
      capacity: { cpuMillis: 4000, memoryMiB: 4096, ephemeralDiskMiB: 8192, maxPlacements: 4 },
      region: "local",
      architecture: "x86_64",
      agentProtocolVersion: "1.0",
      vmmDriver: "qemu-microvm",
    }),
  );
  expect(r.status).toBe(201);
  const a = new ScriptedAgent(s.url, hostId, (r.body as unknown as EnrollResponse).credential);
  await a.poll();
  return a;
}

const update = (
  cmd: Pick<AgentCommand, "placementId" | "allocationId" | "generation">,
  seq: number,
  state: PlacementUpdate["state"],
  extra: Partial<PlacementUpdate> = {},
): PlacementUpdate => ({
  seq,
  placementId: cmd.placementId,
  allocationId: cmd.allocationId,
  generation: cmd.generation,
  state,
  at: new Date().toISOString(),
  ...extra,
});

beforeAll(async () => {
  s = await startTestScheduler();
});
afterAll(async () => {
  await s.stop();
});

describe("sequence numbers poisoned by one update", () => {
  test("an update for an unknown placement with seq 2^53-1 is rejected with UNKNOWN_PLACEMENT and later updates still apply", async () => {
    const agent = await enrolledAgent("seq-host");
    const { view } = await s.controller.create({ clientRequestId: "seq-1", workloadClass: "ci-small" });
    const present = await agent.waitCommand("ensure_present", view.allocationId);
    const ghost = { placementId: "plc_ghost", allocationId: "alloc_00000000000000000000000000000000", generation: 1 };
    const r = await agent.send({ updates: [update(ghost, MAX_WIRE_INTEGER, "running")] });
    expect(r.rejectedUpdates).toEqual([{ seq: MAX_WIRE_INTEGER, placementId: "plc_ghost", code: "UNKNOWN_PLACEMENT" }]);
    // A normal, small sequence number for the real placement is applied: prepared ⇒ ensure_running.
    const applied = await agent.send({ updates: [update(present, 1, "prepared")] });
    expect(applied.rejectedUpdates).toBeUndefined();
    const running = await agent.waitCommand("ensure_running", view.allocationId);
    expect(running.placementId).toBe(present.placementId);
    await s.controller.release(view.allocationId);
  });

  test("a huge sequence number on one placement does not hold back another placement's updates", async () => {
    const agent = await enrolledAgent("seq-host-2");
    const a = (await s.controller.create({ clientRequestId: "seq-2a", workloadClass: "ci-small" })).view;
    const b = (await s.controller.create({ clientRequestId: "seq-2b", workloadClass: "ci-small" })).view;
    const pa = await agent.waitCommand("ensure_present", a.allocationId);
    const pb = await agent.waitCommand("ensure_present", b.allocationId);
    expect(
      (await agent.send({ updates: [update(pa, MAX_WIRE_INTEGER - 1, "preparing")] })).rejectedUpdates,
    ).toBeUndefined();
    expect((await agent.send({ updates: [update(pb, 2, "prepared")] })).rejectedUpdates).toBeUndefined();
    await agent.waitCommand("ensure_running", b.allocationId);
    for (const v of [a, b]) await s.controller.release(v.allocationId);
  });

  test("repeated, out-of-order and stale updates come back with stable codes and change nothing", async () => {
    const agent = await enrolledAgent("seq-host-3");
    const { view } = await s.controller.create({ clientRequestId: "seq-3", workloadClass: "ci-small" });
    const p = await agent.waitCommand("ensure_present", view.allocationId);
    expect((await agent.send({ updates: [update(p, 10, "preparing")] })).rejectedUpdates).toBeUndefined();
    const r = await agent.send({
      updates: [update(p, 10, "prepared"), update(p, 9, "prepared"), update({ ...p, generation: 7 }, 11, "prepared")],
    });
    expect(r.rejectedUpdates).toEqual([
      { seq: 10, placementId: p.placementId, code: "SEQUENCE_NOT_INCREASING" },
      { seq: 9, placementId: p.placementId, code: "SEQUENCE_NOT_INCREASING" },
      { seq: 11, placementId: p.placementId, code: "STALE_GENERATION" },
    ]);
    // None of the rejected "prepared" updates took effect: no ensure_running was enqueued.
    expect((await agent.poll()).commands.some((c) => c.type === "ensure_running")).toBe(false);
    // A new session starts the per-placement sequence afresh (spec: per session).
    const fresh = new ScriptedAgent(
      s.url,
      "seq-host-3",
      (agent.client as unknown as { credential: string }).credential,
    );
    await fresh.poll();
    expect((await fresh.send({ updates: [update(p, 1, "prepared")] })).rejectedUpdates).toBeUndefined();
    await fresh.waitCommand("ensure_running", view.allocationId);
    await s.controller.release(view.allocationId);
  });

  test("a sequence number past 2^53-1 is refused as a whole envelope (400), before anything is applied", async () => {
    const agent = await enrolledAgent("seq-host-4");
    const env = {
      protocolVersion: "1.0",
      messageId: "m-1",
      hostId: "seq-host-4",
      agentEpoch: agent.epoch,
      sentAt: new Date().toISOString(),
      type: "messages",
      payload: {
        bootId: agent.bootId,
        updates: [{ seq: 1e300, placementId: "p", allocationId: "a", generation: 1, state: "running", at: "x" }],
        acks: [],
        deliveryAcks: [],
      },
    };
    const credential = (agent.client as unknown as { credential: string }).credential;
    const r = await rawPost(`${s.url}/v1/agents/messages`, credential, JSON.stringify(env));
    expect([r.status, r.body["code"]]).toEqual([400, "VALIDATION_FAILED"]);
    expect(
      await agent.send({}).then(
        () => "ok",
        (e: unknown) => (e instanceof BeachballError ? e.code : String(e)),
      ),
    ).toBe("ok");
  });
});
