/**
 * What an operator's admin-state change does to a host (spec
 * "Administrative state and health"): `disabled` fences it for good, and a
 * disabled host never becomes active or draining again (it must enroll
 * again). Pure; the Host object (src/scheduler/objects/hostAdmin.ts) runs
 * changes one at a time and persists them.
 */

/** A host's administrative state. */
export type AdminState = "active" | "draining" | "disabled";

/**
 * The effect of asking for `requested` on a host in `current`: `refused`
 * (HOST_DISABLED: a disabled host cannot be activated or drained),
 * `unchanged` (disabling a disabled host), `fence` (disabling: clear the
 * credential, count every placement absent, alert), or `set` (just record
 * the new state).
 */
export function adminTransition(current: AdminState, requested: AdminState): "refused" | "unchanged" | "fence" | "set" {
  if (current === "disabled") return requested === "disabled" ? "unchanged" : "refused";
  return requested === "disabled" ? "fence" : "set";
}
