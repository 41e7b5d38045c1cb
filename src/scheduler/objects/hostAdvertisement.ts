/**
 * What a Host tells others about itself (spec "Placement", "Host
 * directory", "Administrative state and health"): its free capacity, the
 * facts its schedulability is judged on, the advertisement it publishes to
 * the HostDirectory (when something material changed, and at least every
 * AD_REFRESH_MS through the alarm), and the operator's view.
 * Must never: publish capacity the host's own rows do not show free.
 */
import { sub, used, type Resources } from "../../domain/capacity.ts";
import { healthFromHeartbeat } from "../../domain/health.ts";
import { unschedulableReasons, type HostFacts } from "../../domain/hostConditions.ts";
import type { AgentFacts } from "../../domain/hostSession.ts";
import type { Advertisement } from "../../domain/placement.ts";
import type { Capacity } from "../../protocol/api.ts";
import { GLOBAL } from "../env.ts";
import type { HostContext } from "./hostContext.ts";
import type { HostRow } from "./hostStore.ts";
import { toRes, type HostView } from "./hostTypes.ts";

/** Longest interval between advertisements, ms (spec: at least every 30 s). */
export const AD_REFRESH_MS = 10_000;

/** Most distinct column texts `parsed` keeps. */
const MAX_PARSED_CACHE_ENTRIES = 4096;
const parsedCache = new Map<string, unknown>();
/** JSON.parse of a small, often repeated column value (capacities, resources), memoised (bounded). */
function parsed<T>(text: string): T {
  let v = parsedCache.get(text);
  if (v === undefined) {
    if (parsedCache.size >= MAX_PARSED_CACHE_ENTRIES) parsedCache.clear();
    v = JSON.parse(text) as unknown;
    parsedCache.set(text, v);
  }
  return v as T;
}

/** The host's free capacity: registered minus reserve minus every placement not absent. */
export function freeCapacity(ctx: HostContext, r: HostRow): Resources {
  const allocatable = sub(toRes(parsed<Capacity>(r.capacityJson)), toRes(parsed<Capacity>(r.reserveJson)));
  return sub(
    allocatable,
    used(
      [...ctx.store.placements().values()].map((p) => ({
        state: p.state,
        resources: parsed<Resources>(p.resourcesJson),
      })),
    ),
  );
}

/** The facts the host's schedulability is judged on (src/domain/hostConditions.ts). */
export function hostFacts(r: HostRow): HostFacts {
  const cap = JSON.parse(r.capacityJson) as Capacity;
  return {
    adminState: r.adminState,
    heartbeatAtMs: r.heartbeatAtMs,
    isolationHealthy: r.isolationHealthy,
    registered: cap,
    ...(JSON.parse(r.factsJson) as AgentFacts),
  };
}

/** Publishes an advertisement to the directory when `material` (the alarm and heartbeats decide when it is due). */
export function publish(ctx: HostContext, material: boolean): void {
  const r = ctx.store.row();
  if (!r || !material) return;
  const now = ctx.env.clock.wallMs();
  // At least the time: a restart that lost the last revisions still publishes newer ones (the row keeps one from the last heartbeat).
  const revision = Math.max(r.adRevision + 1, now);
  const ad: Advertisement = {
    hostId: r.obj,
    revision,
    adminState: r.adminState,
    heartbeatAtMs: r.heartbeatAtMs,
    region: r.region,
    architecture: r.architecture,
    labels: JSON.parse(r.labelsJson) as Record<string, string>,
    agentProtocolVersion: r.agentProtocolVersion,
    isolationHealthy: r.isolationHealthy,
    unschedulable: unschedulableReasons(hostFacts(r), now).filter(
      (x) => x !== "HOST_NOT_ACTIVE" && x !== "HOST_NOT_HEALTHY",
    ),
    free: freeCapacity(ctx, r),
    cachedImages: (JSON.parse(r.factsJson) as AgentFacts).cachedImages ?? [],
  };
  ctx.store.noteAdvertised(revision, now);
  ctx.state.postLatest(ctx.env.HostDirectory, GLOBAL, `ad:${r.obj}`, { kind: "advertisement", ad });
  // The refresh alarm moves only when it would fire soon (not on every publish).
  const armed = ctx.state.getAlarm();
  if (armed === null || armed < now + AD_REFRESH_MS) ctx.state.setAlarm(now + AD_REFRESH_MS * 3);
}

/** The operator's view with free capacity. Throws NOT_FOUND before enrollment. */
export function hostView(ctx: HostContext): HostView {
  const r = ctx.store.mustRow();
  const registered = toRes(JSON.parse(r.capacityJson) as Capacity);
  const allocatable = sub(registered, toRes(JSON.parse(r.reserveJson) as Capacity));
  const now = ctx.env.clock.wallMs();
  return {
    hostId: r.obj,
    adminState: r.adminState,
    health: healthFromHeartbeat(r.heartbeatAtMs, now),
    registered,
    allocatable,
    free: freeCapacity(ctx, r),
    placements: [...ctx.store.placements().values()].map((p) => ({
      placementId: p.placementId,
      allocationId: p.allocationId,
      generation: p.generation,
      state: p.state,
    })),
    heartbeatAt: r.heartbeatAtMs ? new Date(r.heartbeatAtMs).toISOString() : null,
    vmmDriver: r.vmmDriver,
    unschedulable: unschedulableReasons(hostFacts(r), ctx.env.clock.wallMs()),
    credentialVersion: r.credentialVersion,
    suspended: suspendedSummary(ctx),
  };
}

/** The host's suspended placements for its view: how many, the disk they hold (MiB), the earliest of their last reports, the policy's longest suspension. */
function suspendedSummary(ctx: HostContext): HostView["suspended"] {
  const held = [...ctx.store.placements().values()].filter((p) => p.state === "suspended");
  const oldest = held.reduce((t, p) => Math.min(t, p.updatedAtMs), Number.POSITIVE_INFINITY);
  return {
    placements: held.length,
    diskMiB: held.reduce((n, p) => n + (JSON.parse(p.resourcesJson) as Resources).ephemeralDiskMiB, 0),
    oldestReportAt: held.length ? new Date(oldest).toISOString() : null,
    maxAgeSeconds: Math.ceil(ctx.env.config.timeouts.suspendedMaxAgeMs / 1000),
  };
}
