/**
 * Compile-time proof that every response schema in responses.ts describes
 * exactly the interface the scheduler fills: `tsc` fails when a field is
 * added, removed or retyped on one side only. No runtime code.
 */
import type { Static } from "@sinclair/typebox";
import type * as R from "./responses.ts";
import type { AllocationEvent, WellKnown } from "./api.ts";
import type { AlertItem, HostView } from "./views.ts";
import type { AgentCommand, BootstrapDelivery, EnrollResponse, PollResponse } from "./agent.ts";
import type { Problem } from "./errors.ts";
import type { LogPage, LogPushResponse } from "./logs.ts";
import type { ConnectionGrantResponse, ConnectionPollResponse } from "./connection.ts";

/** True when A and B are mutually assignable (same shape). */
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
/** Compiles only for `true`. */
type Assert<T extends true> = T;

/** The proofs (a type-only export, so the module is not empty). */
export type ResponseSchemasMatch = [
  Assert<Same<Static<typeof R.AllocationEvent>, AllocationEvent>>,
  Assert<Same<Static<typeof R.WellKnown>, WellKnown>>,
  Assert<Same<Static<typeof R.HostView>, HostView>>,
  Assert<Same<Static<typeof R.AlertItem>, AlertItem>>,
  Assert<Same<Static<typeof R.AgentCommand>, AgentCommand>>,
  Assert<Same<Static<typeof R.BootstrapDelivery>, BootstrapDelivery>>,
  Assert<Same<Static<typeof R.EnrollResponse>, EnrollResponse>>,
  Assert<Same<Static<typeof R.PollResponse>, PollResponse>>,
  Assert<Same<Static<typeof R.Problem>, Problem>>,
  Assert<Same<Static<typeof R.LogPage>, LogPage>>,
  Assert<Same<Static<typeof R.LogPushResponse>, LogPushResponse>>,
  Assert<Same<Static<typeof R.ConnectionGrantResponse>, ConnectionGrantResponse>>,
  Assert<Same<Static<typeof R.ConnectionPollResponse>, ConnectionPollResponse>>,
];
