/**
 * Candidate selection (spec "Placement: choosing a host"): filter the
 * directory's advertisements, then sort by the five keys in order. Pure.
 * The Host object rechecks everything; this only picks whom to ask first.
 */
import { healthFromHeartbeat } from "./health.ts";
import { fits, sub, type Resources } from "./capacity.ts";

/** A host's compact advertisement in the directory. */
export interface Advertisement {
  hostId: string;
  /** Monotonic revision; an older one never overwrites a newer one. */
  revision: number;
  adminState: "active" | "draining" | "disabled";
  heartbeatAtMs: number | null;
  region: string;
  architecture: string;
  labels: Record<string, string>;
  agentProtocolVersion: string;
  isolationHealthy: boolean;
  /** Unschedulable conditions other than admin state and heartbeat (clock skew, inventory, overlap, volumes). */
  unschedulable: string[];
  /** Free capacity hint (allocatable − used at publish time). */
  free: Resources;
  cachedImages: string[];
}

/** What the allocation asks for. */
export interface PlacementRequest {
  allocationId: string;
  resources: Resources;
  imageDigest: string;
  architecture: string;
  regions: string[] | null;
  requiredLabels: Record<string, string>;
  agentProtocolVersion: string;
  /** Hosts to skip (already tried this round). */
  exclude: ReadonlySet<string>;
}

/** True if a newer advertisement `next` may replace `prev`. */
export function supersedes(prev: Advertisement | undefined, next: Advertisement): boolean {
  return prev === undefined || next.revision > prev.revision;
}

/** Why a host was filtered out, or null if it passes every check. */
export function filterReason(ad: Advertisement, req: PlacementRequest, nowMs: number): string | null {
  if (req.exclude.has(ad.hostId)) return "ALREADY_TRIED";
  if (ad.adminState !== "active") return "HOST_NOT_ACTIVE";
  if (healthFromHeartbeat(ad.heartbeatAtMs, nowMs) !== "healthy") return "HOST_NOT_HEALTHY";
  if (ad.architecture !== req.architecture) return "ARCHITECTURE_MISMATCH";
  if (req.regions && !req.regions.includes(ad.region)) return "REGION_NOT_ALLOWED";
  for (const [k, v] of Object.entries(req.requiredLabels)) if (ad.labels[k] !== v) return "LABEL_MISSING";
  if (ad.agentProtocolVersion.split(".")[0] !== req.agentProtocolVersion.split(".")[0]) return "PROTOCOL_INCOMPATIBLE";
  if (!ad.isolationHealthy) return "ISOLATION_UNHEALTHY";
  if (ad.unschedulable.length > 0) return ad.unschedulable[0]!;
  const misfit = fits(ad.free, req.resources);
  if (misfit) return misfit;
  return null;
}

/** Stable tie-breaker: 32-bit FNV-1a of allocationId NUL hostId (any stable hash serves; this one is cheap). */
export function tieBreak(allocationId: string, hostId: string): number {
  let h = 0x811c9dc5;
  const s = `${allocationId}\u0000${hostId}`;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

interface Keyed {
  ad: Advertisement;
  cached: number;
  hb: number;
  mem: number;
  cpu: number;
  tie: number;
}

function compare(a: Keyed, b: Keyed): number {
  return a.cached - b.cached || a.hb - b.hb || a.mem - b.mem || a.cpu - b.cpu || a.tie - b.tie;
}

/**
 * Filters and orders candidates: image cached first, freshest heartbeat,
 * least memory left, least CPU left, then the stable hash. Returns at most
 * `limit` (a partial selection: O(hosts × limit), no full sort).
 */
export function rankCandidates(ads: Iterable<Advertisement>, req: PlacementRequest, nowMs: number, limit = Number.POSITIVE_INFINITY): Advertisement[] {
  const best: Keyed[] = [];
  for (const ad of ads) {
    if (filterReason(ad, req, nowMs) !== null) continue;
    const left = sub(ad.free, req.resources);
    const k: Keyed = { ad, cached: ad.cachedImages.includes(req.imageDigest) ? 0 : 1, hb: -(ad.heartbeatAtMs ?? 0), mem: left.memoryMiB, cpu: left.cpuMillis, tie: tieBreak(req.allocationId, ad.hostId) };
    if (best.length >= limit && compare(k, best[best.length - 1]!) >= 0) continue;
    let i = best.length;
    while (i > 0 && compare(k, best[i - 1]!) < 0) i--;
    best.splice(i, 0, k);
    if (best.length > limit) best.pop();
  }
  return best.map((k) => k.ad);
}
