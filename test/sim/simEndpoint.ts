/**
 * A stand-in for the host endpoint in the fencing simulation (the agent on
 * main does not run one yet; src/agent/endpoint does on the proxy branch):
 * it reports a connectivity_update with every envelope, applies and revokes
 * grants exactly as configure_connection tells it (deliberately without the
 * real endpoint's own generation check, so only the scheduler's fencing
 * keeps the invariant), acknowledges each command every time it arrives,
 * drops a grant at its expiry by its host's (possibly skewed) clock, and
 * loses everything when its agent process dies. The invariant it serves:
 * one allocation's private address is never routed through two hosts (or
 * two generations) at once (spec "Revocation and replacement").
 */
import type { CommandAck, ConnectivityUpdate, PollResponse } from "../../src/protocol/agent.ts";
import type { Clock } from "../../src/protocol/clock.ts";

/** A grant as the endpoint holds it. */
interface Held {
  allocationId: string;
  generation: number;
  expiresAtMs: number;
}

/** Most acknowledgements added to one envelope. */
const MAX_ACKS_PER_ENVELOPE = 16;
/** Revoked grant IDs remembered. */
const MAX_REMEMBERED_REVOCATIONS = 1024;

/** See the module header. */
export class SimEndpoint {
  private readonly held = new Map<string, Held>();
  /** Grants revoked here, remembered so a late apply cannot bring one back (as the real endpoint does). */
  private readonly revoked = new Set<string>();
  private acks: CommandAck[] = [];
  private seq = 0;
  /** The agent session its connectivity_update last went out in. */
  private reportedIn = "";
  readonly publicKey: string;

  constructor(
    readonly hostId: string,
    private readonly clock: Clock,
    keyByte: number,
  ) {
    this.publicKey = Buffer.alloc(32, keyByte).toString("base64");
  }

  /**
   * What the endpoint adds to an outgoing envelope of agent session
   * `epoch`: its connectivity_update when the session is new to it (its
   * key and candidates never change here), and pending acknowledgements.
   */
  outgoing(epoch: string): { connectivity?: ConnectivityUpdate; acks: CommandAck[] } {
    const acks = this.acks.splice(0, MAX_ACKS_PER_ENVELOPE);
    if (epoch !== "" && epoch === this.reportedIn) return { acks };
    this.reportedIn = epoch;
    const connectivity: ConnectivityUpdate = {
      seq: ++this.seq,
      hostPublicKey: this.publicKey,
      candidates: [{ address: "192.0.2.1", port: 51820, kind: "local" }],
      appliedGrants: [],
      refusedGrants: [],
      at: new Date(this.clock.wallMs()).toISOString(),
    };
    return { connectivity, acks };
  }

  /** Applies the configure_connection commands of a poll response the agent received. */
  receive(resp: PollResponse): void {
    for (const c of resp.connections ?? []) {
      if (c.action === "revoke") {
        this.held.delete(c.grantId);
        this.revoked.add(c.grantId);
        if (this.revoked.size > MAX_REMEMBERED_REVOCATIONS) this.revoked.delete(this.revoked.values().next().value!);
      } else if (c.grant && !this.revoked.has(c.grantId) && c.grant.payload.expiresAtMs > this.clock.wallMs())
        this.held.set(c.grantId, {
          allocationId: c.grant.payload.allocationId,
          generation: c.grant.payload.generation,
          expiresAtMs: c.grant.payload.expiresAtMs,
        });
      this.acks.push({ commandId: c.commandId, result: "accepted" });
    }
  }

  /** The agent process died: its peers are gone, and nothing it meant to acknowledge was sent. */
  lose(): void {
    this.held.clear();
    this.revoked.clear();
    this.acks = [];
    this.seq = 0;
    this.reportedIn = "";
  }

  /** Grants applied now (expired ones dropped first), as `allocationId → generation`. */
  applied(): Map<string, number[]> {
    const now = this.clock.wallMs();
    const out = new Map<string, number[]>();
    for (const [id, g] of this.held) {
      if (g.expiresAtMs <= now) {
        this.held.delete(id);
        continue;
      }
      out.set(g.allocationId, [...(out.get(g.allocationId) ?? []), g.generation]);
    }
    return out;
  }
}
