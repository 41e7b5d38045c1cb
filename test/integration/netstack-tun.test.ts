/**
 * The userspace TCP/IP stack (src/netstack, lwIP as WebAssembly) against the
 * Linux kernel's TCP through a real TUN device (native/tun): our stack in this
 * process owns the device; its kernel side lives in the namespace bbnt-PID
 * with a kernel TCP server (test/support/tcpPeer.ts). Covers byte-exact
 * transfers both ways over IPv4 and IPv6, 100 concurrent connections, both
 * half-closes, abort and reset both ways (also under a zero window: the
 * reset-lost-under-zero-window case of issue 18 item 4), refusal, and
 * backpressure bounds (slow reader on either side). Nothing is routed outside the namespace.
 * Needs root and ip; otherwise prints why and skips.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import type { NetstackError, TcpConnection } from "../../src/netstack/index.ts";
import { TCP_WINDOW_BYTES, WASM_MAX_MEMORY_BYTES, WRITE_QUEUE_LIMIT_BYTES } from "../../src/netstack/limits.ts";
import { netnsSkipReason } from "../support/netns.ts";
import { forEachStreamChunk, streamSha256 } from "../support/stream.ts";
import { startTunWorld, type TunWorld } from "../support/tunWorld.ts";

const skipReason = netnsSkipReason();
if (skipReason) console.log(`SKIP test/integration/netstack-tun.test.ts: ${skipReason}`);
let w: TunWorld;

beforeAll(async () => {
  if (!skipReason) w = await startTunWorld("bbnt", 78);
});
afterAll(async () => {
  await w?.close();
});

const enc = (s: string) => new TextEncoder().encode(s);

async function readText(c: TcpConnection): Promise<string> {
  let s = "";
  for (let ch = await c.read(); ch; ch = await c.read()) s += new TextDecoder().decode(ch);
  return s;
}

async function readDigest(c: TcpConnection): Promise<{ bytes: number; sha256: string }> {
  const h = createHash("sha256");
  let bytes = 0;
  for (let ch = await c.read(); ch; ch = await c.read()) {
    h.update(ch);
    bytes += ch.length;
  }
  return { bytes, sha256: h.digest("hex") };
}

/** Sends the test stream to SINK and returns the server's "<bytes> <sha>" answer. */
async function sink(host: string, bytes: number, seed: number, chunk = 64 * 1024): Promise<string> {
  const c = await w.stack.connect(host, w.port);
  await c.write(enc("SINK\n"));
  await forEachStreamChunk(bytes, seed, chunk, (ch) => c.write(ch));
  await c.closeWrite();
  const answer = await readText(c);
  await c.close();
  return answer.trim();
}

/** Waits for a server stdout line that satisfies `match`. */
async function serverLine(
  match: (o: Record<string, unknown>) => boolean,
  timeoutMs = 5000,
): Promise<Record<string, unknown>> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    for (const l of w.serverLines) {
      const o = JSON.parse(l) as Record<string, unknown>;
      if (match(o)) return o;
    }
    if (performance.now() > deadline) throw new Error(`no matching server line in ${JSON.stringify(w.serverLines)}`);
    await Bun.sleep(20);
  }
}

describe.skipIf(!!skipReason)("lwIP ⇄ Linux TCP through TUN", () => {
  for (const family of ["IPv4", "IPv6"] as const) {
    test(`${family}: 32 MiB each way byte-exact (SHA-256), half-closing our side first`, async () => {
      const host = family === "IPv4" ? w.kernel4 : w.kernel6;
      const n = 32 << 20;
      expect(await sink(host, n, 5)).toBe(`${n} ${await streamSha256(n, 5)}`);
      const d = await w.stack.connect(host, w.port);
      expect(d.remoteAddress).toBe(host);
      await d.write(enc(`SOURCE ${n} 9\n`));
      expect(await readDigest(d)).toEqual({ bytes: n, sha256: await streamSha256(n, 9) });
      await d.close();
      expect(await d.ended).toEqual({ reason: "closed" });
    }, 60_000);
  }

  test("the kernel half-closes first; we keep writing after its FIN", async () => {
    const c = await w.stack.connect(w.kernel4, w.port);
    await c.write(enc("DRAIN\n"));
    expect(await c.read()).toBeNull();
    const n = 1 << 20;
    await forEachStreamChunk(n, 21, 50_000, (ch) => c.write(ch));
    await c.closeWrite();
    expect(await serverLine((o) => o.event === "drained")).toEqual({
      event: "drained",
      bytes: n,
      sha256: await streamSha256(n, 21),
    });
    expect(await c.ended).toEqual({ reason: "closed" });
  }, 30_000);

  test("100 concurrent connections (50 IPv4, 50 IPv6) each echo 256 KiB byte-exact", async () => {
    const n = 256 * 1024;
    const one = async (i: number) => {
      const c = await w.stack.connect(i % 2 ? w.kernel6 : w.kernel4, w.port);
      await c.write(enc("ECHO\n"));
      const writing = (async () => {
        await forEachStreamChunk(n, 1000 + i, 32 * 1024, (ch) => c.write(ch));
        await c.closeWrite();
      })();
      const got = await readDigest(c);
      await writing;
      return { got, want: { bytes: n, sha256: await streamSha256(n, 1000 + i) } };
    };
    const results = await Promise.all(Array.from({ length: 100 }, (_, i) => one(i)));
    for (const r of results) expect(r.got).toEqual(r.want);
    expect(w.stack.stats().connections).toBe(0);
  }, 120_000);

  test("abort sends RST to the kernel; a kernel RST rejects our read with reset", async () => {
    const c = await w.stack.connect(w.kernel6, w.port);
    await c.write(enc("HOLD\nsome bytes"));
    await Bun.sleep(50);
    c.abort();
    expect(await serverLine((o) => o.event === "end")).toEqual({ event: "end", how: "reset" });
    expect(await c.ended).toEqual({ reason: "error", code: "aborted", message: "connection aborted" });

    const r = await w.stack.connect(w.kernel4, w.port);
    await r.write(enc("RESET\n"));
    const e = (await r.read().catch((e) => e)) as NetstackError;
    expect(e.code).toBe("reset");
  }, 30_000);

  test("reset-lost-under-zero-window: an abort after writing into a zero window resets the kernel's socket", async () => {
    const c = await w.stack.connect(w.kernel4, w.port);
    await c.write(enc("NOREAD\n"));
    // Write until a write waits 1 s: the kernel's window is zero and our queues are full.
    const chunk = new Uint8Array(64 * 1024);
    let written = 0;
    for (let i = 0; i < 2_000; i++) {
      const done = await Promise.race([c.write(chunk).then(() => true), Bun.sleep(1_000).then(() => false)]);
      if (!done) break;
      written += chunk.length;
    }
    expect(written).toBeGreaterThan(TCP_WINDOW_BYTES);
    await Bun.sleep(1_500); // zero-window probes go out (they move lwIP's snd_nxt past what the kernel accepted)
    const established = () =>
      Bun.spawnSync(w.ns.exec(["ss", "-Htn", "state", "established", `( sport = :${w.port} )`]))
        .stdout.toString()
        .trim();
    expect(established()).not.toBe("");
    c.abort();
    await c.ended;
    for (let i = 0; i < 100 && established() !== ""; i++) await Bun.sleep(50);
    expect(established()).toBe("");
    expect(await serverLine((o) => o.event === "end")).toEqual({ event: "end", how: "reset" });
  }, 60_000);

  test("a port with no listener refuses the connection", async () => {
    const e = (await w.stack.connect(w.kernel4, w.port + 1).catch((e) => e)) as NetstackError;
    expect(e.code).toBe("refused");
    const e6 = (await w.stack.connect(w.kernel6, w.port + 1).catch((e) => e)) as NetstackError;
    expect(e6.code).toBe("refused");
  }, 30_000);

  test("a slow reader on our side holds at most one window; memory stays bounded; nothing lost", async () => {
    const n = 48 << 20;
    const memoryBefore = w.stack.stats().memoryBytes;
    const d = await w.stack.connect(w.kernel4, w.port);
    await d.write(enc(`SOURCE ${n} 33\n`));
    await Bun.sleep(1000); // the kernel sends as fast as it can; we read nothing
    const s = w.stack.stats();
    expect(s.receiveBufferedBytes).toBeGreaterThan(0);
    expect(s.receiveBufferedBytes).toBeLessThanOrEqual(TCP_WINDOW_BYTES);
    expect(s.memoryBytes).toBe(memoryBefore);
    expect(s.memoryBytes).toBeLessThanOrEqual(WASM_MAX_MEMORY_BYTES);
    expect(await readDigest(d)).toEqual({ bytes: n, sha256: await streamSha256(n, 33) });
    await d.close();
  }, 60_000);

  test("a slow reader on the kernel side stops our writes; queues stay bounded; nothing lost", async () => {
    const n = 16 << 20;
    const c = await w.stack.connect(w.kernel6, w.port);
    await c.write(enc("SLOWSINK 1000\n"));
    let maxQueued = 0;
    let maxHeap = 0;
    const sample = setInterval(() => {
      const s = w.stack.stats();
      maxQueued = Math.max(maxQueued, s.writeQueuedBytes);
      maxHeap = Math.max(maxHeap, s.heapBytes);
    }, 10);
    const t0 = performance.now();
    await forEachStreamChunk(n, 44, 64 * 1024, (ch) => c.write(ch));
    await c.closeWrite();
    const answer = (await readText(c)).trim();
    clearInterval(sample);
    expect(performance.now() - t0).toBeGreaterThan(900); // the writes really waited for the reader
    expect(answer).toBe(`${n} ${await streamSha256(n, 44)}`);
    expect(maxQueued).toBeLessThanOrEqual(Math.max(64 * 1024, WRITE_QUEUE_LIMIT_BYTES));
    expect(maxHeap).toBeLessThanOrEqual(2 * 256 * 1024);
    await c.close();
  }, 60_000);
});
