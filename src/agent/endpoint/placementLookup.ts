/**
 * Where the host endpoint finds a grant's placement on this host: agent.db's
 * placement rows (src/agent/store.ts). A placement is reachable once its
 * network exists and until it is torn down: observed prepared, starting or
 * running, with a desired state other than absent. With two placements of
 * one allocation here (a replacement), the higher generation is the one
 * grants may name (spec "Revocation and replacement").
 *
 * Owns: nothing; reads the store. Must never: name a namespace that is not
 * the placement's own `bb-<digest>`.
 */
import type { PlacementObservedState } from "../../protocol/agent.ts";
import { PLACEMENT_TAP_NAME } from "../isolation/placementNet.ts";
import { nftTableName } from "../isolation/rules.ts";
import type { LocalPlacement } from "../store.ts";
import type { PlacementLookup, PlacementTarget } from "./grantCheck.ts";

/** Observed states in which a placement's network namespace, TAP and table exist. */
export const NETWORKED_STATES: ReadonlySet<PlacementObservedState> = new Set(["prepared", "starting", "running"]);

/** The placement target of `rows` for `allocationId` (see the module header), or null. Pure. */
export function placementTargetOf(rows: readonly LocalPlacement[], allocationId: string): PlacementTarget | null {
  let best: LocalPlacement | null = null;
  for (const p of rows) {
    if (p.allocationId !== allocationId || p.desired === "absent" || !NETWORKED_STATES.has(p.observed)) continue;
    if (!best || p.generation > best.generation) best = p;
  }
  if (!best) return null;
  return {
    allocationId,
    generation: best.generation,
    netns: best.dirName,
    table: nftTableName(best.dirName),
    tap: PLACEMENT_TAP_NAME,
  };
}

/** A lookup over the live placements `rows()` returns (AgentStore.livePlacements). */
export function storePlacementLookup(rows: () => readonly LocalPlacement[]): PlacementLookup {
  return { byAllocation: (id) => placementTargetOf(rows(), id) };
}
