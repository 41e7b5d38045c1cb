/**
 * Starts a scheduler process: loads (or writes) the manifest, opens the
 * object runtime on the data directory, and serves the app (and the
 * rendezvous WebSockets, src/scheduler/rendezvousSocket.ts), and, when
 * asked, the health listener on its own address and thread
 * (health/healthListener.ts).
 * Must never: print a raw token except the dev client file's path.
 */
import { buildApp } from "./app.ts";
import { CallerLimiter, type CallerBounds } from "./callerLimits.ts";
import { withRequestLog } from "./requestLog.ts";
import { RendezvousSockets, type RendezvousSocketData } from "./rendezvousSocket.ts";
import { silentLogger, type Logger } from "../command/log.ts";
import { SchedulerWorker } from "./worker.ts";
import { loadManifest, type DeploymentManifest } from "./manifest.ts";
import type { TimeoutPolicy } from "../domain/allocation.ts";
import { startHealthListener, type HealthListener } from "./health/healthListener.ts";

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
  /** Where the scheduler logs requests and state changes (default: nowhere). */
  log?: Logger;
  /** Per-caller concurrency bounds (default: callerLimits.ts's constants; the burst benchmark's baseline lifts them). */
  callerBounds?: CallerBounds;
  /** Where to serve GET /healthz from a thread of its own (`--health-listen`; default: nowhere). `maxStallMs` defaults to MAX_LOOP_STALL_MS. */
  healthListen?: { hostname: string; port: number; maxStallMs?: number };
}

/** A running scheduler. */
export interface RunningScheduler {
  url: string;
  worker: SchedulerWorker;
  /** The health listener once bound (null without `healthListen`); rejects when its address cannot be bound. */
  health: Promise<HealthListener> | null;
  stop(): Promise<void>;
}

/** Serves the scheduler until `stop()`. Throws if the manifest is invalid or the port is taken. */
export function serveScheduler(opts: ServeOptions): RunningScheduler {
  // The data directory (0700, locked, with a clear error when it cannot be written) is prepared by SchedulerWorker.
  const manifest: DeploymentManifest = loadManifest(opts.manifestPath);
  const publicUrl = `http://${opts.hostname.includes(":") ? `[${opts.hostname}]` : opts.hostname}:${opts.port}`;
  const log = opts.log ?? silentLogger;
  const worker = new SchedulerWorker({
    dataDir: opts.dataDir,
    manifest,
    publicUrl,
    checkpointInBackground: true,
    processMetrics: true,
    log,
    ...(opts.timeouts ? { timeouts: opts.timeouts } : {}),
  });
  worker.start();
  const sockets = new RendezvousSockets(worker);
  let server: Bun.Server<RendezvousSocketData> | null = null;
  const app = buildApp(worker, {
    rendezvous: { sockets, upgrade: (req, data) => server?.upgrade(req, { data }) ?? false },
    limiter: new CallerLimiter(opts.callerBounds),
    health: () => worker.health(),
  });
  // Bun.serve directly (not app.listen) so every answer, the guard's refusals included, passes the request log.
  const fetch = withRequestLog((req) => app.handle(req), { log, clock: worker.env.clock, random: worker.env.random });
  try {
    server = Bun.serve<RendezvousSocketData>({
      hostname: opts.hostname,
      port: opts.port,
      maxRequestBodySize: BUN_MAX_REQUEST_BODY_BYTES,
      idleTimeout: 60,
      fetch,
      websocket: sockets.handlers,
    });
  } catch (e) {
    void worker.close();
    throw e;
  }
  const url = `http://${server.hostname}:${server.port}`;
  log.info("scheduler listening", { url, dataDir: opts.dataDir, region: manifest.region });
  const h = opts.healthListen;
  const health = h
    ? startHealthListener({
        hostname: h.hostname,
        port: h.port,
        storage: () => worker.health(),
        ...(h.maxStallMs !== undefined ? { maxStallMs: h.maxStallMs } : {}),
      })
    : null;
  void health?.then(
    (l) => log.info("health listener", { url: l.url }),
    () => undefined,
  );
  return {
    url,
    worker,
    health,
    async stop() {
      await health?.then(
        (l) => l.stop(),
        () => undefined,
      );
      await server.stop(true);
      await worker.close();
      log.info("scheduler stopped", { url });
    },
  };
}
