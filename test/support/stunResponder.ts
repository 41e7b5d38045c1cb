/**
 * TEST SUPPORT: a tiny STUN server (RFC 5389 Binding only) for namespace
 * tests: `bun stunResponder.ts ADDRESS PORT` answers every Binding request
 * with the source address and port it came from (XOR-MAPPED-ADDRESS),
 * prints {"ev":"ready"} and {"ev":"binding","from":"A:P"} per answer, and
 * exits when stdin closes. Must never: answer anything but a Binding request.
 */
import { decodeStun, encodeBindingSuccess, STUN_BINDING_REQUEST } from "../../src/protocol/stun.ts";

const [address, portText] = process.argv.slice(2);
if (!address || !portText) throw new Error("usage: stunResponder.ts ADDRESS PORT");
const emit = (o: object) => process.stdout.write(JSON.stringify(o) + "\n");
const sock = await Bun.udpSocket({
  hostname: address,
  port: Number(portText),
  binaryType: "uint8array",
  socket: {
    data(s, buf, port, from) {
      const m = decodeStun(buf);
      if (m?.type !== STUN_BINDING_REQUEST) return;
      s.send(encodeBindingSuccess(m.transactionId, { address: from, port }), port, from);
      emit({ ev: "binding", from: `${from}:${port}` });
    },
  },
});
emit({ ev: "ready", port: sock.port });
process.stdin.on("end", () => {
  sock.close();
  process.exit(0);
});
process.stdin.resume();
