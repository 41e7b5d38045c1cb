/**
 * What the parts of one Host instance share (./hostObject.ts builds it):
 * its object state, the scheduler environment, its rows (./hostStore.ts),
 * its memory-only mailbox (./hostDeliveries.ts) and its private-networking
 * part (./hostConnections.ts, over its rows in ./hostConnectionStore.ts).
 * Declarations only.
 */
import type { ObjectState } from "../runtime/api.ts";
import type { SchedulerEnv } from "../env.ts";
import type { HostStore } from "./hostStore.ts";
import type { HostMailbox } from "./hostDeliveries.ts";
import type { HostConnections } from "./hostConnections.ts";

/** One Host instance's parts (see the module header). */
export interface HostContext {
  readonly state: ObjectState<never>;
  readonly env: SchedulerEnv;
  readonly store: HostStore;
  readonly mailbox: HostMailbox;
  readonly conn: HostConnections;
}
