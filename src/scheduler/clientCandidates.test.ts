/**
 * The client's candidates reach the host endpoint through the scheduler
 * (src/scheduler/objects/connectionObject.ts → hostConnections.ts): what the
 * client posts to its grant's Connection rides in the grant's
 * configure_connection apply, handed out again for each new list, bounded
 * per grant, never for a revoked or refused grant; the host's own
 * candidates messages do not go back to it.
 */
import { afterEach, describe, expect, test } from "bun:test";
import type { Candidate } from "../protocol/connection.ts";
import { MAX_CLIENT_CANDIDATE_UPDATES_PER_GRANT } from "./objects/hostConnections.ts";
import { C, closeWorlds, code, readyAllocation, SSH } from "../../test/support/grantWorld.ts";

afterEach(closeWorlds);

const cands = (n: number): Candidate[] => [
  { address: "198.51.100.7", port: 40_000 + n, kind: "stun" },
  { address: "10.1.0.2", port: 40_000 + n, kind: "local" },
];

/** A ready allocation with one grant whose apply its host acknowledged. */
async function acked() {
  const x = await readyAllocation();
  const r = await x.w.createConnectionGrant(C, x.id, SSH);
  const apply = (await x.owner.poll()).connections![0]!;
  expect(apply.clientCandidates).toBeUndefined();
  await x.owner.ack([apply.commandId]);
  let seq = 0;
  const post = (role: "client" | "host", list: Candidate[]) =>
    x.w.connectionMessages(r.connectionId, role, { messages: [{ type: "candidates", seq: ++seq, candidates: list }] });
  return { ...x, r, apply, post };
}

describe("client candidates from the Connection to the host", () => {
  test("the client's newest candidates ride in the same apply, handed out again; an unchanged list is not", async () => {
    const x = await acked();
    await x.post("client", cands(1));
    const again = (await x.owner.poll()).connections ?? [];
    expect(again.map((c) => [c.commandId, c.action])).toEqual([[x.apply.commandId, "apply"]]);
    expect(again[0]!.clientCandidates).toEqual(cands(1));
    expect(again[0]!.grant).toEqual(x.r.grant);
    await x.owner.ack([x.apply.commandId]);
    await x.post("client", cands(1));
    expect((await x.owner.poll()).connections).toBeUndefined();
    // A later apply (e.g. after an agent restart) carries them too.
    await x.post("client", cands(2));
    expect((await x.owner.poll()).connections?.[0]?.clientCandidates).toEqual(cands(2));
  });

  test("the host's own candidates messages never come back to it", async () => {
    const x = await acked();
    await x.post("host", cands(3));
    expect((await x.owner.poll()).connections).toBeUndefined();
  });

  test(`bounded: at most ${MAX_CLIENT_CANDIDATE_UPDATES_PER_GRANT} lists per grant reach the host`, async () => {
    const x = await acked();
    let handed = 0;
    for (let i = 0; i < MAX_CLIENT_CANDIDATE_UPDATES_PER_GRANT + 4; i++) {
      await x.post("client", cands(i));
      const c = (await x.owner.poll()).connections ?? [];
      handed += c.length;
      await x.owner.ack(c.map((a) => a.commandId));
    }
    expect(handed).toBe(MAX_CLIENT_CANDIDATE_UPDATES_PER_GRANT);
  });

  test("never for a revoked grant (the Connection ended) or one the host refused", async () => {
    const x = await acked();
    await x.w.revokeConnectionGrant(C, x.id, x.r.grant.payload.grantId);
    expect((await x.owner.poll()).connections?.map((c) => c.action)).toEqual(["revoke"]);
    expect(await code(x.post("client", cands(1)))).toBe("UNAUTHENTICATED 401");

    const y = await readyAllocation();
    const r = await y.w.createConnectionGrant(C, y.id, SSH);
    const apply = (await y.owner.poll()).connections![0]!;
    await y.owner.send({
      acks: [{ commandId: apply.commandId, result: "rejected", errorCode: "NETWORK_SETUP_FAILED" }],
    });
    await y.w.connectionMessages(r.connectionId, "client", {
      messages: [{ type: "candidates", seq: 1, candidates: cands(1) }],
    });
    expect((await y.owner.poll()).connections).toBeUndefined();
  });
});
