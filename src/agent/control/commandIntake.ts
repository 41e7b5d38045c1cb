/**
 * Command intake (spec "Commands and idempotency", "Sessions and epochs"):
 * decides the acknowledgement of one scheduler command and persists it in
 * agent.db before any side effect. A command of another epoch is ignored;
 * an older generation than one already held is STALE_GENERATION; a host
 * with quarantined resources refuses everything but ensure_absent; a
 * reused command ID with other content is COMMAND_CONFLICT.
 * Must never: start work for a command it did not persist first.
 */
import { createHash } from "node:crypto";
import { canonicalJson } from "../../domain/identifiers.ts";
import type { AgentCommand, CommandAck } from "../../protocol/agent.ts";
import type { AgentStore } from "../store.ts";
import { placementDirName } from "../resourceNames.ts";

/** SHA-256 (hex) of a command's identity and content: what "same command" means for idempotency. */
export function commandDigest(cmd: AgentCommand): string {
  return createHash("sha256")
    .update(
      canonicalJson({
        commandId: cmd.commandId,
        type: cmd.type,
        allocationId: cmd.allocationId,
        placementId: cmd.placementId,
        generation: cmd.generation,
        spec: cmd.spec,
      }),
    )
    .digest("hex");
}

/**
 * The acknowledgement for `cmd` received by host `hostId` in session
 * `epoch` at `nowMs` (null when the command belongs to another session and
 * is ignored), and whether its placement must be driven now. A new
 * placement is named for this host (resourceNames.ts).
 */
export function takeCommand(
  store: AgentStore,
  hostId: string,
  cmd: AgentCommand,
  epoch: string,
  quarantined: boolean,
  nowMs: number,
): { ack: CommandAck | null; drive: boolean } {
  if (cmd.agentEpoch !== epoch) return { ack: null, drive: false };
  const newer = store
    .livePlacements()
    .find((p) => p.allocationId === cmd.allocationId && p.generation > cmd.generation);
  if (newer && cmd.type !== "ensure_absent")
    return { ack: { commandId: cmd.commandId, result: "rejected", errorCode: "STALE_GENERATION" }, drive: false };
  if (quarantined && cmd.type !== "ensure_absent")
    return { ack: { commandId: cmd.commandId, result: "rejected", errorCode: "INTERNAL" }, drive: false };
  const r = store.recordCommand(
    cmd,
    commandDigest(cmd),
    placementDirName(hostId, cmd.allocationId, cmd.placementId, cmd.generation),
    nowMs,
  );
  if (r === "conflict")
    return { ack: { commandId: cmd.commandId, result: "rejected", errorCode: "COMMAND_CONFLICT" }, drive: false };
  return { ack: { commandId: cmd.commandId, result: r }, drive: r === "accepted" };
}
