/**
 * Test data streams that are cheap to make and check: `streamBlock(seed)` is
 * 1 MiB of xorshift32 bytes; a stream of N bytes repeats it with each 1 MiB
 * block's first 8 bytes replaced by its block number, so lost, duplicated or
 * reordered blocks change the SHA-256 over the stream.
 */
import { createHash } from "node:crypto";

/** Size of the repeated block, bytes. */
export const STREAM_BLOCK_BYTES = 1 << 20;
const blocks = new Map<number, Uint8Array>();

/** The 1 MiB block for `seed` (cached). */
export function streamBlock(seed: number): Uint8Array {
  let b = blocks.get(seed);
  if (b) return b;
  b = new Uint8Array(STREAM_BLOCK_BYTES);
  const w = new Uint32Array(b.buffer);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < w.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    w[i] = x >>> 0;
  }
  blocks.set(seed, b);
  return b;
}

/** Calls `chunk` with consecutive pieces (≤ `chunkBytes`) of the N-byte stream for `seed`. Pieces are fresh copies. */
export async function forEachStreamChunk(
  bytes: number,
  seed: number,
  chunkBytes: number,
  chunk: (c: Uint8Array) => unknown,
): Promise<void> {
  const block = streamBlock(seed);
  for (let off = 0; off < bytes; ) {
    const index = Math.floor(off / STREAM_BLOCK_BYTES);
    const inBlock = off % STREAM_BLOCK_BYTES;
    const n = Math.min(chunkBytes, bytes - off, STREAM_BLOCK_BYTES - inBlock);
    const c = block.slice(inBlock, inBlock + n);
    for (let i = inBlock; i < 8 && i < inBlock + n; i++) c[i - inBlock] = (index / 256 ** i) & 0xff;
    await chunk(c);
    off += n;
  }
}

/** SHA-256 (hex) of the N-byte stream for `seed`. */
export async function streamSha256(bytes: number, seed: number): Promise<string> {
  const h = createHash("sha256");
  await forEachStreamChunk(bytes, seed, STREAM_BLOCK_BYTES, (c) => h.update(c));
  return h.digest("hex");
}
