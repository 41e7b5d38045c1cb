/**
 * What `bb cp` does once the control client is open (issue 20, "Files"):
 * one file or a whole tree, into the guest or out of it, always streamed
 * (nothing held whole in memory) and checked by SHA-256 — a file by the
 * client's upload hash (the guest compares) or the guest's hash after a
 * download (the client compares), a tree into the guest by the tar
 * stream's hash. Trees travel as tar (the system's `tar` on this side, the
 * guest's archive/tar on the other). As `docker cp` and `kubectl cp` do, a
 * destination that is an existing directory receives the source under its
 * own name; otherwise the destination is the copy.
 *
 * `-` as the local side is a tar stream, as in `docker cp`: `bb cp - ALLOC:DIR`
 * extracts the tar read from standard input into DIR (spooled to a
 * temporary file first, so its SHA-256 goes with the request and the guest
 * checks it), `bb cp ALLOC:PATH -` writes the tree at PATH to standard output
 * as tar (names relative to PATH; a tree past the guest's bounds is cut
 * without an end-of-archive, so `tar` sees it truncated).
 *
 * Owns: the `ALLOC:PATH` syntax (parseCpOperand). Must never: leave a
 * partial file under the destination's name (downloads land under a
 * temporary name and are renamed once checked).
 */
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { chmod, lstat, mkdir, mkdtemp, readdir, rename, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, join, posix } from "node:path";
import { Readable } from "node:stream";
import { finished } from "node:stream/promises";
import type { ControlClient } from "../client/index.ts";
import type { FileStat } from "../protocol/control.ts";
import { BeachballError } from "../protocol/errors.ts";

/** One operand of `bb cp`: a local path, a tar stream on stdin or stdout (`-`), or a path in an allocation (`ALLOC:PATH`). */
export type CpOperand =
  | { kind: "local"; path: string }
  | { kind: "stream" }
  | { kind: "remote"; allocation: string; path: string };

/**
 * Reads `ALLOC:PATH` (an allocation ID or prefix, a colon, an absolute path)
 * as remote, `-` as a tar stream, and anything else as local; a local path
 * with a colon in its first component is written `./a:b`, a file named `-`
 * `./-`.
 */
export function parseCpOperand(text: string): CpOperand {
  if (text === "-") return { kind: "stream" };
  const m = /^([A-Za-z0-9_]+):(.*)$/.exec(text);
  if (!m) return { kind: "local", path: text };
  return { kind: "remote", allocation: m[1]!, path: m[2]! };
}

/** A `tar` child on this side; resolves when it exits 0, rejects with its stderr otherwise. */
function tar(args: string[], stdin: "pipe" | "ignore"): { child: ReturnType<typeof spawn>; done: Promise<void> } {
  const child = spawn("tar", args, { stdio: [stdin, "ignore", "pipe"] });
  let err = "";
  child.stderr!.on("data", (d: Buffer) => (err += d.toString()).length > 4096 && (err = err.slice(-4096)));
  const done = new Promise<void>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code) =>
      code === 0 ? resolve() : reject(new Error(`tar ${args[0]} exited ${code}: ${err.trim()}`)),
    );
  });
  return { child, done };
}

/** The guest's stat of `path`, or null when it does not exist (FILE_NOT_FOUND). */
async function remoteStat(client: ControlClient, path: string): Promise<FileStat | null> {
  try {
    return await client.stat(path);
  } catch (e) {
    if (e instanceof BeachballError && e.code === "FILE_NOT_FOUND") return null;
    throw e;
  }
}

/** Where a copy of `name` lands given the destination's stat: under it when it is a directory. */
function landing(dest: string, isDir: boolean, name: string, join2: (a: string, b: string) => string): string {
  return isDir ? join2(dest, name) : dest;
}

/** What one copy moved: the path it made, its entries (1 for a file; the guest's count for a tree sent in, absent for one taken out) and the bytes carried (a tree's as tar). */
export interface CpResult {
  path: string;
  entries?: number;
  bytes: number;
}

/** Copies the local file or tree `local` into the guest at `remote`. */
export async function copyIn(client: ControlClient, local: string, remote: string): Promise<CpResult> {
  const st = await lstat(local);
  const rs = await remoteStat(client, remote);
  const target = landing(remote, rs?.kind === "directory", basename(local), posix.join);
  if (st.isFile()) {
    const up = await client.writeFile(
      target,
      Readable.toWeb(createReadStream(local)) as unknown as AsyncIterable<Uint8Array>,
      {
        mode: st.mode & 0o7777,
      },
    );
    return { path: target, entries: 1, bytes: up.receivedBytes };
  }
  if (!st.isDirectory())
    throw new BeachballError("FILE_TYPE_MISMATCH", `${local} is neither a regular file nor a directory`);
  // The tar is spooled to a temporary file first: its SHA-256 goes with the request, the guest checks it.
  const spool = await mkdtemp(join(tmpdir(), "bb-cp-"));
  try {
    const file = join(spool, "tree.tar");
    const names = await readdir(local);
    const t = tar(["-c", "-f", file, "-C", local, "--null", "-T", "-"], "pipe");
    t.child.stdin!.end(names.map((n) => `${n}\0`).join(""));
    await t.done;
    const hash = createHash("sha256");
    await finished(createReadStream(file).on("data", (c) => hash.update(c)));
    const r = await client.writeTar(target, Bun.file(file), { sha256: hash.digest("hex") });
    return { path: target, entries: r.entries, bytes: r.bytes };
  } finally {
    await rm(spool, { recursive: true, force: true });
  }
}

/** Copies the guest's file or tree `remote` to the local path `local`. */
export async function copyOut(client: ControlClient, remote: string, local: string): Promise<CpResult> {
  const rs = await client.stat(remote);
  const ls = await stat(local).catch(() => null);
  const target = landing(local, ls?.isDirectory() ?? false, posix.basename(remote), join);
  if (rs.kind === "file") {
    const part = `${target}.bb-part-${process.pid}`;
    try {
      const out = createWriteStream(part, { mode: 0o600 });
      let bytes = 0;
      for await (const chunk of client.readFile(remote)) {
        bytes += chunk.length;
        if (!out.write(chunk)) await new Promise((r) => out.once("drain", r));
      }
      out.end();
      await finished(out);
      await chmod(part, rs.mode & 0o7777);
      await rename(part, target);
      return { path: target, entries: 1, bytes };
    } catch (e) {
      await rm(part, { force: true });
      throw e;
    }
  }
  if (rs.kind !== "directory")
    throw new BeachballError("FILE_TYPE_MISMATCH", `${remote} is neither a regular file nor a directory`);
  await mkdir(target, { recursive: true });
  const t = tar(["-x", "-f", "-", "-C", target, "--no-same-owner"], "pipe");
  let bytes = 0;
  const stdin = t.child.stdin!;
  try {
    for await (const chunk of client.readTar(remote)) {
      bytes += chunk.length;
      if (!stdin.write(chunk)) await new Promise((r) => stdin.once("drain", r));
    }
  } finally {
    stdin.end();
  }
  await t.done;
  return { path: target, bytes };
}

/**
 * Extracts the tar stream `input` (standard input for `bb cp -`) into the
 * guest's directory `remote`: spooled to a private temporary file while its
 * SHA-256 is computed, then sent with that digest, which the guest checks
 * before it reports success. Errors: the guest's codes (PATH_ESCAPE,
 * FILE_TOO_LARGE, TAR_INVALID...) as BeachballError.
 */
export async function copyInTar(
  client: ControlClient,
  input: AsyncIterable<Uint8Array>,
  remote: string,
): Promise<CpResult> {
  const spool = await mkdtemp(join(tmpdir(), "bb-cp-"));
  try {
    const file = join(spool, "stdin.tar");
    const out = createWriteStream(file, { mode: 0o600 });
    const hash = createHash("sha256");
    for await (const chunk of input) {
      hash.update(chunk);
      if (!out.write(chunk)) await new Promise((r) => out.once("drain", r));
    }
    out.end();
    await finished(out);
    const r = await client.writeTar(remote, Bun.file(file), { sha256: hash.digest("hex") });
    return { path: remote, entries: r.entries, bytes: r.bytes };
  } finally {
    await rm(spool, { recursive: true, force: true });
  }
}

/**
 * Writes the guest's tree (or file) at `remote` to `output` as a tar stream
 * (standard output for `bb cp ALLOC:PATH -`), waiting on the writer's
 * back-pressure. A reader that goes away (EPIPE) ends the copy with its error.
 */
export async function copyOutTar(
  client: ControlClient,
  remote: string,
  output: NodeJS.WritableStream,
): Promise<CpResult> {
  let bytes = 0;
  let broken: Error | undefined;
  const onError = (e: Error) => (broken = e);
  output.on("error", onError);
  try {
    for await (const chunk of client.readTar(remote)) {
      if (broken) throw broken;
      bytes += chunk.length;
      if (!output.write(chunk)) await new Promise((r) => output.once("drain", r));
    }
    if (broken) throw broken;
  } finally {
    output.off("error", onError);
  }
  return { path: remote, bytes };
}
