/**
 * TEST SUPPORT, not a product path: a stand-in for the scheduler's side of
 * private networking until it exists on main (issue 11 item 1). It serves,
 * over HTTP with one bearer token:
 *   POST   /v1/allocations/{id}/connection-grants          a grant signed by TestGrantIssuer
 *                                                          (body per ConnectionGrantBody; 404 NOT_FOUND,
 *                                                          409 INVALID_STATE for a released allocation)
 *   DELETE /v1/allocations/{id}/connection-grants/{grant}  revocation (204)
 *   GET    /v1/allocations/{id}                            a minimal AllocationView (state, generation, host)
 *   POST   /v1/connections/{id}/messages                   the client's rendezvous messages, under the
 *                                                          grant's endpoint token: its newest candidates
 *                                                          are recorded and go to the host in an apply
 *                                                          redelivery (as the scheduler's Host object does)
 *   POST   /v1/connections/{id}/relay-tokens               fresh client relay tokens for the grant, under
 *                                                          its endpoint token (never past the grant)
 * and, for the test and the host endpoint harness (no authentication; loopback or
 * test namespaces only):
 *   POST /test/allocations/{id}   {state?, generation?, hostId?, allocationAddress?}
 *   POST /test/next-grant         {tamper?: true, ttlMs?: number, generation?: number, relays?: true,
 *                                 clientRelayTokenTtlMs?: number}
 *                                 (applies to the next grant only; relays: the grant's relay map lists
 *                                 the configured relays, the host's apply carries host-role tokens and
 *                                 the response client-role tokens)
 *   POST /test/host/connectivity  {hostId, hostPublicKey, candidates, appliedGrants?, refusedGrants?}
 *                                 (connectivity_update stand-in; a grant is answered once the host
 *                                 reported it applied or refused, or after 5 s)
 *   GET  /test/host/commands?after=N   → {commands: [{seq, command}]}  (configure_connection queue)
 *   GET  /test/grants             → every grant issued
 * Grant responses list the configured STUN servers (`stunServers`, as the manifest's).
 * Run as a process: `bun grantIssuerServer.ts '{"hostname","port","token","seed","keyId","relays"?,"stunServers"?}'`, prints
 * {"ev":"ready","port"}, takes control lines on stdin (see the bottom of this file) and exits
 * when stdin closes.
 * Must never: be imported by src/, or listen outside loopback or a test namespace.
 */
import { randomBytes } from "node:crypto";
import { Value } from "@sinclair/typebox/value";
import type { ConfigureConnection } from "../../src/protocol/agent.ts";
import {
  ConnectionGrantBody,
  ConnectionMessagesBody,
  type Candidate,
  type ConnectionGrantResponse,
  type RelayEntry,
  type SignedGrant,
  type SignedRelayToken,
} from "../../src/protocol/connection.ts";
import { problem } from "../../src/protocol/problem.ts";
import { TestGrantIssuer, testId } from "./grantIssuer.ts";
import { stdinCommands } from "./stdinLines.ts";

/** One allocation the stand-in knows. */
export interface TestAllocation {
  state: "ready" | "released" | "failed";
  generation: number;
  hostId: string;
  allocationAddress: string;
}

/** The stand-in's state (tests in the same process read and change it directly). */
export class IssuerState {
  readonly allocations = new Map<string, TestAllocation>();
  readonly hosts = new Map<string, { hostPublicKey: string; candidates: Candidate[] }>();
  readonly commands: Array<{ seq: number; command: ConfigureConnection }> = [];
  readonly grants: SignedGrant[] = [];
  /** How the next grant is made: tampered after signing, a lifetime, another generation, or with a client relay token that names another grant. */
  next: {
    tamper?: boolean;
    ttlMs?: number;
    generation?: number;
    relayTokenForAnotherGrant?: boolean;
    relays?: boolean;
    clientRelayTokenTtlMs?: number;
  } = {};
  /** The client-role relay tokens each grant's response carried, by grant ID then relay ID. */
  readonly clientRelayTokens = new Map<string, Record<string, SignedRelayToken>>();
  /** Each grant's Connection: its client endpoint token, the grant, the last accepted sequence number; by connection ID. */
  readonly connections = new Map<
    string,
    { endpointToken: string; grant: SignedGrant; lastSeq: number; relays: RelayEntry[]; clientRelayTokenTtlMs: number }
  >();
  /** The newest candidates each grant's client posted, by grant ID. */
  readonly clientCandidates = new Map<string, Candidate[]>();
  /** STUN servers grant responses list ("IPv4:PORT"). */
  stunServers: string[] = [];
  /** Grant IDs the host reported applied or refused (connectivity_update stand-in). */
  readonly settled = new Set<string>();
  private clientCounter = 0x10;

  /** The relays a grant asked for with `relays` lists in its relay map. */
  constructor(
    readonly issuer: TestGrantIssuer,
    readonly relays: RelayEntry[] = [],
  ) {}

  /** The next client address in the allocation's /64. */
  clientAddressFor(allocationAddress: string): string {
    const prefix = allocationAddress.split("::")[0]!;
    return `${prefix}::c:${(this.clientCounter++).toString(16)}`;
  }

  push(command: ConfigureConnection): void {
    this.commands.push({ seq: this.commands.length + 1, command });
  }

  /** Records a host's report of the grants it holds and refused. */
  report(applied: readonly string[], refused: readonly string[]): void {
    for (const id of [...applied, ...refused]) this.settled.add(id);
  }

  /**
   * Waits until the host reported `grantId` applied or refused, up to `ms`.
   * The grant is answered only then: a client's first handshake initiation
   * that arrives before the host holds the peer is dropped, and WireGuard
   * retries only after REKEY_TIMEOUT (5 s).
   */
  async waitSettled(grantId: string, ms: number): Promise<void> {
    for (let t = 0; t < ms && !this.settled.has(grantId); t += 10) await Bun.sleep(10);
  }
}

const json = (v: unknown, status = 200) =>
  new Response(JSON.stringify(v), { status, headers: { "content-type": "application/json" } });

/** Starts the server. */
export function startIssuerServer(o: { hostname: string; port: number; token: string; state: IssuerState }) {
  const s = o.state;
  return Bun.serve({
    hostname: o.hostname,
    port: o.port,
    async fetch(req) {
      const url = new URL(req.url);
      const parts = url.pathname.split("/").filter(Boolean);
      if (parts[0] === "test") return control(req, parts.slice(1), url);
      if (
        parts[0] === "v1" &&
        parts[1] === "connections" &&
        parts[2] &&
        parts[3] === "messages" &&
        req.method === "POST"
      )
        return messages(req, decodeURIComponent(parts[2]));
      if (
        parts[0] === "v1" &&
        parts[1] === "connections" &&
        parts[2] &&
        parts[3] === "relay-tokens" &&
        req.method === "POST"
      )
        return relayTokens(req, decodeURIComponent(parts[2]));
      if (req.headers.get("authorization") !== `Bearer ${o.token}`) return problem("UNAUTHENTICATED", "bad token");
      if (parts[0] !== "v1" || parts[1] !== "allocations" || !parts[2]) return problem("NOT_FOUND", "no such route");
      const id = decodeURIComponent(parts[2]);
      const a = s.allocations.get(id);
      if (!a) return problem("NOT_FOUND", `no allocation ${id}`);
      if (req.method === "GET" && parts.length === 3) {
        return json({ allocationId: id, state: a.state, generation: a.generation, hostId: a.hostId });
      }
      if (parts[3] !== "connection-grants") return problem("NOT_FOUND", "no such route");
      if (req.method === "DELETE" && parts[4]) {
        const grantId = decodeURIComponent(parts[4]);
        s.push({ commandId: `${grantId}:revoke`, type: "configure_connection", action: "revoke", grantId });
        return new Response(null, { status: 204 });
      }
      if (req.method !== "POST" || parts.length !== 4) return problem("METHOD_NOT_ALLOWED", "no such route");
      const body = await req.json().catch(() => null);
      if (!Value.Check(ConnectionGrantBody, body)) return problem("VALIDATION_FAILED", "bad grant request body");
      if (a.state !== "ready") return problem("INVALID_STATE", `allocation ${id} is ${a.state}`);
      const host = s.hosts.get(a.hostId);
      if (!host) return problem("GUEST_NOT_CONNECTED", `host ${a.hostId} has reported no connectivity yet`);
      const next = s.next;
      s.next = {};
      const now = Date.now();
      const ttlMs = next.ttlMs ?? (body.ttlSeconds ?? 600) * 1000;
      let grant = s.issuer.grant(
        {
          allocationId: id,
          generation: next.generation ?? a.generation,
          hostId: a.hostId,
          hostPublicKey: host.hostPublicKey,
          clientPublicKey: body.clientPublicKey,
          clientAddress: s.clientAddressFor(a.allocationAddress),
          allocationAddress: a.allocationAddress,
          transport: body.transport,
          ports: body.ports,
        },
        now,
        ttlMs,
      );
      if (next.tamper) grant = { ...grant, payload: { ...grant.payload, ports: [...grant.payload.ports, 1] } };
      s.grants.push(grant);
      const gid = grant.payload.grantId;
      // Without `relays`, a relay map with one unreachable entry exists only to carry a token for another grant.
      const relays = next.relays
        ? s.relays
        : next.relayTokenForAnotherGrant
          ? [{ relayId: "relay-1", url: "wss://relay.invalid/v1/relay" }]
          : [];
      const relayMap = s.issuer.relayMap(relays, now, ttlMs);
      const tokens = (role: "client" | "host", forGrant: string, ttl = 300_000) =>
        Object.fromEntries(relays.map((r) => [r.relayId, s.issuer.relayToken(r.relayId, forGrant, role, now, ttl)]));
      const clientRelayTokenTtlMs = next.clientRelayTokenTtlMs ?? 300_000;
      const clientTokens = tokens(
        "client",
        next.relayTokenForAnotherGrant ? testId("grt") : gid,
        clientRelayTokenTtlMs,
      );
      s.clientRelayTokens.set(gid, clientTokens);
      s.push({
        commandId: `${gid}:apply`,
        type: "configure_connection",
        action: "apply",
        grantId: gid,
        grant,
        ...(next.relays ? { relayMap, relayTokens: tokens("host", gid) } : {}),
      });
      await s.waitSettled(gid, 5_000);
      const resp: ConnectionGrantResponse = {
        grant,
        relayMap,
        relayTokens: clientTokens,
        connectionId: testId("conn"),
        endpointToken: randomBytes(24).toString("base64url"),
        hostCandidates: host.candidates,
        ...(s.stunServers.length ? { stunServers: s.stunServers } : {}),
      };
      s.connections.set(resp.connectionId, {
        endpointToken: resp.endpointToken,
        grant,
        lastSeq: 0,
        relays,
        clientRelayTokenTtlMs,
      });
      return json(resp, 201);
    },
  });

  /** The client's rendezvous messages: the newest fresh candidates list goes to the host with the grant's apply. */
  async function messages(req: Request, connectionId: string): Promise<Response> {
    const c = s.connections.get(connectionId);
    if (!c || req.headers.get("authorization") !== `Bearer ${c.endpointToken}`)
      return problem("UNAUTHENTICATED", "bad endpoint token");
    const body = await req.json().catch(() => null);
    if (!Value.Check(ConnectionMessagesBody, body)) return problem("VALIDATION_FAILED", "bad messages body");
    const fresh = body.messages.filter((m) => m.seq > c.lastSeq);
    const last = fresh.filter((m) => m.type === "candidates").pop();
    if (fresh.length) c.lastSeq = fresh[fresh.length - 1]!.seq;
    if (last?.type === "candidates") {
      const gid = c.grant.payload.grantId;
      s.clientCandidates.set(gid, last.candidates);
      s.push({
        commandId: `${gid}:apply`,
        type: "configure_connection",
        action: "apply",
        grantId: gid,
        grant: c.grant,
        clientCandidates: last.candidates,
      });
    }
    return json({
      role: "client",
      messages: [],
      lastAcceptedSeq: c.lastSeq,
      expiresAtMs: c.grant.payload.expiresAtMs,
      closed: false,
    });
  }

  /** Fresh client relay tokens for the Connection's grant (the scheduler's Connection mints them the same way). */
  function relayTokens(req: Request, connectionId: string): Response {
    const c = s.connections.get(connectionId);
    const now = Date.now();
    const expiresAtMs = c?.grant.payload.expiresAtMs ?? 0;
    if (!c || req.headers.get("authorization") !== `Bearer ${c.endpointToken}` || expiresAtMs <= now)
      return problem("UNAUTHENTICATED", "bad endpoint token, or the grant ended");
    const gid = c.grant.payload.grantId;
    const ttl = Math.min(c.clientRelayTokenTtlMs, expiresAtMs - now);
    return json({
      grantId: gid,
      role: "client",
      relayTokens: Object.fromEntries(
        c.relays.map((r) => [r.relayId, s.issuer.relayToken(r.relayId, gid, "client", now, ttl)]),
      ),
      expiresAtMs,
    });
  }

  async function control(req: Request, parts: string[], url: URL): Promise<Response> {
    if (req.method === "POST" && parts[0] === "allocations" && parts[1]) {
      const id = decodeURIComponent(parts[1]);
      const patch = (await req.json()) as Partial<TestAllocation>;
      const cur = s.allocations.get(id) ?? {
        state: "ready",
        generation: 1,
        hostId: "host-1",
        allocationAddress: "fd00:bb:1:2::2",
      };
      s.allocations.set(id, { ...cur, ...patch });
      return json(s.allocations.get(id));
    }
    if (req.method === "POST" && parts[0] === "next-grant") {
      s.next = (await req.json()) as IssuerState["next"];
      return json(s.next);
    }
    if (req.method === "POST" && parts[0] === "host" && parts[1] === "connectivity") {
      const c = (await req.json()) as {
        hostId: string;
        hostPublicKey: string;
        candidates: Candidate[];
        appliedGrants?: Array<{ grantId: string }>;
        refusedGrants?: Array<{ grantId: string }>;
      };
      s.hosts.set(c.hostId, { hostPublicKey: c.hostPublicKey, candidates: c.candidates });
      s.report(
        (c.appliedGrants ?? []).map((g) => g.grantId),
        (c.refusedGrants ?? []).map((g) => g.grantId),
      );
      return json({ ok: true });
    }
    if (req.method === "GET" && parts[0] === "host" && parts[1] === "commands") {
      const after = Number(url.searchParams.get("after") ?? 0);
      return json({ commands: s.commands.filter((c) => c.seq > after) });
    }
    if (req.method === "GET" && parts[0] === "grants") return json(s.grants);
    return problem("NOT_FOUND", "no such test route");
  }
}

if (import.meta.main) {
  const cfg = JSON.parse(process.argv[2]!) as {
    hostname: string;
    port: number;
    token: string;
    seed: string;
    keyId: string;
    relays?: RelayEntry[];
    stunServers?: string[];
  };
  const state = new IssuerState(new TestGrantIssuer(cfg.keyId, cfg.seed), cfg.relays ?? []);
  state.stunServers = cfg.stunServers ?? [];
  const server = startIssuerServer({ hostname: cfg.hostname, port: cfg.port, token: cfg.token, state });
  const emit = (o: object) => process.stdout.write(JSON.stringify(o) + "\n");
  emit({ ev: "ready", port: server.port });
  // Control from the test (which runs outside this namespace), one JSON object per stdin line:
  // {"op":"allocation","id",...TestAllocation fields} · {"op":"next-grant",...} · {"op":"grants"} ·
  // {"op":"client-relay-tokens","grantId"} → {"ev":"client-relay-tokens","tokens"} ·
  // {"op":"client-candidates","grantId"} → {"ev":"client-candidates","candidates"} (null: none posted).
  for await (const { op, id, ...rest } of stdinCommands<{ op: string; id?: string } & Record<string, unknown>>()) {
    if (op === "allocation" && id) {
      const cur = state.allocations.get(id) ?? {
        state: "ready",
        generation: 1,
        hostId: "host-1",
        allocationAddress: "fd00:bb:1:2::2",
      };
      state.allocations.set(id, { ...cur, ...(rest as Partial<TestAllocation>) });
      emit({ ev: "allocation", id, ...state.allocations.get(id) });
    } else if (op === "next-grant") {
      state.next = rest as IssuerState["next"];
      emit({ ev: "next-grant" });
    } else if (op === "grants") emit({ ev: "grants", grants: state.grants.map((g) => g.payload) });
    else if (op === "client-candidates")
      emit({ ev: "client-candidates", candidates: state.clientCandidates.get(String(rest["grantId"])) ?? null });
    else if (op === "client-relay-tokens")
      emit({ ev: "client-relay-tokens", tokens: state.clientRelayTokens.get(String(rest["grantId"])) ?? {} });
  }
  server.stop(true);
  process.exit(0);
}
