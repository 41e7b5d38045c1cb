/**
 * Cookie replies and handshake work have a ceiling (issue 18 item 6, kind:
 * handshake-flood-unbounded): under a flood of mac1-valid initiations a
 * responder sends a bounded number of cookie replies per second per source
 * address (ports and the low 64 bits of IPv6 do not make new sources) and in
 * all, and processes a bounded number of mac2-valid handshakes; the source
 * tables are bounded; a client that holds a cookie is not locked out by a
 * spoofed cookie flood. In-process, on a fake clock.
 */
import { describe, expect, test } from "bun:test";
import { icmpEcho } from "../../test/support/ipCraft.ts";
import { selectAead } from "./aead/select.ts";
import { messageType } from "./codec.ts";
import { MESSAGE_COOKIE_REPLY, REKEY_TIMEOUT_MS } from "./constants.ts";
import { fixedLoad } from "./load.ts";
import {
  COOKIE_REPLIES_BURST,
  COOKIE_REPLIES_PER_SECOND,
  COOKIE_REPLIES_PER_SOURCE_BURST,
  COOKIE_REPLIES_PER_SOURCE_PER_SECOND,
  HANDSHAKES_BURST,
  HANDSHAKES_PER_SECOND,
  MAC1_CHECKS_BURST,
  MAC1_CHECKS_PER_SECOND,
  RATE_LIMIT_BURST,
  RATE_LIMIT_MAX_SOURCES,
  rateLimitSource,
  SourceRateLimiter,
  TokenBucket,
} from "./ratelimit.ts";
import { makePair } from "./testPair.ts";

const { aead } = await selectAead();
const ping = (seq: number) => icmpEcho("10.0.0.1", "10.0.0.2", 9, seq, new Uint8Array(8));

/** A pair whose responder b is under load, and one mac1-valid initiation from a (mac2 zero). */
function floodable() {
  const p = makePair({ aead, loadB: fixedLoad(true) });
  p.a.initiateHandshake(p.pa);
  const init = p.net.queue.shift()!.bytes;
  const cookieReplies = () => p.net.queue.filter((f) => messageType(f.bytes) === MESSAGE_COOKIE_REPLY).length;
  return { p, init, cookieReplies };
}

describe("handshake-flood-unbounded: what a source is", () => {
  test("the port is ignored, IPv6 counts by /64 (IPv4-mapped as IPv4), other endpoints as they are", () => {
    expect(rateLimitSource("192.0.2.1:5000")).toBe("192.0.2.1");
    expect(rateLimitSource("192.0.2.1:6000")).toBe("192.0.2.1");
    expect(rateLimitSource("[2001:db8:1:2::9]:5000")).toBe("2001:db8:1:2::/64");
    expect(rateLimitSource("[2001:db8:1:2:ffff:1:2:3]:1")).toBe("2001:db8:1:2::/64");
    expect(rateLimitSource("[2001:db8:1:3::9]:5000")).toBe("2001:db8:1:3::/64");
    expect(rateLimitSource("[::ffff:192.0.2.1]:7")).toBe("192.0.2.1");
    expect(rateLimitSource("relay:r1")).toBe("relay:r1");
    expect(rateLimitSource("[not-an-address]:1")).toBe("[not-an-address]:1");
  });
});

describe("handshake-flood-unbounded: buckets", () => {
  test("a token bucket gives its burst, then its rate", () => {
    const b = new TokenBucket({ perSecond: 10, burst: 3 }, 0);
    expect([b.take(0), b.take(0), b.take(0), b.take(0)]).toEqual([true, true, true, false]);
    expect(b.take(50)).toBe(false);
    expect(b.take(100)).toBe(true);
    expect(b.full(1_000)).toBe(true);
  });

  test("the global bucket bounds all sources together; a full table refuses new sources until entries age out", () => {
    const r = new SourceRateLimiter({ perSecond: 20, burst: 5 }, { perSecond: 100, burst: 10 }, 50);
    let ok = 0;
    for (let i = 0; i < 40; i++) ok += r.allow(`s${i}`, 0) ? 1 : 0;
    expect(ok).toBe(10);
    expect(r.size).toBe(40);
    for (let i = 40; i < 60; i++) r.allow(`s${i}`, 0);
    expect(r.size).toBe(50);
    expect(r.allow("late", 10)).toBe(false);
    expect(r.size).toBe(50);
    expect(r.allow("late", 1_000)).toBe(true); // pruned: every old bucket refilled
    expect(r.size).toBe(1);
  });

  test("the default handshake limiter: a burst of 5 per source", () => {
    const r = new SourceRateLimiter();
    let ok = 0;
    for (let i = 0; i < 10; i++) ok += r.allow("x", 0) ? 1 : 0;
    expect(ok).toBe(RATE_LIMIT_BURST);
  });
});

describe("handshake-flood-unbounded: a Device under a flood", () => {
  test("one address on 1,000 ports for 1 s: cookie replies stay within the per-source burst + rate", () => {
    const { p, init, cookieReplies } = floodable();
    for (let i = 0; i < 1_000; i++) {
      p.b.receiveDatagram(init, { key: `198.51.100.7:${10_000 + i}` });
      p.clock.advance(1);
    }
    const bound = COOKIE_REPLIES_PER_SOURCE_BURST + COOKIE_REPLIES_PER_SOURCE_PER_SECOND;
    expect(cookieReplies()).toBeLessThanOrEqual(bound);
    expect(p.b.counters.cookieRepliesSent).toBe(cookieReplies());
    expect(p.b.counters.drops["cookie-required"] + p.b.counters.drops["cookie-reply-limited"]).toBe(1_000);
    expect(p.b.counters.responsesSent).toBe(0);
  });

  test("10,000 spoofed addresses in 1 s: cookie replies stay within the global burst + rate; the table stays bounded", () => {
    const { p, init, cookieReplies } = floodable();
    for (let i = 0; i < 10_000; i++) {
      p.b.receiveDatagram(init, { key: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}:51820` });
      if (i % 10 === 9) p.clock.advance(1);
    }
    expect(cookieReplies()).toBeLessThanOrEqual(COOKIE_REPLIES_BURST + COOKIE_REPLIES_PER_SECOND);
    expect(cookieReplies()).toBeGreaterThan(0);
    const d = p.b.counters.drops;
    expect(d["cookie-required"]).toBe(cookieReplies());
    expect(d["cookie-reply-limited"] + d["handshake-overload"]).toBe(10_000 - cookieReplies());
    expect((p.b as unknown as { cookieLimiter: SourceRateLimiter }).cookieLimiter.size).toBeLessThanOrEqual(
      RATE_LIMIT_MAX_SOURCES,
    );
  });

  test("20,000 junk handshake messages in 1 s: at most the mac1 budget is verified, the rest dropped unverified", () => {
    const { p, init } = floodable();
    const junk = Uint8Array.from(init);
    junk[120] = junk[120]! ^ 1; // mac1 wrong
    for (let i = 0; i < 20_000; i++) {
      p.b.receiveDatagram(junk, { key: `10.1.${(i >> 8) & 255}.${i & 255}:1` });
      if (i % 20 === 19) p.clock.advance(1);
    }
    const d = p.b.counters.drops;
    expect(d["mac1-invalid"]).toBeLessThanOrEqual(MAC1_CHECKS_BURST + MAC1_CHECKS_PER_SECOND);
    expect(d["mac1-invalid"] + d["handshake-overload"]).toBe(20_000);
  });

  test("a client that holds a cookie still handshakes while a spoofed flood exhausts the cookie replies", () => {
    const { p, init } = floodable();
    p.net.queue.length = 0;
    // a gets its cookie first (its own initiation, answered).
    p.net.inject("a", "b", init);
    p.net.pump();
    expect(p.pa.cookies.hasFreshCookie()).toBe(true);
    for (let i = 0; i < 5_000; i++) p.b.receiveDatagram(init, { key: `10.9.${(i >> 8) & 255}.${i & 255}:1` });
    expect(p.b.counters.drops["cookie-reply-limited"]).toBeGreaterThan(0);
    p.net.queue.length = 0;
    p.a.sendPacket(ping(1));
    p.run(REKEY_TIMEOUT_MS + 400);
    expect(p.a.counters.handshakesCompleted).toBe(1);
  });

  test("a mac2-valid initiation replayed 100 times at once: 5 are processed (the per-source burst), 95 refused unprocessed", () => {
    const { p, init } = floodable();
    p.net.inject("a", "b", init);
    p.net.pump(); // a's cookie
    p.net.queue.length = 0;
    p.clock.advance(REKEY_TIMEOUT_MS);
    p.a.initiateHandshake(p.pa);
    const withMac2 = p.net.queue.shift()!.bytes;
    for (let i = 0; i < 100; i++) p.net.inject("a", "b", withMac2);
    expect(p.b.counters.drops["rate-limited"]).toBe(100 - RATE_LIMIT_BURST);
    expect(
      p.b.counters.responsesSent + p.b.counters.drops["timestamp-replayed"] + p.b.counters.drops["initiation-flood"],
    ).toBe(RATE_LIMIT_BURST);
  });

  test("the global handshake bound is part of the defaults", () => {
    expect(HANDSHAKES_PER_SECOND).toBeGreaterThan(0);
    expect(HANDSHAKES_BURST).toBeLessThanOrEqual(HANDSHAKES_PER_SECOND);
  });
});
