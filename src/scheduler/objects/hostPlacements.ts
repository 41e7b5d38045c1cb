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
import { fits, heldAfter, type Resources } from "../../domain/capacity.ts";
import { healthFromHeartbeat } from "../../domain/health.ts";
import { unschedulableReasons } from "../../domain/hostConditions.ts";
import {
  desiredAfterRefusal,
  endsPendingCommands,
  isCurrentRunning,
  leaseExpiryFrom,
  leasesToRenew,
  placementStateAfter,
  releasesCapacity,
  resumeNeeds,
  startsRunning,
  updateRejection,
} from "../../domain/hostPlacement.ts";
import type { AgentCommand, CommandSpec, PlacementUpdate, UpdateRejectionCode } from "../../protocol/agent.ts";
import type { HostContext } from "./hostContext.ts";
import { freeCapacity, hostFacts, publish } from "./hostAdvertisement.ts";
import type { PlacementRow } from "./hostStore.ts";
import type { PlacementStatus, ReserveRequest, ReserveResult, TransitionAnswer } from "./hostTypes.ts";
import { reservedResources } from "./hostTypes.ts";

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
  const request = reservedResources(req.spec);
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
    step: 0,
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

/** The placement `placementId` at `generation`, or the refusal: UNKNOWN_PLACEMENT, STALE_GENERATION, INVALID_STATE (going away). */
function wanted(ctx: HostContext, placementId: string, generation: number): PlacementRow | TransitionAnswer {
  const p = ctx.store.placement(placementId);
  if (!p) return { refused: "UNKNOWN_PLACEMENT" };
  if (p.generation !== generation) return { refused: "STALE_GENERATION" };
  if (p.desired === "absent" || p.state === "absent") return { refused: "INVALID_STATE" };
  return p;
}

/** Sets `p`'s desired state to `desired` with the next step and queues the command that asks for it, in one transaction. */
function command(ctx: HostContext, p: PlacementRow, patch: Partial<PlacementRow>, type: AgentCommand["type"]): void {
  const { store, env } = ctx;
  const now = env.clock.wallMs();
  const step = p.step + 1;
  const generation = patch.generation ?? p.generation;
  store.atomically(() => {
    store.setPlacement(p, { ...patch, step, updatedAtMs: now });
    store.enqueue(p.placementId, type, generation, now, step);
    if (patch.state !== undefined) publish(ctx, true);
  });
  ctx.mailbox.wakePolls();
}

/**
 * Asks the agent to pause the running placement (issue 21; idempotent).
 * `done` once the agent confirmed it paused (its CPU is then free); refused
 * with UNKNOWN_PLACEMENT, STALE_GENERATION, or INVALID_STATE (not running,
 * or going away).
 */
export function requestPause(ctx: HostContext, placementId: string, generation: number): TransitionAnswer {
  const p = wanted(ctx, placementId, generation);
  if (!("placementId" in p)) return p;
  if (p.state === "paused" && p.desired === "paused") return { done: true };
  if (p.desired === "paused") return { done: false };
  if (p.state !== "running" || p.desired !== "running") return { refused: "INVALID_STATE" };
  command(ctx, p, { desired: "paused" }, "ensure_paused");
  return { done: false };
}

/**
 * Asks the agent to suspend the running or paused placement: memory and
 * device state to the host's disk, the VMM ended (issue 21; idempotent).
 * `done` once the agent confirmed it suspended (its CPU and memory are then
 * free; its disk stays held); refused as requestPause.
 */
export function requestSuspend(ctx: HostContext, placementId: string, generation: number): TransitionAnswer {
  const p = wanted(ctx, placementId, generation);
  if (!("placementId" in p)) return p;
  if (p.state === "suspended" && p.desired === "suspended") return { done: true };
  if (p.desired === "suspended") return { done: false };
  const settled =
    (p.state === "running" && p.desired === "running") || (p.state === "paused" && p.desired === "paused");
  if (!settled) return { refused: "INVALID_STATE" };
  command(ctx, p, { desired: "suspended" }, "ensure_suspended");
  return { done: false };
}

/**
 * Lets a paused or suspended placement run again (issue 21; idempotent):
 * first takes back what its state gave up (a paused VM's CPU, a suspended
 * one's CPU and memory) if it fits, else refuses with the dimension's code
 * (INSUFFICIENT_CPU, INSUFFICIENT_MEMORY) and changes nothing; then asks the
 * agent to run it. A suspended placement is restored as `nextGeneration`
 * (the allocation's next generation: the old one's updates are refused from
 * then on); a paused one keeps `generation`. `done` once the agent reports
 * it running. Refused as requestPause, and INVALID_STATE while a pause or
 * suspend is still under way.
 */
export function requestResume(
  ctx: HostContext,
  placementId: string,
  generation: number,
  nextGeneration: number,
): TransitionAnswer {
  const already = ctx.store.placement(placementId);
  if (already && already.generation === nextGeneration && already.desired === "running")
    return { done: already.state === "running" };
  const p = wanted(ctx, placementId, generation);
  if (!("placementId" in p)) return p;
  if (p.desired === "running") return { done: p.state === "running" };
  if (!(p.state === "paused" && p.desired === "paused") && !(p.state === "suspended" && p.desired === "suspended"))
    return { refused: "INVALID_STATE" };
  const restores = p.state === "suspended";
  const full = reservedResources(JSON.parse(p.specJson) as CommandSpec);
  const bug = ctx.env.config.debug.resumeWithoutCapacity === true;
  if (!bug) {
    const r = ctx.store.row();
    if (!r) return { refused: "HOST_NOT_ACTIVE" };
    const misfit = fits(freeCapacity(ctx, r), resumeNeeds(full, JSON.parse(p.resourcesJson) as Resources));
    if (misfit) return { refused: misfit };
  }
  command(
    ctx,
    p,
    {
      desired: "running",
      ...(bug ? {} : { state: "resuming" as const, resourcesJson: JSON.stringify(full) }),
      ...(restores ? { generation: nextGeneration } : {}),
    },
    "ensure_running",
  );
  return { done: false };
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
  const state = placementStateAfter(p.state, u.state, p.desired);
  // A pause or suspend the agent could not carry out: the placement is wanted as it stayed.
  const refusedTo = desiredAfterRefusal(p.desired, u.state, u.errorCode);
  // A confirmed pause gives back the CPU, a suspend the memory too (held until a resume takes it back).
  const held = state !== p.state ? heldAfter(state, JSON.parse(p.resourcesJson) as Resources) : null;
  let cur = store.setPlacement(p, {
    state,
    errorCode: u.errorCode ?? p.errorCode,
    updatedAtMs: now,
    ...(refusedTo ? { desired: refusedTo } : {}),
    ...(held ? { resourcesJson: JSON.stringify(held) } : {}),
  });
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
    ...(u.start ? { start: u.start } : {}),
    at: u.at,
  });
  return { material: state !== p.state && releasesCapacity(state) };
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
