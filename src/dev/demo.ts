/**
 * The newcomer's main job (`bb dev demo`): on one machine, start a
 * scheduler and an agent with embedded defaults, build the dev image if
 * missing, submit a sample CI-like job, stream its output and events,
 * release it, print a per-phase timing breakdown, and check that nothing of
 * the placement is left behind.
 * Must never: leave a VM, namespace or allocation directory behind on a
 * normal exit, or print a token.
 */
import { existsSync, readFileSync, rmSync, openSync, readSync, closeSync, fstatSync } from "node:fs";
import { join, resolve } from "node:path";
import { randomUUID } from "node:crypto";
import { MAX_PAYLOAD_BYTES, type AllocationEvent } from "../protocol/api.ts";
import { JOB_EXIT_MARKER, JOB_START_MARKER } from "../protocol/guest.ts";
import { isWorkloadLine } from "../agent/logs/jobOutput.ts";
import { buildDevImage } from "../image/devBuild.ts";
import { ensureDevManifest, publishDevClientConfig } from "../scheduler/manifest.ts";
import { serveScheduler, type RunningScheduler } from "../scheduler/serve.ts";
import { AgentDaemon } from "../agent/daemon.ts";
import { joinScheduler } from "../agent/join.ts";
import { agentPaths } from "../agent/config.ts";
import { placementDirName } from "../agent/resourceNames.ts";
import { listPlacementNetworks } from "../agent/isolation/placementNet.ts";
import { SchedulerClient } from "../client/index.ts";
import { formatEvent } from "../cli/allocationCommand.ts";
import { pickBb } from "../image/bbBinary.ts";
import { UsageError } from "../command/run.ts";

/** The sample job: a small CI-like script (runs in the guest with /bin/sh). */
export const SAMPLE_JOB = `#!/bin/sh
set -e
echo "job: hello from $(hostname) running $(uname -sr)"
echo "job: $(grep -c ^processor /proc/cpuinfo) vCPU, $(awk '/MemTotal/ {print int($2/1024)}' /proc/meminfo) MiB"
echo "job: building..."
i=0; sum=0
while [ $i -lt 2000 ]; do sum=$((sum + i * i)); i=$((i + 1)); done
echo "job: checksum $sum"
echo "job: tests passed"
`;

/** Options of runDevDemo. */
export interface DemoOptions {
  /** Root of demo state (default `.bb`). */
  root: string;
  /** The job's script. */
  payload: string;
  /** Line printer. */
  print: (line: string) => void;
  /** Status printer (progress, not job output). */
  status: (line: string) => void;
  /** Aborts the run (Ctrl-C): the allocation is released and waited for before the demo returns. */
  signal?: AbortSignal;
}

/** What the demo observed. */
export interface DemoResult {
  allocationId: string;
  jobOutput: string[];
  exitCode: number | null;
  states: string[];
  events: AllocationEvent[];
  timings: { phase: string; ms: number }[];
  leftovers: string[];
}

const PHASES: [string, (e: AllocationEvent) => boolean, (e: AllocationEvent) => boolean][] = [
  ["queued (created → reserved)", (e) => e.type === "allocation.created", (e) => e.type === "allocation.provisioning"],
  ["reserved → prepared", (e) => e.type === "allocation.provisioning", (e) => e.type === "placement.prepared"],
  ["prepared → booted (VMM started)", (e) => e.type === "placement.prepared", (e) => e.type === "placement.starting"],
  ["booted → guest ready", (e) => e.type === "placement.starting", (e) => e.type === "allocation.ready"],
  ["guest ready → payload consumed", (e) => e.type === "allocation.ready", (e) => e.type === "bootstrap.consumed"],
  ["payload consumed → payload done", (e) => e.type === "bootstrap.consumed", (e) => e.type === "workload.exited"],
  [
    "release → absent (released)",
    (e) => e.type === "allocation.release_requested",
    (e) => e.type === "allocation.released" || e.type === "allocation.failed",
  ],
];

/** Per-phase durations from an event list (ms). Phases whose events are missing are skipped. */
export function phaseTimings(events: AllocationEvent[]): { phase: string; ms: number }[] {
  const out: { phase: string; ms: number }[] = [];
  for (const [phase, from, to] of PHASES) {
    const a = events.find(from);
    const b = a && events.find((e) => e.seq > a.seq && to(e));
    if (a && b) out.push({ phase, ms: Date.parse(b.at) - Date.parse(a.at) });
  }
  const first = events[0];
  const last = events[events.length - 1];
  if (first && last) out.push({ phase: "total", ms: Date.parse(last.at) - Date.parse(first.at) });
  return out;
}

/** Follows a growing file, calling `onLine` for complete lines, until `stop()` is called. */
function tailFile(path: string, onLine: (l: string) => void): { stop: () => void } {
  let offset = 0;
  let partial = "";
  let stopped = false;
  const tick = () => {
    if (!existsSync(path)) return;
    try {
      const fd = openSync(path, "r");
      try {
        const size = fstatSync(fd).size;
        if (size < offset) offset = 0;
        if (size > offset) {
          const buf = Buffer.alloc(Math.min(size - offset, 1 << 20));
          const n = readSync(fd, buf, 0, buf.length, offset);
          offset += n;
          const text = partial + buf.subarray(0, n).toString("utf8");
          const lines = text.split(/\r?\n/);
          partial = lines.pop() ?? "";
          for (const l of lines) onLine(l);
        }
      } finally {
        closeSync(fd);
      }
    } catch {
      /* the file went away with the allocation directory */
    }
  };
  const timer = setInterval(() => !stopped && tick(), 100);
  return {
    stop: () => {
      tick();
      stopped = true;
      clearInterval(timer);
    },
  };
}

/** How long the demo waits for allocations an earlier run left behind to be gone, ms. */
const LEFTOVER_RELEASE_WAIT_MS = 120_000;
/** How long the demo waits for its allocation to be gone after a failure, ms. */
const FAILURE_RELEASE_WAIT_MS = 60_000;

/** Waits (event-driven, SchedulerClient.waitFor) until `id` is released or failed, or `deadline` (epoch ms) passes; never throws. */
async function waitUntilGone(client: SchedulerClient, id: string, deadline: number): Promise<void> {
  await client
    .waitFor(id, (v) => v.state === "released" || v.state === "failed", {
      timeoutMs: Math.max(0, deadline - Date.now()),
    })
    .catch(() => undefined);
}

/** Releases allocations an interrupted earlier run left behind and waits (bounded) until they are gone. */
async function releaseLeftovers(client: SchedulerClient, status: (l: string) => void): Promise<void> {
  const open = (await client.list(undefined, 200)).items.filter((v) => v.state !== "released" && v.state !== "failed");
  for (const v of open) {
    status(`releasing ${v.allocationId} left by an earlier run (${v.state})`);
    await client.release(v.allocationId);
  }
  const deadline = Date.now() + LEFTOVER_RELEASE_WAIT_MS;
  for (const v of open) await waitUntilGone(client, v.allocationId, deadline);
}

/**
 * Refuses a job script the scheduler would refuse, before anything boots.
 * Throws UsageError (exit 2) naming the size and the limit.
 */
export function checkPayloadSize(bytes: number, what = "the payload"): void {
  if (bytes > MAX_PAYLOAD_BYTES)
    throw new UsageError(
      `${what} is ${bytes} bytes; a bootstrap payload is at most ${MAX_PAYLOAD_BYTES} bytes (${MAX_PAYLOAD_BYTES / 1024} KiB): nothing was started`,
    );
}

/**
 * Runs the demo end to end. Throws with a clear message when a
 * prerequisite is missing or the payload is too large (checked first). On
 * any error or interrupt it releases what it started, stops every timer it
 * armed and both roles, so the process can exit on its own.
 */
export async function runDevDemo(opts: DemoOptions): Promise<DemoResult> {
  checkPayloadSize(Buffer.byteLength(opts.payload));
  const root = resolve(opts.root);
  if (process.getuid?.() !== 0) throw new Error("the demo creates network namespaces and TAP devices: run it as root");
  if (!Bun.which("qemu-system-x86_64"))
    throw new Error("qemu-system-x86_64 is missing: apt-get install -y qemu-system-x86");
  opts.status("building the dev image (cached after the first run)");
  const image = await buildDevImage({
    outDir: join(root, "images", "dev"),
    cacheDir: join(root, "cache"),
    bbBinaryPath: await pickBb(undefined, opts.status),
    log: opts.status,
  });
  opts.status(`dev image ${image.digest}${image.reused ? " (reused)" : ""}`);

  const schedDir = join(root, "demo", "scheduler");
  const agentDir = join(root, "demo", "agent");
  const dev = ensureDevManifest(schedDir, image.digest);
  let scheduler: RunningScheduler | null = serveScheduler({
    dataDir: schedDir,
    manifestPath: dev.manifestPath,
    hostname: "127.0.0.1",
    port: 0,
  });
  let agent: AgentDaemon | null = null;
  let allocationId: string | null = null;
  let released = false;
  let releaser: SchedulerClient | null = null;
  let tail: { stop: () => void } | null = null;
  try {
    // The demo's scheduler lives only as long as the demo: its URL is not published to .bb/client.json.
    publishDevClientConfig(dev, scheduler.url, []);
    const tokens = JSON.parse(readFileSync(dev.clientConfigPath, "utf8")) as { token: string; operatorToken: string };
    const operator = new SchedulerClient(scheduler.url, tokens.operatorToken);
    const client = new SchedulerClient(scheduler.url, tokens.token);
    releaser = client;
    const hostId = "dev-host";
    const known = (await operator.hosts()).some((h) => h.hostId === hostId);
    if (!known && existsSync(agentDir)) rmSync(agentDir, { recursive: true, force: true });
    if (!known || !existsSync(agentPaths(agentDir).credential)) {
      const t = await operator.enrollmentToken(hostId);
      await joinScheduler({ schedulerUrl: scheduler.url, token: t.token, dataDir: agentDir, imageDirs: [image.dir] });
    } else {
      // The scheduler's port changes per run: point the joined agent at it.
      const cfgPath = agentPaths(agentDir).config;
      const cfg = JSON.parse(readFileSync(cfgPath, "utf8")) as { schedulerUrl: string; imageDirs: string[] };
      await Bun.write(
        cfgPath,
        JSON.stringify({ ...cfg, schedulerUrl: scheduler.url, imageDirs: [image.dir] }, null, 2) + "\n",
      );
    }
    agent = await AgentDaemon.start({ dataDir: agentDir });
    for (let i = 0; i < 100; i++) {
      const h = (await operator.hosts()).find((x) => x.hostId === hostId);
      if (h?.health === "healthy" && h.adminState === "active") break;
      await Bun.sleep(100);
    }
    const registered = (await operator.hosts()).find((h) => h.hostId === hostId)!;
    if (registered.health !== "healthy" || registered.unschedulable.length)
      throw new Error(
        `host ${hostId} is not schedulable (${registered.health}; ${registered.unschedulable.join(", ") || "no heartbeat"}); see the agent's warnings above (a foreign bb- namespace is quarantined, never deleted: remove it with \`ip netns delete NAME\` if it is yours)`,
      );

    await releaseLeftovers(client, opts.status);
    opts.status("submitting the sample job");
    const { view } = await client.create({ clientRequestId: `demo-${randomUUID()}`, workloadClass: "ci-small" });
    // The client config holds the scheduler's URL and the token; only its path is printed.
    opts.status(
      `allocation ${view.allocationId}; follow its output from another terminal: BB_CONFIG=${dev.clientConfigPath} bb allocation logs ${view.allocationId} --follow`,
    );
    const events: AllocationEvent[] = [];
    const states: string[] = [];
    const jobOutput: string[] = [];
    let inJob = false;
    let exitCode: number | null = null;
    const onEvent = (e: AllocationEvent) => {
      events.push(e);
      if (e.toState) states.push(e.toState);
      opts.print(`event  ${formatEvent(e)}`);
      if (e.type === "allocation.provisioning" && !tail && e.placementId) {
        const dir = placementDirName(hostId, view.allocationId, e.placementId, e.generation);
        tail = tailFile(join(agentPaths(agentDir).allocations, dir, "logs", "console.log"), (line) => {
          if (line.includes(JOB_START_MARKER)) inJob = true;
          else if (line.includes(JOB_EXIT_MARKER)) inJob = false;
          else if (inJob && isWorkloadLine(line.replace(/\r$/, ""))) {
            jobOutput.push(line);
            opts.print(`job  │ ${line}`);
          }
        });
      }
      if (e.type === "workload.exited") exitCode = Number(e.data?.["exitCode"]);
    };
    allocationId = view.allocationId;
    const stopFollowing = new AbortController();
    opts.signal?.addEventListener("abort", () => stopFollowing.abort());
    const followToExit = client.follow(view.allocationId, onEvent, {
      until: (e) => e.type === "workload.exited",
      signal: stopFollowing.signal,
    });
    let lastSeq = 0;
    try {
      await client.deliverWhenReady(
        view.allocationId,
        new TextEncoder().encode(opts.payload),
        `dlv-${randomUUID()}`,
        300_000,
        opts.signal,
      );
      lastSeq = await followToExit;
      if (opts.signal?.aborted) throw Object.assign(new Error("interrupted"), { exitCode: 130 });
    } finally {
      stopFollowing.abort();
      lastSeq = Math.max(lastSeq, await followToExit.catch(() => 0));
    }
    await Bun.sleep(300);
    opts.status("job finished; releasing");
    await client.release(view.allocationId);
    await client.follow(view.allocationId, onEvent, { after: lastSeq });
    released = true;
    (tail as { stop: () => void } | null)?.stop();
    tail = null;

    const leftovers: string[] = [];
    const final = await client.get(view.allocationId);
    if (final.placementId) {
      const dir = placementDirName(hostId, view.allocationId, final.placementId, final.generation);
      if (existsSync(join(agentPaths(agentDir).allocations, dir))) leftovers.push(`allocation directory ${dir}`);
      if ((await listPlacementNetworks()).includes(dir)) leftovers.push(`network namespace ${dir}`);
      const ps = Bun.spawnSync(["pgrep", "-f", dir]);
      if (ps.exitCode === 0) leftovers.push(`VMM process ${ps.stdout.toString().trim()}`);
    }
    const after = (await operator.hosts()).find((h) => h.hostId === hostId)!;
    if (JSON.stringify(after.free) !== JSON.stringify(registered.allocatable))
      leftovers.push(
        `host free capacity ${JSON.stringify(after.free)} != allocatable ${JSON.stringify(registered.allocatable)}`,
      );
    return {
      allocationId: view.allocationId,
      jobOutput,
      exitCode,
      states,
      events,
      timings: phaseTimings(events),
      leftovers,
    };
  } finally {
    // The console follower is a timer: left running, it would keep the process alive after an error.
    (tail as { stop: () => void } | null)?.stop();
    // On any failure, release what was started and wait (bounded) for its cleanup before stopping the roles.
    if (allocationId && !released && releaser) {
      opts.status(`releasing ${allocationId} after a failure`);
      await releaser.release(allocationId).catch(() => undefined);
      await waitUntilGone(releaser, allocationId, Date.now() + FAILURE_RELEASE_WAIT_MS);
    }
    await agent?.stop();
    await scheduler?.stop();
    scheduler = null;
  }
}
