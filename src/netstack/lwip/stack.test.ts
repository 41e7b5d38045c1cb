/**
 * Two lwIP stacks joined back to back by an in-memory link (packets handed
 * over on the next macrotask, like a wire): connect/accept, byte-exact
 * transfers both ways over IPv4 and IPv6, half-close, refusal, reset,
 * backpressure bounds, connect timeout on a fake clock, argument errors.
 * The kernel interop of the same stack is in test/integration/netstack-tun.test.ts.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { createNetstack, NetstackError, type Netstack, type TcpConnection } from "../index.ts";
import { DRAIN_STALL_LIMIT_MS, TCP_WINDOW_BYTES } from "../limits.ts";
import { FakeTimers } from "../timers.fake.ts";

/** A wire between two stacks: packets cross on the next macrotask; `drop` loses them. */
function pair(opts: { timers?: FakeTimers; drop?: () => boolean; receiveBudgetBytes?: number } = {}) {
  const queues: [Uint8Array[], Uint8Array[]] = [[], []];
  let scheduled = false;
  const stacks: Netstack[] = [];
  const deliver = () => {
    scheduled = false;
    for (let i = 0; i < 2; i++) {
      const q = queues[i]!.splice(0);
      if (q.length) stacks[1 - i]!.inputBatch(q);
    }
  };
  const out = (i: number) => (p: Uint8Array) => {
    if (opts.drop?.()) return;
    queues[i]!.push(p.slice());
    if (!scheduled) {
      scheduled = true;
      setImmediate(deliver);
    }
  };
  const a = createNetstack({
    ipv4: { address: "10.1.0.1", prefixLength: 24 },
    ipv6: ["fd00:1::1"],
    output: out(0),
    ...(opts.timers ? { timers: opts.timers } : {}),
  });
  const b = createNetstack({
    ipv4: { address: "10.1.0.2", prefixLength: 24 },
    ipv6: ["fd00:1::2"],
    output: out(1),
    ...(opts.timers ? { timers: opts.timers } : {}),
    ...(opts.receiveBudgetBytes ? { receiveBudgetBytes: opts.receiveBudgetBytes } : {}),
  });
  stacks.push(a, b);
  return { a, b };
}

const open: Netstack[] = [];
afterEach(() => {
  for (const s of open.splice(0)) s.close();
});
function track<T extends { a: Netstack; b: Netstack }>(p: T): T {
  open.push(p.a, p.b);
  return p;
}

/** Deterministic pseudo-random bytes (xorshift32). */
function pattern(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  let x = seed || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x & 0xff;
  }
  return out;
}

async function readAll(c: TcpConnection): Promise<{ bytes: number; sha: string }> {
  const h = createHash("sha256");
  let bytes = 0;
  for (let chunk = await c.read(); chunk; chunk = await c.read()) {
    h.update(chunk);
    bytes += chunk.length;
  }
  return { bytes, sha: h.digest("hex") };
}

async function writeAll(c: TcpConnection, data: Uint8Array, chunk = 100_000): Promise<void> {
  for (let o = 0; o < data.length; o += chunk) await c.write(data.subarray(o, o + chunk));
}

const sha = (d: Uint8Array) => createHash("sha256").update(d).digest("hex");

function accepted(s: Netstack, host: string, port: number): Promise<TcpConnection> {
  return new Promise((resolve) => {
    const l = s.listen(host, port, (c) => {
      l.close();
      resolve(c);
    });
  });
}

describe("lwIP stack, two instances back to back", () => {
  for (const [family, server, any] of [
    ["IPv4", "10.1.0.2", "0.0.0.0"],
    ["IPv6", "fd00:1::2", "::"],
  ] as const) {
    test(`${family}: 4 MiB each way byte-exact, with half-close in between`, async () => {
      const { a, b } = track(pair());
      const up = pattern(4 << 20, 7);
      const down = pattern(4 << 20, 11);
      const serverSide = accepted(b, any, 8080);
      const client = await a.connect(server, 8080);
      const srv = await serverSide;
      expect(srv.remoteAddress).toBe(client.localAddress);
      expect(srv.remotePort).toBe(client.localPort);
      expect(client.remoteAddress).toBe(server);
      // client sends and half-closes; server reads to EOF, then answers and closes.
      const sending = writeAll(client, up).then(() => client.closeWrite());
      const got = await readAll(srv);
      await sending;
      expect(got).toEqual({ bytes: up.length, sha: sha(up) });
      const answering = writeAll(srv, down).then(() => srv.close());
      const back = await readAll(client);
      await answering;
      expect(back).toEqual({ bytes: down.length, sha: sha(down) });
      expect(await client.ended).toEqual({ reason: "closed" });
      expect(await srv.ended).toEqual({ reason: "closed" });
      expect(a.stats().connections).toBe(0);
      expect(b.stats().connections).toBe(0);
    });
  }

  test("connect to a port nobody listens on is refused", async () => {
    const { a } = track(pair());
    const e = await a.connect("10.1.0.2", 9).catch((e) => e);
    expect(e).toBeInstanceOf(NetstackError);
    expect((e as NetstackError).code).toBe("refused");
  });

  test("abort resets the peer: its read rejects with reset", async () => {
    const { a, b } = track(pair());
    const serverSide = accepted(b, "10.1.0.2", 8081);
    const client = await a.connect("10.1.0.2", 8081);
    const srv = await serverSide;
    await client.write(new Uint8Array([1, 2, 3]));
    expect([...(await srv.read())!]).toEqual([1, 2, 3]);
    const pending = srv.read();
    client.abort();
    expect(((await pending.catch((e) => e)) as NetstackError).code).toBe("reset");
    expect(((await client.write(new Uint8Array(1)).catch((e) => e)) as NetstackError).code).toBe("aborted");
    expect((await srv.ended).reason).toBe("error");
  });

  test("a reader that stops reading stops the writer at the window; nothing is lost", async () => {
    const { a, b } = track(pair());
    const serverSide = accepted(b, "10.1.0.2", 8082);
    const client = await a.connect("10.1.0.2", 8082);
    const srv = await serverSide;
    const data = pattern(8 << 20, 3);
    let written = 0;
    const writing = (async () => {
      for (let o = 0; o < data.length; o += 65536) {
        await client.write(data.subarray(o, o + 65536));
        written = o + 65536;
      }
      await client.closeWrite();
    })();
    await Bun.sleep(300);
    // The server has read nothing: it holds at most one window, the client's stack one send buffer.
    expect(b.stats().receiveBufferedBytes).toBeLessThanOrEqual(TCP_WINDOW_BYTES);
    expect(b.stats().receiveBufferedBytes).toBeGreaterThan(0);
    expect(written).toBeLessThan(data.length);
    expect(a.stats().writeQueuedBytes).toBeLessThanOrEqual(65536);
    const got = await readAll(srv);
    await writing;
    expect(got).toEqual({ bytes: data.length, sha: sha(data) });
  });

  test("unread data across connections stays within the receive budget; refused segments arrive later, byte-exact", async () => {
    const BUDGET = 2 << 20;
    const { a, b } = track(pair({ receiveBudgetBytes: BUDGET }));
    const PER = 256 * 1024;
    const COUNT = 12; // 3 MiB in flight: more than the budget in total, one window each
    const servers: TcpConnection[] = [];
    b.listen("10.1.0.2", 8083, (c) => servers.push(c));
    const clients = await Promise.all(Array.from({ length: COUNT }, () => a.connect("10.1.0.2", 8083)));
    const sending = clients.map((c, i) => c.write(pattern(PER, 500 + i)).then(() => c.closeWrite()));
    for (let i = 0; i < 200 && b.stats().receiveBufferedBytes < BUDGET - PER; i++) await Bun.sleep(20);
    await Bun.sleep(200);
    expect(b.stats().receiveBufferedBytes).toBeGreaterThan(BUDGET - PER);
    expect(b.stats().receiveBufferedBytes).toBeLessThanOrEqual(BUDGET);
    expect(servers).toHaveLength(COUNT);
    // Map each server connection to its client by port, then read everything.
    const byPort = new Map(clients.map((c, i) => [c.localPort, i]));
    const results = await Promise.all(
      servers.map(async (s) => ({ i: byPort.get(s.remotePort)!, got: await readAll(s) })),
    );
    await Promise.all(sending);
    for (const r of results) expect(r.got).toEqual({ bytes: PER, sha: sha(pattern(PER, 500 + r.i)) });
    expect(b.stats().receiveBufferedBytes).toBe(0);
  }, 60_000);

  test("closed-connection-held-by-a-peer-that-never-reads: after close() the peer gets DRAIN_STALL_LIMIT_MS to take the rest, then a reset (fake clock)", async () => {
    const timers = new FakeTimers();
    const { a, b } = track(pair({ timers }));
    const serverSide = accepted(b, "10.1.0.2", 8090);
    const cp = a.connect("10.1.0.2", 8090);
    for (let i = 0; i < 20; i++) await Bun.sleep(0);
    const client = await cp;
    const srv = await serverSide;
    const chunk = pattern(65536, 9);
    for (let i = 0; i < 200; i++) {
      const done = await Promise.race([client.write(chunk).then(() => true), Bun.sleep(30).then(() => false)]);
      if (!done) break;
    }
    expect(a.stats().writeQueuedBytes + TCP_WINDOW_BYTES).toBeGreaterThan(TCP_WINDOW_BYTES); // the window is full
    let closed = false;
    void client.close().then(() => (closed = true));
    // Half the limit: still held (the peer may yet read).
    for (let t = 0; t < DRAIN_STALL_LIMIT_MS / 2; t += 500) {
      timers.advance(500);
      await Bun.sleep(1);
    }
    expect(closed).toBe(false);
    expect(a.stats().connections).toBe(1);
    for (let t = 0; t < DRAIN_STALL_LIMIT_MS; t += 500) {
      timers.advance(500);
      await Bun.sleep(1);
    }
    expect(await client.ended).toMatchObject({ reason: "error", code: "timeout" });
    expect(closed).toBe(true);
    expect(a.stats().connections).toBe(0);
    expect(a.stats().writeQueuedBytes).toBe(0);
    expect(((await srv.ended) as { code?: string }).code).toBe("reset");
  }, 60_000);

  test("a peer that reads after a while within the limit gets everything after close() (fake clock)", async () => {
    const timers = new FakeTimers();
    const { a, b } = track(pair({ timers }));
    const serverSide = accepted(b, "10.1.0.2", 8091);
    const cp = a.connect("10.1.0.2", 8091);
    for (let i = 0; i < 20; i++) await Bun.sleep(0);
    const client = await cp;
    const srv = await serverSide;
    const data = pattern(1 << 20, 10);
    const writing = client.write(data).then(() => client.close());
    for (let t = 0; t < DRAIN_STALL_LIMIT_MS / 2; t += 500) {
      timers.advance(500);
      await Bun.sleep(1);
    }
    const reading = readAll(srv);
    for (let i = 0; i < 2_000; i++) {
      timers.advance(20);
      await Bun.sleep(0);
      if (a.stats().connections === 0) break;
    }
    await writing;
    expect(await reading).toEqual({ bytes: data.length, sha: sha(data) });
    expect(await client.ended).toEqual({ reason: "closed" });
  }, 60_000);

  test("connect gives up after its timeout when nothing answers (fake clock)", async () => {
    const timers = new FakeTimers();
    const { a } = track(pair({ timers, drop: () => true }));
    const p = a.connect("10.1.0.2", 80, { timeoutMs: 2000 }).catch((e) => e);
    await Bun.sleep(0);
    timers.advance(1999);
    await Bun.sleep(0);
    expect(a.stats().connections).toBe(1);
    timers.advance(1);
    const e = (await p) as NetstackError;
    expect(e.code).toBe("timeout");
    expect(a.stats().connections).toBe(0);
  });

  test("bad arguments fail with invalid-argument; a taken port with address-in-use", async () => {
    const { a } = track(pair());
    for (const [host, port] of [
      ["example.com", 80],
      ["10.1.0.2", 0],
      ["10.1.0.2", 70000],
      ["::1::2", 80],
    ] as const) {
      const e = await a.connect(host, port).catch((e) => e);
      expect((e as NetstackError).code, `${host}:${port}`).toBe("invalid-argument");
    }
    a.listen("0.0.0.0", 5000, () => {});
    expect(() => a.listen("0.0.0.0", 5000, () => {})).toThrow(expect.objectContaining({ code: "address-in-use" }));
    expect(() => createNetstack({ output: () => {} })).toThrow(expect.objectContaining({ code: "invalid-argument" }));
    expect(() => createNetstack({ ipv4: { address: "10.0.0.1", prefixLength: 33 }, output: () => {} })).toThrow(
      expect.objectContaining({ code: "invalid-argument" }),
    );
    expect(() => createNetstack({ ipv6: ["fd00::1"], receiveBudgetBytes: 1 << 30, output: () => {} })).toThrow(
      expect.objectContaining({ code: "invalid-argument" }),
    );
  });

  test("packets that are empty or larger than 64 KiB are dropped and counted", () => {
    const { a } = track(pair());
    expect(a.input(new Uint8Array(0))).toBe(false);
    expect(a.input(new Uint8Array(70000))).toBe(false);
    expect(a.stats().packetsDropped).toBe(2);
  });
});
