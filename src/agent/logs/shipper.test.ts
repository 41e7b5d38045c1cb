import { afterEach, describe, expect, test } from "bun:test";
import { appendFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { JOB_START_MARKER } from "../../protocol/guest.ts";
import { MAX_LOG_CHUNK_BYTES, MAX_LOG_CHUNKS_PER_PUSH, type LogChunk, type LogPushResponse } from "../../protocol/logs.ts";
import { trimConsoleLog } from "../vmm/consoleLog.ts";
import { ConsoleShipper, MAX_COLLECT_BYTES, MAX_QUEUED_BYTES, splitChunks, type ShippedPlacement } from "./shipper.ts";

const NONCE = "e".repeat(64);
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A scheduler stand-in that keeps each placement's stream by offset (the real one is tested in src/scheduler/allocationLog.test.ts). */
class RecordingSink {
  pushes: LogChunk[][] = [];
  streams = new Map<string, string>();
  fail = false;
  refuse = false;
  async push(chunks: LogChunk[]): Promise<LogPushResponse> {
    if (this.fail) throw new Error("connection refused");
    this.pushes.push(chunks);
    return {
      results: chunks.map((c) => {
        if (this.refuse) return { placementId: c.placementId, streamEnd: 0, code: "UNKNOWN_PLACEMENT" as const };
        const cur = this.streams.get(c.placementId) ?? "";
        const off = c.offset ?? Buffer.byteLength(cur);
        const b = Buffer.from(cur);
        const next = off >= b.length ? cur + "\0".repeat(off - b.length) + c.text : Buffer.concat([b.subarray(0, off), Buffer.from(c.text)]).toString();
        this.streams.set(c.placementId, next);
        return { placementId: c.placementId, streamEnd: Buffer.byteLength(next) };
      }),
    };
  }
}

function setup() {
  const dir = mkdtempSync(join(tmpdir(), "bb-shipper-"));
  dirs.push(dir);
  const sink = new RecordingSink();
  const warnings: string[] = [];
  const consolePath = (d: string) => join(dir, d, "console.log");
  const ship = new ConsoleShipper({
    sink,
    log: { info: () => {}, warn: (m, f) => warnings.push(`${m} ${JSON.stringify(f ?? {})}`), error: () => {} },
    consolePath,
    secretsOf: () => [NONCE],
    sleep: (ms) => new Promise((r) => setTimeout(r, Math.min(ms, 5))),
  });
  const ref = (n: number): ShippedPlacement => ({ allocationId: `alloc_${String(n).repeat(32)}`, placementId: `plc_${n}`, generation: 1, dirName: `bb-${n}` });
  const write = (r: ShippedPlacement, text: string) => {
    mkdirSync(join(dir, r.dirName), { recursive: true });
    appendFileSync(consolePath(r.dirName), text);
  };
  return { dir, sink, ship, ref, write, warnings, consolePath };
}

describe("the console shipper", () => {
  test("pushes only what follows JOB_START, redacted, in order and by offset", async () => {
    const { sink, ship, ref, write } = setup();
    const r = ref(1);
    write(r, `[    0.1] Linux version\nbeachball.bootstrap_nonce=${NONCE}\nbeachball-guest: ready\n`);
    ship.collect(r);
    await ship.flush();
    expect(sink.pushes).toHaveLength(0);
    write(r, `${JOB_START_MARKER}\nline 1\nnonce ${NONCE}\npart`);
    ship.collect(r);
    write(r, "ial\nBEACHBALL_JOB_EXIT 0\n");
    ship.collect(r);
    await ship.flush();
    expect(sink.streams.get("plc_1")).toBe(`${JOB_START_MARKER}\nline 1\nnonce [redacted]\npartial\nBEACHBALL_JOB_EXIT 0\n`);
    expect(sink.pushes.flat().map((c) => c.offset)).toEqual([0, Buffer.byteLength(`${JOB_START_MARKER}\nline 1\nnonce [redacted]\n`)]);
  });

  test("a line the workload echoes from its payload is redacted; the payload's bytes are never pushed", async () => {
    const { sink, ship, ref, write } = setup();
    const r = ref(2);
    const payload = "SECRET_TOKEN=do-not-leak-0123456789\necho visible-output\n";
    ship.notePayload(r.placementId, new TextEncoder().encode(payload));
    write(r, `${JOB_START_MARKER}\n+ SECRET_TOKEN=do-not-leak-0123456789\nSECRET_TOKEN=do-not-leak-0123456789\nvisible-output\n`);
    ship.collect(r);
    await ship.flush();
    const got = sink.streams.get("plc_2")!;
    expect(got).toContain("visible-output");
    expect(got).not.toContain("do-not-leak");
  });

  test("reads at most MAX_COLLECT_BYTES per collect (the rest is a gap by offset) and queues at most MAX_QUEUED_BYTES", async () => {
    const { sink, ship, ref, write } = setup();
    const r = ref(3);
    write(r, `${JOB_START_MARKER}\n`);
    ship.collect(r);
    const line = "z".repeat(1023) + "\n";
    write(r, line.repeat((MAX_COLLECT_BYTES * 3) / 1024));
    sink.fail = true;
    ship.collect(r);
    for (let i = 0; i < 4; i++) {
      write(r, line.repeat(MAX_COLLECT_BYTES / 1024));
      ship.collect(r);
    }
    expect(ship.queuedBytes).toBeLessThanOrEqual(MAX_QUEUED_BYTES);
    await ship.flush();
    sink.fail = false;
    for (let i = 0; i < 100 && ship.queuedBytes > 0; i++) await ship.flush();
    const pushed = sink.pushes.flat();
    expect(pushed.every((c) => Buffer.byteLength(c.text) <= MAX_LOG_CHUNK_BYTES)).toBe(true);
    expect(sink.pushes.every((p) => p.length <= MAX_LOG_CHUNKS_PER_PUSH)).toBe(true);
    // Offsets only grow, and the skipped bytes left a gap rather than being renumbered.
    const offs = pushed.map((c) => c.offset!);
    expect([...offs].sort((a, b) => a - b)).toEqual(offs);
    const last = pushed[pushed.length - 1]!;
    expect(last.offset! + Buffer.byteLength(last.text)).toBeGreaterThan(MAX_QUEUED_BYTES + MAX_COLLECT_BYTES);
  });

  test("after a trim it continues at the file's new end; after a refusal it stops pushing that placement", async () => {
    const { sink, ship, ref, write, consolePath, warnings } = setup();
    const r = ref(4);
    write(r, `${JOB_START_MARKER}\n${"a".repeat(99)}\n`.repeat(1));
    ship.collect(r);
    write(r, `${"b".repeat(99)}\n`.repeat(50));
    ship.collect(r);
    expect(trimConsoleLog(consolePath(r.dirName), 1024)).toBeGreaterThan(0);
    ship.trimmed(r);
    write(r, "after trim\n");
    ship.collect(r);
    await ship.flush();
    await ship.flush();
    expect(sink.streams.get("plc_4")!.endsWith(`${"b".repeat(99)}\nafter trim\n`)).toBe(true);
    expect(sink.streams.get("plc_4")).not.toContain("bytes trimmed");
    sink.refuse = true;
    write(r, "refused\n");
    ship.collect(r);
    await ship.flush();
    write(r, "never sent\n");
    ship.collect(r);
    const n = sink.pushes.length;
    await ship.flush();
    expect(sink.pushes.length).toBe(n);
    expect(warnings.some((w) => w.includes("UNKNOWN_PLACEMENT"))).toBe(true);
  });

  test("a placement adopted after an agent restart resumes at the console's end without an offset, then numbers from the scheduler's end", async () => {
    const { sink, ship, ref, write } = setup();
    const r = ref(5);
    sink.streams.set("plc_5", "x".repeat(40));
    write(r, `${JOB_START_MARKER}\nbefore restart\n`);
    ship.adopt(r); // the VM ran under an earlier agent: continue at the console's end
    ship.collect(r);
    write(r, "after restart 1\n");
    ship.collect(r);
    await ship.flush();
    write(r, "after restart 2\n");
    ship.collect(r);
    await ship.flush();
    expect(sink.pushes.flat().map((c) => c.offset)).toEqual([undefined, 40 + Buffer.byteLength("after restart 1\n")]);
    expect(sink.streams.get("plc_5")).toBe(`${"x".repeat(40)}after restart 1\nafter restart 2\n`);
  });

  test("finish pushes the last output before the console goes, and forgets the placement", async () => {
    const { sink, ship, ref, write, dir } = setup();
    const r = ref(6);
    write(r, `${JOB_START_MARKER}\n`);
    ship.collect(r);
    write(r, "last words\n");
    await ship.finish(r);
    expect(sink.streams.get("plc_6")).toBe(`${JOB_START_MARKER}\nlast words\n`);
    writeFileSync(join(dir, r.dirName, "console.log"), "");
    await ship.finish(r); // unknown now: nothing to do
    expect(ship.queuedBytes).toBe(0);
  });

  test("drain (a graceful agent stop) pushes what is queued, within its bound", async () => {
    const { sink, ship, ref, write } = setup();
    const r = ref(7);
    write(r, `${JOB_START_MARKER}\n`);
    for (let i = 0; i < 12; i++) {
      write(r, `${"d".repeat(1023)}\n`.repeat(16));
      ship.collect(r);
    }
    expect(ship.queuedBytes).toBeGreaterThan(MAX_LOG_CHUNK_BYTES * MAX_LOG_CHUNKS_PER_PUSH);
    await ship.drain(60_000);
    expect(ship.queuedBytes).toBe(0);
    expect(Buffer.byteLength(sink.streams.get("plc_7")!)).toBe(Buffer.byteLength(`${JOB_START_MARKER}\n`) + 12 * 16 * 1024);
    sink.fail = true;
    write(r, "unsent\n");
    ship.collect(r);
    await ship.drain(10); // the sink fails: drain gives up at its bound
    expect(ship.queuedBytes).toBeGreaterThan(0);
  });

  test("splitChunks cuts at line ends within MAX_LOG_CHUNK_BYTES", () => {
    const line = "q".repeat(4095) + "\n";
    const parts = splitChunks(line.repeat(9));
    expect(parts.map((p) => Buffer.byteLength(p))).toEqual([16384, 16384, 4096]);
  });
});
