import { afterEach, describe, expect, test } from "bun:test";
import { appendFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { JOB_EXIT_MARKER, JOB_START_MARKER } from "../../protocol/guest.ts";
import {
  MAX_LOG_CHUNK_BYTES,
  MAX_LOG_CHUNKS_PER_PUSH,
  type LogChunk,
  type LogPushResponse,
} from "../../protocol/logs.ts";
import { trimConsoleLogAt } from "../vmm/consoleLog.ts";
import { BeachballError } from "../../protocol/errors.ts";
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
  /** A placement whose chunks make the whole push fail, as the scheduler's RATE_LIMITED answer does. */
  rateLimited: string | null = null;
  async push(chunks: LogChunk[]): Promise<LogPushResponse> {
    if (this.fail) throw new Error("connection refused");
    if (chunks.some((c) => c.placementId === this.rateLimited))
      throw new BeachballError("RATE_LIMITED", "this allocation's log takes at most 131072 bytes per second");
    this.pushes.push(chunks);
    return {
      results: chunks.map((c) => {
        if (this.refuse) return { placementId: c.placementId, streamEnd: 0, code: "UNKNOWN_PLACEMENT" as const };
        const cur = this.streams.get(c.placementId) ?? "";
        const off = c.offset ?? Buffer.byteLength(cur);
        const b = Buffer.from(cur);
        const next =
          off >= b.length
            ? cur + "\0".repeat(off - b.length) + c.text
            : Buffer.concat([b.subarray(0, off), Buffer.from(c.text)]).toString();
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
  const ref = (n: number): ShippedPlacement => ({
    allocationId: `alloc_${String(n).repeat(32)}`,
    placementId: `plc_${n}`,
    generation: 1,
    dirName: `bb-${n}`,
  });
  const write = (r: ShippedPlacement, text: string) => {
    mkdirSync(join(dir, r.dirName), { recursive: true });
    appendFileSync(consolePath(r.dirName), text);
  };
  return { dir, sink, ship, ref, write, warnings, consolePath };
}

describe("the console shipper", () => {
  test("pushes only the job's own lines after JOB_START, redacted, in order and by offset", async () => {
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
    expect(sink.streams.get("plc_1")).toBe(`line 1\nnonce [redacted]\npartial\n`);
    expect(sink.pushes.flat().map((c) => c.offset)).toEqual([0, Buffer.byteLength(`line 1\nnonce [redacted]\n`)]);
  });

  test("internals in logs: job markers, kernel lines, trim lines and what follows the guest's exit marker are not the job's output", async () => {
    const { sink, ship, ref, write } = setup();
    const r = ref(11);
    write(
      r,
      `[    0.5] booting\n${JOB_START_MARKER}\nhello\n[    3.141592] random: crng init done\n[... 12 bytes trimmed ...]\nworld, no newline`,
    );
    write(r, `${JOB_EXIT_MARKER} 3\n[    9.000001] reboot: Power down\n[  OK  ] Stopped systemd-journald.service\n`);
    await ship.settle(r); // the guest reported the exit over its control channel
    write(r, "later\n");
    ship.collect(r);
    await ship.flush();
    expect(sink.streams.get("plc_11")).toBe("hello\nworld, no newline");
  });

  test("a fake exit marker: one the workload prints itself is dropped, and its output goes on", async () => {
    const { sink, ship, ref, write } = setup();
    const r = ref(17);
    write(r, `${JOB_START_MARKER}\nrunning a nested job\n${JOB_EXIT_MARKER} 0\nstill the workload\n`);
    ship.collect(r);
    await ship.flush();
    write(r, `done\n${JOB_EXIT_MARKER} 0\n`);
    await ship.settle(r);
    expect(sink.streams.get("plc_17")).toBe("running a nested job\nstill the workload\ndone\n");
  });

  test("a fake exit marker not yet read when the guest reports the exit does not end the job's output (only the last marker does)", async () => {
    const { sink, ship, ref, write } = setup();
    const r = ref(18);
    // The workload prints a marker-like line and more output, then exits; the guest's report comes before the next tick read any of it.
    write(
      r,
      `${JOB_START_MARKER}\nbefore\n${JOB_EXIT_MARKER} 0\nafter the fake marker\n${JOB_EXIT_MARKER} 0\n[    9.000001] reboot: Power down\n`,
    );
    await ship.settle(r);
    expect(sink.streams.get("plc_18")).toBe("before\nafter the fake marker\n");
    // a marker with another code than the guest reported is the workload's, even as the last line read
    const r2 = ref(21);
    write(r2, `${JOB_START_MARKER}\nbefore\n${JOB_EXIT_MARKER} 0\n`);
    await ship.settle(r2, 3); // gives up at its deadline: the guest's marker has not come
    write(r2, `after\n${JOB_EXIT_MARKER} 3\nlater\n`);
    ship.collect(r2);
    await ship.flush();
    expect(sink.streams.get("plc_21")).toBe("before\nafter\n");
  });

  test("a fake exit marker at the end of a workload line keeps the line's newline", async () => {
    const { sink, ship, ref, write } = setup();
    const r = ref(19);
    write(r, `${JOB_START_MARKER}\nstatus: ${JOB_EXIT_MARKER} 3\nnext line\n`);
    ship.collect(r);
    await ship.flush();
    write(r, `last\n${JOB_EXIT_MARKER} 0\n`);
    await ship.settle(r);
    expect(sink.streams.get("plc_19")).toBe("status: \nnext line\nlast\n");
    // the same when the report comes before any of it was read
    const r2 = ref(20);
    write(r2, `${JOB_START_MARKER}\nstatus: ${JOB_EXIT_MARKER} 3\nnext line\nno newline${JOB_EXIT_MARKER} 0\n`);
    await ship.settle(r2);
    expect(sink.streams.get("plc_20")).toBe("status: \nnext line\nno newline");
  });

  test("a line the workload echoes from its payload is redacted; the payload's bytes are never pushed", async () => {
    const { sink, ship, ref, write } = setup();
    const r = ref(2);
    const payload = "SECRET_TOKEN=do-not-leak-0123456789\necho visible-output\n";
    ship.notePayload(r.placementId, new TextEncoder().encode(payload));
    write(
      r,
      `${JOB_START_MARKER}\n+ SECRET_TOKEN=do-not-leak-0123456789\nSECRET_TOKEN=do-not-leak-0123456789\nvisible-output\n`,
    );
    ship.collect(r);
    await ship.flush();
    const got = sink.streams.get("plc_2")!;
    expect(got).toContain("visible-output");
    expect(got).not.toContain("do-not-leak");
  });

  test("output dropped above 64 KiB/s: a burst larger than a collect is read on later ticks, never skipped, within the queue bound", async () => {
    const { sink, ship, ref, write } = setup();
    const r = ref(3);
    write(r, `${JOB_START_MARKER}\n`);
    ship.collect(r);
    const line = "z".repeat(1023) + "\n";
    const total = MAX_COLLECT_BYTES * 8; // 1 MiB at once: eight collects' worth
    write(r, line.repeat(total / 1024));
    sink.fail = true;
    for (let i = 0; i < 12; i++) ship.collect(r);
    expect(ship.queuedBytes).toBeLessThanOrEqual(MAX_QUEUED_BYTES + MAX_COLLECT_BYTES);
    await ship.tick([r]);
    sink.fail = false;
    for (let i = 0; i < 20 && (ship.queuedBytes > 0 || Buffer.byteLength(sink.streams.get("plc_3") ?? "") < total); i++)
      await ship.tick([r]);
    const pushed = sink.pushes.flat();
    expect(pushed.every((c) => Buffer.byteLength(c.text) <= MAX_LOG_CHUNK_BYTES)).toBe(true);
    expect(sink.pushes.every((p) => p.length <= MAX_LOG_CHUNKS_PER_PUSH)).toBe(true);
    expect(sink.streams.get("plc_3")).toBe(line.repeat(total / 1024));
    expect(ship.droppedBytes).toBe(0);
  });

  test("a noisy neighbour: a placement refused for its rate holds up only its own output, not another placement's", async () => {
    const { sink, ship, ref, write } = setup();
    const [noisy, quiet] = [ref(15), ref(16)];
    sink.rateLimited = noisy.placementId;
    write(noisy, `${JOB_START_MARKER}\n${"n".repeat(1023)}\n`.repeat(64));
    write(quiet, `${JOB_START_MARKER}\n`);
    for (let i = 0; i < 3; i++) {
      write(quiet, `quiet ${i}\n`);
      await ship.tick([noisy, quiet]);
    }
    expect(sink.streams.get(quiet.placementId)).toBe("quiet 0\nquiet 1\nquiet 2\n");
    expect(ship.queuedBytes).toBeGreaterThan(0); // the noisy one waits for its rate, its output kept
  });

  test("a trim that cuts unread output leaves a gap by offset, counts it and says so; read output is kept", async () => {
    const { sink, ship, ref, write, consolePath, warnings } = setup();
    const r = ref(4);
    write(r, `${JOB_START_MARKER}\n${"a".repeat(99)}\n`);
    ship.collect(r);
    await ship.flush();
    write(r, `${"b".repeat(99)}\n`.repeat(50));
    const t = trimConsoleLogAt(consolePath(r.dirName), 1024);
    expect(t).not.toBeNull();
    ship.trimmed(r, t!);
    ship.collect(r);
    write(r, "after trim\n");
    ship.collect(r);
    await ship.flush();
    await ship.flush();
    const got = sink.streams.get("plc_4")!;
    expect(got.startsWith(`${"a".repeat(99)}\n`)).toBe(true);
    expect(got.endsWith(`${"b".repeat(99)}\nafter trim\n`)).toBe(true);
    expect(got).not.toContain("bytes trimmed");
    expect(ship.droppedBytes).toBeGreaterThan(0);
    expect(got).toContain("\0"); // the gap: the recording sink fills skipped offsets with NULs
    expect(warnings.some((w) => w.includes("dropped") && w.includes(r.placementId))).toBe(true);
  });

  test("after a refusal it stops pushing that placement", async () => {
    const { sink, ship, ref, write, warnings } = setup();
    const r = ref(12);
    write(r, `${JOB_START_MARKER}\nfirst\n`);
    ship.collect(r);
    await ship.flush();
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

  test("a placement adopted without a saved position resumes at the console's end without an offset, then numbers from the scheduler's end", async () => {
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

  test("output lost across an agent restart: the next agent resumes at the saved position and ships what was printed meanwhile", async () => {
    const first = setup();
    const r = first.ref(13);
    first.write(r, `${JOB_START_MARKER}\nbefore restart\n`);
    await first.ship.tick([r]);
    first.write(r, "read but never acknowledged\n");
    first.sink.fail = true;
    await first.ship.tick([r]); // the agent dies with this queued
    first.write(r, "printed while no agent ran\n");
    // The next agent process: a new shipper over the same directory and the same scheduler.
    const next = new ConsoleShipper({
      sink: first.sink,
      log: { info: () => {}, warn: () => {}, error: () => {} },
      consolePath: first.consolePath,
      secretsOf: () => [NONCE],
      sleep: (ms) => new Promise((res) => setTimeout(res, Math.min(ms, 5))),
    });
    first.sink.fail = false;
    next.adopt(r);
    first.write(r, "after restart\n");
    await next.tick([r]);
    expect(first.sink.streams.get("plc_13")).toBe(
      "before restart\nread but never acknowledged\nprinted while no agent ran\nafter restart\n",
    );
  });

  test("lagging logs: settle returns only once the output up to the job's exit marker is stored", async () => {
    const { sink, ref, write, consolePath } = setup();
    const ship = new ConsoleShipper({
      sink,
      log: { info: () => {}, warn: () => {}, error: () => {} },
      consolePath,
      secretsOf: () => [],
      sleep: (ms, signal) =>
        new Promise((res) => {
          const t = setTimeout(res, ms);
          signal?.addEventListener("abort", () => (clearTimeout(t), res()));
        }),
    });
    const r = ref(14);
    write(r, `${JOB_START_MARKER}\nfirst\n`);
    ship.collect(r);
    const settled = ship.settle(r);
    let done = false;
    void settled.then(() => (done = true));
    await new Promise((res) => setTimeout(res, 20));
    expect(done).toBe(false); // the exit marker is not on the console yet: the serial line lags the control channel
    write(r, `last\n${JOB_EXIT_MARKER} 0\n`);
    await settled;
    expect(sink.streams.get("plc_14")).toBe("first\nlast\n");
  });

  test("finish pushes the last output before the console goes, and forgets the placement", async () => {
    const { sink, ship, ref, write, dir } = setup();
    const r = ref(6);
    write(r, `${JOB_START_MARKER}\n`);
    ship.collect(r);
    write(r, "last words\n");
    await ship.finish(r);
    expect(sink.streams.get("plc_6")).toBe("last words\n");
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
    expect(Buffer.byteLength(sink.streams.get("plc_7")!)).toBe(12 * 16 * 1024);
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
