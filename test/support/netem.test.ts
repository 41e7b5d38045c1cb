/**
 * The netem arguments built from ImpairmentOptions (pure), and the probe's
 * answer shape (whether this kernel has netem varies: it must say why not).
 */
import { expect, test } from "bun:test";
import { netnsSkipReason } from "./netns.ts";
import { NETEM_LIMIT_PACKETS, NETEM_REORDER_CORRELATION_PERCENT, netemMissingReason, netemQdiscArgs } from "./netem.ts";

test("loss, delay and reordering become one netem qdisc with a queue for high rates", () => {
  expect(netemQdiscArgs("veth0", { lossPercent: 1, delayMs: 20, reorderPercent: 25, seed: 1 })).toEqual([
    "tc",
    "qdisc",
    "add",
    "dev",
    "veth0",
    "root",
    "netem",
    "limit",
    String(NETEM_LIMIT_PACKETS),
    "loss",
    "1%",
    "delay",
    "20ms",
    "reorder",
    "25%",
    `${NETEM_REORDER_CORRELATION_PERCENT}%`,
  ]);
  // netem reorders only delayed traffic: without a delay there is no reorder clause.
  expect(netemQdiscArgs("veth0", { lossPercent: 2, delayMs: 0, reorderPercent: 25, seed: 1 })).toEqual([
    "tc",
    "qdisc",
    "add",
    "dev",
    "veth0",
    "root",
    "netem",
    "limit",
    String(NETEM_LIMIT_PACKETS),
    "loss",
    "2%",
  ]);
});

const skip = netnsSkipReason();
test.skipIf(!!skip)("the probe answers null or a reason, and leaves no namespace behind", () => {
  const name = `bbnp-${process.pid}`;
  const reason = netemMissingReason(name);
  if (reason !== null) expect(reason).toMatch(/netem|tc/);
  console.log(`netem on this kernel: ${reason ?? "available"}`);
  expect(Bun.spawnSync(["ip", "netns", "list"]).stdout.toString()).not.toContain(name);
});
