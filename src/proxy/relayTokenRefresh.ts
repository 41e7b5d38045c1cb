/**
 * Fresh relay tokens for `bb proxy`'s grant (spec "Packet relays": "a
 * short-lived signed relay token"): a relay token lives minutes (the
 * manifest's relayTokenTtlSeconds, at most 300 s) while a grant lives up to
 * an hour, so a relay session that drops after its token expired could not
 * reconnect (src/wireguard/relaySessions.ts stops a session on a refusal
 * "until a fresh token arrives"). Two thirds into the earliest current
 * token's lifetime this asks the scheduler for new ones
 * (POST /v1/connections/{id}/relay-tokens under the grant's endpoint token),
 * verifies each exactly as the grant response's (signed by a configured
 * key, this relay, this grant, the client role, fresh), and hands them to
 * the tunnel, which re-tokens its sessions (a stopped one starts again).
 *
 * Driven by the tunnel's one alarm (deadlineMs and tick,
 * src/proxy/tunnel.ts); the clocks and the fetch are ports, so tests fake
 * them. Bounds: one request at a time; after a failure, the next no sooner
 * than RELAY_TOKEN_RETRY_MS later (so at most one per 15 s over a grant's
 * hour); none once the tokens reach the grant's expiry; none after the
 * scheduler says the grant ended (UNAUTHENTICATED).
 * Must never: use a token that failed its check, log a token, or reject.
 */
import type { Clock } from "../protocol/clock.ts";
import type { ConnectionRelayTokensResponse } from "../protocol/connection.ts";
import { checkSignedRelayToken, type ConnectionVerificationKeys } from "../protocol/connectionSignature.ts";
import { BeachballError } from "../protocol/errors.ts";
import type { VerifiedGrant } from "./grant.ts";

/** How far into a token's lifetime it is replaced (fraction; 2/3 of 120 s leaves 40 s for retries). */
export const RELAY_TOKEN_REFRESH_FRACTION = 2 / 3;
/** Wait after a failed refresh before the next attempt, ms (above the scheduler's 10 s minimum interval). */
export const RELAY_TOKEN_RETRY_MS = 15_000;

/** The ports of a RelayTokenRefresh. */
export interface RelayTokenRefreshOptions {
  grant: Pick<VerifiedGrant, "grant" | "relays">;
  keys: ConnectionVerificationKeys;
  /** Asks the scheduler for fresh tokens (src/proxy/rendezvous.ts fetchRelayTokens). */
  fetch(): Promise<ConnectionRelayTokensResponse>;
  /** Hands verified relays with their fresh tokens to the tunnel (ClientTunnel.setRelayTokens). */
  apply(relays: VerifiedGrant["relays"]): void;
  /** wallMs for the tokens (they carry wall-clock times), monoMs for the alarm's deadline. */
  clock: Clock;
  log(line: string): void;
  /** Called when a refresh finished (the owner re-arms its alarm: the deadline moved). */
  onSettled?(): void;
}

/** The refresher of one run. */
export class RelayTokenRefresh {
  private relays: VerifiedGrant["relays"];
  /** Relays the last answer carried no token for: their old tokens stay in use but no longer set the schedule. */
  private readonly unissued = new Set<string>();
  private retryAtWallMs = 0;
  private running: Promise<void> | null = null;
  private stopped = false;
  /** Successful refreshes so far. */
  refreshes = 0;

  constructor(private readonly o: RelayTokenRefreshOptions) {
    this.relays = [...o.grant.relays];
  }

  /**
   * When the next refresh is due, wall-clock ms, or null when none will be
   * (no relays the scheduler still issues tokens for, the tokens reach the
   * grant's end, stopped). A relay the last answer left out does not count:
   * asking again would not renew its token, and its past due time would
   * make every alarm ask.
   */
  dueWallMs(): number | null {
    const issued = this.relays.filter((r) => !this.unissued.has(r.entry.relayId));
    if (this.stopped || issued.length === 0) return null;
    const earliest = issued.reduce((a, r) => (r.token.payload.expiresAtMs < a.token.payload.expiresAtMs ? r : a)).token
      .payload;
    if (earliest.expiresAtMs >= this.o.grant.grant.expiresAtMs) return null;
    const due =
      earliest.issuedAtMs + Math.floor((earliest.expiresAtMs - earliest.issuedAtMs) * RELAY_TOKEN_REFRESH_FRACTION);
    return Math.max(due, this.retryAtWallMs);
  }

  /** The next deadline on the monotonic clock (for the tunnel's alarm), or null (also while a refresh is under way: onSettled re-arms). */
  deadlineMs(): number | null {
    if (this.running) return null;
    const due = this.dueWallMs();
    return due === null ? null : this.o.clock.monoMs() + Math.max(0, due - this.o.clock.wallMs());
  }

  /** Called at each alarm: starts a refresh when one is due. */
  tick(): void {
    const due = this.dueWallMs();
    if (due !== null && this.o.clock.wallMs() >= due) void this.refresh();
  }

  /** Resolves once the refresh under way (if any) finished. Never rejects. */
  settled(): Promise<void> {
    return this.running ?? Promise.resolve();
  }

  /** Refreshes now (joins one under way). Never rejects. */
  refresh(): Promise<void> {
    if (this.stopped) return Promise.resolve();
    if (!this.running)
      this.running = this.run().finally(() => {
        this.running = null;
        this.o.onSettled?.();
      });
    return this.running;
  }

  private async run(): Promise<void> {
    const g = this.o.grant.grant;
    try {
      const resp = await this.o.fetch();
      if (this.stopped) return;
      const now = this.o.clock.wallMs();
      if (resp.grantId !== g.grantId)
        throw new BeachballError("GRANT_MISMATCH", "the relay tokens are for another grant");
      const tokens: unknown = resp.relayTokens;
      if (typeof tokens !== "object" || tokens === null || Array.isArray(tokens))
        throw new BeachballError("GRANT_MISMATCH", "the relay-token answer carries no map of relay tokens");
      const next = this.relays.map((r) => {
        const token = Object.hasOwn(tokens, r.entry.relayId)
          ? (tokens as Record<string, ConnectionRelayTokensResponse["relayTokens"][string]>)[r.entry.relayId]
          : undefined;
        if (token === undefined) return r; // the deployment no longer lists it: keep the old token until it expires
        const c = checkSignedRelayToken(
          token,
          this.o.keys,
          { relayId: r.entry.relayId, grantId: g.grantId, role: "client" },
          now,
        );
        if (!c.ok) throw new BeachballError(c.code, c.reason);
        return { entry: r.entry, token };
      });
      this.relays = next;
      this.unissued.clear();
      for (const r of this.relays) if (!Object.hasOwn(tokens, r.entry.relayId)) this.unissued.add(r.entry.relayId);
      this.retryAtWallMs = 0;
      this.refreshes++;
      this.o.apply(next);
      const until = Math.min(...next.map((r) => r.token.payload.expiresAtMs));
      this.o.log(`relay tokens refreshed (valid until ${new Date(until).toISOString()})`);
    } catch (e) {
      if (this.stopped) return;
      if (e instanceof BeachballError && e.code === "UNAUTHENTICATED") {
        this.stopped = true;
        this.o.log("relay tokens: the scheduler says the grant has ended; not refreshing them again");
        return;
      }
      this.retryAtWallMs = this.o.clock.wallMs() + RELAY_TOKEN_RETRY_MS;
      const code = e instanceof BeachballError ? e.code : (e as Error).message;
      this.o.log(`relay tokens: refresh failed (${code}); retrying in ${RELAY_TOKEN_RETRY_MS / 1000} s`);
    }
  }

  /** Stops: no more requests. Idempotent. */
  close(): void {
    this.stopped = true;
  }
}
