/**
 * End to end on a real VM: dev image build, placement network, QEMU microvm
 * started by a throwaway "agent" process that is then SIGKILLed (the VM must
 * survive it), guest handshake, one shell payload, pause and resume by QMP, a `restored` message,
 * suspend into a snapshot and restore from it
 * (entropy, clock and identity on a real guest kernel), shutdown, cleanup.
 *
 * Needs root, qemu-system-x86_64 and `ip`; otherwise it says why and skips.
 * Leaves no process, namespace or temporary directory behind.
 */
import { afterAll, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createHash, randomBytes } from "node:crypto";
import { buildDevImage } from "../../src/image/devBuild.ts";
import { compileGuest } from "../../src/image/bbBinary.ts";
import { verifyImage } from "../../src/image/verify.ts";
import {
  createPlacementNetwork,
  destroyPlacementNetwork,
  listPlacementNetworks,
} from "../../src/agent/isolation/placementNet.ts";
import type { VmHandle, VmSpec } from "../../src/agent/vmm/driver.ts";
import { devVmSpec } from "../support/devVm.ts";
import { QemuMicrovmDriver } from "../../src/agent/vmm/qemu.ts";
import { NdjsonDecoder, encodeGuestMessage, type HostToGuest } from "../../src/protocol/guest.ts";
import { restoredMessage } from "../../src/agent/guestRestored.ts";
import { systemRandom } from "../../src/agent/ports.ts";
import { systemClock } from "../../src/protocol/clock.ts";

const b64 = (s: string) => Buffer.from(s).toString("base64");

const repo = resolve(import.meta.dir, "../..");
const bun = process.execPath;
const skipReason =
  process.getuid?.() !== 0
    ? "not root"
    : !Bun.which("qemu-system-x86_64")
      ? "qemu-system-x86_64 missing"
      : !Bun.which("ip")
        ? "ip missing"
        : "";
if (skipReason)
  console.log(`SKIP test/integration/vm.test.ts: ${skipReason} (needs root, qemu-system-x86_64 and iproute2)`);

const work = mkdtempSync(join(tmpdir(), "bb-vm-test-"));
const netns = `bb-${randomBytes(6).toString("hex")}`;
const driver = new QemuMicrovmDriver({
  accel: (process.env.BB_TEST_VM_ACCEL as "auto" | "kvm" | "tcg" | undefined) ?? "auto",
});
let handle: VmHandle | undefined;

afterAll(async () => {
  if (handle) await driver.stop(handle, 1000).catch(() => {});
  await destroyPlacementNetwork(netns).catch(() => {});
  rmSync(work, { recursive: true, force: true });
});

/** Starts the VM from a separate process (a stand-in agent), then SIGKILLs that process. */
async function startFromDoomedAgent(spec: VmSpec): Promise<VmHandle> {
  const script = join(work, "agent-stub.ts");
  writeFileSync(
    script,
    `import { QemuMicrovmDriver } from ${JSON.stringify(join(repo, "src/agent/vmm/qemu.ts"))};
const accel = ${JSON.stringify(process.env.BB_TEST_VM_ACCEL ?? "auto")};
const h = await new QemuMicrovmDriver({ accel }).start(JSON.parse(process.argv[2]));
console.log(JSON.stringify(h));
setInterval(() => {}, 1000);
`,
  );
  const agent = Bun.spawn([bun, script, JSON.stringify(spec)], { stdout: "pipe", stderr: "inherit" });
  const reader = agent.stdout.getReader();
  let text = "";
  while (!text.includes("\n")) {
    const r = await reader.read();
    if (r.done) throw new Error("agent stub exited before starting the VM");
    text += new TextDecoder().decode(r.value);
  }
  process.kill(agent.pid, "SIGKILL");
  await agent.exited;
  return JSON.parse(text) as VmHandle;
}

test.skipIf(!!skipReason)(
  "dev image boots, runs one payload, survives agent SIGKILL, shuts down clean",
  async () => {
    const bb = await compileGuest(join(repo, ".bb/test-build/beachball-guest"));
    let t = performance.now();
    const img = await buildDevImage({
      outDir: join(repo, ".bb/test-images/dev"),
      cacheDir: join(repo, ".bb/cache"),
      bbBinaryPath: bb,
    });
    console.log(
      `vm.test: image ${img.reused ? "reused" : "built"} in ${Math.round(performance.now() - t)} ms: ${img.digest}`,
    );
    expect((await verifyImage(img.dir, img.digest)).rootfsFormat).toBe("ext4");

    const net = await createPlacementNetwork(netns);
    expect(await listPlacementNetworks()).toContain(netns);
    const dir = join(work, "alloc");
    mkdirSync(dir);
    const identity = {
      allocationId: "alloc-test-1",
      placementId: "plc-test-1",
      generation: 7,
      nonce: randomBytes(32).toString("hex"),
    };
    // RAM in dir/guest.ram (suspendable), so the suspend below can work.
    const spec = devVmSpec({ image: img, net, dir, instanceId: netns, identity, suspendable: true });

    t = performance.now();
    handle = await startFromDoomedAgent(spec);
    expect(await driver.isAlive(handle)).toBe(true); // survived its parent's SIGKILL
    expect(await driver.isAlive({ ...handle, startTime: handle.startTime + 1 })).toBe(false);
    expect(await driver.isAlive({ ...handle, instanceId: "bb-someoneelse" })).toBe(false);

    let ch = await driver.connectControl(spec, 10_000);
    const inbox: Record<string, unknown>[] = [];
    const attach = () => {
      const dec = new NdjsonDecoder();
      ch.onData((c) => inbox.push(...dec.push(c).messages));
    };
    attach();
    const next = async (type: string, timeoutMs: number) => {
      const deadline = performance.now() + timeoutMs;
      for (;;) {
        const i = inbox.findIndex((m) => m.type === type);
        if (i >= 0) return inbox.splice(i, 1)[0]!;
        if (performance.now() > deadline)
          throw new Error(`no ${type} within ${timeoutMs} ms; got ${JSON.stringify(inbox)}`);
        await Bun.sleep(10);
      }
    };
    const send = (m: HostToGuest) => ch.send(encodeGuestMessage(m));

    const ready = await next("guest_ready", 90_000);
    console.log(
      `vm.test: guest_ready ${Math.round(performance.now() - t)} ms after start (${driver.accelerator ?? "auto"})`,
    );
    expect(ready).toMatchObject({ ...identity, guestVersion: "0.1.0" });
    expect(String(ready.bootId)).toMatch(/^[0-9a-f]{32}$/);

    send({ type: "ping", id: "p1" });
    expect(await next("pong", 10_000)).toEqual({ type: "pong", id: "p1" });
    send({ type: "bootstrap", deliveryId: "d0", contentType: "application/json", dataBase64: "e30=" });
    expect(await next("bootstrap_rejected", 10_000)).toMatchObject({ deliveryId: "d0" });

    const payload = Buffer.from("echo payload-says-hello-$((40+2))\nexit 3\n");
    const digest = `sha256:${createHash("sha256").update(payload).digest("hex")}`;
    send({
      type: "bootstrap",
      deliveryId: "d1",
      contentType: "text/x-shellscript",
      dataBase64: payload.toString("base64"),
    });
    expect(await next("bootstrap_consumed", 10_000)).toEqual({ type: "bootstrap_consumed", deliveryId: "d1", digest });
    expect(await next("workload_exited", 30_000)).toEqual({ type: "workload_exited", deliveryId: "d1", exitCode: 3 });
    send({
      type: "bootstrap",
      deliveryId: "d1",
      contentType: "text/x-shellscript",
      dataBase64: payload.toString("base64"),
    });
    expect(await next("bootstrap_consumed", 10_000)).toEqual({ type: "bootstrap_consumed", deliveryId: "d1", digest });
    send({
      type: "bootstrap",
      deliveryId: "d2",
      contentType: "text/x-shellscript",
      dataBase64: payload.toString("base64"),
    });
    expect(await next("bootstrap_rejected", 10_000)).toMatchObject({ deliveryId: "d2" });

    const console_ = readFileSync(spec.consoleLogPath, "utf8").replaceAll("\r\n", "\n"); // the serial tty adds CR
    expect(console_).toContain("BEACHBALL_JOB_START\npayload-says-hello-42\n");
    expect(console_).toContain("BEACHBALL_JOB_EXIT 3");
    expect(console_).not.toContain("echo payload-says-hello"); // the payload text itself never reaches the console

    ch.close(); // the host side goes away and comes back
    ch = await driver.connectControl(spec, 10_000);
    attach();
    send({ type: "ping", id: "p2" });
    expect(await next("pong", 10_000)).toEqual({ type: "pong", id: "p2" });

    // Pause by QMP (issue 21): a paused guest answers nothing; resumed, it answers what waited. Both idempotent.
    await driver.pause(handle);
    await driver.pause(handle);
    send({ type: "ping", id: "p-paused" });
    await Bun.sleep(1500);
    expect(inbox.some((m) => m.type === "pong")).toBe(false);
    await driver.resume(handle);
    await driver.resume(handle);
    expect(await next("pong", 10_000)).toEqual({ type: "pong", id: "p-paused" });
    await expect(driver.pause({ ...handle, startTime: handle.startTime + 1 })).rejects.toMatchObject({
      code: "VMM_CONTROL_FAILED",
    });

    // restored on a real guest kernel (issue 21): RNDADDENTROPY and the CRNG reseed, the clock step,
    // the new identity in a fresh guest_ready, and (payloadAllowed) a new payload after the old one exited.
    const restored = restoredMessage(
      { ...identity, placementId: "plc-test-2", generation: identity.generation + 1, spec: {} },
      { random: systemRandom, clock: systemClock },
      { payloadAllowed: true },
    );
    send(restored.message);
    const again = await next("guest_ready", 10_000);
    expect(again).toMatchObject({ ...restored.identity, guestVersion: "0.1.0" });
    expect(again.bootId).not.toBe(ready.bootId);
    const afterRestore = readFileSync(spec.consoleLogPath, "utf8");
    for (const l of afterRestore.split(/\r?\n/).filter((x) => x.includes("restored"))) console.log(`vm.test: ${l}`);
    expect(afterRestore).toContain(
      "beachball-guest: restored: entropy: 64 bytes added with RNDADDENTROPY; CRNG reseeded",
    );
    expect(afterRestore).toMatch(/beachball-guest: restored: clock stepped to \d{4}-/);
    send({ type: "bootstrap", deliveryId: "d3", contentType: "text/x-shellscript", dataBase64: b64("exit 0") });
    expect(await next("bootstrap_consumed", 10_000)).toMatchObject({ deliveryId: "d3" });
    expect(await next("workload_exited", 30_000)).toEqual({ type: "workload_exited", deliveryId: "d3", exitCode: 0 });

    // Suspend and restore by QMP (issue 21): the device state to a file, the RAM file frozen, QEMU gone;
    // restored from it into a new placement directory, the guest carries on with the memory it had
    // (the same boot, the identity it adopted above).
    const snapDir = join(work, "snap");
    mkdirSync(snapDir);
    ch.close();
    let t1 = performance.now();
    const snap = await driver.suspend(handle, spec, snapDir);
    console.log(`vm.test: suspend took ${Math.round(performance.now() - t1)} ms`);
    expect(await driver.isAlive(handle)).toBe(false);
    expect(readdirSync(snapDir).sort()).toEqual(["device.state", "guest.ram"]);
    expect(snap).toMatchObject({ dir: snapDir, driver: "qemu-microvm", compat: { memory_mib: 256, vcpus: 1 } });
    console.log(`vm.test: suspended into ${snap.bytes} bytes on disk`);
    const dir2 = join(work, "alloc2");
    mkdirSync(dir2);
    const { suspendable: _, ...restoredElsewhere } = spec; // restored into another directory, as a fork is
    const spec2: VmSpec = {
      ...restoredElsewhere,
      dir: dir2,
      consoleLogPath: join(dir2, "console.log"),
      controlSocketPath: join(dir2, "ctl.sock"),
    };
    await expect(driver.restore(spec2, { ...snap, compat: { ...snap.compat, memory_mib: 512 } })).rejects.toMatchObject(
      {
        code: "SNAPSHOT_INCOMPATIBLE",
      },
    );
    t = performance.now();
    handle = await driver.restore(spec2, snap);
    ch = await driver.connectControl(spec2, 10_000);
    attach();
    send({ type: "identify" });
    const same = await next("guest_ready", 30_000);
    console.log(`vm.test: restored guest answered ${Math.round(performance.now() - t)} ms after the restore began`);
    expect(same).toMatchObject({ ...restored.identity });
    expect(same.bootId).toBe(again.bootId);
    // Its RAM is private now: suspending it again is refused before anything stops, and it keeps running.
    await expect(driver.suspend(handle, spec2, join(work, "snap2"))).rejects.toMatchObject({ code: "VMM_UNSUPPORTED" });
    send({ type: "ping", id: "p-after" });
    expect(await next("pong", 10_000)).toEqual({ type: "pong", id: "p-after" });

    send({ type: "shutdown" });
    await next("shutting_down", 10_000);
    expect(await driver.waitGone(handle, 30_000)).toBe(true);
    ch.close();

    await destroyPlacementNetwork(netns);
    await destroyPlacementNetwork(netns); // idempotent
    expect(await listPlacementNetworks()).not.toContain(netns);
    const leftovers = readdirSync("/proc").filter(
      (p) =>
        /^\d+$/.test(p) &&
        existsSync(`/proc/${p}/cmdline`) &&
        (() => {
          try {
            return readFileSync(`/proc/${p}/cmdline`, "utf8").split("\0").includes(netns);
          } catch {
            return false;
          }
        })(),
    );
    expect(leftovers).toEqual([]);
    handle = undefined;
  },
  300_000,
);
