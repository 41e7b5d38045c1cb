/**
 * The host directory: a rebuildable cache of Host advertisements used to
 * choose candidates (spec "Placement: choosing a host"). Not an authority:
 * a stale entry can only cause a rejected reservation.
 * Must never: let an older revision overwrite a newer one.
 */
import { AuthorityObject } from "../runtime/objectRuntime.ts";
import { rankCandidates, supersedes, type Advertisement, type PlacementRequest } from "../../domain/placement.ts";
import { sub } from "../../domain/capacity.ts";

/** Advertisements older than this are dropped, ms (spec: 24 hours). */
export const AD_MAX_AGE_MS = 24 * 3600_000;
/** Most candidates returned for one placement round. */
export const MAX_CANDIDATES = 8;

/** See the module header. */
export class HostDirectoryObject extends AuthorityObject {
  static readonly className = "HostDirectory";
  private cache: Map<string, Advertisement> | undefined;

  constructor(ctx: ConstructorParameters<typeof AuthorityObject>[0]) {
    super(ctx);
    ctx.sql.exec("CREATE TABLE IF NOT EXISTS ads (host_id TEXT PRIMARY KEY, revision INTEGER NOT NULL, ad_json TEXT NOT NULL, received_at_ms INTEGER NOT NULL)");
  }

  private ads(): Map<string, Advertisement> {
    if (!this.cache) {
      this.cache = new Map();
      for (const r of this.ctx.sql.query<{ ad_json: string }, []>("SELECT ad_json FROM ads").all()) {
        const ad = JSON.parse(r.ad_json) as Advertisement;
        this.cache.set(ad.hostId, ad);
      }
    }
    return this.cache;
  }

  override onInbox(): void {
    const msgs = this.ctx.readInbox();
    if (msgs.length === 0) return;
    const now = this.ctx.clock.now();
    this.ctx.sql.transaction(() => {
      for (const m of msgs) {
        if (m.kind !== "advertisement") continue;
        const ad = m.body as Advertisement;
        if (!supersedes(this.ads().get(ad.hostId), ad)) continue;
        this.ctx.sql
          .query("INSERT INTO ads (host_id, revision, ad_json, received_at_ms) VALUES (?, ?, ?, ?) ON CONFLICT(host_id) DO UPDATE SET revision = excluded.revision, ad_json = excluded.ad_json, received_at_ms = excluded.received_at_ms WHERE excluded.revision > ads.revision")
          .run(ad.hostId, ad.revision, JSON.stringify(ad), now);
        this.ads().set(ad.hostId, ad);
      }
      this.ctx.ackInbox(msgs[msgs.length - 1]!.seq);
    })();
  }

  /**
   * Ranked candidate host IDs for a request (at most MAX_CANDIDATES). The
   * first candidate's cached hint is debited by the request, in memory only,
   * so concurrent requests spread instead of all trying the same host; the
   * host's next advertisement replaces the guess.
   */
  candidates(req: PlacementRequest): string[] {
    this.onInbox();
    const ranked = rankCandidates(this.ads().values(), req, this.ctx.clock.now(), MAX_CANDIDATES);
    const first = ranked[0];
    if (first) this.ads().set(first.hostId, { ...first, free: sub(first.free, req.resources) });
    return ranked.map((a) => a.hostId);
  }
}
