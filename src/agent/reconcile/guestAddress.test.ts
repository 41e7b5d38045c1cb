/**
 * The allocation's private IPv6 address from the command to the guest's
 * kernel command line, through the real reconciler and placement ops over
 * fake ports (named doubles: no VM, no namespace). A malformed address
 * fails Prepare with NETWORK_SETUP_FAILED before any network exists.
 */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { AgentCommand } from "../../protocol/agent.ts";
import { FakeTimeline, MemoryLog } from "../fakePorts.ts";
import { FakeVmHost, FakeVmmDriver, steadyBehaviour } from "../vmm/fakeDriver.ts";
import { FakeIsolation } from "../isolation/fakeIsolation.ts";
import { FakeImages } from "../image/fakeImages.ts";
import { AgentStore } from "../store.ts";
import { placementDirName } from "../resourceNames.ts";
import { commandDigest } from "../control/commandIntake.ts";
import { PlacementReconciler } from "./reconciler.ts";

const work = mkdtempSync(join(tmpdir(), "bb-guest-address-test-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

function rig(name: string, ipv6Address: string | undefined) {
  const tl = new FakeTimeline(1_800_000_000_000);
  const timers = tl.timers();
  const host = new FakeVmHost(timers, steadyBehaviour({ launchMs: 10, bootMs: 200 }), () => {});
  const store = new AgentStore(join(work, `${name}.db`));
  const isolation = new FakeIsolation();
  const reconciler = new PlacementReconciler({
    store,
    clock: tl.clock,
    log: new MemoryLog(),
    onObservation: () => {},
    ctx: {
      allocationsDir: join(work, name),
      driver: new FakeVmmDriver(host, timers),
      images: new FakeImages(timers, join(work, "img")),
      isolation,
      timers,
      random: { bytes: (n) => new Uint8Array(n).fill(1) },
      guestBootTimeoutMs: 5_000,
    },
  });
  const give = (type: AgentCommand["type"]) => {
    const cmd: AgentCommand = {
      commandId: `p:${type}:1`,
      type,
      allocationId: "a",
      placementId: "p",
      generation: 1,
      agentEpoch: "e",
      leaseExpiresAt: new Date(tl.clock.wallMs() + 60_000).toISOString(),
      spec: {
        cpuMillis: 1000,
        memoryMiB: 256,
        ephemeralDiskMiB: 1024,
        imageDigest: `sha256:${"b".repeat(64)}`,
        ...(ipv6Address !== undefined ? { ipv6Address } : {}),
      },
    };
    store.recordCommand(cmd, commandDigest(cmd), placementDirName("h", "a", "p", 1), tl.clock.wallMs());
    reconciler.kick("p");
  };
  return { tl, store, host, isolation, give };
}

test("the command's address reaches the guest's kernel command line with the router", async () => {
  const { tl, store, host, give } = rig("ok", "fd12:3456:789a:1::2");
  give("ensure_present");
  await tl.advance(100);
  give("ensure_running");
  await tl.advance(1_000);
  expect(store.placement("p")?.observed).toBe("running");
  const [vm] = host.running();
  expect(vm!.spec.kernelArgs).toContain("beachball.ipv6=fd12:3456:789a:1::2");
  expect(vm!.spec.kernelArgs).toContain("beachball.ipv6_router=fe80::1");
});

test("without an address the guest gets no IPv6 arguments", async () => {
  const { tl, host, give } = rig("none", undefined);
  give("ensure_present");
  await tl.advance(100);
  give("ensure_running");
  await tl.advance(1_000);
  const [vm] = host.running();
  expect(vm!.spec.kernelArgs.filter((a) => a.startsWith("beachball.ipv6"))).toEqual([]);
});

test("a malformed address fails Prepare with NETWORK_SETUP_FAILED; no network, no VM", async () => {
  const { tl, store, host, isolation, give } = rig("bad", "fd00::2 init=/bin/sh");
  give("ensure_present");
  await tl.advance(100);
  expect(store.placement("p")?.errorCode).toBe("NETWORK_SETUP_FAILED");
  expect(store.pendingUpdates(10).at(-1)?.errorCode).toBe("NETWORK_SETUP_FAILED");
  expect(isolation.networks.size).toBe(0);
  expect(host.running()).toEqual([]);
});
