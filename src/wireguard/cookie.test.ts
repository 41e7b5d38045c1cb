/**
 * Cookie replies under load (whitepaper §5.3, §5.4.7), in-process with two
 * Devices on a fake clock: a responder under load answers an initiation
 * without mac2 with a 64-byte cookie reply instead of a response; the
 * initiator stores the cookie and its next retransmission (after
 * REKEY_TIMEOUT) carries mac2, which the responder accepts. Also: a forged
 * cookie reply is refused; mac1 keyed for another Device is refused; the
 * load meter's threshold and the per-source rate limit.
 */
import { describe, expect, test } from "bun:test";
import { icmpEcho } from "../../test/support/ipCraft.ts";
import { selectAead } from "./aead/select.ts";
import { messageType } from "./codec.ts";
import { COOKIE_REPLY_BYTES, MESSAGE_COOKIE_REPLY, MESSAGE_INITIATION, REKEY_TIMEOUT_MS } from "./constants.ts";
import { COOKIE_USE_MAX_AGE_MS } from "./cookie.ts";
import { fixedLoad, HandshakeLoadMeter } from "./load.ts";
import { RATE_LIMIT_BURST, SourceRateLimiter } from "./ratelimit.ts";
import { makePair } from "./testPair.ts";

const { aead } = await selectAead();
const ping = (seq: number) => icmpEcho("10.0.0.1", "10.0.0.2", 9, seq, new Uint8Array(8));

describe("cookie replies under load", () => {
  test("an initiation without mac2 gets a cookie reply; the retry with mac2 completes the handshake", () => {
    const p = makePair({ aead, loadB: fixedLoad(true) });
    p.a.sendPacket(ping(1));
    p.net.pump();
    const fromB = p.net.log.filter((f) => f.from === "b");
    expect(fromB.map((f) => messageType(f.bytes))).toEqual([MESSAGE_COOKIE_REPLY]);
    expect(fromB[0]!.bytes.length).toBe(COOKIE_REPLY_BYTES);
    expect(p.b.counters.drops["cookie-required"]).toBe(1);
    expect(p.a.counters.cookieRepliesAccepted).toBe(1);
    expect(p.pa.cookies.hasFreshCookie()).toBe(true);
    expect(p.a.counters.handshakesCompleted).toBe(0);
    // No immediate retry: the cookie is used by the next retransmission.
    p.run(REKEY_TIMEOUT_MS + 400);
    expect(p.a.counters.handshakesCompleted).toBe(1);
    expect(p.net.delivered.get("b")!.length).toBe(1);
    const inits = p.net.log.filter((f) => messageType(f.bytes) === MESSAGE_INITIATION);
    expect(inits.length).toBe(2);
    expect(inits[0]!.bytes.subarray(132).every((x) => x === 0)).toBe(true);
    expect(inits[1]!.bytes.subarray(132).some((x) => x !== 0)).toBe(true);
  });

  test("a cookie expires: after COOKIE_USE_MAX_AGE the initiator sends mac2 = 0 again and gets a new cookie", () => {
    const p = makePair({ aead, loadB: fixedLoad(true) });
    p.a.sendPacket(ping(1));
    p.run(REKEY_TIMEOUT_MS + 400);
    expect(p.a.counters.handshakesCompleted).toBe(1);
    p.clock.advance(COOKIE_USE_MAX_AGE_MS);
    expect(p.pa.cookies.hasFreshCookie()).toBe(false);
    p.a.initiateHandshake(p.pa);
    p.net.pump();
    expect(p.a.counters.cookieRepliesAccepted).toBe(2);
  });

  test("the responder's response is cookie-checked too when the initiator is under load", () => {
    const p = makePair({ aead, loadA: fixedLoad(true) });
    p.a.sendPacket(ping(1));
    p.net.pump();
    expect(p.a.counters.drops["cookie-required"]).toBe(1);
    expect(p.b.counters.cookieRepliesAccepted).toBe(1);
    // a retransmits after REKEY_TIMEOUT; b's new response now carries mac2.
    p.run(REKEY_TIMEOUT_MS + 400);
    expect(p.a.counters.handshakesCompleted).toBe(1);
  });

  test("forged or misaddressed cookie replies are refused; mac1 for another key is refused", () => {
    const p = makePair({ aead, loadB: fixedLoad(true) });
    p.net.filter = (f) => (messageType(f.bytes) === MESSAGE_COOKIE_REPLY ? "hold" : "pass");
    p.a.sendPacket(ping(1));
    p.net.pump();
    const reply = p.net.held.pop()!.bytes;
    const forged = Uint8Array.from(reply);
    forged[40] = forged[40]! ^ 1;
    p.net.inject("b", "a", forged);
    expect(p.a.counters.drops["cookie-invalid"]).toBe(1);
    const wrongIndex = Uint8Array.from(reply);
    wrongIndex[4] = wrongIndex[4]! ^ 0xff;
    p.net.inject("b", "a", wrongIndex);
    expect(p.a.counters.drops["cookie-invalid"]).toBe(2);
    p.net.inject("b", "a", reply);
    expect(p.a.counters.cookieRepliesAccepted).toBe(1);
    p.net.inject("b", "a", reply); // only one reply per mac1 sent
    expect(p.a.counters.drops["cookie-invalid"]).toBe(3);
    const init = Uint8Array.from(p.net.log.find((f) => messageType(f.bytes) === MESSAGE_INITIATION)!.bytes);
    init[120] = init[120]! ^ 1; // inside mac1
    p.net.inject("a", "b", init);
    expect(p.b.counters.drops["mac1-invalid"]).toBe(1);
  });

  test("HandshakeLoadMeter: under load above the threshold per second, and for 1 s after", () => {
    const m = new HandshakeLoadMeter(10);
    for (let i = 0; i < 10; i++) m.note(1_000 + i);
    expect(m.underLoad(1_010)).toBe(false);
    m.note(1_011);
    expect(m.underLoad(1_011)).toBe(true);
    expect(m.underLoad(2_010)).toBe(true);
    expect(m.underLoad(2_012)).toBe(false);
  });

  test("a burst of initiations trips the default-style meter and later ones get cookie replies", () => {
    const p = makePair({ aead, loadB: new HandshakeLoadMeter(5) });
    for (let i = 0; i < 20; i++) {
      p.clock.advance(REKEY_TIMEOUT_MS); // a's own limit between initiations
      p.a.initiateHandshake(p.pa);
      p.net.pump();
    }
    expect(p.b.counters.cookieRepliesSent).toBe(0); // 20 over 100 s is no load
    const q = makePair({ aead, loadB: new HandshakeLoadMeter(5) });
    q.a.initiateHandshake(q.pa);
    const init = q.net.queue.shift()!.bytes;
    for (let i = 0; i < 10; i++) q.net.inject("a", "b", init);
    // The first 5 are below the threshold (1 response, 4 replayed timestamps); the next 5 get cookie replies.
    expect(q.b.counters.responsesSent).toBe(1);
    expect(q.b.counters.drops["timestamp-replayed"]).toBe(4);
    expect(q.b.counters.cookieRepliesSent).toBe(5);
  });

  test("SourceRateLimiter: a burst of 5 then 20 per second per source", () => {
    const r = new SourceRateLimiter();
    let ok = 0;
    for (let i = 0; i < 10; i++) ok += r.allow("x", 0) ? 1 : 0;
    expect(ok).toBe(RATE_LIMIT_BURST);
    expect(r.allow("y", 0)).toBe(true);
    expect(r.allow("x", 50)).toBe(true);
    expect(r.allow("x", 50)).toBe(false);
    r.prune(10_000);
    expect(r.size).toBe(0);
  });
});
