/**
 * A Host's agent session (spec "Sessions and epochs", "Messages", "The
 * agent protocol"): one envelope applied in one transaction (epoch
 * fencing, heartbeat, fact merge, alerts, placement updates, command and
 * delivery acks, connectivity, lease renewal, advertisement), and the
 * poll's answer: the work waiting for the agent, or a park until some
 * arrives. The rules are pure (src/domain/hostSession.ts, hostAlerts.ts);
 * this part loads, decides with them, and persists.
 * Must never: accept a message from an older epoch, or hand out a command
 * or delivery outside a poll response.
 */
import { BeachballError } from "../../protocol/errors.ts";
import { alertsAfterReport } from "../../domain/hostAlerts.ts";
import { isOverlappingSession, mergeFacts, sessionOpening, type AgentFacts } from "../../domain/hostSession.ts";
import { POLL_PARK_MS, type Envelope, type PollResponse, type UpdateRejection } from "../../protocol/agent.ts";
import { GLOBAL } from "../env.ts";
import type { HostContext } from "./hostContext.ts";
import type { DeliveryAck } from "./hostDeliveries.ts";
import { AD_REFRESH_MS, publish } from "./hostAdvertisement.ts";
import { applyUpdate, leases, pendingCommands, renewLeases } from "./hostPlacements.ts";
import { isWantedPlacement } from "../../domain/hostPlacement.ts";

/**
 * One agent envelope (poll or messages) and, for a poll with nothing to
 * hand out, a park of up to `waitMs` (≤ POLL_PARK_MS) until work arrives.
 * Throws STALE_AGENT_EPOCH for an older epoch.
 */
export async function poll(ctx: HostContext, env: Envelope, waitMs: number): Promise<PollResponse> {
  const first = handleEnvelope(ctx, env);
  const park = Math.min(waitMs, POLL_PARK_MS);
  if (env.type !== "poll" || carriesWork(first) || park <= 0 || ctx.mailbox.draining) return first;
  const wokenAtMs = await ctx.mailbox.park(park);
  const answer = work(ctx, first.agentEpoch);
  // Wake-up latency: from the work that woke the poll to its answer (a park that timed out is not a wake-up).
  if (wokenAtMs !== null && carriesWork(answer)) {
    ctx.env.metrics.observe(
      "bb_agent_poll_wakeup_seconds",
      "From work for a host to its parked poll answering with it",
      (ctx.env.clock.wallMs() - wokenAtMs) / 1000,
    );
  }
  return answer;
}

/** True when a poll response hands the agent something to do. */
function carriesWork(res: PollResponse): boolean {
  return res.commands.length > 0 || res.deliveries.length > 0 || (res.connections?.length ?? 0) > 0;
}

/**
 * Applies one agent envelope: epoch fencing, heartbeat, lease renewal,
 * observations, acks. Returns the poll response body. Throws
 * STALE_AGENT_EPOCH for an older epoch.
 */
export function handleEnvelope(ctx: HostContext, env: Envelope): PollResponse {
  const { store } = ctx;
  const r = store.mustRow();
  const now = ctx.env.clock.wallMs();
  const opening = sessionOpening(env.agentEpoch, env.type, r.agentEpoch);
  if (opening === "stale")
    throw new BeachballError("STALE_AGENT_EPOCH", "the agent epoch is not the current session", {
      currentEpochKnown: r.agentEpoch !== "",
    });
  const newSession = opening === "new";
  const epoch = newSession ? Buffer.from(ctx.env.random.bytes(16)).toString("hex") : r.agentEpoch;
  const prevFacts = JSON.parse(r.factsJson) as AgentFacts;
  const overlapping = isOverlappingSession(r, newSession, env.payload.bootId, now);
  const facts = mergeFacts(prevFacts, { sentAt: env.sentAt, health: env.payload.health }, now, overlapping);
  const factsJson = JSON.stringify(facts);
  const isolationHealthy = env.payload.health?.isolationHealthy ?? r.isolationHealthy;
  const rejected: UpdateRejection[] = [];
  store.atomically(() => {
    for (const alert of alertsAfterReport(r.obj, prevFacts, facts, overlapping, now))
      ctx.state.post(ctx.env.Operations, GLOBAL, alert.alertId, alert);
    if (newSession) store.clearUpdateSeqs();
    let lastSeq = newSession ? 0 : r.lastSeq;
    let material = newSession || factsJson !== r.factsJson || isolationHealthy !== r.isolationHealthy;
    for (const u of env.payload.updates) {
      const outcome = applyUpdate(ctx, epoch, u);
      if (typeof outcome === "string") {
        rejected.push({ seq: u.seq, placementId: u.placementId, code: outcome });
        continue;
      }
      lastSeq = Math.max(lastSeq, u.seq);
      if (outcome.material) material = true;
    }
    const cur = store.mustRow();
    store.setRow({
      heartbeatAtMs: now,
      agentEpoch: epoch,
      bootId: env.payload.bootId,
      lastSeq,
      isolationHealthy,
      factsJson,
      adRevision: cur.adRevision,
      adPublishedAtMs: cur.adPublishedAtMs,
    });
    for (const a of env.payload.acks) store.ackCommand(a.commandId, a.result === "rejected" ? "rejected" : "acked");
    for (const d of env.payload.deliveryAcks) applyDeliveryAck(ctx, d);
    ctx.conn.applyAcks(env.payload.acks);
    if (env.payload.connectivity)
      ctx.conn.applyConnectivity(epoch, env.payload.connectivity, (placementId, generation) =>
        isWantedPlacement(store.placement(placementId), generation, store.row()?.adminState),
      );
    // Leases are renewed by heartbeats, but never for a placement the scheduler wants gone.
    renewLeases(ctx, now);
    publish(ctx, material || now - r.adPublishedAtMs > AD_REFRESH_MS);
  });
  if (newSession) ctx.mailbox.resendAll();
  // A messages envelope may have enqueued work (prepared ⇒ ensure_running): wake the parked poll.
  // Commands and deliveries ride only in poll responses, so each is handed out once per poll.
  const withRejections = (res: PollResponse): PollResponse =>
    rejected.length ? { ...res, rejectedUpdates: rejected } : res;
  if (env.type === "messages") {
    if (hasWork(ctx)) ctx.mailbox.wakePolls();
    return withRejections({ agentEpoch: epoch, commands: [], deliveries: [], leases: leases(ctx) });
  }
  return withRejections(work(ctx, epoch));
}

/** A delivery acknowledgement: a consumed one is recorded (digest only) and told to its Allocation; the waiting caller is settled. */
function applyDeliveryAck(ctx: HostContext, d: DeliveryAck): void {
  if (d.result === "consumed" && d.digest) {
    const p = ctx.store.placement(d.placementId);
    ctx.store.recordConsumed(
      { deliveryId: d.deliveryId, placementId: d.placementId, generation: d.generation, digest: d.digest },
      ctx.env.clock.wallMs(),
    );
    if (p)
      ctx.state.post(ctx.env.Allocation, p.allocationId, `dlv:${d.deliveryId}`, {
        kind: "delivery_consumed",
        deliveryId: d.deliveryId,
        generation: d.generation,
        digest: d.digest,
      });
  }
  ctx.mailbox.settle(d);
}

/** True if the agent has commands, deliveries or connection commands waiting. */
export function hasWork(ctx: HostContext): boolean {
  if (!ctx.store.row()) return false;
  if (ctx.mailbox.hasUnsent()) return true;
  return ctx.store.pendingCommands().length > 0 || ctx.conn.hasPending();
}

/** Pending commands (≤ MAX_COMMANDS_PER_POLL) stamped with `epoch`, deliveries, and leases. */
export function work(ctx: HostContext, epoch: string): PollResponse {
  ctx.store.mustRow();
  const commands = pendingCommands(ctx, epoch);
  const deliveries = ctx.mailbox.handOut();
  const connections = ctx.conn.pending();
  return {
    agentEpoch: epoch,
    commands,
    deliveries,
    leases: leases(ctx),
    ...(connections.length > 0 ? { connections } : {}),
  };
}
