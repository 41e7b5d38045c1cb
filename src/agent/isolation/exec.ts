/**
 * The process port of the network code: runs `ip` and `nft` (optionally
 * inside a named network namespace) and returns exit code and output.
 *
 * Implements no spec rule by itself; placementNet.ts and the doctor use it.
 * A failure caused by an address-family restriction (EAFNOSUPPORT on
 * socket(AF_NETLINK)) says so in the error (domain/osErrorHint.ts).
 * Must never: go through a shell (argv only), or throw on a non-zero exit
 * (callers decide; `checked` variants throw NETWORK_SETUP_FAILED), except
 * where the answer would be a lie (linkExists under a netlink restriction).
 */
import { netError } from "./addressPool.ts";
import { isAddressFamilyRestricted, withCauseHint } from "../../domain/osErrorHint.ts";

/** Result of one command. */
export interface CmdResult {
  code: number;
  out: string;
  err: string;
}

/** Runs argv, feeding `stdin` when given. Never throws on a non-zero exit; a missing binary gives code 127. */
export async function runCmd(argv: string[], stdin?: string): Promise<CmdResult> {
  let p: ReturnType<typeof Bun.spawn>;
  try {
    p = Bun.spawn(argv, {
      stdin: stdin === undefined ? "ignore" : new TextEncoder().encode(stdin),
      stdout: "pipe",
      stderr: "pipe",
    });
  } catch (e) {
    return { code: 127, out: "", err: (e as Error).message };
  }
  const [out, err, code] = await Promise.all([
    new Response(p.stdout as ReadableStream).text(),
    new Response(p.stderr as ReadableStream).text(),
    p.exited,
  ]);
  return { code, out, err: err.trim() };
}

/** argv prefix that runs a command inside namespace `netns` (nothing for the root namespace). */
export function inNetns(netns: string | undefined, argv: string[]): string[] {
  return netns ? ["ip", "netns", "exec", netns, ...argv] : argv;
}

/** `ip [-n netns] ARGS`; never throws on a non-zero exit. */
export function ip(netns: string | undefined, args: string[]): Promise<CmdResult> {
  return runCmd(["ip", ...(netns ? ["-n", netns] : []), ...args]);
}

/** `ip` that throws NETWORK_SETUP_FAILED on a non-zero exit; returns stdout. */
export async function ipChecked(netns: string | undefined, args: string[]): Promise<string> {
  const r = await ip(netns, args);
  if (r.code !== 0)
    throw netError(
      withCauseHint(`ip ${netns ? `-n ${netns} ` : ""}${args.join(" ")} failed (exit ${r.code}): ${r.err}`, r.err),
    );
  return r.out;
}

/** Loads nft rule text with `nft -f -` in `netns` (root namespace when undefined). Throws NETWORK_SETUP_FAILED on failure. */
export async function nftLoad(netns: string | undefined, text: string): Promise<void> {
  const r = await runCmd(inNetns(netns, ["nft", "-f", "-"]), text);
  if (r.code !== 0)
    throw netError(
      withCauseHint(
        `nft -f - in ${netns ?? "the root namespace"} failed (exit ${r.code}): ${r.err.slice(0, 600)}`,
        r.err,
      ),
    );
}

/** Names (`family name`) of the nftables tables in `netns`. Throws NETWORK_SETUP_FAILED when nft fails. */
export async function nftTables(netns: string | undefined): Promise<string[]> {
  const r = await runCmd(inNetns(netns, ["nft", "list", "tables"]));
  if (r.code !== 0)
    throw netError(withCauseHint(`nft list tables in ${netns ?? "the root namespace"} failed: ${r.err}`, r.err));
  return r.out
    .split("\n")
    .map((l) => l.trim().replace(/^table\s+/, ""))
    .filter(Boolean);
}

/** IPv4 addresses (`local`) configured in `netns`, per interface. Throws NETWORK_SETUP_FAILED when `ip` fails. */
export async function ipv4Addresses(
  netns: string | undefined,
): Promise<Array<{ ifname: string; local: string; prefixlen: number }>> {
  const out = await ipChecked(netns, ["-j", "-4", "addr", "show"]);
  const links = JSON.parse(out || "[]") as Array<{
    ifname: string;
    addr_info?: Array<{ local?: string; prefixlen?: number }>;
  }>;
  return links.flatMap((l) =>
    (l.addr_info ?? [])
      .filter((a) => a.local)
      .map((a) => ({ ifname: l.ifname, local: a.local!, prefixlen: a.prefixlen ?? 32 })),
  );
}

/** True when interface `name` exists in `netns`. Throws NETWORK_SETUP_FAILED when `ip` cannot ask (netlink restricted), rather than answer "absent". */
export async function linkExists(netns: string | undefined, name: string): Promise<boolean> {
  const r = await ip(netns, ["link", "show", "dev", name]);
  if (r.code !== 0 && isAddressFamilyRestricted(r.err))
    throw netError(withCauseHint(`ip link show dev ${name} failed: ${r.err}`, r.err));
  return r.code === 0;
}
