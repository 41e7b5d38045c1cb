/**
 * Deliberately injected agent bugs, UNSTABLE and for tests only: the seeded
 * simulation turns one on to prove that its invariants catch the fault
 * (test/sim/sim.test.ts). Production never sets any of them (AgentDaemon
 * has no way to); a knob may change or vanish in any release.
 * Must never: be read from configuration files or the environment.
 */

/** The knobs; every one defaults to off. */
export interface AgentDebug {
  /** Start a VM even when its execution lease has expired (breaks spec "Start": "The agent requires a live execution lease"). */
  startDespiteExpiredLease?: boolean;
}

/** Every knob off. */
export const NO_AGENT_DEBUG: AgentDebug = Object.freeze({});
