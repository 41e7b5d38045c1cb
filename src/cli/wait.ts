/**
 * Waiting on an allocation for `--wait` (issue "Pending is unexplained and
 * `--wait` can hang forever"): follow its events until a goal (ready, the
 * payload exited, released) or a terminal state, and give up at a deadline
 * whatever the state. When it gives up on an allocation that no host took,
 * the caller exits EXIT.notPlaced (3) and prints why from the view's
 * placement outcome, as Nomad prints why placement failed.
 *
 * The wait follows the allocation's events (src/client/allocationWait.ts),
 * so it returns when the event is written, not a poll interval later.
 * Must never: wait past the deadline (sleeps and retries are cut to it);
 * release or change the allocation.
 */
import type { AllocationEvent, AllocationView, PlacementOutcome } from "../protocol/api.ts";
import { type Clock, systemClock } from "../protocol/clock.ts";
import { retryTransport, TRANSPORT_RETRY_MS, type SchedulerClient } from "./client.ts";
import { WAIT_FALLBACK_POLL_MS, waitForEvent } from "../client/allocationWait.ts";

/** What a wait is for (paused and suspended: issue 21). */
export type WaitGoal = "ready" | "exited" | "released" | "paused" | "suspended";

/** How often the allocation is read while its event stream is unavailable, ms (the wait itself follows events: src/client/allocationWait.ts). */
export const WAIT_POLL_MS = WAIT_FALLBACK_POLL_MS;

/** The outcome of a wait. */
export interface WaitResult {
  /** The allocation when the wait ended. */
  view: AllocationView;
  /** True when the deadline passed before the goal or a terminal state. */
  timedOut: boolean;
  /** The last event sequence number seen (resume with it). */
  lastSeq: number;
}

/** Whether event `e` reaches `goal` (a refused pause or suspend ends that wait too: it will not come). */
function reaches(goal: WaitGoal, e: AllocationEvent): boolean {
  if (goal === "ready") return e.toState === "ready";
  if (goal === "exited") return e.type === "workload.exited";
  if (goal === "paused") return e.toState === "paused" || e.type === "allocation.pause_refused";
  if (goal === "suspended") return e.toState === "suspended" || e.type === "allocation.suspend_refused";
  return e.toState === "released";
}

/** Most event pages lastEventSeq reads (100 events each). */
const MAX_SEQ_PAGES = 100;

/** The sequence number of `id`'s newest event (0: none), so a wait begins after what already happened. */
export async function lastEventSeq(client: Pick<SchedulerClient, "events">, id: string): Promise<number> {
  let after = 0;
  for (let i = 0; i < MAX_SEQ_PAGES; i++) {
    const page = await client.events(id, after, 100);
    if (page.length === 0) break;
    after = page[page.length - 1]!.seq;
    if (page.length < 100) break;
  }
  return after;
}

/** States in which no host holds the allocation yet. */
export const UNPLACED_STATES: ReadonlySet<string> = new Set(["pending", "reserving"]);

/**
 * Follows `id`'s events after `after` (the typed client's event-driven
 * wait, waitForEvent), calling `onEvent` for each, until `goal`, a terminal
 * state (released, failed) or `deadlineMs` (epoch ms, on
 * `clock`'s wallMs), then reads the view.
 * A dropped read reconnects from the last event seen; errors that are not
 * transport failures are thrown.
 */
export async function waitFor(
  client: Pick<SchedulerClient, "events" | "get">,
  id: string,
  goal: WaitGoal,
  deadlineMs: number,
  onEvent: (e: AllocationEvent) => void = () => {},
  after = 0,
  clock: Clock = systemClock,
  sleep: (ms: number) => Promise<unknown> = Bun.sleep,
): Promise<WaitResult> {
  const r = await waitForEvent(client, id, {
    after,
    deadlineMs,
    onEvent,
    until: (e) => reaches(goal, e),
    clock,
    sleep,
  });
  const timedOut = r.ended === "deadline";
  const view = await retryTransport(() => client.get(id), clock.wallMs() + TRANSPORT_RETRY_MS);
  return { view, timedOut, lastSeq: r.lastSeq };
}

function counts(rec: Record<string, number>): string[] {
  return Object.entries(rec)
    .sort(([a, x], [b, y]) => y - x || a.localeCompare(b))
    .map(([reason, n]) => `${reason} on ${n} host${n === 1 ? "" : "s"}`);
}

/** One line saying why the latest placement attempt found no host (or that none was made yet). */
export function describePlacement(p: PlacementOutcome | null): string {
  if (!p) return "no placement attempt yet";
  if (p.result === "reserved") return `reserved on ${p.hostId ?? "a host"} at ${p.at}`;
  const reasons = [...counts(p.noFit), ...counts(p.unschedulable).map((r) => `${r} (takes no reservations)`)];
  const head =
    p.result === "no_eligible_host"
      ? p.hostsConsidered === 0
        ? "no host is registered"
        : `no eligible host among ${p.hostsConsidered}`
      : `every candidate refused the reservation${p.hostId ? ` (last ${p.hostId})` : ""}`;
  return `${head}${reasons.length ? `: ${reasons.join(", ")}` : ""} (last attempt ${p.at})`;
}

/** The message for a wait that gave up on an allocation no host took. */
export function notPlacedMessage(view: AllocationView, waitedSeconds: number): string {
  return `allocation ${view.allocationId} was not placed within ${waitedSeconds} s (${view.state}${view.conditions.length ? `, ${view.conditions.join(", ")}` : ""}): ${describePlacement(view.placement)}; it stays ${view.state} until a host can take it or its TTL ends (\`bb allocation release ${view.allocationId}\` gives it up)`;
}
