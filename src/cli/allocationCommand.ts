/**
 * `bb allocation create|get|list|release|pause|suspend|resume|events|logs|authorize-replacement`:
 * the client commands over the public API. They only check flags, call
 * SchedulerClient and print: results on stdout (tables, detail blocks or
 * `--json`), progress on stderr (a spinner on a terminal). Allocation IDs
 * may be given by a unique prefix (src/command/allocationId.ts).
 *
 * Exit codes (src/command/run.ts): 0 ok; 1 error or a failed allocation;
 * 2 usage; 3 `--wait` gave up before any host took the allocation; 4 auth.
 * `create --payload --wait` exits with the payload's own exit code once the
 * guest reported it (`--no-workload-exit-code`: 1 for any non-zero code);
 * see workloadExit.
 */
import { readFileSync, statSync } from "node:fs";
import { randomUUID } from "node:crypto";
import { consola } from "consola";
import {
  CreateAllocationBody,
  MAX_FORKS_PER_REQUEST,
  MAX_PAGE_SIZE,
  MAX_PAYLOAD_BYTES,
  MAX_WIRE_INTEGER,
  type AllocationEvent,
  type AllocationView,
} from "../protocol/api.ts";
import { command } from "../command/define.ts";
import { EXIT, runCli, UsageError } from "../command/run.ts";
import { progress } from "../command/terminal.ts";
import { integerFlag, optionalIntegerFlag } from "../command/values.ts";
import { ALLOCATION_ID } from "../protocol/ids.ts";
import { resolveAllocationId } from "../command/allocationId.ts";
import { clientArgs } from "../command/clientArgs.ts";
import { clientFrom, flagError } from "./common.ts";
import { allocationDetail, allocationTable, formatEvent } from "./format.ts";
import { lastEventSeq, notPlacedMessage, UNPLACED_STATES, waitFor, type WaitGoal } from "./wait.ts";

export { formatEvent } from "./format.ts";

/** Longest `--timeout`, seconds (a week, the longest TTL a create accepts). */
export const MAX_WAIT_SECONDS = 7 * 24 * 3600;
/** Bounds of `--ttl`, seconds: the create body's own (src/protocol/api.ts). */
export const TTL_BOUNDS = {
  min: CreateAllocationBody.properties.ttlSeconds.minimum!,
  max: CreateAllocationBody.properties.ttlSeconds.maximum!,
  unit: "seconds",
};

const timeoutArg = {
  type: "string",
  valueHint: "SECONDS",
  description: "Give up waiting after this long, whatever the state",
  default: "300",
} as const;
const idArg = { type: "positional", required: true, description: "Allocation ID, or a unique prefix of one" } as const;

function printView(v: AllocationView, json: boolean): void {
  console.log(json ? JSON.stringify(v) : allocationDetail(v));
}

function readPayload(path: string): Uint8Array {
  let size: number;
  try {
    size = statSync(path).size;
  } catch (e) {
    throw new UsageError(`cannot read --payload ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  if (size > MAX_PAYLOAD_BYTES)
    throw new UsageError(`--payload ${path} is ${size} bytes; a payload is at most ${MAX_PAYLOAD_BYTES} bytes`);
  return readFileSync(path);
}

const create = command({
  meta: { name: "create", description: "Request a VM of a workload class; optionally hand it a payload and wait" },
  args: {
    class: {
      type: "string",
      valueHint: "CLASS",
      description: "Workload class (the manifest's workloadClasses)",
      required: true,
    },
    payload: {
      type: "string",
      valueHint: "FILE",
      description: "Shell script to run in the guest once it is ready (text/x-shellscript, at most 256 KiB)",
    },
    ttl: {
      type: "string",
      valueHint: "SECONDS",
      description: `Lifetime, ${TTL_BOUNDS.min} to ${TTL_BOUNDS.max} seconds (the class may cap it; default: the scheduler's)`,
    },
    wait: {
      type: "boolean",
      description:
        "Wait until ready, or with --payload until the payload exits; exit 1 if it failed, 3 if no host took it in time",
      default: false,
    },
    "workload-exit-code": {
      type: "boolean",
      description:
        "With --payload --wait, exit with the payload's exit code (--no-workload-exit-code: exit 1 for any non-zero code)",
      default: true,
    },
    timeout: timeoutArg,
    "client-request-id": {
      type: "string",
      valueHint: "KEY",
      description: "Idempotency key: the same key returns the same allocation (default: random)",
    },
    quiet: { type: "boolean", alias: "q", description: "Print only the allocation ID", default: false },
    ...clientArgs,
  },
  examples: [
    "bb allocation create --class ci-small",
    "bb allocation create --class ci-small --ttl 600 --wait --timeout 120",
    "bb allocation create --class ci-small --payload job.sh --wait",
    "bb allocation create --class ci-small --payload job.sh --wait --no-workload-exit-code",
    "bb allocation create --class ci-small --client-request-id build-1234 --json",
  ],
  run: ({ args }) =>
    runCli(async () => {
      const ttl = optionalIntegerFlag("--ttl", args.ttl, TTL_BOUNDS);
      const timeoutS = integerFlag("--timeout", args.timeout, { min: 1, max: MAX_WAIT_SECONDS, unit: "seconds" });
      const payload = args.payload ? readPayload(args.payload) : null;
      const client = clientFrom(args);
      const quiet = args.json || args.quiet;
      const deadline = Date.now() + timeoutS * 1000;
      let view: AllocationView;
      try {
        ({ view } = await client.create({
          clientRequestId: args["client-request-id"] ?? randomUUID(),
          workloadClass: args.class,
          ...(ttl !== undefined ? { ttlSeconds: ttl } : {}),
        }));
      } catch (e) {
        throw flagError(e, { ttlSeconds: "--ttl", workloadClass: "--class", clientRequestId: "--client-request-id" });
      }
      const id = view.allocationId;
      if (!quiet) consola.info(`allocation ${id} (${view.state})`);
      const p = progress(process.stderr, quiet);
      const onEvent = (e: AllocationEvent) => {
        p.note(formatEvent(e));
        if (e.toState) p.update(`${id}: ${e.toState}`);
      };
      let seq = 0;
      try {
        if (payload || args.wait) {
          p.update(`${id}: waiting for a host and a ready guest`);
          const r = await waitFor(client, id, "ready", deadline, onEvent);
          seq = r.lastSeq;
          view = r.view;
          if (r.timedOut) return finishTimedOut(view, timeoutS, args, p.stop);
        }
        if (payload && view.state === "ready") {
          p.update(`${id}: handing over the payload`);
          const d = await client.deliverWhenReady(
            id,
            payload,
            `dlv-${randomUUID()}`,
            Math.max(1, deadline - Date.now()),
          );
          p.note(`payload consumed (${d.digest})`);
          if (args.wait) {
            p.update(`${id}: payload running`);
            const r = await waitFor(client, id, "exited", deadline, onEvent, seq);
            view = r.view;
            if (r.timedOut) return finishTimedOut(view, timeoutS, args, p.stop);
          }
        }
      } finally {
        p.stop();
      }
      if (payload && !args.wait) view = await client.get(id);
      console.log(show(view, args));
      // With --wait (or a payload), a failed allocation or a payload that exited non-zero fails the command.
      if ((args.wait || payload) && (view.state === "failed" || view.state === "released")) {
        consola.error(`allocation ${id} is ${view.state}${view.reason ? ` (${view.reason})` : ""}`);
        process.exitCode = EXIT.error;
      } else if (args.wait && payload && view.workloadExitCode !== null && view.workloadExitCode !== 0) {
        consola.error(`the payload exited with code ${view.workloadExitCode}`);
        process.exitCode = workloadExit(view.workloadExitCode, args["workload-exit-code"]);
      }
    }),
});

/**
 * The command's exit code for a payload that exited with `code` (non-zero):
 * the code itself when `own` (the default), if it is one a process can exit
 * with (1 to 255), else EXIT.error.
 */
export function workloadExit(code: number, own: boolean): number {
  return own && Number.isInteger(code) && code >= 1 && code <= 255 ? code : EXIT.error;
}

/** The create result as `--quiet` (the ID), `--json` or a detail block asks. */
function show(view: AllocationView, how: { quiet: boolean; json: boolean }): string {
  return how.quiet ? view.allocationId : how.json ? JSON.stringify(view) : allocationDetail(view);
}

/** Prints the view and why the wait gave up; exit 3 when no host took it, else 1. */
function finishTimedOut(
  view: AllocationView,
  waitedS: number,
  how: { quiet: boolean; json: boolean },
  stop: () => void,
): void {
  stop();
  console.log(show(view, how));
  if (UNPLACED_STATES.has(view.state)) {
    consola.error(notPlacedMessage(view, waitedS));
    process.exitCode = EXIT.notPlaced;
  } else {
    consola.error(
      `gave up after ${waitedS} s: allocation ${view.allocationId} is ${view.state} on ${view.hostId ?? "no host"}`,
    );
    process.exitCode = EXIT.error;
  }
}

const get = command({
  meta: { name: "get", description: "Show one allocation, and why it is still pending" },
  args: { id: idArg, ...clientArgs },
  examples: [
    "bb allocation get alloc_3f2a9c0e7b1d4a5f8e6c2b0a9d8f7e6c",
    "bb allocation get 3f2a",
    "bb allocation get 3f2a --json",
  ],
  run: ({ args }) =>
    runCli(async () => {
      const client = clientFrom(args);
      printView(await client.get(await resolveAllocationId(client, args.id)), args.json);
    }),
});

const list = command({
  meta: { name: "list", description: "List your allocations" },
  args: {
    limit: {
      type: "string",
      valueHint: "N",
      description: `Most allocations on one page, 1 to ${MAX_PAGE_SIZE}`,
      default: "50",
    },
    cursor: {
      type: "string",
      valueHint: "ID",
      description: "Resume after this allocation ID (printed as `next:` under a full page)",
    },
    quiet: { type: "boolean", alias: "q", description: "Print only the allocation IDs", default: false },
    ...clientArgs,
  },
  examples: ["bb allocation list", "bb allocation list --limit 200 --json", "bb allocation list -q"],
  run: ({ args }) =>
    runCli(async () => {
      const limit = integerFlag("--limit", args.limit, { min: 1, max: MAX_PAGE_SIZE });
      if (args.cursor !== undefined && !ALLOCATION_ID.test(args.cursor))
        throw new UsageError(`--cursor must be an allocation ID (got ${JSON.stringify(args.cursor)})`);
      const page = await clientFrom(args).list(args.cursor, limit);
      if (args.json) return console.log(JSON.stringify(page));
      if (args.quiet) return page.items.forEach((v) => console.log(v.allocationId));
      if (page.items.length === 0) consola.info("no allocations");
      else console.log(allocationTable(page.items));
      if (page.nextCursor) consola.info(`next: bb allocation list --cursor ${page.nextCursor}`);
    }),
});

const release = command({
  meta: { name: "release", description: "Release an allocation (destroys its VM)" },
  args: {
    id: idArg,
    wait: { type: "boolean", default: false, description: "Wait until it is released (the VM and its files are gone)" },
    timeout: timeoutArg,
    ...clientArgs,
  },
  examples: [
    "bb allocation release 3f2a",
    "bb allocation release alloc_3f2a9c0e7b1d4a5f8e6c2b0a9d8f7e6c --wait --timeout 60",
  ],
  run: ({ args }) =>
    runCli(async () => {
      const timeoutS = integerFlag("--timeout", args.timeout, { min: 1, max: MAX_WAIT_SECONDS, unit: "seconds" });
      const client = clientFrom(args);
      const id = await resolveAllocationId(client, args.id);
      let v = await client.release(id);
      if (args.wait) {
        const p = progress(process.stderr, args.json);
        p.update(`${id}: releasing`);
        try {
          const r = await waitFor(
            client,
            id,
            "released",
            Date.now() + timeoutS * 1000,
            (e) => e.toState && p.update(`${id}: ${e.toState}`),
          );
          v = r.view;
          if (r.timedOut) {
            consola.error(
              `gave up after ${timeoutS} s: allocation ${id} is ${v.state}${v.conditions.length ? ` (${v.conditions.join(", ")})` : ""}`,
            );
            process.exitCode = EXIT.error;
          }
        } finally {
          p.stop();
        }
      }
      printView(v, args.json);
    }),
});

/**
 * One of `bb allocation pause|suspend|resume` (issue 21): sends the request
 * and, with --wait, follows the events from the ones before it until the
 * allocation is `goal` (or the request was refused, or the deadline).
 */
function transitionCommand(
  name: "pause" | "suspend" | "resume",
  description: string,
  goal: WaitGoal,
  waitText: string,
) {
  return command({
    meta: { name, description },
    args: {
      id: idArg,
      wait: { type: "boolean", default: false, description: waitText },
      timeout: timeoutArg,
      ...clientArgs,
    },
    examples: [`bb allocation ${name} 3f2a`, `bb allocation ${name} 3f2a --wait --timeout 60`],
    run: ({ args }) =>
      runCli(async () => {
        const timeoutS = integerFlag("--timeout", args.timeout, { min: 1, max: MAX_WAIT_SECONDS, unit: "seconds" });
        const client = clientFrom(args);
        const id = await resolveAllocationId(client, args.id);
        const after = args.wait ? await lastEventSeq(client, id) : 0;
        let v = await client[name](id);
        if (args.wait && v.state !== goal) {
          const p = progress(process.stderr, args.json);
          p.update(`${id}: ${v.state}`);
          try {
            const r = await waitFor(
              client,
              id,
              goal,
              Date.now() + timeoutS * 1000,
              (e) => e.toState && p.update(`${id}: ${e.toState}`),
              after,
            );
            v = r.view;
            if (r.timedOut || v.state !== goal) {
              consola.error(
                `${r.timedOut ? `gave up after ${timeoutS} s: ` : ""}allocation ${id} is ${v.state}${v.reason ? ` (${v.reason})` : ""}${v.conditions.length ? ` (${v.conditions.join(", ")})` : ""}, not ${goal}`,
              );
              process.exitCode = EXIT.error;
            }
          } finally {
            p.stop();
          }
        }
        printView(v, args.json);
      }),
  });
}

const pause = transitionCommand(
  "pause",
  "Pause an allocation's VM: its vCPUs stop, its memory stays, its CPU goes back to the host",
  "paused",
  "Wait until it is paused",
);
const suspend = transitionCommand(
  "suspend",
  "Suspend an allocation's VM to its host's disk (its class must be suspendable): CPU and memory go back to the host",
  "suspended",
  "Wait until it is suspended",
);
const resume = transitionCommand(
  "resume",
  "Resume a paused or suspended VM (a suspended one comes back as the next generation)",
  "ready",
  "Wait until it is ready again",
);

const fork = command({
  meta: {
    name: "fork",
    description:
      "Fork a suspended VM: new allocations restored from its snapshot on its host, each with its own identity and address",
  },
  args: {
    id: idArg,
    count: {
      type: "string",
      valueHint: "N",
      default: "1",
      description: `How many forks, 1 to ${MAX_FORKS_PER_REQUEST}`,
    },
    "allow-consumed-payload": {
      type: "boolean",
      default: false,
      description:
        "Fork although the parent consumed a bootstrap payload (each fork holds what it gave the parent, and may take its own)",
    },
    ttl: {
      type: "string",
      valueHint: "SECONDS",
      description: `Lifetime of each fork, ${TTL_BOUNDS.min} to ${TTL_BOUNDS.max} seconds (the class may cap it)`,
    },
    wait: { type: "boolean", default: false, description: "Wait until every fork is ready; exit 1 if one is not" },
    timeout: timeoutArg,
    "client-request-id": {
      type: "string",
      valueHint: "KEY",
      description: "Idempotency key: the same key returns the same forks (default: random)",
    },
    ...clientArgs,
  },
  examples: ["bb allocation fork 3f2a", "bb allocation fork 3f2a --count 2 --wait --timeout 60 --json"],
  run: ({ args }) =>
    runCli(async () => {
      const count = integerFlag("--count", args.count, { min: 1, max: MAX_FORKS_PER_REQUEST, unit: "forks" });
      const ttl = optionalIntegerFlag("--ttl", args.ttl, TTL_BOUNDS);
      const timeoutS = integerFlag("--timeout", args.timeout, { min: 1, max: MAX_WAIT_SECONDS, unit: "seconds" });
      const client = clientFrom(args);
      const id = await resolveAllocationId(client, args.id);
      let items: AllocationView[];
      try {
        ({ items } = await client.fork(id, {
          clientRequestId: args["client-request-id"] ?? randomUUID(),
          count,
          ...(args["allow-consumed-payload"] ? { allowConsumedPayload: true } : {}),
          ...(ttl !== undefined ? { ttlSeconds: ttl } : {}),
        }));
      } catch (e) {
        throw flagError(e, { ttlSeconds: "--ttl", count: "--count", clientRequestId: "--client-request-id" });
      }
      if (args.wait) {
        const deadline = Date.now() + timeoutS * 1000;
        const p = progress(process.stderr, args.json);
        try {
          for (const [i, v] of items.entries()) {
            if (v.state === "ready") continue;
            const r = await waitFor(client, v.allocationId, "ready", deadline, (e) =>
              e.toState ? p.update(`${v.allocationId}: ${e.toState}`) : undefined,
            );
            items[i] = r.view;
            if (r.view.state !== "ready") {
              consola.error(
                `${r.timedOut ? `gave up after ${timeoutS} s: ` : ""}fork ${v.allocationId} is ${r.view.state}${r.view.reason ? ` (${r.view.reason})` : ""}, not ready`,
              );
              process.exitCode = EXIT.error;
            }
          }
        } finally {
          p.stop();
        }
      }
      if (args.json) console.log(JSON.stringify({ items }, null, 2));
      else console.log(allocationTable(items));
    }),
});

const events = command({
  meta: {
    name: "events",
    description: "Show an allocation's events; --follow streams them until it is released or failed",
  },
  args: {
    id: idArg,
    follow: {
      type: "boolean",
      default: false,
      description: "Keep streaming (NDJSON with --json) until the allocation is terminal",
    },
    after: { type: "string", valueHint: "SEQ", default: "0", description: "Resume after this sequence number" },
    ...clientArgs,
  },
  examples: [
    "bb allocation events 3f2a",
    "bb allocation events 3f2a --follow --json",
    "bb allocation events 3f2a --follow --after 12",
  ],
  run: ({ args }) =>
    runCli(async () => {
      const after = integerFlag("--after", args.after, { min: 0, max: MAX_WIRE_INTEGER });
      const client = clientFrom(args);
      const id = await resolveAllocationId(client, args.id);
      const print = (e: AllocationEvent) => console.log(args.json ? JSON.stringify(e) : formatEvent(e));
      if (args.follow) return void (await client.follow(id, print, { after }));
      const items = await client.events(id, after, MAX_PAGE_SIZE);
      if (items.length === 0 && !args.json) consola.info(after ? `no events after #${after}` : "no events");
      for (const e of items) print(e);
    }),
});

const logs = command({
  meta: {
    name: "logs",
    description:
      "Print an allocation's workload output (the job's own lines from its guest's console, without kernel lines or markers; the scheduler keeps its last 1 MiB, and output no longer kept or lost on the host shows as a `[... N bytes of output dropped ...]` line on stderr); --follow keeps streaming until it is released or failed",
  },
  args: {
    id: idArg,
    follow: {
      type: "boolean",
      default: false,
      description: "Keep streaming until the allocation is released or failed",
    },
    offset: {
      type: "string",
      valueHint: "BYTES",
      default: "0",
      description: "Start at this byte offset (--json prints nextOffset to resume at)",
    },
    ...clientArgs,
  },
  examples: [
    "bb allocation logs 3f2a",
    "bb allocation logs 3f2a --follow",
    "bb allocation logs 3f2a --follow --json --offset 4096",
  ],
  run: ({ args }) =>
    runCli(async () => {
      const offset = integerFlag("--offset", args.offset, { min: 0, max: MAX_WIRE_INTEGER, unit: "bytes" });
      const client = clientFrom(args);
      const id = await resolveAllocationId(client, args.id);
      await client.streamLogs(
        id,
        (p) => {
          if (args.json) return console.log(JSON.stringify(p));
          if (p.droppedBytes) process.stderr.write(`[... ${p.droppedBytes} bytes of output dropped ...]\n`);
          // The text comes from a host: no control character but newline and tab reaches the terminal.
          process.stdout.write(p.text.replace(/[\x00-\x08\x0b-\x1f\x7f-\x9f]/g, ""));
        },
        { offset, follow: args.follow },
      );
    }),
});

const authorizeReplacement = command({
  meta: {
    name: "authorize-replacement",
    description: "Certify that the workload's external authority was revoked, so a blocked replacement may start",
  },
  args: {
    id: idArg,
    generation: {
      type: "string",
      valueHint: "N",
      required: true,
      description: "The generation being replaced (from `bb allocation get`)",
    },
    ...clientArgs,
  },
  examples: ["bb allocation authorize-replacement 3f2a --generation 1"],
  run: ({ args }) =>
    runCli(async () => {
      const generation = integerFlag("--generation", args.generation, { min: 1, max: MAX_WIRE_INTEGER });
      const client = clientFrom(args);
      printView(await client.authorizeReplacement(await resolveAllocationId(client, args.id), generation), args.json);
    }),
});

/** The `bb allocation` command group. */
export const allocationCommand = command({
  meta: { name: "allocation", description: "Request, inspect and release VMs" },
  examples: ["bb allocation create --class ci-small --wait", "bb allocation list", "bb allocation release 3f2a --wait"],
  subCommands: {
    create,
    get,
    list,
    release,
    pause,
    suspend,
    resume,
    fork,
    events,
    logs,
    "authorize-replacement": authorizeReplacement,
  },
});
