/**
 * The IPv6 part of every image's network setup, as shell fragments the
 * init scripts embed (the dev image's /sbin/beachball-init, a converted
 * image's initramfs /init and the reference image's beachball-net
 * service): reads the allocation's private address and router from the
 * kernel command line (GUEST_IPV6_KEYS, put there by the agent,
 * src/agent/isolation/guestIpv6.ts) and configures `<address>/128` on eth0
 * with `default via <router> dev eth0` (spec "Networks, addresses, and
 * grants"; docs/connect.md).
 *
 * Router advertisements and address autoconfiguration are switched off on
 * eth0 before it comes up (the guest's only IPv6 route is the one given),
 * and so is duplicate address detection (the scheduler gives each address
 * to one allocation, and a tentative address would refuse the first
 * connections for a second or more under TCG). Must never: configure an
 * address or route the command line did not name.
 */
import { GUEST_IPV6_KEYS } from "../protocol/guest.ts";

/** Where the fragments write eth0's IPv6 settings (tests point a copy elsewhere). */
export const GUEST_IPV6_SYSCTL_DIR = "/proc/sys/net/ipv6/conf/eth0";

/** `case` arms (inside a `for arg in $(cat /proc/cmdline)` loop) that set `$ipv6` and `$ipv6_router`. */
export const GUEST_IPV6_CASES = `    ${GUEST_IPV6_KEYS.address}=*) ipv6="\${arg#*=}" ;;
    ${GUEST_IPV6_KEYS.router}=*) ipv6_router="\${arg#*=}" ;;`;

/**
 * The eth0 sysctls; run before eth0 comes up (so no link-local address is
 * autoconfigured with router solicitations) when `$ipv6` is set. `tag`
 * prefixes the console message of a failed step.
 */
export function guestIpv6Sysctls(tag: string): string {
  return `if [ -n "$ipv6" ]; then
  for k in accept_ra autoconf accept_dad; do echo 0 > ${GUEST_IPV6_SYSCTL_DIR}/$k || echo "${tag}: cannot set IPv6 $k on eth0"; done
fi`;
}

/**
 * The address and route, after guestIpv6Sysctls; `ip` is the command that
 * runs iproute2 or busybox's ip (e.g. `$B ip`), `tag` as above.
 */
export function guestIpv6Setup(ip: string, tag: string): string {
  return `if [ -n "$ipv6" ]; then
  ${ip} link set eth0 up && ${ip} -6 addr add "$ipv6/128" dev eth0 || echo "${tag}: eth0 IPv6 setup failed"
  if [ -n "$ipv6_router" ]; then ${ip} -6 route add default via "$ipv6_router" dev eth0 || echo "${tag}: IPv6 route failed"; fi
fi`;
}
