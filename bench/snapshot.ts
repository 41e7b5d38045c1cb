/**
 * Suspend and resume under QEMU (issue 21 "Done when": suspend and resume
 * latencies, median of ≥ 5; ADR 0180), through the driver on a real
 * dev-image guest (no scheduler or agent: those operations are not in the
 * API yet). Each round boots a suspendable VM cold to GuestReady (the
 * baseline, measured in the same run), suspends it (QMP stop + device-state
 * migration + the RAM file frozen), restores it into a new placement
 * directory and times until the guest answers `identify` with its old boot
 * ID, then shuts it down. Prints the medians and restore ÷ cold boot.
 *
 * Run as root under the machine-wide lock:
 *   flock /tmp/bb-heavy.lock node_modules/.bin/bun bench/snapshot.ts
 * BB_BENCH_RUNS (default 5) rounds; BB_BENCH_MEMORY_MIB (default 256).
 */
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createPlacementNetwork, destroyPlacementNetwork } from "../src/agent/isolation/placementNet.ts";
import type { GuestChannel, VmHandle } from "../src/agent/vmm/driver.ts";
import { QemuMicrovmDriver } from "../src/agent/vmm/qemu.ts";
import { compileGuest } from "../src/image/bbBinary.ts";
import { buildDevImage } from "../src/image/devBuild.ts";
import { encodeGuestMessage, NdjsonDecoder } from "../src/protocol/guest.ts";
import { devVmSpec } from "../test/support/devVm.ts";
import { limitRunTime, onRunLimit } from "./support/runLimit.ts";

limitRunTime("bench/snapshot.ts", 900);

const RUNS = Number(process.env["BB_BENCH_RUNS"] ?? 5);
const MEMORY_MIB = Number(process.env["BB_BENCH_MEMORY_MIB"] ?? 256);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;

/** Waits on `ch` for a guest_ready (any identity), returning its bootId. */
function nextReady(ch: GuestChannel, timeoutMs: number): Promise<string> {
  const dec = new NdjsonDecoder();
  return new Promise((done, fail) => {
    const timer = setTimeout(() => fail(new Error(`no guest_ready within ${timeoutMs} ms`)), timeoutMs);
    ch.onData((c) => {
      for (const m of dec.push(c).messages)
        if (m.type === "guest_ready") {
          clearTimeout(timer);
          done(String(m.bootId));
        }
    });
  });
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error("bench/snapshot.ts needs root (a network namespace, TAP, QEMU)");
  const repo = resolve(import.meta.dir, "..");
  const guest = await compileGuest(join(repo, ".bb/bench/beachball-guest"));
  const img = await buildDevImage({
    outDir: join(repo, ".bb/bench/dev"),
    cacheDir: join(repo, ".bb/cache"),
    bbBinaryPath: guest,
  });
  const work = mkdtempSync(join(tmpdir(), "bb-bench-snapshot-"));
  const netns = `bb-${randomBytes(6).toString("hex")}`;
  const driver = new QemuMicrovmDriver();
  let live: VmHandle | undefined;
  const cleanup = async () => {
    if (live) await driver.stop(live, 1000).catch(() => undefined);
    await destroyPlacementNetwork(netns).catch(() => undefined);
    rmSync(work, { recursive: true, force: true });
  };
  onRunLimit(cleanup);
  const cold: number[] = [];
  const suspend: number[] = [];
  const restore: number[] = [];
  let bytes = 0;
  try {
    const net = await createPlacementNetwork(netns);
    for (let i = 0; i < RUNS; i++) {
      const dir = join(work, `r${i}`);
      mkdirSync(dir);
      const identity = {
        allocationId: `alloc-bench-${i}`,
        placementId: `plc-bench-${i}`,
        generation: 1,
        nonce: randomBytes(32).toString("hex"),
      };
      const spec = devVmSpec({
        image: img,
        net,
        dir,
        instanceId: netns,
        identity,
        memoryMiB: MEMORY_MIB,
        suspendable: true,
      });
      let t = performance.now();
      live = await driver.start(spec);
      let ch = await driver.connectControl(spec, 10_000);
      const bootId = await nextReady(ch, 120_000);
      cold.push(performance.now() - t);
      ch.close();
      const snapDir = join(dir, "snapshot");
      mkdirSync(snapDir);
      t = performance.now();
      const snap = await driver.suspend(live, spec, snapDir);
      suspend.push(performance.now() - t);
      bytes = snap.bytes;
      live = undefined;
      const dir2 = join(dir, "restored");
      mkdirSync(dir2);
      const spec2 = {
        ...spec,
        dir: dir2,
        consoleLogPath: join(dir2, "console.log"),
        controlSocketPath: join(dir2, "ctl.sock"),
      };
      t = performance.now();
      live = await driver.restore(spec2, snap);
      ch = await driver.connectControl(spec2, 10_000);
      const answered = nextReady(ch, 30_000);
      ch.send(encodeGuestMessage({ type: "identify" }));
      const again = await answered;
      restore.push(performance.now() - t);
      if (again !== bootId) throw new Error(`round ${i}: the restored guest is boot ${again}, not ${bootId}`);
      ch.send(encodeGuestMessage({ type: "shutdown" }));
      if (!(await driver.waitGone(live, 30_000))) await driver.stop(live, 1000);
      live = undefined;
      ch.close();
      rmSync(dir, { recursive: true, force: true });
      console.log(
        `bench: round ${i + 1}: cold boot → GuestReady ${Math.round(cold[i]!)} ms, suspend ${Math.round(suspend[i]!)} ms, restore → answering ${Math.round(restore[i]!)} ms`,
      );
    }
  } finally {
    await cleanup();
  }
  console.log(`\nQEMU suspend and resume, ${MEMORY_MIB} MiB guest (${driver.accelerator ?? "?"}), median of ${RUNS}\n`);
  console.log("cold boot → GuestReady | suspend | restore → answering | restore ÷ cold | snapshot on disk");
  console.log(
    `${Math.round(median(cold))} ms | ${Math.round(median(suspend))} ms | ${Math.round(median(restore))} ms | ${(median(restore) / median(cold)).toFixed(2)}× | ${bytes} bytes`,
  );
}

await main();
