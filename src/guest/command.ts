/**
 * `bb guest`: the guest bootstrap command, run as PID 1 inside the VM by
 * /sbin/beachball-init. Only translates the command line to runGuest().
 */
import { defineCommand } from "citty";

/** The `bb guest` command (spec "Guest handshake"); never returns while the VM runs. */
export const guestCommand = defineCommand({
  meta: { name: "guest", description: "Guest bootstrap (PID 1 inside a Beachball VM); not for hosts" },
  async run() {
    const { runGuest } = await import("./main.ts");
    await runGuest();
  },
});
