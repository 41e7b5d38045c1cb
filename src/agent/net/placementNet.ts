/**
 * A placement's private network: one network namespace per placement with a
 * TAP device (the VM's NIC) holding the host side of a /30.
 *
 * Implements the namespace and TAP part of spec "Prepare (ensure_present)".
 * No veth or uplink yet: a guest reaches only 10.0.0.1 (the TAP inside its
 * namespace), never the host's networks or the internet. Must never: touch
 * a namespace whose name lacks the `bb-` prefix, or leave a half-built
 * namespace behind after a failed create.
 */

/** Prefix of every namespace Beachball owns (inventory on restart relies on it). */
export const PLACEMENT_NETNS_PREFIX = "bb-";
/** TAP device name inside every placement namespace. */
export const PLACEMENT_TAP_NAME = "bbtap0";
/** Host (TAP) side address of the placement /30. */
export const PLACEMENT_HOST_CIDR = "10.0.0.1/30";
/** Guest side address of the placement /30. */
export const PLACEMENT_GUEST_CIDR = "10.0.0.2/30";

/** A created placement network. */
export interface PlacementNetwork {
  /** Network namespace name (`bb-…`). */
  netns: string;
  /** TAP device inside `netns`, for the VMM's `-netdev tap,ifname=`. */
  tapName: string;
  /** Host side, CIDR. */
  hostCidr: string;
  /** Guest side, CIDR. */
  guestCidr: string;
  /** Kernel arguments that configure the guest's eth0 (read by /sbin/beachball-init). */
  guestKernelArgs: string[];
}

/** Error with code NETWORK_SETUP_FAILED (an AGENT_ERROR_CODES entry). */
function netError(msg: string): Error & { code: "NETWORK_SETUP_FAILED" } {
  return Object.assign(new Error(msg), { code: "NETWORK_SETUP_FAILED" as const });
}

function checkName(name: string): void {
  if (!/^bb-[A-Za-z0-9_-]{1,60}$/.test(name)) throw netError(`invalid placement namespace name: ${JSON.stringify(name)}`);
}

/** Runs `ip` with `args`; returns exit code, stdout and stderr (never throws on a non-zero exit). */
async function ip(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const p = Bun.spawn(["ip", ...args], { stdin: "ignore", stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { code, out, err: err.trim() };
}

async function ipChecked(args: string[]): Promise<string> {
  const r = await ip(args);
  if (r.code !== 0) throw netError(`ip ${args.join(" ")} failed (exit ${r.code}): ${r.err}`);
  return r.out;
}

/**
 * Creates namespace `name` with loopback up and TAP `bbtap0` at 10.0.0.1/30,
 * link up. Throws NETWORK_SETUP_FAILED (after removing what it created) when
 * the name is invalid, the namespace already exists, or an `ip` step fails.
 */
export async function createPlacementNetwork(name: string): Promise<PlacementNetwork> {
  checkName(name);
  await ipChecked(["netns", "add", name]);
  try {
    await ipChecked(["-n", name, "link", "set", "lo", "up"]);
    await ipChecked(["-n", name, "tuntap", "add", "dev", PLACEMENT_TAP_NAME, "mode", "tap"]);
    await ipChecked(["-n", name, "addr", "add", PLACEMENT_HOST_CIDR, "dev", PLACEMENT_TAP_NAME]);
    await ipChecked(["-n", name, "link", "set", PLACEMENT_TAP_NAME, "up"]);
  } catch (e) {
    await destroyPlacementNetwork(name).catch(() => {});
    throw e;
  }
  return {
    netns: name,
    tapName: PLACEMENT_TAP_NAME,
    hostCidr: PLACEMENT_HOST_CIDR,
    guestCidr: PLACEMENT_GUEST_CIDR,
    guestKernelArgs: [`beachball.ipv4=${PLACEMENT_GUEST_CIDR}`, `beachball.gateway=${PLACEMENT_HOST_CIDR.split("/")[0]}`],
  };
}

/**
 * Deletes namespace `name` (its TAP goes with it). Idempotent: an absent
 * namespace counts as success. Throws NETWORK_SETUP_FAILED when the name is
 * invalid or deletion fails (for example while a process still holds it).
 */
export async function destroyPlacementNetwork(name: string): Promise<void> {
  checkName(name);
  if (!(await listPlacementNetworks()).includes(name)) return;
  const r = await ip(["netns", "delete", name]);
  if (r.code !== 0 && (await listPlacementNetworks()).includes(name)) {
    throw netError(`ip netns delete ${name} failed (exit ${r.code}): ${r.err}`);
  }
}

/** Names of all namespaces with the `bb-` prefix. Throws NETWORK_SETUP_FAILED if `ip netns list` fails. */
export async function listPlacementNetworks(): Promise<string[]> {
  const out = await ipChecked(["netns", "list"]);
  return out
    .split("\n")
    .map((l) => l.trim().split(/\s+/)[0] ?? "")
    .filter((n) => n.startsWith(PLACEMENT_NETNS_PREFIX));
}
