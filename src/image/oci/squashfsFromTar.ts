/**
 * Turning the merged root's tar stream into a squashfs without a tar file
 * on disk: the stream goes straight into `mksquashfs - OUT -tar` (so
 * mksquashfs compresses while the tree is still being written, on the other
 * core), in large batched writes with pipe backpressure; and the readers of
 * staged file bodies (positional reads from the per-layer copies).
 *
 * Owns: the mksquashfs invocation (compressor, level, root metadata,
 * SOURCE_DATE_EPOCH: mksquashfs 4.5 ignores -root-time with -tar), batching
 * and error handling of the pipe. Must never: leave mksquashfs running
 * after it returns or throws, or hide mksquashfs's own error text.
 */
import { spawn } from "node:child_process";
import { closeSync, openSync, readSync } from "node:fs";
import type { StagedBody } from "./rootTree.ts";

/** Bytes gathered before one write to mksquashfs's stdin. */
export const SQUASHFS_PIPE_BATCH_BYTES = 1 << 20;
/** Tail of mksquashfs's output kept for an error message, chars. */
const MAX_TOOL_OUTPUT_CHARS = 4000;

/** What mksquashfs is told besides the stream. */
export interface SquashfsOptions {
  compressor: string;
  level: number;
  root: { mode: number; uid: number; gid: number };
  /** Seconds since the epoch for the root directory and the file system time. */
  sourceDateEpoch: number;
}

/** Where the merged tar stream goes: header and padding bytes, and staged bodies copied by position. */
export interface TarSink {
  /** Appends bytes (copied: the caller may reuse `chunk`). */
  write(chunk: Uint8Array): Promise<void>;
  /** Appends the `size` bytes at `offset` of `path`. Throws a plain Error when the file is shorter. */
  copyBody(body: StagedBody): Promise<void>;
}

/**
 * Runs `mksquashfs - outPath -tar …` and lets `produce` write the tar stream
 * to it through a TarSink (batched into SQUASHFS_PIPE_BATCH_BYTES buffers
 * that are reused once the pipe took them; await each call for
 * backpressure). Resolves when the stream is written and mksquashfs exited
 * 0. Throws what `produce` throws (mksquashfs is killed), or a plain Error
 * with mksquashfs's output when it fails or exits early.
 */
export async function squashfsFromTar(
  outPath: string,
  o: SquashfsOptions,
  produce: (sink: TarSink) => Promise<void>,
): Promise<void> {
  const child = spawn(
    "mksquashfs",
    [
      "-",
      outPath,
      "-tar",
      "-noappend",
      "-no-progress",
      "-quiet",
      "-comp",
      o.compressor,
      "-Xcompression-level",
      String(o.level),
      "-root-mode",
      o.root.mode.toString(8),
      "-root-uid",
      String(o.root.uid),
      "-root-gid",
      String(o.root.gid),
    ],
    { stdio: ["pipe", "pipe", "pipe"], env: { ...process.env, SOURCE_DATE_EPOCH: String(o.sourceDateEpoch) } },
  );
  let output = "";
  const keep = (d: Buffer) => void (output = (output + d.toString()).slice(-MAX_TOOL_OUTPUT_CHARS));
  child.stdout.on("data", keep);
  child.stderr.on("data", keep);
  let closed = false;
  const exited = new Promise<number>((res) => {
    child.on("error", (e) => {
      keep(Buffer.from(String(e)));
      closed = true;
      res(-1);
    });
    child.on("close", (code) => {
      closed = true;
      res(code ?? -1);
    });
  });
  let pipeBroken = false;
  child.stdin.on("error", () => void (pipeBroken = true));
  const fail = async () => new Error(`mksquashfs exited ${await exited}: ${output.trim().slice(-600)}`);

  const free: Buffer[] = [];
  let batch: Buffer = Buffer.allocUnsafe(SQUASHFS_PIPE_BATCH_BYTES);
  let used = 0;
  const flush = async () => {
    if (used === 0) return;
    if (closed || pipeBroken) throw await fail();
    const full = batch;
    const ok = child.stdin.write(full.subarray(0, used), () => void free.push(full));
    batch = free.pop() ?? Buffer.allocUnsafe(SQUASHFS_PIPE_BATCH_BYTES);
    used = 0;
    if (!ok) {
      await new Promise<void>((res) => {
        child.stdin.once("drain", res);
        void exited.then(() => res());
      });
    }
  };
  const fds = new Map<string, number>();
  const sink: TarSink = {
    async write(c) {
      if (c.length < batch.length - used) {
        // The common case (a header or padding): one copy, no views.
        batch.set(c, used);
        used += c.length;
        return;
      }
      let at = 0;
      while (at < c.length) {
        const n = Math.min(c.length - at, batch.length - used);
        batch.set(c.subarray(at, at + n), used);
        used += n;
        at += n;
        if (used === batch.length) await flush();
      }
    },
    async copyBody(b) {
      let fd = fds.get(b.path);
      if (fd === undefined) {
        fd = openSync(b.path, "r");
        fds.set(b.path, fd);
      }
      let pos = b.offset;
      let left = b.size;
      while (left > 0) {
        const got = readSync(fd, batch, used, Math.min(left, batch.length - used), pos);
        if (got === 0) throw new Error(`staged body at ${b.path}:${b.offset} ends early`);
        used += got;
        pos += got;
        left -= got;
        if (used === batch.length) await flush();
      }
    },
  };
  try {
    await produce(sink);
    await flush();
  } catch (e) {
    child.kill("SIGKILL");
    await exited;
    throw e;
  } finally {
    for (const fd of fds.values()) closeSync(fd);
  }
  child.stdin.end();
  const code = await exited;
  if (code !== 0 || pipeBroken) throw await fail();
}
