/**
 * `bb allocation create|get|list|release|events`: the client commands over
 * the public API. Only translate flags to SchedulerClient calls and print.
 */
import { readFileSync, statSync } from "node:fs";
import { randomUUID } from "node:crypto";
import { defineCommand } from "citty";
import { consola } from "consola";
import { MAX_PAYLOAD_BYTES, type AllocationEvent, type AllocationView } from "../protocol/api.ts";
import { clientArgs, clientFrom } from "./common.ts";
import { runCli } from "../command/run.ts";

/** One human line for an event. */
export function formatEvent(e: AllocationEvent): string {
  const st = e.toState ? ` ${e.fromState ?? "∅"} → ${e.toState}` : "";
  const reason = e.reason ? ` [${e.reason}]` : "";
  const exit = e.type === "workload.exited" ? ` exitCode=${String(e.data?.["exitCode"])}` : "";
  const vm = typeof e.data?.["exitReason"] === "string" ? ` vmExit=${e.data["exitReason"]}` : "";
  return `${e.at}  #${e.seq} ${e.type}${st}${reason}${exit}${vm}`;
}

function printView(v: AllocationView, json: boolean): void {
  if (json) return console.log(JSON.stringify(v));
  console.log(`${v.allocationId}  ${v.state}  gen ${v.generation}  class ${v.workloadClass}  host ${v.hostId ?? "-"}${v.reason ? `  reason ${v.reason}` : ""}${v.workloadExitCode !== null ? `  exit ${v.workloadExitCode}` : ""}`);
  const x = v.placementExit;
  if (x) {
    console.log(`VM of generation ${x.generation} ended on its own: ${x.reason} (${x.at}); last kernel lines of its console:`);
    // The tail comes from a host: no control character reaches the terminal.
    for (const line of x.consoleTail.split("\n")) if (line) console.log(`  ${line.replace(/[\x00-\x08\x0b-\x1f\x7f-\x9f]/g, "")}`);
  }
}

const create = defineCommand({
  meta: { name: "create", description: "Request a VM of a workload class; optionally hand it a payload and wait" },
  args: {
    ...clientArgs,
    class: { type: "string", description: "Workload class", required: true },
    payload: { type: "string", description: "Shell script to run in the guest (text/x-shellscript)" },
    "client-request-id": { type: "string", description: "Idempotency key (default: random)" },
    ttl: { type: "string", description: "Lifetime in seconds" },
    wait: { type: "boolean", description: "Wait for the payload to finish (or for ready without a payload); exit 1 if it failed", default: false },
    timeout: { type: "string", description: "Seconds to wait for readiness", default: "300" },
  },
  run: ({ args }) =>
    runCli(async () => {
      const client = clientFrom(args);
      let payload: Uint8Array | null = null;
      if (args.payload) {
        if (statSync(args.payload).size > MAX_PAYLOAD_BYTES) throw Object.assign(new Error(`payload file is over ${MAX_PAYLOAD_BYTES} bytes`), { exitCode: 2 });
        payload = readFileSync(args.payload);
      }
      const ttl = args.ttl ? Number(args.ttl) : undefined;
      const { view } = await client.create({ clientRequestId: args["client-request-id"] ?? randomUUID(), workloadClass: args.class, ...(ttl ? { ttlSeconds: ttl } : {}) });
      if (!args.json) consola.info(`allocation ${view.allocationId} (${view.state})`);
      const timeoutMs = Number(args.timeout) * 1000;
      if (payload) {
        const r = await client.deliverWhenReady(view.allocationId, payload, `dlv-${randomUUID()}`, timeoutMs);
        if (!args.json) consola.success(`payload consumed (${r.digest})`);
      }
      if (args.wait) {
        await client.follow(view.allocationId, (e) => args.json || console.log(formatEvent(e)), {
          until: (e) => (payload ? e.type === "workload.exited" : e.toState === "ready"),
        });
      }
      const final = await client.get(view.allocationId);
      printView(final, args.json);
      // With --wait, a failed allocation or a payload that exited non-zero fails the command (the code is printed above).
      if (args.wait && (final.state === "failed" || (payload && final.workloadExitCode !== null && final.workloadExitCode !== 0))) process.exitCode = 1;
    }),
});

const get = defineCommand({
  meta: { name: "get", description: "Show one allocation" },
  args: { ...clientArgs, id: { type: "positional", required: true, description: "Allocation ID" } },
  run: ({ args }) => runCli(async () => printView(await clientFrom(args).get(args.id), args.json)),
});

const list = defineCommand({
  meta: { name: "list", description: "List your allocations" },
  args: { ...clientArgs, cursor: { type: "string", description: "Resume after this allocation ID" }, limit: { type: "string", default: "50" } },
  run: ({ args }) =>
    runCli(async () => {
      const page = await clientFrom(args).list(args.cursor, Number(args.limit));
      if (args.json) return console.log(JSON.stringify(page));
      for (const v of page.items) printView(v, false);
      if (page.nextCursor) console.log(`next: --cursor ${page.nextCursor}`);
    }),
});

const release = defineCommand({
  meta: { name: "release", description: "Release an allocation (destroys its VM)" },
  args: { ...clientArgs, id: { type: "positional", required: true, description: "Allocation ID" }, wait: { type: "boolean", default: false, description: "Wait until released" } },
  run: ({ args }) =>
    runCli(async () => {
      const client = clientFrom(args);
      let v = await client.release(args.id);
      if (args.wait) {
        await client.follow(args.id, () => {});
        v = await client.get(args.id);
      }
      printView(v, args.json);
    }),
});

const events = defineCommand({
  meta: { name: "events", description: "Show an allocation's events; --follow streams NDJSON until it is terminal" },
  args: {
    ...clientArgs,
    id: { type: "positional", required: true, description: "Allocation ID" },
    follow: { type: "boolean", default: false, description: "Keep streaming (NDJSON with --json)" },
    after: { type: "string", default: "0", description: "Resume after this sequence number" },
  },
  run: ({ args }) =>
    runCli(async () => {
      const client = clientFrom(args);
      const print = (e: AllocationEvent) => console.log(args.json ? JSON.stringify(e) : formatEvent(e));
      if (args.follow) return void (await client.follow(args.id, print, { after: Number(args.after) }));
      for (const e of await client.events(args.id, Number(args.after), 200)) print(e);
    }),
});

const authorizeReplacement = defineCommand({
  meta: { name: "authorize-replacement", description: "Certify that the workload's external authority was revoked, so a blocked replacement may start" },
  args: { ...clientArgs, id: { type: "positional", required: true, description: "Allocation ID" }, generation: { type: "string", required: true, description: "The generation being replaced" } },
  run: ({ args }) => runCli(async () => printView(await clientFrom(args).authorizeReplacement(args.id, Number(args.generation)), args.json)),
});

/** The `bb allocation` command group. */
export const allocationCommand = defineCommand({
  meta: { name: "allocation", description: "Request, inspect and release VMs" },
  subCommands: { create, get, list, release, events, "authorize-replacement": authorizeReplacement },
});
