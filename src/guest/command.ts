/**
 * `bb guest`: the guest bootstrap command, run as PID 1 inside the VM by
 * /sbin/beachball-init (dev image), by the initramfs (squashfs images) or as
 * a systemd service (reference image). Only translates the command line to
 * runGuest().
 */
import { defineCommand } from "citty";

/** The `bb guest` command (spec "Guest handshake"); never returns while the VM runs. Its `examples` are read by help (src/command/define.ts; the guest imports only the lower layer's protocol, so it sets the field itself). */
export const guestCommand = Object.assign(
  defineCommand({
    meta: { name: "guest", description: "Guest bootstrap (PID 1 inside a Beachball VM); not for hosts" },
    args: {
      "workload-root": {
        type: "string",
        valueHint: "DIR",
        description: "Enter this root (chroot) once the control port is open (squashfs images)",
      },
    },
    async run({ args }) {
      const { runGuest } = await import("./main.ts");
      await runGuest(args["workload-root"] ? { workloadRoot: args["workload-root"] } : {});
    },
  }),
  { examples: ["bb guest", "bb guest --workload-root /run/beachball/root"] },
);
