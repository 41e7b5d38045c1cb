/**
 * Whether this process can use TUN, and if not, why: libc through bun:ffi,
 * /dev/net/tun present and openable, TUNSETIFF permitted. The probe creates a
 * transient device (or attaches to the named persistent one) and closes it at
 * once; a transient device disappears with its fd.
 *
 * Must never: throw, leave a device or fd behind, or change any interface.
 */
import { existsSync } from "node:fs";
import { openTun, TunError, type TunErrorCode } from "./tun.ts";

/** The probe's answer: usable, or a stable code and a sentence saying why not. */
export type TunProbe = { available: true } | { available: false; code: TunErrorCode; reason: string };

/**
 * Probes TUN. `name` checks a specific (e.g. persistent, user-owned) device;
 * by default a kernel-numbered transient one is created and removed.
 */
export async function probeTun(name?: string): Promise<TunProbe> {
  if (process.platform === "linux" && !existsSync("/dev/net/tun")) {
    return {
      available: false,
      code: "unavailable",
      reason: "/dev/net/tun does not exist (kernel without CONFIG_TUN, or a container without the device)",
    };
  }
  try {
    const dev = openTun(name ? { name } : {});
    await dev.close();
    return { available: true };
  } catch (e) {
    if (e instanceof TunError) return { available: false, code: e.code, reason: e.message };
    return { available: false, code: "io", reason: (e as Error).message };
  }
}
