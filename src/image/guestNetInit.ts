/**
 * The shell fragments every image's init shares (the dev image's initramfs
 * /init and /sbin/beachball-init, a converted image's initramfs /init, the
 * reference image's beachball-net service): the busybox initramfs preamble
 * (devtmpfs, proc, sysfs, the console, module loading) and the guest's
 * network settings read from the kernel command line the agent wrote
 * (`beachball.ipv4` CIDR, `beachball.gateway`, `beachball.dns`
 * comma-separated, and the private IPv6 keys of src/image/guestIpv6Init.ts).
 *
 * One copy, so a key the agent adds reaches every image the same way. Must
 * never: configure an address, route or resolver the command line did not
 * name.
 */
import { GUEST_IPV6_CASES } from "./guestIpv6Init.ts";

/**
 * The start of a busybox initramfs /init (`$B` is busybox): mounts
 * devtmpfs, proc and sysfs, puts stdio on the console, defines
 * `fail MESSAGE` (prints, syncs, reboots: the agent sees the VM exit) and
 * loads `modules` (names under /lib/modules, without `.ko`) in order.
 */
export function initramfsPreamble(modules: readonly string[]): string {
  return `$B mount -t devtmpfs devtmpfs /dev
exec 0</dev/console 1>/dev/console 2>&1
$B mount -t proc proc /proc
$B mount -t sysfs sysfs /sys
fail() { echo "beachball-initramfs: $*"; $B sync; $B reboot -f; $B sleep 5; }
for m in ${modules.join(" ")}; do
  $B insmod /lib/modules/$m.ko || echo "beachball-initramfs: insmod $m failed"
done`;
}

/**
 * Read-ahead of the root disk while the guest binary pages in, KiB (the
 * kernel's default is 128). The guest is a 5 MB static binary read on demand
 * from virtio-blk; measured under TCG, exec → exit of the guest went from a
 * median of 485 ms to 310 ms with 4 MiB of read-ahead (four cold boots each).
 */
export const ROOT_READ_AHEAD_KIB = 4096;

/** Shell that sets ROOT_READ_AHEAD_KIB on the block device `$dev` names (e.g. `/dev/vda`); a failure is only printed. */
export function rootReadAhead(dev: string): string {
  return `echo ${ROOT_READ_AHEAD_KIB} > /sys/block/\${${dev}#/dev/}/queue/read_ahead_kb || echo "beachball-initramfs: cannot set the read-ahead of $${dev}"`;
}

/** Empties the variables GUEST_NET_CASES sets (`$ipv4`, `$gw`, `$dns`, `$ipv6`, `$ipv6_router`). */
export const GUEST_NET_VARS = `ipv4=
gw=
dns=
ipv6=
ipv6_router=`;

/** `case` arms (inside a `for arg in $(cat /proc/cmdline)` loop) for the network keys. */
export const GUEST_NET_CASES = `    beachball.ipv4=*) ipv4="\${arg#*=}" ;;
    beachball.gateway=*) gw="\${arg#*=}" ;;
    beachball.dns=*) dns="\${arg#*=}" ;;
${GUEST_IPV6_CASES}`;

/**
 * Brings eth0 up with `$ipv4` and the default route via `$gw` when they are
 * set; `ip` runs iproute2 or busybox's ip (e.g. `$B ip`), `tag` prefixes
 * the console message of a failed step.
 */
export function guestIpv4Setup(ip: string, tag: string): string {
  return `if [ -n "$ipv4" ]; then
  ${ip} link set eth0 up && ${ip} addr add "$ipv4" dev eth0 || echo "${tag}: eth0 setup failed"
  if [ -n "$gw" ]; then ${ip} route add default via "$gw" dev eth0 || echo "${tag}: route failed"; fi
fi`;
}
