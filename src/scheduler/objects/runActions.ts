/**
 * What the RunQueue does outside its transactions (issue 22, "Runs"): for a
 * dispatched run, create (or replay) its allocation and read its view;
 * hand the guest the run's payload; release its VM. Each is a one-way call
 * to an Allocation or Host object, started after the queue's pass
 * committed and never more than one of a kind per run at a time (the
 * caller's in-flight set). Every one is safe to repeat: the allocation's
 * clientRequestId is `run/<runId>` and the delivery's ID `run:<runId>`, so a
 * queue restarted midway finds the same allocation and the same delivery.
 * Must never: run a job twice, or leave a run without a way to end (an
 * allocation that was never made ends its run at once).
 */
import { createHash } from "node:crypto";
import { BeachballError } from "../../protocol/errors.ts";
import type { AllocationView, CreateAllocationBody } from "../../protocol/api.ts";
import { allocationIdFor, canonicalJson, digestOf, runAllocationRequestId } from "../../domain/identifiers.ts";
import { runPayload, type RunStep } from "../../domain/runs.ts";
import { classSpec, createAllocationOf, deliverPayload, workloadClassOf } from "../allocationRequests.ts";
import type { SchedulerEnv } from "../env.ts";
import type { RunRow } from "./runSchema.ts";

/** One action on one run. */
export interface RunAction {
  kind: "sync" | "deliver" | "release";
  runId: string;
}

/** What the actions need of the queue: its rows and views, and a way to write a change and wake it. */
export interface RunQueueAccess {
  /** The open run's current row (null once it ended); its script and environment are not in it. */
  row(runId: string): RunRow | null;
  /** The run's script and environment while it waits, read from its row. */
  script(runId: string): { scriptBase64: string; envJson: string } | null;
  /** A create was refused for now: try again after a growing backoff. */
  retryLater(runId: string): void;
  /** The create went through: no backoff any more. */
  retried(runId: string): void;
  /** The latest view of an allocation, or null. */
  view(allocationId: string): AllocationView | null;
  noteView(v: AllocationView): void;
  change(r: RunRow, patch: Partial<RunRow>, events: RunStep["events"]): RunRow;
  kick(): void;
}

/** Seconds a run's allocation lives past its budget: the backstop that releases it should the queue itself stop. */
export const RUN_TTL_GRACE_SECONDS = 300;

/** Longest TTL a create body takes, seconds (CreateAllocationBody's ttlSeconds). */
const MAX_TTL_SECONDS = 7 * 24 * 3600;

/** Codes after which a run's allocation will never be made: the run fails with the code. */
const PERMANENT = new Set([
  "UNKNOWN_WORKLOAD_CLASS",
  "IDEMPOTENCY_CONFLICT",
  "VALIDATION_FAILED",
  "COST_LIMIT_EXCEEDED",
]);

interface Ctx {
  env: SchedulerEnv;
  q: RunQueueAccess;
}

/** The create body of a run's allocation: its class and labels, and a TTL of its budget plus RUN_TTL_GRACE_SECONDS. */
const createBody = (r: RunRow): CreateAllocationBody => ({
  clientRequestId: runAllocationRequestId(r.runId),
  workloadClass: r.workloadClass,
  labels: JSON.parse(r.labelsJson) as Record<string, string>,
  ttlSeconds: Math.min(MAX_TTL_SECONDS, Math.ceil(r.budgetMs / 1000) + RUN_TTL_GRACE_SECONDS),
});

/** Ends a run whose allocation was never made (no VM to wait for), with the outcome decided before or failed. */
const endWithoutVm = ({ env, q }: Ctx, r: RunRow, reason: string) => {
  const now = () => env.clock.wallMs();
  const outcome = r.outcome ?? "failed";
  q.change(r, { state: outcome, outcome, reason, exitedAtMs: r.exitedAtMs ?? now(), endedAtMs: now() }, [
    { type: "run.ended", data: { outcome, reason } },
  ]);
};

/** Creates (or replays) a starting run's allocation and notes its view; past starting, reads the view, or ends a run whose allocation was never made. */
async function sync(ctx: Ctx, r: RunRow): Promise<boolean> {
  const { env, q } = ctx;
  if (!r.allocationId) return false;
  const alloc = env.Allocation.get(r.allocationId);
  if (r.state === "starting" && r.outcome === null) {
    // An allocation made before (a crash, a changed manifest) is followed, never made again nor given up.
    if (await alloc.exists()) {
      q.noteView(await alloc.get(r.tenant));
      return true;
    }
    try {
      const cls = workloadClassOf(env.config.manifest, r.workloadClass);
      const body = createBody(r);
      const { view } = await createAllocationOf(
        env,
        r.tenant,
        body,
        cls,
        digestOf(canonicalJson(body)),
        classSpec(cls),
      );
      q.noteView(view);
      const cur = q.row(r.runId);
      if (cur?.dispatchError) q.change(cur, { dispatchError: null }, []);
      q.retried(r.runId);
      return true;
    } catch (e) {
      const code = e instanceof BeachballError ? e.code : "INTERNAL";
      const cur = q.row(r.runId);
      env.log.warn("run dispatch refused", { runId: r.runId, code });
      if (!cur) return false;
      if (PERMANENT.has(code)) {
        endWithoutVm(ctx, cur, code);
        return true;
      }
      // A quota or rate refusal: the run keeps its slot and tries again after a backoff (its budget still runs).
      q.retryLater(r.runId);
      if (cur.dispatchError !== code)
        q.change(cur, { dispatchError: code }, [{ type: "run.dispatch_retrying", data: { code } }]);
      return false;
    }
  }
  // Past starting (or decided before its create): the allocation tells where it stands, or was never made.
  if (!(await alloc.exists())) {
    const cur = q.row(r.runId);
    if (cur) endWithoutVm(ctx, cur, cur.reason ?? "VM_GONE");
    return true;
  }
  q.noteView(await alloc.get(r.tenant));
  return true;
}

/** Hands the guest the run's payload (deliveryId `run:<runId>`) and records it running. */
async function deliver({ env, q }: Ctx, r: RunRow): Promise<boolean> {
  const now = () => env.clock.wallMs();
  const view = r.allocationId ? q.view(r.allocationId) : null;
  const job = q.script(r.runId);
  if (!view || !job || r.runningAtMs !== null) return false;
  // The generation is written before the first delivery: a later generation (a replacement) never gets the job.
  if (r.deliveredGeneration !== null && r.deliveredGeneration !== view.generation) return false;
  if (r.deliveredGeneration === null) q.change(r, { deliveredGeneration: view.generation }, []);
  const payload = runPayload(
    r.runId,
    JSON.parse(job.envJson) as Record<string, string>,
    Buffer.from(job.scriptBase64, "base64"),
  );
  const digest = `sha256:${createHash("sha256").update(payload).digest("hex")}`;
  try {
    await deliverPayload(
      env,
      r.tenant,
      r.allocationId!,
      {
        deliveryId: `run:${r.runId}`,
        generation: view.generation,
        contentType: "text/x-shellscript",
        payloadBase64: Buffer.from(payload).toString("base64"),
      },
      digest,
    );
  } catch (e) {
    const code = e instanceof BeachballError ? e.code : "INTERNAL";
    env.log.warn("run delivery not done", { runId: r.runId, code });
    const cur = q.row(r.runId);
    if (code === "DELIVERY_CONFLICT" && cur && cur.outcome === null) {
      q.change(cur, { state: "finishing", outcome: "failed", reason: code, exitedAtMs: now() }, [
        { type: "run.delivery_refused", data: { code } },
      ]);
      return true;
    }
    // Not connected, timed out, a generation that moved: the next resync tries again.
    return false;
  }
  const cur = q.row(r.runId);
  if (cur && cur.runningAtMs === null)
    q.change(
      cur,
      { state: cur.outcome === null ? "running" : cur.state, runningAtMs: now(), scriptBase64: null, envJson: null },
      [{ type: "run.running" }],
    );
  return true;
}

/** Releases the run's allocation (idempotent) and notes its view. */
async function release({ env, q }: Ctx, r: RunRow): Promise<boolean> {
  if (!r.allocationId) return false;
  try {
    q.noteView(await env.Allocation.get(r.allocationId).release(r.tenant));
    return true;
  } catch (e) {
    env.log.warn("run release not done", { runId: r.runId, code: e instanceof BeachballError ? e.code : "INTERNAL" });
    return false;
  }
}

/** The actions over `env`, reaching the queue through `q`. */
export function runActions(env: SchedulerEnv, q: RunQueueAccess) {
  const ctx: Ctx = { env, q };
  return {
    /** The run's allocation ID (a digest of its owner and `run/<runId>`). */
    allocationIdOf: (r: RunRow) => allocationIdFor(r.tenant, runAllocationRequestId(r.runId)),
    /** Runs one action; a failure is logged and retried by a later pass (the resync alarm). Wakes the queue after progress. */
    async run(a: RunAction): Promise<void> {
      const r = q.row(a.runId);
      if (!r) return;
      let progress: boolean;
      try {
        if (a.kind === "sync") progress = await sync(ctx, r);
        else if (a.kind === "deliver") progress = await deliver(ctx, r);
        else progress = await release(ctx, r);
      } catch (e) {
        env.log.warn("run action failed", {
          runId: a.runId,
          action: a.kind,
          code: e instanceof BeachballError ? e.code : String(e),
        });
        return;
      }
      if (progress) q.kick();
    },
  };
}
