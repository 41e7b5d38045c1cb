/**
 * The two shell scripts of the dev image: the initramfs `/init` (load
 * modules, mount the ext4 root from /dev/vda, switch_root) and the root's
 * `/sbin/beachball-init` (mount table, optional eth0 from kernel arguments,
 * exec `beachball-guest` as PID 1).
 *
 * Implements the boot path of spec "Images" (ext4 root, beachball-init inside
 * the image) with the module order in docs/architecture.md. Must never: route traffic off
 * the host (only a gateway inside the placement's /30 is set) or leave the
 * VM running after a boot failure (it powers off so QEMU exits).
 */
import { guestIpv6Setup, guestIpv6Sysctls } from "./guestIpv6Init.ts";
import { GUEST_NET_CASES, GUEST_NET_VARS, guestIpv4Setup, initramfsPreamble } from "./guestNetInit.ts";

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
$B mount --move /dev /newroot/dev
$B mount --move /proc /newroot/proc
$B mount --move /sys /newroot/sys
exec $B switch_root /newroot "$init" "$@"
`;
}

/**
 * /sbin/beachball-init in the ext4 root: reads beachball.ipv4 /
 * beachball.gateway / beachball.dns (comma-separated) and the private IPv6
 * address and router (src/image/guestIpv6Init.ts) from /proc/cmdline.
 */
export const ROOTFS_INIT = `#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
[ -e /proc/self ] || mount -t proc proc /proc
mounted() { grep -q " $1 " /proc/mounts; }
mounted /sys || mount -t sysfs sysfs /sys
mounted /dev || mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=755 tmpfs /run
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
hostname beachball
ip link set lo up
${GUEST_NET_VARS}
for arg in $(cat /proc/cmdline); do
  case "$arg" in
${GUEST_NET_CASES}
  esac
done
${guestIpv6Sysctls("beachball-init")}
${guestIpv4Setup("ip", "beachball-init")}
${guestIpv6Setup("ip", "beachball-init")}
: > /etc/resolv.conf
for r in $(echo "$dns" | tr , ' '); do echo "nameserver $r" >> /etc/resolv.conf; done
read -r up _ < /proc/uptime
echo "beachball-init: starting beachball-guest at \${up}s"
exec ${DEV_GUEST_BINARY_IN_IMAGE}
`;
