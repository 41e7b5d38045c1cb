/**
 * Real images end to end (issue "Real images", spec "Images"): a scheduler
 * and an agent as `bb` processes, the agent fetching images it has never
 * seen from a real web server (Debian's busybox httpd) on an address inside
 * a network namespace this test creates, through `--image-source http://…`.
 *
 * - The server cuts every connection after CUT_BYTES (nftables in its
 *   namespace), so the first downloads only finish by resuming.
 * - An OCI image made here from a Debian root (mmdebstrap), with a layer
 *   that deletes files of the layers below, built with `bb image build`:
 *   its entrypoint runs a CI-like job (gcc compiles and tests a C program)
 *   and the job's output and exit code come back through the allocation.
 * - The same job on the Debian reference image (systemd as PID 1).
 * - A second allocation reuses the cached image (no new download).
 * - A tampered artifact on the server is refused (IMAGE_DIGEST_MISMATCH)
 *   and quarantined; nothing of it lands in the cache.
 *
 * Needs root, QEMU, squashfs-tools, mmdebstrap (and Debian's mirror the
 * first time; the rootfs tarball is cached in .bb/cache/debian).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { randomBytes, randomUUID } from "node:crypto";
import { SchedulerClient } from "../../src/client/index.ts";
import { compileGuest } from "../../src/image/bbBinary.ts";
import { buildDevImage } from "../../src/image/devBuild.ts";
import { ensureDebianRootfsTar } from "../../src/image/debianRootfs.ts";
import { buildReferenceImage } from "../../src/image/referenceBuild.ts";
import { createPrivateKeyFile, readPrivateKeyFile } from "../../src/image/keyFile.ts";
import { makeTestImage, writeTestImage } from "../../src/image/testImage.ts";
import { ensureDevManifest } from "../../src/scheduler/manifest.ts";
import { placementDirName } from "../../src/agent/resourceNames.ts";
import { sha256File } from "../../src/image/verify.ts";
import type { AllocationEvent } from "../../src/protocol/api.ts";
import { GCC_JOB, writeDebianOciLayout } from "../support/debianOci.ts";
import {
  cleanUpPlacements,
  freePort,
  settledLeftoversOf,
  runRole,
  startRole,
  stopRole,
  tail,
  vmTestSkipReason,
  type Role,
  waitUntil,
  runHostId,
} from "../support/processes.ts";

const skip =
  vmTestSkipReason() ??
  (!Bun.which("mksquashfs") ? "mksquashfs missing" : !Bun.which("mmdebstrap") ? "mmdebstrap missing" : null);
if (skip) console.log(`SKIP test/e2e/images.test.ts: ${skip}`);
const d = skip ? describe.skip : describe;

/** The web server resets each connection after this many bytes sent. */
const CUT_BYTES = 24 * 1024 * 1024;
const id = randomBytes(3).toString("hex");
const SRV_NS = `bbimgsrv${id}`;
const HOST_VETH = `bbih${id}`;
const SUBNET = `198.18.${Number.parseInt(id.slice(0, 2), 16)}`;
const SRV_ADDR = `${SUBNET}.2`;

/** This run's host ID (runHostId: another run's leftovers on this machine are not quarantined as this host's). */
const HOST = runHostId("img");
let work: string;
let port: number;
let scheduler: Role;
let agent: Role;
let httpd: ReturnType<typeof Bun.spawn> | undefined;
let controller: SchedulerClient;
let operator: SchedulerClient;
const digests: Record<string, string> = {};
const agentDir = () => join(work, "agent");
const httpdLog = () => join(work, "httpd.log");

async function sh(cmd: string[]): Promise<void> {
  const p = Bun.spawn(cmd, { stdout: "pipe", stderr: "pipe" });
  const [err, code] = await Promise.all([new Response(p.stderr).text(), p.exited]);
  if (code !== 0) throw new Error(`${cmd.join(" ")}: ${err}`);
}

/** Image artifact requests the web server answered, as `status url`. */
function served(): string[] {
  const lines = existsSync(httpdLog()) ? readFileSync(httpdLog(), "utf8").split("\n") : [];
  const out: string[] = [];
  const urls = new Map<string, string>();
  for (const l of lines) {
    const m = /^(\S+): (url|response):(\S+)/.exec(l);
    if (!m) continue;
    if (m[2] === "url") urls.set(m[1]!, m[3]!);
    else out.push(`${m[3]} ${urls.get(m[1]!) ?? "?"}`);
  }
  return out;
}

/** Waits until the scheduler answers /healthz. */
const waitUp = () =>
  waitUntil("the scheduler's /healthz", () => fetch(`http://127.0.0.1:${port}/healthz`).then((r) => r.ok), 20_000, [
    scheduler.log,
  ]);

/** Waits until the agent's host reads healthy. */
const waitHealthy = () =>
  waitUntil(
    `a healthy ${HOST}`,
    async () => (await operator.hosts()).some((h) => h.hostId === HOST && h.health === "healthy"),
    30_000,
    [agent.log],
  );

/** Runs `script` on a new allocation of `workloadClass`; returns exit code, console and events, after release. */
async function runJob(
  workloadClass: string,
  script: string,
): Promise<{ exitCode: number | undefined; console: string; events: AllocationEvent[] }> {
  const { view } = await controller.create({ clientRequestId: `img-${randomUUID()}`, workloadClass });
  const allocationId = view.allocationId;
  const events: AllocationEvent[] = [];
  try {
    await controller.deliverWhenReady(allocationId, new TextEncoder().encode(script), `dlv-${randomUUID()}`, 400_000);
    await controller.follow(allocationId, (e) => events.push(e), {
      until: (e) => e.type === "workload.exited" || e.type === "allocation.failed",
    });
    const v = await controller.get(allocationId);
    const dirName = placementDirName(HOST, allocationId, v.placementId!, v.generation);
    await Bun.sleep(300);
    const consoleText = readFileSync(
      join(agentDir(), "allocations", dirName, "logs", "console.log"),
      "utf8",
    ).replaceAll("\r\n", "\n");
    await controller.release(allocationId);
    await controller.follow(allocationId, (e) => events.push(e), {
      after: events[events.length - 1]!.seq,
      until: (e) => e.type === "allocation.released" || e.type === "allocation.failed",
    });
    expect(await settledLeftoversOf(join(agentDir(), "allocations"), dirName)).toEqual([]);
    return { exitCode: v.workloadExitCode ?? undefined, console: consoleText, events };
  } catch (e) {
    throw new Error(`${(e as Error).message}\nagent:\n${tail(agent.log)}`);
  }
}

d("real images over HTTP (real QEMU)", () => {
  beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), "bb-images-e2e-"));
    const cache = resolve(".bb/cache");
    const keyFile = join(work, "operator.key");
    const key = createPrivateKeyFile(keyFile);
    writeFileSync(`${keyFile}.pub`, `${key.publicKey}\n`);
    let t = performance.now();
    const guest = await compileGuest(resolve(".bb/test-build/beachball-guest"));
    const dev = await buildDevImage({
      outDir: resolve(".bb/test-images/dev-guest"),
      cacheDir: cache,
      bbBinaryPath: guest,
    });
    digests.dev = dev.digest;
    const rootfsTar = await ensureDebianRootfsTar(cache, undefined, (m) => console.log(`images.test: ${m}`));
    console.log(`images.test: guest, dev image and Debian rootfs ready in ${Math.round(performance.now() - t)} ms`);
    t = performance.now();
    const layout = await writeDebianOciLayout(join(work, "layout"), rootfsTar);
    const out = await runRole([
      "image",
      "build",
      "--oci-layout",
      layout.dir,
      "--key",
      keyFile,
      "--out",
      join(work, "oci-image"),
      "--cache",
      cache,
      "--bb",
      guest,
      "--compression-level",
      "3",
      "--json",
    ]);
    const built = JSON.parse(out.trim().split("\n").pop()!) as { digest: string; entries: number; layers: number };
    expect(built.layers).toBe(3);
    digests.oci = built.digest;
    console.log(
      `images.test: bb image build (3 layers, ${built.entries} entries) in ${Math.round(performance.now() - t)} ms`,
    );
    t = performance.now();
    const ref = await buildReferenceImage({
      rootfsTar,
      guestBinaryPath: guest,
      outDir: join(work, "ref-image"),
      cacheDir: cache,
      privateKey: readPrivateKeyFile(keyFile).privateKey,
    });
    digests.ref = ref.digest;
    console.log(`images.test: reference image in ${Math.round(performance.now() - t)} ms`);
    // A small signed image whose root disk the server will serve tampered.
    const bad = makeTestImage({ privateKey: key.privateKey, seed: 99 });
    digests.tampered = bad.digest;

    const www = join(work, "www");
    await runRole(["image", "publish", "--out", www, dev.dir, join(work, "oci-image"), ref.dir]);
    writeTestImage(join(www, bad.digest.slice(7)), bad);
    const rootfs = readFileSync(join(www, bad.digest.slice(7), "rootfs.ext4"));
    rootfs[100] = rootfs[100]! ^ 0xff;
    writeFileSync(join(www, bad.digest.slice(7), "rootfs.ext4"), rootfs);

    // The web server: busybox httpd in its own namespace, reached over a veth pair; nftables cuts long transfers.
    await sh(["ip", "netns", "add", SRV_NS]);
    await sh(["ip", "link", "add", HOST_VETH, "type", "veth", "peer", "name", "eth0", "netns", SRV_NS]);
    await sh(["ip", "addr", "add", `${SUBNET}.1/30`, "dev", HOST_VETH]);
    await sh(["ip", "link", "set", HOST_VETH, "up"]);
    await sh(["ip", "-n", SRV_NS, "addr", "add", `${SRV_ADDR}/30`, "dev", "eth0"]);
    await sh(["ip", "-n", SRV_NS, "link", "set", "eth0", "up"]);
    await sh(["ip", "-n", SRV_NS, "link", "set", "lo", "up"]);
    // The client's next packet after CUT_BYTES is answered with a reset (so the client sees the cut at once, not after a timeout).
    writeFileSync(
      join(work, "cut.nft"),
      `table inet bbimgcut {\n  chain in {\n    type filter hook input priority 0;\n    tcp dport 8080 ct reply bytes > ${CUT_BYTES} reject with tcp reset\n  }\n}\n`,
    );
    await sh(["ip", "netns", "exec", SRV_NS, "nft", "-f", join(work, "cut.nft")]);
    httpd = Bun.spawn(
      ["ip", "netns", "exec", SRV_NS, "busybox", "httpd", "-f", "-vv", "-p", `${SRV_ADDR}:8080`, "-h", www],
      { stdout: "ignore", stderr: Bun.file(httpdLog()) },
    );

    const sched = join(work, "scheduler");
    const dev0 = ensureDevManifest(join(work, "manifest"), dev.digest);
    const m = JSON.parse(readFileSync(dev0.manifestPath, "utf8"));
    m.workloadClasses = {
      "ci-dev": {
        cpuMillis: 1000,
        memoryMiB: 256,
        ephemeralDiskMiB: 1024,
        imageDigest: digests.dev,
        maxTtlSeconds: 3600,
      },
      "ci-oci": {
        cpuMillis: 1000,
        memoryMiB: 512,
        ephemeralDiskMiB: 2048,
        imageDigest: digests.oci,
        maxTtlSeconds: 3600,
      },
      "ci-ref": {
        cpuMillis: 1000,
        memoryMiB: 512,
        ephemeralDiskMiB: 2048,
        imageDigest: digests.ref,
        maxTtlSeconds: 3600,
      },
      "ci-tampered": {
        cpuMillis: 1000,
        memoryMiB: 256,
        ephemeralDiskMiB: 1024,
        imageDigest: digests.tampered,
        maxTtlSeconds: 3600,
      },
    };
    writeFileSync(join(work, "manifest.json"), JSON.stringify(m));
    const tokens = JSON.parse(readFileSync(dev0.clientConfigPath, "utf8")) as { token: string; operatorToken: string };
    port = await freePort();
    scheduler = startRole(
      [
        "scheduler",
        "serve",
        "--data-dir",
        sched,
        "--manifest",
        join(work, "manifest.json"),
        "--listen",
        `127.0.0.1:${port}`,
      ],
      join(work, "scheduler.log"),
    );
    await waitUp();
    controller = new SchedulerClient(`http://127.0.0.1:${port}`, tokens.token);
    operator = new SchedulerClient(`http://127.0.0.1:${port}`, tokens.operatorToken);
    const enroll = await operator.enrollmentToken(HOST);
    await runRole([
      "agent",
      "join",
      "--scheduler",
      `http://127.0.0.1:${port}`,
      "--token",
      enroll.token,
      "--data-dir",
      agentDir(),
      "--image-dir",
      join(work, "none"),
      "--image-source",
      `http://${SRV_ADDR}:8080`,
      "--trusted-image-key",
      `${keyFile}.pub,${dev.publicKey}`,
      "--max-placements",
      "2",
    ]);
    agent = startRole(["agent", "run", "--data-dir", agentDir()], join(work, "agent.log"));
    await waitHealthy();
  }, 900_000);

  afterAll(async () => {
    if (agent) await stopRole(agent);
    if (scheduler) await stopRole(scheduler);
    if (httpd) {
      httpd.kill("SIGKILL");
      await httpd.exited;
    }
    // httpd forks per connection: end every process left in the server's namespace (ours) before deleting it.
    const pids = await new Response(
      Bun.spawn(["ip", "netns", "pids", SRV_NS], { stdout: "pipe", stderr: "ignore" }).stdout,
    )
      .text()
      .catch(() => "");
    for (const pid of pids
      .split("\n")
      .map(Number)
      .filter((n) => n > 0))
      process.kill(pid, "SIGKILL");
    await sh(["ip", "netns", "del", SRV_NS]).catch(() => {});
    await sh(["ip", "link", "del", HOST_VETH]).catch(() => {});
    if (!work) return;
    await cleanUpPlacements(join(agentDir(), "allocations"));
    rmSync(work, { recursive: true, force: true });
  }, 60_000);

  test("an image never seen is fetched over HTTP, resumed after cut connections, then reused", async () => {
    const first = await runJob("ci-dev", "echo dev-image-says-hi; exit 4\n");
    expect(first.exitCode).toBe(4);
    expect(first.console).toContain("dev-image-says-hi");
    const hex = digests.dev!.slice(7);
    const kernelGets = served().filter((s) => s.endsWith(`/${hex}/vmlinux`));
    // The 66 MB kernel cannot come through in one connection: it took ranged requests (206) to finish.
    expect(kernelGets.length).toBeGreaterThan(1);
    expect(kernelGets.slice(1).every((s) => s.startsWith("206 "))).toBe(true);
    expect(tail(agent.log, 100_000)).toContain("resuming");
    const artifacts = join(agentDir(), "images", "artifacts");
    const m = JSON.parse(readFileSync(join(agentDir(), "images", "manifests", `${hex}.json`), "utf8"));
    expect(await sha256File(join(artifacts, `sha256-${m.kernel.sha256}`))).toBe(m.kernel.sha256);
    // Later downloads run uncut.
    await sh(["ip", "netns", "exec", SRV_NS, "nft", "delete table inet bbimgcut"]);
    const before = served().length;
    const second = await runJob("ci-dev", "echo again; exit 0\n");
    expect(second.exitCode).toBe(0);
    expect(served().length).toBe(before); // nothing fetched: the verified cache served it
  }, 600_000);

  test("an OCI image built from a Debian root runs a gcc job through its entrypoint", async () => {
    const r = await runJob("ci-oci", `${GCC_JOB}\nexit 0\n`);
    expect(r.console).toContain("ci-job: running a text/x-shellscript payload as ci in /home/ci");
    expect(r.console).toContain("test: sum(100) = 5050 ok");
    expect(r.console).toContain("job: all tests passed");
    expect(r.console).toMatch(/BEACHBALL_JOB_EXIT 0/);
    expect(r.exitCode).toBe(0);
    // The layer that deleted files really hid them; a failing job's code comes back too.
    const r2 = await runJob(
      "ci-oci",
      "test ! -e /opt/junk/big.bin && test -e /opt/junk/keep.txt && test ! -e /usr/share/doc && ls /usr/share/man\nexit 9\n",
    );
    expect(r2.console).toContain("README.beachball");
    expect(r2.exitCode).toBe(9);
  }, 600_000);

  test("the Debian reference image (systemd) runs the same job through its adapter", async () => {
    const r = await runJob("ci-ref", `${GCC_JOB}\nexit 0\n`);
    expect(r.console).toContain("job: root on");
    expect(r.console).toContain("job: all tests passed");
    expect(r.exitCode).toBe(0);
  }, 600_000);

  test("a tampered artifact on the server is refused and quarantined; nothing of it is published", async () => {
    const { view } = await controller.create({ clientRequestId: `img-${randomUUID()}`, workloadClass: "ci-tampered" });
    const events: AllocationEvent[] = [];
    await controller.follow(view.allocationId, (e) => events.push(e), {
      until: (e) => e.type === "allocation.failed" || e.type === "allocation.ready" || e.type === "placement.failed",
    });
    const v = await controller.get(view.allocationId);
    expect(JSON.stringify(events) + JSON.stringify(v)).toContain("IMAGE_DIGEST_MISMATCH");
    const q = join(agentDir(), "images", "quarantine");
    const reasons = readdirSync(q)
      .filter((f) => f.endsWith(".reason.json"))
      .map((f) => JSON.parse(readFileSync(join(q, f), "utf8")) as { name: string; code: string; imageDigest: string });
    expect(
      reasons.some(
        (r) => r.imageDigest === digests.tampered && r.name === "rootfs.ext4" && r.code === "IMAGE_DIGEST_MISMATCH",
      ),
    ).toBe(true);
    expect(existsSync(join(agentDir(), "images", "manifests", `${digests.tampered!.slice(7)}.json`))).toBe(false);
    await controller.release(view.allocationId).catch(() => {});
  }, 300_000);
});
