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
/** Largest positional read of a staged body, bytes. */
export const BODY_READ_BYTES = 1 << 20;
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

/**
 * Runs `mksquashfs - outPath -tar …` and lets `produce` write the tar stream
 * to it (`sink` batches; await it for backpressure). Resolves when the
 * stream is written and mksquashfs exited 0. Throws what `produce` throws
 * (mksquashfs is killed), or a plain Error with mksquashfs's output when it
 * fails or exits early.
 */
export async function squashfsFromTar(outPath: string, o: SquashfsOptions, produce: (sink: (chunk: Uint8Array) => Promise<void> | void) => Promise<void>): Promise<void> {
  const child = spawn("mksquashfs", ["-", outPath, "-tar", "-noappend", "-no-progress", "-quiet",
    "-comp", o.compressor, "-Xcompression-level", String(o.level), "-root-mode", o.root.mode.toString(8), "-root-uid", String(o.root.uid), "-root-gid", String(o.root.gid)],
  { stdio: ["pipe", "pipe", "pipe"], env: { ...process.env, SOURCE_DATE_EPOCH: String(o.sourceDateEpoch) } });
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

  let batch = Buffer.allocUnsafe(SQUASHFS_PIPE_BATCH_BYTES);
  let used = 0;
  const send = async (b: Uint8Array) => {
    if (closed || pipeBroken) throw await fail();
    if (!child.stdin.write(b)) {
      await new Promise<void>((res) => {
        child.stdin.once("drain", res);
        void exited.then(() => res());
      });
    }
  };
  const flush = async () => {
    if (used === 0) return;
    const b = batch.subarray(0, used);
    batch = Buffer.allocUnsafe(SQUASHFS_PIPE_BATCH_BYTES);
    used = 0;
    await send(b);
  };
  const sink = async (c: Uint8Array) => {
    if (c.length >= SQUASHFS_PIPE_BATCH_BYTES / 2) {
      await flush();
      await send(c);
      return;
    }
    if (used + c.length > batch.length) await flush();
    batch.set(c, used);
    used += c.length;
  };
  try {
    await produce(sink);
    await flush();
  } catch (e) {
    child.kill("SIGKILL");
    await exited;
    throw e;
  }
  child.stdin.end();
  const code = await exited;
  if (code !== 0 || pipeBroken) throw await fail();
}

/** Reads staged bodies by position, one open descriptor per staging file; `close` when done. */
export class StagedBodyReader {
  private readonly fds = new Map<string, number>();

  /**
   * Yields the `body.size` bytes at `body.offset` of `body.path`. Throws a
   * plain Error when the file is shorter (a staging file changed under the
   * build).
   */
  async *read(body: StagedBody): AsyncGenerator<Uint8Array> {
    let fd = this.fds.get(body.path);
    if (fd === undefined) {
      fd = openSync(body.path, "r");
      this.fds.set(body.path, fd);
    }
    let pos = body.offset;
    let left = body.size;
    while (left > 0) {
      const n = Math.min(left, BODY_READ_BYTES);
      const buf = Buffer.allocUnsafe(n);
      const got = readSync(fd, buf, 0, n, pos);
      if (got === 0) throw new Error(`staged body at ${body.path}:${body.offset} ends early`);
      yield got === n ? buf : buf.subarray(0, got);
      pos += got;
      left -= got;
    }
  }

  /** Closes every descriptor. Throws nothing. */
  close(): void {
    for (const fd of this.fds.values()) closeSync(fd);
    this.fds.clear();
  }
}
