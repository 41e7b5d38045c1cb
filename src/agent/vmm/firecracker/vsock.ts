/**
 * Firecracker's hybrid vsock, host side (reference vsock.md): host-initiated
 * connections dial the device's Unix socket and send `CONNECT <port>\n`,
 * answered by `OK <hostport>\n`; guest-initiated connections to host port P
 * arrive on a Unix socket the host listens on at `<uds_path>_P`.
 *
 * Implements the transport of spec "Guest handshake": the agent listens on
 * vsock port 1025 (the guest connects there and sends GuestReady); the guest
 * control port is 1024 (the agent dials it to adopt a VM after a restart).
 * Must never: read an unbounded acknowledgement line, or accept more than one
 * connection per listener.
 */
import type { Socket, UnixSocketListener } from "bun";
import { rmSync } from "node:fs";
import type { GuestChannel } from "../driver.ts";
import { vmmError } from "../qemuHost.ts";
import { SocketChannel } from "../socketChannel.ts";

/** The guest's control port (spec "Guest handshake"). */
export const GUEST_CONTROL_PORT = 1024;
/** The host port the guest connects to (spec "Guest handshake"). */
export const HOST_LISTEN_PORT = 1025;
/** Longest acknowledgement line accepted, bytes (`OK ` + a u32 + `\n` fits easily). */
export const MAX_ACK_LINE_BYTES = 64;
/** Pause between connection attempts, ms. */
const RETRY_MS = 50;

/** The host path where guest-initiated connections to `port` arrive (vsock.md "Guest-Initiated Connections"). */
export function guestInitiatedPath(udsPath: string, port: number): string {
  return `${udsPath}_${port}`;
}

/** Parses `OK <hostport>` (without the newline); the host-side port, or null when the line is anything else. */
export function parseConnectAck(line: string): number | null {
  const m = /^OK ([0-9]{1,10})$/.exec(line);
  return m ? Number(m[1]) : null;
}

type Attempt = { ok: true; channel: SocketChannel; hostPort: number } | { ok: false; retry: boolean; reason: string };

function attempt(udsPath: string, port: number, timeoutMs: number): Promise<Attempt> {
  return new Promise<Attempt>((resolve) => {
    const ch = new SocketChannel();
    let ack = Buffer.alloc(0);
    let done = false;
    const finish = (a: Attempt, s?: Socket<undefined>) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (!a.ok) s?.end();
      resolve(a);
    };
    const timer = setTimeout(
      () => finish({ ok: false, retry: true, reason: "no acknowledgement" }, ch.socket ?? undefined),
      timeoutMs,
    );
    Bun.connect<undefined>({
      unix: udsPath,
      socket: {
        open: (s) => void s.write(`CONNECT ${port}\n`),
        data: (s, data) => {
          if (done) return ch.received(data);
          ack = Buffer.concat([ack, data]);
          const nl = ack.indexOf(0x0a);
          if (nl < 0) {
            if (ack.length > MAX_ACK_LINE_BYTES)
              finish({ ok: false, retry: false, reason: "acknowledgement line too long" }, s);
            return;
          }
          const hostPort = parseConnectAck(ack.subarray(0, nl).toString("utf8"));
          if (hostPort === null)
            return finish(
              {
                ok: false,
                retry: false,
                reason: `unexpected reply ${JSON.stringify(ack.subarray(0, nl).toString("utf8"))}`,
              },
              s,
            );
          ch.socket = s;
          finish({ ok: true, channel: ch, hostPort });
          if (ack.length > nl + 1) ch.received(ack.subarray(nl + 1));
        },
        drain: () => ch.flush(),
        close: () =>
          done
            ? ch.closedByPeer()
            : finish({ ok: false, retry: true, reason: "closed before acknowledgement (no guest listener yet)" }),
        error: () => (done ? ch.closedByPeer() : finish({ ok: false, retry: true, reason: "socket error" })),
      },
    }).catch((e: Error) => finish({ ok: false, retry: true, reason: e.message }));
  });
}

/**
 * Host-initiated connection to guest `port` through the hybrid vsock socket
 * at `udsPath`, retrying every 50 ms until `timeoutMs` (Firecracker closes
 * the connection while no guest listens). Resolves with the channel and the
 * host-side port from `OK <hostport>`. Throws VMM_START_FAILED on timeout or
 * on a reply that is not `OK <n>`.
 */
export async function connectHybridVsock(
  udsPath: string,
  port: number,
  timeoutMs: number,
): Promise<{ channel: GuestChannel; hostPort: number }> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const left = Math.max(1, deadline - performance.now());
    const a = await attempt(udsPath, port, left);
    if (a.ok) return { channel: a.channel, hostPort: a.hostPort };
    if (!a.retry) throw vmmError(`vsock CONNECT ${port} via ${udsPath}: ${a.reason}`);
    if (performance.now() >= deadline)
      throw vmmError(`vsock CONNECT ${port} via ${udsPath} timed out after ${timeoutMs} ms: ${a.reason}`);
    await Bun.sleep(RETRY_MS);
  }
}

/** A listener for guest-initiated connections to one host port. */
export interface VsockListener {
  /** Host path of the listening socket (`<uds_path>_<port>`). */
  readonly path: string;
  /** Resolves with the first guest connection; throws VMM_START_FAILED if none arrives within `timeoutMs` or the listener closed. */
  accept(timeoutMs: number): Promise<GuestChannel>;
  /** Stops listening and removes the socket file; an accepted channel stays open. Idempotent. */
  close(): void;
}

/**
 * Listens at `<udsPath>_<port>` for guest-initiated connections (vsock.md).
 * Accepts exactly one; later connections are ended at once. The socket file
 * is created with the process umask; the caller sets its owner and mode so the
 * jailed Firecracker can connect.
 */
export function listenHybridVsock(udsPath: string, port: number): VsockListener {
  const path = guestInitiatedPath(udsPath, port);
  rmSync(path, { force: true });
  let accepted: SocketChannel | null = null;
  let waiter: ((ch: SocketChannel | null) => void) | null = null;
  let closed = false;
  const listener: UnixSocketListener<undefined> = Bun.listen<undefined>({
    unix: path,
    socket: {
      open: (s) => {
        if (accepted || closed) return void s.end();
        accepted = new SocketChannel();
        accepted.socket = s;
        waiter?.(accepted);
      },
      data: (s, data) => (accepted?.socket === s ? accepted.received(data) : undefined),
      drain: (s) => (accepted?.socket === s ? accepted.flush() : undefined),
      close: (s) => (accepted?.socket === s ? accepted.closedByPeer() : undefined),
      error: (s) => (accepted?.socket === s ? accepted.closedByPeer() : undefined),
    },
  });
  return {
    path,
    accept(timeoutMs: number): Promise<GuestChannel> {
      if (accepted) return Promise.resolve(accepted);
      if (closed) return Promise.reject(vmmError(`vsock listener ${path} is closed`));
      return new Promise<GuestChannel>((resolve, reject) => {
        const timer = setTimeout(() => {
          waiter = null;
          reject(vmmError(`no guest connection on ${path} within ${timeoutMs} ms`));
        }, timeoutMs);
        waiter = (ch) => {
          clearTimeout(timer);
          waiter = null;
          if (ch) resolve(ch);
          else reject(vmmError(`vsock listener ${path} closed while waiting`));
        };
      });
    },
    close(): void {
      if (closed) return;
      closed = true;
      listener.stop(false);
      rmSync(path, { force: true });
      waiter?.(null);
    },
  };
}
