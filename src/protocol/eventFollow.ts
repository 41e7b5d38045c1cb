/**
 * Following an allocation's events (issue 20: "the CLI stops polling for
 * readiness"): the bounds of `GET /v1/allocations/{id}/events?after=N&follow=1`,
 * a long-poll that answers at once when events after `after` exist and
 * otherwise parks until the next event is written, the allocation's object
 * drains, or EVENT_FOLLOW_WAIT_MS pass (then it answers an empty page and
 * the reader asks again from the same sequence number). Sequence numbers
 * make a dropped or timed-out read resumable with nothing missed.
 *
 * Owns: the bounds shared by the scheduler and the typed client. Must
 * never: hold more than MAX_EVENT_FOLLOWERS reads on one allocation.
 */

/** Longest a follow read of events waits for a new event before answering an empty page, ms. */
export const EVENT_FOLLOW_WAIT_MS = 20_000;
/** Most event follow reads parked on one allocation at once; past it a follow read is refused with RATE_LIMITED. */
export const MAX_EVENT_FOLLOWERS = 16;
/** The Retry-After a refused event follow read is given, seconds. */
export const EVENT_FOLLOW_RETRY_AFTER_SECONDS = 1;
