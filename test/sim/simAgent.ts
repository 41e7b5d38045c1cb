/**
 * A simulated host agent for the fencing simulation. It speaks the real
 * agent protocol (Envelope, PollResponse, PlacementUpdate from
 * src/protocol) to the real scheduler objects and follows the real agent's
 * rules: persist a command before acting, reject a command ID reused with
 * other content, refuse generations older than one already accepted,
 * start a VM only with a live execution lease, stop VMs whose lease expired,
 * report each transition with a per-session sequence number. Its "VMs" are
 * records; a crash keeps them running (like real VMM processes) and loses
 * only the session.
 */
import { createHash } from "node:crypto";
import type { AgentCommand, PlacementObservedState, PlacementUpdate, PollResponse, Envelope, AgentPayload } from "../../src/protocol/agent.ts";
import { canonicalJson } from "../../src/domain/identifiers.ts";
import type { SeededRandom } from "./rng.ts";

/** One local placement (the agent.db model). */
export interface SimPlacement {
  placementId: string;
  allocationId: string;
  generation: number;
  desired: "present" | "running" | "absent";
  observed: PlacementObservedState;
  leaseExpiresAtMs: number;
  cpuMillis: number;
  memoryMiB: number;
}

/** A VM process on this host. */
export interface SimVm {
  placementId: string;
  allocationId: string;
  generation: number;
  cpuMillis: number;
  memoryMiB: number;
}

/** Something the harness must check when it happens. */
export interface ExecutionRecord {
  hostId: string;
  allocationId: string;
  generation: number;
  placementId: string;
  epoch: string;
}

/** See the module header. */
export class SimAgent {
  alive = true;
  partitioned = false;
  skewMs = 0;
  epoch = "";
  bootId: string;
  private nextSeq = 1;
  readonly placements = new Map<string, SimPlacement>();
  readonly commands = new Map<string, string>();
  readonly vms = new Map<string, SimVm>();
  readonly outbox: PlacementUpdate[] = [];
  private acks: AgentPayload["acks"] = [];

  constructor(
    readonly hostId: string,
    private readonly rng: SeededRandom,
    private readonly now: () => number,
    private readonly onExecute: (r: ExecutionRecord) => void,
  ) {
    this.bootId = rng.id("boot");
  }

  /** Agent clock (scheduler clock plus skew). */
  private local(): number {
    return this.now() + this.skewMs;
  }

  /** Crash: the session is lost; persisted state and VM processes remain. */
  crash(): void {
    this.epoch = "";
    this.bootId = this.rng.id("boot");
    this.acks = [];
    this.alive = false;
  }

  /** Builds the next envelope with pending observations. */
  envelope(type: Envelope["type"]): Envelope {
    const updates = this.outbox.slice(0, 64);
    const payload: AgentPayload = { bootId: this.bootId, updates: this.epoch ? updates : [], acks: this.acks.splice(0), deliveryAcks: [], health: { isolationHealthy: true, quarantineCount: 0, vmmDriver: "sim" }, waitMs: 0 };
    return { protocolVersion: "1.0", messageId: this.rng.id("msg"), hostId: this.hostId, agentEpoch: this.epoch, sentAt: new Date(this.local()).toISOString(), type, payload };
  }

  /** The scheduler accepted `env`: drop the observations it carried (sequence numbers only grow). */
  delivered(env: Envelope): void {
    const last = env.payload.updates[env.payload.updates.length - 1]?.seq ?? 0;
    while (this.outbox.length && this.outbox[0]!.seq <= last) this.outbox.shift();
  }

  /** Handles a poll response (possibly late). */
  handle(resp: PollResponse): void {
    if (resp.agentEpoch !== this.epoch) {
      if (this.epoch !== "") return; // a response for an older session
      this.epoch = resp.agentEpoch;
    }
    for (const [id, iso] of Object.entries(resp.leases)) {
      const p = this.placements.get(id);
      const ms = Date.parse(iso);
      if (p && ms > p.leaseExpiresAtMs) p.leaseExpiresAtMs = ms;
    }
    for (const c of resp.commands) this.accept(c);
  }

  private accept(c: AgentCommand): void {
    if (c.agentEpoch !== this.epoch) return;
    const digest = createHash("sha256").update(canonicalJson({ commandId: c.commandId, type: c.type, placementId: c.placementId, generation: c.generation, spec: c.spec })).digest("hex");
    const prior = this.commands.get(c.commandId);
    if (prior) {
      this.acks.push({ commandId: c.commandId, result: prior === digest ? "duplicate" : "rejected", ...(prior === digest ? {} : { errorCode: "COMMAND_CONFLICT" as const }) });
      return;
    }
    const newer = [...this.placements.values()].some((p) => p.allocationId === c.allocationId && p.generation > c.generation && p.observed !== "absent");
    if (newer && c.type !== "ensure_absent") {
      this.acks.push({ commandId: c.commandId, result: "rejected", errorCode: "STALE_GENERATION" });
      return;
    }
    this.commands.set(c.commandId, digest);
    this.acks.push({ commandId: c.commandId, result: "accepted" });
    const desired = c.type === "ensure_present" ? "present" : c.type === "ensure_running" ? "running" : "absent";
    const p = this.placements.get(c.placementId);
    const lease = Date.parse(c.leaseExpiresAt);
    if (!p) {
      this.placements.set(c.placementId, { placementId: c.placementId, allocationId: c.allocationId, generation: c.generation, desired, observed: "accepted", leaseExpiresAtMs: lease, cpuMillis: c.spec.cpuMillis, memoryMiB: c.spec.memoryMiB });
    } else if (p.desired !== "absent") {
      p.desired = desired;
      p.leaseExpiresAtMs = Math.max(p.leaseExpiresAtMs, lease);
    }
  }

  private observe(p: SimPlacement, state: PlacementObservedState, extra: Partial<PlacementUpdate> = {}): void {
    p.observed = state;
    this.outbox.push({ seq: this.nextSeq++, placementId: p.placementId, allocationId: p.allocationId, generation: p.generation, state, at: new Date(this.local()).toISOString(), ...extra });
  }

  /** Moves placements one step toward their desired state; stops VMs whose lease expired. */
  progress(): void {
    for (const p of this.placements.values()) {
      if (p.observed === "absent") continue;
      const vm = this.vms.get(p.placementId);
      if (vm && p.desired !== "absent" && p.leaseExpiresAtMs <= this.local()) {
        // Like the real agent's housekeeping: an expired lease stops the VM at once.
        p.desired = "absent";
        this.vms.delete(p.placementId);
        this.observe(p, "error", { errorCode: "LEASE_EXPIRED" });
        continue;
      }
      if (p.desired === "absent") {
        if (!this.rng.chance(0.7)) continue;
        this.vms.delete(p.placementId);
        this.observe(p, "absent");
        continue;
      }
      if (!this.rng.chance(0.6)) continue;
      if (p.observed === "accepted") this.observe(p, "preparing");
      else if (p.observed === "preparing") {
        if (this.rng.chance(0.05)) this.observe(p, "error", { errorCode: "IMAGE_DIGEST_MISMATCH" });
        else this.observe(p, "prepared");
      } else if (p.observed === "prepared" && p.desired === "running") {
        if (p.leaseExpiresAtMs <= this.local()) {
          this.observe(p, "error", { errorCode: "LEASE_EXPIRED" });
          continue;
        }
        this.vms.set(p.placementId, { placementId: p.placementId, allocationId: p.allocationId, generation: p.generation, cpuMillis: p.cpuMillis, memoryMiB: p.memoryMiB });
        this.onExecute({ hostId: this.hostId, allocationId: p.allocationId, generation: p.generation, placementId: p.placementId, epoch: this.epoch });
        this.observe(p, "starting");
      } else if (p.observed === "starting") {
        if (this.rng.chance(0.05)) {
          this.vms.delete(p.placementId);
          this.observe(p, "error", { errorCode: "GUEST_BOOT_TIMEOUT" });
        } else this.observe(p, "running");
      }
    }
  }
}
