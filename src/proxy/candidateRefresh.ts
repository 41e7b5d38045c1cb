/**
 * `bb proxy`'s candidates, kept fresh (spec "Data path" step 4: "publishes
 * its own local and STUN-discovered candidates to the Connection object"):
 * gathered on the tunnel's own socket (src/wireguard/candidates.ts: the
 * interface addresses, and the public mapping each of the deployment's STUN
 * servers sees, so the mapping is the one WireGuard uses), posted at start,
 * then gathered again every CANDIDATE_REFRESH_MS (the host's cadence) while
 * no direct path is confirmed, and posted again only when the list changed
 * (a NAT that rebinds the mapping, an interface that comes up).
 *
 * Driven by the tunnel's one alarm (deadlineMs and tick, see
 * src/proxy/tunnel.ts addOwner); the clock, the gathering and the post are
 * ports, so tests fake them.
 * Owns: the sequence numbers of the proxy's candidate messages and their
 * bound (MAX_CANDIDATE_POSTS, like the scheduler's per-grant cap on client
 * candidate updates). Must never: run two gatherings at once, post an
 * unchanged list, post more than MAX_CANDIDATE_POSTS times, or reject.
 */
import type { Clock } from "../protocol/clock.ts";
import type { Candidate } from "../protocol/connection.ts";
import { CANDIDATE_REFRESH_MS } from "../wireguard/index.ts";

/** Most candidate lists one run posts (the scheduler forwards at most 16 updates per grant to the host). */
export const MAX_CANDIDATE_POSTS = 16;

/** The ports of a CandidateRefresh. */
export interface CandidateRefreshOptions {
  /** Gathers the current list (src/wireguard/candidates.ts gatherCandidates on the tunnel's socket). Must not reject. */
  gather(): Promise<Candidate[]>;
  /** Posts a list as the client's message `seq` (src/proxy/rendezvous.ts announceCandidates). */
  post(seq: number, candidates: Candidate[]): Promise<unknown>;
  /** True while the tunnel has a pinned direct path (then nothing is gathered). */
  directConfirmed(): boolean;
  /** Spaces the refreshes (its monoMs). */
  clock: Clock;
  /** Progress lines. */
  log(line: string): void;
}

/** The refresher of one run. */
export class CandidateRefresh {
  private nextMs: number;
  private running: Promise<void> | null = null;
  private postedJson: string | null = null;
  private seq = 0;
  private closed = false;
  private capLogged = false;

  constructor(private readonly o: CandidateRefreshOptions) {
    this.nextMs = o.clock.monoMs() + CANDIDATE_REFRESH_MS;
  }

  /** Messages posted (or attempted) so far: the last sequence number used. */
  get posts(): number {
    return this.seq;
  }

  /** When tick() next has work, monotonic ms (null once closed). */
  deadlineMs(): number | null {
    return this.closed ? null : this.nextMs;
  }

  /** Called at each alarm: once the refresh period passed, gathers and posts again unless a direct path is confirmed. */
  tick(): void {
    if (this.closed) return;
    const now = this.o.clock.monoMs();
    if (now < this.nextMs) return;
    this.nextMs = now + CANDIDATE_REFRESH_MS;
    if (!this.o.directConfirmed()) void this.refresh();
  }

  /** Gathers now and posts the list when it changed (an empty first list is not posted). Joins a gathering already under way. Never rejects. */
  refresh(): Promise<void> {
    if (this.closed) return Promise.resolve();
    if (!this.running) this.running = this.run().finally(() => (this.running = null));
    return this.running;
  }

  private async run(): Promise<void> {
    const list = await this.o.gather().catch(() => [] as Candidate[]);
    const json = JSON.stringify(list);
    if (this.closed || json === this.postedJson || (this.postedJson === null && list.length === 0)) return;
    if (this.seq >= MAX_CANDIDATE_POSTS) {
      if (!this.capLogged)
        this.o.log(
          `candidates changed again after ${MAX_CANDIDATE_POSTS} posts; not posting more (the host still learns this proxy when it hears from it)`,
        );
      this.capLogged = true;
      return;
    }
    const seq = ++this.seq;
    try {
      await this.o.post(seq, list);
      this.postedJson = json;
      const stun = list.filter((c) => c.kind === "stun").length;
      this.o.log(
        `posted ${list.length} candidate${list.length === 1 ? "" : "s"} to the rendezvous (${stun} from STUN)`,
      );
    } catch (e) {
      // Retried at the next refresh under a new sequence number.
      this.o.log(
        `could not post candidates to the rendezvous (${(e as Error).message}); the host learns this proxy when it first hears from it`,
      );
    }
  }

  /** Resolves once the gathering under way (if any) finished. Never rejects. */
  settled(): Promise<void> {
    return this.running ?? Promise.resolve();
  }

  /** Stops: no more gathering or posting. Idempotent. */
  close(): void {
    this.closed = true;
  }
}
