/**
 * A tiny "internet" for network-isolation tests, run inside the test's own
 * namespace with `ip netns exec`: HTTP on 0.0.0.0:80 answering with the Host
 * header and the peer address, and DNS on UDP port 53 of every address
 * given in argv[3..] answering any query with an A record for argv[2]. Each
 * request is appended as an NDJSON line to argv[1]. Never binds outside its
 * namespace (argv addresses are the test's own).
 */
import { appendFileSync } from "node:fs";

const [logPath, answer, ...dnsAddrs] = process.argv.slice(2);
if (!logPath || !answer) throw new Error("usage: netResponder.ts LOG ANSWER_IP DNS_ADDR...");
const log = (e: Record<string, unknown>) => appendFileSync(logPath, JSON.stringify(e) + "\n");

Bun.serve({
  hostname: "0.0.0.0",
  port: 80,
  fetch(req, server) {
    const host = new URL(req.url).hostname;
    const peer = server.requestIP(req)?.address ?? "?";
    log({ proto: "http", host, peer });
    return new Response(`reached-${host}-from-${peer}\n`);
  },
});

/** A DNS reply: the query's header and question, one A record pointing at `answer`. */
function dnsReply(q: Uint8Array): Uint8Array | null {
  if (q.length < 12) return null;
  let i = 12;
  while (i < q.length && q[i] !== 0) i += q[i]! + 1;
  const qEnd = i + 5; // zero byte + QTYPE + QCLASS
  if (qEnd > q.length) return null;
  const head = Buffer.from(q.subarray(0, qEnd));
  head[2] = 0x81;
  head[3] = 0x80; // response, recursion desired + available, NOERROR
  head.writeUInt16BE(1, 4);
  head.writeUInt16BE(1, 6);
  head.writeUInt16BE(0, 8);
  head.writeUInt16BE(0, 10);
  const rr = Buffer.from([0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, ...answer!.split(".").map(Number)]);
  return Buffer.concat([head, rr]);
}

for (const addr of dnsAddrs) {
  await Bun.udpSocket({
    hostname: addr,
    port: 53,
    socket: {
      data(sock, buf, port, peer) {
        log({ proto: "dns", local: addr, peer });
        const r = dnsReply(new Uint8Array(buf));
        if (r) sock.send(r, port, peer);
      },
    },
  });
}
console.log("responder ready");
