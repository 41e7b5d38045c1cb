/**
 * Starts and stops the scheduler's health listener (`bb scheduler serve
 * --health-listen HOST:PORT`; docs/operate.md, "Health listener"): a
 * Worker thread (health.worker.ts) with its own event loop and its own
 * port, answering GET /healthz while the main loop is busy or stalled, the
 * way Envoy keeps its admin port apart. The main loop beats into a shared
 * buffer (loopHeartbeat.ts) and, on a beat, reads storage health
 * (SchedulerWorker.health()) at most once per STORAGE_PROBE_INTERVAL_MS,
 * healthy or faulted, and publishes it when it changed
 * (storagePublisher.ts).
 *
 * Owns: the Worker, the heartbeat timer. Must never: leave the Worker
 * running after stop(), or keep the process alive by itself.
 */
import { heartbeatBuffer, LoopHeartbeat, MAX_LOOP_STALL_MS } from "./loopHeartbeat.ts";
import type { StorageState } from "./healthAnswer.ts";
import { type Clock, systemClock } from "../../protocol/clock.ts";
import { StoragePublisher } from "./storagePublisher.ts";

/** The first message to the health Worker. */
export interface HealthWorkerInit {
  type: "start";
  heartbeat: SharedArrayBuffer;
  hostname: string;
  port: number;
  maxStallMs: number;
}

/** The health Worker's one answer to HealthWorkerInit. */
export type HealthWorkerReply = { type: "listening"; port: number } | { type: "failed"; message: string };

/**
 * The Worker's entry, relative to the repository. A standalone `bb` must
 * embed it (package.json "build", compileBb: `bun build --compile bin/bb.ts
 * src/scheduler/health/health.worker.ts`); Bun stores it at
 * /$bunfs/root/src/scheduler/health/health.worker.js.
 */
export const HEALTH_WORKER_ENTRY = "src/scheduler/health/health.worker.ts";

/** Where to load the Worker from: beside this file from source, the embedded copy in a compiled binary. */
export function healthWorkerUrl(): string {
  const beside = new URL("./health.worker.ts", import.meta.url);
  if (!beside.pathname.startsWith("/$bunfs/")) return beside.href;
  return "/$bunfs/root/" + HEALTH_WORKER_ENTRY.replace(/\.ts$/, ".js");
}

/** How long the Worker may take to bind its port before start fails, ms. */
export const HEALTH_START_TIMEOUT_MS = 10_000;

/** A running health listener. */
export interface HealthListener {
  readonly url: string;
  readonly port: number;
  /** Ends the heartbeat and the Worker (its port closes with it). */
  stop(): void;
}

/** Options of startHealthListener. */
export interface HealthListenerOptions {
  hostname: string;
  /** 0: any free port (see `port` of the result). */
  port: number;
  /** The main loop's storage health (SchedulerWorker.health()), read on a beat at most once per STORAGE_PROBE_INTERVAL_MS. */
  storage: () => StorageState;
  /** Spaces the storage reads (monoMs); default systemClock. */
  clock?: Clock;
  /** Default MAX_LOOP_STALL_MS (tests lower it). */
  maxStallMs?: number;
}

/** Starts the listener. Rejects with Bun's message when the address cannot be bound (the Worker is ended then). */
export async function startHealthListener(o: HealthListenerOptions): Promise<HealthListener> {
  const buffer = heartbeatBuffer();
  const worker = new Worker(healthWorkerUrl());
  const storage = new StoragePublisher(o.storage, (m) => worker.postMessage(m), o.clock ?? systemClock);
  const beat = new LoopHeartbeat(buffer, () => storage.onBeat());
  const stop = () => {
    beat.stop();
    worker.terminate();
  };
  try {
    const port = await new Promise<number>((done, fail) => {
      const timer = setTimeout(() => fail(new Error("the health listener did not start")), HEALTH_START_TIMEOUT_MS);
      worker.onmessage = (e: MessageEvent<HealthWorkerReply>) => {
        clearTimeout(timer);
        if (e.data.type === "listening") done(e.data.port);
        else fail(new Error(`health listener ${o.hostname}:${o.port}: ${e.data.message}`));
      };
      worker.onerror = (e) => {
        clearTimeout(timer);
        fail(new Error(`health listener: ${e.message}`));
      };
      const init: HealthWorkerInit = {
        type: "start",
        heartbeat: buffer,
        hostname: o.hostname,
        port: o.port,
        maxStallMs: o.maxStallMs ?? MAX_LOOP_STALL_MS,
      };
      beat.start();
      worker.postMessage(init);
    });
    worker.unref();
    const host = o.hostname.includes(":") ? `[${o.hostname}]` : o.hostname;
    return { url: `http://${host}:${port}`, port, stop };
  } catch (e) {
    stop();
    throw e;
  }
}
