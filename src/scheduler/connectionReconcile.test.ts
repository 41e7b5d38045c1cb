/**
 * Reconciling a host's applied grants on the real objects under a fake
 * clock (src/scheduler/objects/hostConnections.ts, rules in
 * src/domain/grantReconcile.ts): after an agent restart (a new session whose
 * connectivity_update reports no grants) the scheduler hands the same apply
 * out again, fenced by the session, the grant's generation, revocation and
 * expiry, and bounded per grant and session; a grant the host still holds
 * after acknowledging its revoke gets the revoke again.
 */
import { afterEach, describe, expect, test } from "bun:test";
import type { AppliedGrant, ConfigureConnection } from "../protocol/agent.ts";
import type { ConnectionGrantResponse } from "../protocol/connection.ts";
import { MAX_GRANT_REDELIVERIES_PER_SESSION } from "../domain/grantReconcile.ts";
import { Agent, C, closeWorlds, code, O, readyAllocation, SSH } from "../../test/support/grantWorld.ts";

afterEach(closeWorlds);

/** What the host endpoint reports for grant `r`. */
const applied = (r: ConnectionGrantResponse): AppliedGrant => ({
  grantId: r.grant.payload.grantId,
  allocationId: r.grant.payload.allocationId,
  generation: r.grant.payload.generation,
  expiresAtMs: r.grant.payload.expiresAtMs,
  path: "none",
});

/** Polls once; the configure_connection commands of the answer. */
async function connections(a: Agent): Promise<ConfigureConnection[]> {
  return (await a.poll()).connections ?? [];
}

/** A ready allocation with one grant its host applied and acknowledged. */
async function appliedGrant(ttlSeconds = 600) {
  const x = await readyAllocation();
  const r = await x.w.createConnectionGrant(C, x.id, { ...SSH, ttlSeconds });
  const [apply] = await connections(x.owner);
  expect(apply?.action).toBe("apply");
  await x.owner.send({
    acks: [{ commandId: apply!.commandId, result: "accepted" }],
    connectivity: x.owner.connectivity([applied(r)]),
  });
  expect(await connections(x.owner)).toEqual([]);
  return { ...x, r, apply: apply! };
}

/** The agent restarts: a new session (first poll without an epoch), then its first connectivity_update. */
async function restart(a: Agent, reported: AppliedGrant[] = []): Promise<void> {
  a.epoch = "";
  await a.poll();
  await a.send({ connectivity: a.connectivity(reported) });
}

describe("applied grants after an agent restart", () => {
  test("the new session's connectivity_update lacks the grant: the same apply (same grant, fresh host tokens) is handed out again, once", async () => {
    const x = await appliedGrant();
    await restart(x.owner);
    x.clock.advance(1_000);
    const again = await connections(x.owner);
    expect(again.map((c) => [c.commandId, c.action])).toEqual([[x.apply.commandId, "apply"]]);
    expect(again[0]!.grant).toEqual(x.r.grant);
    expect(again[0]!.relayMap).toEqual(x.apply.relayMap);
    expect(again[0]!.connectionId).toBe(x.apply.connectionId);
    expect(again[0]!.endpointToken).toBe(x.apply.endpointToken);
    await x.owner.send({
      acks: [{ commandId: again[0]!.commandId, result: "accepted" }],
      connectivity: x.owner.connectivity([applied(x.r)]),
    });
    expect(await connections(x.owner)).toEqual([]);
    // A later update that reports it changes nothing; neither does an older one of the session.
    await x.owner.send({ connectivity: x.owner.connectivity([applied(x.r)]) });
    await x.owner.send({ connectivity: { ...x.owner.connectivity([]), seq: 1 } });
    expect(await connections(x.owner)).toEqual([]);
    expect(await x.w.metrics(O)).toContain(
      `bb_connection_grant_redeliveries_total{host="${x.owner.hostId}",phase="apply"} 1`,
    );
  });

  test("an envelope of the old session is refused (STALE_AGENT_EPOCH) and hands nothing out", async () => {
    const x = await appliedGrant();
    const oldEpoch = x.owner.epoch;
    await restart(x.owner, [applied(x.r)]);
    const newEpoch = x.owner.epoch;
    x.owner.epoch = oldEpoch;
    expect(await code(x.owner.send({ connectivity: x.owner.connectivity([]) }))).toBe("STALE_AGENT_EPOCH 409");
    x.owner.epoch = newEpoch;
    expect(await connections(x.owner)).toEqual([]);
  });

  test("never for a revoked grant: the host gets the revoke, not the apply", async () => {
    const x = await appliedGrant();
    await x.w.revokeConnectionGrant(C, x.id, x.r.grant.payload.grantId);
    await restart(x.owner);
    expect((await connections(x.owner)).map((c) => c.action)).toEqual(["revoke"]);
  });

  test("never for an expired grant", async () => {
    const x = await appliedGrant(60);
    x.clock.advance(60_000);
    await restart(x.owner);
    expect(await connections(x.owner)).toEqual([]);
  });

  test("never for a grant whose placement the scheduler wants gone (released allocation)", async () => {
    const x = await appliedGrant();
    await x.w.releaseAllocation(C, x.id);
    await x.settle();
    await restart(x.owner);
    expect((await connections(x.owner)).filter((c) => c.action === "apply")).toEqual([]);
  });

  test("never for a grant the host refused", async () => {
    const x = await readyAllocation();
    await x.w.createConnectionGrant(C, x.id, SSH);
    const [apply] = await connections(x.owner);
    await x.owner.send({
      acks: [{ commandId: apply!.commandId, result: "rejected", errorCode: "NETWORK_SETUP_FAILED" }],
    });
    await restart(x.owner);
    expect(await connections(x.owner)).toEqual([]);
  });

  test(`bounded: a host that acknowledges but never holds the grant gets it at most ${MAX_GRANT_REDELIVERIES_PER_SESSION} times per session`, async () => {
    const x = await appliedGrant();
    await restart(x.owner);
    let handed = 0;
    for (let i = 0; i < MAX_GRANT_REDELIVERIES_PER_SESSION + 3; i++) {
      const c = await connections(x.owner);
      handed += c.length;
      await x.owner.send({
        acks: c.map((a) => ({ commandId: a.commandId, result: "accepted" as const })),
        connectivity: x.owner.connectivity([]),
      });
    }
    handed += (await connections(x.owner)).length;
    expect(handed).toBe(MAX_GRANT_REDELIVERIES_PER_SESSION);
    // A new session starts a new count.
    await restart(x.owner);
    expect((await connections(x.owner)).length).toBe(1);
  });

  test("a grant the host still reports after acknowledging its revoke gets the revoke again", async () => {
    const x = await appliedGrant();
    await x.w.revokeConnectionGrant(C, x.id, x.r.grant.payload.grantId);
    const [revoke] = await connections(x.owner);
    expect(revoke?.action).toBe("revoke");
    await x.owner.ack([revoke!.commandId]);
    await x.owner.send({ connectivity: x.owner.connectivity([applied(x.r)]) });
    expect((await connections(x.owner)).map((c) => [c.commandId, c.action])).toEqual([[revoke!.commandId, "revoke"]]);
  });
});
