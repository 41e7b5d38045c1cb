/**
 * The proxy's local side (spec "Data path" step 5): a TCP listener on
 * 127.0.0.1 whose every accepted connection is joined to a new inner TCP
 * connection through the tunnel, byte for byte, with backpressure both ways
 * and both half-closes carried over.
 *
 * Owns: the listener and the joined pairs. Must never: listen on anything
 * but the loopback address it is given, buffer more than one chunk per
 * direction (the local socket is paused while the inner write is pending;
 * the inner connection is read only as the local socket drains), or leave a
 * pair half-open after either side fails.
 */
import { createServer, type Server, type Socket } from "node:net";
import type { TcpConnection } from "../netstack/index.ts";

/** Counters of the forwarder. */
export interface ForwarderStats {
  accepted: number;
  active: number;
  /** Inner connections that could not be opened (the local connection was closed). */
  connectFailures: number;
  bytesUp: number;
  bytesDown: number;
}

/** Options of startForwarder. */
export interface ForwarderOptions {
  /** Loopback address to bind: "127.0.0.1" (default) or "::1". */
  host?: string;
  port: number;
  /** Opens the inner connection for one accepted local connection. */
  connect(): Promise<TcpConnection>;
  /** Called with a sentence when an inner connection fails to open. */
  onConnectError?(message: string): void;
}

/** A running forwarder. */
export interface Forwarder {
  readonly port: number;
  stats(): ForwarderStats;
  /** Stops listening and ends every pair. */
  close(): Promise<void>;
}

function join(local: Socket, inner: TcpConnection, stats: ForwarderStats): Promise<void> {
  let failed = false;
  const fail = () => {
    if (failed) return;
    failed = true;
    inner.abort();
    local.destroy();
  };
  const up = new Promise<void>((resolve) => {
    local.on("data", (chunk: Buffer) => {
      local.pause();
      stats.bytesUp += chunk.length;
      inner.write(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.length)).then(
        () => local.resume(),
        () => fail(),
      );
    });
    local.on("end", () => {
      inner.closeWrite().then(resolve, () => (fail(), resolve()));
    });
    local.on("error", () => (fail(), resolve()));
    local.on("close", () => resolve());
  });
  const down = (async () => {
    try {
      for (;;) {
        const chunk = await inner.read();
        if (chunk === null) {
          local.end();
          return;
        }
        stats.bytesDown += chunk.length;
        if (!local.write(chunk)) await new Promise<void>((r) => local.once("drain", r).once("close", r));
        if (local.destroyed) return fail();
      }
    } catch {
      fail();
    }
  })();
  // Both directions ended: the inner connection is closed; the local socket closes itself once its
  // end() has flushed (destroying it here could drop unflushed bytes).
  return Promise.all([up, down]).then(async () => {
    if (!failed) await inner.close().catch(() => inner.abort());
  });
}

/** Listens on `host:port` and joins each connection (see the module doc). Rejects when the port cannot be bound. */
export async function startForwarder(o: ForwarderOptions): Promise<Forwarder> {
  const host = o.host ?? "127.0.0.1";
  if (host !== "127.0.0.1" && host !== "::1") throw new Error(`the proxy listens on loopback only, not ${host}`);
  const stats: ForwarderStats = { accepted: 0, active: 0, connectFailures: 0, bytesUp: 0, bytesDown: 0 };
  const open = new Set<Socket>();
  const server: Server = createServer({ allowHalfOpen: true, pauseOnConnect: true }, (local) => {
    stats.accepted++;
    stats.active++;
    open.add(local);
    local.setNoDelay(true);
    o.connect()
      .then(
        (inner) => {
          local.resume();
          return join(local, inner, stats);
        },
        (e) => {
          stats.connectFailures++;
          o.onConnectError?.((e as Error).message);
          local.destroy();
        },
      )
      .finally(() => {
        stats.active--;
        open.delete(local);
      });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(o.port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const addr = server.address();
  return {
    port: typeof addr === "object" && addr ? addr.port : o.port,
    stats: () => ({ ...stats }),
    close: async () => {
      for (const s of open) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/**
 * Binds 127.0.0.1:`port` and lets it go at once, so `bb proxy` can refuse a
 * port that is taken (or not allowed) before it asks the scheduler for a
 * grant and configures the host. Resolves when the port could be bound;
 * rejects with the bind error (EADDRINUSE, EACCES, …). Another process may
 * still take the port in between; startForwarder then fails as before.
 */
export async function probeLocalPort(port: number, host = "127.0.0.1"): Promise<void> {
  const probe = createServer();
  await new Promise<void>((resolve, reject) => {
    probe.once("error", reject);
    probe.listen({ port, host, exclusive: true }, () => resolve());
  });
  await new Promise<void>((r) => probe.close(() => r()));
}
