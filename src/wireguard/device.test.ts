/**
 * Two of our Devices in-process on a fake clock (MemoryNet + FakeClock):
 * handshake and data both ways, keepalives, rekey after REKEY_AFTER_TIME,
 * REJECT_AFTER_TIME, REKEY_AFTER_MESSAGES (shortened to 50 in this test
 * only, via the Device's `limits` option), retransmission and giving up
 * after REKEY_ATTEMPT_TIME, zeroing after 3 × REJECT_AFTER_TIME, a peer
 * restart, cryptokey routing, and timestamp/counter replay rejection.
 * Cookie replies under load are in cookie.test.ts.
 */
import { describe, expect, test } from "bun:test";
import { icmpEcho, parseIcmpEcho, udpPacket } from "../../test/support/ipCraft.ts";
import { nobleAead } from "./aead/noble.ts";
import { selectAead } from "./aead/select.ts";
import { sodiumWasmAead } from "./aead/sodiumWasm.ts";
import {
  KEEPALIVE_TIMEOUT_MS,
  MESSAGE_INITIATION,
  MESSAGE_TRANSPORT,
  REJECT_AFTER_TIME_MS,
  REKEY_AFTER_TIME_MS,
  REKEY_ATTEMPT_TIME_MS,
  REKEY_TIMEOUT_MS,
} from "./constants.ts";
import { messageType } from "./codec.ts";
import { DEFAULT_LIMITS } from "./limits.ts";
import { makePair } from "./testPair.ts";
import { Device } from "./device.ts";
import type { MemEndpoint } from "./fakeNet.ts";

const { aead } = await selectAead();
const ping = (seq: number, from = "10.0.0.1", to = "10.0.0.2") =>
  icmpEcho(from, to, 7, seq, new TextEncoder().encode(`hello ${seq}`));
const typesOf = (frames: { bytes: Uint8Array }[]) => frames.map((f) => messageType(f.bytes));

describe("Device handshake and transport", () => {
  for (const provider of ["selected", "sodium-wasm", "noble"] as const) {
    test(`first packet triggers a handshake, then flows both ways (AEAD ${provider})`, async () => {
      const impl = provider === "selected" ? aead : provider === "noble" ? nobleAead() : await sodiumWasmAead();
      const p = makePair({ aead: impl });
      p.a.sendPacket(ping(1));
      expect(p.pa.stagedCount).toBe(1);
      p.net.pump();
      expect(p.a.counters.handshakesCompleted).toBe(1);
      const atB = p.net.delivered.get("b")!;
      expect(atB.length).toBe(1);
      expect(parseIcmpEcho(atB[0]!.packet)).toMatchObject({ src: "10.0.0.1", dst: "10.0.0.2", seq: 1, reply: false });
      // b answers over its now-confirmed session; IPv6 too.
      p.b.sendPacket(icmpEcho("10.0.0.2", "10.0.0.1", 7, 1, new Uint8Array(3), true));
      p.b.sendPacket(udpPacket("fd00::2", "fd00::1", 5000, 53, new Uint8Array(100)));
      p.net.pump();
      expect(p.net.delivered.get("a")!.length).toBe(2);
      expect(p.b.counters.handshakesCompleted).toBe(1);
      expect(p.a.counters.drops).toEqual(p.b.counters.drops); // all zero
      expect(Object.values(p.a.counters.drops).every((n) => n === 0)).toBe(true);
    });
  }

  test("the handshake datagrams are 148 and 92 bytes; transport is padded to 16 and carries a 16-byte header and tag", () => {
    const p = makePair({ aead });
    p.a.sendPacket(ping(1));
    p.net.pump();
    const [init, resp, data] = p.net.log;
    expect(init!.bytes.length).toBe(148);
    expect(resp!.bytes.length).toBe(92);
    const ipLen = ping(1).length;
    expect(data!.bytes.length).toBe(16 + Math.ceil(ipLen / 16) * 16 + 16);
  });

  test("a pre-shared key on both sides works; a mismatched one fails the handshake", () => {
    const psk = new Uint8Array(32).fill(9);
    const p = makePair({ aead, presharedKey: psk });
    p.a.sendPacket(ping(1));
    p.net.pump();
    expect(p.net.delivered.get("b")!.length).toBe(1);
    const q = makePair({ aead, seed: 7 });
    q.b.addPeer({
      publicKey: q.a.publicKey,
      endpoint: q.net.endpoint("a"),
      allowedIps: ["10.0.0.1/32"],
      presharedKey: psk,
    });
    q.a.sendPacket(ping(1));
    q.net.pump();
    expect(q.a.counters.drops["handshake-invalid"]).toBe(1);
    expect(q.net.delivered.get("b")!.length).toBe(0);
  });

  test("keepalive: the receiver of data with nothing to send answers after KEEPALIVE_TIMEOUT", () => {
    const p = makePair({ aead });
    p.a.sendPacket(ping(1));
    p.net.pump();
    const before = p.b.counters.keepalivesSent;
    p.a.sendPacket(ping(2));
    p.run(KEEPALIVE_TIMEOUT_MS - 1);
    expect(p.b.counters.keepalivesSent).toBe(before);
    p.run(2);
    expect(p.b.counters.keepalivesSent).toBe(before + 1);
    expect(p.a.counters.keepalivesReceived).toBeGreaterThanOrEqual(1);
    // The keepalive counts as a reply: a does not start a new handshake 15 s after its data.
    p.run(KEEPALIVE_TIMEOUT_MS + REKEY_TIMEOUT_MS + 1_000);
    expect(p.a.counters.initiationsSent).toBe(1);
  });

  test("rekey after REKEY_AFTER_TIME: the initiator's next send starts a new handshake; the old session stays accepted as previous", () => {
    const p = makePair({ aead });
    p.a.sendPacket(ping(1));
    p.net.pump();
    const first = p.pa.keypairs.current!;
    p.run(REKEY_AFTER_TIME_MS - 1_000);
    p.a.sendPacket(ping(2));
    p.net.pump();
    expect(p.a.counters.initiationsSent).toBe(1);
    p.run(2_000);
    p.a.sendPacket(ping(3));
    p.net.pump();
    expect(p.a.counters.initiationsSent).toBe(2);
    expect(p.pa.keypairs.current).not.toBe(first);
    expect(p.pa.keypairs.previous).toBe(first);
    expect(p.net.delivered.get("b")!.length).toBe(3);
  });

  test("REJECT_AFTER_TIME: a session is not used after 180 s, and a packet sealed on it is dropped on receipt", () => {
    const p = makePair({ aead });
    p.a.sendPacket(ping(1));
    p.net.pump();
    p.net.filter = (f) => (f.from === "a" && messageType(f.bytes) === MESSAGE_TRANSPORT ? "hold" : "pass");
    p.a.sendPacket(ping(2));
    p.net.pump();
    p.net.filter = () => "pass";
    const late = p.net.held.pop()!;
    p.net.queue.length = 0;
    p.clock.advance(REJECT_AFTER_TIME_MS);
    p.net.inject("a", "b", late.bytes);
    expect(p.b.counters.drops["session-expired"]).toBe(1);
    expect(p.net.delivered.get("b")!.length).toBe(1);
    // Sending now stages the packet and handshakes first.
    const sentBefore = p.a.counters.initiationsSent;
    p.a.sendPacket(ping(3));
    expect(p.pa.stagedCount).toBe(1);
    expect(p.a.counters.initiationsSent).toBe(sentBefore + 1);
    p.net.pump();
    expect(p.net.delivered.get("b")!.length).toBe(2);
  });

  test("REKEY_AFTER_MESSAGES (shortened to 50 in this test): the sender rehandshakes once it sent more than 50 messages", () => {
    const p = makePair({ aead, limits: { ...DEFAULT_LIMITS, rekeyAfterMessages: 50 } });
    p.a.sendPacket(ping(0));
    p.net.pump();
    p.clock.advance(REKEY_TIMEOUT_MS); // initiations are at least REKEY_TIMEOUT apart
    for (let i = 1; i <= 49; i++) {
      p.a.sendPacket(ping(i));
      p.net.pump();
    }
    expect(p.a.counters.initiationsSent).toBe(1);
    const first = p.pa.keypairs.current!;
    p.a.sendPacket(ping(50));
    p.net.pump();
    expect(first.sendCounter).toBe(51);
    expect(p.a.counters.initiationsSent).toBe(2);
    expect(p.pa.keypairs.current).not.toBe(first);
    expect(p.net.delivered.get("b")!.length).toBe(51);
  });

  test("an unanswered initiation is retransmitted every REKEY_TIMEOUT and given up after REKEY_ATTEMPT_TIME, dropping staged packets", () => {
    const p = makePair({ aead });
    p.net.filter = (f) => (f.to === "b" ? "drop" : "pass");
    p.a.sendPacket(ping(1));
    p.run(REKEY_TIMEOUT_MS + 400);
    expect(p.a.counters.initiationsSent).toBe(2);
    p.run(REKEY_ATTEMPT_TIME_MS + 10_000);
    const sent = p.a.counters.initiationsSent;
    expect(sent).toBe(1 + Math.floor(REKEY_ATTEMPT_TIME_MS / REKEY_TIMEOUT_MS));
    expect(p.a.counters.drops["handshake-gave-up"]).toBe(1);
    expect(p.pa.stagedCount).toBe(0);
    p.run(60_000);
    expect(p.a.counters.initiationsSent).toBe(sent);
  });

  test("no data back for KEEPALIVE + REKEY_TIMEOUT after sending: a new handshake", () => {
    const p = makePair({ aead });
    p.a.sendPacket(ping(1));
    p.net.pump();
    p.net.filter = (f) => (f.to === "a" && messageType(f.bytes) === MESSAGE_TRANSPORT ? "drop" : "pass");
    p.a.sendPacket(ping(2));
    p.run(KEEPALIVE_TIMEOUT_MS + REKEY_TIMEOUT_MS + 400);
    expect(p.a.counters.initiationsSent).toBe(2);
  });

  test("all key material is zeroed after 3 × REJECT_AFTER_TIME without a new session", () => {
    const p = makePair({ aead });
    p.a.sendPacket(ping(1));
    p.net.pump();
    expect(p.pa.keypairs.current).not.toBeNull();
    p.run(3 * REJECT_AFTER_TIME_MS + 1);
    expect(p.pa.keypairs.current).toBeNull();
    expect(p.pb.keypairs.current).toBeNull();
  });

  test("persistent keepalive sends a keepalive every interval", () => {
    const p = makePair({ aead });
    p.a.sendPacket(ping(1));
    p.net.pump();
    p.pa.timers.persistentKeepaliveMs = 25_000;
    p.a.sendPacket(ping(2));
    p.net.pump();
    const k0 = p.a.counters.keepalivesSent;
    p.run(100_000);
    // b's passive keepalives re-arm it until 20 s; then every 25 s of silence: at 45, 70 and 95 s.
    expect(p.a.counters.keepalivesSent - k0).toBe(3);
  });

  test("peer restart: a new handshake with a later timestamp; the restarted side rejects the old session; an old initiation is refused", () => {
    const p = makePair({ aead });
    p.b.sendPacket(ping(1, "10.0.0.2", "10.0.0.1"));
    p.net.pump();
    const oldInit = p.net.log.find((f) => f.from === "b" && messageType(f.bytes) === MESSAGE_INITIATION)!;
    // A packet a sealed on the old session, held back until after the restart.
    p.net.filter = (f) => (f.from === "a" && messageType(f.bytes) === MESSAGE_TRANSPORT ? "hold" : "pass");
    p.a.sendPacket(ping(2));
    p.net.pump();
    p.net.filter = () => "pass";
    const oldData = p.net.held.pop()!;
    p.clock.advance(1_000);
    p.restartB();
    p.net.inject("a", "b", oldData.bytes);
    expect(p.b.counters.drops["unknown-index"]).toBe(1);
    p.b.sendPacket(ping(3, "10.0.0.2", "10.0.0.1"));
    p.net.pump();
    expect(p.b.counters.handshakesCompleted).toBe(1);
    expect(p.net.delivered.get("a")!.length).toBe(2);
    // Replaying the pre-restart initiation is refused by its timestamp.
    p.net.inject("b", "a", oldInit.bytes);
    expect(p.a.counters.drops["timestamp-replayed"]).toBe(1);
    // After one more handshake, a no longer accepts anything sealed on the first session.
    const oldFromB = p.net.log.find((f) => f.from === "b" && messageType(f.bytes) === MESSAGE_TRANSPORT)!;
    p.clock.advance(REKEY_TIMEOUT_MS);
    p.a.initiateHandshake(p.pa);
    p.net.pump();
    p.net.inject("b", "a", oldFromB.bytes);
    expect(p.a.counters.drops["unknown-index"]).toBe(1);
  });

  test("cryptokey routing: a decrypted packet with a source outside the peer's allowed IPs is dropped; no route drops too", () => {
    const p = makePair({ aead });
    p.a.sendPacket(ping(1));
    p.net.pump();
    p.b.sendPacket(ping(2, "10.0.0.9", "10.0.0.1"));
    p.net.pump();
    expect(p.a.counters.drops["source-not-allowed"]).toBe(1);
    p.a.sendPacket(ping(3, "10.0.0.1", "10.9.9.9"));
    expect(p.a.counters.drops["no-route"]).toBe(1);
    p.a.sendPacket(new Uint8Array([0x45, 0, 0]));
    expect(p.a.counters.drops["packet-invalid"]).toBe(1);
    expect(p.net.delivered.get("a")!.length).toBe(0);
  });

  test("replayed transport datagrams are dropped; reordering within the window is accepted", () => {
    const p = makePair({ aead });
    p.a.sendPacket(ping(0));
    p.net.pump();
    p.net.filter = (f) => (f.from === "a" && messageType(f.bytes) === MESSAGE_TRANSPORT ? "hold" : "pass");
    for (let i = 1; i <= 20; i++) p.a.sendPacket(ping(i));
    p.net.pump();
    const held = p.net.held.splice(0);
    for (const f of held.reverse()) p.net.inject("a", "b", f.bytes);
    expect(p.net.delivered.get("b")!.length).toBe(21);
    for (const f of held) p.net.inject("a", "b", f.bytes);
    expect(p.b.counters.drops["counter-replayed"]).toBe(20);
    expect(p.net.delivered.get("b")!.length).toBe(21);
  });

  test("initiations closer than 50 ms from one peer are refused as a flood", () => {
    const p = makePair({ aead });
    p.a.initiateHandshake(p.pa);
    const first = p.net.queue.shift()!;
    // A second Device with a's key, 20 ms later (a's own REKEY_TIMEOUT limit would not send so soon).
    p.clock.advance(20);
    const twin = new Device<MemEndpoint>({
      privateKey: p.keyA,
      clock: p.clock,
      random: p.rng,
      aead,
      io: p.net.io("twin"),
    });
    twin.initiateHandshake(twin.addPeer({ publicKey: p.b.publicKey, endpoint: p.net.endpoint("b") }));
    const second = p.net.queue.shift()!;
    p.net.inject("a", "b", first.bytes);
    p.net.inject("a", "b", second.bytes);
    expect(p.b.counters.drops["initiation-flood"]).toBe(1);
    expect(p.b.counters.responsesSent).toBe(1);
  });

  test("removing a peer stops its timers and frees its indices", () => {
    const p = makePair({ aead });
    p.a.sendPacket(ping(1));
    p.net.pump();
    p.a.removePeer(p.b.publicKey);
    expect(p.a.nextDeadlineMs()).toBeNull();
    p.a.sendPacket(ping(2));
    expect(p.a.counters.drops["no-route"]).toBe(1);
  });
});
