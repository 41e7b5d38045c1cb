/**
 * Starts a scheduler process: loads (or writes) the manifest, opens the
 * object runtime on the data directory, and serves the app.
 * Must never: print a raw token except the dev client file's path.
 */
import { mkdirSync } from "node:fs";
import { consola } from "consola";
import { buildApp } from "./app.ts";
import { SchedulerWorker } from "./worker.ts";
import { loadManifest, type DeploymentManifest } from "./manifest.ts";
import { MAX_REQUEST_BODY_BYTES } from "../protocol/api.ts";
import type { TimeoutPolicy } from "../domain/allocation.ts";

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
  mkdirSync(opts.dataDir, { recursive: true });
  const manifest: DeploymentManifest = loadManifest(opts.manifestPath);
  const publicUrl = `http://${opts.hostname.includes(":") ? `[${opts.hostname}]` : opts.hostname}:${opts.port}`;
  const worker = new SchedulerWorker({ dataDir: opts.dataDir, manifest, publicUrl, checkpointInBackground: true, ...(opts.timeouts ? { timeouts: opts.timeouts } : {}) });
  worker.start();
  const app = buildApp(worker).listen({ hostname: opts.hostname, port: opts.port, maxRequestBodySize: MAX_REQUEST_BODY_BYTES * 2, idleTimeout: 60 });
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
