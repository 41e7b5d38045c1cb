/**
 * The host–guest control protocol: NDJSON messages over one byte stream
 * (virtio-serial under QEMU, hybrid vsock under Firecracker).
 *
 * Owns: message shapes, the line-size bound and a pure codec. Implements the
 * spec's "Guest handshake" and the in-memory bootstrap hand-off of "One
 * allocation end to end". Must never: write payload bytes anywhere but the
 * stream, or accept a line over MAX_GUEST_LINE_BYTES.
 */

/** Upper bound of one NDJSON line in bytes (a 1 MiB payload in base64 plus framing fits). */
export const MAX_GUEST_LINE_BYTES = 2 * 1024 * 1024;

/** Guest identity as injected on the kernel command line (`beachball.*` arguments). */
export interface GuestIdentity {
  allocationId: string;
  placementId: string;
  generation: number;
  /** Random 256-bit bootstrap nonce, hex; the agent accepts only an exact match. */
  nonce: string;
}

/** Messages the guest sends to the host. */
export type GuestToHost =
  | ({ type: "guest_ready"; bootId: string; guestVersion: string } & GuestIdentity)
  | { type: "pong"; id: string }
  | { type: "bootstrap_consumed"; deliveryId: string; digest: string }
  | { type: "bootstrap_rejected"; deliveryId: string; reason: string }
  | { type: "workload_started"; deliveryId: string }
  | { type: "workload_exited"; deliveryId: string; exitCode: number }
  | { type: "shutting_down" };

/** Messages the host sends to the guest. */
export type HostToGuest =
  | { type: "ready_ack" }
  /** Asks the guest to send guest_ready again (a restarted agent adopting a VM that was still booting). */
  | { type: "identify" }
  | { type: "ping"; id: string }
  | { type: "bootstrap"; deliveryId: string; contentType: string; dataBase64: string }
  | { type: "shutdown" };

/** Encodes one message as an NDJSON line (with the trailing newline). */
export function encodeGuestMessage(m: GuestToHost | HostToGuest): string {
  return JSON.stringify(m) + "\n";
}

/**
 * Incremental NDJSON line splitter with a size bound. Feed it chunks; it
 * returns complete parsed objects. Throws `Error("GUEST_LINE_TOO_LONG")` when
 * a line exceeds `maxLineBytes`; a line that is not a JSON object is skipped
 * (returned in `invalid`) so a noisy peer cannot wedge the reader.
 */
export class NdjsonDecoder {
  private buf = "";
  constructor(private readonly maxLineBytes = MAX_GUEST_LINE_BYTES) {}
  /** Adds a chunk and returns the complete messages it finished. */
  push(chunk: string): { messages: Record<string, unknown>[]; invalid: number } {
    this.buf += chunk;
    const messages: Record<string, unknown>[] = [];
    let invalid = 0;
    for (;;) {
      const nl = this.buf.indexOf("\n");
      if (nl < 0) break;
      const line = this.buf.slice(0, nl).trim();
      this.buf = this.buf.slice(nl + 1);
      if (!line) continue;
      try {
        const v = JSON.parse(line) as unknown;
        if (v && typeof v === "object" && !Array.isArray(v)) messages.push(v as Record<string, unknown>);
        else invalid++;
      } catch {
        invalid++;
      }
    }
    if (this.buf.length > this.maxLineBytes) {
      this.buf = "";
      throw new Error("GUEST_LINE_TOO_LONG");
    }
    return { messages, invalid };
  }
}

/** Kernel command-line keys carrying the guest identity (spec "Start"). */
export const GUEST_CMDLINE_KEYS = {
  allocationId: "beachball.allocation_id",
  placementId: "beachball.placement_id",
  generation: "beachball.generation",
  nonce: "beachball.bootstrap_nonce",
} as const;

/** Console markers the guest writes around the workload (spec "Images"). */
export const JOB_START_MARKER = "BEACHBALL_JOB_START";
/** Written as `BEACHBALL_JOB_EXIT <code>` after the workload exits. */
export const JOB_EXIT_MARKER = "BEACHBALL_JOB_EXIT";
