/**
 * The public client's body types, each the static type of the TypeBox
 * schema the scheduler validates (requests) or publishes in /openapi.json
 * (responses): one source for the server, the document and the client.
 * Pure types.
 */
import type { Static } from "@sinclair/typebox";
import type * as api from "../protocol/api.ts";
import type * as R from "../protocol/responses.ts";
import type * as runs from "../protocol/runs.ts";
import type * as usage from "../protocol/usage.ts";
import type * as leases from "../protocol/leases.ts";

/** POST /v1/allocations body. */
export type CreateAllocationBody = Static<typeof api.CreateAllocationBody>;
/** POST /v1/allocations/{id}/fork body. */
export type ForkAllocationBody = Static<typeof api.ForkAllocationBody>;
/** POST /v1/allocations/{id}/fork answer: the forks in index order. */
export type ForkResult = Static<typeof R.ForkResult>;
/** POST /v1/allocations/{id}/bootstrap body. */
export type BootstrapBody = Static<typeof api.BootstrapBody>;
/** An allocation as the API shows it. */
export type AllocationView = Static<typeof api.AllocationView>;
/** One allocation state. */
export type AllocationState = AllocationView["state"];
/** One page of GET /v1/allocations. */
export type AllocationPage = Static<typeof R.AllocationPage>;
/** One allocation event. */
export type AllocationEvent = Static<typeof R.AllocationEvent>;
/** One page of GET /v1/allocations/{id}/events. */
export type EventPage = Static<typeof R.EventPage>;
/** The answer of a bootstrap delivery. */
export type DeliveryResult = Static<typeof R.DeliveryResult>;
/** A minted enrollment token (shown once). */
export type EnrollmentToken = Static<typeof R.EnrollmentToken>;
/** The operator's view of a host. */
export type HostView = Static<typeof R.HostView>;
/** One operator alert. */
export type AlertItem = Static<typeof R.AlertItem>;
/** POST /v1/runs body (issue 22). */
export type SubmitRunBody = Static<typeof runs.SubmitRunBody>;
/** A run as the API shows it. */
export type RunView = Static<typeof runs.RunView>;
/** One page of GET /v1/runs. */
export type RunPage = Static<typeof runs.RunPage>;
/** One run event. */
export type RunEvent = Static<typeof runs.RunEvent>;
/** GET /v1/usage answer (issue 22). */
export type UsageReport = Static<typeof usage.UsageReport>;
/** POST /v1/leases body (issue 22). */
export type CreateLeaseBody = Static<typeof leases.CreateLeaseBody>;
/** A lease as the API shows it. */
export type LeaseView = Static<typeof leases.LeaseView>;
/** One lease event. */
export type LeaseEvent = Static<typeof leases.LeaseEvent>;
/** The discovery document. */
export type WellKnown = Static<typeof R.WellKnown>;
/** An RFC 9457 problem body. */
export type Problem = Static<typeof R.Problem>;
/** One page of an allocation's redacted console output. */
export type LogPage = Static<typeof R.LogPage>;
