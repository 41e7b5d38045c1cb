/**
 * DONE criterion of spec "Guest network isolation" on a real QEMU guest:
 * traffic to each denied range is dropped and counted, DNS goes only to the
 * configured resolver, egress to a "public" host works through the uplink
 * (masqueraded), the VMM runs inside its cgroup with RLIMIT_FSIZE, and the
 * root namespace's nftables ruleset is untouched before, during and after.
 *
 * Topology (all made by this test, torn down by name even on failure):
 *   guest 10.0.0.2 ─TAP─ bb-<digest> (agent) ─veth bbv…─ bbt-up-PID (the
 *   agent's uplink namespace, device bbtu0 192.0.2.1) ─veth─ bbt-net-PID
 *   ("internet": 198.51.100.10 public, .53 resolver, .54 other resolver,
 *   10/8, 172.16/12, 192.168/16, 100.64/10, 169.254.169.254, 169.254.10.10,
 *   operator-denied 203.0.113.99). No traffic can leave this machine.
 * Needs root, qemu-system-x86_64, ip, nft; otherwise prints why and skips.
 */
import { afterAll, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { buildDevImage } from "../../src/image/devBuild.ts";
import { compileGuest } from "../../src/image/bbBinary.ts";
import { isolationFromConfig } from "../../src/agent/isolation/isolation.ts";
import { HostIsolation } from "../../src/agent/isolation/isolationOps.ts";
import { HostImages } from "../../src/agent/image/hostImages.ts";
import { systemRandom, systemTimers } from "../../src/agent/ports.ts";
import { hostVethName, listPlacementNetworks } from "../../src/agent/isolation/placementNet.ts";
import { nftTableName } from "../../src/agent/isolation/rules.ts";
import { cgroupPids, type PlacementCgroup } from "../../src/agent/isolation/cgroups/placementCgroup.ts";
import { placementDirName } from "../../src/agent/resourceNames.ts";
import {
  preparePlacement,
  startPlacement,
  stopPlacement,
  type PlacementContext,
  type PlacementRef,
} from "../../src/agent/placementOps.ts";
import { QemuMicrovmDriver } from "../../src/agent/vmm/qemu.ts";
import type { VmHandle } from "../../src/agent/vmm/driver.ts";
import type { GuestSession } from "../../src/agent/guestSession.ts";
import { vmTestSkipReason } from "../support/processes.ts";

const repo = resolve(import.meta.dir, "../..");
const bun = process.execPath;
const skipReason =
  vmTestSkipReason() ?? (Bun.which("nft") ? null : "nft is not installed (apt-get install -y nftables)");
if (skipReason) console.log(`SKIP test/integration/net-isolation.test.ts: ${skipReason}`);

const UP = `bbt-up-${process.pid}`;
const NET = `bbt-net-${process.pid}`;
const work = mkdtempSync(join(tmpdir(), "bbt-net-"));
const driver = new QemuMicrovmDriver({
  accel: (process.env.BB_TEST_VM_ACCEL as "auto" | "kvm" | "tcg" | undefined) ?? "auto",
});
const sh = (cmd: string[]) => Bun.spawnSync(cmd, { stdout: "pipe", stderr: "pipe" });
const must = (cmd: string[]) => {
  const r = sh(cmd);
  if (r.exitCode !== 0) throw new Error(`${cmd.join(" ")}: ${r.stderr}`);
  return r.stdout.toString();
};
const rootRuleset = () => must(["nft", "list", "ruleset"]);
let responder: ReturnType<typeof Bun.spawn> | undefined;
let ctx: PlacementContext | undefined;
let ref: PlacementRef | undefined;
let handle: VmHandle | null = null;
let session: GuestSession | null = null;

afterAll(async () => {
  if (ctx && ref) await stopPlacement(ctx, ref, handle, session).catch(() => {});
  if (handle) await driver.stop(handle, 1000).catch(() => {});
  responder?.kill("SIGKILL");
  await responder?.exited;
  for (const ns of [UP, NET]) sh(["ip", "netns", "delete", ns]);
  rmSync(work, { recursive: true, force: true });
});

function buildInternet(): void {
  for (const ns of [UP, NET]) must(["ip", "netns", "add", ns]);
  must(["ip", "-n", UP, "link", "add", "bbtu0", "type", "veth", "peer", "name", "bbtn0", "netns", NET]);
  for (const [ns, dev, addr] of [
    [UP, "bbtu0", "192.0.2.1/24"],
    [NET, "bbtn0", "192.0.2.2/24"],
  ] as const) {
    must(["ip", "-n", ns, "addr", "add", addr, "dev", dev]);
    must(["ip", "-n", ns, "link", "set", dev, "up"]);
    must(["ip", "-n", ns, "link", "set", "lo", "up"]);
  }
  must(["ip", "-n", UP, "route", "add", "default", "via", "192.0.2.2"]);
  must(["ip", "netns", "exec", UP, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"]);
  for (const a of [
    "198.51.100.10",
    "198.51.100.53",
    "198.51.100.54",
    "10.200.0.10",
    "172.16.77.10",
    "192.168.77.10",
    "100.64.77.10",
    "169.254.169.254",
    "169.254.10.10",
    "203.0.113.99",
  ])
    must(["ip", "-n", NET, "addr", "add", `${a}/32`, "dev", "lo"]);
}

const PROBES: Record<string, string> = {
  public: "198.51.100.10",
  rfc1918_10: "10.200.0.10",
  rfc1918_172: "172.16.77.10",
  rfc1918_192: "192.168.77.10",
  cgnat: "100.64.77.10",
  metadata: "169.254.169.254",
  link_local: "169.254.10.10",
  operator: "203.0.113.99",
  uplink_host: "192.0.2.1",
};
const PAYLOAD = `
probe() { if out=$(timeout 6 wget -q -O - "http://$2/" 2>/dev/null); then echo "PROBE $1 OPEN $out"; else echo "PROBE $1 BLOCKED"; fi; }
dns() { if timeout 6 nslookup probe.test $2 2>/dev/null | grep -q 198.51.100.10; then echo "PROBE $1 OPEN"; else echo "PROBE $1 BLOCKED"; fi; }
${Object.entries(PROBES)
  .map(([n, a]) => `probe ${n} ${a} &`)
  .join("\n")}
dns dns_configured 198.51.100.53 &
dns dns_resolvconf &
dns dns_other 198.51.100.54 &
dns dns_private 10.200.0.10 &
ping -c 2 -W 1 224.0.0.1 >/dev/null 2>&1; echo "PROBE multicast $([ $? = 0 ] && echo OPEN || echo BLOCKED)" &
wait
echo PROBES_DONE
`;

function counters(ns: string, table: string): Record<string, number> {
  const j = JSON.parse(must(["ip", "netns", "exec", ns, "nft", "-j", "list", "counters", "table", "inet", table])) as {
    nftables: Array<{ counter?: { name: string; packets: number } }>;
  };
  return Object.fromEntries(j.nftables.filter((e) => e.counter).map((e) => [e.counter!.name, e.counter!.packets]));
}

test.skipIf(!!skipReason)(
  "guest egress: denied ranges dropped and counted, DNS only to the resolver, public egress works, root ruleset untouched",
  async () => {
    const t0 = performance.now();
    const img = await buildDevImage({
      outDir: join(repo, ".bb/test-images/net"),
      cacheDir: join(repo, ".bb/cache"),
      bbBinaryPath: await compileGuest(join(repo, ".bb/test-build/net/beachball-guest")),
    });
    console.log(`net-isolation: image ${img.reused ? "reused" : "built"} in ${Math.round(performance.now() - t0)} ms`);
    const rulesetBefore = rootRuleset();
    buildInternet();
    const respLog = join(work, "responder.ndjson");
    writeFileSync(respLog, "");
    const resp = Bun.spawn(
      [
        "ip",
        "netns",
        "exec",
        NET,
        bun,
        join(repo, "test/support/netResponder.ts"),
        respLog,
        "198.51.100.10",
        "198.51.100.53",
        "198.51.100.54",
        "10.200.0.10",
      ],
      { stdout: "pipe", stderr: "inherit" },
    );
    responder = resp;
    const rd = resp.stdout.getReader();
    expect(new TextDecoder().decode((await rd.read()).value)).toContain("responder ready");
    rd.releaseLock();

    const c0: PlacementContext = {
      allocationsDir: join(work, "allocations"),
      driver,
      guestBootTimeoutMs: 90_000,
      images: new HostImages({ imageDirs: [img.dir], trustedKeys: [], cacheDir: join(work, "images") }),
      isolation: new HostIsolation(
        isolationFromConfig({
          uplink: { netns: UP, device: "bbtu0" },
          dnsResolvers: ["198.51.100.53"],
          deniedRanges: ["203.0.113.0/24"],
        }),
      ),
      timers: systemTimers,
      random: systemRandom,
    };
    ctx = c0;
    mkdirSync(c0.allocationsDir, { recursive: true });
    const ids = { allocationId: `alloc-net-${process.pid}`, placementId: `plc-net-${process.pid}`, generation: 1 };
    const dirName = placementDirName("net-host", ids.allocationId, ids.placementId, ids.generation);
    ref = {
      ...ids,
      dirName,
      spec: { cpuMillis: 1000, memoryMiB: 256, ephemeralDiskMiB: 512, imageDigest: img.digest },
    };
    const table = nftTableName(dirName);

    let t = performance.now();
    await preparePlacement(c0, ref);
    console.log(`net-isolation: prepared in ${Math.round(performance.now() - t)} ms`);
    expect(must(["ip", "netns", "exec", dirName, "nft", "list", "tables"])).toContain(`inet ${table}`);
    expect(must(["ip", "netns", "exec", UP, "nft", "list", "tables"])).toContain(`ip ${table}`);
    expect(rootRuleset()).toBe(rulesetBefore);

    t = performance.now();
    const started = await startPlacement(c0, ref, { launch: (start) => start().then((h) => (handle = h)) });
    handle = started.handle;
    session = started.session;
    console.log(`net-isolation: guest ready in ${Math.round(performance.now() - t)} ms (${driver.accelerator})`);

    const cg = JSON.parse(readFileSync(join(c0.allocationsDir, dirName, "cgroup.json"), "utf8")) as PlacementCgroup;
    for (const d of cg.dirs) expect(cgroupPids(d.dir)).toContain(handle.pid);
    const mem = cg.dirs.find((d) => d.controllers.includes("memory"))!;
    expect(readFileSync(join(mem.dir, mem.version === 2 ? "memory.max" : "memory.limit_in_bytes"), "utf8").trim()).toBe(
      String((256 + 192) * 1024 * 1024),
    );
    expect(readFileSync(`/proc/${handle.pid}/limits`, "utf8")).toMatch(
      new RegExp(`Max file size\\s+${512 * 1024 * 1024}\\s+${512 * 1024 * 1024}`),
    );

    t = performance.now();
    const exited = new Promise<number>((r) => (session!.onWorkloadExit = r));
    expect(
      (await session.deliver("d1", "text/x-shellscript", Buffer.from(PAYLOAD).toString("base64"), 10_000)).result,
    ).toBe("consumed");
    expect(await Promise.race([exited, Bun.sleep(60_000).then(() => -1)])).toBe(0);
    console.log(`net-isolation: probes ran in ${Math.round(performance.now() - t)} ms`);

    const consoleText = readFileSync(join(c0.allocationsDir, dirName, "logs/console.log"), "utf8").replaceAll(
      "\r\n",
      "\n",
    );
    const results = Object.fromEntries(
      [...consoleText.matchAll(/^PROBE (\S+) (OPEN|BLOCKED)(.*)$/gm)].map((m) => [m[1], `${m[2]}${m[3]}`.trim()]),
    );
    console.log(`net-isolation: ${JSON.stringify(results)}`);
    const c = counters(dirName, table);
    console.log(`net-isolation: counters ${JSON.stringify(c)}`);
    const seen = readFileSync(respLog, "utf8")
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { proto: string; host?: string; local?: string });
    console.log(`net-isolation: responder saw ${JSON.stringify(seen)}`);
    expect(results.public).toBe("OPEN reached-198.51.100.10-from-192.0.2.1"); // masqueraded out of the named uplink
    expect(results.dns_configured).toBe("OPEN");
    expect(results.dns_resolvconf).toBe("OPEN"); // beachball.dns= reached /etc/resolv.conf
    for (const n of [
      "rfc1918_10",
      "rfc1918_172",
      "rfc1918_192",
      "cgnat",
      "metadata",
      "link_local",
      "operator",
      "uplink_host",
      "dns_other",
      "dns_private",
      "multicast",
    ])
      expect(`${n}: ${results[n]}`).toBe(`${n}: BLOCKED`);

    for (const n of [
      "rfc1918",
      "cgnat",
      "metadata",
      "link_local",
      "operator",
      "host",
      "multicast",
      "dns_denied",
      "dns_allowed",
      "egress_allowed",
    ])
      expect(`${n}: ${(c[n] ?? 0) > 0}`).toBe(`${n}: true`);
    expect(c.rfc1918).toBeGreaterThanOrEqual(3);

    expect(seen.filter((e) => e.proto === "http").map((e) => e.host)).toEqual(["198.51.100.10"]); // no denied address ever reached
    expect([...new Set(seen.filter((e) => e.proto === "dns").map((e) => e.local))]).toEqual(["198.51.100.53"]);
    expect(rootRuleset()).toBe(rulesetBefore);
    expect(must(["ip", "link", "show"])).not.toContain(hostVethName(dirName));

    t = performance.now();
    const left = await stopPlacement(c0, ref, handle, session);
    console.log(`net-isolation: stopped in ${Math.round(performance.now() - t)} ms`);
    expect(left).toEqual([]);
    handle = null;
    session = null;
    expect(await listPlacementNetworks()).not.toContain(dirName);
    expect(must(["ip", "netns", "exec", UP, "nft", "list", "tables"])).not.toContain(table);
    expect(must(["ip", "-n", UP, "link", "show"])).not.toContain(hostVethName(dirName));
    for (const d of cg.dirs) expect(existsSync(d.dir)).toBe(false);
    expect(existsSync(join(c0.allocationsDir, dirName))).toBe(false);
    expect(rootRuleset()).toBe(rulesetBefore);
  },
  300_000,
);
