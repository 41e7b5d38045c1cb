/**
 * `bb run JOB.sh --class C [--follow]` and `bb run list|get|logs|cancel|wait`
 * (issue 22, "Runs"): submit a script as a run, queued fairly with everyone
 * else's, and read it back. `bb run JOB.sh` is `bb run submit JOB.sh`.
 *
 * Exit codes (src/command/run.ts): `submit --follow` and `wait` exit with
 * the job's own exit code when it reported one; 124 when the run timed out
 * (as timeout(1) does), 130 when it was canceled, 1 when it failed without
 * a code; 2 usage; 4 auth. Output: the job's output on stdout, progress and
 * the summary on stderr, or `--json` views on stdout.
 */
import { readFileSync, statSync } from "node:fs";
import { randomUUID } from "node:crypto";
import { consola } from "consola";
import { MAX_PAGE_SIZE, MAX_WIRE_INTEGER } from "../protocol/api.ts";
import {
  MAX_RUN_SCRIPT_BYTES,
  RUN_BUDGET_SECONDS,
  RUN_QUEUE_DEADLINE_SECONDS,
  TERMINAL_RUN_STATES,
  type RunView,
} from "../protocol/runs.ts";
import { command } from "../command/define.ts";
import { runCli, UsageError } from "../command/run.ts";
import { flagValues } from "../command/argv.ts";
import { integerFlag, optionalIntegerFlag } from "../command/values.ts";
import { table } from "../command/terminal.ts";
import { clientArgs } from "../command/clientArgs.ts";
import { clientFrom, flagError } from "./common.ts";
import type { SchedulerClient } from "./client.ts";

/** Exit code of a run that timed out (timeout(1)'s). */
export const EXIT_TIMED_OUT = 124;
/** Exit code of a canceled run (an interrupted command's). */
export const EXIT_CANCELED = 130;
/** Longest `bb run wait` / `--follow` wait, seconds: a budget plus a week in the queue. */
const MAX_WAIT_SECONDS = RUN_BUDGET_SECONDS.max + RUN_QUEUE_DEADLINE_SECONDS.max;

const idArg = { type: "positional", required: true, description: "Run ID (run_ and 32 hex digits)" } as const;

/** The exit code a finished run gives the command (see the module header). */
export function runExitCode(v: RunView): number {
  if (v.state === "timed_out") return EXIT_TIMED_OUT;
  if (v.state === "canceled") return EXIT_CANCELED;
  if (v.exitCode !== null) return v.exitCode;
  return v.state === "succeeded" ? 0 : 1;
}

/** Runs as a table: ID, STATE, EXIT, CLASS, REASON, QUEUED. */
export function runTable(views: readonly RunView[]): string {
  return table(
    ["ID", "STATE", "EXIT", "CLASS", "REASON", "QUEUED"],
    views.map((v) => [
      v.runId,
      v.queue ? `${v.state} (#${v.queue.position + 1})` : v.state,
      v.exitCode === null ? "-" : String(v.exitCode),
      v.workloadClass,
      v.reason ?? (v.conditions.join(",") || "-"),
      v.timings.queuedAt,
    ]),
  );
}

/** One run as `Key: value` lines. */
export function runDetail(v: RunView): string {
  const t = v.timings;
  const lines = [
    ["Run", v.runId],
    ["State", v.state + (v.reason ? ` (${v.reason})` : "")],
    ["Exit code", v.exitCode === null ? "-" : String(v.exitCode)],
    ["Class", v.workloadClass],
    ["Allocation", v.allocationId ?? "-"],
    ["Host", v.hostId ?? "-"],
    ["Budget", `${v.budgetSeconds} s${v.executionDeadlineAt ? ` (until ${v.executionDeadlineAt})` : ""}`],
    ...(v.queue
      ? [
          [
            "Queue",
            `position ${v.queue.position + 1}${v.queue.estimatedStartAt ? `, start about ${v.queue.estimatedStartAt}` : ""}`,
          ],
        ]
      : []),
    ["Queued", t.queuedAt],
    ["Dispatched", t.dispatchedAt ?? "-"],
    ["Ready", t.readyAt ?? "-"],
    ["Running", t.runningAt ?? "-"],
    ["Ended", t.endedAt ?? "-"],
    ...(v.conditions.length ? [["Conditions", v.conditions.join(", ")]] : []),
  ];
  return lines.map(([k, val]) => `${`${k}:`.padEnd(12)}${val}`).join("\n");
}

function readScript(path: string): Uint8Array {
  if (path === "-") return readFileSync(0);
  let size: number;
  try {
    size = statSync(path).size;
  } catch (e) {
    throw new UsageError(`cannot read ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  if (size > MAX_RUN_SCRIPT_BYTES)
    throw new UsageError(`${path} is ${size} bytes; a run's script is at most ${MAX_RUN_SCRIPT_BYTES} bytes`);
  return readFileSync(path);
}

/** The `--env NAME=VALUE` values as a map (a later NAME wins). */
function envOf(values: readonly string[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const v of values) {
    const eq = v.indexOf("=");
    if (eq <= 0) throw new UsageError(`--env ${JSON.stringify(v)}: give NAME=VALUE`);
    env[v.slice(0, eq)] = v.slice(eq + 1);
  }
  return env;
}

/** The `--label key=value` values as a map. */
function labelsOf(values: readonly string[]): Record<string, string> {
  const labels: Record<string, string> = {};
  for (const v of values) {
    const eq = v.indexOf("=");
    if (eq <= 0) throw new UsageError(`--label ${JSON.stringify(v)}: give KEY=VALUE`);
    labels[v.slice(0, eq)] = v.slice(eq + 1);
  }
  return labels;
}

/** Streams the run's output to stdout until it ends, then waits for its end and answers its view. */
async function follow(client: SchedulerClient, runId: string, timeoutS: number): Promise<RunView> {
  let offset = 0;
  const deadline = Date.now() + timeoutS * 1000;
  for (;;) {
    const page = await client.runLogs(runId, offset, true);
    if (page.droppedBytes) process.stderr.write(`[... ${page.droppedBytes} bytes of output dropped ...]\n`);
    // The text comes from a host: no control character but newline and tab reaches the terminal.
    process.stdout.write(page.text.replace(/[\x00-\x08\x0b-\x1f\x7f-\x9f]/g, ""));
    offset = page.nextOffset;
    if (page.complete || Date.now() >= deadline) break;
    if (!page.text && TERMINAL_RUN_STATES.has((await client.getRun(runId)).state)) {
      const last = await client.runLogs(runId, offset, false);
      process.stdout.write(last.text.replace(/[\x00-\x08\x0b-\x1f\x7f-\x9f]/g, ""));
      break;
    }
  }
  return client.waitRun(runId, { timeoutMs: Math.max(1000, deadline - Date.now()) });
}

function summary(v: RunView): void {
  const took =
    v.timings.dispatchedAt && v.timings.endedAt
      ? ` in ${((Date.parse(v.timings.endedAt) - Date.parse(v.timings.dispatchedAt)) / 1000).toFixed(1)} s`
      : "";
  const line = `run ${v.runId} ${v.state}${v.exitCode !== null ? ` with exit code ${v.exitCode}` : ""}${v.reason ? ` (${v.reason})` : ""}${took}`;
  if (v.state === "succeeded") consola.success(line);
  else consola.error(line);
}

const submitArgs = {
  script: { type: "positional", required: true, description: "The job: a shell script file (- reads stdin)" },
  class: { type: "string", required: true, valueHint: "CLASS", description: "Workload class of the run's VM" },
  budget: {
    type: "string",
    valueHint: "SECONDS",
    default: "3600",
    description: `Execution budget from dispatch, ${RUN_BUDGET_SECONDS.min} to ${RUN_BUDGET_SECONDS.max} seconds; past it the run ends timed_out`,
  },
  "queue-deadline": {
    type: "string",
    valueHint: "SECONDS",
    description: `How long it may wait for a slot, ${RUN_QUEUE_DEADLINE_SECONDS.min} to ${RUN_QUEUE_DEADLINE_SECONDS.max} seconds (default ${RUN_QUEUE_DEADLINE_SECONDS.default})`,
  },
  env: { type: "string", alias: "e", valueHint: "NAME=VALUE", description: "Set a variable in the job (repeatable)" },
  label: { type: "string", valueHint: "KEY=VALUE", description: "Label the run and its VM (repeatable)" },
  "request-id": {
    type: "string",
    valueHint: "KEY",
    description: "Idempotency key: the same key and body answer the same run (default: a fresh one)",
  },
  follow: {
    type: "boolean",
    alias: "f",
    default: false,
    description: "Stream the job's output, wait for its end and exit with its exit code",
  },
  ...clientArgs,
} as const;

const submit = command({
  meta: { name: "submit", description: "Submit a script as a run (bb run JOB.sh is the same)" },
  args: submitArgs,
  examples: [
    "bb run job.sh --class ci-small --follow",
    "bb run submit job.sh --class ci-small --budget 600 -e MODE=ci --json",
  ],
  run: ({ args, rawArgs }) =>
    runCli(async () => {
      const budget = integerFlag("--budget", args.budget, { ...RUN_BUDGET_SECONDS, unit: "seconds" });
      const deadline = optionalIntegerFlag("--queue-deadline", args["queue-deadline"], {
        ...RUN_QUEUE_DEADLINE_SECONDS,
        unit: "seconds",
      });
      const script = readScript(args.script);
      const env = envOf(flagValues(rawArgs, submitArgs, "env"));
      const labels = labelsOf(flagValues(rawArgs, submitArgs, "label"));
      const client = clientFrom(args);
      const { view } = await client
        .submitRun({
          clientRequestId: args["request-id"] ?? randomUUID(),
          workloadClass: args.class,
          scriptBase64: Buffer.from(script).toString("base64"),
          budgetSeconds: budget,
          ...(deadline !== undefined ? { queueDeadlineSeconds: deadline } : {}),
          ...(Object.keys(env).length ? { env } : {}),
          ...(Object.keys(labels).length ? { labels } : {}),
        })
        .catch((e: unknown) =>
          Promise.reject(
            flagError(e, {
              workloadClass: "--class",
              budgetSeconds: "--budget",
              queueDeadlineSeconds: "--queue-deadline",
              env: "--env",
              labels: "--label",
              clientRequestId: "--request-id",
            }),
          ),
        );
      if (!args.follow) {
        if (args.json) return console.log(JSON.stringify(view));
        console.log(view.runId);
        return consola.info(`queued at position ${(view.queue?.position ?? 0) + 1}; \`bb run wait ${view.runId}\``);
      }
      consola.info(`run ${view.runId} queued at position ${(view.queue?.position ?? 0) + 1}`);
      const end = await follow(client, view.runId, budget + (deadline ?? RUN_QUEUE_DEADLINE_SECONDS.default) + 600);
      if (args.json) console.log(JSON.stringify(end));
      else summary(end);
      process.exitCode = runExitCode(end);
    }),
});

const list = command({
  meta: { name: "list", description: "List your runs, newest first" },
  args: {
    limit: { type: "string", valueHint: "N", default: "50", description: `Runs per page, 1 to ${MAX_PAGE_SIZE}` },
    cursor: {
      type: "string",
      valueHint: "CURSOR",
      description: "Continue below this cursor (printed after a full page)",
    },
    ...clientArgs,
  },
  examples: ["bb run list", "bb run list --limit 200 --json"],
  run: ({ args }) =>
    runCli(async () => {
      const limit = integerFlag("--limit", args.limit, { min: 1, max: MAX_PAGE_SIZE, unit: "runs" });
      const cursor = optionalIntegerFlag("--cursor", args.cursor, { min: 0, max: MAX_WIRE_INTEGER, unit: "" });
      const page = await clientFrom(args).listRuns(cursor, limit);
      if (args.json) return console.log(JSON.stringify(page));
      if (page.items.length === 0) return consola.info("no runs: submit one with `bb run JOB.sh --class CLASS`");
      console.log(runTable(page.items));
      if (page.nextCursor !== null) consola.info(`more: bb run list --cursor ${page.nextCursor}`);
    }),
});

const get = command({
  meta: { name: "get", description: "Show one run: state, exit code, timings, queue position" },
  args: { id: idArg, ...clientArgs },
  examples: ["bb run get run_0123456789abcdef0123456789abcdef"],
  run: ({ args }) =>
    runCli(async () => {
      const v = await clientFrom(args)
        .getRun(args.id)
        .catch((e: unknown) => Promise.reject(flagError(e, { ":id": "RUN_ID" })));
      console.log(args.json ? JSON.stringify(v) : runDetail(v));
    }),
});

const logs = command({
  meta: { name: "logs", description: "Print a run's output (kept after its VM is gone); --follow until it ends" },
  args: {
    id: idArg,
    follow: { type: "boolean", alias: "f", default: false, description: "Keep streaming until the run ends" },
    ...clientArgs,
  },
  examples: ["bb run logs run_0123456789abcdef0123456789abcdef --follow"],
  run: ({ args }) =>
    runCli(async () => {
      const client = clientFrom(args);
      let offset = 0;
      for (;;) {
        const page = await client
          .runLogs(args.id, offset, args.follow)
          .catch((e: unknown) => Promise.reject(flagError(e, { ":id": "RUN_ID" })));
        if (page.droppedBytes) process.stderr.write(`[... ${page.droppedBytes} bytes of output dropped ...]\n`);
        process.stdout.write(page.text.replace(/[\x00-\x08\x0b-\x1f\x7f-\x9f]/g, ""));
        const moved = page.nextOffset !== offset;
        offset = page.nextOffset;
        if (page.complete || (!args.follow && !moved)) return;
        if (!page.text && TERMINAL_RUN_STATES.has((await client.getRun(args.id)).state) && !moved) return;
      }
    }),
});

const cancel = command({
  meta: { name: "cancel", description: "Cancel a run: a queued one ends at once, a started one once its VM is gone" },
  args: { id: idArg, ...clientArgs },
  examples: ["bb run cancel run_0123456789abcdef0123456789abcdef"],
  run: ({ args }) =>
    runCli(async () => {
      const v = await clientFrom(args)
        .cancelRun(args.id)
        .catch((e: unknown) => Promise.reject(flagError(e, { ":id": "RUN_ID" })));
      console.log(args.json ? JSON.stringify(v) : runDetail(v));
    }),
});

const wait = command({
  meta: { name: "wait", description: "Wait for a run to end and exit with its exit code" },
  args: {
    id: idArg,
    timeout: {
      type: "string",
      valueHint: "SECONDS",
      default: "3600",
      description: `Give up after this long, 1 to ${MAX_WAIT_SECONDS} seconds`,
    },
    ...clientArgs,
  },
  examples: ["bb run wait run_0123456789abcdef0123456789abcdef --timeout 600"],
  run: ({ args }) =>
    runCli(async () => {
      const timeout = integerFlag("--timeout", args.timeout, { min: 1, max: MAX_WAIT_SECONDS, unit: "seconds" });
      const v = await clientFrom(args)
        .waitRun(args.id, { timeoutMs: timeout * 1000 })
        .catch((e: unknown) => Promise.reject(flagError(e, { ":id": "RUN_ID" })));
      if (args.json) console.log(JSON.stringify(v));
      else summary(v);
      process.exitCode = runExitCode(v);
    }),
});

/** `bb run`: see the module header. */
export const runCommand = command({
  meta: { name: "run", description: "Submit scripts as runs, queued fairly, and read them back" },
  defaultSubcommand: "submit",
  subCommands: { submit, list, get, logs, cancel, wait },
  examples: ["bb run job.sh --class ci-small --follow", "bb run list"],
});
