/**
 * Pause, suspend and resume end to end (issue 21, "Done when"): the exec
 * world of test/support/execWorld.ts (a scheduler and an agent as
 * processes, a real QEMU VM under TCG booting the OCI image of the Debian
 * sshd root with the Go guest, `bb` on the "laptop" behind a NAT), its
 * class suspendable. The VM's payload starts a counter that writes its
 * value to a file every 200 ms.
 *
 * Checked: `bb allocation pause --wait` ends paused and the host's free CPU
 * grows by the VM's 500 millicores in `bb host list`'s data; after
 * `resume --wait` the counter carries on from where it was (the same
 * process). `suspend --wait` ends suspended, the host's free CPU and
 * memory grow by the VM's, its disk does not, and `bb host list` shows one
 * suspended VM with the disk it holds; `resume --wait` brings it
 * back ready as generation + 1, reachable by `bb exec` (a grant for the
 * new generation), the counter's process the same PID and its count
 * carried on. It suspends and resumes a second time (generation + 2, the
 * same process): a resumed VM maps its RAM file shared again. While it is
 * first suspended, a fork without
 * --allow-consumed-payload is refused (PAYLOAD_CONSUMED) and two with it
 * are ready on the same host, each with the counter's process and count,
 * its own ID and its own IPv6 address (the parent's gone from its eth0),
 * reachable by `bb exec`; their release frees what they took. A class of
 * the same image with `template: true` (ADR 0182): its first create makes
 * the host's template and restores it, the second only restores it; each
 * runs its own payload and answers `bb exec` at its own address. Needs root, QEMU, squashfs-tools, mmdebstrap (first
 * run), nft.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { AllocationView } from "../../src/protocol/api.ts";
import { execWorldSkipReason, startExecWorld, type ExecWorld } from "../support/execWorld.ts";
import { tail } from "../support/processes.ts";

const skip = execWorldSkipReason();
if (skip) console.log(`SKIP test/e2e/pause-suspend.test.ts: ${skip}`);
const d = skip ? describe.skip : describe;

/** The payload: a counter in the background (its PID kept), then the workload waits. */
const PAYLOAD = [
  "sh -c 'i=0; while :; do i=$((i+1)); echo $i > /run/bb-counter.tmp; mv /run/bb-counter.tmp /run/bb-counter; sleep 0.2; done' >/dev/null 2>&1 &",
  "echo $! > /run/bb-counter.pid",
  "exec sleep 100000",
  "",
].join("\n");

/** The class's CPU, millicores. */
const CPU = 500;

let world: ExecWorld;

/**
 * The counter's value and its process (PID, and whether it is alive), and
 * eth0's global IPv6 addresses (/proc/net/if_inet6, 32 hex digits each),
 * read through `bb exec`.
 */
async function counter(
  allocationId = world.allocationId,
): Promise<{ value: number; pid: number; alive: boolean; ipv6: string[] }> {
  const r = await world.bb([
    "exec",
    allocationId,
    "--",
    "sh",
    "-c",
    "cat /run/bb-counter; p=$(cat /run/bb-counter.pid); echo $p; kill -0 $p && echo alive || echo dead; " +
      'while read a i l s f d; do [ "$d" = eth0 ] && [ "$s" = 00 ] && echo $a; done < /proc/net/if_inet6; true',
  ]);
  if (r.code !== 0) throw new Error(`bb exec exited ${r.code}: ${r.err}\nagent:\n${tail(world.agentLog)}`);
  const [value, pid, alive, ...ipv6] = r.out.toString().trim().split("\n");
  return { value: Number(value), pid: Number(pid), alive: alive === "alive", ipv6: ipv6.sort() };
}

/** This host's free capacity, as `bb host list --json` shows it. */
async function free(): Promise<{ cpuMillis: number; memoryMiB: number; ephemeralDiskMiB: number }> {
  const r = await world.bb(["host", "list", "--json"], { token: world.operatorToken });
  if (r.code !== 0) throw new Error(`bb host list exited ${r.code}: ${r.err}`);
  const hosts = JSON.parse(r.out.toString()) as {
    free: { cpuMillis: number; memoryMiB: number; ephemeralDiskMiB: number };
  }[];
  return hosts[0]!.free;
}

/** Runs `bb allocation <verb> --wait --json` and answers the view. */
async function transition(verb: "pause" | "suspend" | "resume"): Promise<AllocationView> {
  const t = performance.now();
  const r = await world.bb(["allocation", verb, world.allocationId, "--wait", "--timeout", "300", "--json"]);
  console.log(`pause-suspend.test: bb allocation ${verb} --wait took ${Math.round(performance.now() - t)} ms`);
  if (r.code !== 0)
    throw new Error(`bb allocation ${verb} exited ${r.code}: ${r.err}\nagent:\n${tail(world.agentLog)}`);
  return JSON.parse(r.out.toString()) as AllocationView;
}

d("pause, suspend and resume through bb (real QEMU)", () => {
  beforeAll(async () => {
    world = await startExecWorld({
      name: "pause-suspend",
      payload: PAYLOAD,
      log: (m) => console.log(`pause-suspend.test: ${m}`),
      suspendable: true,
      memoryMiB: 256,
      cpuMillis: CPU, // two forks fit beside the suspended parent on a 2-core host
      maxPlacements: 3, // the suspended parent keeps its slot while its forks run
      moreClasses: { warm: { template: true } }, // issue 21, "Templates": the same image and size, started warm
    });
    for (const t of world.timings) console.log(`pause-suspend.test: ${t}`);
  }, 1_200_000);

  afterAll(async () => {
    await world?.stop();
  }, 120_000);

  test("pause gives the CPU back and the counter carries on after resume", async () => {
    const before = await counter();
    expect(before.alive).toBe(true);
    const running = await free();
    const paused = await transition("pause");
    expect(paused.state).toBe("paused");
    const whilePaused = await free();
    expect(whilePaused.cpuMillis).toBe(running.cpuMillis + CPU);
    expect(whilePaused.memoryMiB).toBe(running.memoryMiB);
    await Bun.sleep(2000);
    const resumed = await transition("resume");
    expect(resumed).toMatchObject({ state: "ready", generation: paused.generation });
    expect((await free()).cpuMillis).toBe(running.cpuMillis);
    const after = await counter();
    expect(after.pid).toBe(before.pid);
    expect(after.alive).toBe(true);
    expect(after.value).toBeGreaterThanOrEqual(before.value);
    await Bun.sleep(1000);
    expect((await counter()).value).toBeGreaterThan(after.value);
  }, 600_000);

  test("suspend gives CPU and memory back; resume restores it as the next generation with its process running", async () => {
    const before = await counter();
    const running = await free();
    const suspended = await transition("suspend");
    expect(suspended.state).toBe("suspended");
    const whileSuspended = await free();
    expect(whileSuspended.cpuMillis).toBe(running.cpuMillis + CPU);
    expect(whileSuspended.memoryMiB).toBe(running.memoryMiB + 256);
    expect(whileSuspended.ephemeralDiskMiB).toBe(running.ephemeralDiskMiB);
    // `bb host list` names the suspended VM, the disk it holds (its disk and its snapshot) and the longest it may stay.
    const listed = await world.bb(["host", "list", "--json"], { token: world.operatorToken });
    const [host] = JSON.parse(listed.out.toString()) as { suspended: Record<string, unknown> }[];
    expect(host!.suspended).toMatchObject({ placements: 1, diskMiB: 2048 + 256, maxAgeSeconds: 86_400 });
    const table = await world.bb(["host", "list"], { token: world.operatorToken });
    expect(table.out.toString()).toContain("1 (2304 MiB, max 24h)");

    // Forks: refused without the flag (the parent consumed its payload), then two forks restored from the
    // snapshot on the same host, each with the parent's memory (the counter's process and count) under its own
    // identity and address, reachable by `bb exec`; releasing them frees what they took.
    const parentIpv6 = before.ipv6;
    expect(parentIpv6.length).toBe(1);
    const refused = await world.bb(["allocation", "fork", world.allocationId, "--json"]);
    expect(refused.code).not.toBe(0);
    expect(refused.err.toString()).toContain("PAYLOAD_CONSUMED");
    const t = performance.now();
    const forked = await world.bb([
      "allocation",
      "fork",
      world.allocationId,
      "--count",
      "2",
      "--allow-consumed-payload",
      "--wait",
      "--timeout",
      "300",
      "--json",
    ]);
    console.log(`pause-suspend.test: bb allocation fork --count 2 --wait took ${Math.round(performance.now() - t)} ms`);
    if (forked.code !== 0)
      throw new Error(`bb allocation fork exited ${forked.code}: ${forked.err}\nagent:\n${tail(world.agentLog)}`);
    const forks = (JSON.parse(forked.out.toString()) as { items: AllocationView[] }).items;
    expect(forks.length).toBe(2);
    const seen = new Set<string>(parentIpv6);
    for (const child of forks) {
      expect(child.allocationId).not.toBe(world.allocationId);
      expect(child).toMatchObject({ state: "ready", hostId: suspended.hostId });
      const inFork = await counter(child.allocationId);
      expect(inFork.pid).toBe(before.pid);
      expect(inFork.alive).toBe(true);
      expect(inFork.value).toBeGreaterThanOrEqual(before.value);
      expect(inFork.ipv6.length).toBe(1); // its own address only: the parent's is gone
      expect(seen.has(inFork.ipv6[0]!)).toBe(false);
      seen.add(inFork.ipv6[0]!);
      const created = (await world.controller.events(child.allocationId, 0, 200)).find(
        (e) => e.type === "allocation.created",
      );
      expect(created?.data).toMatchObject({ forkOf: world.allocationId, forkGeneration: suspended.generation });
    }
    expect(forks[0]!.allocationId).not.toBe(forks[1]!.allocationId);
    for (const child of forks) {
      const gone = await world.bb([
        "allocation",
        "release",
        child.allocationId,
        "--wait",
        "--timeout",
        "120",
        "--json",
      ]);
      expect(gone.code).toBe(0);
    }
    expect(await free()).toEqual(whileSuspended);

    const resumed = await transition("resume");
    expect(resumed).toMatchObject({ state: "ready", generation: suspended.generation + 1 });
    expect(await free()).toEqual(running);
    const after = await counter();
    expect(after.pid).toBe(before.pid);
    expect(after.alive).toBe(true);
    expect(after.value).toBeGreaterThanOrEqual(before.value);
    await Bun.sleep(1000);
    expect((await counter()).value).toBeGreaterThan(after.value);

    // A resumed VM maps its RAM file shared again (a link to the frozen one, or a copy while a fork's link holds it),
    // so it suspends and resumes a second time, as generation + 2, with the counter's process still there.
    const again = await transition("suspend");
    expect(again).toMatchObject({ state: "suspended", generation: resumed.generation });
    const twice = await transition("resume");
    expect(twice).toMatchObject({ state: "ready", generation: resumed.generation + 1 });
    const last = await counter();
    expect(last.pid).toBe(before.pid);
    expect(last.alive).toBe(true);
    expect(last.value).toBeGreaterThanOrEqual(after.value);
    const events = await world.controller.events(world.allocationId, 0, 200);
    expect(events.some((e) => e.type === "allocation.suspend_refused")).toBe(false);
  }, 600_000);

  test("a templated class: the first create makes the host's template, the next restores it; each takes its payload and answers bb exec at its own address", async () => {
    const seen = new Set<string>();
    for (const [i, built] of [
      [0, true],
      [1, false],
    ] as const) {
      const t = performance.now();
      const { view } = await world.controller.create({ clientRequestId: `warm-${i}`, workloadClass: "warm" });
      const id = view.allocationId;
      await world.controller.deliverWhenReady(
        id,
        new TextEncoder().encode(`echo payload-${i} > /run/warm-payload\nexec sleep 100000\n`),
        `warm-delivery-${i}`,
        300_000,
      );
      console.log(
        `pause-suspend.test: templated create ${i} → payload delivered in ${Math.round(performance.now() - t)} ms`,
      );
      const running = (await world.controller.events(id, 0, 200)).find((e) => e.type === "placement.running");
      expect(running?.data).toMatchObject({ startedFrom: "template", ...(built ? { templateBuilt: true } : {}) });
      if (!built) expect(running?.data?.["templateBuilt"]).toBeUndefined();
      let out = "";
      for (let tries = 0; tries < 50 && !out.includes(`payload-${i}`); tries++) {
        const r = await world.bb([
          "exec",
          id,
          "--",
          "sh",
          "-c",
          'cat /run/warm-payload 2>/dev/null; while read a i l s f d; do [ "$d" = eth0 ] && [ "$s" = 00 ] && echo $a; done < /proc/net/if_inet6; true',
        ]);
        if (r.code !== 0) throw new Error(`bb exec exited ${r.code}: ${r.err}\nagent:\n${tail(world.agentLog)}`);
        out = r.out.toString();
        if (!out.includes(`payload-${i}`)) await Bun.sleep(200);
      }
      const [payload, ...ipv6] = out.trim().split("\n");
      expect(payload).toBe(`payload-${i}`);
      expect(ipv6.length).toBe(1); // its own /128 only: the template's boot address is gone
      expect(seen.has(ipv6[0]!)).toBe(false);
      seen.add(ipv6[0]!);
      const gone = await world.bb(["allocation", "release", id, "--wait", "--timeout", "120", "--json"]);
      expect(gone.code).toBe(0);
    }
  }, 600_000);
});
