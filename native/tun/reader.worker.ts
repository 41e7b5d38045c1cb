/**
 * The TUN reader Worker: waits in poll(2) on the device and a wake eventfd,
 * reads every queued packet (non-blocking) into the next free ring slot and
 * posts one message per batch, so the owner's event loop never blocks on the
 * device and pays one message per batch instead of per packet.
 *
 * Layout and protocol: native/tun/ring.ts. When no slot is free the reader
 * stops reading (the kernel's device queue then drops, as a full link would).
 * Must never: read into a slot the owner has not returned, close the fds
 * (the owner does), or throw out of the loop (it posts "stopped" instead).
 */
import { ptr, type Pointer } from "bun:ffi";
import { Errno, loadLibc, POLLERR, POLLHUP, POLLIN, POLLNVAL } from "../libc.ts";
import { CTL_ERRNO, CTL_FREE, CTL_STOP, PACKET_PREFIX_BYTES, type ReaderInit, type ReaderMessage } from "./ring.ts";

/** How long the reader sleeps waiting for a free slot before re-checking the stop flag, ms. */
const SLOT_WAIT_MS = 100;

declare const self: Worker;

function post(m: ReaderMessage): void {
  self.postMessage(m);
}

function run(init: ReaderInit): void {
  const loaded = loadLibc();
  if ("reason" in loaded) return post({ type: "stopped", errno: -1, reason: loaded.reason });
  const { sym, errno, describe } = loaded.libc;
  const ctl = new Int32Array(init.control);
  const ring = new Uint8Array(init.ring);
  const ringPtr = ptr(ring);
  const pollfds = new Int32Array(4); // two struct pollfd {int fd; short events; short revents;}
  const pollView = new DataView(pollfds.buffer);
  pollfds[0] = init.fd;
  pollfds[2] = init.wakeFd;
  const pollPtr = ptr(pollfds);
  const fail = (code: number, what: string) => {
    Atomics.store(ctl, CTL_ERRNO, code);
    post({ type: "stopped", errno: code, reason: `${what}: ${describe(code)}` });
  };
  let slot = 0;
  const room = init.maxPacketBytes + PACKET_PREFIX_BYTES;

  for (;;) {
    if (Atomics.load(ctl, CTL_STOP) === 1) return post({ type: "stopped", errno: 0, reason: "closed" });
    if (Atomics.load(ctl, CTL_FREE) === 0) {
      Atomics.wait(ctl, CTL_FREE, 0, SLOT_WAIT_MS);
      continue;
    }
    pollView.setInt16(4, POLLIN, true);
    pollView.setInt16(6, 0, true);
    pollView.setInt16(12, POLLIN, true);
    pollView.setInt16(14, 0, true);
    const n = sym.poll(pollPtr, 2, -1);
    if (n < 0) {
      const e = errno();
      if (e === Errno.EINTR) continue;
      return fail(e, "poll");
    }
    if (pollView.getInt16(14, true) !== 0) return post({ type: "stopped", errno: 0, reason: "closed" });
    const revents = pollView.getInt16(6, true);
    if (revents & (POLLERR | POLLHUP | POLLNVAL) && !(revents & POLLIN))
      return fail(Errno.EIO, "poll reported the device closed");

    const base = slot * init.slotBytes;
    let off = base;
    let count = 0;
    const end = base + init.slotBytes;
    while (end - off >= room && count < init.maxBatchPackets) {
      const max = Math.min(end - off - PACKET_PREFIX_BYTES, 0xffff);
      const r = sym.read(init.fd, (ringPtr + off + PACKET_PREFIX_BYTES) as Pointer, max);
      if (r < 0) {
        const e = errno();
        if (e === Errno.EAGAIN || e === Errno.EINTR) break;
        if (count > 0) break; // deliver what we have; the next read reports the error
        return fail(e, "read");
      }
      if (r === 0) break;
      ring[off] = r & 0xff;
      ring[off + 1] = r >> 8;
      off += PACKET_PREFIX_BYTES + r;
      count++;
    }
    if (count === 0) continue;
    Atomics.sub(ctl, CTL_FREE, 1);
    post({ type: "batch", slot, count, bytes: off - base });
    slot = (slot + 1) % init.slots;
  }
}

self.onmessage = (e: MessageEvent<ReaderInit>) => {
  try {
    run(e.data);
  } catch (err) {
    post({ type: "stopped", errno: -1, reason: `reader crashed: ${(err as Error).message}` });
  }
};
