/**
 * The initramfs of a squashfs image (an image converted by `bb image
 * build`): busybox, the kernel modules, the C library the guest binary
 * links against, and an `/init` that assembles the workload's root and
 * starts `beachball-guest` as PID 1.
 *
 * Implements spec "Images" for images converted from OCI: the squashfs
 * (`beachball.lower`, default /dev/vda) is the read-only lower layer, the
 * placement's scratch ext4 (`beachball.upper`, default /dev/vdb) the
 * writable upper layer, merged by overlayfs at /newroot; inside it the mount
 * table a container expects (proc, sys, dev, devpts, shm, tmp, run,
 * cgroup2), and then `beachball-guest --workload-root /newroot
 * --configure-network`, which configures the network from
 * `beachball.ipv4/gateway/dns` and the private IPv6 keys over rtnetlink,
 * writes the root's resolv.conf and chroots there itself (or, given
 * `init=`, that program of the image, chrooted, for a bare boot, which gets
 * no network). The guest
 * binary lives in the squashfs under `/.beachball/` (paged in on demand and
 * evictable, instead of pinned in the initramfs's RAM) and is hidden from
 * the workload by a whiteout in the upper layer.
 * Must never: route traffic off the placement's /30 (only the given gateway
 * is set), or leave the VM running after a boot failure (it reboots, and
 * QEMU exits through -no-reboot).
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { type CpioEntry, encodeCpio } from "../cpio.ts";
import { runChecked } from "../devKernel.ts";
import { initramfsPreamble, rootReadAhead } from "../guestNetInit.ts";

/** Where the guest binary sits inside a converted image's squashfs. */
export const GUEST_DIR_IN_IMAGE = ".beachball";
/** The guest binary's path inside the squashfs. */
export const GUEST_BINARY_IN_IMAGE = `${GUEST_DIR_IN_IMAGE}/beachball-guest`;
/** Where the workload's merged root is mounted inside the initramfs. */
export const WORKLOAD_ROOT = "/newroot";

/** The initramfs /init for the given insmod order. */
export function squashfsInit(modules: readonly string[]): string {
  return `#!/bin/busybox sh
B=/bin/busybox
${initramfsPreamble(modules)}
lower=/dev/vda
upper=/dev/vdb
init=
for arg in $($B cat /proc/cmdline); do
  case "$arg" in
    beachball.lower=*) lower="\${arg#*=}" ;;
    beachball.upper=*) upper="\${arg#*=}" ;;
    init=*) init="\${arg#init=}" ;;
  esac
done
i=0
while { [ ! -b "$lower" ] || [ ! -b "$upper" ]; } && [ $i -lt 400 ]; do $B usleep 25000; i=$((i+1)); done
${rootReadAhead("lower")}
$B mount -t squashfs -o ro "$lower" /lower || fail "cannot mount the squashfs root $lower"
$B mount -t ext4 -o rw,noatime "$upper" /upper || fail "cannot mount the scratch disk $upper"
$B mkdir -p /upper/root /upper/work
[ -e /upper/root/${GUEST_DIR_IN_IMAGE} ] || $B mknod /upper/root/${GUEST_DIR_IN_IMAGE} c 0 0
$B mount -t overlay overlay -o lowerdir=/lower,upperdir=/upper/root,workdir=/upper/work ${WORKLOAD_ROOT} || fail "cannot mount the overlay"
R=${WORKLOAD_ROOT}
$B mkdir -p $R/proc $R/sys $R/dev $R/tmp $R/run $R/etc $R/root
$B mount -t proc proc $R/proc
$B mount -t sysfs sysfs $R/sys
$B mount -t devtmpfs devtmpfs $R/dev
$B mkdir -p $R/dev/pts $R/dev/shm
$B mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5 devpts $R/dev/pts
$B mount -t tmpfs -o mode=1777,nosuid,nodev shm $R/dev/shm
$B mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs $R/tmp
$B mount -t tmpfs -o mode=755,nosuid,nodev tmpfs $R/run
[ -d $R/sys/fs/cgroup ] && $B mount -t cgroup2 -o nsdelegate cgroup2 $R/sys/fs/cgroup
$B ln -sf /proc/self/fd $R/dev/fd
$B ln -sf /proc/self/fd/0 $R/dev/stdin
$B ln -sf /proc/self/fd/1 $R/dev/stdout
$B ln -sf /proc/self/fd/2 $R/dev/stderr
$B hostname beachball
$B rm -f $R/etc/hostname
echo beachball > $R/etc/hostname
$B grep -q beachball $R/etc/hosts 2>/dev/null || printf '127.0.0.1 localhost beachball\\n::1 localhost\\n' >> $R/etc/hosts
if [ -f /beachball/kernel-args ]; then
  $B mkdir -p /etc/beachball
  $B mv /beachball/kernel-args /etc/beachball/kernel-args
  $B chmod 0400 /etc/beachball/kernel-args
fi
# init= replaces beachball-guest with a program of the image (with the kernel's init arguments), for bare boots.
[ -n "$init" ] && exec $B chroot $R "$init" "$@"
read -r up _ < /proc/uptime
echo "beachball-initramfs: starting beachball-guest at \${up}s"
# The guest configures eth0 and writes $R/etc/resolv.conf itself (rtnetlink: no ip forks, guest/internal/netconf).
exec /lower/${GUEST_BINARY_IN_IMAGE} --workload-root ${WORKLOAD_ROOT} --configure-network
`;
}

/** Shared libraries (and the ELF interpreter) `bin` needs, as absolute host paths (empty for a static binary). */
export async function sharedLibraries(bin: string): Promise<string[]> {
  const out = await runChecked(["ldd", bin]).catch((e: Error) =>
    /not a dynamic/.test(e.message) ? "" : Promise.reject(e),
  );
  const libs = new Set<string>();
  for (const line of out.split("\n")) {
    const m = /=>\s*(\/\S+)/.exec(line) ?? /^\s*(\/\S+)\s+\(/.exec(line);
    if (m?.[1]) libs.add(m[1]);
  }
  return [...libs].sort();
}

/**
 * Builds the initramfs bytes: `/init` (squashfsInit), `/bin/busybox` (the
 * static busybox at `busyboxPath`), `/lib/modules/<m>.ko` for each module
 * from `modulesDir`, and the libraries `guestBinaryPath` needs at their
 * absolute paths (the guest runs from the squashfs but resolves its ELF
 * interpreter in the initramfs). Deterministic for the same inputs.
 * Throws when a file is missing or `ldd` fails.
 */
export async function buildSquashfsInitrd(opts: {
  busyboxPath: string;
  modulesDir: string;
  modules: readonly string[];
  guestBinaryPath: string;
}): Promise<Uint8Array> {
  const entries: CpioEntry[] = [];
  const dirs = new Set<string>();
  const dir = (p: string) => {
    const parts = p.split("/");
    for (let i = 1; i <= parts.length; i++) {
      const d = parts.slice(0, i).join("/");
      if (!dirs.has(d)) {
        dirs.add(d);
        entries.push({ path: d, kind: "dir", mode: 0o755 });
      }
    }
  };
  for (const d of ["bin", "dev", "proc", "sys", "lower", "upper", "newroot", "etc", "lib/modules"]) dir(d);
  entries.push({ path: "dev/console", kind: "char", mode: 0o600, major: 5, minor: 1 });
  entries.push({ path: "init", kind: "file", mode: 0o755, data: new TextEncoder().encode(squashfsInit(opts.modules)) });
  entries.push({ path: "bin/busybox", kind: "file", mode: 0o755, data: await readFile(opts.busyboxPath) });
  for (const m of opts.modules)
    entries.push({
      path: `lib/modules/${m}.ko`,
      kind: "file",
      mode: 0o644,
      data: await readFile(join(opts.modulesDir, `${m}.ko`)),
    });
  for (const lib of await sharedLibraries(opts.guestBinaryPath)) {
    const rel = lib.replace(/^\/+/, "");
    dir(rel.split("/").slice(0, -1).join("/"));
    entries.push({ path: rel, kind: "file", mode: 0o755, data: await readFile(lib) });
  }
  return encodeCpio(entries);
}
