/**
 * Test support: the scheduler on each of its hosts behind one interface, so
 * a conformance or bad-input test runs the same requests against the
 * embedded host (in-process, `bb scheduler serve`'s code) and workerd (the
 * real binary, test/support/workerdScheduler.ts) and asserts the same
 * answers: both serve the one front door (docs/adr/0161-one-front-door.md).
 * What only one host can show (object instances, the data directory) is
 * null on the other, and a test says so where it skips it.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SchedulerClient } from "../../src/client/index.ts";
import { ensureDevManifest } from "../../src/scheduler/manifest.ts";
import { FAKE_IMAGE_DIGEST, startTestScheduler, type TestScheduler } from "./scheduler.ts";
import { startWorkerdScheduler } from "./workerdScheduler.ts";

/** The object classes the embedded host lets a test count or list instances of. */
export const SCHEDULER_OBJECT_CLASSES = [
  "Allocation",
  "AllocationIndex",
  "Admission",
  "Enrollment",
  "HostDirectory",
  "Host",
  "Operations",
  "Network",
  "NetworkDirectory",
  "Connection",
  "RunQueue",
  "Usage",
  "Leases",
];

/** A running scheduler on one host. */
export interface SchedulerUnderTest {
  /** `embedded` or `workerd`. */
  host: SchedulerHostName;
  url: string;
  port: number;
  tokens: { token: string; operatorToken: string };
  controller: SchedulerClient;
  operator: SchedulerClient;
  /** Instances per object class (embedded), or null where the host does not let a test count them (workerd). */
  objectInstances(): Record<string, number> | null;
  /** The data directory (embedded), or null (workerd keeps its storage to itself). */
  dataDir: string | null;
  /** The in-process scheduler (embedded: its runtime may be peeked at), or null (workerd). */
  embedded: TestScheduler | null;
  stop(): Promise<void>;
}

/** The scheduler's hosts. */
export type SchedulerHostName = "embedded" | "workerd";

/** A change to the development manifest before the scheduler starts (e.g. another principal). */
export type ManifestEdit = (manifest: Record<string, unknown>) => void;

/** The embedded host on a development manifest changed by `edit`, in a directory removed on stop. */
async function startEmbeddedWith(edit: ManifestEdit): Promise<TestScheduler> {
  const dir = mkdtempSync(join(tmpdir(), "bb-sched-"));
  const dev = ensureDevManifest(dir, FAKE_IMAGE_DIGEST);
  const m = JSON.parse(readFileSync(dev.manifestPath, "utf8")) as Record<string, unknown>;
  edit(m);
  writeFileSync(dev.manifestPath, JSON.stringify(m), { mode: 0o600 });
  const t = await startTestScheduler({ dir });
  const stop = t.stop;
  t.stop = async () => {
    await stop();
    rmSync(dir, { recursive: true, force: true });
  };
  return t;
}

/** Starts the scheduler on `host` with the development manifest (changed by `edit`, if given). */
export async function startSchedulerOn(host: SchedulerHostName, edit?: ManifestEdit): Promise<SchedulerUnderTest> {
  if (host === "workerd") {
    const w = await startWorkerdScheduler(edit);
    return {
      ...w,
      host,
      controller: new SchedulerClient(w.url, w.tokens.token),
      operator: new SchedulerClient(w.url, w.tokens.operatorToken),
      objectInstances: () => null,
      dataDir: null,
      embedded: null,
    };
  }
  const t = edit ? await startEmbeddedWith(edit) : await startTestScheduler();
  return {
    host,
    url: t.url,
    port: Number(new URL(t.url).port),
    tokens: t.tokens,
    controller: t.controller,
    operator: t.operator,
    objectInstances: () =>
      Object.fromEntries(SCHEDULER_OBJECT_CLASSES.map((c) => [c, t.server.worker.runtime.listNames(c).length])),
    dataDir: t.dir,
    embedded: t,
    stop: () => t.stop(),
  };
}

/** Both hosts, in the order tests run them. */
export const SCHEDULER_HOSTS: SchedulerHostName[] = ["embedded", "workerd"];
