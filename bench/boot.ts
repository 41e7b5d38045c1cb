/**
 * Boot and release overhead (issue "Real images", item 6): for the dev
 * image, an OCI image converted by `bb image build` (squashfs root) and the
 * Debian reference image (systemd), prints in one run
 *
 * - create → payload done: allocation.created → workload.exited (event
 *   times, so no client polling is counted), with a payload that echoes;
 * - release → absent: allocation.release_requested → allocation.released;
 *
 * each beside a bare QEMU boot of the same artifacts measured in the same
 * run: QEMU started directly (no scheduler, agent, namespace or guest)
 * with the same kernel, initrd and disks, whose init prints a marker and
 * reboots (`init=/bin/sh -- -c …`, or systemd's `systemd.run=` for the
 * reference image). Bare "done" is QEMU start → marker; bare "shutdown" is
 * marker → QEMU exit. Ratios are Beachball ÷ bare: of the medians, and the
 * median of each run's ratio to the bare boot right after it.
 *
 * With `tpl` in BB_BENCH_IMAGES (issue 21, "Templates"; ADR 0182), for the
 * dev image at 256 MiB: create → payload done of a templated class (its
 * first create, the warm-up, makes the template) beside a cold boot of the
 * same image and size, alternating, with their ratio (goal ≤ 0.3); and for a
 * suspendable class the latencies of suspend (suspend requested →
 * placement.suspended) and resume (resume requested → placement.running),
 * with a medians of BB_BENCH_RUNS (at least 5 here).
 *
 * Run as root under the machine-wide lock:
 *   flock /tmp/bb-heavy.lock node_modules/.bin/bun bench/boot.ts
 * BB_BENCH_RUNS (default 3) runs per image after one warm-up (which fills
 * the agent's image cache); medians are printed. BB_BENCH_IMAGES (default
 * `dev,oci,ref,tpl`) picks the images. The console of each image's last VM is
 * kept in .bb/bench/last-console-<class>.log, the agent's log in
 * .bb/bench/last-agent.log. Images are built into
 * .bb/bench (reused while the guest binary is unchanged).
 */
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { randomUUID } from "node:crypto";
import { SchedulerClient } from "../src/client/index.ts";
import { compileGuest } from "../src/image/bbBinary.ts";
import { buildDevImage } from "../src/image/devBuild.ts";
import { ensureDebianRootfsTar } from "../src/image/debianRootfs.ts";
import { buildReferenceImage } from "../src/image/referenceBuild.ts";
import { buildOciImage } from "../src/image/oci/build.ts";
import { TCG_TRANSLATION_CACHE_MIB } from "../src/agent/vmm/qemu.ts";
import { generateSigningKey } from "../src/image/signing.ts";
import { publishImages } from "../src/image/publish.ts";
import { sha256File } from "../src/image/verify.ts";
import { hostTscKhz } from "../src/agent/vmm/qemuHost.ts";
import { ensureDevManifest } from "../src/scheduler/manifest.ts";
import type { ImageManifest } from "../src/protocol/image.ts";
import type { AllocationEvent } from "../src/protocol/api.ts";
import { writeDebianOciLayout } from "../test/support/debianOci.ts";
import { phaseTimings } from "../src/dev/demo.ts";
import { placementDirName } from "../src/agent/resourceNames.ts";
import { pidsMatching, runRole, startRole, stopRole, tail, type Role } from "../test/support/processes.ts";
import { limitRunTime, onRunLimit } from "./support/runLimit.ts";

limitRunTime("bench/boot.ts", 1200);
let workDir: string | undefined;
onRunLimit(() => workDir && killVmsUnder(workDir));

const RUNS = Number(process.env["BB_BENCH_RUNS"] ?? 3);
const BENCH = resolve(".bb/bench");
const CACHE = resolve(".bb/cache");
const MARK = "BARE_DONE";

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;
const ms = (x: number) => `${Math.round(x)} ms`.padStart(9);

interface Kind {
  /** The image's name in BB_BENCH_IMAGES. */
  id: "dev" | "oci" | "ref";
  name: string;
  cls: string;
  dir: string;
  /** Bare kernel arguments that make the image print MARK and reboot. */
  bareArgs: string[];
}

/** Builds (or reuses) the picked images (BB_BENCH_IMAGES; the dev image always); returns their directories. */
async function images(
  picked: readonly string[],
): Promise<{ dev: string; oci: string; ref: string; devKey: string; key: string }> {
  mkdirSync(BENCH, { recursive: true });
  const guest = await compileGuest(join(BENCH, "beachball-guest"));
  const guestSha = await sha256File(guest);
  console.log(
    `bench: guest binary ${guest}: ${statSync(guest).size} bytes (static Go, docs/adr/0170-static-go-guest.md)`,
  );
  const keyPath = join(BENCH, "bench.key");
  if (!existsSync(keyPath)) writeFileSync(keyPath, JSON.stringify(generateSigningKey()), { mode: 0o600 });
  const key = JSON.parse(readFileSync(keyPath, "utf8")) as { privateKey: string; publicKey: string };
  const dev = await buildDevImage({ outDir: join(BENCH, "dev"), cacheDir: CACHE, bbBinaryPath: guest });
  // The Debian root file system only the OCI and reference images need (mmdebstrap: minutes on first use).
  const debian = () => ensureDebianRootfsTar(CACHE, undefined, (m) => console.log(`bench: ${m}`));
  const fresh = (dir: string) =>
    existsSync(join(dir, "manifest.json")) &&
    existsSync(join(dir, "bench-guest")) &&
    readFileSync(join(dir, "bench-guest"), "utf8") === guestSha;
  const oci = join(BENCH, "oci");
  if (picked.includes("oci") && !fresh(oci)) {
    console.log("bench: building the OCI image");
    const layout = await writeDebianOciLayout(join(BENCH, "layout"), await debian());
    await buildOciImage({
      input: { kind: "oci-layout", dir: layout.dir },
      outDir: oci,
      cacheDir: CACHE,
      guestBinaryPath: guest,
      privateKey: key.privateKey,
      compressionLevel: 3,
    });
    rmSync(join(BENCH, "layout"), { recursive: true, force: true });
    writeFileSync(join(oci, "bench-guest"), guestSha);
  }
  const ref = join(BENCH, "ref");
  if (picked.includes("ref") && !fresh(ref)) {
    console.log("bench: building the reference image");
    await buildReferenceImage({
      rootfsTar: await debian(),
      guestBinaryPath: guest,
      outDir: ref,
      cacheDir: CACHE,
      privateKey: key.privateKey,
    });
    writeFileSync(join(ref, "bench-guest"), guestSha);
  }
  return { dev: dev.dir, oci, ref, devKey: dev.publicKey, key: key.publicKey };
}

/** One bare QEMU boot of `dir`'s artifacts; returns QEMU start → MARK and MARK → exit, ms. */
async function bare(dir: string, args: string[], work: string): Promise<{ done: number; shutdown: number }> {
  const m = JSON.parse(readFileSync(join(dir, "manifest.json"), "utf8")) as ImageManifest;
  const run = mkdtempSync(join(work, "bare-"));
  const drives: string[] = [];
  if (m.rootfsFormat === "squashfs") {
    Bun.spawnSync(["truncate", "-s", "2G", join(run, "scratch.ext4")]);
    Bun.spawnSync(["mkfs.ext4", "-q", "-F", "-O", "^has_journal", join(run, "scratch.ext4")]);
    drives.push(
      "-drive",
      `id=root,file=${join(dir, m.rootfs.path)},format=raw,if=none,readonly=on`,
      "-device",
      "virtio-blk-device,drive=root",
      "-drive",
      `id=scratch,file=${join(run, "scratch.ext4")},format=raw,if=none`,
      "-device",
      "virtio-blk-device,drive=scratch",
    );
  } else {
    Bun.spawnSync(["cp", "--sparse=always", join(dir, m.rootfs.path), join(run, "root.ext4")]);
    drives.push(
      "-drive",
      `id=root,file=${join(run, "root.ext4")},format=raw,if=none`,
      "-device",
      "virtio-blk-device,drive=root",
    );
  }
  const root =
    m.rootfsFormat === "squashfs" ? ["beachball.lower=/dev/vda", "beachball.upper=/dev/vdb"] : ["root=/dev/vda", "rw"];
  const cmdline = [
    "console=ttyS0",
    "reboot=t",
    "panic=1",
    "pci=off",
    "quiet",
    `tsc_early_khz=${await hostTscKhz()}`,
    ...root,
    ...m.kernelArgs.filter((a) => !a.startsWith("init=")),
    ...args,
  ].join(" ");
  const t0 = performance.now();
  const p = Bun.spawn(
    [
      "qemu-system-x86_64",
      "-M",
      "microvm",
      "-accel",
      `tcg,tb-size=${TCG_TRANSLATION_CACHE_MIB}`,
      "-cpu",
      "max",
      "-smp",
      "1",
      "-m",
      "512",
      "-nodefaults",
      "-no-user-config",
      "-nographic",
      "-no-reboot",
      "-serial",
      "stdio",
      "-kernel",
      join(dir, m.kernel.path),
      "-initrd",
      join(dir, m.initrd!.path),
      "-append",
      cmdline,
      ...drives,
    ],
    { stdout: "pipe", stderr: "ignore", stdin: "ignore" },
  );
  const kill = setTimeout(() => p.kill("SIGKILL"), 300_000);
  let seen = "";
  let done = NaN;
  for await (const c of p.stdout as ReadableStream<Uint8Array>) {
    seen = (seen + new TextDecoder().decode(c)).slice(-4096);
    if (Number.isNaN(done) && seen.includes(MARK)) done = performance.now() - t0;
  }
  await p.exited;
  clearTimeout(kill);
  const total = performance.now() - t0;
  rmSync(run, { recursive: true, force: true });
  if (Number.isNaN(done)) throw new Error(`bare boot of ${dir} never printed ${MARK}: ${seen.slice(-800)}`);
  return { done, shutdown: total - done };
}

/**
 * Ends, by PID, every VMM whose command line names a file under `work` (its
 * agent's image cache): VMs outlive their agent by design, so a run that
 * failed midway would leave one running, and the next run's agent would
 * quarantine it and take no work.
 */
function killVmsUnder(work: string): void {
  for (const pid of pidsMatching(`${work}/`)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      /* gone already */
    }
  }
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error("bench/boot.ts needs root (namespaces, TAP, QEMU)");
  const picked = (process.env["BB_BENCH_IMAGES"] ?? "dev,oci,ref,tpl").split(",");
  const unknown = picked.filter((p) => !["dev", "oci", "ref", "tpl"].includes(p));
  if (unknown.length) throw new Error(`BB_BENCH_IMAGES: unknown ${unknown.join(", ")} (dev, oci, ref, tpl)`);
  const img = await images(picked);
  const work = mkdtempSync(join(tmpdir(), "bb-bench-boot-"));
  workDir = work;
  const kinds: Kind[] = [
    {
      id: "dev",
      name: "dev (ext4, beachball-guest PID 1)",
      cls: "b-dev",
      dir: img.dev,
      bareArgs: ["init=/bin/sh", "--", "-c", `"echo ${MARK}; reboot -f"`],
    },
    {
      id: "oci",
      name: "OCI (squashfs + overlay)",
      cls: "b-oci",
      dir: img.oci,
      bareArgs: ["init=/bin/sh", "--", "-c", `"echo ${MARK}; echo b > /proc/sysrq-trigger"`],
    },
    {
      id: "ref",
      name: "reference (systemd)",
      cls: "b-ref",
      dir: img.ref,
      bareArgs: [
        "init=/lib/systemd/systemd",
        "systemd.mask=beachball-guest.service",
        `systemd.run="/bin/sh -c 'echo ${MARK} > /dev/ttyS0'"`,
        "systemd.run_success_action=reboot",
      ],
    },
  ];
  let scheduler: Role | undefined;
  let agent: Role | undefined;
  let controllerOf: SchedulerClient | undefined;
  const created = new Set<string>();
  try {
    const source = join(work, "source");
    const used = kinds.filter((k) => picked.includes(k.id) || (k.id === "dev" && picked.includes("tpl")));
    await publishImages(
      used.map((k) => k.dir),
      source,
    );
    const digestOf = (d: string) =>
      readdirSync(source).find(
        (h) =>
          readFileSync(join(source, h, "manifest.json"), "utf8") === readFileSync(join(d, "manifest.json"), "utf8"),
      )!;
    const dev0 = ensureDevManifest(join(work, "m"), `sha256:${digestOf(img.dev)}`);
    const man = JSON.parse(readFileSync(dev0.manifestPath, "utf8"));
    man.workloadClasses = Object.fromEntries(
      used.map((k) => [
        k.cls,
        {
          cpuMillis: 1000,
          memoryMiB: 512,
          ephemeralDiskMiB: 2048,
          imageDigest: `sha256:${digestOf(k.dir)}`,
          maxTtlSeconds: 3600,
        },
      ]),
    );
    // Warm starts (issue 21): the dev image at 256 MiB, cold, from a template, and suspendable.
    const small = {
      cpuMillis: 1000,
      memoryMiB: 256,
      ephemeralDiskMiB: 1024,
      imageDigest: `sha256:${digestOf(img.dev)}`,
      maxTtlSeconds: 3600,
    };
    if (picked.includes("tpl"))
      Object.assign(man.workloadClasses, {
        "b-cold": small,
        "b-tpl": { ...small, template: true },
        "b-susp": { ...small, suspendable: true },
      });
    writeFileSync(join(work, "manifest.json"), JSON.stringify(man));
    const tokens = JSON.parse(readFileSync(dev0.clientConfigPath, "utf8")) as { token: string; operatorToken: string };
    const probe = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response() });
    const url = `http://127.0.0.1:${probe.port}`;
    await probe.stop(true);
    scheduler = startRole(
      [
        "scheduler",
        "serve",
        "--data-dir",
        join(work, "s"),
        "--manifest",
        join(work, "manifest.json"),
        "--listen",
        url.slice(7),
      ],
      join(work, "scheduler.log"),
    );
    for (
      let i = 0;
      i < 200 &&
      !(await fetch(`${url}/healthz`)
        .then((r) => r.ok)
        .catch(() => false));
      i++
    )
      await Bun.sleep(100);
    const controller = new SchedulerClient(url, tokens.token);
    controllerOf = controller;
    const operator = new SchedulerClient(url, tokens.operatorToken);
    const t = await operator.enrollmentToken("bench-host");
    await runRole([
      "agent",
      "join",
      "--scheduler",
      url,
      "--token",
      t.token,
      "--data-dir",
      join(work, "a"),
      "--image-dir",
      join(work, "none"),
      "--image-source",
      source,
      "--trusted-image-key",
      `${img.key},${img.devKey}`,
      "--max-placements",
      "1",
    ]);
    agent = startRole(["agent", "run", "--data-dir", join(work, "a")], join(work, "agent.log"));
    for (
      let i = 0;
      i < 300 &&
      !(await operator.hosts().catch(() => [])).some((h) => h.hostId === "bench-host" && h.health === "healthy");
      i++
    )
      await Bun.sleep(100);

    const beachball = async (cls: string) => {
      const { view } = await controller.create({ clientRequestId: `bench-${randomUUID()}`, workloadClass: cls });
      created.add(view.allocationId);
      await controller.deliverWhenReady(
        view.allocationId,
        new TextEncoder().encode("echo bench-payload\n"),
        `d-${randomUUID()}`,
        300_000,
      );
      const ev: AllocationEvent[] = [];
      await controller.follow(view.allocationId, (e) => ev.push(e), {
        intervalMs: 100,
        until: (e) => e.type === "workload.exited",
      });
      const v = await controller.get(view.allocationId);
      const consoleText = readFileSync(
        join(
          work,
          "a",
          "allocations",
          placementDirName("bench-host", v.allocationId, v.placementId!, v.generation),
          "logs",
          "console.log",
        ),
        "utf8",
      );
      writeFileSync(join(BENCH, `last-console-${cls}.log`), consoleText); // for a look at where the time went
      // Inside the guest: kernel uptime when the init handed over to the guest, and when the guest was ready;
      // and the guest's own line: uptime when guest_ready was written, ms of that after main, and its resident set.
      const up = (re: RegExp) => Number(re.exec(consoleText)?.[1] ?? NaN) * 1000;
      const guestStart = up(/ready \([a-z]+ workload\) at ([0-9.]+)s/) - up(/-initramfs: starting \S+ at ([0-9.]+)s/);
      const own = /guest_ready written at ([0-9.]+)s, (\d+) ms after main; VmRSS (\d+) kB/.exec(consoleText);
      const selfReady = up(/guest_ready written at ([0-9.]+)s/) - up(/-initramfs: starting \S+ at ([0-9.]+)s/);
      const afterMain = Number(own?.[2] ?? NaN);
      const rssKb = Number(own?.[3] ?? NaN);
      await controller.release(view.allocationId);
      await controller.follow(view.allocationId, (e) => ev.push(e), {
        after: ev[ev.length - 1]!.seq,
        intervalMs: 100,
        until: (e) => e.type === "allocation.released" || e.type === "allocation.failed",
      });
      const at = (type: string) => Date.parse(ev.find((e) => e.type === type)!.at);
      if (!ev.some((e) => e.type === "allocation.released"))
        throw new Error(`${cls}: not released cleanly\n${tail(agent!.log)}`);
      return {
        allocationId: view.allocationId,
        done: at("workload.exited") - at("allocation.created"),
        release: at("allocation.released") - at("allocation.release_requested"),
        phases: phaseTimings(ev),
        guestStart,
        selfReady,
        afterMain,
        rssKb,
      };
    };

    const rows: string[][] = [];
    const tplRows: string[] = [];
    if (picked.includes("tpl")) {
      const runs = Math.max(5, RUNS);
      const startOf = async (id: string) =>
        (await controller.events(id)).find((e) => e.type === "placement.running")?.data?.["startedFrom"];
      console.log("bench: templates: warm-up (the first templated create makes the template)");
      await beachball("b-cold");
      await beachball("b-tpl");
      const cold: number[] = [];
      const warm: number[] = [];
      for (let i = 0; i < runs; i++) {
        cold.push((await beachball("b-cold")).done);
        const w = await beachball("b-tpl");
        warm.push(w.done);
        // Every measured templated create must have come from the template, or the ratio means nothing.
        const from = await startOf(w.allocationId);
        if (from !== "template") throw new Error(`a b-tpl create started from ${String(from)}, not the template`);
      }
      const paired = median(warm.map((w, i) => w / cold[i]!));
      console.log(
        `bench: templates: create→done cold ${cold.map(Math.round).join("/")} ms, from the template ${warm.map(Math.round).join("/")} ms`,
      );
      tplRows.push(
        `dev, 256 MiB | cold ${ms(median(cold))} | template ${ms(median(warm))} | ratio ${(median(warm) / median(cold)).toFixed(2)}× | paired ${paired.toFixed(2)}× (goal ≤ 0.30×)`,
      );
      // Suspend and resume through the whole stack: the request → the host's report.
      const { view } = await controller.create({ clientRequestId: `bench-${randomUUID()}`, workloadClass: "b-susp" });
      created.add(view.allocationId);
      await controller.waitFor(view.allocationId, (v) => v.state === "ready", { timeoutMs: 300_000 });
      const suspend: number[] = [];
      const resume: number[] = [];
      const waitFor = async (type: string, after: number) => {
        for (let i = 0; i < 1_200; i++) {
          const e = (await controller.events(view.allocationId, after)).find((x) => x.type === type);
          if (e) return e;
          await Bun.sleep(25);
        }
        throw new Error(`no ${type} within 30 s\n${tail(agent!.log)}`);
      };
      const lastSeq = async () => {
        let seq = 0;
        for (
          let page = await controller.events(view.allocationId);
          page.length;
          page = await controller.events(view.allocationId, seq)
        )
          seq = page.at(-1)!.seq;
        return seq;
      };
      for (let i = 0; i < runs; i++) {
        let seq = await lastSeq();
        await controller.suspend(view.allocationId);
        const asked = await waitFor("allocation.suspend_requested", seq);
        const done = await waitFor("placement.suspended", seq);
        suspend.push(Date.parse(done.at) - Date.parse(asked.at));
        seq = await lastSeq();
        await controller.resume(view.allocationId);
        const askedR = await waitFor("allocation.resume_requested", seq);
        const doneR = await waitFor("placement.running", seq);
        resume.push(Date.parse(doneR.at) - Date.parse(askedR.at));
      }
      await controller.release(view.allocationId);
      console.log(
        `bench: templates: suspend ${suspend.map(Math.round).join("/")} ms, resume ${resume.map(Math.round).join("/")} ms`,
      );
      tplRows.push(
        `suspendable dev, 256 MiB | suspend ${ms(median(suspend))} (goal ≤ 100 ms) | resume ${ms(median(resume))} (goal ≤ 600 ms)`,
      );
      for (let i = 0; i < 100 && (await controller.get(view.allocationId)).state !== "released"; i++)
        await Bun.sleep(100);
    }
    for (const k of used) {
      console.log(`bench: ${k.name}: warm-up`);
      await beachball(k.cls);
      const bb: Awaited<ReturnType<typeof beachball>>[] = [];
      const b: { done: number; shutdown: number }[] = [];
      for (let i = 0; i < RUNS; i++) {
        bb.push(await beachball(k.cls));
        b.push(await bare(k.dir, k.bareArgs, work));
      }
      const [d, bd, r, bs] = [
        median(bb.map((x) => x.done)),
        median(b.map((x) => x.done)),
        median(bb.map((x) => x.release)),
        median(b.map((x) => x.shutdown)),
      ];
      // Each Beachball run sits next to its bare run in time, so the median of the pairs' ratios drifts
      // less with the machine's load than the ratio of the two medians (both are printed).
      const paired = median(bb.map((x, i) => x.done / b[i]!.done));
      rows.push([
        k.name,
        ms(d),
        ms(bd),
        `${(d / bd).toFixed(2)}×`.padStart(7),
        `${paired.toFixed(2)}×`.padStart(7),
        ms(r),
        ms(bs),
        ms(r - bs),
      ]);
      console.log(
        `bench: ${k.name}: create→done ${bb.map((x) => Math.round(x.done)).join("/")} ms, bare ${b.map((x) => Math.round(x.done)).join("/")} ms`,
      );
      const phases = bb[0]!.phases.map(
        (p) =>
          `${p.phase} ${Math.round(median(bb.map((x) => x.phases.find((q) => q.phase === p.phase)?.ms ?? NaN)))} ms`,
      );
      console.log(
        `bench: ${k.name}: phases (median): ${phases.join("; ")}; guest start → ready inside the VM ${Math.round(median(bb.map((x) => x.guestStart)))} ms (kernel uptime); exec → guest_ready written ${Math.round(median(bb.map((x) => x.selfReady)))} ms (kernel uptime), ${median(bb.map((x) => x.afterMain))} ms of it after main; VmRSS ${median(bb.map((x) => x.rssKb))} kB`,
      );
    }
    console.log(`\nboot and release overhead, QEMU microvm (TCG), median of ${RUNS}\n`);
    const head = [
      "image",
      "create→done",
      "bare done",
      "ratio",
      "paired ratio",
      "release→absent",
      "bare shutdown",
      "release − bare",
    ];
    console.log(head.join(" | "));
    for (const r of rows) console.log(r.join(" | "));
    if (tplRows.length) {
      console.log(`\nwarm starts, suspend and resume (issue 21), median of ${Math.max(5, RUNS)}\n`);
      for (const r of tplRows) console.log(r);
    }
  } finally {
    // A run that failed midway releases what it made, so its agent tears the VMs, namespaces and cgroups down.
    if (agent && controllerOf && created.size) {
      const c = controllerOf;
      await Promise.allSettled([...created].map((id) => c.release(id)));
      for (let i = 0; i < 300; i++) {
        const left = await Promise.all([...created].map((id) => c.get(id).catch(() => null)));
        if (left.every((v) => !v || v.state === "released" || v.state === "failed")) break;
        await Bun.sleep(200);
      }
    }
    if (agent) await stopRole(agent);
    if (agent && existsSync(agent.log)) writeFileSync(join(BENCH, "last-agent.log"), readFileSync(agent.log));
    if (scheduler) await stopRole(scheduler);
    killVmsUnder(work);
    rmSync(work, { recursive: true, force: true });
  }
}

await main();
