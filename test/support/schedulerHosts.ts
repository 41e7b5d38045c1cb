/**
 * Test support: the scheduler on each of its hosts behind one interface, so
 * a conformance or bad-input test runs the same requests against the
 * embedded host (in-process, `bb scheduler serve`'s code) and workerd (the
 * real binary, test/support/workerdScheduler.ts) and asserts the same
 * answers: both serve the one front door (docs/adr/0161-one-front-door.md).
 * What only one host can show (object instances, the data directory) is
 * null on the other, and a test says so where it skips it.
 */
import { SchedulerClient } from "../../src/client/index.ts";
import { startTestScheduler, type TestScheduler } from "./scheduler.ts";
import { startWorkerdScheduler } from "./workerdScheduler.ts";

/** The object classes the embedded host lets a test count instances of. */
const OBJECT_CLASSES = [
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

/** Starts the scheduler on `host` with the development manifest. */
export async function startSchedulerOn(host: SchedulerHostName): Promise<SchedulerUnderTest> {
  if (host === "workerd") {
    const w = await startWorkerdScheduler();
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
  const t = await startTestScheduler();
  return {
    host,
    url: t.url,
    port: Number(new URL(t.url).port),
    tokens: t.tokens,
    controller: t.controller,
    operator: t.operator,
    objectInstances: () =>
      Object.fromEntries(OBJECT_CLASSES.map((c) => [c, t.server.worker.runtime.listNames(c).length])),
    dataDir: t.dir,
    embedded: t,
    stop: () => t.stop(),
  };
}

/** Both hosts, in the order tests run them. */
export const SCHEDULER_HOSTS: SchedulerHostName[] = ["embedded", "workerd"];
