/**
 * The userspace TCP/IP stack's entry point: createNetstack() returns a
 * Netstack (src/netstack/types.ts); today it is lwIP 2.1.3 compiled to
 * WebAssembly (native/lwip, src/netstack/lwip). Callers depend on the types
 * and this function only, so the implementation can be replaced.
 */
import { LwipStack } from "./lwip/stack.ts";
import type { Netstack, NetstackOptions } from "./types.ts";

export { NetstackError, type NetstackErrorCode } from "./errors.ts";
export type {
  ConnectionEnd,
  Netstack,
  NetstackOptions,
  NetstackStats,
  PacketOutput,
  TcpConnection,
  TcpListener,
} from "./types.ts";

/** A stack with the given addresses, sending packets to `options.output`. Throws NetstackError "invalid-argument". */
export function createNetstack(options: NetstackOptions): Netstack {
  return new LwipStack(options);
}
