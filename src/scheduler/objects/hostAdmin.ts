/**
 * A Host's enrollment and administrative state (spec "Administrative state
 * and health", "Enrollment"): creating the host row on first enrollment,
 * and operators' admin changes, run one at a time per host through one
 * chain (`HostAdminChain`). A change touches Admission (the active-host cap,
 * then the active count) and this host, so two changes must not interleave
 * between the two; the state is written only inside the chain (the writer
 * is not exported). What a change does is decided by
 * src/domain/hostAdmin.ts; `disabled` fences the host for good.
 * Must never: change the admin state outside the chain, or leave Admission's
 * active count disagreeing with the state after a change (failed ones included).
 */
import { BeachballError } from "../../protocol/errors.ts";
import { adminTransition, type AdminState } from "../../domain/hostAdmin.ts";
import { fencingAlert } from "../../domain/hostAlerts.ts";
import { NO_FACTS } from "../../domain/hostSession.ts";
import { GLOBAL } from "../env.ts";
import type { HostContext } from "./hostContext.ts";
import { publish } from "./hostAdvertisement.ts";
import type { HostRow } from "./hostStore.ts";
import type { HostRegistration } from "./hostTypes.ts";

/** What an admin change answers: the state after it, the credential version, and how many placements it fenced. */
export interface AdminChangeResult {
  adminState: string;
  credentialVersion: number;
  fenced: number;
}

/**
 * Creates the host on first enrollment (draining, or active with autoActivate).
 * A repeat with the same enrollment digest returns the existing row's version;
 * another configuration is ENROLLMENT_CONFLICT.
 */
export function register(
  ctx: HostContext,
  reg: HostRegistration,
): { created: boolean; adminState: string; credentialVersion: number } {
  const existing = ctx.store.row();
  if (existing) {
    if (existing.enrollDigest !== reg.enrollDigest)
      throw new BeachballError("ENROLLMENT_CONFLICT", "host already enrolled with another configuration");
    return { created: false, adminState: existing.adminState, credentialVersion: existing.credentialVersion };
  }
  const row: HostRow = {
    obj: reg.hostId,
    adminState: reg.autoActivate ? "active" : "draining",
    credentialDigest: reg.credentialDigest,
    credentialVersion: 1,
    enrollDigest: reg.enrollDigest,
    capacityJson: JSON.stringify(reg.capacity),
    reserveJson: JSON.stringify(reg.reserve),
    region: reg.region,
    architecture: reg.architecture,
    labelsJson: JSON.stringify(reg.labels),
    agentProtocolVersion: reg.agentProtocolVersion,
    vmmDriver: reg.vmmDriver,
    heartbeatAtMs: null,
    agentEpoch: "",
    bootId: "",
    lastSeq: 0,
    isolationHealthy: true,
    adRevision: 0,
    adPublishedAtMs: 0,
    registeredAtMs: ctx.env.clock.wallMs(),
    factsJson: JSON.stringify(NO_FACTS),
    fencedAtMs: null,
  };
  ctx.store.atomically(() => {
    ctx.store.insertHost(row);
    publish(ctx, true);
  });
  return { created: true, adminState: row.adminState, credentialVersion: 1 };
}

/** See the module header. One per Host instance. */
export class HostAdminChain {
  private chain: Promise<unknown> = Promise.resolve();

  constructor(private readonly ctx: HostContext) {}

  /**
   * Queues an operator's admin change behind the ones before it. Activation
   * is gated by the cap (`maxActive`); afterwards Admission counts this host
   * as active exactly when it is, whatever the change's outcome. Throws
   * NOT_FOUND, HOST_DISABLED, QUOTA_ACTIVE_HOSTS.
   */
  change(state: AdminState, maxActive: number): Promise<AdminChangeResult> {
    const run = this.chain.then(
      () => this.changeNow(state, maxActive),
      () => this.changeNow(state, maxActive),
    );
    this.chain = run.catch(() => undefined);
    return run;
  }

  private async changeNow(state: AdminState, maxActive: number): Promise<AdminChangeResult> {
    const { ctx } = this;
    const before = ctx.store.row()?.adminState ?? null;
    if (before === null) throw new BeachballError("NOT_FOUND", "no such host");
    if (adminTransition(before, state) === "refused") throw disabledError(ctx.state.name);
    const admission = ctx.env.Admission.get(GLOBAL);
    try {
      if (state === "active") await admission.admitActiveHost(ctx.state.name, maxActive);
      return applyAdminState(ctx, state);
    } finally {
      await admission.setHostActive(ctx.state.name, ctx.store.row()?.adminState === "active");
    }
  }
}

function disabledError(hostId: string): BeachballError {
  return new BeachballError("HOST_DISABLED", `host ${hostId} is disabled (fenced for good); enroll it again to use it`);
}

/**
 * Sets the administrative state (only from the chain). `disabled` fences
 * the host: the credential is cleared and its version bumped, every
 * placement counts as absent (its VM can no longer be commanded or renew
 * its lease), and each owning allocation is told. Returns the placements
 * that were fenced.
 */
function applyAdminState(ctx: HostContext, state: AdminState): AdminChangeResult {
  const r = ctx.store.mustRow();
  const transition = adminTransition(r.adminState, state);
  if (transition === "refused") throw disabledError(r.obj);
  if (transition === "unchanged")
    return { adminState: r.adminState, credentialVersion: r.credentialVersion, fenced: 0 };
  const now = ctx.env.clock.wallMs();
  let fenced = 0;
  ctx.store.atomically(() => {
    if (transition === "set") ctx.store.setRow({ adminState: state });
    else fenced = fence(ctx, r, now);
    publish(ctx, true);
  });
  if (fenced) ctx.mailbox.wakePolls();
  const after = ctx.store.mustRow();
  return { adminState: after.adminState, credentialVersion: after.credentialVersion, fenced };
}

/** Fences the host (in the caller's transaction): credential cleared, placements absent and their allocations told, commands superseded, an alert. Returns the placements fenced. */
function fence(ctx: HostContext, r: HostRow, now: number): number {
  const { store, state, env } = ctx;
  store.setRow({
    adminState: "disabled",
    credentialDigest: null,
    credentialVersion: r.credentialVersion + 1,
    fencedAtMs: now,
  });
  let fenced = 0;
  for (const p of [...store.placements().values()]) {
    fenced++;
    store.setPlacement(p, { state: "absent", desired: "absent", errorCode: "HOST_FENCED", updatedAtMs: now });
    state.post(env.Allocation, p.allocationId, `fence:${r.obj}:${p.placementId}`, {
      kind: "observation",
      hostId: r.obj,
      placementId: p.placementId,
      generation: p.generation,
      state: "absent",
      errorCode: "HOST_FENCED",
      workloadExitCode: null,
      at: new Date(now).toISOString(),
    });
  }
  store.supersedePending(null);
  const alert = fencingAlert(r.obj, now);
  state.post(env.Operations, GLOBAL, alert.alertId, alert);
  return fenced;
}
