/**
 * Private networking end to end with every real part (issue 11, "Done
 * when"): a scheduler (`bb scheduler serve`, a development manifest with
 * private networking and a second tenant) and an agent (`bb agent run`,
 * its host endpoint on) as processes, a real QEMU VM (TCG here) booting an
 * OCI image built with `bb image build` from a Debian root with
 * openssh-server (mmdebstrap, cached in .bb/cache/debian), whose payload
 * starts Debian's `sshd -D -e` with a key pair this test generated; on the
 * "laptop", Debian's `ssh` and `scp` through `bb proxy` (a separate
 * process, no root needed by it).
 *
 *   laptop ns 10.88.0.2 ── lnat ns: symmetric NAT ─────────┐ (masquerade random) 198.19.R.10
 *                                                          wan ns: bridge 198.19.R.0/24
 *   host ns 10.89.0.2 ──── hnat ns: endpoint-independent ──┤ 198.19.R.20 (the endpoint's UDP port
 *     `bb agent run` (ip netns exec):  NAT                 │  mapped 1:1 both ways; the rest masqueraded)
 *     host endpoint UDP socket, its                        │
 *     TUN (moved into the placement),  root ns 198.19.R.1 ─┘ the public side: `bb scheduler serve`,
 *     the VM's placement namespace                           `bb relay run` (TLS), the STUN responder
 *     (created by the agent)                                 (test/support/stunResponder.ts)
 *
 * The agent runs inside the host namespace (`ip netns exec`, the way an
 * operator would start it there): its placement namespaces, veth/TAP,
 * nftables tables, cgroups (it mounts the hierarchies again in its own
 * mount namespace, src/agent/isolation/cgroups/mountRestore.ts), its host
 * endpoint's socket on 10.89.0.2 and `connections.stunServers` naming the
 * STUN responder. Which NAT goes where follows what each side announces
 * (as in test/integration/proxy-netns.test.ts): the host publishes its
 * local and its STUN-mapped candidate, the proxy only its local ones
 * (this test's manifest names no STUN servers, and behind the laptop's
 * symmetric NAT a STUN mapping would not be the port the host sees
 * anyway). So the first packet of a direct path must go from the laptop to
 * the host's mapped address, and the host must answer wherever that
 * packet came from (it learns the laptop's mapping by roaming). That
 * works when the host's NAT keeps one public port for the endpoint's
 * socket whoever it talks to and lets anyone reach it (endpoint-
 * independent mapping and filtering), whatever the laptop's NAT does; the
 * laptop's is symmetric (a new random port per destination), the hardest
 * case for the client. The other way round (host symmetric) could not
 * work: the STUN-mapped port would not be the one the host uses towards
 * the laptop, and the laptop publishes no address the host could reach.
 * The relay (`bb relay run`, a certificate for 198.19.R.1 made by openssl,
 * trusting the scheduler's connection keys) is the one relay of the
 * manifest's relay map, so every grant's signed map names it; the proxy
 * gets the certificate with BB_RELAY_CA, the agent with
 * `connections.relayCaPath`. The agent runs with the default VMM memory
 * overhead (QEMU's TCG translation cache is bounded by the driver).
 * The agent's placement cgroups live under a parent of this run's own
 * (test/support/cgroupScope.ts).
 *
 * Checked: a grant carries the host's candidates, its private socket
 * address and the STUN-mapped one (the host NAT's public address, the
 * endpoint's port; the STUN responder saw that source); the guest has
 * exactly its allocation's address as a /128 on eth0 with `default via
 * fe80::1`, not tentative; `ssh` runs a command in the VM (host key
 * pinned: it is this VM's sshd) and the proxy says `path: direct via
 * <host NAT public>:<port>`; the agent says it mounted the cgroup
 * hierarchies again for itself; the VM's own connection to the client gets no
 * answer (the placement's table drops it); `scp` of 64 MiB is byte-exact
 * (SHA-256 on both sides); a proxy with another tenant's token is refused
 * (NOT_FOUND, exit 1) and nothing changed; after release the running
 * proxy ends with INVALID_STATE (exit 1) before its grant's expiry, new
 * connections fail, a new proxy is refused (INVALID_STATE, exit 1) and the
 * placement's VM, namespace and directory are gone. Relay: with UDP
 * between the laptop and the host NAT's endpoint port dropped (nftables
 * in the laptop NAT's forward path; the relay's TCP passes), `ssh` through
 * a new `bb proxy` runs a command in the VM, the proxy says `path: relay
 * relay-ssh` and never `path: direct`, and the relay's metrics count
 * forwarded frames; one `scp` of 24 MiB (rate-capped with `scp -l` so that
 * it outlasts the move) has its first MiB carried by the relay (its byte
 * counter), then the drop is lifted: the proxy prints `path: direct via
 * <host NAT public>:<port>` while that scp still runs (the laptop NAT
 * gives the new flow a new random port; the host follows it by roaming),
 * the relay carries less than a quarter of the file's size after that,
 * and the scp (one ssh connection, never reopened) exits 0 with the file
 * byte-exact (SHA-256) in the VM.
 * About 80 s with the rootfs cached (about 17 s of it the relay part), plus
 * about 2 min for mmdebstrap the first time (2-core TCG machine).
 * Needs root, QEMU, squashfs-tools, mmdebstrap, ssh/scp/ssh-keygen, nft, openssl.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import {
  closeSync,
  existsSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createHash, randomBytes, randomUUID } from "node:crypto";
import { SchedulerClient } from "../../src/client/index.ts";
import { compileGuest } from "../../src/image/bbBinary.ts";
import { ensureDebianRootfsTar, SSHD_RECIPE } from "../../src/image/debianRootfs.ts";
import { createPrivateKeyFile } from "../../src/image/keyFile.ts";
import { ensureDevManifest, tokenDigest } from "../../src/scheduler/manifest.ts";
import { agentPaths } from "../../src/agent/config.ts";
import { placementDirName } from "../../src/agent/resourceNames.ts";
import { detectControllers } from "../../src/agent/isolation/cgroups/hierarchy.ts";
import { placementCgroupOf, removePlacementCgroup } from "../../src/agent/isolation/cgroups/placementCgroup.ts";
import { DEFAULT_CGROUP_POLICY } from "../../src/agent/isolation/cgroups/policy.ts";
import type { WellKnown } from "../../src/protocol/api.ts";
import { cgroupScope, type CgroupScope } from "../support/cgroupScope.ts";
import { makeTestCert } from "../support/relay.ts";
import { sshdPayload, writeSshdOciLayout } from "../support/debianOci.ts";
import { must, Netns, sh } from "../support/netns.ts";
import { LineChild } from "../support/lineChild.ts";
import { keyPairFromPrivate, systemRandom } from "../../src/wireguard/index.ts";
import type { Candidate } from "../../src/protocol/connection.ts";
import {
  cleanUpPlacements,
  freePort,
  settledLeftoversOf,
  runRole,
  startRole,
  stopRole,
  tail,
  vmTestSkipReason,
  waitUntil,
  type Role,
} from "../support/processes.ts";

const skip =
  vmTestSkipReason() ??
  (!Bun.which("mksquashfs")
    ? "mksquashfs missing"
    : !Bun.which("mmdebstrap")
      ? "mmdebstrap missing"
      : !Bun.which("ssh") || !Bun.which("scp") || !Bun.which("ssh-keygen")
        ? "openssh-client missing (apt-get install -y openssh-client)"
        : !Bun.which("nft")
          ? "nft missing"
          : null);
if (skip) console.log(`SKIP test/e2e/private-ssh.test.ts: ${skip}`);
const d = skip ? describe.skip : describe;

const BUN = resolve("node_modules/.bin/bun");
const BB = resolve("bin/bb.ts");
const id = randomBytes(3).toString("hex");
const R = 16 + (Number.parseInt(id.slice(0, 2), 16) % 200);
/** The public side (root namespace): scheduler, relay and STUN responder; the two NATs' public addresses on the same bridge. */
const ROOT_ADDR = `198.19.${R}.1`;
const LAPTOP_NAT_PUBLIC = `198.19.${R}.10`;
const HOST_NAT_PUBLIC = `198.19.${R}.20`;
/** The host's private address (its namespace's eth0), where the host endpoint's UDP socket binds. */
const HOST_ADDR = "10.89.0.2";
const ROOT_VETH = `bbsshr${id}`;
/** The other tenant's bearer token (a second controller in the manifest). */
const OTHER_TOKEN = `bbt_other_${randomBytes(12).toString("hex")}`;
const BLOB_BYTES = 64 * 1024 * 1024;
/** The relay's ID in the manifest's relay map. */
const RELAY_ID = "relay-ssh";
/** The scp that moves from the relay to the direct path: its size, and its rate cap (scp -l, Kbit/s) so that it is still running when the path moves. */
const MOVE_BYTES = 24 * 1024 * 1024;
const MOVE_RATE_KBITS = 16_000;
/** The proxy port of the relayed session (its own grant, started while the direct path is blocked). */
const RELAYED_PORT = 2225;

let work: string;
let port: number;
let endpointPort: number;
let scheduler: Role;
let agent: Role;
let laptop: Netns;
let lnat: Netns;
let hostNs: Netns;
let hnat: Netns;
let wan: Netns;
let stun: LineChild;
let stunPort: number;
/** The host endpoint's candidates as a grant carried them (read before the first proxy starts). */
let hostCandidates: Candidate[];
let controller: SchedulerClient;
let operator: SchedulerClient;
let ownerToken: string;
let connectionKeys: string;
let allocationId: string;
let guestAddress: string;
let cgroups: CgroupScope | undefined;
let proxy: { proc: ReturnType<typeof Bun.spawn>; log: string; port: number };
let grantExpiresAtMs: number;
let relay: Role;
let relayPort: number;
let relayHealthPort: number;
let relayCaPath: string;
const agentDir = () => join(work, "agent");
const sshKey = () => join(work, "id_ed25519");
const knownHosts = () => join(work, "known_hosts");
const timings: string[] = [];

/** Starts `bb proxy` in the laptop namespace with `token`; output to its own log. */
function startProxy(
  localPort: number,
  token: string,
  name: string,
): { proc: ReturnType<typeof Bun.spawn>; log: string; port: number } {
  const log = join(work, `proxy-${name}.log`);
  const fd = openSync(log, "a");
  const proc = Bun.spawn(
    laptop.exec([BUN, BB, "proxy", allocationId, "--local-port", String(localPort), "--remote-port", "22"]),
    {
      stdout: fd,
      stderr: fd,
      stdin: "ignore",
      env: {
        ...process.env,
        NO_COLOR: "1",
        HOME: work,
        BB_SCHEDULER_URL: `http://${ROOT_ADDR}:${port}`,
        BB_TOKEN: token,
        BB_CONNECTION_KEYS: connectionKeys,
        BB_RELAY_CA: relayCaPath,
      },
    },
  );
  closeSync(fd);
  return { proc, log, port: localPort };
}

async function waitLog(
  p: { proc: ReturnType<typeof Bun.spawn>; log: string },
  re: RegExp,
  ms = 30_000,
): Promise<RegExpExecArray> {
  const deadline = Date.now() + ms;
  for (;;) {
    const m = re.exec(tail(p.log, 20_000));
    if (m) return m;
    if (p.proc.exitCode !== null) throw new Error(`bb proxy exited ${p.proc.exitCode}: ${tail(p.log)}`);
    if (Date.now() > deadline) throw new Error(`bb proxy: no ${re} within ${ms} ms: ${tail(p.log)}`);
    await Bun.sleep(100);
  }
}

/** Runs Debian's `ssh` (or `scp`) in the laptop namespace with the test's key, the VM's host key pinned. */
async function laptopRun(
  tool: "ssh" | "scp",
  args: string[],
  localPort = proxy.port,
): Promise<{ code: number; out: string; err: string }> {
  const p = Bun.spawn(laptopCommand(tool, args, localPort), { stdout: "pipe", stderr: "pipe", stdin: "ignore" });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { code, out, err };
}

/** The argv of `ssh` (or `scp`) in the laptop namespace to 127.0.0.1:<localPort> with the test's key and the VM's host key pinned. */
function laptopCommand(tool: "ssh" | "scp", args: string[], localPort: number): string[] {
  const portFlag = tool === "ssh" ? "-p" : "-P";
  return laptop.exec([
    tool,
    "-F",
    "/dev/null",
    portFlag,
    String(localPort),
    "-i",
    sshKey(),
    "-o",
    "IdentitiesOnly=yes",
    "-o",
    "BatchMode=yes",
    "-o",
    `UserKnownHostsFile=${knownHosts()}`,
    "-o",
    "StrictHostKeyChecking=yes",
    "-o",
    "ConnectTimeout=30",
    "-o",
    "LogLevel=ERROR",
    ...args,
  ]);
}

/** Loads nftables rule text in namespace `n`. */
function nft(n: Netns, text: string): void {
  const r = Bun.spawnSync(n.exec(["nft", "-f", "-"]), { stdin: new TextEncoder().encode(text), stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`nft in ${n.name}: ${r.stderr}`);
}

/** Drops UDP between the laptop side and the host NAT's public endpoint port in the laptop NAT's forward path (the relay's TCP is untouched), or lifts the drop. */
function blockDirect(on: boolean): void {
  if (!on) return void must(lnat.exec(["nft", "delete", "table", "ip", "bb_block"]));
  nft(
    lnat,
    `table ip bb_block {\n chain drop_udp { type filter hook forward priority -10; policy accept; ip daddr ${HOST_NAT_PUBLIC} udp dport ${endpointPort} drop; ip saddr ${HOST_NAT_PUBLIC} udp sport ${endpointPort} drop; }\n}\n`,
  );
}

/** Links namespace `a`'s `ifA` to `b`'s `ifB` by a veth pair, both up. */
function veth(a: Netns, ifA: string, b: Netns, ifB: string): void {
  a.ip("link", "add", ifA, "type", "veth", "peer", "name", ifB, "netns", b.name);
  a.ip("link", "set", ifA, "up");
  b.ip("link", "set", ifB, "up");
}

/**
 * The topology of the header: a bridge in `wan` joining the root namespace (ROOT_ADDR) and the two NATs' public sides;
 * the laptop behind a symmetric NAT, the host behind an endpoint-independent one (its endpoint port mapped 1:1).
 */
function buildTopology(): void {
  wan = new Netns(`bbsshw${id}`);
  lnat = new Netns(`bbsshn${id}`);
  hnat = new Netns(`bbsshm${id}`);
  laptop = new Netns(`bbsshl${id}`);
  hostNs = new Netns(`bbsshh${id}`);
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

/** The relay's counter `name` from its metrics (plain HTTP on loopback). */
async function relayCounter(name: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${relayHealthPort}/metrics`)).text();
  const m = new RegExp(`^bb_relay_${name} (\\d+)$`, "m").exec(text);
  if (!m) throw new Error(`relay metrics have no bb_relay_${name}: ${text}`);
  return Number(m[1]);
}

function waitUp(): Promise<boolean> {
  return waitUntil(
    "the scheduler's start",
    () => fetch(`http://${ROOT_ADDR}:${port}/healthz`).then((r) => r.ok),
    20_000,
    [scheduler.log],
  );
}

async function waitHealthy(): Promise<void> {
  await waitUntil(
    "a healthy host",
    async () => (await operator.hosts()).some((x) => x.hostId === "ssh-host" && x.health === "healthy"),
    30_000,
    [agent.log],
  );
}

d("ssh and scp into a private VM through bb proxy (real QEMU, real sshd)", () => {
  beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), "bb-private-ssh-"));
    const cache = resolve(".bb/cache");
    let t = performance.now();
    const guest = await compileGuest(resolve(".bb/test-build/beachball-guest"));
    const rootfsTar = await ensureDebianRootfsTar(cache, SSHD_RECIPE, (m) => console.log(`private-ssh.test: ${m}`));
    timings.push(`guest binary and Debian sshd rootfs ready in ${Math.round(performance.now() - t)} ms`);
    t = performance.now();
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
    timings.push(`bb image build in ${Math.round(performance.now() - t)} ms`);

    // SSH keys: the client's, and the VM's host key (pinned in known_hosts).
    must(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "private-ssh-test", "-f", sshKey()]);
    must(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "vm-host-key", "-f", join(work, "host_key")]);

    // The laptop and the host, each behind its NAT; the public side is the root namespace (see buildTopology).
    endpointPort = 20_000 + (Number.parseInt(id, 16) % 20_000);
    buildTopology();
    // The STUN responder on the public side: it tells the host endpoint its address as the host NAT maps it.
    stun = new LineChild([BUN, resolve("test/support/stunResponder.ts"), ROOT_ADDR, "0"], join(work, "stun.log"));
    stunPort = Number((await stun.waitFor((e) => e.ev === "ready", 15_000, "the STUN responder's start")).port);

    // The scheduler: the development manifest (private networking) with the sshd class and a second tenant.
    const dev = ensureDevManifest(join(work, "manifest"), built.digest);
    const m = JSON.parse(readFileSync(dev.manifestPath, "utf8"));
    m.workloadClasses = {
      "ssh-box": {
        cpuMillis: 1000,
        memoryMiB: 512,
        ephemeralDiskMiB: 1024,
        imageDigest: built.digest,
        maxTtlSeconds: 3600,
      },
    };
    m.principals.push({ id: "controller:other", role: "controller", tokenSha256: tokenDigest(OTHER_TOKEN) });

    // The relay: `bb relay run` in the root namespace on the laptop link's root end (TLS, a certificate for that
    // address made by openssl), trusting the scheduler's connection keys; the manifest's relay map names it.
    const cert = makeTestCert(work, `IP:${ROOT_ADDR}`);
    relayCaPath = cert.certPath;
    relayPort = await freePort();
    relayHealthPort = await freePort();
    const relayConfig = join(work, "relay.json");
    writeFileSync(
      relayConfig,
      JSON.stringify({
        relayId: RELAY_ID,
        listen: [`${ROOT_ADDR}:${relayPort}`],
        healthListen: `127.0.0.1:${relayHealthPort}`,
        tls: { certPath: cert.certPath, keyPath: cert.keyPath },
        trustedKeys: Object.entries(m.connections.verificationKeys as Record<string, string>).map(
          ([keyId, publicKey]) => ({ keyId, publicKey }),
        ),
        limitCaps: { maxBytes: 4 * 1024 ** 3, maxBytesPerSecond: 64 * 1024 ** 2, idleTimeoutMs: 120_000 },
      }),
    );
    m.connections.relays = [{ relayId: RELAY_ID, url: `wss://${ROOT_ADDR}:${relayPort}/v1/relay` }];
    relay = startRole(["relay", "run", "--config", relayConfig], join(work, "relay.log"));
    for (let i = 0; !new RegExp(`relay listening.*${RELAY_ID}`).test(tail(relay.log)); i++) {
      if (relay.proc.exitCode !== null || i > 300) throw new Error(`bb relay run did not come up: ${tail(relay.log)}`);
      await Bun.sleep(50);
    }
    writeFileSync(join(work, "manifest.json"), JSON.stringify(m));
    const tokens = JSON.parse(readFileSync(dev.clientConfigPath, "utf8")) as { token: string; operatorToken: string };
    ownerToken = tokens.token;
    port = await freePort();
    scheduler = startRole(
      [
        "scheduler",
        "serve",
        "--data-dir",
        join(work, "scheduler"),
        "--manifest",
        join(work, "manifest.json"),
        "--listen",
        `${ROOT_ADDR}:${port}`,
      ],
      join(work, "scheduler.log"),
    );
    await waitUp();
    const base = `http://${ROOT_ADDR}:${port}`;
    controller = new SchedulerClient(base, tokens.token);
    operator = new SchedulerClient(base, tokens.operatorToken);
    const wk = (await (await fetch(`${base}/v1/.well-known/beachball`)).json()) as WellKnown;
    connectionKeys = Object.entries(wk.connectionVerificationKeys ?? {})
      .map(([k, v]) => `${k}=${v}`)
      .join(",");
    expect(connectionKeys).not.toBe("");

    // The agent: in the host namespace (`ip netns exec`), its host endpoint bound to the host's private address on a port of
    // this run, asking the STUN responder for its public mapping.
    const enroll = await operator.enrollmentToken("ssh-host");
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
      "1",
    ]);
    const cfgPath = agentPaths(agentDir()).config;
    const cfg = JSON.parse(readFileSync(cfgPath, "utf8"));
    cfg.connections.listenAddress = HOST_ADDR;
    cfg.connections.listenPort = endpointPort;
    cfg.connections.stunServers = [`${ROOT_ADDR}:${stunPort}`];
    cfg.connections.relayCaPath = relayCaPath;
    // Placement cgroups under a parent of this run's own: cgroups other runs left in the shared default would make the host unschedulable.
    cgroups = cgroupScope(`bbssh-${id}`);
    cfg.cgroupParent = cgroups.parent;
    writeFileSync(cfgPath, JSON.stringify(cfg, null, 2));
    agent = startRole(["agent", "run", "--data-dir", agentDir()], join(work, "agent.log"), {}, hostNs.exec([]));
    await waitHealthy();

    // The VM: sshd with the test's keys.
    t = performance.now();
    const { view } = await controller.create({ clientRequestId: `ssh-${randomUUID()}`, workloadClass: "ssh-box" });
    allocationId = view.allocationId;
    const payload = sshdPayload(readFileSync(`${sshKey()}.pub`, "utf8"), readFileSync(join(work, "host_key"), "utf8"));
    await controller
      .deliverWhenReady(allocationId, new TextEncoder().encode(payload), `dlv-${randomUUID()}`, 300_000)
      .catch((e: Error) => {
        throw new Error(`${e.message}\nagent:\n${tail(agent.log)}`);
      });
    timings.push(`allocation ready and payload delivered in ${Math.round(performance.now() - t)} ms`);
    // sshd binds port 22 a moment after the payload starts (seconds under TCG; an ssh before that is reset): wait for its own
    // "Server listening" line in the job's output, as a user following `bb allocation logs` would.
    await waitUntil(
      "sshd listening in the VM",
      async () => /Server listening on \S+ port 22/.test((await controller.logs(allocationId, 0)).text),
      120_000,
      [agent.log],
    );
    timings.push(`sshd listening ${Math.round(performance.now() - t)} ms after create`);

    // The host publishes its STUN-mapped candidate: a grant (made and revoked here) carries it once the endpoint has asked.
    const probeKey = keyPairFromPrivate(systemRandom.fill(new Uint8Array(32)));
    hostCandidates = await waitUntil(
      "the host's STUN-mapped candidate in a grant",
      async () => {
        const g = await controller.createConnectionGrant(allocationId, {
          clientPublicKey: Buffer.from(probeKey.publicKey).toString("base64"),
          transport: "tcp",
          ports: [22],
          ttlSeconds: 30,
        });
        await controller.revokeConnectionGrant(allocationId, g.grant.payload.grantId);
        return g.hostCandidates.some((c) => c.kind === "stun") ? g.hostCandidates : (await Bun.sleep(1_000), null);
      },
      60_000,
      [agent.log],
    );

    // bb proxy on the laptop; the VM's host key pinned for 127.0.0.1:<its port>.
    proxy = startProxy(2222, ownerToken, "owner");
    const ready = await waitLog(proxy, /listening on 127\.0\.0\.1:2222 → \[([0-9a-f:]+)\]:22 .*expires (\S+)\)/);
    guestAddress = ready[1]!;
    grantExpiresAtMs = Date.parse(ready[2]!);
    const hostKey = readFileSync(join(work, "host_key.pub"), "utf8").trim().split(" ").slice(0, 2).join(" ");
    writeFileSync(knownHosts(), `[127.0.0.1]:2222 ${hostKey}\n[127.0.0.1]:${RELAYED_PORT} ${hostKey}\n`);
  }, 900_000);

  afterAll(async () => {
    if (proxy && proxy.proc.exitCode === null) {
      proxy.proc.kill("SIGTERM");
      await proxy.proc.exited;
    }
    if (agent) await stopRole(agent);
    if (scheduler) await stopRole(scheduler);
    if (relay) await stopRole(relay);
    await stun?.stop();
    for (const n of [laptop, lnat, hostNs, hnat, wan]) n?.delete();
    if (sh(["ip", "link", "show", "dev", ROOT_VETH]).code === 0) sh(["ip", "link", "del", ROOT_VETH]);
    if (!work) return;
    const allocations = join(agentDir(), "allocations");
    await cleanUpPlacements(allocations);
    if (cgroups) {
      // Placement cgroups under this run's parent (cleanUpPlacements removes those under the default one), then the parent.
      const controllers = detectControllers();
      for (const n of existsSync(allocations) ? readdirSync(allocations) : [])
        if (/^bb-[A-Za-z0-9_-]{1,60}$/.test(n))
          removePlacementCgroup(
            placementCgroupOf(n, { ...DEFAULT_CGROUP_POLICY, parent: cgroups.parent }, controllers),
          );
      cgroups.remove();
    }
    console.log(`private-ssh.test: ${timings.join("; ")}`);
    if (process.env.BB_TEST_SHOW_LOGS)
      for (const f of readdirSync(work).filter((f) => f.endsWith(".log")))
        console.log(`--- ${f}\n${tail(join(work, f), 4000)}`);
    rmSync(work, { recursive: true, force: true });
  }, 60_000);

  test("ssh runs a command in the VM: its address is the allocation's /128, its route default via fe80::1", async () => {
    const t = performance.now();
    const r = await laptopRun("ssh", [
      "root@127.0.0.1",
      "echo ssh-says-hi-$(hostname); ip -6 addr show dev eth0 scope global; ip -6 route show default; cd /proc/sys/net/ipv6/conf/eth0 && echo sysctls $(cat accept_ra autoconf accept_dad)",
    ]);
    timings.push(`first ssh command in ${Math.round(performance.now() - t)} ms`);
    if (r.code !== 0)
      throw new Error(`ssh exited ${r.code}: ${r.err}\nproxy:\n${tail(proxy.log)}\nagent:\n${tail(agent.log)}`);
    expect(r.out).toContain("ssh-says-hi-beachball");
    const inet6 = r.out.split("\n").filter((l) => l.includes("inet6"));
    expect(inet6).toHaveLength(1);
    expect(inet6[0]).toContain(`inet6 ${guestAddress}/128 scope global`);
    expect(inet6[0]).not.toContain("tentative");
    expect(r.out).toMatch(/^default via fe80::1 dev eth0/m);
    expect(r.out).toContain("sysctls 0 0 0");
    // The grant's allocation address lies in the deployment's network: the scheduler's /64 for this tenant.
    expect(guestAddress).toMatch(/^fd[0-9a-f]{2}:/);
    // Direct through the host NAT: the host published its private socket address and its STUN mapping (the STUN responder
    // saw the endpoint's socket from the host NAT's public address and the same port); the proxy pinned the mapped one.
    expect(hostCandidates).toContainEqual({ address: HOST_ADDR, port: endpointPort, kind: "local" });
    expect(hostCandidates).toContainEqual({ address: HOST_NAT_PUBLIC, port: endpointPort, kind: "stun" });
    expect(stun.events.some((e) => e.ev === "binding" && e.from === `${HOST_NAT_PUBLIC}:${endpointPort}`)).toBe(true);
    // The agent under `ip netns exec` found no cgroup hierarchy under the fresh /sys and mounted them again for itself (the VM got its cgroup).
    expect(readFileSync(agent.log, "utf8")).toMatch(
      /cgroup hierarchies were not mounted in this mount namespace .*mounted=\/sys\/fs\/cgroup/,
    );
    await waitLog(proxy, new RegExp(`path: direct via ${HOST_NAT_PUBLIC.replaceAll(".", "\\.")}:${endpointPort}`));
  }, 120_000);

  test("the VM cannot open a connection to the client: only replies of the granted flow pass", async () => {
    // sshd names the client's tunnel address; a new connection from the VM to it is dropped by the placement's table (no answer, not even a reset).
    const r = await laptopRun("ssh", [
      "root@127.0.0.1",
      'set -- $SSH_CLIENT; echo client $1; timeout 5 bash -c "exec 3<>/dev/tcp/$1/9"; echo outbound-exit $?',
    ]);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^client fd[0-9a-f]{2}:[0-9a-f:]+$/m);
    expect(r.out).toContain("outbound-exit 124");
  }, 60_000);

  test("scp of 64 MiB is byte-exact (SHA-256 on both sides)", async () => {
    const blob = join(work, "blob.bin");
    writeFileSync(blob, randomBytes(BLOB_BYTES));
    const local = createHash("sha256").update(readFileSync(blob)).digest("hex");
    const t = performance.now();
    const up = await laptopRun("scp", ["-q", blob, "root@127.0.0.1:/root/blob.bin"]);
    const ms = Math.round(performance.now() - t);
    timings.push(`scp 64 MiB in ${ms} ms (${(BLOB_BYTES / 1024 / 1024 / (ms / 1000)).toFixed(1)} MiB/s)`);
    if (up.code !== 0) throw new Error(`scp exited ${up.code}: ${up.err}\nproxy:\n${tail(proxy.log)}`);
    const r = await laptopRun("ssh", ["root@127.0.0.1", "sha256sum /root/blob.bin; stat -c %s /root/blob.bin"]);
    expect(r.code).toBe(0);
    expect(r.out.split("\n").slice(0, 2)).toEqual([`${local}  /root/blob.bin`, String(BLOB_BYTES)]);
  }, 300_000);

  test("relay: with UDP to the host endpoint dropped, ssh through a new bb proxy runs a command over bb relay run; the drop lifted during an scp, that same connection moves to direct and the file arrives byte-exact", async () => {
    const t0 = performance.now();
    blockDirect(true);
    let blocked = true;
    const relayed = startProxy(RELAYED_PORT, ownerToken, "relayed");
    const log = () => readFileSync(relayed.log, "utf8");
    try {
      await waitLog(relayed, new RegExp(`listening on 127\\.0\\.0\\.1:${RELAYED_PORT}`));
      const framesBefore = await relayCounter("frames_forwarded_total");
      const r = await laptopRun("ssh", ["root@127.0.0.1", "echo relayed-hi-$(hostname)"], RELAYED_PORT);
      if (r.code !== 0)
        throw new Error(
          `ssh over the relay exited ${r.code}: ${r.err}\nproxy:\n${tail(relayed.log)}\nrelay:\n${tail(relay.log)}`,
        );
      expect(r.out.trim()).toBe("relayed-hi-beachball");
      // The proxy says relay (the manifest's relay), never direct; the relay forwarded frames.
      await waitLog(relayed, new RegExp(`path: relay ${RELAY_ID}`));
      expect(log()).toContain(`relay ${RELAY_ID}: session open`);
      expect(log()).not.toContain("path: direct");
      expect(await relayCounter("frames_forwarded_total")).toBeGreaterThan(framesBefore);
      timings.push(`relayed ssh command ${Math.round(performance.now() - t0)} ms after the block`);

      // One scp (one ssh connection, rate-capped so that it outlasts the move): its first MiB over the relay, then the drop is lifted.
      const blob = join(work, "move.bin");
      writeFileSync(blob, randomBytes(MOVE_BYTES));
      const local = createHash("sha256").update(readFileSync(blob)).digest("hex");
      const t1 = performance.now();
      const bytesBefore = await relayCounter("bytes_forwarded_total");
      const scp = Bun.spawn(
        laptopCommand(
          "scp",
          ["-q", "-l", String(MOVE_RATE_KBITS), blob, "root@127.0.0.1:/root/move.bin"],
          RELAYED_PORT,
        ),
        { stdout: "pipe", stderr: "pipe", stdin: "ignore" },
      );
      const scpErr = new Response(scp.stderr).text();
      while ((await relayCounter("bytes_forwarded_total")) - bytesBefore < 1024 * 1024) {
        if (scp.exitCode !== null)
          throw new Error(`scp ended (${scp.exitCode}) before the relay carried 1 MiB of it: ${await scpErr}`);
        await Bun.sleep(100);
      }
      const atUnblock = log().length;
      expect(log()).not.toContain("path: direct");
      blockDirect(false);
      blocked = false;
      // The proxy's probes now reach the host endpoint through its NAT's mapping: it pins that address while that scp still runs.
      const direct = `path: direct via ${HOST_NAT_PUBLIC}:${endpointPort}`;
      let movedWhileRunning = false;
      while (scp.exitCode === null && !(movedWhileRunning = log().slice(atUnblock).includes(direct)))
        await Bun.sleep(100);
      const relayAtMove = (await relayCounter("bytes_forwarded_total")) - bytesBefore;
      const code = await scp.exited;
      const relayAfterMove = (await relayCounter("bytes_forwarded_total")) - bytesBefore - relayAtMove;
      const ms = Math.round(performance.now() - t1);
      timings.push(
        `relay→direct scp of ${MOVE_BYTES >> 20} MiB (capped at ${MOVE_RATE_KBITS} Kbit/s) in ${ms} ms, relay bytes ${relayAtMove} before the move and ${relayAfterMove} after`,
      );
      if (code !== 0) throw new Error(`scp exited ${code}: ${await scpErr}\nproxy:\n${tail(relayed.log)}`);
      expect(movedWhileRunning).toBe(true);
      expect(log().indexOf(direct)).toBeGreaterThan(log().search(new RegExp(`path: relay ${RELAY_ID}`)));
      expect(log()).not.toContain("inner connection");
      // The relay went quiet: after the move it carried less than a quarter of the file's size (both ends pinned the direct path).
      expect(relayAfterMove).toBeLessThan(MOVE_BYTES / 4);
      // Byte-exact on the VM (read over the now direct path).
      const sum = await laptopRun(
        "ssh",
        ["root@127.0.0.1", "sha256sum /root/move.bin; stat -c %s /root/move.bin; rm -f /root/move.bin"],
        RELAYED_PORT,
      );
      expect(sum.code).toBe(0);
      expect(sum.out.split("\n").slice(0, 2)).toEqual([`${local}  /root/move.bin`, String(MOVE_BYTES)]);
    } finally {
      if (blocked) blockDirect(false);
      relayed.proc.kill("SIGINT");
      await relayed.proc.exited;
    }
    expect(relayed.proc.exitCode).toBe(0);
    timings.push(`relay test ${Math.round(performance.now() - t0)} ms`);
  }, 120_000);

  test("a proxy with another tenant's token is refused (NOT_FOUND, exit 1) and nothing changed", async () => {
    const before = await controller.get(allocationId);
    const other = startProxy(2223, OTHER_TOKEN, "other");
    const code = await other.proc.exited;
    expect(code).toBe(1);
    expect(tail(other.log)).toContain("NOT_FOUND");
    expect(tail(other.log)).not.toContain("listening on");
    // Nothing bound on the laptop, the allocation is as it was, and the owner's session still works.
    const probe = sh(
      laptop.exec([
        "ssh",
        "-F",
        "/dev/null",
        "-p",
        "2223",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=5",
        "root@127.0.0.1",
        "true",
      ]),
    );
    expect(probe.code).not.toBe(0);
    expect(probe.err).toContain("Connection refused");
    const after = await controller.get(allocationId);
    expect([after.state, after.generation, after.placementId]).toEqual([
      before.state,
      before.generation,
      before.placementId,
    ]);
    const r = await laptopRun("ssh", ["root@127.0.0.1", "echo still-mine"]);
    expect([r.code, r.out.trim()]).toEqual([0, "still-mine"]);
  }, 120_000);

  test("after release the grant stops working within its bound: the proxy ends with INVALID_STATE (exit 1), new connections fail, a new proxy is refused", async () => {
    const v = await controller.get(allocationId);
    const dirName = placementDirName("ssh-host", allocationId, v.placementId!, v.generation);
    await controller.release(allocationId);
    const code = await Promise.race([
      proxy.proc.exited,
      Bun.sleep(Math.max(0, grantExpiresAtMs - Date.now())).then(() => "grant expired first" as const),
    ]);
    expect(code).toBe(1);
    expect(tail(proxy.log)).toMatch(/INVALID_STATE: allocation \S+ is released/);
    expect(tail(proxy.log)).toContain("revoked");
    const r = await laptopRun("ssh", ["root@127.0.0.1", "true"]);
    expect(r.code).not.toBe(0);
    const again = startProxy(2224, ownerToken, "after-release");
    expect(await again.proc.exited).toBe(1);
    expect(tail(again.log)).toContain("INVALID_STATE: allocation is released");
    expect(tail(again.log)).not.toContain("listening on");
    // The placement is gone from the host (VM, namespace, directory).
    expect(await settledLeftoversOf(join(agentDir(), "allocations"), dirName)).toEqual([]);
  }, 120_000);
});
