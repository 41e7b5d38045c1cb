/**
 * The dev image's boot: the initramfs `/init` shell script (load modules,
 * mount the ext4 root from /dev/vda, switch_root) and the root's
 * `/sbin/beachball-init`, a link to `beachball-guest`, which is then PID 1
 * and the system's init (mount table, optional eth0 from kernel arguments).
 *
 * Implements the boot path of spec "Images" (ext4 root, beachball-init inside
 * the image) with the module order in docs/architecture.md. Must never: route traffic off
 * the host (only a gateway inside the placement's /30 is set) or leave the
 * VM running after a boot failure (it powers off so QEMU exits).
 */
import { initramfsPreamble, rootReadAhead } from "./guestNetInit.ts";

/** The guest binary's path in the dev image's root (docs/adr/0170-static-go-guest.md). */
export const DEV_GUEST_BINARY_IN_IMAGE = "/usr/bin/beachball-guest";

/**
 * The initramfs /init for the given insmod order. It starts the kernel
 * argument `init=` (default /sbin/beachball-init; the reference image names
 * systemd) with the kernel's init arguments (those after `--`). Any failure reboots (QEMU exits through -no-reboot). Private kernel arguments from a placement's
 * initramfs fragment (beachball/kernel-args) are copied to
 * /etc/beachball/kernel-args (0400) for `beachball-guest`, on a tmpfs mounted
 * there: the nonce stays in guest memory, never on the root disk (a file on
 * the host that outlives nothing but could be copied while the VM runs).
 */
export function INITRAMFS_INIT(modules: readonly string[]): string {
  return `#!/bin/busybox sh
B=/bin/busybox
$B mkdir -p /proc /sys /dev /newroot
${initramfsPreamble(modules)}
i=0
while [ ! -b /dev/vda ] && [ $i -lt 400 ]; do $B usleep 25000; i=$((i+1)); done
[ -b /dev/vda ] || fail "no /dev/vda"
root=/dev/vda
${rootReadAhead("root")}
$B mount -t ext4 -o rw /dev/vda /newroot || fail "cannot mount /dev/vda"
init=/sbin/beachball-init
for arg in $($B cat /proc/cmdline); do
  case "$arg" in init=*) init="\${arg#init=}" ;; esac
done
[ -x "/newroot$init" ] || fail "no $init in the root"
if [ -f /beachball/kernel-args ]; then
  # A tmpfs, so the private arguments (the nonce) never reach the root disk, a file on the host.
  $B mkdir -p /newroot/etc/beachball
  $B mount -t tmpfs -o mode=0700,size=64k,nosuid,nodev,noexec beachball-private /newroot/etc/beachball || fail "cannot mount the private arguments' tmpfs"
  $B cp /beachball/kernel-args /newroot/etc/beachball/kernel-args
  $B chmod 0400 /newroot/etc/beachball/kernel-args
fi
read -r up _ < /proc/uptime
echo "beachball-initramfs: starting $init at \${up}s"
$B mount --move /dev /newroot/dev
$B mount --move /proc /newroot/proc
$B mount --move /sys /newroot/sys
exec $B switch_root /newroot "$init" "$@"
`;
}

/**
 * /sbin/beachball-init in the ext4 root: a relative link to the guest binary
 * (relative, so the initramfs's `-x` check resolves it inside the new root).
 * Started under that name as PID 1, `beachball-guest` is also the system's
 * init: the mount table, the host name, eth0 from `beachball.ipv4` /
 * `beachball.gateway` / `beachball.dns` and the private IPv6 keys, and
 * resolv.conf, with system calls and rtnetlink (guest/internal/sysinit,
 * guest/internal/netconf; docs/adr/0170-static-go-guest.md), where a shell
 * script forked some twenty programs for the same.
 */
export const ROOTFS_INIT_LINK = { path: "/sbin/beachball-init", target: `..${DEV_GUEST_BINARY_IN_IMAGE}` } as const;
