/**
 * The agent's small ports: every side effect the agent's decision code
 * needs (timers, randomness, the scheduler control channel, host facts,
 * logging) as an interface with its real adapter here and a fake in
 * fakePorts.ts beside it. Time is the tree's one Clock
 * (src/protocol/clock.ts; the agent reads its wallMs()). The VMM (vmm/driver.ts), isolation
 * (isolation/isolationPort.ts) and image (image/imagePort.ts) ports live
 * with their subsystems.
 *
 * Owns the interfaces and the production adapters only. Must never: hold
 * state of a placement, or let agent decision code reach Date.now(),
 * Bun.sleep, setTimeout or fetch except through these.
 */
import { randomBytes } from "node:crypto";
import { statfsSync } from "node:fs";
import { cpus, totalmem } from "node:os";
import { consola } from "consola";
import { createLogger, type LogFields, type Logger } from "../command/log.ts";
import type { AgentPayload, Envelope, PollResponse } from "../protocol/agent.ts";
import type { LogChunk, LogPushResponse } from "../protocol/logs.ts";

/** Timers (all durations in ms). */
export interface Timers {
  /** Resolves after `ms`, or as soon as `signal` aborts (never rejects). */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
  /** Calls `fn` once after `ms`; returns a function that cancels it. */
  after(ms: number, fn: () => void): () => void;
  /** Calls `fn` every `ms`; returns a function that cancels it. */
  every(ms: number, fn: () => void): () => void;
}

/** Randomness for secrets and IDs. */
export interface AgentRandom {
  /** `n` cryptographically random bytes. */
  bytes(n: number): Uint8Array;
}

/**
 * The scheduler control channel (spec "Transport"): one envelope out, one
 * poll response back. Throws BeachballError for a problem answer (e.g.
 * STALE_AGENT_EPOCH) and a plain Error for a transport failure.
 */
export interface ControlChannel {
  send(type: Envelope["type"], agentEpoch: string, payload: AgentPayload, signal?: AbortSignal): Promise<PollResponse>;
}

/**
 * The scheduler's intake of workload output (`POST /v1/agents/logs`,
 * src/protocol/logs.ts), outbound like the control channel. Throws
 * BeachballError for a problem answer and a plain Error for a transport
 * failure.
 */
export interface LogSink {
  push(chunks: LogChunk[], signal?: AbortSignal): Promise<LogPushResponse>;
}

/** Facts about this machine the health report carries. */
export interface HostProbe {
  /** Physical inventory: CPU millicores and memory MiB. */
  inventory(): { cpuMillis: number; memoryMiB: number };
  /** True when the volume holding `dir` has less than `fraction` of its blocks free (false when unknown). */
  volumeNearlyFull(dir: string, fraction: number): boolean;
}

/**
 * The agent's log (operators read it; never a payload, nonce or credential).
 * `msg` is constant text naming the event; what varies (IDs, names, codes,
 * durations, an error's message) goes in `fields` (src/command/log.ts).
 */
export interface AgentLog {
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
}

/** An AgentLog writing through the role's structured logger (one JSON object or text line per event). */
export function loggerLog(logger: Logger): AgentLog {
  return { info: (m, f) => logger.info(m, f), warn: (m, f) => logger.warn(m, f), error: (m, f) => logger.error(m, f) };
}

/** The message of a thrown value, for a log field. */
export function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** Real timers (setTimeout/setInterval). */
export const systemTimers: Timers = {
  sleep(ms, signal) {
    if (signal?.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const t = setTimeout(done, ms);
      function done() {
        clearTimeout(t);
        signal?.removeEventListener("abort", done);
        resolve();
      }
      signal?.addEventListener("abort", done, { once: true });
    });
  },
  after(ms, fn) {
    const t = setTimeout(fn, ms);
    return () => clearTimeout(t);
  },
  every(ms, fn) {
    const t = setInterval(fn, ms);
    return () => clearInterval(t);
  },
};

/** Real randomness (node:crypto). */
export const systemRandom: AgentRandom = { bytes: (n) => new Uint8Array(randomBytes(n)) };

/** Real host facts: os.cpus(), os.totalmem(), statfs(2). */
export const systemHostProbe: HostProbe = {
  inventory: () => ({ cpuMillis: cpus().length * 1000, memoryMiB: Math.floor(totalmem() / (1024 * 1024)) }),
  volumeNearlyFull(dir, fraction) {
    try {
      const st = statfsSync(dir);
      return Number(st.bavail) / Number(st.blocks) < fraction;
    } catch {
      return false; // unknown: not reported as full
    }
  },
};

/** The default log (when the daemon is given none, e.g. in tests): text lines on stderr with the fields as `key=value`. */
export const consolaLog: AgentLog = loggerLog(
  createLogger(
    {
      format: "text",
      sink: (line, level) =>
        level === "error" ? consola.error(line) : level === "warn" ? consola.warn(line) : consola.info(line),
    },
    { role: "agent" },
  ),
);
