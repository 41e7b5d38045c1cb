/**
 * The host–guest control protocol: NDJSON messages over one byte stream
 * (virtio-serial under QEMU, hybrid vsock under Firecracker).
 *
 * Owns: message shapes, the line-size bound and a pure codec. Implements the
 * spec's "Guest handshake" and the in-memory bootstrap hand-off of "One
 * allocation end to end". Must never: write payload bytes anywhere but the
 * stream, or accept a line over MAX_GUEST_LINE_BYTES.
 */
import { type Static, Type } from "@sinclair/typebox";
import { ControlConfigMessage } from "./control.ts";
import { MAX_RESTORE_WALL_CLOCK_MS, MIN_RESTORE_WALL_CLOCK_MS, RestoredMessage } from "./guestRestored.ts";

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

const closed = { additionalProperties: false } as const;
const identityFields = {
  allocationId: Type.String(),
  placementId: Type.String(),
  generation: Type.Integer({ minimum: 0 }),
  nonce: Type.String(),
};

/**
 * Messages the guest sends to the host, as a TypeBox schema (the one
 * definition; the Go guest, guest/internal/wire, mirrors it and
 * test/guest-contract.test.ts checks every message it sends against it).
 */
export const GuestToHost = Type.Union([
  Type.Object(
    { type: Type.Literal("guest_ready"), bootId: Type.String(), guestVersion: Type.String(), ...identityFields },
    closed,
  ),
  Type.Object({ type: Type.Literal("pong"), id: Type.String() }, closed),
  Type.Object(
    {
      type: Type.Literal("bootstrap_consumed"),
      deliveryId: Type.String(),
      digest: Type.String({ pattern: "^sha256:[0-9a-f]{64}$" }),
    },
    closed,
  ),
  Type.Object({ type: Type.Literal("bootstrap_rejected"), deliveryId: Type.String(), reason: Type.String() }, closed),
  Type.Object({ type: Type.Literal("workload_started"), deliveryId: Type.String() }, closed),
  Type.Object({ type: Type.Literal("workload_exited"), deliveryId: Type.String(), exitCode: Type.Integer() }, closed),
  Type.Object({ type: Type.Literal("shutting_down") }, closed),
]);
/** Messages the guest sends to the host. */
export type GuestToHost = Static<typeof GuestToHost>;

/**
 * How often the agent sends its wall clock (`clock`) to a connected guest, ms. A guest clock can fall
 * behind by many seconds a minute when its vCPU is starved (TCG on a loaded host; measured: past the
 * 30 s grant skew within 7 minutes), and the control service checks grant freshness on that clock.
 */
export const GUEST_CLOCK_SYNC_INTERVAL_MS = 30_000;
/** How far the guest's wall clock may be from a `clock` message before the guest steps it, ms. */
export const GUEST_CLOCK_STEP_MS = 1_000;

/**
 * The host's wall clock for the guest to follow (sent once the guest is ready, then every
 * GUEST_CLOCK_SYNC_INTERVAL_MS): the guest steps CLOCK_REALTIME when it is off by more than
 * GUEST_CLOCK_STEP_MS. No answer. The same bounds as a restore's wall clock.
 */
export const ClockMessage = Type.Object(
  {
    type: Type.Literal("clock"),
    wallClockMs: Type.Integer({ minimum: MIN_RESTORE_WALL_CLOCK_MS, maximum: MAX_RESTORE_WALL_CLOCK_MS }),
  },
  closed,
);
/** The host's wall clock for the guest to follow. */
export type ClockMessage = Static<typeof ClockMessage>;

/** Messages the host sends to the guest, as a TypeBox schema (see GuestToHost). */
export const HostToGuest = Type.Union([
  Type.Object({ type: Type.Literal("ready_ack") }, closed),
  /** Asks the guest to send guest_ready again (a restarted agent adopting a VM that was still booting). */
  Type.Object({ type: Type.Literal("identify") }, closed),
  Type.Object({ type: Type.Literal("ping"), id: Type.String() }, closed),
  Type.Object(
    {
      type: Type.Literal("bootstrap"),
      deliveryId: Type.String(),
      contentType: Type.String(),
      dataBase64: Type.String(),
    },
    closed,
  ),
  Type.Object({ type: Type.Literal("shutdown") }, closed),
  /** The control service's verification keys (src/protocol/control.ts). */
  ControlConfigMessage,
  /** First to a restored VM: its new identity, entropy and wall clock (src/protocol/guestRestored.ts). */
  RestoredMessage,
  /** The host's wall clock, periodically (GUEST_CLOCK_SYNC_INTERVAL_MS). */
  ClockMessage,
]);
/** Messages the host sends to the guest. */
export type HostToGuest = Static<typeof HostToGuest>;

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

/**
 * Kernel command-line keys carrying the guest's private IPv6 configuration
 * (spec "Networks, addresses, and grants"; docs/connect.md): its
 * allocation's address, configured as `<address>/128` on eth0, and the
 * router on its TAP, `default via <router> dev eth0`. Read by the dev
 * image's /sbin/beachball-init and the converted images' initramfs
 * (src/image/devInitScripts.ts, src/image/oci/ociInitrd.ts).
 */
export const GUEST_IPV6_KEYS = {
  address: "beachball.ipv6",
  router: "beachball.ipv6_router",
} as const;

/** The guest's IPv6 router: the link-local address the host puts on the placement's TAP (docs/adr/0157-host-endpoint-routing.md). */
export const GUEST_IPV6_ROUTER = "fe80::1";

/** Console markers the guest writes around the workload (spec "Images"). */
export const JOB_START_MARKER = "BEACHBALL_JOB_START";
/** Written as `BEACHBALL_JOB_EXIT <code>` after the workload exits. */
export const JOB_EXIT_MARKER = "BEACHBALL_JOB_EXIT";

/** Where an image converted from OCI keeps its workload description (spec "Images"). */
export const WORKLOAD_CONFIG_PATH = "/etc/beachball/workload.json";
/** Environment variable naming the file that holds the delivered payload (spec "Images"). */
export const BOOTSTRAP_PATH_ENV = "BEACHBALL_BOOTSTRAP_PATH";
/** Environment variable carrying the payload's content type. */
export const BOOTSTRAP_CONTENT_TYPE_ENV = "BEACHBALL_BOOTSTRAP_CONTENT_TYPE";
/** Environment variable naming the program a systemd image hands the payload to (spec "Images"). */
export const WORKLOAD_ADAPTER_ENV = "BEACHBALL_WORKLOAD_ADAPTER";
/** Most entries in any list of a workload description, and longest string, bytes. */
export const MAX_WORKLOAD_LIST = 4096;
export const MAX_WORKLOAD_STRING_BYTES = 64 * 1024;

/**
 * /etc/beachball/workload.json: what an image converted from OCI runs once a
 * payload arrives, taken from the OCI image config (Entrypoint, Cmd, Env,
 * WorkingDir, User). The command is `entrypoint` followed by `cmd`.
 */
export interface WorkloadConfig {
  entrypoint: string[];
  cmd: string[];
  /** `NAME=value` entries. */
  env: string[];
  /** Absolute directory, "" for `/`. */
  workingDir: string;
  /** `user`, `uid`, `user:group` or `uid:gid`; "" for root. */
  user: string;
}

/** The first problem with a workload description, or null when it is well formed. Throws nothing. */
export function workloadConfigProblem(v: unknown): string | null {
  if (!v || typeof v !== "object" || Array.isArray(v)) return "workload config is not an object";
  const w = v as Record<string, unknown>;
  for (const k of ["entrypoint", "cmd", "env"]) {
    const a = w[k];
    if (
      !Array.isArray(a) ||
      a.length > MAX_WORKLOAD_LIST ||
      !a.every((s) => typeof s === "string" && s.length <= MAX_WORKLOAD_STRING_BYTES)
    )
      return `${k} is not a bounded string array`;
  }
  for (const k of ["workingDir", "user"])
    if (typeof w[k] !== "string" || (w[k] as string).length > MAX_WORKLOAD_STRING_BYTES) return `${k} is not a string`;
  if ((w.entrypoint as string[]).length + (w.cmd as string[]).length === 0) return "entrypoint and cmd are both empty";
  if (!(w.env as string[]).every((e) => e.indexOf("=") > 0)) return "env entries must be NAME=value";
  return null;
}
