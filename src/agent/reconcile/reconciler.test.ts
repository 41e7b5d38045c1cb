/**
 * The placement reconciler alone (no control loop, no housekeeping) over
 * fake ports: Start refuses to launch once the execution lease has ended,
 * the injected bug (src/agent/debug.ts) launches anyway, a halted
 * reconciler records nothing, a VM that ends on its own is reported
 * with its diagnosis and its console kept, and a fork (issue 21) restores
 * its parent's snapshot from links in its own directory, and a templated
 * class's placement (issue 21, ADR 0182) makes the host's template once,
 * restores it after, and boots cold naming why when the template fails its
 * digests; a parent's resume waits for the disk clones of its forks under
 * way and takes no new fork meanwhile.
 */
import { afterAll, expect, test } from "bun:test";
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { AgentCommand } from "../../protocol/agent.ts";
import { FakeTimeline, MemoryLog } from "../fakePorts.ts";
import { type FakeVm, FakeVmHost, FakeVmmDriver, steadyBehaviour } from "../vmm/fakeDriver.ts";
import { FakeIsolation } from "../isolation/fakeIsolation.ts";
import { FakeImages } from "../image/fakeImages.ts";
import type { ImagePort } from "../image/imagePort.ts";
import type { Timers } from "../ports.ts";
import { AgentStore } from "../store.ts";
import { placementDirName } from "../resourceNames.ts";
import { commandDigest } from "../control/commandIntake.ts";
import type { AgentDebug } from "../debug.ts";
import { PlacementReconciler } from "./reconciler.ts";
import { TEMPLATE_FILE, TemplateStore } from "../templates.ts";
import { AgentError } from "../errors.ts";
import type { GuestChannel, VmHandle, VmSnapshot, VmSpec } from "../vmm/driver.ts";

const work = mkdtempSync(join(tmpdir(), "bb-reconciler-test-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

function rig(
  name: string,
  debug?: AgentDebug,
  failedConsoleDir?: string,
  templates?: TemplateStore,
  images?: (timers: Timers, note: (line: string) => void) => ImagePort,
  driver?: (host: FakeVmHost, timers: Timers) => FakeVmmDriver,
) {
  const tl = new FakeTimeline(1_800_000_000_000);
  const timers = tl.timers();
  const launched: string[] = [];
  const vms: FakeVm[] = []; // every VM launched, in order (a later one of the same instance does not hide an earlier)
  const host = new FakeVmHost(timers, steadyBehaviour({ launchMs: 10, bootMs: 200 }), (vm) => {
    launched.push(vm.instanceId);
    vms.push(vm);
  });
  const store = new AgentStore(join(work, `${name}.db`));
  const reconciler = new PlacementReconciler({
    store,
    clock: tl.clock,
    log: new MemoryLog(),
    onObservation: () => {},
    ...(debug ? { debug } : {}),
    ...(failedConsoleDir ? { failedConsoleDir } : {}),
    ctx: {
      allocationsDir: join(work, name),
      driver: driver ? driver(host, timers) : new FakeVmmDriver(host, timers),
      images: images ? images(timers, (l) => launched.push(l)) : new FakeImages(timers, join(work, "img")),
      isolation: new FakeIsolation(),
      timers,
      random: { bytes: (n) => new Uint8Array(n).fill(1) },
      guestBootTimeoutMs: 5_000,
      ...(templates ? { templates } : {}),
    },
  });
  const give = (type: AgentCommand["type"], leaseMs: number) => {
    const cmd: AgentCommand = {
      commandId: `p:${type}:1:${leaseMs}`,
      type,
      allocationId: "a",
      placementId: "p",
      generation: 1,
      agentEpoch: "e",
      leaseExpiresAt: new Date(leaseMs).toISOString(),
      spec: { cpuMillis: 1000, memoryMiB: 256, ephemeralDiskMiB: 1024, imageDigest: `sha256:${"b".repeat(64)}` },
    };
    store.recordCommand(cmd, commandDigest(cmd), placementDirName("h", "a", "p", 1), tl.clock.wallMs());
    reconciler.kick("p");
  };
  return { tl, store, reconciler, launched, vms, give, host };
}

/** The spec the fork and template tests give (one vCPU, 256 MiB), with `extra` over it. */
const SPEC = { cpuMillis: 1000, memoryMiB: 256, ephemeralDiskMiB: 1024, imageDigest: `sha256:${"b".repeat(64)}` };

/** Records a `type` command for `placementId` of `allocationId` at `generation` (a lease of ten minutes) on rig `r` and kicks it. */
function command(
  r: Pick<ReturnType<typeof rig>, "tl" | "store" | "reconciler">,
  allocationId: string,
  placementId: string,
  type: AgentCommand["type"],
  spec: AgentCommand["spec"],
  generation = 1,
): void {
  const cmd: AgentCommand = {
    commandId: `${placementId}:${type}:${generation}`,
    type,
    allocationId,
    placementId,
    generation,
    agentEpoch: "e",
    leaseExpiresAt: new Date(r.tl.clock.wallMs() + 600_000).toISOString(),
    spec,
  };
  r.store.recordCommand(
    cmd,
    commandDigest(cmd),
    placementDirName("h", allocationId, placementId, 1),
    r.tl.clock.wallMs(),
  );
  r.reconciler.kick(placementId);
}

test("Start refuses to launch once the lease has ended, and reports LEASE_EXPIRED", async () => {
  const { tl, store, launched, give } = rig("expired");
  give("ensure_present", tl.clock.wallMs() + 1_000);
  await tl.advance(100);
  expect(store.placement("p")?.observed).toBe("prepared");
  await tl.advance(2_000);
  give("ensure_running", tl.clock.wallMs() - 1);
  await tl.advance(1_000);
  expect(launched).toEqual([]);
  expect(store.placement("p")?.errorCode).toBe("LEASE_EXPIRED");
  expect(store.pendingUpdates(10).at(-1)?.errorCode).toBe("LEASE_EXPIRED");
});

test("the injected bug launches a VM whose lease has ended", async () => {
  const { tl, launched, give } = rig("bug", { startDespiteExpiredLease: true });
  give("ensure_present", tl.clock.wallMs() + 1_000);
  await tl.advance(2_000);
  give("ensure_running", tl.clock.wallMs() - 1);
  await tl.advance(1_000);
  expect(launched).toHaveLength(1);
});

test("a halted reconciler starts nothing and records nothing", async () => {
  const { tl, store, reconciler, launched, give } = rig("halted");
  give("ensure_present", tl.clock.wallMs() + 60_000);
  await tl.advance(100);
  const before = store.pendingUpdates(100).length;
  await reconciler.halt(1_000);
  give("ensure_running", tl.clock.wallMs() + 60_000);
  await tl.advance(1_000);
  expect(launched).toEqual([]);
  expect(store.pendingUpdates(100)).toHaveLength(before);
});

test("a VM that ends on its own is reported VM_EXITED with its diagnosis; Stop keeps its console when asked", async () => {
  const kept = join(work, "kept");
  const { tl, store, give, host } = rig("crash", undefined, kept);
  give("ensure_present", tl.clock.wallMs() + 60_000);
  await tl.advance(100);
  give("ensure_running", tl.clock.wallMs() + 60_000);
  await tl.advance(1_000);
  expect(store.placement("p")?.observed).toBe("running");
  const [vm] = host.running();
  host.exit(vm!, "crashed", "my script output\n[    5.1] Kernel panic - not syncing: sysrq triggered crash\n");
  await tl.advance(100);
  const u = store.pendingUpdates(100).at(-1)!;
  expect(u).toMatchObject({ state: "error", errorCode: "VM_EXITED", exit: { reason: "KERNEL_PANIC" } });
  expect(u.exit!.consoleTail).toContain("Kernel panic");
  expect(u.exit!.consoleTail).not.toContain("my script output");
  give("ensure_absent", tl.clock.wallMs() + 60_000);
  await tl.advance(1_000);
  expect(store.placement("p")?.observed).toBe("absent");
  const files = readdirSync(kept);
  expect(files).toHaveLength(1);
  expect(readFileSync(join(kept, files[0]!), "utf8")).toContain("Kernel panic");
  expect(statSync(join(kept, files[0]!)).mode & 0o777).toBe(0o600);
});

test("a fork restores its suspended parent's snapshot from links in its own directory; a fork of a parent not suspended at that generation is SNAPSHOT_MISSING", async () => {
  const r = rig("fork");
  const { tl, store, host } = r;
  const give = (allocationId: string, placementId: string, type: AgentCommand["type"], extra = {}) =>
    command(r, allocationId, placementId, type, { ...SPEC, suspendable: true, ...extra });
  give("a", "p", "ensure_present");
  await tl.advance(100);
  give("a", "p", "ensure_running");
  await tl.advance(1_000);
  give("a", "p", "ensure_suspended");
  await tl.advance(1_000);
  const parent = store.placement("p")!;
  expect(parent.observed).toBe("suspended");

  const forkOf = { allocationId: "a", placementId: "p", generation: 1, hostId: "h", payloadAllowed: true };
  give("b", "f", "ensure_present", { forkOf });
  await tl.advance(100);
  const fork = store.placement("f")!;
  expect(fork.observed).toBe("prepared");
  const snapshot = JSON.parse(fork.snapshotJson!) as { dir: string };
  expect(snapshot.dir).toBe(join(work, "fork", fork.dirName, "snapshot-fork"));
  const parentSnapshot = JSON.parse(parent.snapshotJson!) as { dir: string };
  expect(readdirSync(parentSnapshot.dir).length).toBeGreaterThan(0);
  for (const name of readdirSync(parentSnapshot.dir))
    expect(statSync(join(snapshot.dir, name)).ino).toBe(statSync(join(parentSnapshot.dir, name)).ino);
  give("b", "f", "ensure_running", { forkOf });
  await tl.advance(1_000);
  expect(store.placement("f")?.observed).toBe("running");
  expect(host.running().map((vm) => vm.identity.allocationId)).toEqual(["b"]);
  expect(host.running()[0]!.spec.suspendable).toBeUndefined(); // copy-on-write over the parent's frozen RAM
  expect(store.placement("p")?.observed).toBe("suspended"); // the parent is untouched

  give("c", "g", "ensure_present", { forkOf: { ...forkOf, generation: 2 } });
  await tl.advance(100);
  expect(store.placement("g")).toMatchObject({ observed: "error", errorCode: "SNAPSHOT_MISSING" });
});

test("a templated placement makes the template in its own start, the next restores it, and a damaged template is discarded with a cold boot that says why", async () => {
  const t = templateRig("template");
  const start = async (placementId: string) => {
    t.give(placementId, "ensure_present");
    await t.settle(5);
    t.give(placementId, "ensure_running");
    await t.settle(50);
    expect(t.store.placement(placementId)?.observed).toBe("running");
    return t.updates(placementId).find((u) => u.state === "running")?.start;
  };

  expect(await start("p1")).toEqual({ from: "template", built: true });
  // The template's VM booted as an identity of its own, never the placement's.
  const [build] = t.vms;
  expect(build!.identity).toMatchObject({
    generation: 1,
    placementId: expect.stringMatching(/^template-[0-9a-f]{12}$/),
  });
  expect(build!.identity.allocationId).toMatch(/^alloc_[0-9a-f]{32}$/);
  expect(t.keys()).toHaveLength(1);
  const [key] = t.keys();
  expect(readdirSync(t.templates.root)).toEqual([key!]); // the build directory went with the publish
  const record = JSON.parse(readFileSync(join(t.templates.root, key!, TEMPLATE_FILE), "utf8")) as {
    files: Record<string, { sha256: string }>;
  };
  expect(Object.keys(record.files).sort()).toEqual(["rootfs.ext4", "snapshot/fake-snapshot.key"]);

  expect(await start("p2")).toEqual({ from: "template" });
  const allocations = () =>
    t.host
      .running()
      .map((vm) => vm.identity.allocationId)
      .sort();
  expect(allocations()).toEqual(["a-p1", "a-p2"]);
  expect(t.vms.at(-1)?.spec.suspendable).toBeUndefined(); // a template's VM restores copy-on-write

  // A file changed behind the store's back: its digest no longer matches.
  const disk = join(t.templates.root, key!, "rootfs.ext4");
  chmodSync(disk, 0o600);
  writeFileSync(disk, "tampered");
  expect(await start("p3")).toEqual({ from: "boot", fallback: "TEMPLATE_MISMATCH" });
  expect(t.keys()).toEqual([]);
  expect(await start("p4")).toEqual({ from: "template", built: true }); // made again
  expect(allocations()).toEqual(["a-p1", "a-p2", "a-p3", "a-p4"]);
});

test("two placements of one template starting at once: one makes it, the other boots cold (TEMPLATE_BUILDING)", async () => {
  const t = templateRig("template-building");
  for (const id of ["p1", "p2"]) t.give(id, "ensure_present");
  await t.settle(5);
  for (const id of ["p1", "p2"]) t.give(id, "ensure_running");
  await t.settle(50);
  const starts = ["p1", "p2"].map((id) => t.updates(id).find((u) => u.state === "running")?.start);
  expect(starts).toContainEqual({ from: "template", built: true });
  expect(starts).toContainEqual({ from: "boot", fallback: "TEMPLATE_BUILDING" });
  expect(t.keys()).toHaveLength(1);
});

test("a parent's resume waits for the disk clones of forks already under way, and a fork asked for once its resume began is SNAPSHOT_MISSING", async () => {
  // A clone that takes 500 ms of the timeline, noted where VM launches are noted.
  const slow = (timers: Timers, note: (line: string) => void) =>
    new (class extends FakeImages {
      override async cloneRootDisk(src: string, dst: string): Promise<void> {
        note(`clone into ${dst.split("/").at(-2)}`);
        await timers.sleep(500);
        await super.cloneRootDisk(src, dst);
        note("cloned");
      }
    })(timers, join(work, "img"));
  const r = rig("fork-vs-resume", undefined, undefined, undefined, slow);
  const { tl, store, launched, vms } = r;
  const give = (allocationId: string, placementId: string, type: AgentCommand["type"], generation = 1, extra = {}) =>
    command(r, allocationId, placementId, type, { ...SPEC, suspendable: true, ...extra }, generation);
  give("a", "p", "ensure_present");
  await tl.advance(1_000);
  give("a", "p", "ensure_running");
  await tl.advance(1_000);
  give("a", "p", "ensure_suspended");
  await tl.advance(1_000);
  expect(store.placement("p")?.observed).toBe("suspended");
  const parentDir = store.placement("p")!.dirName;
  launched.length = 0;

  const forkOf = { allocationId: "a", placementId: "p", generation: 1, hostId: "h", payloadAllowed: true };
  give("b", "f", "ensure_present", 1, { forkOf });
  await tl.advance(10); // the fork's clone is under way
  give("a", "p", "ensure_running", 2); // the resume, as generation 2
  await tl.advance(10);
  give("c", "g", "ensure_present", 1, { forkOf }); // too late: the parent's resume began
  await tl.advance(100);
  expect(store.placement("g")).toMatchObject({ observed: "error", errorCode: "SNAPSHOT_MISSING" });
  expect(launched).toEqual([`clone into ${store.placement("f")!.dirName}`]); // the parent waits for the clone
  await tl.advance(2_000);
  expect(launched).toEqual([`clone into ${store.placement("f")!.dirName}`, "cloned", parentDir]);
  expect(store.placement("p")).toMatchObject({ observed: "running", generation: 2 });
  expect(vms.at(-1)?.spec.suspendable).toBe(true); // a resume of its own snapshot stays suspendable
  expect(store.placement("f")?.observed).toBe("prepared");
});

/** A rig for templated placements over `driver`: `start` drives a placement to running (or its end) and answers its `start`. */
function templateRig(name: string, driver?: (host: FakeVmHost, timers: Timers) => FakeVmmDriver) {
  const templates = new TemplateStore(join(work, `${name}-templates`));
  const r = rig(name, undefined, undefined, templates, undefined, driver);
  const give = (placementId: string, type: AgentCommand["type"]) =>
    command(r, `a-${placementId}`, placementId, type, { ...SPEC, template: true });
  const settle = async (steps: number) => {
    for (let i = 0; i < steps; i++) {
      await r.tl.advance(100);
      await Bun.sleep(2); // the template's files are real: real time passes too
    }
  };
  const updates = (placementId: string) => r.store.pendingUpdates(1_000).filter((u) => u.placementId === placementId);
  const keys = () => readdirSync(templates.root).filter((n) => /^[0-9a-f]{64}$/.test(n));
  return { ...r, templates, give, settle, updates, keys };
}

test("a warm restore that fails after its VMM launched has that VM stopped before the cold boot: one VM per placement", async () => {
  let failConnect = false;
  const t = templateRig(
    "template-two-vms",
    (host, timers) =>
      new (class extends FakeVmmDriver {
        override async restore(spec: VmSpec, snapshot: VmSnapshot): Promise<VmHandle> {
          const h = await super.restore(spec, snapshot);
          failConnect = true; // the restored VM runs, and its control channel will not connect
          return h;
        }
        override async connectControl(spec: Pick<VmSpec, "controlSocketPath">, ms: number): Promise<GuestChannel> {
          if (failConnect) {
            failConnect = false;
            throw new AgentError("VMM_START_FAILED", "the control socket went away");
          }
          return super.connectControl(spec, ms);
        }
      })(host, timers),
  );
  t.give("p1", "ensure_present");
  await t.settle(5);
  t.give("p1", "ensure_running");
  await t.settle(100);
  expect(t.store.placement("p1")?.observed).toBe("running");
  expect(t.updates("p1").find((u) => u.state === "running")?.start).toEqual({
    from: "boot",
    fallback: "TEMPLATE_RESTORE_FAILED",
  });
  expect(t.vms.filter((vm) => vm.state !== "exited")).toHaveLength(1); // the restored VM was stopped first
  expect(t.host.running().map((vm) => vm.identity.allocationId)).toEqual(["a-p1"]);
});

test("a template the driver refuses as incompatible is removed, so the next start makes one again", async () => {
  const t = templateRig(
    "template-incompatible",
    (host, timers) =>
      new (class extends FakeVmmDriver {
        override async restore(): Promise<VmHandle> {
          throw new AgentError("SNAPSHOT_INCOMPATIBLE", "the VMM was upgraded");
        }
      })(host, timers),
  );
  for (const id of ["p1", "p2"]) {
    t.give(id, "ensure_present");
    await t.settle(5);
    t.give(id, "ensure_running");
    await t.settle(100);
    expect(t.store.placement(id)?.observed).toBe("running");
    expect(t.updates(id).find((u) => u.state === "running")?.start).toEqual({
      from: "boot",
      fallback: "TEMPLATE_MISMATCH",
    });
    expect(t.keys()).toEqual([]);
  }
  expect(t.launched.filter((l) => l.startsWith("bb-")).length).toBe(4); // per start: the template's boot, then the cold boot
});

test("a release while the template is being made ends absent, with no error on the way", async () => {
  const t = templateRig("template-release");
  t.give("p1", "ensure_present");
  await t.settle(5);
  t.give("p1", "ensure_running");
  await t.settle(1); // the template's VM is booting
  t.give("p1", "ensure_absent");
  await t.settle(100);
  const states = t.updates("p1").map((u) => `${u.state}${u.errorCode ? `:${u.errorCode}` : ""}`);
  expect(states.at(-1)).toBe("absent");
  expect(states.filter((s) => s.startsWith("error"))).toEqual([]);
  expect(t.host.running()).toEqual([]);
});
