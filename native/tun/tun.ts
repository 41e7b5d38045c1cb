/**
 * Linux TUN devices through bun:ffi: open /dev/net/tun, attach it to an
 * interface with ioctl(TUNSETIFF, IFF_TUN | IFF_NO_PI) (raw IPv4/IPv6 packets,
 * no packet-information header), set its MTU, read in a Worker
 * (native/tun/reader.worker.ts) and write from the owner's thread.
 *
 * Implements the host side of docs/architecture.md, "Private networking" (TUN on the
 * host through bun:ffi, reads in a Worker). Addresses and routes are not set
 * here: the caller configures the interface (ip(8) or netlink).
 * Must never: block the owner's event loop (reads happen in the Worker, writes
 * are non-blocking and drop when the kernel refuses), buffer without bound
 * (reads go through a fixed ring), or throw from write().
 */
import { ptr } from "bun:ffi";
import { cString, Errno, loadLibc, O_CLOEXEC, O_NONBLOCK, O_RDWR, type Libc } from "../libc.ts";
import { CTL_FREE, CTL_LENGTH, CTL_STOP, slotPackets, type ReaderInit, type ReaderMessage } from "./ring.ts";

/** ioctl request that attaches a TUN fd to an interface (linux/if_tun.h, _IOW('T', 202, int)). */
export const TUNSETIFF = 0x400454ca;
/** TUN (layer 3) device flag. */
export const IFF_TUN = 0x0001;
/** No 4-byte packet-information header in front of each packet. */
export const IFF_NO_PI = 0x1000;
/** Interface name buffer size including the NUL (linux/if.h); names are at most 15 bytes. */
export const IFNAMSIZ = 16;
/** sizeof(struct ifreq) on Linux. */
const IFREQ_BYTES = 40;
/** Get / set an interface's MTU (linux/sockios.h). */
const SIOCGIFMTU = 0x8921;
const SIOCSIFMTU = 0x8922;
const AF_INET = 2;
const SOCK_DGRAM = 2;
const SOCK_CLOEXEC = 0o2000000;

/** Smallest MTU accepted (IPv6 minimum link MTU, RFC 8200 §5). */
export const MIN_TUN_MTU = 1280;
/**
 * Default MTU: the IPv6 minimum, which is the tunnel MTU (src/protocol/tunnelMtu.ts,
 * ADR 0103; native/ may not import it, a test holds the two equal). Callers pass TUNNEL_MTU.
 */
export const DEFAULT_TUN_MTU = MIN_TUN_MTU;
/** Largest MTU accepted, bytes (bounds each ring slot). */
export const MAX_TUN_MTU = 9000;
/** Bytes per ring slot: one batch of packets. */
export const TUN_SLOT_BYTES = 64 * 1024;
/** Ring slots: batches the owner may hold before the reader pauses. Read memory = slots × slot bytes (1 MiB). */
export const TUN_SLOTS = 16;
/** Most packets in one batch (bounds the per-batch array the handler gets). */
export const TUN_MAX_BATCH_PACKETS = 512;

/**
 * The reader Worker's entry, relative to the repository. A standalone binary
 * must embed it: `bun build --compile bin/bb.ts native/tun/reader.worker.ts`
 * (Bun then stores it at /$bunfs/root/native/tun/reader.worker.js, the
 * repository being the common root of the entry points).
 */
export const TUN_READER_WORKER_ENTRY = "native/tun/reader.worker.ts";

/** Where to load the reader Worker from: beside this file when run from source, the embedded copy in a compiled binary. */
export function readerWorkerUrl(): string {
  const beside = new URL("./reader.worker.ts", import.meta.url);
  if (!beside.pathname.startsWith("/$bunfs/")) return beside.href;
  return "/$bunfs/root/" + TUN_READER_WORKER_ENTRY.replace(/\.ts$/, ".js");
}

/** Stable error codes of TUN operations. */
export type TunErrorCode = "unavailable" | "permission" | "busy" | "invalid-argument" | "io";

/** A TUN failure with a stable code and the errno behind it (0 when none). */
export class TunError extends Error {
  constructor(
    readonly code: TunErrorCode,
    message: string,
    readonly errno = 0,
  ) {
    super(message);
    this.name = "TunError";
  }
}

/** Options of openTun(). */
export interface TunOptions {
  /** Interface name, 1–15 of [A-Za-z0-9_.-]; a `%d` suffix lets the kernel number it. Default "tun%d". */
  name?: string;
  /** Device MTU in bytes, MIN_TUN_MTU..MAX_TUN_MTU. Default DEFAULT_TUN_MTU. Set with SIOCSIFMTU unless already equal. */
  mtu?: number;
}

/** Counters of one device (since open). */
export interface TunStats {
  packetsRead: number;
  bytesRead: number;
  batchesRead: number;
  packetsWritten: number;
  /** Writes the kernel refused (queue full, device down); the packet was dropped. */
  writesDropped: number;
}

/**
 * Called with each batch of packets read from the device. The views point into
 * the shared ring and are valid only until the handler returns: copy to keep.
 */
export type TunPacketHandler = (packets: Uint8Array[]) => void;

const NAME_RE = /^[A-Za-z0-9_.-]{1,13}(%d)?$|^[A-Za-z0-9_.-]{1,15}$/;

/** Linux's error for a failed call: code from the errno, the errno's text. */
function tunError(libc: Libc, what: string, errno: number): TunError {
  const code: TunErrorCode =
    errno === Errno.EPERM || errno === Errno.EACCES
      ? "permission"
      : errno === Errno.EBUSY
        ? "busy"
        : errno === Errno.ENOENT || errno === Errno.ENODEV
          ? "unavailable"
          : errno === Errno.EINVAL
            ? "invalid-argument"
            : "io";
  const hint =
    code === "permission"
      ? " (needs CAP_NET_ADMIN, or a persistent device made with `ip tuntap add NAME mode tun user UID`)"
      : code === "unavailable"
        ? " (no /dev/net/tun: the kernel lacks CONFIG_TUN or the device node is missing)"
        : "";
  return new TunError(code, `${what}: ${libc.describe(errno)}${hint}`, errno);
}

/** An ifreq with `name` in ifr_name; the union starts at byte 16. */
function ifreq(name: string): Buffer {
  const req = Buffer.alloc(IFREQ_BYTES);
  req.write(name, 0, IFNAMSIZ - 1, "utf8");
  return req;
}

/** Sets the interface MTU through an AF_INET datagram socket unless it already equals `mtu`. */
function ensureMtu(libc: Libc, name: string, mtu: number): void {
  const s = libc.sym.socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) throw tunError(libc, "socket(AF_INET) for SIOCSIFMTU", libc.errno());
  try {
    const req = ifreq(name);
    if (libc.sym.ioctl(s, SIOCGIFMTU, ptr(req)) === 0 && req.readInt32LE(16) === mtu) return;
    req.writeInt32LE(mtu, 16);
    if (libc.sym.ioctl(s, SIOCSIFMTU, ptr(req)) !== 0) throw tunError(libc, `set MTU ${mtu} on ${name}`, libc.errno());
  } finally {
    libc.sym.close(s);
  }
}

/**
 * Opens a TUN device (creating the interface unless a persistent one of that
 * name exists) and sets its MTU. The interface starts down and without
 * addresses. Throws TunError: "unavailable" (no /dev/net/tun or libc),
 * "permission" (no CAP_NET_ADMIN and no persistent device for this user),
 * "busy" (name taken by another device), "invalid-argument" (bad name/MTU).
 */
export function openTun(options: TunOptions = {}): TunDevice {
  const name = options.name ?? "tun%d";
  const mtu = options.mtu ?? DEFAULT_TUN_MTU;
  if (!NAME_RE.test(name))
    throw new TunError(
      "invalid-argument",
      `invalid interface name ${JSON.stringify(name)}: 1-15 of [A-Za-z0-9_.-], optionally ending in %d`,
    );
  if (!Number.isInteger(mtu) || mtu < MIN_TUN_MTU || mtu > MAX_TUN_MTU)
    throw new TunError("invalid-argument", `MTU ${mtu} is outside ${MIN_TUN_MTU}..${MAX_TUN_MTU}`);
  const loaded = loadLibc();
  if ("reason" in loaded) throw new TunError("unavailable", loaded.reason);
  const libc = loaded.libc;
  const fd = libc.sym.open(ptr(cString("/dev/net/tun")), O_RDWR | O_NONBLOCK | O_CLOEXEC, 0);
  if (fd < 0) throw tunError(libc, "open /dev/net/tun", libc.errno());
  try {
    const req = ifreq(name);
    req.writeUInt16LE(IFF_TUN | IFF_NO_PI, IFNAMSIZ);
    if (libc.sym.ioctl(fd, TUNSETIFF, ptr(req)) !== 0) throw tunError(libc, `TUNSETIFF ${name}`, libc.errno());
    const actual = req.toString("utf8", 0, req.indexOf(0));
    ensureMtu(libc, actual, mtu);
    return new TunDevice(libc, fd, actual, mtu);
  } catch (e) {
    libc.sym.close(fd);
    throw e;
  }
}

/**
 * An open TUN device. Call start() once to receive packets; write() sends one
 * packet to the kernel; close() stops the reader and closes the fd.
 */
export class TunDevice {
  private readonly stats_: TunStats = {
    packetsRead: 0,
    bytesRead: 0,
    batchesRead: 0,
    packetsWritten: 0,
    writesDropped: 0,
  };
  private worker: Worker | null = null;
  private wakeFd = -1;
  private control: Int32Array | null = null;
  private closed = false;
  private closing: Promise<void> | null = null;
  private stopped: Promise<StoppedInfo> | null = null;

  /** Use openTun(). */
  constructor(
    private readonly libc: Libc,
    /** The device's file descriptor. */
    readonly fd: number,
    /** The interface name the kernel gave the device. */
    readonly name: string,
    /** The MTU set on the device, bytes. */
    readonly mtu: number,
  ) {}

  /** Counters since open (a copy). */
  stats(): TunStats {
    return { ...this.stats_ };
  }

  /**
   * Starts the reader Worker; `onPackets` gets each batch (views valid only
   * during the call). `onStop` is called once if the reader stops by itself
   * (a read error, with the errno text), not on close(). Throws if already started or closed.
   */
  start(onPackets: TunPacketHandler, onStop?: (reason: string) => void): void {
    if (this.closed) throw new TunError("io", `${this.name} is closed`);
    if (this.worker) throw new TunError("invalid-argument", `${this.name} is already started`);
    const wakeFd = this.libc.sym.eventfd(0, O_NONBLOCK | O_CLOEXEC);
    if (wakeFd < 0) throw tunError(this.libc, "eventfd", this.libc.errno());
    this.wakeFd = wakeFd;
    const control = new SharedArrayBuffer(CTL_LENGTH * 4);
    const ring = new SharedArrayBuffer(TUN_SLOTS * TUN_SLOT_BYTES);
    this.control = new Int32Array(control);
    this.control[CTL_FREE] = TUN_SLOTS;
    const ringBytes = new Uint8Array(ring);
    const worker = new Worker(readerWorkerUrl());
    this.worker = worker;
    let resolveStopped!: (s: StoppedInfo) => void;
    this.stopped = new Promise((r) => (resolveStopped = r));
    const ctl = this.control;
    worker.onmessage = (e: MessageEvent<ReaderMessage>) => {
      const m = e.data;
      if (m.type === "stopped") {
        resolveStopped({ errno: m.errno, reason: m.reason });
        if (m.errno !== 0 && !this.closed) onStop?.(m.reason);
        return;
      }
      const s = this.stats_;
      s.batchesRead++;
      s.packetsRead += m.count;
      s.bytesRead += m.bytes - 2 * m.count;
      try {
        if (!this.closed) onPackets(slotPackets(ringBytes, m.slot * TUN_SLOT_BYTES, m.count));
      } finally {
        Atomics.add(ctl, CTL_FREE, 1);
        Atomics.notify(ctl, CTL_FREE);
      }
    };
    worker.onerror = (e) => {
      resolveStopped({ errno: -1, reason: `reader worker error: ${e.message}` });
      if (!this.closed) onStop?.(`reader worker error: ${e.message}`);
    };
    // A Worker that ends without saying "stopped" (terminated, crashed) must not hang close().
    worker.addEventListener("close", () => resolveStopped({ errno: -1, reason: "reader worker exited" }));
    const init: ReaderInit = {
      fd: this.fd,
      wakeFd,
      control,
      ring,
      slots: TUN_SLOTS,
      slotBytes: TUN_SLOT_BYTES,
      maxPacketBytes: this.mtu,
      maxBatchPackets: TUN_MAX_BATCH_PACKETS,
    };
    worker.postMessage(init);
  }

  /**
   * Writes one IP packet to the kernel. Returns false (and counts a drop) when
   * the kernel refuses it (device down, queue full, malformed); never throws.
   */
  write(packet: Uint8Array): boolean {
    if (this.closed || packet.length === 0) {
      this.stats_.writesDropped++;
      return false;
    }
    const r = this.libc.sym.write(this.fd, packet, packet.length);
    if (r === packet.length) {
      this.stats_.packetsWritten++;
      return true;
    }
    this.stats_.writesDropped++;
    return false;
  }

  /** Stops the reader, waits for it to leave poll(2), closes the fds. Idempotent. */
  close(): Promise<void> {
    if (this.closing) return this.closing;
    this.closed = true;
    this.closing = (async () => {
      if (this.worker && this.control) {
        Atomics.store(this.control, CTL_STOP, 1);
        Atomics.notify(this.control, CTL_FREE);
        const one = new BigUint64Array([1n]);
        this.libc.sym.write(this.wakeFd, one, 8);
        await this.stopped;
        this.worker.terminate();
        this.libc.sym.close(this.wakeFd);
        this.worker = null;
      }
      this.libc.sym.close(this.fd);
    })();
    return this.closing;
  }
}

interface StoppedInfo {
  errno: number;
  reason: string;
}
