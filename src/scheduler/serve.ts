/**
 * Starts a scheduler process: loads (or writes) the manifest, opens the
 * object runtime on the data directory, and serves the app.
 * Must never: print a raw token except the dev client file's path.
 */
import { consola } from "consola";
import { buildApp } from "./app.ts";
import { SchedulerWorker } from "./worker.ts";
import { loadManifest, type DeploymentManifest } from "./manifest.ts";
import type { TimeoutPolicy } from "../domain/allocation.ts";

/**
 * Bun's own request-body cap, in bytes: deliberately out of reach. Bun
 * answers a declared Content-Length over it with a bare 413 and resets a
 * chunked body that passes it, neither with a problem body; so the limits
 * live in the request guard (edge.ts), which refuses a declared length over
 * the route's limit before reading and cuts any other body off at the
 * limit. Measured (Bun 1.4.5): bytes a handler leaves unread are discarded
 * by Bun, not buffered.
 */
export const BUN_MAX_REQUEST_BODY_BYTES = Number.MAX_SAFE_INTEGER;

/** Options for `serveScheduler`. */
export interface ServeOptions {
  dataDir: string;
  manifestPath: string;
  hostname: string;
  port: number;
  timeouts?: Partial<TimeoutPolicy>;
}

/** A running scheduler. */
export interface RunningScheduler {
  url: string;
  worker: SchedulerWorker;
  stop(): Promise<void>;
}

/** Serves the scheduler until `stop()`. Throws if the manifest is invalid or the port is taken. */
export function serveScheduler(opts: ServeOptions): RunningScheduler {
  // The data directory (0700, locked, with a clear error when it cannot be written) is prepared by SchedulerWorker.
  const manifest: DeploymentManifest = loadManifest(opts.manifestPath);
  const publicUrl = `http://${opts.hostname.includes(":") ? `[${opts.hostname}]` : opts.hostname}:${opts.port}`;
  const worker = new SchedulerWorker({ dataDir: opts.dataDir, manifest, publicUrl, checkpointInBackground: true, ...(opts.timeouts ? { timeouts: opts.timeouts } : {}) });
  worker.start();
  const app = buildApp(worker).listen({ hostname: opts.hostname, port: opts.port, maxRequestBodySize: BUN_MAX_REQUEST_BODY_BYTES, idleTimeout: 60 });
  const url = `http://${app.server!.hostname}:${app.server!.port}`;
  consola.info(`scheduler listening on ${url} (data ${opts.dataDir})`);
  return {
    url,
    worker,
    async stop() {
      await app.stop(true);
      await worker.close();
    },
  };
}
