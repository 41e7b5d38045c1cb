/**
 * The agent's `control_config` message (src/protocol/control.ts, issue 20
 * "Exec and files"): the deployment's connection verification keys the host
 * endpoint already trusts (`connections.verificationKeys` of agent.json, the
 * map src/agent/endpoint/grantCheck.ts checks grants against), handed to the
 * guest so its control service checks a presented grant against the same
 * keys.
 *
 * Owns: building the message and checking it against its TypeBox schema
 * (at most MAX_CONTROL_VERIFICATION_KEYS keys, each a base64 32-byte
 * Ed25519 public key under a bounded key ID) before anything is sent. The
 * keys are public: no secret passes here. Must never: send a message the
 * schema refuses.
 */
import { Value } from "@sinclair/typebox/value";
import { isVerificationKey } from "../protocol/connectionSignature.ts";
import { ControlConfigMessage, MAX_CONTROL_VERIFICATION_KEYS } from "../protocol/control.ts";
import { AgentError } from "./errors.ts";

/** A key ID (the schema's key pattern, as src/agent/endpoint/startEndpoint.ts checks it). */
const KEY_ID = /^[A-Za-z0-9._:-]{1,64}$/;

/**
 * Why `keys` cannot be sent as `control_config` (an empty map, more than
 * MAX_CONTROL_VERIFICATION_KEYS keys, a key ID outside [A-Za-z0-9._:-]{1,64},
 * a value that is not a base64 32-byte Ed25519 public key), or null.
 */
export function controlConfigProblem(keys: Readonly<Record<string, string>>): string | null {
  const n = Object.keys(keys).length;
  if (n === 0) return "no connection verification key: the guest could never accept a grant";
  if (n > MAX_CONTROL_VERIFICATION_KEYS)
    return `${n} connection verification keys; the guest accepts at most ${MAX_CONTROL_VERIFICATION_KEYS} (MAX_CONTROL_VERIFICATION_KEYS)`;
  const m = { type: "control_config", verificationKeys: { ...keys } };
  if (!Value.Check(ControlConfigMessage, m)) {
    const e = Value.Errors(ControlConfigMessage, m).First();
    return `control_config${e?.path ?? ""}: ${e?.message ?? "invalid"}`;
  }
  for (const [id, key] of Object.entries(keys)) {
    // TypeBox's Record does not hold a key to its pattern: the key ID rule is checked here.
    if (!KEY_ID.test(id))
      return `control_config/verificationKeys: key ID ${JSON.stringify(id.slice(0, 64))} is not [A-Za-z0-9._:-]{1,64}`;
    if (!isVerificationKey(key))
      return `control_config/verificationKeys/${id}: not a base64 32-byte Ed25519 public key`;
  }
  return null;
}

/**
 * The `control_config` message for `keys` (copied: later changes to the map
 * do not reach it). Throws AgentError INTERNAL (subsystem "guest") with
 * controlConfigProblem's text when the schema refuses it; the agent checks
 * its keys once at start (Agent.start), so a placement never sees this.
 */
export function controlConfigMessage(keys: Readonly<Record<string, string>>): ControlConfigMessage {
  const problem = controlConfigProblem(keys);
  if (problem) throw new AgentError("INTERNAL", problem, { subsystem: "guest" });
  return { type: "control_config", verificationKeys: { ...keys } };
}
