/**
 * Candidate selection (spec "Placement: choosing a host"): filter the
 * directory's advertisements, then sort by the five keys in order. Pure.
 * The Host object rechecks everything; this only picks whom to ask first.
 */
import { healthFromHeartbeat } from "./health.ts";
import { fits, type Resources } from "./capacity.ts";

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
  /**
   * The one host the VM may run on (issue 21, "Fork": a fork restores its
   * parent's snapshot, which lives on the parent's host); others are
   * filtered out with HOST_NOT_ALLOWED. Absent: any host.
   */
  onlyHost?: string;
}

/** True if a newer advertisement `next` may replace `prev`. */
export function supersedes(prev: Advertisement | undefined, next: Advertisement): boolean {
  return prev === undefined || next.revision > prev.revision;
}

/** Reasons that describe the host (it takes no reservations now), as opposed to the request not fitting it. */
const HOST_CONDITION_REASONS: ReadonlySet<string> = new Set([
  "HOST_NOT_ACTIVE",
  "HOST_NOT_HEALTHY",
  "ISOLATION_UNHEALTHY",
  "OVERLAPPING_AGENT_SESSION",
  "INVENTORY_MISMATCH",
  "CLOCK_SKEW",
  "VOLUMES_NEARLY_FULL",
]);

/** True if a filter reason says the host is unschedulable (rather than that the request does not fit it). */
export function isHostCondition(reason: string): boolean {
  return HOST_CONDITION_REASONS.has(reason);
}

/** The major part of a protocol version ("1.0" → "1"). */
function major(v: string): string {
  const dot = v.indexOf(".");
  return dot < 0 ? v : v.slice(0, dot);
}

/** True if version `v` has the major part `m` (no allocation: this runs for every host of every placement round). */
function hasMajor(v: string, m: string): boolean {
  return v.startsWith(m) && (v.length === m.length || v.charCodeAt(m.length) === 46);
}

/** A request with what every filter check needs precomputed once. */
interface Compiled {
  req: PlacementRequest;
  labels: [string, string][];
  major: string;
}

function compile(req: PlacementRequest): Compiled {
  return { req, labels: Object.entries(req.requiredLabels), major: major(req.agentProtocolVersion) };
}

function reasonOf(ad: Advertisement, c: Compiled, nowMs: number): string | null {
  const req = c.req;
  if (req.exclude.has(ad.hostId)) return "ALREADY_TRIED";
  if (req.onlyHost !== undefined && ad.hostId !== req.onlyHost) return "HOST_NOT_ALLOWED";
  if (ad.adminState !== "active") return "HOST_NOT_ACTIVE";
  if (healthFromHeartbeat(ad.heartbeatAtMs, nowMs) !== "healthy") return "HOST_NOT_HEALTHY";
  if (ad.architecture !== req.architecture) return "ARCHITECTURE_MISMATCH";
  if (req.regions && !req.regions.includes(ad.region)) return "REGION_NOT_ALLOWED";
  for (const [k, v] of c.labels) if (ad.labels[k] !== v) return "LABEL_MISSING";
  if (!hasMajor(ad.agentProtocolVersion, c.major)) return "PROTOCOL_INCOMPATIBLE";
  if (!ad.isolationHealthy) return "ISOLATION_UNHEALTHY";
  if (ad.unschedulable.length > 0) return ad.unschedulable[0]!;
  return fits(ad.free, req.resources);
}

/** Why a host was filtered out, or null if it passes every check. */
export function filterReason(ad: Advertisement, req: PlacementRequest, nowMs: number): string | null {
  return reasonOf(ad, compile(req), nowMs);
}

/** Why no host took a request: hosts considered, and per-reason counts split into request misfits and host conditions. */
export interface NoCandidateExplanation {
  hostsConsidered: number;
  noFit: Record<string, number>;
  unschedulable: Record<string, number>;
}

/** Counts, over every advertisement, why it was filtered out for `req` (issue "Pending is unexplained"). */
export function explainNoCandidate(
  ads: Iterable<Advertisement>,
  req: PlacementRequest,
  nowMs: number,
): NoCandidateExplanation {
  const c = compile(req);
  const out: NoCandidateExplanation = { hostsConsidered: 0, noFit: {}, unschedulable: {} };
  for (const ad of ads) {
    out.hostsConsidered++;
    const why = reasonOf(ad, c, nowMs);
    if (why === null) continue;
    const bucket = isHostCondition(why) ? out.unschedulable : out.noFit;
    bucket[why] = (bucket[why] ?? 0) + 1;
  }
  return out;
}

/** FNV-1a state after `allocationId` NUL (the part of the tie-breaker shared by every host of one ranking). */
function fnvPrefix(allocationId: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < allocationId.length; i++) h = Math.imul(h ^ allocationId.charCodeAt(i), 0x01000193) >>> 0;
  return Math.imul(h, 0x01000193) >>> 0;
}

/** FNV-1a continued from `prefix` over `hostId`. */
function fnvHost(prefix: number, hostId: string): number {
  let h = prefix;
  for (let i = 0; i < hostId.length; i++) h = Math.imul(h ^ hostId.charCodeAt(i), 0x01000193) >>> 0;
  return h;
}

/** Stable tie-breaker: 32-bit FNV-1a of allocationId NUL hostId (any stable hash serves; this one is cheap). */
export function tieBreak(allocationId: string, hostId: string): number {
  return fnvHost(fnvPrefix(allocationId), hostId);
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
export function rankCandidates(
  ads: Iterable<Advertisement>,
  req: PlacementRequest,
  nowMs: number,
  limit = Number.POSITIVE_INFINITY,
): Advertisement[] {
  const c = compile(req);
  const prefix = fnvPrefix(req.allocationId);
  const best: Keyed[] = [];
  const want = req.imageDigest;
  const memReq = req.resources.memoryMiB;
  const cpuReq = req.resources.cpuMillis;
  for (const ad of ads) {
    // Keys in locals first: most hosts lose to the current last pick and never allocate anything.
    const cached = ad.cachedImages.length > 0 && ad.cachedImages.includes(want) ? 0 : 1;
    const hb = -(ad.heartbeatAtMs ?? 0);
    const mem = ad.free.memoryMiB - memReq;
    const cpu = ad.free.cpuMillis - cpuReq;
    let tie = -1;
    // Ranking before filtering: a host that cannot beat the current last pick is never filtered at all.
    if (best.length >= limit) {
      const last = best[best.length - 1]!;
      const d = cached - last.cached || hb - last.hb || mem - last.mem || cpu - last.cpu;
      if (d > 0) continue;
      if (d === 0) {
        tie = fnvHost(prefix, ad.hostId);
        if (tie >= last.tie) continue;
      }
    }
    if (reasonOf(ad, c, nowMs) !== null) continue;
    const k: Keyed = { ad, cached, hb, mem, cpu, tie: tie < 0 ? fnvHost(prefix, ad.hostId) : tie };
    let i = best.length;
    while (i > 0 && compare(k, best[i - 1]!) < 0) i--;
    best.splice(i, 0, k);
    if (best.length > limit) best.pop();
  }
  return best.map((k) => k.ad);
}
