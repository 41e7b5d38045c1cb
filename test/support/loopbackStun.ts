/**
 * TEST SUPPORT: an in-process STUN server (RFC 5389 Binding only) on
 * 127.0.0.1 for unit tests: answers every Binding request with the source
 * it saw, or with `answerAs(source)` (e.g. a NAT's public address and the
 * seen port), and records the sources. The netns tests run
 * test/support/stunResponder.ts as a process instead.
 * Must never: listen beyond loopback or answer anything but a Binding request.
 */
import { decodeStun, encodeBindingSuccess, STUN_BINDING_REQUEST, type StunAddress } from "../../src/protocol/stun.ts";

/** The running server: its port, the sources it answered, close(). */
export interface LoopbackStun {
  port: number;
  seen: StunAddress[];
  close(): void;
}

/** Starts the server on an ephemeral loopback port. */
export async function startLoopbackStun(
  answerAs: (source: StunAddress) => StunAddress = (s) => s,
): Promise<LoopbackStun> {
  const seen: StunAddress[] = [];
  const s = await Bun.udpSocket({
    hostname: "127.0.0.1",
    port: 0,
    binaryType: "uint8array",
    socket: {
      data(sock, buf, port, address) {
        const m = decodeStun(buf);
        if (m?.type !== STUN_BINDING_REQUEST) return;
        seen.push({ address, port });
        sock.send(encodeBindingSuccess(m.transactionId, answerAs({ address, port })), port, address);
      },
    },
  });
  return { port: s.port, seen, close: () => s.close() };
}
