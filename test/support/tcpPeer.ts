/**
 * A kernel TCP server for netstack tests, run inside the test's namespace with
 * `ip netns exec NS bun tcpPeer.ts PORT ADDR...`. Listens on every ADDR:PORT
 * (half-open allowed) and prints "ready". Each connection starts with one
 * command line:
 *   SINK              read to EOF, answer "<bytes> <sha256>\n", close
 *   SOURCE <n> <seed> send the n-byte test stream (test/support/stream.ts), close
 *   ECHO              send back everything read; close after EOF
 *   SLOWSINK <ms>     like SINK, but read nothing for <ms> first
 *   DRAIN             end the write side at once (FIN), read to EOF, print
 *                     {"event":"drained","bytes":N,"sha256":HEX} to stdout, close
 *   HOLD              read and discard; on the end print {"event":"end","how":"eof"|"reset"|"error"} to stdout
 *   RESET             reset the connection (RST) at once
 *   NOREAD            never read (the window closes); on the end print {"event":"end","how":...} like HOLD
 * Never listens outside the namespace (the addresses are the test's own).
 */
import { createHash } from "node:crypto";
import net from "node:net";
import { forEachStreamChunk } from "./stream.ts";

const [portText, ...addrs] = process.argv.slice(2);
const port = Number(portText);

function serve(sock: net.Socket): void {
  let head = Buffer.alloc(0);
  const onHead = (d: Buffer) => {
    head = Buffer.concat([head, d]);
    const nl = head.indexOf(10);
    if (nl < 0) return;
    sock.off("data", onHead);
    const [cmd, ...args] = head.subarray(0, nl).toString().trim().split(" ");
    const rest = head.subarray(nl + 1);
    run(sock, cmd!, args, rest);
  };
  sock.on("data", onHead);
  sock.on("error", () => {});
}

function sink(sock: net.Socket, rest: Buffer): void {
  const h = createHash("sha256").update(rest);
  let n = rest.length;
  sock.on("data", (d) => {
    h.update(d);
    n += d.length;
  });
  sock.on("end", () => sock.end(`${n} ${h.digest("hex")}\n`));
}

function run(sock: net.Socket, cmd: string, args: string[], rest: Buffer): void {
  switch (cmd) {
    case "SINK":
      return sink(sock, rest);
    case "SLOWSINK":
      sock.pause();
      setTimeout(() => {
        sink(sock, rest);
        sock.resume();
      }, Number(args[0]));
      return;
    case "SOURCE": {
      void (async () => {
        await forEachStreamChunk(Number(args[0]), Number(args[1]), 256 * 1024, (c) =>
          sock.write(c) ? undefined : new Promise((r) => sock.once("drain", r)),
        );
        sock.end();
      })();
      sock.on("data", () => {});
      return;
    }
    case "ECHO":
      if (rest.length) sock.write(rest);
      sock.on("data", (d) => {
        if (!sock.write(d)) {
          sock.pause();
          sock.once("drain", () => sock.resume());
        }
      });
      sock.on("end", () => sock.end());
      return;
    case "DRAIN": {
      sock.end();
      const h = createHash("sha256").update(rest);
      let n = rest.length;
      sock.on("data", (d) => {
        h.update(d);
        n += d.length;
      });
      sock.on("end", () => {
        console.log(JSON.stringify({ event: "drained", bytes: n, sha256: h.digest("hex") }));
        sock.destroy();
      });
      return;
    }
    case "HOLD": {
      let done = false;
      const end = (how: string) => {
        if (done) return;
        done = true;
        console.log(JSON.stringify({ event: "end", how }));
      };
      sock.on("data", () => {});
      sock.on("end", () => end("eof"));
      sock.on("error", (e: NodeJS.ErrnoException) => end(e.code === "ECONNRESET" ? "reset" : "error"));
      sock.on("close", () => end("reset"));
      return;
    }
    case "RESET":
      sock.resetAndDestroy();
      return;
    case "NOREAD": {
      sock.pause();
      let done = false;
      const end = (how: string) => {
        if (done) return;
        done = true;
        console.log(JSON.stringify({ event: "end", how }));
      };
      sock.on("error", (e: NodeJS.ErrnoException) => end(e.code === "ECONNRESET" ? "reset" : "error"));
      sock.on("close", () => end("closed"));
      return;
    }
    default:
      sock.destroy();
  }
}

for (const addr of addrs) {
  const server = net.createServer({ allowHalfOpen: true }, serve);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen({ host: addr, port, backlog: 512 }, resolve);
  });
}
console.log("ready");
