/**
 * The guest's end of the control channel: the virtio-serial port named `ctl`,
 * opened once read-write and kept open (docs/architecture.md, "Booting without KVM": reopening around the
 * host's connect lost a reply and hung the guest).
 *
 * Implements the transport of spec "Guest handshake" for QEMU microvm.
 * While the host side is disconnected, reads return EOF and writes block in
 * the kernel; the reader therefore polls after EOF instead of stopping.
 * Must never: close and reopen the port, or buffer without bound.
 */
import { openSync, read, readdirSync, readFileSync, write } from "node:fs";

/** Name of the control port (QEMU `virtserialport,name=ctl`). */
export const CONTROL_PORT_NAME = "ctl";
/** Sleep after an EOF (host not connected) before reading again, ms. */
const EOF_RETRY_MS = 50;
/** Read buffer size, bytes. */
const READ_CHUNK_BYTES = 64 * 1024;

/** Finds `/dev/vportNpM` whose sysfs name is `ctl`, waiting up to `timeoutMs`. Throws when absent. */
export async function findControlPort(timeoutMs: number): Promise<string> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    let ports: string[] = [];
    try {
      ports = readdirSync("/sys/class/virtio-ports");
    } catch {}
    for (const p of ports) {
      try {
        if (readFileSync(`/sys/class/virtio-ports/${p}/name`, "utf8").trim() === CONTROL_PORT_NAME) return `/dev/${p}`;
      } catch {}
    }
    if (performance.now() > deadline) throw new Error(`no virtio port named ${CONTROL_PORT_NAME}`);
    await Bun.sleep(50);
  }
}

/** A byte stream over one long-lived fd: serialized writes, a read loop that survives host reconnects. */
export class PortChannel {
  private readonly fd: number;
  private writing: Promise<void> = Promise.resolve();

  /** Opens `path` read-write once. Throws on open failure. */
  constructor(path: string) {
    this.fd = openSync(path, "r+");
  }

  /** Queues `text` for writing; resolves once fully written (blocks while the host is away). */
  send(text: string): Promise<void> {
    const bytes = Buffer.from(text, "utf8");
    const next = this.writing.then(() => writeAll(this.fd, bytes));
    this.writing = next.catch(() => {});
    return next;
  }

  /** Reads forever, calling `onChunk` with decoded text. EOF means "host not connected": retry. */
  async readLoop(onChunk: (text: string) => void): Promise<never> {
    const buf = Buffer.alloc(READ_CHUNK_BYTES);
    const decoder = new TextDecoder();
    for (;;) {
      const n = await new Promise<number>((res) =>
        read(this.fd, buf, 0, buf.length, null, (err, n) => res(err ? -1 : n)),
      );
      if (n > 0) onChunk(decoder.decode(buf.subarray(0, n), { stream: true }));
      else await Bun.sleep(EOF_RETRY_MS);
    }
  }
}

async function writeAll(fd: number, bytes: Buffer): Promise<void> {
  let off = 0;
  while (off < bytes.length) {
    off += await new Promise<number>((res, rej) =>
      write(fd, bytes, off, bytes.length - off, null, (e, n) => (e ? rej(e) : res(n))),
    );
  }
}
