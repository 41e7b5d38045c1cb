/**
 * A Connection: the rendezvous point of one grant (spec "Coordination and
 * path selection"). The client and the host endpoint, each with its own
 * endpoint token (stored as SHA-256 digests), exchange candidates,
 * path_observation and ack messages through `POST …/poll` (long-poll) and
 * `POST …/messages`.
 *
 * Bounds: each role's messages carry its own strictly increasing sequence
 * numbers (an equal or lower one is a redelivery and is dropped); at most
 * MAX_CONNECTION_MESSAGES_PER_ROLE wait unacknowledged per role (more is
 * RATE_LIMITED, nothing written); each at most MAX_CONNECTION_MESSAGE_BYTES
 * of JSON. A poll's cursor acknowledges (deletes) the peer's messages up to
 * it, as does an `ack` message's `upTo`. The Connection ends with its grant:
 * at expiry (its alarm) or on revocation (`close`) it deletes every row.
 * Parked polls live in this instance's memory.
 * The client's newest `candidates` go on to the grant's Host, which hands
 * them to the host endpoint in configure_connection apply (the host never
 * calls the scheduler but through its control channel; it sends to them to
 * open its NAT towards the client: hole punching).
 * Relay tokens: either role may ask for fresh ones for the Connection's
 * grant (`relayTokens`; relay tokens live minutes, a grant up to an hour):
 * minted like the grant's own (src/scheduler/objects/grantDocuments.ts),
 * never past the grant, at most one per role per MIN_RELAY_TOKEN_REFRESH_MS
 * (remembered in memory: a restarted object admits one more at once).
 * Calls only Host (which calls nobody back).
 * Must never: store a private key, a raw token or a packet, keep anything
 * past its grant, or let one role read or acknowledge its own messages.
 */
import { and, asc, count, eq, gt, lte, sql } from "drizzle-orm";
import { param, placeholders, prepared, type ObjectDb } from "../runtime/drizzle.ts";
import { AuthorityObject, type ObjectState } from "../runtime/api.ts";
import { BeachballError } from "../../protocol/errors.ts";
import {
  MAX_CONNECTION_MESSAGE_BYTES,
  MAX_CONNECTION_MESSAGES_PER_ROLE,
  MAX_CONNECTION_POLL_WAIT_MS,
  MIN_RELAY_TOKEN_REFRESH_MS,
  type ConnectionMessage,
  type ConnectionPollResponse,
  type ConnectionRelayTokensResponse,
  type RelayRole,
} from "../../protocol/connection.ts";
import type { SchedulerEnv } from "../env.ts";
import { relayTokens } from "./grantDocuments.ts";
import { isPeerAddress } from "../../protocol/ipScope.ts";
import { CONNECTION_TABLES, connectionMessageTable, connectionTable } from "./networkSchema.ts";

/** Most polls parked per role at once (a reconnecting endpoint may briefly have two). */
export const MAX_PARKED_CONNECTION_POLLS = 4;

/** What opens a Connection (from the Network that issued the grant). */
export interface OpenConnection {
  grantId: string;
  expiresAtMs: number;
  clientTokenDigest: string;
  hostTokenDigest: string;
  /** The host the grant names. */
  hostId: string;
}

/** The Connection's row (./networkSchema.ts). */
type Row = typeof connectionTable.$inferSelect;

const queries = (db: ObjectDb) => {
  const obj = sql.placeholder("obj");
  const c = connectionTable;
  const m = connectionMessageTable;
  const ofRole = and(eq(m.obj, obj), eq(m.role, sql.placeholder("role")));
  return {
    row: db.select().from(c).where(eq(c.obj, obj)).prepare(),
    insert: db
      .insert(c)
      .values({
        obj,
        ...placeholders("grantId", "expiresAtMs", "clientTokenDigest", "hostTokenDigest", "hostId"),
        clientLastSeq: 0,
        hostLastSeq: 0,
      })
      .prepare(),
    setClientLastSeq: db
      .update(c)
      .set({ clientLastSeq: param<number>("seq") })
      .where(eq(c.obj, obj))
      .prepare(),
    setHostLastSeq: db
      .update(c)
      .set({ hostLastSeq: param<number>("seq") })
      .where(eq(c.obj, obj))
      .prepare(),
    /** Deletes `role`'s messages up to `seq` (acknowledged by the peer). */
    acknowledge: db
      .delete(m)
      .where(and(ofRole, lte(m.seq, sql.placeholder("seq"))))
      .prepare(),
    after: db
      .select({ bodyJson: m.bodyJson })
      .from(m)
      .where(and(ofRole, gt(m.seq, sql.placeholder("seq"))))
      .orderBy(asc(m.seq))
      .limit(MAX_CONNECTION_MESSAGES_PER_ROLE)
      .prepare(),
    stored: db.select({ n: count() }).from(m).where(ofRole).prepare(),
    insertMessage: db
      .insert(m)
      .values({
        obj,
        ...placeholders("role", "seq", "bodyJson"),
      })
      .prepare(),
  };
};

const peerOf = (role: RelayRole): RelayRole => (role === "client" ? "host" : "client");

/** See the module header. */
export class ConnectionObject extends AuthorityObject<SchedulerEnv, never> {
  static readonly className = "Connection";
  static readonly messageSchema = null;
  static readonly tables = CONNECTION_TABLES;

  /** Parked polls by the role that waits (woken by the other role's messages or the end). */
  private readonly parked: Record<RelayRole, Set<() => void>> = { client: new Set(), host: new Set() };
  private draining = false;
  /** When each role last got fresh relay tokens, clock ms (memory only). */
  private readonly lastRelayTokensMs: Record<RelayRole, number> = { client: -Infinity, host: -Infinity };
  /** Set by `close`: the rows go when the call ends, but nothing may be served from them meanwhile. */
  private ended = false;

  constructor(state: ObjectState<never>, env: SchedulerEnv) {
    super(state, env);
  }

  private readonly q = prepared(this.state.storage, queries);

  private get obj(): string {
    return this.state.name;
  }

  private row(): Row | null {
    return this.q.row.get({ obj: this.obj }) ?? null;
  }

  private live(): Row | null {
    if (this.ended) return null;
    const r = this.row();
    return r && r.expiresAtMs > this.env.clock.wallMs() ? r : null;
  }

  /** Opens the Connection for a new grant (idempotent for the same grant) and arms its end at expiry. */
  open(o: OpenConnection): void {
    const r = this.row();
    if (r) {
      if (r.grantId !== o.grantId) throw new BeachballError("INTERNAL", "connection ID reused for another grant");
      return;
    }
    this.state.storage.transactionSync(() => {
      this.q.insert.run({ obj: this.obj, ...o });
      this.state.setAlarm(o.expiresAtMs);
    });
  }

  /** The role whose endpoint token has digest `tokenDigest`, or null (unknown, ended or expired). */
  authenticate(tokenDigest: string): RelayRole | null {
    const r = this.live();
    if (!r) return null;
    if (r.clientTokenDigest === tokenDigest) return "client";
    if (r.hostTokenDigest === tokenDigest) return "host";
    return null;
  }

  private mustLive(): Row {
    const r = this.live();
    if (!r) throw new BeachballError("UNAUTHENTICATED", "the connection has ended (its grant expired or was revoked)");
    return r;
  }

  private answer(role: RelayRole, r: Row, messages: ConnectionMessage[], closed = false): ConnectionPollResponse {
    return {
      role,
      messages,
      lastAcceptedSeq: role === "client" ? r.clientLastSeq : r.hostLastSeq,
      expiresAtMs: r.expiresAtMs,
      closed,
    };
  }

  /** The peer's messages after `after` (acknowledging those up to it), oldest first. */
  private pending(role: RelayRole, after: number): ConnectionMessage[] {
    const peer = peerOf(role);
    this.q.acknowledge.run({ obj: this.obj, role: peer, seq: after });
    return this.q.after
      .all({ obj: this.obj, role: peer, seq: after })
      .map((m) => JSON.parse(m.bodyJson) as ConnectionMessage);
  }

  /**
   * A poll of `role` (authenticated by the caller): acknowledges the
   * peer's messages up to `after`, returns later ones, and with none parks
   * up to `waitMs` (≤ MAX_CONNECTION_POLL_WAIT_MS) for the peer to send.
   * Throws UNAUTHENTICATED once the Connection ended.
   */
  async poll(role: RelayRole, after: number, waitMs: number): Promise<ConnectionPollResponse> {
    const r = this.mustLive();
    const first = this.pending(role, after);
    const park = Math.min(waitMs, MAX_CONNECTION_POLL_WAIT_MS, r.expiresAtMs - this.env.clock.wallMs());
    if (first.length > 0 || park <= 0 || this.draining) return this.answer(role, r, first);
    await this.park(role, park);
    const now = this.live();
    if (!now) return this.answer(role, r, [], true);
    return this.answer(role, now, this.pending(role, after));
  }

  private park(role: RelayRole, ms: number): Promise<void> {
    const set = this.parked[role];
    if (set.size >= MAX_PARKED_CONNECTION_POLLS) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        set.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      set.add(done);
    });
  }

  private wake(role: RelayRole): void {
    for (const w of [...this.parked[role]]) w();
  }

  /**
   * Accepts `role`'s messages: redeliveries (sequence number not above the
   * last accepted) are dropped; an `ack` also acknowledges the peer's
   * messages up to its `upTo`. Throws VALIDATION_FAILED for a message over
   * MAX_CONNECTION_MESSAGE_BYTES or sequence numbers that do not increase
   * within the request, RATE_LIMITED when the role would hold more than
   * MAX_CONNECTION_MESSAGES_PER_ROLE unacknowledged (nothing is written in
   * either case), UNAUTHENTICATED once the Connection ended. The client's
   * newest accepted `candidates` go on to the grant's Host (see the module
   * header).
   */
  async messages(role: RelayRole, msgs: ConnectionMessage[]): Promise<ConnectionPollResponse> {
    const r = this.mustLive();
    const last = role === "client" ? r.clientLastSeq : r.hostLastSeq;
    let prev = 0;
    for (const m of msgs) {
      if (m.seq <= prev)
        throw new BeachballError("VALIDATION_FAILED", "message sequence numbers must increase within a request");
      prev = m.seq;
      if (JSON.stringify(m).length > MAX_CONNECTION_MESSAGE_BYTES)
        throw new BeachballError(
          "VALIDATION_FAILED",
          `a rendezvous message is larger than ${MAX_CONNECTION_MESSAGE_BYTES} bytes`,
        );
      // The peer sends to every candidate: one that names no single peer would reach the peer's own machine or its whole link.
      const bad = m.type === "candidates" ? m.candidates.findIndex((c) => !isPeerAddress(c.address)) : -1;
      if (bad >= 0)
        throw new BeachballError(
          "VALIDATION_FAILED",
          `candidate ${bad} of message ${m.seq} is not an address one peer can be reached at (unspecified, multicast, broadcast or not an IP)`,
        );
    }
    const fresh = msgs.filter((m) => m.seq > last);
    if (fresh.length === 0) return this.answer(role, r, []);
    const stored = this.q.stored.get({ obj: this.obj, role })!.n;
    if (stored + fresh.length > MAX_CONNECTION_MESSAGES_PER_ROLE) {
      throw new BeachballError(
        "RATE_LIMITED",
        `at most ${MAX_CONNECTION_MESSAGES_PER_ROLE} messages wait for the peer; poll for its acknowledgements first`,
        { retryAfterSeconds: 1 },
      );
    }
    const newLast = fresh[fresh.length - 1]!.seq;
    this.state.storage.transactionSync(() => {
      for (const m of fresh) {
        this.q.insertMessage.run({ obj: this.obj, role, seq: m.seq, bodyJson: JSON.stringify(m) });
        if (m.type === "ack") this.q.acknowledge.run({ obj: this.obj, role: peerOf(role), seq: m.upTo });
      }
      (role === "client" ? this.q.setClientLastSeq : this.q.setHostLastSeq).run({ obj: this.obj, seq: newLast });
    });
    this.wake(peerOf(role));
    const candidates = role === "client" ? fresh.filter((m) => m.type === "candidates").pop() : undefined;
    if (candidates?.type === "candidates" && r.hostId)
      await this.env.Host.get(r.hostId).clientCandidates(r.grantId, candidates.candidates);
    return this.answer(role, { ...r, [role === "client" ? "clientLastSeq" : "hostLastSeq"]: newLast }, []);
  }

  /**
   * Fresh relay tokens for `role` (authenticated by the caller) of this
   * Connection's grant: one per relay of the deployment, expiring after the
   * relay-token lifetime or with the grant. Throws UNAUTHENTICATED once the
   * Connection ended (the grant expired, was revoked, or its allocation was
   * replaced or released: each revokes it), RATE_LIMITED within
   * MIN_RELAY_TOKEN_REFRESH_MS of the role's last refresh, FORBIDDEN when
   * the deployment has no private networking.
   */
  relayTokens(role: RelayRole): ConnectionRelayTokensResponse {
    const r = this.mustLive();
    const settings = this.env.config.connections;
    const signer = this.env.signer;
    if (!settings || !signer)
      throw new BeachballError("FORBIDDEN", "private networking is not configured in this deployment's manifest");
    const now = this.env.clock.wallMs();
    const wait = this.lastRelayTokensMs[role] + MIN_RELAY_TOKEN_REFRESH_MS - now;
    if (wait > 0)
      throw new BeachballError(
        "RATE_LIMITED",
        `relay tokens are refreshed at most once per ${MIN_RELAY_TOKEN_REFRESH_MS / 1000} s`,
        { retryAfterSeconds: Math.ceil(wait / 1000) },
      );
    this.lastRelayTokensMs[role] = now;
    return {
      grantId: r.grantId,
      role,
      relayTokens: relayTokens(signer, settings, r.grantId, role, r.expiresAtMs, now),
      expiresAtMs: r.expiresAtMs,
    };
  }

  /** Ends the Connection now (its grant was revoked): every row goes, parked polls answer `closed`. Idempotent. */
  close(): void {
    this.ended = true;
    if (this.row()) this.state.deleteSelf();
    this.wake("client");
    this.wake("host");
  }

  /** At the grant's expiry the Connection deletes itself. */
  override alarm(): void {
    const r = this.row();
    if (!r) return;
    if (r.expiresAtMs > this.env.clock.wallMs()) return this.state.setAlarm(r.expiresAtMs);
    this.close();
  }

  /** Ends parked polls at once (the embedded host calls this before it stops). */
  override drain(): void {
    this.draining = true;
    this.wake("client");
    this.wake("host");
  }
}
