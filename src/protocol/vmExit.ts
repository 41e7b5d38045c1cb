/**
 * The diagnosis of a VM that ended on its own (issue "a guest crash leaves
 * something to diagnose"): its classified reason and a bounded console
 * tail. Carried by a VM_EXITED placement update (agent.ts) and shown in the
 * allocation view (api.ts); its own module so both import it without a
 * cycle. Pure shapes.
 * Must never: hold a workload's output or a secret (the agent keeps kernel
 * lines only and scrubs the nonce: src/agent/vmm/guestExit.ts).
 */
import { Type, type Static } from "@sinclair/typebox";

/**
 * Why a VM ended without being asked to (spec "Observability": a failure
 * must leave something to diagnose), as the agent classifies it from the
 * guest's console and the VMM process: the kernel panicked, the guest ran
 * out of memory, the guest powered off or rebooted on its own, the VMM
 * process died with no guest-side reason, or the guest's control channel
 * closed while the VMM kept running.
 */
export const VM_EXIT_REASONS = [
  "KERNEL_PANIC",
  "GUEST_OOM",
  "GUEST_POWEROFF",
  "VMM_CRASHED",
  "GUEST_CHANNEL_LOST",
] as const;
/** One VM exit reason. */
export type VmExitReason = (typeof VM_EXIT_REASONS)[number];
/** Longest console tail an observation carries, characters (kernel lines only, redacted; see src/agent/vmm/guestExit.ts). */
export const MAX_CONSOLE_TAIL_CHARS = 2_048;

/** The diagnosis attached to a VM_EXITED observation. */
export const VmExit = Type.Object(
  {
    reason: Type.Union(VM_EXIT_REASONS.map((r) => Type.Literal(r))),
    consoleTail: Type.String({ maxLength: MAX_CONSOLE_TAIL_CHARS }),
  },
  { additionalProperties: false },
);
/** The diagnosis attached to a VM_EXITED observation. */
export type VmExit = Static<typeof VmExit>;
