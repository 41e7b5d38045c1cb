/**
 * The guest's private IPv6 address on its kernel command line (spec
 * "Networks, addresses, and grants"; docs/adr/0157-host-endpoint-routing.md):
 * the allocation's address an ensure_* command carries becomes
 * `beachball.ipv6=<address>` and `beachball.ipv6_router=fe80::1`, which the
 * image's init turns into `<address>/128` on eth0 and `default via fe80::1
 * dev eth0` (router advertisements off, no duplicate address detection:
 * the scheduler hands each address to one allocation).
 *
 * Owns: checking the address a scheduler sent before it reaches a kernel
 * command line. Must never: pass on anything but one canonical global or
 * unique-local unicast address (no prefix, zone, spaces or other
 * arguments smuggled into the command line).
 */
import { isIPv6 } from "node:net";
import { GUEST_IPV6_KEYS, GUEST_IPV6_ROUTER } from "../../protocol/guest.ts";
import { MAX_IPV6_TEXT } from "../../protocol/agent.ts";
import { canonicalIpv6, ipv6Bytes } from "../../protocol/ipAddress.ts";
import { AgentError } from "../errors.ts";

/**
 * True when `a` is an address a guest may be given: an IPv6 literal in its
 * canonical RFC 5952 text (at most MAX_IPV6_TEXT characters), global
 * unicast (2000::/3) or unique local (fc00::/7, RFC 4193). Pure.
 */
export function isGuestIpv6Address(a: unknown): a is string {
  if (typeof a !== "string" || a.length > MAX_IPV6_TEXT || !isIPv6(a) || a.includes("%")) return false;
  if (canonicalIpv6(a) !== a) return false;
  const first = ipv6Bytes(a)[0]!;
  return (first & 0xe0) === 0x20 || (first & 0xfe) === 0xfc;
}

/**
 * The guest kernel arguments for `address` (a command's `spec.ipv6Address`):
 * none when it is absent, else the address and the router keys of
 * GUEST_IPV6_KEYS. Throws AgentError NETWORK_SETUP_FAILED when the address
 * is not one isGuestIpv6Address accepts. Pure.
 */
export function guestIpv6KernelArgs(address: string | undefined): string[] {
  if (address === undefined) return [];
  if (!isGuestIpv6Address(address)) {
    throw new AgentError(
      "NETWORK_SETUP_FAILED",
      `the command's ipv6Address ${JSON.stringify(String(address).slice(0, 64))} is not a canonical global or unique-local IPv6 address`,
      { subsystem: "isolation" },
    );
  }
  return [`${GUEST_IPV6_KEYS.address}=${address}`, `${GUEST_IPV6_KEYS.router}=${GUEST_IPV6_ROUTER}`];
}
