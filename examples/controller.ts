/**
 * An example workload controller using only the public client
 * (`beachball/client`): it asks the scheduler what it offers, creates
 * allocations with stable idempotency keys (so running it again after a
 * crash replays instead of doubling), waits until each is ready, hands each
 * a bootstrap script when asked, and releases them, waiting for the release
 * to finish. A real controller (e.g. a CI runner pool) has the same loop.
 *
 *   BB_SCHEDULER_URL=http://127.0.0.1:7380 BB_TOKEN=… bun examples/controller.ts \
 *     [--count 2] [--class NAME] [--run-id ID] [--timeout-seconds 120] [--script 'echo hi']
 *
 * Prints one JSON line per step on stdout (`created`, `ready`, `delivered`,
 * `released`). Exit codes: 0 done, 1 an API error (its stable code on
 * stderr), 2 bad usage, 3 a wait timed out (e.g. no host has room: the
 * allocation stays pending with NO_CAPACITY).
 */
import { parseArgs } from "node:util";
import { BeachballError, SchedulerClient, WaitTimeoutError, type AllocationView } from "beachball/client";

function usage(message: string): never {
  process.stderr.write(`controller: ${message}\n`);
  process.exit(2);
}

const { values } = parseArgs({
  options: {
    count: { type: "string", default: "2" },
    class: { type: "string" },
    "run-id": { type: "string", default: `example-${Date.now().toString(36)}` },
    "timeout-seconds": { type: "string", default: "120" },
    script: { type: "string" },
  },
  strict: true,
});
const url = process.env["BB_SCHEDULER_URL"];
const token = process.env["BB_TOKEN"];
if (!url || !token) usage("set BB_SCHEDULER_URL and BB_TOKEN (a controller's token)");
const count = Number(values.count);
const timeoutMs = Number(values["timeout-seconds"]) * 1000;
if (!Number.isInteger(count) || count < 1 || count > 50) usage("--count must be an integer from 1 to 50");
if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) usage("--timeout-seconds must be a positive number");

const emit = (step: string, v: AllocationView, extra: Record<string, unknown> = {}) =>
  process.stdout.write(
    `${JSON.stringify({ step, allocationId: v.allocationId, state: v.state, hostId: v.hostId, ...extra })}\n`,
  );

async function main(): Promise<void> {
  const client = new SchedulerClient(url!, token!);
  const offer = await client.discover();
  const workloadClass = values.class ?? offer.workloadClasses[0];
  if (!workloadClass) throw new Error("the scheduler offers no workload class");

  // Create: the key is stable per run and index, so a rerun with the same --run-id finds the same allocations.
  const created = await Promise.all(
    Array.from({ length: count }, (_, i) =>
      client.create({
        clientRequestId: `${values["run-id"]}-${i}`,
        workloadClass,
        labels: { "created-by": "example-controller" },
      }),
    ),
  );
  for (const c of created) emit("created", c.view, { replayed: !c.created });

  try {
    // Wait: ready means the VM runs and its guest can take a bootstrap payload.
    const ready = await Promise.all(
      created.map((c) => client.waitFor(c.view.allocationId, (v) => v.state === "ready", { timeoutMs })),
    );
    for (const v of ready) emit("ready", v);
    if (values.script !== undefined) {
      for (const v of ready) {
        const r = await client.deliverWhenReady(
          v.allocationId,
          new TextEncoder().encode(values.script),
          `${values["run-id"]}-script`,
          timeoutMs,
        );
        emit("delivered", v, { digest: r.digest });
      }
    }
  } finally {
    // Release, whatever happened above: an allocation left behind holds capacity until its TTL.
    const released = await Promise.all(
      created.map(async (c) => {
        await client.release(c.view.allocationId);
        return client.waitFor(c.view.allocationId, (v) => v.state === "released" || v.state === "failed", {
          timeoutMs,
        });
      }),
    );
    for (const v of released) emit("released", v);
  }
}

main().catch((e: unknown) => {
  if (e instanceof WaitTimeoutError) {
    process.stderr.write(`controller: ${e.message}\n`);
    process.exit(3);
  }
  process.stderr.write(`controller: ${e instanceof BeachballError ? `${e.code}: ${e.message}` : String(e)}\n`);
  process.exit(1);
});
