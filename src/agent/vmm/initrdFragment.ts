/**
 * A per-placement initramfs fragment: a small newc cpio archive appended to
 * the image's initramfs (the kernel unpacks concatenated archives in order).
 * The QEMU driver uses it to hand the guest arguments that must not appear
 * on the VMM's command line, which every local user can read in
 * /proc/PID/cmdline: the one-time bootstrap nonce (spec "Prepare": the
 * nonce is a secret of the placement).
 * Must never: write the arguments anywhere but the placement's private directory.
 */

/** Path of the fragment's file inside the initramfs. */
export const PRIVATE_ARGS_PATH = "beachball/kernel-args";

function header(name: string, mode: number, size: number, ino: number): Buffer {
  const fields = [ino, mode, 0, 0, 1, 0, size, 0, 0, 0, 0, Buffer.byteLength(name) + 1, 0];
  return Buffer.from("070701" + fields.map((f) => f.toString(16).padStart(8, "0")).join(""), "ascii");
}

function pad(n: number): Buffer {
  return Buffer.alloc((4 - (n % 4)) % 4);
}

function entry(name: string, mode: number, data: Buffer, ino: number): Buffer {
  const h = header(name, mode, data.length, ino);
  const nameBytes = Buffer.from(`${name}\0`, "utf8");
  return Buffer.concat([h, nameBytes, pad(h.length + nameBytes.length), data, pad(data.length)]);
}

/** A newc cpio archive holding `beachball/` (0700) and `beachball/kernel-args` (0400) with `args` space-separated. Pure. */
export function privateArgsArchive(args: string[]): Buffer {
  const data = Buffer.from(`${args.join(" ")}\n`, "utf8");
  return Buffer.concat([
    entry("beachball", 0o040700, Buffer.alloc(0), 1),
    entry(PRIVATE_ARGS_PATH, 0o100400, data, 2),
    entry("TRAILER!!!", 0, Buffer.alloc(0), 0),
  ]);
}
