/**
 * The default placement network (no uplink configured): TAP and firewall in
 * the namespace, no veth, no route off the host, nothing in the root
 * namespace; destroy removes it and is idempotent; a failed build (missing
 * uplink device) rolls back completely. Needs root, ip and nft; otherwise
 * prints why and skips. Leaves nothing behind.
 */
import { afterAll, expect, test } from "bun:test";
import { randomBytes } from "node:crypto";
import {
  createPlacementNetwork,
  destroyPlacementNetwork,
  hostVethName,
  listPlacementNetworks,
} from "../../src/agent/isolation/placementNet.ts";
import { netPolicyFrom } from "../../src/agent/isolation/policy.ts";
import { nftTableName } from "../../src/agent/isolation/rules.ts";

const skipReason =
  process.getuid?.() !== 0
    ? "needs root (network namespaces)"
    : !Bun.which("ip") || !Bun.which("nft")
      ? "ip or nft missing (apt-get install -y iproute2 nftables)"
      : null;
if (skipReason) console.log(`SKIP test/integration/net-default.test.ts: ${skipReason}`);

const a = `bb-${randomBytes(6).toString("hex")}`;
const b = `bb-${randomBytes(6).toString("hex")}`;
const run = (cmd: string[]) => Bun.spawnSync(cmd, { stdout: "pipe", stderr: "pipe" });
afterAll(async () => {
  for (const n of [a, b]) await destroyPlacementNetwork(n, [undefined]).catch(() => {});
});

test.skipIf(!!skipReason)("no uplink: firewall loaded, no veth, no default route, root ruleset untouched", async () => {
  const before = run(["nft", "list", "ruleset"]).stdout.toString();
  const t = performance.now();
  const net = await createPlacementNetwork(a);
  console.log(`net-default: created in ${Math.round(performance.now() - t)} ms`);
  expect(net.uplink).toBeUndefined();
  expect(run(["ip", "netns", "exec", a, "nft", "list", "tables"]).stdout.toString()).toContain(
    `inet ${nftTableName(a)}`,
  );
  expect(run(["ip", "-n", a, "route", "show", "default"]).stdout.toString().trim()).toBe("");
  expect(run(["ip", "-n", a, "-o", "link"]).stdout.toString()).not.toContain("veth");
  expect(run(["ip", "link", "show", hostVethName(a)]).exitCode).not.toBe(0);
  expect(run(["nft", "list", "ruleset"]).stdout.toString()).toBe(before);
  await destroyPlacementNetwork(a, [undefined]);
  await destroyPlacementNetwork(a, [undefined]); // idempotent
  expect(await listPlacementNetworks()).not.toContain(a);
});

test.skipIf(!!skipReason)("a missing uplink device fails with NETWORK_SETUP_FAILED and rolls back", async () => {
  const policy = netPolicyFrom({ uplink: { device: `bbnodev${process.pid % 1000}` } });
  await expect(createPlacementNetwork(b, policy)).rejects.toMatchObject({ code: "NETWORK_SETUP_FAILED" });
  expect(await listPlacementNetworks()).not.toContain(b);
});
