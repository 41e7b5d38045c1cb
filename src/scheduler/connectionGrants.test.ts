/**
 * Connection grants on the real objects (Allocation, Network,
 * NetworkDirectory, Host, Connection; one SQLite file) under a fake clock:
 * address assignment (stable across replacement, no collision, bounds),
 * grants verified with the shared verifier (src/protocol/connectionSignature.ts),
 * refusal codes, revocation, CONNECTIONS_NOT_FENCED across a replacement,
 * and the rendezvous of a Connection (with its fresh relay tokens). The agent is a minimal in-process one
 * speaking the real envelope (no VM: this is the scheduler's side).
 */
import { afterEach, describe, expect, test } from "bun:test";
import { ERROR_STATUS } from "../protocol/errors.ts";
import type { ConnectionGrantResponse } from "../protocol/connection.ts";
import { checkSignedGrant, checkSignedRelayMap, checkSignedRelayToken } from "../protocol/connectionSignature.ts";
import { subnetOf } from "../domain/network.ts";
import { GRANT_EXPIRY_GRACE_MS } from "../domain/grants.ts";
import { CONNECTIONS_NOT_FENCED } from "../domain/reconcile.ts";
import { defaultNetworkIdFor } from "../domain/identifiers.ts";
import { MAX_LIVE_GRANTS_PER_ALLOCATION } from "./objects/networkObject.ts";
import {
  Agent,
  C,
  C2,
  closeWorlds,
  code,
  enroll,
  key,
  loseAndAuthorize,
  O,
  readyAllocation,
  SSH,
  world,
} from "../../test/support/grantWorld.ts";

afterEach(closeWorlds);

describe("addresses", () => {
  test("each allocation gets its own /128 at creation, inside its owner's Network /64; owners get distinct /64s; client peers get /128s of their own", async () => {
    const { w, settle, ula } = world();
    const made: string[] = [];
    for (let i = 0; i < 5; i++)
      made.push((await w.createAllocation(C, { clientRequestId: `c${i}`, workloadClass: "small" })).view.allocationId);
    const other = (await w.createAllocation(C2, { clientRequestId: "u0", workloadClass: "small" })).view.allocationId;
    await settle();
    const netC = await w.env.Network.get(defaultNetworkIdFor(C.id)).describe();
    const netU = await w.env.Network.get(defaultNetworkIdFor(C2.id)).describe();
    expect(netC.allocations.map((a) => a.allocationId).sort()).toEqual([...made].sort());
    const addresses = netC.allocations.map((a) => a.address);
    expect(new Set(addresses).size).toBe(5);
    expect([netC.subnet, netU.subnet].sort()).toEqual([1, 2]);
    for (const a of addresses) expect(subnetOf(ula, a)).toBe(netC.subnet);
    expect(netU.allocations).toEqual([{ allocationId: other, address: expect.any(String), closedGeneration: 0 }]);
    expect(subnetOf(ula, netU.allocations[0]!.address)).toBe(netU.subnet);
    // Replaying the create returns the same allocation and reserves nothing more.
    await w.createAllocation(C, { clientRequestId: "c0", workloadClass: "small" });
    expect((await w.env.Network.get(defaultNetworkIdFor(C.id)).describe()).allocations.length).toBe(5);
    expect(await w.env.NetworkDirectory.get("global").list()).toEqual([
      { networkId: expect.stringMatching(/^net_/), tenant: expect.any(String), subnet: 1 },
      { networkId: expect.stringMatching(/^net_/), tenant: expect.any(String), subnet: 2 },
    ]);
  });

  test("the allocation's address survives a replacement on another host", async () => {
    const x = await readyAllocation(2);
    const g1 = await x.w.createConnectionGrant(C, x.id, { ...SSH, ttlSeconds: 600 });
    await loseAndAuthorize(x);
    expect((await x.w.getAllocation(C, x.id)).conditions).toEqual([CONNECTIONS_NOT_FENCED]);
    // The old host comes back and confirms the revoke: the replacement goes ahead.
    await x.owner.poll();
    await x.owner.ack(x.owner.conns.filter((c) => c.action === "revoke").map((c) => c.commandId));
    await x.settle(1_000);
    const v = await x.w.getAllocation(C, x.id);
    expect(v.generation).toBe(2);
    const next = x.agents.find((a) => a.hostId === v.hostId)!;
    await next.run(x.id, 2);
    const g2 = await x.w.createConnectionGrant(C, x.id, SSH);
    expect(g2.grant.payload.generation).toBe(2);
    expect(g2.grant.payload.hostId).toBe(next.hostId);
    expect(g2.grant.payload.allocationAddress).toBe(g1.grant.payload.allocationAddress);
    expect(g2.grant.payload.clientAddress).not.toBe(g2.grant.payload.allocationAddress);
    const net = await x.w.env.Network.get(g1.grant.payload.networkId).describe();
    expect(net.grants.map((g) => [g.generation, g.revoked, g.gone])).toEqual([
      [1, true, true],
      [2, false, false],
    ]);
  });

  test("bounds: at most MAX_LIVE_GRANTS_PER_ALLOCATION live grants (RATE_LIMITED); a revoked one makes room; client addresses never collide", async () => {
    const x = await readyAllocation();
    const grants: ConnectionGrantResponse[] = [];
    for (let i = 0; i < MAX_LIVE_GRANTS_PER_ALLOCATION; i++)
      grants.push(await x.w.createConnectionGrant(C, x.id, { ...SSH, clientPublicKey: key(100 + i) }));
    expect(new Set(grants.map((g) => g.grant.payload.clientAddress)).size).toBe(MAX_LIVE_GRANTS_PER_ALLOCATION);
    expect(await code(x.w.createConnectionGrant(C, x.id, SSH))).toBe("RATE_LIMITED 429");
    await x.w.revokeConnectionGrant(C, x.id, grants[0]!.grant.payload.grantId);
    const more = await x.w.createConnectionGrant(C, x.id, SSH);
    // The revoked grant's client address is not reused while its peer may still be on the host.
    expect(grants.map((g) => g.grant.payload.clientAddress)).not.toContain(more.grant.payload.clientAddress);
  });

  test("a client address is reused only after its grant is gone from the host (revoke acknowledged)", async () => {
    const x = await readyAllocation();
    const g1 = await x.w.createConnectionGrant(C, x.id, SSH);
    await x.w.revokeConnectionGrant(C, x.id, g1.grant.payload.grantId);
    await x.owner.poll();
    const revoke = x.owner.conns.find((c) => c.action === "revoke" && c.grantId === g1.grant.payload.grantId)!;
    await x.owner.ack([revoke.commandId]);
    await x.settle();
    const net = await x.w.env.Network.get(g1.grant.payload.networkId).describe();
    expect(net.grants.find((g) => g.grantId === g1.grant.payload.grantId)).toMatchObject({ revoked: true, gone: true });
    expect(net.free).toEqual([g1.grant.payload.clientAddress]);
    const g2 = await x.w.createConnectionGrant(C, x.id, SSH);
    expect(g2.grant.payload.clientAddress).toBe(g1.grant.payload.clientAddress);
  });
});

describe("issuing a grant", () => {
  test("the grant, relay map and relay tokens verify with the deployment's keys and name exactly one generation and one host peer", async () => {
    const x = await readyAllocation();
    const r = await x.w.createConnectionGrant(C, x.id, { ...SSH, ports: [22, 8005], ttlSeconds: 300 });
    const now = x.clock.wallMs();
    const checked = checkSignedGrant(
      r.grant,
      x.keys,
      {
        allocationId: x.id,
        generation: 1,
        hostId: x.owner.hostId,
        hostPublicKey: x.owner.publicKey,
        clientPublicKey: SSH.clientPublicKey,
        transport: "tcp",
        port: 8005,
      },
      now,
    );
    expect(checked.ok).toBe(true);
    const g = r.grant.payload;
    expect(g).toMatchObject({
      v: 1,
      tenant: C.id,
      networkId: defaultNetworkIdFor(C.id),
      policyRevision: 7,
      issuedAtMs: now,
      expiresAtMs: now + 300_000,
      ports: [22, 8005],
    });
    expect(checkSignedRelayMap(r.relayMap, x.keys, now)).toMatchObject({
      ok: true,
      payload: { relays: [{ relayId: "relay-1" }], expiresAtMs: g.expiresAtMs },
    });
    const t = checkSignedRelayToken(
      r.relayTokens["relay-1"],
      x.keys,
      { relayId: "relay-1", grantId: g.grantId, role: "client" },
      now,
    );
    expect(t.ok).toBe(true);
    // Relay tokens are short-lived: the manifest's default (120 s), not the grant's 300 s.
    expect(t.ok && t.payload.expiresAtMs - t.payload.issuedAtMs).toBe(120_000);
    expect(r.hostCandidates).toEqual([{ address: "192.0.2.10", port: 51820, kind: "local" }]);
    // The manifest's STUN servers, for the client to learn its public mapping.
    expect(r.stunServers).toEqual(["192.0.2.53:3478", "[2001:db8::53]:3478"]);
    expect(r.endpointToken).toMatch(/^bbx_[0-9a-f]{64}$/);
    // The host gets configure_connection apply with the same grant and its own relay tokens and endpoint token.
    await x.owner.poll();
    const apply = x.owner.conns.find((c) => c.action === "apply")!;
    expect(apply).toMatchObject({
      commandId: `${g.grantId}:apply`,
      type: "configure_connection",
      grantId: g.grantId,
      connectionId: r.connectionId,
    });
    expect(apply.grant).toEqual(r.grant);
    expect(
      checkSignedRelayToken(
        apply.relayTokens!["relay-1"],
        x.keys,
        { relayId: "relay-1", grantId: g.grantId, role: "host" },
        now,
      ).ok,
    ).toBe(true);
    expect(apply.endpointToken).toMatch(/^bbx_[0-9a-f]{64}$/);
    expect(apply.endpointToken).not.toBe(r.endpointToken);
    // Redelivered until acknowledged, then not again.
    await x.owner.poll();
    expect(x.owner.conns.filter((c) => c.commandId === apply.commandId).length).toBe(2);
    await x.owner.ack([apply.commandId]);
    const after = await x.owner.poll();
    expect(after.connections).toBeUndefined();
  });

  test("the verifier refuses a tampered grant, a grant for an older generation, an expired one, with stable codes", async () => {
    const x = await readyAllocation();
    const r = await x.w.createConnectionGrant(C, x.id, { ...SSH, ttlSeconds: 60 });
    const now = x.clock.wallMs();
    const tampered = { ...r.grant, payload: { ...r.grant.payload, ports: [22, 23] } };
    expect(checkSignedGrant(tampered, x.keys, {}, now)).toMatchObject({ ok: false, code: "GRANT_SIGNATURE_INVALID" });
    const stolenKey = { ...r.grant, payload: { ...r.grant.payload, clientPublicKey: key(201) } };
    expect(checkSignedGrant(stolenKey, x.keys, {}, now)).toMatchObject({ ok: false, code: "GRANT_SIGNATURE_INVALID" });
    expect(checkSignedGrant(r.grant, x.keys, { generation: 2 }, now)).toMatchObject({
      ok: false,
      code: "GRANT_MISMATCH",
    });
    expect(checkSignedGrant(r.grant, x.keys, {}, now + 60_000)).toMatchObject({ ok: false, code: "GRANT_EXPIRED" });
    expect(checkSignedGrant(r.grant, new Map([["other", x.keys.values().next().value!]]), {}, now)).toMatchObject({
      ok: false,
      code: "GRANT_SIGNATURE_INVALID",
    });
    expect(ERROR_STATUS.GRANT_SIGNATURE_INVALID).toBe(401);
    expect(ERROR_STATUS.GRANT_EXPIRED).toBe(401);
    expect(ERROR_STATUS.GRANT_MISMATCH).toBe(403);
  });

  test("refusals with nothing changed: not the owner, policy, wrong generation, not ready, no endpoint yet, released", async () => {
    const x = world();
    await enroll(x.w, "h1");
    const a = new Agent(x.w, "h1", x.clock, 10);
    await a.poll();
    const { view } = await x.w.createAllocation(C, { clientRequestId: "r1", workloadClass: "small" });
    await x.settle();
    const id = view.allocationId;
    expect(await code(x.w.createConnectionGrant(C, id, SSH))).toBe("INVALID_STATE 409");
    const p = await a.run(id);
    // The host endpoint has not reported its key and candidates yet.
    expect(await code(x.w.createConnectionGrant(C, id, SSH))).toBe("CONNECTIVITY_UNAVAILABLE 503");
    await a.send({ connectivity: a.connectivity() });
    expect(await code(x.w.createConnectionGrant(C2, id, SSH))).toBe("NOT_FOUND 404");
    expect(await code(x.w.createConnectionGrant(O, id, SSH))).toBe("FORBIDDEN 403");
    expect(await code(x.w.createConnectionGrant(C, id, { ...SSH, ports: [23] }))).toBe("FORBIDDEN 403");
    expect(await code(x.w.createConnectionGrant(C, id, { ...SSH, transport: "udp" }))).toBe("FORBIDDEN 403");
    expect(await code(x.w.createConnectionGrant(C, id, { ...SSH, generation: 2 }))).toBe("STALE_GENERATION 409");
    expect(await code(x.w.createConnectionGrant(C, `alloc_${"0".repeat(32)}`, SSH))).toBe("NOT_FOUND 404");
    const net = await x.w.env.Network.get(defaultNetworkIdFor(C.id)).describe();
    expect(net.grants).toEqual([]);
    expect(a.conns).toEqual([]);
    // Another owner's revoke finds nothing either.
    const g = await x.w.createConnectionGrant(C, id, SSH);
    expect(await code(x.w.revokeConnectionGrant(C2, id, g.grant.payload.grantId))).toBe("NOT_FOUND 404");
    expect(await code(x.w.revokeConnectionGrant(C, id, `grt_${"0".repeat(32)}`))).toBe("NOT_FOUND 404");
    expect(await code(x.w.revokeConnectionGrant(C, id, "grt_bad"))).toBe("NOT_FOUND 404");
    // Released: refused, and the live grant is revoked at the host.
    await x.w.releaseAllocation(C, id);
    await x.settle();
    expect(await code(x.w.createConnectionGrant(C, id, SSH))).toBe("INVALID_STATE 409");
    await a.poll();
    expect(a.conns.map((c) => `${c.grantId} ${c.action}`)).toContain(`${g.grant.payload.grantId} revoke`);
    await a.report(p, "absent");
    await x.settle(1_000);
    expect((await x.w.getAllocation(C, id)).state).toBe("released");
    expect(await code(x.w.createConnectionGrant(C, id, SSH))).toBe("INVALID_STATE 409");
  });
});

describe("revocation", () => {
  test("DELETE marks the grant revoked, supersedes an apply not yet delivered, ends the Connection, and is idempotent", async () => {
    const x = await readyAllocation();
    const r = await x.w.createConnectionGrant(C, x.id, SSH);
    const grantId = r.grant.payload.grantId;
    expect(await x.w.authenticateEndpoint(`Bearer ${r.endpointToken}`, r.connectionId)).toBe("client");
    await x.w.revokeConnectionGrant(C, x.id, grantId);
    await x.w.revokeConnectionGrant(C, x.id, grantId);
    await x.owner.poll();
    expect(x.owner.conns.map((c) => `${c.commandId} ${c.action}`)).toEqual([`${grantId}:revoke revoke`]);
    expect(await code(x.w.authenticateEndpoint(`Bearer ${r.endpointToken}`, r.connectionId))).toBe(
      "UNAUTHENTICATED 401",
    );
    const events = await x.w.events(C, x.id, 0, 100);
    expect(events.filter((e) => e.type.startsWith("connection.")).map((e) => e.type)).toEqual([
      "connection.granted",
      "connection.revoked",
    ]);
    // Until the host acknowledges, the revoke is resent; the Network counts the grant as possibly applied.
    let net = await x.w.env.Network.get(r.grant.payload.networkId).describe();
    expect(net.grants[0]).toMatchObject({ revoked: true, gone: false });
    await x.owner.ack([`${grantId}:revoke`]);
    await x.settle();
    net = await x.w.env.Network.get(r.grant.payload.networkId).describe();
    expect(net.grants[0]).toMatchObject({ revoked: true, gone: true });
  });

  test("a grant the host never hears about is gone once it expired past the grace", async () => {
    const x = await readyAllocation();
    const r = await x.w.createConnectionGrant(C, x.id, { ...SSH, ttlSeconds: 60 });
    await x.settle(60_000 + GRANT_EXPIRY_GRACE_MS - 1_000);
    let net = await x.w.env.Network.get(r.grant.payload.networkId).describe();
    expect(net.grants[0]).toMatchObject({ revoked: false, gone: false });
    await x.settle(2_000);
    net = await x.w.env.Network.get(r.grant.payload.networkId).describe();
    expect(net.grants[0]).toMatchObject({ gone: true });
    // An expired apply is no longer handed to the host.
    await x.owner.poll();
    expect(x.owner.conns).toEqual([]);
  });
});

describe("revocation without an acknowledgement", () => {
  test("an unacknowledged revoke is redelivered on every poll until its grant expired past the grace, then dropped", async () => {
    const x = await readyAllocation();
    const r = await x.w.createConnectionGrant(C, x.id, { ...SSH, ttlSeconds: 60 });
    await x.w.revokeConnectionGrant(C, x.id, r.grant.payload.grantId);
    const revokes = async () => ((await x.owner.poll()).connections ?? []).filter((c) => c.action === "revoke").length;
    expect(await revokes()).toBe(1);
    await x.settle(30_000);
    expect(await revokes()).toBe(1);
    await x.settle(30_000 + GRANT_EXPIRY_GRACE_MS);
    expect(await revokes()).toBe(0);
    expect((await x.w.env.Network.get(r.grant.payload.networkId).describe()).grants[0]).toMatchObject({
      revoked: true,
      gone: true,
    });
  });
});

describe("replacement (CONNECTIONS_NOT_FENCED)", () => {
  test("a replacement waits until the old generation's grants are gone (host acknowledged the revoke); a grant for the old generation is then refused", async () => {
    const x = await readyAllocation(2);
    const g1 = await x.w.createConnectionGrant(C, x.id, { ...SSH, ttlSeconds: 600 });
    await x.owner.poll();
    await x.owner.ack([`${g1.grant.payload.grantId}:apply`]);
    await loseAndAuthorize(x);
    let v = await x.w.getAllocation(C, x.id);
    expect([v.state, v.generation, v.conditions]).toEqual(["releasing", 1, [CONNECTIONS_NOT_FENCED]]);
    // Closed to new grants of generation 1 while it waits.
    expect(await code(x.w.createConnectionGrant(C, x.id, SSH))).toBe("INVALID_STATE 409");
    // It stays held for as long as the old host has not confirmed.
    await x.settle(10_000);
    for (const o of x.others) await o.poll();
    v = await x.w.getAllocation(C, x.id);
    expect([v.state, v.generation]).toEqual(["releasing", 1]);
    await x.owner.poll();
    const revoke = x.owner.conns.find((c) => c.action === "revoke")!;
    expect(revoke.grantId).toBe(g1.grant.payload.grantId);
    await x.owner.ack([revoke.commandId]);
    await x.settle(1_000);
    v = await x.w.getAllocation(C, x.id);
    expect(v.generation).toBe(2);
    expect(v.conditions).not.toContain(CONNECTIONS_NOT_FENCED);
    const events = await x.w.events(C, x.id, 0, 100);
    expect(events.some((e) => e.type === "allocation.connections_not_fenced" && e.generation === 1)).toBe(true);
    const next = x.agents.find((a) => a.hostId === v.hostId)!;
    await next.run(x.id, 2);
    expect(await code(x.w.createConnectionGrant(C, x.id, { ...SSH, generation: 1 }))).toBe("STALE_GENERATION 409");
    expect((await x.w.createConnectionGrant(C, x.id, { ...SSH, generation: 2 })).grant.payload.generation).toBe(2);
  });

  test("with the old host fenced (it can never acknowledge), the replacement goes ahead once the grant expired past the grace", async () => {
    const x = await readyAllocation(2);
    const g1 = await x.w.createConnectionGrant(C, x.id, { ...SSH, ttlSeconds: 60 });
    await x.w.setHostState(O, x.owner.hostId, "disabled");
    await x.settle(1_000);
    let v = await x.w.getAllocation(C, x.id);
    expect([v.state, v.generation, v.conditions]).toEqual(["releasing", 1, [CONNECTIONS_NOT_FENCED]]);
    const expiry = g1.grant.payload.expiresAtMs + GRANT_EXPIRY_GRACE_MS;
    while (x.clock.wallMs() < expiry - 5_000) {
      await x.settle(5_000);
      for (const o of x.others) await o.poll();
    }
    v = await x.w.getAllocation(C, x.id);
    expect(v.generation).toBe(1);
    await x.settle(10_000);
    for (const o of x.others) await o.poll();
    v = await x.w.getAllocation(C, x.id);
    expect(v.generation).toBe(2);
    expect(v.hostId).not.toBe(x.owner.hostId);
  });

  test("released while held: the allocation ends released and its address returns to the Network only after its grants are gone", async () => {
    const x = await readyAllocation(2);
    const g1 = await x.w.createConnectionGrant(C, x.id, { ...SSH, ttlSeconds: 60 });
    await x.w.setHostState(O, x.owner.hostId, "disabled");
    await x.settle(1_000);
    expect((await x.w.getAllocation(C, x.id)).conditions).toEqual([CONNECTIONS_NOT_FENCED]);
    await x.w.releaseAllocation(C, x.id);
    await x.settle(1_000);
    expect((await x.w.getAllocation(C, x.id)).state).toBe("released");
    let net = await x.w.env.Network.get(g1.grant.payload.networkId).describe();
    expect(net.free).not.toContain(g1.grant.payload.allocationAddress);
    await x.settle(60_000 + GRANT_EXPIRY_GRACE_MS);
    net = await x.w.env.Network.get(g1.grant.payload.networkId).describe();
    expect(net.allocations.map((a) => a.allocationId)).not.toContain(x.id);
    expect(net.free).toContain(g1.grant.payload.allocationAddress);
  });
});

describe("the Connection (rendezvous)", () => {
  test("a candidate that names no single peer (unspecified, multicast, broadcast) is refused with the message, nothing written", async () => {
    const x = await readyAllocation();
    const r = await x.w.createConnectionGrant(C, x.id, SSH);
    for (const address of ["0.0.0.0", "255.255.255.255", "224.0.0.251", "::", "ff02::1", "1.2.3"]) {
      const cand = {
        type: "candidates" as const,
        seq: 1,
        candidates: [
          { address: "198.51.100.7", port: 40000, kind: "stun" as const },
          { address, port: 40000, kind: "local" as const },
        ],
      };
      expect(await code(x.w.connectionMessages(r.connectionId, "client", { messages: [cand] }))).toBe(
        "VALIDATION_FAILED 400",
      );
    }
    expect((await x.w.connectionPoll(r.connectionId, "host", { after: 0 })).messages).toEqual([]);
    expect((await x.w.connectionPoll(r.connectionId, "client", { after: 0 })).lastAcceptedSeq).toBe(0);
  });

  test("client and host exchange candidates with per-role sequence numbers; redeliveries are dropped; the cursor acknowledges", async () => {
    const x = await readyAllocation();
    const r = await x.w.createConnectionGrant(C, x.id, SSH);
    await x.owner.poll();
    const hostToken = x.owner.conns.find((c) => c.action === "apply")!.endpointToken!;
    expect(await x.w.authenticateEndpoint(`Bearer ${hostToken}`, r.connectionId)).toBe("host");
    const cand = {
      type: "candidates" as const,
      seq: 1,
      candidates: [{ address: "198.51.100.7", port: 40000, kind: "stun" as const }],
    };
    expect(await x.w.connectionMessages(r.connectionId, "client", { messages: [cand] })).toMatchObject({
      role: "client",
      lastAcceptedSeq: 1,
      closed: false,
    });
    // A redelivery of seq 1 is dropped.
    await x.w.connectionMessages(r.connectionId, "client", { messages: [cand] });
    const seen = await x.w.connectionPoll(r.connectionId, "host", { after: 0 });
    expect(seen.messages).toEqual([cand]);
    const again = await x.w.connectionPoll(r.connectionId, "host", { after: 1 });
    expect(again.messages).toEqual([]);
    // A role never reads its own messages.
    expect((await x.w.connectionPoll(r.connectionId, "client", { after: 0 })).messages).toEqual([]);
    // A parked poll is woken by the peer's message.
    const parked = x.w.connectionPoll(r.connectionId, "client", { after: 0, waitMs: 20_000 });
    await x.w.connectionMessages(r.connectionId, "host", {
      messages: [{ type: "path_observation", seq: 1, path: "direct", via: "198.51.100.7:40000" }],
    });
    expect((await parked).messages).toEqual([
      { type: "path_observation", seq: 1, path: "direct", via: "198.51.100.7:40000" },
    ]);
  });

  test("bounds: sequence numbers must increase in a request; a role holds at most 64 unacknowledged messages (RATE_LIMITED, nothing written)", async () => {
    const x = await readyAllocation();
    const r = await x.w.createConnectionGrant(C, x.id, SSH);
    const ack = (seq: number) => ({ type: "ack" as const, seq, upTo: 0 });
    expect(await code(x.w.connectionMessages(r.connectionId, "client", { messages: [ack(2), ack(1)] }))).toBe(
      "VALIDATION_FAILED 400",
    );
    for (let s = 1; s <= 64; s += 16)
      await x.w.connectionMessages(r.connectionId, "client", {
        messages: Array.from({ length: 16 }, (_, i) => ack(s + i)),
      });
    expect(await code(x.w.connectionMessages(r.connectionId, "client", { messages: [ack(65)] }))).toBe(
      "RATE_LIMITED 429",
    );
    expect((await x.w.connectionMessages(r.connectionId, "client", { messages: [ack(64)] })).lastAcceptedSeq).toBe(64);
    // The host's cursor acknowledges them; room again.
    expect((await x.w.connectionPoll(r.connectionId, "host", { after: 0 })).messages.length).toBe(64);
    await x.w.connectionPoll(r.connectionId, "host", { after: 64 });
    expect((await x.w.connectionMessages(r.connectionId, "client", { messages: [ack(65)] })).lastAcceptedSeq).toBe(65);
  });

  test("fresh relay tokens for either role of a live grant (short-lived, never past the grant), at most one per 10 s per role; refused once the grant was revoked", async () => {
    const x = await readyAllocation();
    const r = await x.w.createConnectionGrant(C, x.id, { ...SSH, ttlSeconds: 300 });
    const g = r.grant.payload;
    // Past the first tokens' 120 s: a relay session could no longer reconnect with them.
    await x.settle(150_000);
    const now = x.clock.wallMs();
    const fresh = await x.w.connectionRelayTokens(r.connectionId, "client");
    expect(fresh).toMatchObject({ grantId: g.grantId, role: "client", expiresAtMs: g.expiresAtMs });
    const t = checkSignedRelayToken(
      fresh.relayTokens["relay-1"],
      x.keys,
      { relayId: "relay-1", grantId: g.grantId, role: "client" },
      now,
    );
    expect(t.ok && [t.payload.issuedAtMs, t.payload.expiresAtMs]).toEqual([now, now + 120_000]);
    expect(
      checkSignedRelayToken(
        r.relayTokens["relay-1"],
        x.keys,
        { relayId: "relay-1", grantId: g.grantId, role: "client" },
        now,
      ),
    ).toMatchObject({ ok: false, code: "RELAY_TOKEN_EXPIRED" });
    expect(await code(x.w.connectionRelayTokens(r.connectionId, "client"))).toBe("RATE_LIMITED 429");
    const host = await x.w.connectionRelayTokens(r.connectionId, "host");
    expect(
      checkSignedRelayToken(
        host.relayTokens["relay-1"],
        x.keys,
        { relayId: "relay-1", grantId: g.grantId, role: "host" },
        now,
      ).ok,
    ).toBe(true);
    // Near the grant's end a token ends with it.
    await x.settle(g.expiresAtMs - 30_000 - x.clock.wallMs());
    const late = await x.w.connectionRelayTokens(r.connectionId, "client");
    expect(late.relayTokens["relay-1"]!.payload.expiresAtMs).toBe(g.expiresAtMs);
    await x.w.revokeConnectionGrant(C, x.id, g.grantId);
    await x.settle(10_000);
    expect(await code(x.w.connectionRelayTokens(r.connectionId, "client"))).toBe("UNAUTHENTICATED 401");
  });

  test("the Connection ends with its grant's expiry: its tokens stop working", async () => {
    const x = await readyAllocation();
    const r = await x.w.createConnectionGrant(C, x.id, { ...SSH, ttlSeconds: 60 });
    await x.settle(61_000);
    expect(await code(x.w.authenticateEndpoint(`Bearer ${r.endpointToken}`, r.connectionId))).toBe(
      "UNAUTHENTICATED 401",
    );
  });
});
