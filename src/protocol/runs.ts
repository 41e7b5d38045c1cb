/**
 * Runs (issue 22, "Runs"): the shapes of a submitted job, its view and its
 * events. A run is work, not a VM: the scheduler queues it fairly between
 * tenants, creates its allocation when a slot frees, hands the guest its
 * script as the bootstrap payload, records the exit code and timings, and
 * releases the VM. docs/runs.md; docs/adr/0190-runs-in-one-queue-object.md.
 *
 * Owns: request/response shapes and their bounds. Imports only protocol
 * shapes. Must never: carry a bootstrap payload of an allocation (a run's
 * script is the run's own definition and rests only while the run waits).
 */
import { Type, type Static } from "@sinclair/typebox";
import { ClosedRecord, Ident, Labels, MAX_PAYLOAD_BYTES, MAX_REQUEST_BODY_BYTES } from "./api.ts";

/** Largest script of a run, in bytes (before base64); with its environment it must fit one bootstrap payload (MAX_PAYLOAD_BYTES). */
export const MAX_RUN_SCRIPT_BYTES = MAX_PAYLOAD_BYTES - 32 * 1024;
/** Most environment variables of a run. */
export const MAX_RUN_ENV_VARS = 64;
/** A run's environment variable name: a shell name of at most 128 characters, not starting with `BEACHBALL_` (those are the scheduler's). */
export const RUN_ENV_KEY_PATTERN = "^(?!BEACHBALL_)[A-Za-z_][A-Za-z0-9_]{0,127}$";
/** Longest value of one environment variable, in characters (printable ASCII, tab and newline allowed). */
export const MAX_RUN_ENV_VALUE_CHARS = 4096;
/** Shortest and longest execution budget of a run, seconds: from dispatch to the VM's exit, never extended. */
export const RUN_BUDGET_SECONDS = { min: 10, max: 24 * 3600 } as const;
/** Shortest and longest queue deadline, seconds after submission: a run still queued then ends TIMED_OUT (default 3600). */
export const RUN_QUEUE_DEADLINE_SECONDS = { min: 1, max: 7 * 24 * 3600, default: 3600 } as const;
/** Output kept per run, bytes: its allocation's log ring (a plain allocation keeps LOG_RING_BYTES). */
export const RUN_LOG_RING_BYTES = 8 * 1024 * 1024;

/** Run states: queued → starting (its VM being placed, booted and handed the script) → running → finishing (its VM being released) → one terminal state. */
export const RUN_STATES = [
  "queued",
  "starting",
  "running",
  "finishing",
  "succeeded",
  "failed",
  "timed_out",
  "canceled",
] as const;
/** One run state. */
export type RunState = (typeof RUN_STATES)[number];
/** How a run ended (known in `finishing` already; its state once the VM is gone). */
export const RUN_OUTCOMES = ["succeeded", "failed", "timed_out", "canceled"] as const;
/** One run outcome. */
export type RunOutcome = (typeof RUN_OUTCOMES)[number];
/** The states a run never leaves. */
export const TERMINAL_RUN_STATES: ReadonlySet<RunState> = new Set<RunState>(RUN_OUTCOMES);

/** POST /v1/runs body. Idempotent by clientRequestId: the same key and body answer the same run, another body is 422 IDEMPOTENCY_CONFLICT. */
export const SubmitRunBody = Type.Object(
  {
    clientRequestId: Ident(
      128,
      "idempotency key: the same key and body answer the same run; another body is 422 IDEMPOTENCY_CONFLICT",
    ),
    workloadClass: Ident(64, "a class from the deployment manifest; it fixes the VM's resources and image"),
    /** Base64 of the job's shell script (at most MAX_RUN_SCRIPT_BYTES bytes), run by the guest as the workload. */
    scriptBase64: Type.String({ minLength: 1, maxLength: MAX_REQUEST_BODY_BYTES }),
    env: Type.Optional(
      ClosedRecord(
        RUN_ENV_KEY_PATTERN,
        Type.String({ maxLength: MAX_RUN_ENV_VALUE_CHARS, pattern: "^[\\x20-\\x7e\\t\\n]*$" }),
        MAX_RUN_ENV_VARS,
      ),
    ),
    budgetSeconds: Type.Integer({
      minimum: RUN_BUDGET_SECONDS.min,
      maximum: RUN_BUDGET_SECONDS.max,
      description: "execution budget from dispatch, fixed then (never extended): past it the run ends TIMED_OUT",
    }),
    queueDeadlineSeconds: Type.Optional(
      Type.Integer({
        minimum: RUN_QUEUE_DEADLINE_SECONDS.min,
        maximum: RUN_QUEUE_DEADLINE_SECONDS.max,
        description: "seconds the run may wait in the queue (default 3600): past it the run ends TIMED_OUT",
      }),
    ),
    labels: Type.Optional(Labels),
  },
  { additionalProperties: false },
);
/** POST /v1/runs body. */
export type SubmitRunBody = Static<typeof SubmitRunBody>;

const At = Type.Union([Type.String({ maxLength: 40 }), Type.Null()]);

/** When each phase of a run began (ISO 8601, null until it did). */
export const RunTimings = Type.Object(
  {
    queuedAt: Type.String({ maxLength: 40 }),
    /** A slot was given and its allocation created. */
    dispatchedAt: At,
    /** A host reserved the VM. */
    placedAt: At,
    /** The guest proved its identity (allocation ready). */
    readyAt: At,
    /** The guest consumed the script: the job runs. */
    runningAt: At,
    /** The job's exit code arrived (or its end was decided: budget, cancel, a VM failure). */
    exitedAt: At,
    /** The VM is gone and the run is terminal. */
    endedAt: At,
  },
  { additionalProperties: false },
);
/** When each phase of a run began. */
export type RunTimings = Static<typeof RunTimings>;

/** A run as the API shows it. */
export const RunView = Type.Object(
  {
    runId: Type.String({ maxLength: 64 }),
    clientRequestId: Type.String({ maxLength: 128 }),
    workloadClass: Type.String({ maxLength: 64 }),
    state: Type.Union(RUN_STATES.map((s) => Type.Literal(s))),
    /** How it ended, once known (already while finishing). */
    outcome: Type.Union([...RUN_OUTCOMES.map((s) => Type.Literal(s)), Type.Null()]),
    /** Why it failed, timed out or was canceled: BUDGET_EXCEEDED, QUEUE_DEADLINE_EXCEEDED, CANCELED, WORKLOAD_FAILED, or the allocation's reason (VM_EXITED, NO_CAPACITY, …). */
    reason: Type.Union([Type.String({ maxLength: 64 }), Type.Null()]),
    /** The job's exit code, once it exited. */
    exitCode: Type.Union([Type.Integer(), Type.Null()]),
    /** The run's allocation (its VM), from dispatch on. */
    allocationId: Type.Union([Type.String({ maxLength: 64 }), Type.Null()]),
    hostId: Type.Union([Type.String({ maxLength: 64 }), Type.Null()]),
    labels: Type.Record(Type.String(), Type.String(), { maxProperties: 32 }),
    budgetSeconds: Type.Integer({ minimum: 1 }),
    /** SHA-256 of the script as submitted. */
    scriptDigest: Type.String({ maxLength: 80 }),
    /** Conditions in force: CLEANUP_PENDING (its VM is not gone yet; the run keeps its slot), DISPATCH_RETRYING (its allocation could not be made yet). */
    conditions: Type.Array(Type.String({ maxLength: 80 }), { maxItems: 8 }),
    /** While queued: how many runs dispatch before it (0: next), and when it is expected to start (from recent runs' durations; null before any ended). */
    queue: Type.Union([
      Type.Object({ position: Type.Integer({ minimum: 0 }), estimatedStartAt: At }, { additionalProperties: false }),
      Type.Null(),
    ]),
    timings: RunTimings,
    queueDeadlineAt: Type.String({ maxLength: 40 }),
    /** Fixed at dispatch: dispatchedAt + budgetSeconds. */
    executionDeadlineAt: At,
  },
  { additionalProperties: false },
);
/** A run as the API shows it. */
export type RunView = Static<typeof RunView>;

/** GET /v1/runs answer: the caller's runs, newest first; `nextCursor` continues below. */
export const RunPage = Type.Object(
  {
    items: Type.Array(RunView, { maxItems: 200 }),
    nextCursor: Type.Union([Type.Integer({ minimum: 0 }), Type.Null()]),
  },
  { additionalProperties: false },
);
/** GET /v1/runs answer. */
export type RunPage = Static<typeof RunPage>;

/** One run event: run.queued, run.dispatched, run.placed, run.ready, run.running, run.exited, run.timed_out, run.canceled, run.ended. */
export const RunEvent = Type.Object(
  {
    seq: Type.Integer({ minimum: 1 }),
    type: Type.String({ maxLength: 40 }),
    at: Type.String({ maxLength: 40 }),
    runId: Type.String({ maxLength: 64 }),
    state: Type.Union(RUN_STATES.map((s) => Type.Literal(s))),
    data: Type.Optional(Type.Record(Type.String(), Type.Unknown(), { maxProperties: 16 })),
  },
  { additionalProperties: false },
);
/** One run event. */
export type RunEvent = Static<typeof RunEvent>;

/** GET /v1/runs/{id}/events answer. */
export const RunEventPage = Type.Object(
  { items: Type.Array(RunEvent, { maxItems: 200 }) },
  { additionalProperties: false },
);
/** GET /v1/runs/{id}/events answer. */
export type RunEventPage = Static<typeof RunEventPage>;
