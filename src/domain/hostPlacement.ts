/**
 * The Host object's placement rules (spec "Reservation", "The agent
 * protocol", "Execution leases"): how an agent's placement_update moves the
 * host's placement state machine, which updates are refused and why, what a
 * state change asks of the command queue, and which execution leases a
 * heartbeat renews. Pure: callers pass the rows and `nowMs` in; the Host
 * object (src/scheduler/objects/hostPlacements.ts) persists the outcome.
 * Must never: read a clock, touch storage, or decide anything about capacity
 * arithmetic (./capacity.ts does).
 */
import { sub, type HostPlacementState, type Resources } from "./capacity.ts";
import type { PlacementUpdate, UpdateRejectionCode } from "../protocol/agent.ts";

/** What the scheduler wants of a placement: kept prepared, running, paused, suspended (issue 21), or gone. */
export type DesiredPlacementState = "present" | "running" | "paused" | "suspended" | "absent";

/** The parts of a stored placement these rules read. */
export interface PlacementFacts {
  generation: number;
  state: HostPlacementState;
  desired: DesiredPlacementState;
  leaseExpiresAtMs: number;
}

/**
 * The host's placement state after the agent reports `reported` (spec
 * "Placement states"): accepted/preparing/prepared are `preparing`,
 * starting/running are `running`, paused is `paused`, suspended is
 * `suspended` (issue 21), stopping is `stopping`, an error waits for
 * cleanup (`cleanup_pending`), absent is `absent`. Any other report leaves
 * `current` unchanged.
 */
export function placementStateAfter(
  current: HostPlacementState,
  reported: PlacementUpdate["state"],
  desired: DesiredPlacementState = "running",
): HostPlacementState {
  // Only a resume the Host asked for (desired running) takes a paused or suspended placement back to running.
  if ((current === "paused" || current === "suspended") && desired !== "running" && isRunReport(reported))
    return current;
  switch (reported) {
    case "accepted":
    case "preparing":
    case "prepared":
      return "preparing";
    case "starting":
    case "running":
      return "running";
    case "paused":
      return desired === "paused" ? "paused" : current;
    case "suspended":
      return desired === "suspended" ? "suspended" : current;
    case "stopping":
      return "stopping";
    case "error":
      return "cleanup_pending";
    case "absent":
      return "absent";
    default:
      return current;
  }
}

/** True for the reports of a VM on its way to running (or there). */
function isRunReport(reported: PlacementUpdate["state"]): boolean {
  return (
    reported === "accepted" ||
    reported === "preparing" ||
    reported === "prepared" ||
    reported === "starting" ||
    reported === "running"
  );
}

/**
 * Why an update for placement `p` (undefined: not this host's) must be
 * refused, or null to apply it. In this order: UNKNOWN_PLACEMENT,
 * STALE_GENERATION (another generation; but absence reported under an
 * earlier generation of a placement a resume moved on applies: issue 21), SEQUENCE_NOT_INCREASING (`seq` not
 * above `lastAppliedSeq`, the last one applied to this placement in this
 * session, 0 for none), INVALID_STATE (the placement is already absent).
 * A refusal concerns only that one update (spec "Messages").
 */
export function updateRejection(
  p: PlacementFacts | undefined,
  update: { generation: number; seq: number; state?: PlacementUpdate["state"] },
  lastAppliedSeq: number,
): UpdateRejectionCode | null {
  if (!p) return "UNKNOWN_PLACEMENT";
  // A placement restored as the next generation is the same directory and VM (issue 21): its absence, reported
  // under the generation the agent still held, means all of it is gone.
  const goneEarlier = update.state === "absent" && update.generation < p.generation;
  if (p.generation !== update.generation && !goneEarlier) return "STALE_GENERATION";
  if (update.seq <= lastAppliedSeq) return "SEQUENCE_NOT_INCREASING";
  if (p.state === "absent") return "INVALID_STATE";
  return null;
}

/** True when a `reported` state lets the scheduler ask for the VM to start: a prepared placement still wanted only present. */
export function startsRunning(reported: PlacementUpdate["state"], desired: DesiredPlacementState): boolean {
  return reported === "prepared" && desired === "present";
}

/** True when a `reported` state ends every pending command of its placement (it is gone: nothing is left to command). */
export function endsPendingCommands(reported: PlacementUpdate["state"]): boolean {
  return reported === "absent";
}

/** True when a placement entering `state` gives capacity back: absence (all of it), a pause (its CPU), a suspend (its CPU and memory). */
export function releasesCapacity(state: HostPlacementState): boolean {
  return state === "absent" || state === "paused" || state === "suspended";
}

/** What a resume must find free on the host: what the placement gave back of its full reservation (`reserved` − `held`). Pure. */
export function resumeNeeds(reserved: Resources, held: Resources): Resources {
  return sub(reserved, held);
}

/**
 * The desired state an agent's refusal sets back (issue 21): a pause or
 * suspend the agent could not carry out is reported with an error code and
 * the state the VM stayed in (`running` or `paused`); the placement is then
 * wanted in that state, so leases, grants and deliveries go on as before.
 * Null when `reported` is no such refusal. Pure.
 */
export function desiredAfterRefusal(
  desired: DesiredPlacementState,
  reported: PlacementUpdate["state"],
  errorCode: string | undefined,
): DesiredPlacementState | null {
  if (!errorCode || (reported !== "running" && reported !== "paused")) return null;
  if (desired !== "paused" && desired !== "suspended") return null;
  return desired === reported ? null : reported;
}

/** The lease expiry a heartbeat at `nowMs` grants, ms since the epoch (`leaseMs`: the configured lease). */
export function leaseExpiryFrom(nowMs: number, leaseMs: number): number {
  return nowMs + leaseMs;
}

/**
 * The placements whose lease a heartbeat moves to `leaseExpiresAtMs`: every
 * one still wanted (never one the scheduler wants gone, so a VM it is
 * stopping cannot outlive its last lease) whose lease differs. `placements`
 * are the host's capacity-consuming ones (not absent).
 */
export function leasesToRenew<P extends PlacementFacts>(placements: Iterable<P>, leaseExpiresAtMs: number): P[] {
  const out: P[] = [];
  for (const p of placements) if (p.desired !== "absent" && p.leaseExpiresAtMs !== leaseExpiresAtMs) out.push(p);
  return out;
}

/** True when `p` is the host's placement at `generation` and still wanted (not absent, not going), on a host not fenced. */
export function isWantedPlacement(
  p: PlacementFacts | undefined,
  generation: number,
  adminState: "active" | "draining" | "disabled" | undefined,
): boolean {
  return (
    !!p && p.generation === generation && p.state !== "absent" && p.desired !== "absent" && adminState !== "disabled"
  );
}

/** True when `p` is the placement at `generation` and both running and meant to run (a grant or a delivery may go to it). */
export function isCurrentRunning(p: PlacementFacts | undefined, generation: number): boolean {
  return !!p && p.generation === generation && p.state === "running" && p.desired === "running";
}
