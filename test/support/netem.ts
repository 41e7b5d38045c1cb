/**
 * The kernel's `tc netem` for tests that impair a link: a probe that says
 * whether this kernel has the qdisc (and why not), and the netem arguments
 * that match an ImpairmentOptions (test/support/impairment.ts), so a test
 * applies netem when the kernel has it and falls back to the userspace
 * Impairment, printing which one it used. Probes only in a scratch namespace
 * of the caller's own, which it deletes; never touches the host's devices.
 */
import type { ImpairmentOptions } from "./impairment.ts";
import { Netns, sh } from "./netns.ts";

/** Correlation (%) for netem's reorder decision: reordered packets come in short runs. */
export const NETEM_REORDER_CORRELATION_PERCENT = 50;
/** netem's queue in packets: 1,000 (the default) holds only ≈ 70 MB/s × 20 ms; room for bursts at high rates. */
export const NETEM_LIMIT_PACKETS = 20_000;

/**
 * Whether the netem qdisc can be added here: null when it can, otherwise the
 * reason (tc's error, e.g. "Specified qdisc kind is unknown." when the kernel
 * was built without CONFIG_NET_SCH_NETEM). Tried on `lo` of a scratch
 * namespace named `scratchNs`, which is deleted again.
 */
export function netemMissingReason(scratchNs: string): string | null {
  if (!Bun.which("tc")) return "tc is not installed (apt-get install -y iproute2)";
  const ns = new Netns(scratchNs);
  try {
    const r = sh(ns.exec(["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]));
    return r.code === 0 ? null : `tc qdisc add … netem failed: ${(r.err || r.out).trim()}`;
  } finally {
    ns.delete();
  }
}

/** Whether this kernel has the netem qdisc (see netemMissingReason). */
export function netemAvailable(scratchNs: string): boolean {
  return netemMissingReason(scratchNs) === null;
}

/**
 * `tc qdisc add dev DEV root netem …` for `opts`: loss, a fixed delay and
 * reordering (a packet skips the delay with probability reorderPercent,
 * NETEM_REORDER_CORRELATION_PERCENT correlated). The seed is not used: the
 * kernel's loss is not reproducible run to run.
 */
export function netemQdiscArgs(dev: string, opts: ImpairmentOptions): string[] {
  const args = [
    "tc",
    "qdisc",
    "add",
    "dev",
    dev,
    "root",
    "netem",
    "limit",
    String(NETEM_LIMIT_PACKETS),
    "loss",
    `${opts.lossPercent}%`,
  ];
  if (opts.delayMs > 0) {
    args.push("delay", `${opts.delayMs}ms`);
    if (opts.reorderPercent > 0)
      args.push("reorder", `${opts.reorderPercent}%`, `${NETEM_REORDER_CORRELATION_PERCENT}%`);
  }
  return args;
}
