/**
 * A Host's placements and their execution leases (spec "Reservation",
 * "Execution leases", "Messages"): reserving capacity (every hard
 * constraint rechecked from the host's own rows; placement, first lease and
 * ensure_present in one transaction), asking for absence, applying the
 * agent's placement updates through the state machine of
 * src/domain/hostPlacement.ts and forwarding them to the owning Allocation,
 * renewing leases on heartbeats, and the commands and leases a poll carries.
 * Capacity is released only when the agent reports a placement absent.
 * Must never: call an Allocation (observations go out by `post`), or renew
 * the lease of a placement the scheduler wants gone.
 */
import { BeachballError } from "../../protocol/errors.ts";
import { fits, type Resources } from "../../domain/capacity.ts";
import { healthFromHeartbeat } from "../../domain/health.ts";
import { unschedulableReasons } from "../../domain/hostConditions.ts";
import {
  endsPendingCommands,
  isCurrentRunning,
  leaseExpiryFrom,
  leasesToRenew,
  placementStateAfter,
  releasesCapacity,
  startsRunning,
  updateRejection,
} from "../../domain/hostPlacement.ts";
import type { AgentCommand, CommandSpec, PlacementUpdate, UpdateRejectionCode } from "../../protocol/agent.ts";
import type { HostContext } from "./hostContext.ts";
import { freeCapacity, hostFacts, publish } from "./hostAdvertisement.ts";
import type { PlacementRow } from "./hostStore.ts";
import type { PlacementStatus, ReserveRequest, ReserveResult } from "./hostTypes.ts";

/** Reserves capacity for one placement (idempotent by `key`). Rejects with a stable code. */
export function reserve(ctx: HostContext, req: ReserveRequest): ReserveResult {
  const { store, env } = ctx;
  const prior = store.placementByKey(req.key);
  if (prior) return { accepted: true, placementId: prior.placementId };
  const r = store.row();
  if (!r) return { accepted: false, code: "HOST_NOT_ACTIVE" };
  const now = env.clock.wallMs();
  const blocked = unschedulableReasons(hostFacts(r), now);
  if (blocked.length) return { accepted: false, code: blocked[0]! };
  const request: Resources = {
    cpuMillis: req.spec.cpuMillis,
    memoryMiB: req.spec.memoryMiB,
    ephemeralDiskMiB: req.spec.ephemeralDiskMiB,
    slots: 1,
  };
  const misfit = fits(freeCapacity(ctx, r), request);
  if (misfit) return { accepted: false, code: misfit };
  const p: PlacementRow = {
    obj: ctx.state.name,
    placementId: req.placementId,
    allocationId: req.allocationId,
    generation: req.generation,
    state: "reserved",
    resourcesJson: JSON.stringify(request),
    specJson: JSON.stringify(req.spec),
    reservationKey: req.key,
    desired: "present",
    leaseExpiresAtMs: leaseExpiryFrom(now, env.config.timeouts.leaseMs),
    errorCode: null,
    createdAtMs: now,
    updatedAtMs: now,
  };
  store.atomically(() => {
    store.insertPlacement(p);
    store.enqueue(req.placementId, "ensure_present", req.generation, env.clock.wallMs());
    publish(ctx, true);
  });
  ctx.mailbox.wakePolls();
  return { accepted: true, placementId: req.placementId };
}

/** Where a placement stands and how healthy this host is (for an allocation's host-loss check). */
export function placementStatus(ctx: HostContext, placementId: string): PlacementStatus {
  const r = ctx.store.row();
  const p = ctx.store.placement(placementId);
  return {
    exists: !!p,
    state: p?.state ?? null,
    leaseExpiresAtMs: p?.leaseExpiresAtMs ?? 0,
    hostHealth: r ? healthFromHeartbeat(r.heartbeatAtMs, ctx.env.clock.wallMs()) : "unknown",
    fenced: r?.adminState === "disabled",
  };
}

/** Asks the agent to make the placement absent (idempotent). Returns true once absence was observed. */
export function requestAbsent(ctx: HostContext, placementId: string, generation: number): boolean {
  const { store, env } = ctx;
  const p = store.placement(placementId);
  if (!p || p.generation !== generation) return !p;
  if (p.state === "absent") return true;
  // A deliberately injectable bug for the simulation (src/scheduler debug config): capacity freed on lease expiry.
  if (env.config.debug.releaseCapacityOnLeaseExpiry && p.leaseExpiresAtMs < env.clock.wallMs()) {
    store.setPlacement(p, { state: "absent", desired: "absent" });
    return true;
  }
  if (p.desired !== "absent") {
    store.atomically(() => {
      store.setPlacement(p, { desired: "absent", updatedAtMs: env.clock.wallMs() });
      store.supersedePending(placementId);
      store.enqueue(placementId, "ensure_absent", generation, env.clock.wallMs());
    });
    ctx.mailbox.wakePolls();
  }
  return false;
}

/**
 * Checks that a delivery may go to this placement now; returns an earlier
 * digest for a repeated delivery ID. Throws STALE_GENERATION (not the
 * current placement), GUEST_NOT_CONNECTED (not running).
 */
export function checkDelivery(
  ctx: HostContext,
  deliveryId: string,
  placementId: string,
  generation: number,
): { earlierDigest: string | null } {
  const prior = ctx.store.consumedDelivery(deliveryId);
  if (prior) return { earlierDigest: prior.digest };
  const p = ctx.store.placement(placementId);
  if (!p || p.generation !== generation)
    throw new BeachballError("STALE_GENERATION", "the placement generation is not current");
  if (!isCurrentRunning(p, generation)) throw new BeachballError("GUEST_NOT_CONNECTED", "the guest is not running");
  return { earlierDigest: null };
}

/**
 * Applies one observation if its placement and generation are current and
 * its sequence number is above the last one applied for that placement in
 * this session; otherwise returns the stable reason and changes nothing
 * (so an update for an unknown placement, or a huge sequence number on one
 * placement, never holds back another placement's updates). Applied:
 * `material` is true when it changed capacity. Runs in the envelope's transaction.
 */
export function applyUpdate(
  ctx: HostContext,
  epoch: string,
  u: PlacementUpdate,
): { material: boolean } | UpdateRejectionCode {
  const { store, env } = ctx;
  const hostId = ctx.state.name;
  const p = store.placement(u.placementId);
  const rejection = updateRejection(p, u, p ? store.lastAppliedSeq(p.placementId) : 0);
  if (rejection || !p) return rejection ?? "UNKNOWN_PLACEMENT";
  store.recordSeq(p.placementId, u.seq);
  const now = env.clock.wallMs();
  const state = placementStateAfter(p.state, u.state);
  let cur = store.setPlacement(p, { state, errorCode: u.errorCode ?? p.errorCode, updatedAtMs: now });
  if (startsRunning(u.state, cur.desired)) {
    cur = store.setPlacement(cur, { desired: "running" });
    store.enqueue(p.placementId, "ensure_running", p.generation, env.clock.wallMs());
  }
  if (endsPendingCommands(u.state)) store.supersedePending(p.placementId);
  ctx.state.post(env.Allocation, p.allocationId, `obs:${hostId}:${epoch}:${p.placementId}:${u.seq}`, {
    kind: "observation",
    hostId,
    placementId: p.placementId,
    generation: p.generation,
    state: u.state,
    errorCode: u.errorCode ?? null,
    workloadExitCode: u.workloadExitCode ?? null,
    ...(u.exit ? { exit: u.exit } : {}),
    at: u.at,
  });
  return { material: releasesCapacity(state) };
}

/** Renews the execution lease of every placement still wanted to `nowMs` + the configured lease (a heartbeat). */
export function renewLeases(ctx: HostContext, nowMs: number): void {
  const lease = leaseExpiryFrom(nowMs, ctx.env.config.timeouts.leaseMs);
  ctx.store.renewLeases(leasesToRenew(ctx.store.placements().values(), lease), lease);
}

/** Authoritative lease expiry of every placement not yet absent (ISO 8601, by placement ID). */
export function leases(ctx: HostContext): Record<string, string> {
  const out: Record<string, string> = {};
  for (const p of ctx.store.placements().values()) out[p.placementId] = new Date(p.leaseExpiresAtMs).toISOString();
  return out;
}

/** The pending commands (≤ MAX_COMMANDS_PER_POLL) stamped with `epoch`, each with its placement's lease and spec. */
export function pendingCommands(ctx: HostContext, epoch: string): AgentCommand[] {
  const commands: AgentCommand[] = [];
  for (const c of ctx.store.pendingCommands()) {
    const p = ctx.store.placement(c.placementId);
    if (!p) continue;
    commands.push({
      commandId: c.commandId,
      type: c.type,
      allocationId: p.allocationId,
      placementId: p.placementId,
      generation: c.generation,
      agentEpoch: epoch,
      leaseExpiresAt: new Date(p.leaseExpiresAtMs).toISOString(),
      spec: JSON.parse(p.specJson) as CommandSpec,
    });
  }
  return commands;
}
