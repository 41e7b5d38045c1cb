/**
 * What this release speaks and runs on: the agent protocol version (spec
 * "Messages": every envelope, enrollment and discovery answer carries it)
 * and the one machine architecture hosts and images support (spec
 * "Images": an image manifest names it; an enrolling agent reports it).
 * Its own module so every protocol module takes the same value without a
 * cycle. Pure constants.
 * Must never: hold a value that differs between agent and scheduler of one
 * release (both read it from here).
 */

/** The agent protocol version this release speaks (major.minor; placement asks hosts for the same major). */
export const AGENT_PROTOCOL_VERSION = "1.0";

/** The machine architecture hosts run and images are built for (the default of a workload class). */
export const SUPPORTED_ARCHITECTURE = "x86_64";
