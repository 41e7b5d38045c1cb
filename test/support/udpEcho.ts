/**
 * A kernel-side UDP peer for tunnel tests, run inside a namespace with
 * `ip netns exec`: binds argv[2] (address) and argv[3] (port), answers every
 * datagram with "echo:" + its payload, reports each one as a JSON line
 * {"ev":"recv","from":ADDR,"port":N,"data":TEXT} on stdout, and on a stdin
 * line {"op":"send","address":A,"port":N,"data":TEXT} sends from its socket.
 * Must never: bind another address or outlive stdin.
 */
export {};

const [address, portText] = process.argv.slice(2);
if (!address || !portText) throw new Error("usage: udpEcho.ts ADDRESS PORT");
const emit = (o: object) => process.stdout.write(JSON.stringify(o) + "\n");
const sock = await Bun.udpSocket({
  hostname: address,
  port: Number(portText),
  socket: {
    data(s, buf, port, from) {
      const text = Buffer.from(buf).toString();
      emit({ ev: "recv", from, port, data: text });
      if (!text.startsWith("echo:")) s.send(`echo:${text}`, port, from);
    },
  },
});
emit({ ev: "ready", port: sock.port });
let buf = "";
for await (const chunk of Bun.stdin.stream()) {
  buf += Buffer.from(chunk).toString();
  let nl: number;
  while ((nl = buf.indexOf("\n")) >= 0) {
    const line = buf.slice(0, nl);
    buf = buf.slice(nl + 1);
    if (!line.trim()) continue;
    const c = JSON.parse(line) as { op: string; address: string; port: number; data: string };
    if (c.op === "send") sock.send(c.data, c.port, c.address);
  }
}
sock.close();
