/**
 * A kernel-side UDP peer for TUN tests, run inside the test's namespace with
 * `ip netns exec`:
 *   send HOST PORT COUNT SIZE   sends COUNT datagrams of SIZE bytes, datagram i
 *                               filled with byte (i % 251) and its index in the
 *                               first 4 bytes (big-endian); prints "sent COUNT".
 *   recv HOST PORT COUNT [STEP] prints "ready", then receives until COUNT
 *                               datagrams arrived or 10 s passed without one;
 *                               with STEP, prints "got N" after every STEP
 *                               datagrams (a sender can wait for it, so a burst
 *                               never outruns the socket's receive buffer);
 *                               prints "recv N SHA256" over the datagrams in order.
 */
import { createHash } from "node:crypto";

const [mode, host, portText, countText, sizeText] = process.argv.slice(2);
const port = Number(portText);
const count = Number(countText);

if (mode === "send") {
  const size = Number(sizeText);
  const s = await Bun.udpSocket({});
  for (let i = 0; i < count; i++) {
    const b = Buffer.alloc(size, i % 251);
    b.writeUInt32BE(i, 0);
    while (!s.send(b, port, host!)) await Bun.sleep(1);
  }
  s.close();
  console.log(`sent ${count}`);
} else if (mode === "recv") {
  const step = sizeText ? Number(sizeText) : 0;
  const hash = createHash("sha256");
  let n = 0;
  let last = Date.now();
  const s = await Bun.udpSocket({
    hostname: host,
    port,
    socket: {
      data(_s, buf) {
        hash.update(buf);
        n++;
        last = Date.now();
        if (step > 0 && n % step === 0) console.log(`got ${n}`);
      },
    },
  });
  console.log("ready");
  while (n < count && Date.now() - last < 10_000) await Bun.sleep(10);
  s.close();
  console.log(`recv ${n} ${hash.digest("hex")}`);
} else {
  console.error("usage: udpPeer.ts send HOST PORT COUNT SIZE | recv HOST PORT COUNT [STEP]");
  process.exit(2);
}
