/**
 * The shared-memory batch ring between the TUN reader Worker and the thread
 * that owns the device (native/tun/tun.ts).
 *
 * Layout: a control Int32Array (stop flag, free-slot count, fatal errno) and
 * `slots` fixed-size slots in one SharedArrayBuffer. The reader fills slots in
 * order 0,1,…,slots-1,0,… and posts {slot, count, bytes}; the owner handles
 * batches in the same order and returns each slot by incrementing the free
 * count. Inside a slot every packet is a little-endian u16 length followed by
 * its bytes. Memory is fixed at `slots * slotBytes` (the read bound).
 * Must never: allocate per packet, or let the reader run ahead of the free count.
 */

/** Index of the stop flag in the control array (1 = stop). */
export const CTL_STOP = 0;
/** Index of the number of free slots. */
export const CTL_FREE = 1;
/** Index of the errno that stopped the reader (0 = none). */
export const CTL_ERRNO = 2;
/** Length of the control array, in Int32 elements. */
export const CTL_LENGTH = 4;

/** Bytes of the length prefix in front of each packet. */
export const PACKET_PREFIX_BYTES = 2;

/** What the owner hands to the reader Worker when it starts. */
export interface ReaderInit {
  /** The TUN file descriptor (non-blocking). */
  fd: number;
  /** An eventfd the owner writes to wake the reader out of poll(2) on close. */
  wakeFd: number;
  /** Control array buffer (CTL_* indexes). */
  control: SharedArrayBuffer;
  /** The slots, `slots * slotBytes` bytes. */
  ring: SharedArrayBuffer;
  slots: number;
  slotBytes: number;
  /** Largest packet the reader must be able to take whole (the device MTU), bytes. */
  maxPacketBytes: number;
  /** Most packets in one batch. */
  maxBatchPackets: number;
}

/** A filled slot, posted by the reader. */
export interface BatchMessage {
  type: "batch";
  slot: number;
  count: number;
  /** Bytes used in the slot, prefixes included. */
  bytes: number;
}

/** The reader stopped: on request (errno 0) or because read/poll failed. */
export interface StoppedMessage {
  type: "stopped";
  errno: number;
  reason: string;
}

/** Messages from the reader Worker. */
export type ReaderMessage = BatchMessage | StoppedMessage;

/** Splits a filled slot into packet views (no copy; valid until the slot is returned). */
export function slotPackets(ring: Uint8Array, slotOffset: number, count: number): Uint8Array[] {
  const out: Uint8Array[] = new Array(count);
  let off = slotOffset;
  for (let i = 0; i < count; i++) {
    const len = ring[off]! | (ring[off + 1]! << 8);
    off += PACKET_PREFIX_BYTES;
    out[i] = ring.subarray(off, off + len);
    off += len;
  }
  return out;
}
