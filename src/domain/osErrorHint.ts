/**
 * Fix hints for operating-system errors that every role can meet (issue 18
 * item 14): a process whose address families are restricted (systemd's
 * `RestrictAddressFamilies=` without AF_NETLINK, a seccomp or container
 * policy) gets EAFNOSUPPORT from socket(AF_NETLINK), which `ip`, `nft` and
 * getifaddrs(3) (os.networkInterfaces) all need. Their own messages
 * ("Cannot open netlink socket: Address family not supported by protocol",
 * "getifaddrs returned an error") do not say what to change, and a generic
 * hint ("grant CAP_SYS_ADMIN") sends the operator the wrong way; this names
 * the real cause.
 * Pure (src/domain): imports nothing. Must never: guess a cause the error text or
 * errno does not show.
 */

/** errno EAFNOSUPPORT on Linux. */
export const EAFNOSUPPORT = 97;

/** The hint for a restricted address family (netlink). */
export const NETLINK_RESTRICTED_HINT =
  "the process may not open netlink sockets (socket(AF_NETLINK) fails with EAFNOSUPPORT, an address-family restriction): add AF_NETLINK to RestrictAddressFamilies= in the agent's unit (systemctl edit beachball-agent), or lift the seccomp/container policy that blocks it";

/** True when `e` (a thrown value, or a command's stderr text) shows EAFNOSUPPORT. */
export function isAddressFamilyRestricted(e: unknown): boolean {
  if (typeof e === "string") return /Address family not supported|EAFNOSUPPORT/i.test(e);
  if (e && typeof e === "object") {
    const o = e as { errno?: unknown; code?: unknown; message?: unknown; info?: { errno?: unknown } };
    if (
      Math.abs(Number(o.errno)) === EAFNOSUPPORT ||
      Math.abs(Number(o.info?.errno)) === EAFNOSUPPORT ||
      o.code === "EAFNOSUPPORT"
    )
      return true;
    if (typeof o.message === "string") return isAddressFamilyRestricted(o.message);
  }
  return false;
}

/** The fix for an error: the address-family hint when `e` shows EAFNOSUPPORT, else `fallback`. */
export function fixHintFor(e: unknown, fallback: string): string {
  return isAddressFamilyRestricted(e) ? NETLINK_RESTRICTED_HINT : fallback;
}

/** `message`, followed by the address-family hint when `e` shows EAFNOSUPPORT (for errors that carry no separate fix). */
export function withCauseHint(message: string, e: unknown): string {
  return isAddressFamilyRestricted(e) ? `${message} (fix: ${NETLINK_RESTRICTED_HINT})` : message;
}
