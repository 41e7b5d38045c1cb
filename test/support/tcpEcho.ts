/**
 * Kernel TCP on either end of a tunnel, for interop tests run with
 * `ip netns exec`:
 *   listen ADDR PORT           echo every connection's bytes back, half-close
 *                              when the client does; prints {"ev":"ready"};
 *                              exits when stdin closes
 *   connect ADDR PORT BYTES    send BYTES random bytes, half-close, read the
 *                              echo to the end; prints {"ok",bytes,ms} and
 *                              exits 0 only if the echo is byte-exact (SHA-256)
 *   staged ADDR PORT BYTES MARKER  one connection in two halves: send MARKER then
 *                              random bytes up to BYTES/2, wait for their whole echo,
 *                              print {"ev":"half"}, wait for a line on stdin, send
 *                              the rest, half-close, read to the end; prints
 *                              {"ev":"done","ok",bytes} (ok only if byte-exact, SHA-256)
 * Must never: listen or connect anywhere but the given address.
 */
import { createHash, randomBytes } from "node:crypto";
import { createConnection, createServer } from "node:net";

const [mode, address, portText, bytesText] = process.argv.slice(2);
const port = Number(portText);
const out = (o: object) => process.stdout.write(JSON.stringify(o) + "\n");

if (mode === "listen") {
  const server = createServer({ allowHalfOpen: true }, (s) => {
    s.on("data", (d) => s.write(d));
    s.on("end", () => s.end());
    s.on("error", () => s.destroy());
  });
  server.listen(port, address, () => out({ ev: "ready" }));
  process.stdin.on("end", () => server.close(() => process.exit(0)));
  process.stdin.resume();
} else if (mode === "connect") {
  const total = Number(bytesText);
  const data = randomBytes(total);
  const want = createHash("sha256").update(data).digest("hex");
  const got = createHash("sha256");
  let received = 0;
  const t0 = performance.now();
  const s = createConnection({ host: address, port, allowHalfOpen: true }, () => {
    s.end(data);
  });
  s.on("data", (d) => {
    received += d.length;
    got.update(d);
  });
  s.on("end", () => {
    const ok = received === total && got.digest("hex") === want;
    out({ ok, bytes: received, ms: Math.round(performance.now() - t0) });
    process.exit(ok ? 0 : 1);
  });
  s.on("error", (e) => {
    out({ ok: false, error: String(e) });
    process.exit(1);
  });
  setTimeout(() => {
    out({ ok: false, error: `timeout after ${received} bytes` });
    process.exit(1);
  }, 60_000).unref();
} else if (mode === "staged") {
  const total = Number(bytesText);
  const marker = Buffer.from(process.argv[6] ?? "");
  const data = Buffer.concat([marker, randomBytes(total - marker.length)]);
  const half = Math.floor(total / 2);
  const want = createHash("sha256").update(data).digest("hex");
  const got = createHash("sha256");
  let received = 0;
  let halfSeen = false;
  const s = createConnection({ host: address, port, allowHalfOpen: true }, () => {
    s.write(data.subarray(0, half));
  });
  s.on("data", (d) => {
    received += d.length;
    got.update(d);
    if (!halfSeen && received >= half) {
      halfSeen = true;
      out({ ev: "half", bytes: received });
      process.stdin.once("data", () => s.end(data.subarray(half)));
      process.stdin.resume();
    }
  });
  s.on("end", () => {
    const ok = received === total && got.digest("hex") === want;
    out({ ev: "done", ok, bytes: received });
    process.exit(ok ? 0 : 1);
  });
  s.on("error", (e) => {
    out({ ev: "done", ok: false, error: String(e) });
    process.exit(1);
  });
} else {
  throw new Error("usage: tcpEcho.ts listen ADDR PORT | connect ADDR PORT BYTES | staged ADDR PORT BYTES MARKER");
}
