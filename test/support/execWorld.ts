/**
 * A private VM reachable the way a laptop reaches one (issue 20's e2e and
 * bench/exec.ts share it): the NAT topology of test/e2e/private-ssh.test.ts
 * without the relay (the laptop behind a symmetric NAT, the host behind an
 * endpoint-independent one, a STUN responder on the public side), a
 * scheduler (`bb scheduler serve`, the development manifest with private
 * networking and a second tenant) and an agent (`bb agent run` in the host
 * namespace) as processes, and one allocation of a real QEMU VM booting the
 * OCI image built from the Debian sshd root (cached in .bb/cache/debian),
 * its Go guest's control service on port 7390, with `payload` delivered.
 * `bb(args)` runs a laptop-side `bb` to its end. Ready once a first
 * `bb exec … -- true` succeeded (the STUN mapping and the agent's
 * control_config are in place). Needs root, QEMU, squashfs-tools,
 * mmdebstrap (first run), nft.
 */
import { createHash, randomBytes, randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { SchedulerClient } from "../../src/client/index.ts";
import { compileGuest } from "../../src/image/bbBinary.ts";
import { ensureDebianRootfsTar, SSHD_RECIPE } from "../../src/image/debianRootfs.ts";
import { createPrivateKeyFile } from "../../src/image/keyFile.ts";
import { ensureDevManifest, tokenDigest } from "../../src/scheduler/manifest.ts";
import { agentPaths } from "../../src/agent/config.ts";
import { detectControllers } from "../../src/agent/isolation/cgroups/hierarchy.ts";
import { placementCgroupOf, removePlacementCgroup } from "../../src/agent/isolation/cgroups/placementCgroup.ts";
import { DEFAULT_CGROUP_POLICY } from "../../src/agent/isolation/cgroups/policy.ts";
import type { WellKnown } from "../../src/protocol/api.ts";
import { REQUEST_BYTES_METRIC, RESPONSE_BYTES_METRIC } from "../../src/scheduler/httpBytes.ts";
import { cgroupScope, type CgroupScope } from "./cgroupScope.ts";
import { writeSshdOciLayout } from "./debianOci.ts";
import { must, Netns, sh } from "./netns.ts";
import { LineChild } from "./lineChild.ts";
import {
  cleanUpPlacements,
  freePort,
  vmTestSkipReason,
  runHostId,
  runRole,
  startRole,
  stopRole,
  tail,
  waitUntil,
  type Role,
} from "./processes.ts";

/** Why a world cannot run here, or null. */
export { vmTestSkipReason } from "./processes.ts";

/** Why this world cannot run here (a VM, squashfs-tools, mmdebstrap for the first build, nft), or null. */
export function execWorldSkipReason(): string | null {
  const missing = ["mksquashfs", "mmdebstrap", "nft"].find((b) => !Bun.which(b));
  return vmTestSkipReason() ?? (missing ? `${missing} missing` : null);
}

/** What startExecWorld needs. */
export interface ExecWorldOptions {
  /** A short name for the work directory. */
  name: string;
  /** The host's placement slots (`bb agent join --max-placements`; default 1). */
  maxPlacements?: number;
  /** The payload (a shell script) delivered to the VM. */
  payload: string;
  /** Progress lines. */
  log: (line: string) => void;
  /** The `box` class may be suspended (issue 21: its RAM in a file on the host's disk). */
  suspendable?: boolean;
  /** The `box` class's memory, MiB (default 512). */
  memoryMiB?: number;
  /** The `box` class's CPU, millicores (default 1000). */
  cpuMillis?: number;
  /** More classes of the same image: name → fields over `box`'s (say `{ template: true }`). */
  moreClasses?: Record<string, Record<string, unknown>>;
}

/** A running world; `stop()` tears every part down. */
export interface ExecWorld {
  work: string;
  laptop: Netns;
  allocationId: string;
  controller: SchedulerClient;
  operator: SchedulerClient;
  ownerToken: string;
  /** The operator's token (`bb host list`). */
  operatorToken: string;
  otherToken: string;
  agentLog: string;
  timings: string[];
  /** The environment of a laptop-side `bb` with `token`. */
  bbEnv(token: string): Record<string, string>;
  /** Runs `bb ARGS` in the laptop namespace to its end; stdin from `input` (or nothing), stdout to a file when given. */
  bb(
    args: string[],
    opts?: { input?: Uint8Array; token?: string; stdout?: string },
  ): Promise<{ code: number; out: Buffer; err: string }>;
  /** The scheduler's request and response body bytes so far (its front door's counters). */
  schedulerBodyBytes(): Promise<number>;
  stop(showLogs?: boolean): Promise<void>;
}

const BUN = resolve("node_modules/.bin/bun");
const BB = resolve("bin/bb.ts");
/** The world's host ID (runHostId: another run's leftovers on this machine are not quarantined as this host's). */
const HOST = runHostId("exec");

/** Builds the world and starts one allocation; throws (after tearing down what it started) when a part fails. */
export async function startExecWorld(o: ExecWorldOptions): Promise<ExecWorld> {
  const id = randomBytes(3).toString("hex");
  const R = 16 + (Number.parseInt(id.slice(0, 2), 16) % 200);
  const ROOT_ADDR = `198.19.${R}.1`;
  const LAPTOP_NAT_PUBLIC = `198.19.${R}.10`;
  const HOST_NAT_PUBLIC = `198.19.${R}.20`;
  const HOST_ADDR = "10.89.0.2";
  const ROOT_VETH = `bbexr${id}`;
  const OTHER_TOKEN = `bbt_other_${randomBytes(12).toString("hex")}`;
  let work = "";
  let port = 0;
  let endpointPort = 0;
  let scheduler: Role | undefined;
  let agent: Role | undefined;
  let laptop!: Netns;
  let lnat: Netns | undefined;
  let hostNs!: Netns;
  let hnat: Netns | undefined;
  let wan: Netns | undefined;
  let stun: LineChild | undefined;
  let stunPort = 0;
  let controller!: SchedulerClient;
  let operator!: SchedulerClient;
  let ownerToken = "";
  let operatorToken = "";
  let connectionKeys = "";
  let allocationId = "";
  let cgroups: CgroupScope | undefined;
  const timings: string[] = [];
  const agentDir = () => join(work, "agent");

  function nft(n: Netns, text: string): void {
    const r = Bun.spawnSync(n.exec(["nft", "-f", "-"]), { stdin: new TextEncoder().encode(text), stderr: "pipe" });
    if (r.exitCode !== 0) throw new Error(`nft in ${n.name}: ${r.stderr}`);
  }

  /** Links namespace `a`'s `ifA` to `b`'s `ifB` by a veth pair, both up. */
  function veth(a: Netns, ifA: string, b: Netns, ifB: string): void {
    a.ip("link", "add", ifA, "type", "veth", "peer", "name", ifB, "netns", b.name);
    a.ip("link", "set", ifA, "up");
    b.ip("link", "set", ifB, "up");
  }

  /** private-ssh's topology without the relay: a bridge in `wan` joining the root namespace and both NATs' public sides. */
  function buildTopology(): void {
    wan = new Netns(`bbexw${id}`);
    lnat = new Netns(`bbexn${id}`);
    hnat = new Netns(`bbexm${id}`);
    laptop = new Netns(`bbexl${id}`);
    hostNs = new Netns(`bbexh${id}`);
    wan.ip("link", "add", "br0", "type", "bridge");
    wan.ip("link", "set", "br0", "up");
    must(["ip", "link", "add", ROOT_VETH, "type", "veth", "peer", "name", "wr", "netns", wan.name]);
    must(["ip", "addr", "add", `${ROOT_ADDR}/24`, "dev", ROOT_VETH]);
    must(["ip", "link", "set", ROOT_VETH, "up"]);
    wan.ip("link", "set", "wr", "master", "br0");
    wan.ip("link", "set", "wr", "up");
    for (const [n, addr, port] of [
      [lnat, LAPTOP_NAT_PUBLIC, "wl"],
      [hnat, HOST_NAT_PUBLIC, "wh"],
    ] as const) {
      veth(wan, port, n, "pub");
      wan.ip("link", "set", port, "master", "br0");
      n.ip("addr", "add", `${addr}/24`, "dev", "pub");
    }
    for (const [inner, nat, net] of [
      [laptop, lnat, "10.88.0"],
      [hostNs, hnat, "10.89.0"],
    ] as const) {
      veth(inner, "eth0", nat, "lan");
      inner.ip("link", "set", "lo", "up");
      inner.ip("addr", "add", `${net}.2/24`, "dev", "eth0");
      inner.ip("route", "add", "default", "via", `${net}.1`);
      nat.ip("addr", "add", `${net}.1/24`, "dev", "lan");
      must(nat.exec(["sysctl", "-qw", "net.ipv4.ip_forward=1"]));
    }
    // The laptop's NAT is symmetric: a random public port per destination (address- and port-dependent mapping).
    nft(
      lnat,
      `table ip nat {\n chain post { type nat hook postrouting priority srcnat; policy accept; oifname "pub" masquerade random; }\n}\n`,
    );
    // The host's NAT maps the endpoint's port to the same public port for every destination and lets anyone reach it
    // (endpoint-independent mapping and filtering); everything else of the host (HTTP to the scheduler, TLS to the relay) is masqueraded.
    nft(
      hnat,
      [
        "table ip nat {",
        ` chain post { type nat hook postrouting priority srcnat; policy accept; oifname "pub" ip saddr ${HOST_ADDR} udp sport ${endpointPort} snat to ${HOST_NAT_PUBLIC}:${endpointPort}; oifname "pub" masquerade; }`,
        ` chain pre { type nat hook prerouting priority dstnat; policy accept; iifname "pub" udp dport ${endpointPort} dnat to ${HOST_ADDR}:${endpointPort}; }`,
        "}",
      ].join("\n") + "\n",
    );
  }

  const world: ExecWorld = {
    get work() {
      return work;
    },
    get laptop() {
      return laptop;
    },
    get allocationId() {
      return allocationId;
    },
    get controller() {
      return controller;
    },
    get operator() {
      return operator;
    },
    get ownerToken() {
      return ownerToken;
    },
    get operatorToken() {
      return operatorToken;
    },
    otherToken: OTHER_TOKEN,
    get agentLog() {
      return agent?.log ?? "";
    },
    timings,
    bbEnv: (token) => ({
      ...(process.env as Record<string, string>),
      NO_COLOR: "1",
      HOME: work,
      BB_SCHEDULER_URL: `http://${ROOT_ADDR}:${port}`,
      BB_TOKEN: token,
      BB_CONNECTION_KEYS: connectionKeys,
    }),
    async bb(args, opts = {}) {
      const p = Bun.spawn(laptop.exec([BUN, BB, ...args]), {
        stdin: opts.input ?? "ignore",
        stdout: opts.stdout ? Bun.file(opts.stdout) : "pipe",
        stderr: "pipe",
        env: world.bbEnv(opts.token ?? ownerToken),
      });
      const [out, err, code] = await Promise.all([
        opts.stdout ? Promise.resolve(new ArrayBuffer(0)) : new Response(p.stdout as ReadableStream).arrayBuffer(),
        new Response(p.stderr).text(),
        p.exited,
      ]);
      return { code, out: Buffer.from(out), err };
    },
    async schedulerBodyBytes() {
      const text = await operator.metrics();
      let sum = 0;
      for (const name of [REQUEST_BYTES_METRIC, RESPONSE_BYTES_METRIC]) {
        let found = false;
        for (const x of text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\d+)$`, "gm"))) {
          sum += Number(x[1]);
          found = true;
        }
        if (!found) throw new Error(`the scheduler's metrics have no ${name}`);
      }
      return sum;
    },
    async stop(showLogs = false) {
      if (agent) await stopRole(agent);
      if (scheduler) await stopRole(scheduler);
      await stun?.stop();
      for (const n of [laptop, lnat, hostNs, hnat, wan]) n?.delete();
      if (sh(["ip", "link", "show", "dev", ROOT_VETH]).code === 0) sh(["ip", "link", "del", ROOT_VETH]);
      if (!work) return;
      const allocations = join(agentDir(), "allocations");
      await cleanUpPlacements(allocations);
      if (cgroups) {
        const controllers = detectControllers();
        for (const n of existsSync(allocations) ? readdirSync(allocations) : [])
          if (/^bb-[A-Za-z0-9_-]{1,60}$/.test(n))
            removePlacementCgroup(
              placementCgroupOf(n, { ...DEFAULT_CGROUP_POLICY, parent: cgroups.parent }, controllers),
            );
        cgroups.remove();
      }
      if (showLogs)
        for (const f of readdirSync(work).filter((f) => f.endsWith(".log")))
          console.log(`--- ${f}\n${tail(join(work, f), 4000)}`);
      rmSync(work, { recursive: true, force: true });
    },
  };
  try {
    work = mkdtempSync(join(tmpdir(), `bb-${o.name}-`));
    const cache = resolve(".bb/cache");
    let t = performance.now();
    const guest = await compileGuest(resolve(".bb/test-build/beachball-guest"));
    timings.push(`guest binary ${statSync(guest).size} bytes`);
    const rootfsTar = await ensureDebianRootfsTar(cache, SSHD_RECIPE, (m) => o.log(m));
    const keyFile = join(work, "image.key");
    const key = createPrivateKeyFile(keyFile);
    writeFileSync(`${keyFile}.pub`, `${key.publicKey}\n`);
    const layout = await writeSshdOciLayout(join(work, "layout"), rootfsTar);
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
      "1",
      "--json",
    ]);
    const built = JSON.parse(out.trim().split("\n").pop()!) as { digest: string };
    timings.push(`image built in ${Math.round(performance.now() - t)} ms`);

    endpointPort = 20_000 + (Number.parseInt(id, 16) % 20_000);
    buildTopology();
    stun = new LineChild([BUN, resolve("test/support/stunResponder.ts"), ROOT_ADDR, "0"], join(work, "stun.log"));
    stunPort = Number((await stun.waitFor((e) => e.ev === "ready", 15_000, "the STUN responder's start")).port);

    const dev = ensureDevManifest(join(work, "manifest"), built.digest);
    const m = JSON.parse(readFileSync(dev.manifestPath, "utf8"));
    m.workloadClasses = {
      box: {
        cpuMillis: o.cpuMillis ?? 1000,
        memoryMiB: o.memoryMiB ?? 512,
        ephemeralDiskMiB: 2048,
        imageDigest: built.digest,
        maxTtlSeconds: 3600,
        ...(o.suspendable ? { suspendable: true } : {}),
      },
    };
    for (const [name, fields] of Object.entries(o.moreClasses ?? {}))
      m.workloadClasses[name] = { ...m.workloadClasses.box, suspendable: false, ...fields };
    m.principals.push({ id: "controller:other", role: "controller", tokenSha256: tokenDigest(OTHER_TOKEN) });
    writeFileSync(join(work, "manifest.json"), JSON.stringify(m));
    const tokens = JSON.parse(readFileSync(dev.clientConfigPath, "utf8")) as { token: string; operatorToken: string };
    ownerToken = tokens.token;
    operatorToken = tokens.operatorToken;
    port = await freePort();
    scheduler = startRole(
      ["scheduler", "serve", "--data-dir", join(work, "scheduler"), "--manifest", join(work, "manifest.json")].concat([
        "--listen",
        `${ROOT_ADDR}:${port}`,
      ]),
      join(work, "scheduler.log"),
    );
    const base = `http://${ROOT_ADDR}:${port}`;
    await waitUntil("the scheduler's start", () => fetch(`${base}/healthz`).then((r) => r.ok), 20_000, [scheduler.log]);
    controller = new SchedulerClient(base, tokens.token);
    operator = new SchedulerClient(base, tokens.operatorToken);
    const wk = (await (await fetch(`${base}/v1/.well-known/beachball`)).json()) as WellKnown;
    connectionKeys = Object.entries(wk.connectionVerificationKeys ?? {})
      .map(([k, v]) => `${k}=${v}`)
      .join(",");

    const enroll = await operator.enrollmentToken(HOST);
    await runRole([
      "agent",
      "join",
      "--scheduler",
      base,
      "--token",
      enroll.token,
      "--data-dir",
      agentDir(),
      "--image-dir",
      join(work, "oci-image"),
      "--trusted-image-key",
      `${keyFile}.pub`,
      "--max-placements",
      String(o.maxPlacements ?? 1),
    ]);
    const cfgPath = agentPaths(agentDir()).config;
    const cfg = JSON.parse(readFileSync(cfgPath, "utf8"));
    cfg.connections.listenAddress = HOST_ADDR;
    cfg.connections.listenPort = endpointPort;
    cfg.connections.stunServers = [`${ROOT_ADDR}:${stunPort}`];
    cgroups = cgroupScope(`bbexec-${id}`);
    cfg.cgroupParent = cgroups.parent;
    writeFileSync(cfgPath, JSON.stringify(cfg, null, 2));
    agent = startRole(["agent", "run", "--data-dir", agentDir()], join(work, "agent.log"), {}, hostNs.exec([]));
    await waitUntil(
      "a healthy host",
      async () => (await operator.hosts()).some((x) => x.hostId === HOST && x.health === "healthy"),
      30_000,
      [agent.log],
    );

    t = performance.now();
    const { view } = await controller.create({ clientRequestId: `exec-${randomUUID()}`, workloadClass: "box" });
    allocationId = view.allocationId;
    await controller
      .deliverWhenReady(allocationId, new TextEncoder().encode(o.payload), `dlv-${randomUUID()}`, 300_000)
      .catch((e: Error) => {
        throw new Error(`${e.message}\nagent:\n${tail(world.agentLog)}`);
      });
    timings.push(`allocation ready in ${Math.round(performance.now() - t)} ms`);
    // The first exec also waits out the host's STUN mapping (the direct path needs it) and the control_config.
    await waitUntil(
      "a first bb exec",
      async () => (await world.bb(["exec", allocationId, "--", "true"])).code === 0 || (await Bun.sleep(1000), false),
      120_000,
      [agent.log],
    );
  } catch (e) {
    await world.stop(true);
    throw e;
  }
  return world;
}
