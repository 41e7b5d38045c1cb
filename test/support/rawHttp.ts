/**
 * Test support: HTTP/1.1 over a raw loopback TCP socket, for requests no
 * fetch client sends (chunked bodies of a chosen size, a lying or malformed
 * Content-Length, odd methods) and for telling "a response, then close"
 * apart from "closed without a response".
 */
import { connect } from "node:net";

/** What came back on the socket. */
export interface RawAnswer {
  /** HTTP status, or 0 when the connection closed without a status line. */
  status: number;
  headers: Record<string, string>;
  body: string;
  /** The socket reported an error (e.g. ECONNRESET) before a full response arrived. */
  error: string | null;
}

/** Body framing for rawRequest. */
export type RawBody = { chunked: Uint8Array[] } | { bytes: Uint8Array; contentLength?: string } | null;

/**
 * Sends one request (`Connection: close`) to 127.0.0.1:`port` and reads the
 * answer until the server closes or `timeoutMs` passes. The body is written
 * in pieces while the server may already be answering; write errors after a
 * response are ignored (the server may stop reading once it refused).
 */
export function rawRequest(
  port: number,
  method: string,
  path: string,
  headers: Record<string, string>,
  body: RawBody,
  timeoutMs = 10_000,
): Promise<RawAnswer> {
  return new Promise((resolve) => {
    const s = connect({ port, host: "127.0.0.1" });
    const chunks: Buffer[] = [];
    let error: string | null = null;
    let settled = false;
    const finish = () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      s.destroy();
      resolve(parse(Buffer.concat(chunks).toString("latin1"), error));
    };
    const timer = setTimeout(() => {
      error ??= "timeout";
      finish();
    }, timeoutMs);
    s.on("data", (d: Buffer) => {
      chunks.push(d);
      const parsed = parse(Buffer.concat(chunks).toString("latin1"), null);
      if (parsed.status && parsed.body.length >= Number(parsed.headers["content-length"] ?? Infinity)) finish();
    });
    // An error (EPIPE, ECONNRESET) may come while the answer is already in the receive buffer: keep what was read, finish on close.
    s.on("error", (e) => {
      error = (e as NodeJS.ErrnoException).code ?? e.message;
    });
    s.on("close", finish);
    s.on("connect", async () => {
      const h: Record<string, string> = { host: "127.0.0.1", connection: "close", ...headers };
      if (body && "chunked" in body) h["transfer-encoding"] = "chunked";
      if (body && "bytes" in body) h["content-length"] = body.contentLength ?? String(body.bytes.byteLength);
      const head = `${method} ${path} HTTP/1.1\r\n${Object.entries(h)
        .map(([k, v]) => `${k}: ${v}\r\n`)
        .join("")}\r\n`;
      const write = (b: Uint8Array | string) => new Promise<void>((r) => (s.destroyed ? r() : s.write(b, () => r())));
      await write(head);
      if (body && "bytes" in body) await write(body.bytes);
      if (body && "chunked" in body) {
        for (const c of body.chunked) {
          if (settled) break;
          await write(`${c.byteLength.toString(16)}\r\n`);
          await write(c);
          await write("\r\n");
        }
        await write("0\r\n\r\n");
      }
    });
  });
}

function parse(text: string, error: string | null): RawAnswer {
  const end = text.indexOf("\r\n\r\n");
  if (!text.startsWith("HTTP/1.1 ") || end < 0)
    return {
      status: 0,
      headers: {},
      body: "",
      error: error ?? (text ? "incomplete response" : "closed without a response"),
    };
  const [statusLine, ...lines] = text.slice(0, end).split("\r\n");
  const headers: Record<string, string> = {};
  for (const l of lines) {
    const i = l.indexOf(":");
    if (i > 0) headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
  }
  return { status: Number(statusLine!.split(" ")[1]), headers, body: text.slice(end + 4), error };
}

/** `n` bytes of JSON-looking filler split into chunks of `chunkBytes`. */
export function filler(n: number, chunkBytes = 64 * 1024): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (let left = n; left > 0; left -= chunkBytes) out.push(new Uint8Array(Math.min(chunkBytes, left)).fill(0x20));
  if (out.length) out[0]![0] = 0x7b;
  return out;
}
