/**
 * The health listener's thread (a Bun Worker: its own event loop): serves
 * GET /healthz on its own address (healthAnswer.ts) from what it knows
 * without the main loop: the main loop's age from the shared heartbeat
 * (loopHeartbeat.ts, sampled every LOOP_SAMPLE_INTERVAL_MS) and the storage
 * health the main loop last posted. A burst or a stall on the scheduler's
 * port therefore neither delays its answer nor hides behind it.
 *
 * Messages: in, one HealthWorkerInit then StorageState updates; out, one
 * HealthWorkerReply (listening, or failed with Bun's message).
 * Must never: call into the scheduler (it has no handle on it), or read a
 * body (healthAnswer refuses one before reading).
 */
import { healthAnswer, type StorageState } from "./healthAnswer.ts";
import { LOOP_SAMPLE_INTERVAL_MS, LoopWatch } from "./loopHeartbeat.ts";
import type { HealthWorkerInit, HealthWorkerReply } from "./healthListener.ts";

declare const self: Worker;

let storage: StorageState = { ok: true, detail: "" };
let started = false;

function reply(m: HealthWorkerReply): void {
  self.postMessage(m);
}

function start(init: HealthWorkerInit): void {
  const watch = new LoopWatch(init.heartbeat);
  const sampler = setInterval(() => watch.sample(), LOOP_SAMPLE_INTERVAL_MS);
  try {
    const server = Bun.serve({
      hostname: init.hostname,
      port: init.port,
      // Out of reach, as serve.ts's BUN_MAX_REQUEST_BODY_BYTES: Bun's own 413 has no problem body; healthAnswer refuses any body (413 BODY_TOO_LARGE) unread, and Bun discards unread bytes.
      maxRequestBodySize: Number.MAX_SAFE_INTEGER,
      idleTimeout: 10,
      fetch: (req) => healthAnswer(req, { mainLoopAgeMs: watch.ageMs(), maxStallMs: init.maxStallMs, storage }),
    });
    reply({ type: "listening", port: server.port ?? init.port });
  } catch (e) {
    clearInterval(sampler);
    reply({ type: "failed", message: (e as Error).message });
  }
}

self.onmessage = (e: MessageEvent<HealthWorkerInit | ({ type: "storage" } & StorageState)>) => {
  const m = e.data;
  if (m.type === "storage") storage = { ok: m.ok, detail: m.detail, ...(m.code ? { code: m.code } : {}) };
  else if (!started) {
    started = true;
    start(m);
  }
};
