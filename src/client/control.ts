/**
 * The typed client of the guest's control service (issue 20, "Exec and
 * files"; docs/exec-and-files.md): execs with offset-addressed output and
 * stdin, and files (stat, list, ranged read, resumable write, mkdir, move,
 * remove, tar both ways), every request carrying the signed connection grant
 * in CONTROL_GRANT_HEADER. The base URL is the control port as the caller
 * reaches it (through the in-process tunnel, or loopback in tests).
 *
 * Streams, never whole bodies: output and downloads are async iterables of
 * chunks, uploads take an async iterable. Re-attaching from an offset loses
 * nothing: `followOutput` resumes at the offset the caller last saw, the
 * service's log keeps every byte up to MAX_EXEC_OUTPUT_BYTES. Transfers are
 * checked by SHA-256 (upload: the guest compares; download: the client
 * compares with `GET /v1/files/sha256`), a mismatch is CHECKSUM_MISMATCH.
 * Errors are BeachballError with the guest's stable code.
 * Must never: print or put the grant into an error message.
 */
import { createHash } from "node:crypto";
import { canonicalJson } from "../protocol/canonical.ts";
import type { SignedGrant } from "../protocol/connection.ts";
import {
  CONTROL_END_OFFSET_HEADER,
  CONTROL_EXEC_STATE_HEADER,
  CONTROL_GRANT_HEADER,
  CONTROL_OFFSET_HEADER,
  MAX_EXEC_READ_WAIT_MS,
  MAX_EXEC_STDIN_WRITE_BYTES,
  type ExecList,
  type ExecResizeBody,
  type ExecSignal,
  type ExecStartBody,
  type ExecStream,
  type ExecView,
  type FileList,
  type FileStat,
  type MoveBody,
  type StdinWriteResult,
  type TarExtractResult,
  type UploadState,
} from "../protocol/control.ts";
import { BeachballError } from "../protocol/errors.ts";
import { errorFromResponse } from "../protocol/problem.ts";

/** Bytes one upload request carries before the next continues at its offset (a resumable step). */
export const UPLOAD_CHUNK_BYTES = 8 * 1024 * 1024;

/** One read of an exec's output: `bytes` start at `offset`; the stream held `endOffset` bytes then. */
export interface OutputRead {
  bytes: Uint8Array;
  offset: number;
  endOffset: number;
  state: "running" | "exited";
}

/** The client's side effects (fetch), so tests can fake them. */
export interface ControlClientPorts {
  fetch: typeof fetch;
  /** Opens a WebSocket with request headers (Bun's WebSocket takes `{ headers }`; a browser's cannot). */
  webSocket: (url: string, headers: Record<string, string>) => WebSocket;
}

/** One output chunk of an attach session: `bytes` of `stream` starting at `offset`. */
export interface AttachOutput {
  stream: ExecStream;
  offset: number;
  bytes: Uint8Array;
}

/** A live WebSocket attach to one exec (see ControlClient.attach). */
export interface AttachSession {
  /** Output chunks in order per stream, from the offsets asked; ends when the exec has exited and all is sent, or on detach. */
  output: AsyncIterable<AttachOutput>;
  /** The exec's final view, once it exited (rejects when the session ends first). */
  exited: Promise<ExecView>;
  /** Writes stdin from `offset` (bytes already taken are skipped; see writeStdin). */
  stdin(offset: number, bytes: Uint8Array, close?: boolean): void;
  /** Resizes the exec's terminal. */
  resize(cols: number, rows: number): void;
  /** Sends a signal to the exec's process group. */
  signal(signal: ExecSignal): void;
  /** Closes the session; the process keeps running. */
  detach(): void;
}

const STREAM_BY_ID: Record<number, ExecStream> = { 1: "stdout", 2: "stderr", 3: "pty" };

/** The `beachball-grant` header value of a signed grant: base64url (no padding) of its canonical JSON. */
export function grantHeaderValue(grant: SignedGrant): string {
  return Buffer.from(canonicalJson(grant), "utf8").toString("base64url");
}

/**
 * A client of one guest's control service. `grant` is the signed grant (or
 * an already encoded header value). Every method throws a BeachballError
 * with the guest's code on a refusal (CONTROL_UNAUTHORIZED, PATH_ESCAPE,
 * TOO_LARGE, EXEC_NOT_FOUND, FILE_NOT_FOUND, ...).
 */
export class ControlClient {
  readonly #base: string;
  readonly #grant: string;
  readonly #fetch: typeof fetch;
  readonly #webSocket: ControlClientPorts["webSocket"];

  constructor(baseUrl: string, grant: SignedGrant | string, ports: Partial<ControlClientPorts> = {}) {
    this.#base = baseUrl.replace(/\/+$/, "");
    this.#grant = typeof grant === "string" ? grant : grantHeaderValue(grant);
    this.#fetch = ports.fetch ?? fetch;
    this.#webSocket =
      ports.webSocket ??
      ((url, headers) => new (WebSocket as unknown as new (u: string, o: object) => WebSocket)(url, { headers }));
  }

  /** The `beachball-grant` header value this client sends (for callers that make their own requests). */
  get grantHeader(): string {
    return this.#grant;
  }

  async #request(
    method: string,
    path: string,
    init: { body?: RequestInit["body"]; headers?: Record<string, string> } = {},
  ) {
    const res = await this.#fetch(`${this.#base}${path}`, {
      method,
      headers: { [CONTROL_GRANT_HEADER]: this.#grant, ...init.headers },
      ...(init.body !== undefined ? { body: init.body, duplex: "half" } : {}),
    } as RequestInit);
    if (!res.ok) throw await errorFromResponse(res);
    return res;
  }

  async #json<T>(method: string, path: string, body?: unknown): Promise<T> {
    const res = await this.#request(
      method,
      path,
      body === undefined ? {} : { body: JSON.stringify(body), headers: { "content-type": "application/json" } },
    );
    if (res.status === 204) return undefined as T;
    return (await res.json()) as T;
  }

  /** `POST /v1/execs`: starts a command; answers its view (with its exec ID). */
  startExec(body: ExecStartBody): Promise<ExecView> {
    return this.#json("POST", "/v1/execs", body);
  }

  /** `GET /v1/execs`: this tenant's execs, oldest first. */
  async listExecs(): Promise<ExecView[]> {
    return (await this.#json<ExecList>("GET", "/v1/execs")).execs;
  }

  /** `GET /v1/execs/{id}`: one exec (kept after exit). */
  getExec(execId: string): Promise<ExecView> {
    return this.#json("GET", `/v1/execs/${encodeURIComponent(execId)}`);
  }

  /** `DELETE /v1/execs/{id}`: forgets an exited exec and its output (EXEC_STATE_CONFLICT while it runs). */
  async removeExec(execId: string): Promise<void> {
    await this.#json("DELETE", `/v1/execs/${encodeURIComponent(execId)}`);
  }

  /** `GET /v1/execs/{id}/output`: the bytes of `stream` from `offset`, waiting up to `waitMs` for some. */
  async readOutput(
    execId: string,
    opts: { stream?: ExecStream; offset?: number; waitMs?: number; maxBytes?: number } = {},
  ): Promise<OutputRead> {
    const q = new URLSearchParams({ offset: String(opts.offset ?? 0), waitMs: String(opts.waitMs ?? 0) });
    if (opts.stream) q.set("stream", opts.stream);
    if (opts.maxBytes !== undefined) q.set("maxBytes", String(opts.maxBytes));
    const res = await this.#request("GET", `/v1/execs/${encodeURIComponent(execId)}/output?${q}`);
    return {
      bytes: new Uint8Array(await res.arrayBuffer()),
      offset: Number(res.headers.get(CONTROL_OFFSET_HEADER)),
      endOffset: Number(res.headers.get(CONTROL_END_OFFSET_HEADER)),
      state: res.headers.get(CONTROL_EXEC_STATE_HEADER) === "exited" ? "exited" : "running",
    };
  }

  /**
   * Every byte of `stream` from `fromOffset` on, as chunks with their
   * offsets, until the exec has exited and the stream is read to its end
   * (long-polling between). Stopping the iteration detaches: the process
   * is never signalled. A new call from the last offset seen re-attaches
   * losing nothing. Ends early, without error, at OUTPUT_TRUNCATED.
   */
  async *followOutput(
    execId: string,
    opts: { stream?: ExecStream; fromOffset?: number; signal?: AbortSignal } = {},
  ): AsyncGenerator<{ offset: number; bytes: Uint8Array }> {
    let offset = opts.fromOffset ?? 0;
    for (;;) {
      if (opts.signal?.aborted) return;
      let r: OutputRead;
      try {
        r = await this.readOutput(execId, {
          ...(opts.stream ? { stream: opts.stream } : {}),
          offset,
          waitMs: MAX_EXEC_READ_WAIT_MS - 5_000,
        });
      } catch (e) {
        if (e instanceof BeachballError && e.code === "OUTPUT_TRUNCATED") return;
        throw e;
      }
      if (r.bytes.length > 0) {
        yield { offset: r.offset, bytes: r.bytes };
        offset = r.offset + r.bytes.length;
      } else if (r.state === "exited" && offset >= r.endOffset) return;
    }
  }

  /** Follows every output stream to its end, then answers the exec's final view. */
  async wait(execId: string): Promise<ExecView> {
    const view = await this.getExec(execId);
    await Promise.all(
      Object.keys(view.outputBytes).map(async (s) => {
        for await (const _ of this.followOutput(execId, { stream: s as ExecStream })) {
          // draining
        }
      }),
    );
    return this.getExec(execId);
  }

  /**
   * `POST /v1/execs/{id}/stdin?offset=N`: `bytes` are stdin from `offset`;
   * bytes the guest already took are skipped, so a retried write is a no-op.
   * With `close`, stdin is closed after (EOF; ^D on a terminal). Larger
   * inputs go as several writes of at most MAX_EXEC_STDIN_WRITE_BYTES.
   * Answers the stdin offset after the write.
   */
  async writeStdin(execId: string, offset: number, bytes: Uint8Array, opts: { close?: boolean } = {}): Promise<number> {
    let at = offset;
    let rest = bytes;
    for (;;) {
      const part = rest.subarray(0, MAX_EXEC_STDIN_WRITE_BYTES);
      rest = rest.subarray(part.length);
      const last = rest.length === 0;
      const q = new URLSearchParams({ offset: String(at) });
      if (last && opts.close) q.set("close", "1");
      const res = await this.#request("POST", `/v1/execs/${encodeURIComponent(execId)}/stdin?${q}`, {
        body: part as Uint8Array<ArrayBuffer>,
      });
      at = ((await res.json()) as StdinWriteResult).stdinOffset;
      if (last) return at;
    }
  }

  /** Closes the exec's stdin at `offset` (its current stdin offset; see writeStdin). */
  closeStdin(execId: string, offset: number): Promise<number> {
    return this.writeStdin(execId, offset, new Uint8Array(0), { close: true });
  }

  /**
   * `GET /v1/execs/{id}/attach` (WebSocket): output of each stream from
   * `offsets` (0 by default) with its offsets, stdin, resize and signal
   * messages, keep-alive pings from the guest at least every 15 s. Detaching
   * never signals the process; a new attach from the offsets last seen
   * loses nothing. The plain offset reads (followOutput) are the fallback.
   */
  attach(execId: string, offsets: Partial<Record<ExecStream, number>> = {}): AttachSession {
    const q = new URLSearchParams(Object.entries(offsets).map(([k, v]): [string, string] => [k, String(v)]));
    const url = `${this.#base.replace(/^http/, "ws")}/v1/execs/${encodeURIComponent(execId)}/attach?${q}`;
    const ws = this.#webSocket(url, { [CONTROL_GRANT_HEADER]: this.#grant });
    ws.binaryType = "arraybuffer";
    const queue: AttachOutput[] = [];
    let wake: (() => void) | null = null;
    let ended = false;
    let resolveExit!: (v: ExecView) => void;
    let rejectExit!: (e: Error) => void;
    const exited = new Promise<ExecView>((res, rej) => {
      resolveExit = res;
      rejectExit = rej;
    });
    exited.catch(() => {});
    const poke = () => {
      wake?.();
      wake = null;
    };
    ws.onmessage = (ev: MessageEvent) => {
      if (typeof ev.data === "string") {
        const m = JSON.parse(ev.data) as { type: string; exec?: ExecView; code?: string; detail?: string };
        if (m.type === "exit" && m.exec) resolveExit(m.exec);
        return;
      }
      const b = new Uint8Array(ev.data as ArrayBuffer);
      const view = new DataView(b.buffer, b.byteOffset, b.byteLength);
      queue.push({
        stream: STREAM_BY_ID[b[0]!] ?? "stdout",
        offset: Number(view.getBigUint64(1)),
        bytes: b.subarray(9),
      });
      poke();
    };
    ws.onclose = () => {
      ended = true;
      rejectExit(new BeachballError("EXEC_STATE_CONFLICT", `attach to ${execId} ended before the exec exited`));
      poke();
    };
    const opened = new Promise<void>((res) => {
      ws.onopen = () => res();
    });
    const send = (m: object) => void opened.then(() => ws.send(JSON.stringify(m)));
    async function* output(): AsyncGenerator<AttachOutput> {
      for (;;) {
        while (queue.length > 0) yield queue.shift()!;
        if (ended) return;
        await new Promise<void>((r) => {
          wake = r;
        });
      }
    }
    return {
      output: output(),
      exited,
      stdin: (offset, bytes, close) =>
        send({ type: "stdin", offset, data: Buffer.from(bytes).toString("base64"), close: close ?? false }),
      resize: (cols, rows) => send({ type: "resize", cols, rows }),
      signal: (signal) => send({ type: "signal", signal }),
      detach: () => ws.close(),
    };
  }

  /** `POST /v1/execs/{id}/signal`: sends `signal` to the exec's process group. */
  signal(execId: string, signal: ExecSignal): Promise<ExecView> {
    return this.#json("POST", `/v1/execs/${encodeURIComponent(execId)}/signal`, { signal });
  }

  /** `POST /v1/execs/{id}/resize`: resizes the exec's terminal (EXEC_STATE_CONFLICT without one). */
  resize(execId: string, size: ExecResizeBody): Promise<ExecView> {
    return this.#json("POST", `/v1/execs/${encodeURIComponent(execId)}/resize`, size);
  }

  /** `GET /v1/files/stat`: a path's metadata (a symlink is reported, not followed). */
  stat(path: string): Promise<FileStat> {
    return this.#json("GET", `/v1/files/stat?${new URLSearchParams({ path })}`);
  }

  /** `GET /v1/files/list`: a directory's entries (at most MAX_LIST_ENTRIES, sorted by name). */
  list(path: string): Promise<FileList> {
    return this.#json("GET", `/v1/files/list?${new URLSearchParams({ path })}`);
  }

  /** `POST /v1/files/mkdir`. */
  mkdir(path: string, opts: { parents?: boolean } = {}): Promise<FileStat> {
    return this.#json("POST", "/v1/files/mkdir", { path, ...(opts.parents ? { parents: true } : {}) });
  }

  /** `POST /v1/files/move`. */
  move(body: MoveBody): Promise<FileStat> {
    return this.#json("POST", "/v1/files/move", body);
  }

  /** `POST /v1/files/remove` (a directory's whole tree with `recursive`). */
  async remove(path: string, opts: { recursive?: boolean } = {}): Promise<void> {
    await this.#json("POST", "/v1/files/remove", { path, ...(opts.recursive ? { recursive: true } : {}) });
  }

  /** `GET /v1/files/sha256`: the guest's SHA-256 (hex) and size of a regular file. */
  sha256(path: string): Promise<{ path: string; sizeBytes: number; sha256: string }> {
    return this.#json("GET", `/v1/files/sha256?${new URLSearchParams({ path })}`);
  }

  /**
   * `GET /v1/files/content`: the file's bytes as a stream; `range` is a byte
   * range `[start, endExclusive)` (HTTP Range). The whole file (no range) is
   * checked: the stream's SHA-256 is compared with the guest's at its end,
   * and a mismatch throws CHECKSUM_MISMATCH from the iteration.
   */
  async *readFile(path: string, opts: { range?: [number, number] } = {}): AsyncGenerator<Uint8Array> {
    const headers: Record<string, string> = {};
    if (opts.range) headers["range"] = `bytes=${opts.range[0]}-${opts.range[1] - 1}`;
    const res = await this.#request("GET", `/v1/files/content?${new URLSearchParams({ path })}`, { headers });
    const hash = createHash("sha256");
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      hash.update(chunk);
      yield chunk;
    }
    if (opts.range) return;
    const want = await this.sha256(path);
    const got = hash.digest("hex");
    if (got !== want.sha256)
      throw new BeachballError("CHECKSUM_MISMATCH", `read ${path}: SHA-256 ${got}, the guest has ${want.sha256}`);
  }

  /** `GET /v1/files/upload`: how many bytes an interrupted upload of `path` holds. */
  uploadState(path: string): Promise<UploadState> {
    return this.#json("GET", `/v1/files/upload?${new URLSearchParams({ path })}`);
  }

  /**
   * Writes `source` to `path`, in steps of UPLOAD_CHUNK_BYTES at their
   * offsets; the last step carries the SHA-256 of the whole source, which
   * the guest checks before it renames the upload onto `path`
   * (CHECKSUM_MISMATCH otherwise). With `resume`, bytes an earlier
   * interrupted upload delivered are hashed but not sent again.
   */
  async writeFile(
    path: string,
    source: AsyncIterable<Uint8Array> | Uint8Array,
    opts: { resume?: boolean; mode?: number } = {},
  ): Promise<UploadState> {
    const skip = opts.resume ? (await this.uploadState(path)).receivedBytes : 0;
    const hash = createHash("sha256");
    const q = (offset: number, sha?: string) =>
      `/v1/files/content?${new URLSearchParams({
        path,
        offset: String(offset),
        ...(opts.mode !== undefined ? { mode: String(opts.mode) } : {}),
        ...(sha ? { sha256: sha } : {}),
      })}`;
    let pos = 0; // bytes of source seen
    let sent = skip; // offset of the next byte the guest needs
    let pending: Uint8Array[] = [];
    let pendingBytes = 0;
    const flush = async (final: boolean) => {
      const body = Buffer.concat(pending);
      pending = [];
      pendingBytes = 0;
      const res = await this.#request("PUT", q(sent, final ? hash.digest("hex") : undefined), { body });
      const st = (await res.json()) as UploadState;
      sent = st.receivedBytes;
      return st;
    };
    const chunks = source instanceof Uint8Array ? [source] : source;
    for await (const chunk of chunks) {
      hash.update(chunk);
      const from = Math.max(0, sent - pos);
      pos += chunk.length;
      if (from >= chunk.length) continue;
      for (let i = from; i < chunk.length; ) {
        const take = Math.min(chunk.length - i, UPLOAD_CHUNK_BYTES - pendingBytes);
        pending.push(chunk.subarray(i, i + take));
        pendingBytes += take;
        i += take;
        if (pendingBytes === UPLOAD_CHUNK_BYTES) await flush(false);
      }
    }
    if (pos < skip)
      throw new BeachballError("OFFSET_MISMATCH", `the source is shorter than the upload's ${skip} bytes`);
    return flush(true);
  }

  /** `GET /v1/files/tar`: the tree at `path` as a tar stream (a cut connection means the tree passed a bound). */
  async *readTar(path: string): AsyncGenerator<Uint8Array> {
    const res = await this.#request("GET", `/v1/files/tar?${new URLSearchParams({ path })}`);
    yield* res.body as unknown as AsyncIterable<Uint8Array>;
  }

  /** `PUT /v1/files/tar`: extracts a tar stream into the directory `path` (confined beneath it), checked by `sha256` when given. */
  async writeTar(
    path: string,
    tar: ReadableStream<Uint8Array> | Uint8Array | Blob,
    opts: { sha256?: string } = {},
  ): Promise<TarExtractResult> {
    const res = await this.#request(
      "PUT",
      `/v1/files/tar?${new URLSearchParams({ path, ...(opts.sha256 ? { sha256: opts.sha256 } : {}) })}`,
      { body: tar as RequestInit["body"] },
    );
    return (await res.json()) as TarExtractResult;
  }
}
