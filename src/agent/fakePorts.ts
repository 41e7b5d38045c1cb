/**
 * Test doubles of the agent's small ports (ports.ts), for unit tests and the
 * seeded simulation: a fake timeline of timers over the one fake clock
 * (src/protocol/fakeClock.ts) that moves only when told, a control channel that queues requests for the test
 * to answer, a fixed host probe and a log that keeps lines in memory.
 *
 * Determinism: nothing here uses real time or real I/O. A test advances the
 * timeline; every due timer fires in (time, creation) order, and the
 * microtasks it sets off run to completion before the next one fires.
 * Must never: be wired into the daemon (daemon.ts builds the real ports).
 */
import type { AgentPayload, Envelope, PollResponse } from "../protocol/agent.ts";
import { FakeClock } from "../protocol/fakeClock.ts";
import type { AgentLog, ControlChannel, HostProbe, Timers } from "./ports.ts";
import type { LogFields } from "../command/log.ts";

interface PendingTimer {
  at: number;
  seq: number;
  group: string;
  fn: () => void;
}

/** Resolves after every microtask queued so far (and those they queue) ran. */
export function settle(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** Timers over a FakeClock; both move only through advanceTo/advance (a named test double). */
export class FakeTimeline {
  /** The timeline's clock (wall and monotonic readings move together); pass it where a Clock is wanted. */
  readonly clock: FakeClock;
  private seq = 0;
  private pending: PendingTimer[] = [];
  private readonly stalls = new Map<string, number>();

  /** `startMs`: the initial wall time, ms since the epoch. */
  constructor(startMs: number) {
    this.clock = new FakeClock({ wallMs: startMs });
  }

  /** Number of timers waiting (all groups). */
  get pendingCount(): number {
    return this.pending.length;
  }

  private add(ms: number, group: string, fn: () => void): () => void {
    const timer: PendingTimer = { at: this.clock.wallMs() + Math.max(0, ms), seq: this.seq++, group, fn };
    this.pending.push(timer);
    return () => {
      const i = this.pending.indexOf(timer);
      if (i >= 0) this.pending.splice(i, 1);
    };
  }

  /** A Timers port whose timers belong to `group` (cancelGroup drops them all, as a process death would). */
  timers(group = "default"): Timers {
    return {
      sleep: (ms, signal) => {
        if (signal?.aborted) return Promise.resolve();
        return new Promise<void>((resolve) => {
          const done = () => {
            cancel();
            signal?.removeEventListener("abort", done);
            resolve();
          };
          const cancel = this.add(ms, group, done);
          signal?.addEventListener("abort", done, { once: true });
        });
      },
      after: (ms, fn) => this.add(ms, group, fn),
      every: (ms, fn) => {
        let cancel = () => {};
        const tick = () => {
          cancel = this.add(ms, group, tick);
          fn();
        };
        cancel = this.add(ms, group, tick);
        return () => cancel();
      },
    };
  }

  /** Freezes `group` until `untilMs`: none of its timers fires earlier (a process stopped or starved of CPU). */
  stall(group: string, untilMs: number): void {
    this.stalls.set(group, Math.max(untilMs, this.stalls.get(group) ?? 0));
  }

  /** When a timer really fires: its time, or the end of its group's stall. */
  private due(x: PendingTimer): number {
    const s = this.stalls.get(x.group);
    return s === undefined || s <= x.at ? x.at : s;
  }

  /** Drops every pending timer of `group`; none of them will fire. */
  cancelGroup(group: string): void {
    this.pending = this.pending.filter((x) => x.group !== group);
    this.stalls.delete(group);
  }

  /** Moves wall time to `t` (never backwards), firing each due timer in order and settling after each. */
  async advanceTo(t: number): Promise<void> {
    await settle();
    for (;;) {
      let next: PendingTimer | undefined;
      let nextAt = 0;
      for (const x of this.pending) {
        const at = this.due(x);
        if (at <= t && (!next || at < nextAt || (at === nextAt && x.seq < next.seq))) (next = x), (nextAt = at);
      }
      if (!next) break;
      this.pending.splice(this.pending.indexOf(next), 1);
      this.clock.advanceTo(nextAt);
      next.fn();
      await settle();
    }
    this.clock.advanceTo(t);
  }

  /** Moves time forward by `ms` (see advanceTo). */
  advance(ms: number): Promise<void> {
    return this.advanceTo(this.clock.wallMs() + ms);
  }
}

/** One envelope the agent sent through a FakeControlChannel, waiting for an answer. */
export interface FakeRequest {
  type: Envelope["type"];
  agentEpoch: string;
  payload: AgentPayload;
  /** Answers the request (ignored once it timed out or was aborted). */
  resolve(r: PollResponse): void;
  /** Fails the request (a transport error or a problem answer). */
  reject(e: Error): void;
  /** True once answered, failed, timed out or aborted. */
  readonly settled: boolean;
}

/** Extra time beyond the requested park before a fake request times out, ms (as the real client). */
export const FAKE_REQUEST_SLACK_MS = 10_000;

/**
 * A control channel whose requests wait in `queue` until the test answers
 * them; each one fails with a timeout after its park plus
 * FAKE_REQUEST_SLACK_MS on `timers`, like the real client's.
 */
export class FakeControlChannel implements ControlChannel {
  /** Requests not answered yet, oldest first. */
  readonly queue: FakeRequest[] = [];

  constructor(private readonly timers: Timers) {}

  send(type: Envelope["type"], agentEpoch: string, payload: AgentPayload, signal?: AbortSignal): Promise<PollResponse> {
    return new Promise<PollResponse>((resolve, reject) => {
      let settled = false;
      const finish = (f: () => void) => {
        if (settled) return;
        settled = true;
        cancel();
        signal?.removeEventListener("abort", onAbort);
        const i = this.queue.indexOf(req);
        if (i >= 0) this.queue.splice(i, 1);
        f();
      };
      const onAbort = () => finish(() => reject(new Error("aborted")));
      const cancel = this.timers.after((payload.waitMs ?? 0) + FAKE_REQUEST_SLACK_MS, () =>
        finish(() => reject(new Error("request timed out"))),
      );
      const req: FakeRequest = {
        type,
        agentEpoch,
        payload,
        resolve: (r) => finish(() => resolve(r)),
        reject: (e) => finish(() => reject(e)),
        get settled() {
          return settled;
        },
      };
      if (signal?.aborted) return onAbort();
      signal?.addEventListener("abort", onAbort, { once: true });
      this.queue.push(req);
    });
  }

  /** Removes and returns every waiting request, oldest first. */
  take(): FakeRequest[] {
    return this.queue.splice(0);
  }
}

/** A host probe with fixed answers (defaults: 8 CPUs, 16 GiB, plenty of disk). */
export class FixedHostProbe implements HostProbe {
  constructor(
    private readonly inv = { cpuMillis: 8000, memoryMiB: 16384 },
    public nearlyFull = false,
  ) {}
  inventory(): { cpuMillis: number; memoryMiB: number } {
    return this.inv;
  }
  volumeNearlyFull(): boolean {
    return this.nearlyFull;
  }
}

/** A log that keeps its lines in memory (for assertions) instead of printing. */
export class MemoryLog implements AgentLog {
  readonly lines: string[] = [];
  /** Most lines kept (older ones are dropped). */
  constructor(private readonly maxLines = 1000) {}
  /** Every line's structured form, in order (same bound as `lines`). */
  readonly records: { level: string; msg: string; fields: LogFields }[] = [];
  private push(level: string, msg: string, fields: LogFields = {}): void {
    const kv = Object.entries(fields)
      .filter(([, v]) => v !== undefined)
      .map(([k, v]) => ` ${k}=${String(v)}`)
      .join("");
    this.lines.push(`${level} ${msg}${kv}`);
    this.records.push({ level, msg, fields });
    if (this.lines.length > this.maxLines) this.lines.shift();
    if (this.records.length > this.maxLines) this.records.shift();
  }
  info(msg: string, fields?: LogFields): void {
    this.push("info", msg, fields);
  }
  warn(msg: string, fields?: LogFields): void {
    this.push("warn", msg, fields);
  }
  error(msg: string, fields?: LogFields): void {
    this.push("error", msg, fields);
  }
}
