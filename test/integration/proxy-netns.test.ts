/**
 * `bb proxy` to a private placement across two NATs, in namespaces this test
 * creates (issue 11, items 2 and 4):
 *
 *   laptop (10.1.0.2) ── imp: router, lossy on demand ── lnat: symmetric NAT (masquerade random) ─┐
 *                                                                 wan bridge 198.51.100.0/24
 *   host   (10.2.0.2) ── hnat: endpoint-independent NAT ──────────┤  (snat/dnat of udp 51820)
 *                         sched 198.51.100.2: test grant issuer ──┤  (test/support, for the
 *                         stun  198.51.100.3: STUN responder ─────┤   scheduler's grant route)
 *                         relay 198.51.100.4: relays (TLS, cert ──┘
 *                           by openssl): `bb relay run` as relay-1 on :443, and the relay
 *                           server with its frame hook (test/support/relayCapture.ts) as
 *                           relay-cap on :8443; a grant made with `relays` lists both
 *   host runs the host endpoint (src/agent/endpoint, through test/support/endpointHarness.ts):
 *   its TUN moves into "placement", a namespace with the real placement nftables table
 *   (default deny), whose "bbtap0" is a veth to "guest" (standing in for the VM: the
 *   allocation address fd00:bb:1:2::2 and a kernel TCP echo server on port 22).
 *
 * Checked: bytes through `bb proxy` (the real CLI in the laptop namespace) reach the
 * kernel echo server and come back byte-exact; the path is direct through the host NAT's
 * STUN candidate (the laptop is behind a symmetric NAT, so the host learns it only by
 * roaming); the proxy asks the STUN server the grant response lists from its tunnel
 * socket and the laptop NAT's mapping it saw reaches the host as a stun candidate
 * (through the stand-in's rendezvous route); the inner filter refuses other ports and addresses (counted) while the
 * granted flow passes; the guest cannot open a connection to the client; an expired
 * grant stops working (the host drops it by itself) and the proxy exits with
 * GRANT_EXPIRED; refused with stable codes: a tampered grant (GRANT_SIGNATURE_INVALID,
 * by the proxy and by the host), a client relay token for another grant
 * (RELAY_TOKEN_INVALID, by the proxy, before binding), a grant for the older generation
 * after a replacement (STALE_GENERATION, by the host and the proxy), whose old grants the
 * host dropped by itself. Relays: with UDP between the two NATs dropped (nftables in the
 * laptop NAT's forward path), the relays carry the session (byte-exact, path "relay" at
 * both ends, both relay sessions paired); lifting the drop between the two halves of one
 * 8 MiB inner TCP connection moves the path to direct at both ends and that connection
 * completes byte-exact (SHA-256); relay-cap forwarded only WireGuard messages of their
 * exact lengths and never the marker the connection began with, and `bb relay run`
 * forwarded frames too (its metrics); a third party presenting the grant's client relay
 * token is refused RELAY_PAIR_TAKEN while the host's session stays open, paired and
 * unreconnected; the revoke closes the host's relay sessions. Relay tokens: with client
 * tokens that live 8 s the proxy renews them from the rendezvous (the stand-in's
 * relay-tokens route), and after `bb relay run` restarts past the first tokens' expiry
 * both ends reconnect to it. Path liveness (issue 18, items 2 and 3): with only the host's
 * UDP to the laptop dropped, neither end pins direct and the relays carry the handshake and
 * an echo; with the direct path pinned and an 8 MiB connection open, UDP between the NATs
 * dropped: the connection completes over the relay and both ends report the direct path lost.
 * A path that drops full-size packets (issue 18 item 1, ADR 0103): every wan-side
 * interface at MTU 1,400 and ICMP "fragmentation needed" dropped at both NATs, so
 * path MTU discovery never learns the limit; 8 MiB echoes arrive byte-exact direct
 * (a relay offered too) without and with 1 % seeded loss both ways on the laptop's
 * link (imp: test/support/impairRouter.ts, policy-routed through a TUN, since this
 * kernel has no netem), and relayed with that loss.
 * The control channel (issue 20): openControlChannel (src/proxy/controlChannel.ts, the
 * path bb proxy runs on, for port 7390) in the laptop reaches a kernel HTTP service on
 * the guest's port 7390 by plain fetch with the beachball-grant header, and revokes on
 * close; a grant for 7390 alone gets no SYN to port 22 past the inner filter (counted).
 * Needs root, ip, nft; otherwise prints why and skips. Leaves nothing behind.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { closeSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { placementRuleset } from "../../src/agent/isolation/rules.ts";
import { TestGrantIssuer, testId } from "../support/grantIssuer.ts";
import { parseTcp, tcpPacket } from "../support/ipCraft.ts";
import { LineChild } from "../support/lineChild.ts";
import { must, Netns, netnsSkipReason, sh } from "../support/netns.ts";
import { keyPairFromPrivate, systemRandom } from "../../src/wireguard/index.ts";
import { makeTestCert } from "../support/relay.ts";
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { CONTROL_GRANT_HEADER, GUEST_CONTROL_PORT } from "../../src/protocol/control.ts";

const repo = resolve(import.meta.dir, "../..");
const bun = process.execPath;
const skipReason =
  netnsSkipReason() ?? (!Bun.which("nft") ? "nft is not installed (apt-get install -y nftables)" : null);
if (skipReason) console.log(`SKIP test/integration/proxy-netns.test.ts: ${skipReason}`);

const ID = process.pid.toString(36);
const ns = (n: string) => `bbt-px${n}-${ID}`;
const TABLE = `bb_px${ID}`;
const ALLOC = "fd00:bb:1:2::2";
const TOKEN = "proxy-netns-token";
const SCHED = "198.51.100.2";
const STUN = "198.51.100.3";
const LNAT_PUBLIC = "198.51.100.10";
const HNAT_PUBLIC = "198.51.100.20";
const RELAY = "198.51.100.4";
const RELAYS = [
  { relayId: "relay-1", url: `wss://${RELAY}:443/v1/relay` },
  { relayId: "relay-cap", url: `wss://${RELAY}:8443/v1/relay` },
];
const work = mkdtempSync(join(tmpdir(), "bbt-px-"));
const issuer = new TestGrantIssuer("netns-issuer");
const allocationId = testId("alloc");
const spaces: Netns[] = [];
const children: LineChild[] = [];
let issuerProc: LineChild;
let stunProc: LineChild;
let harness: LineChild;
let W: Netns, LNAT: Netns, HNAT: Netns, L: Netns, H: Netns, S: Netns, T: Netns, P: Netns, G: Netns, R: Netns, M: Netns;
let impairer: LineChild;
/** The lossy link's settings (seeded userspace loss both ways; no delay, so the run stays short). */
const LOSS = { lossPercent: 1, delayMs: 0, reorderPercent: 0, seed: 18_001 };
/** The routing table that sends the laptop link's traffic through the impairment TUN. */
const IMPAIR_TABLE = "100";
let relayProc: ReturnType<typeof Bun.spawn> | null = null;
let capture: LineChild;
let relayCert: { certPath: string; keyPath: string; cert: string };
let relay1Config: string;

function veth(a: Netns, ifA: string, b: Netns, ifB: string): void {
  a.ip("link", "add", ifA, "type", "veth", "peer", "name", ifB, "netns", b.name);
  a.ip("link", "set", ifA, "up");
  b.ip("link", "set", ifB, "up");
}

function nft(n: Netns, text: string): void {
  const r = Bun.spawnSync(n.exec(["nft", "-f", "-"]), { stdin: new TextEncoder().encode(text), stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`nft in ${n.name}: ${r.stderr}`);
}

function child(n: Netns, args: string[], name: string, env?: Record<string, string>): LineChild {
  const c = new LineChild(n.exec([bun, ...args]), join(work, `${name}.log`), { ...process.env, ...env });
  children.push(c);
  return c;
}

function buildTopology(): void {
  for (const name of ["w", "ln", "hn", "l", "h", "s", "t", "p", "g", "r", "m"]) spaces.push(new Netns(ns(name)));
  [W, LNAT, HNAT, L, H, S, T, P, G, R, M] = spaces as [
    Netns,
    Netns,
    Netns,
    Netns,
    Netns,
    Netns,
    Netns,
    Netns,
    Netns,
    Netns,
    Netns,
  ];
  W.ip("link", "add", "br0", "type", "bridge");
  W.ip("link", "set", "br0", "up");
  for (const [n, addr, port] of [
    [LNAT, LNAT_PUBLIC, "wl"],
    [HNAT, HNAT_PUBLIC, "wh"],
    [S, SCHED, "ws"],
    [T, STUN, "wt"],
    [R, RELAY, "wr"],
  ] as const) {
    veth(W, port, n, "pub");
    W.ip("link", "set", port, "master", "br0");
    n.ip("addr", "add", `${addr}/24`, "dev", "pub");
  }
  // The laptop's link goes through M, a plain router until impairLaptopLink(true) routes it through the lossy TUN.
  veth(L, "eth0", M, "in");
  L.ip("addr", "add", "10.1.0.2/24", "dev", "eth0");
  L.ip("route", "add", "default", "via", "10.1.0.1");
  M.ip("addr", "add", "10.1.0.1/24", "dev", "in");
  veth(M, "out", LNAT, "lan");
  M.ip("addr", "add", "10.3.0.2/24", "dev", "out");
  M.ip("route", "add", "default", "via", "10.3.0.1");
  LNAT.ip("addr", "add", "10.3.0.1/24", "dev", "lan");
  LNAT.ip("route", "add", "10.1.0.0/24", "via", "10.3.0.2");
  for (const k of ["ip_forward=1", "conf.all.rp_filter=0", "conf.default.rp_filter=0"])
    must(M.exec(["sysctl", "-qw", `net.ipv4.${k}`]));
  veth(H, "eth0", HNAT, "lan");
  H.ip("addr", "add", "10.2.0.2/24", "dev", "eth0");
  H.ip("route", "add", "default", "via", "10.2.0.1");
  HNAT.ip("addr", "add", "10.2.0.1/24", "dev", "lan");
  for (const n of [LNAT, HNAT]) must(n.exec(["sysctl", "-qw", "net.ipv4.ip_forward=1"]));
  // The laptop's NAT is symmetric: a random public port per destination (address- and port-dependent mapping).
  nft(
    LNAT,
    `table ip nat {\n chain post { type nat hook postrouting priority srcnat; policy accept; oifname "pub" masquerade random; }\n}\n`,
  );
  // The host's NAT maps its endpoint port to the same public port for every destination and admits anyone to it.
  nft(
    HNAT,
    [
      "table ip nat {",
      ` chain post { type nat hook postrouting priority srcnat; policy accept; oifname "pub" ip saddr 10.2.0.2 udp sport 51820 snat to ${HNAT_PUBLIC}:51820; oifname "pub" masquerade; }`,
      ` chain pre { type nat hook prerouting priority dstnat; policy accept; iifname "pub" udp dport 51820 dnat to 10.2.0.2:51820; }`,
      "}",
    ].join("\n") + "\n",
  );
  // The placement: the real default-deny table; "bbtap0" is a veth to the guest.
  veth(P, "bbtap0", G, "eth0");
  nft(
    P,
    placementRuleset({
      table: TABLE,
      tap: "bbtap0",
      guestIpv4: "10.0.0.2",
      routerIpv4: "10.0.0.1",
      resolvers: [],
      operatorRanges: [],
      hostRanges: ["100.127.0.0/16"],
    }),
  );
  G.ip("-6", "addr", "add", `${ALLOC}/128`, "dev", "eth0", "nodad");
  G.ip("-6", "route", "add", "default", "via", "fe80::1", "dev", "eth0");
}

/** Drops UDP between the two NATs' public addresses in the laptop NAT's forward path (the relay's TCP is untouched), or lifts the drop. */
function blockDirect(on: boolean): void {
  if (on)
    nft(
      LNAT,
      `table ip bb_block {\n chain drop_udp { type filter hook forward priority -10; policy accept; ip daddr ${HNAT_PUBLIC} udp dport 51820 drop; ip saddr ${HNAT_PUBLIC} udp sport 51820 drop; }\n}\n`,
    );
  else must(LNAT.exec(["nft", "delete", "table", "ip", "bb_block"]));
}

/** Drops only the host NAT's UDP towards the laptop (the laptop's to it still arrives), or lifts the drop. */
function blockTowardsLaptop(on: boolean): void {
  if (on)
    nft(
      LNAT,
      `table ip bb_oneway {\n chain drop_udp { type filter hook forward priority -10; policy accept; ip saddr ${HNAT_PUBLIC} udp sport 51820 drop; }\n}\n`,
    );
  else must(LNAT.exec(["nft", "delete", "table", "ip", "bb_oneway"]));
}

/**
 * Makes the wan a path that drops full-size packets, or undoes it: every
 * wan-side interface (the bridge's ports and each public side) at MTU 1,400,
 * and ICMP "fragmentation needed" dropped where the NATs forward or send it,
 * so no sender ever learns the limit (a PMTU black hole).
 */
function constrainWan(on: boolean): void {
  const mtu = on ? "1400" : "1500";
  for (const port of ["wl", "wh", "ws", "wt", "wr"]) W.ip("link", "set", port, "mtu", mtu);
  for (const n of [LNAT, HNAT, S, T, R]) n.ip("link", "set", "pub", "mtu", mtu);
  const drop = "icmp type destination-unreachable icmp code frag-needed counter drop;";
  for (const n of [LNAT, HNAT]) {
    if (on)
      nft(
        n,
        `table ip bb_pmtu {\n chain drop_fwd { type filter hook forward priority -20; policy accept; ${drop} }\n chain drop_out { type filter hook output priority -20; policy accept; ${drop} }\n}\n`,
      );
    else must(n.exec(["nft", "delete", "table", "ip", "bb_pmtu"]));
  }
}

/** Routes the laptop's link, both ways, through the impairment TUN in M (LOSS), or back around it. */
function impairLaptopLink(on: boolean): void {
  for (const iif of ["in", "out"]) M.ip("rule", on ? "add" : "del", "iif", iif, "lookup", IMPAIR_TABLE);
}

/** Starts the relays in R: `bb relay run` (relay-1, the real command) and the relay server with its frame hook (relay-cap, test/support/relayCapture.ts), both TLS with one openssl-made certificate for RELAY. */
async function startRelays(): Promise<void> {
  relayCert = makeTestCert(work, `IP:${RELAY}`);
  const file = (relayId: string, port: number, health: number) => {
    const path = join(work, `${relayId}.json`);
    writeFileSync(
      path,
      JSON.stringify({
        relayId,
        listen: [`${RELAY}:${port}`],
        healthListen: `127.0.0.1:${health}`,
        tls: { certPath: relayCert.certPath, keyPath: relayCert.keyPath },
        trustedKeys: [{ keyId: issuer.keyId, publicKey: issuer.publicKey }],
        limitCaps: { maxBytes: 1 << 30, maxBytesPerSecond: 100_000_000, idleTimeoutMs: 60_000 },
      }),
    );
    return path;
  };
  relay1Config = file("relay-1", 443, 9443);
  capture = child(R, [join(repo, "test/support/relayCapture.ts"), file("relay-cap", 8443, 9444)], "relay-cap");
  await startRelay1();
  await capture.waitFor((e) => e.ev === "ready", 15_000, "relay-cap ready");
}

/** Starts `bb relay run` as relay-1 in R and waits until it listens (its log gains one more "listening" line). */
async function startRelay1(): Promise<void> {
  const log = join(work, "relay-1.log");
  const listening = () => (readFileSync(log, "utf8").match(/relay listening.*relay-1/g) ?? []).length;
  const fd = openSync(log, "a");
  const before = listening();
  relayProc = Bun.spawn(R.exec([bun, join(repo, "bin/bb.ts"), "relay", "run", "--config", relay1Config]), {
    stdout: fd,
    stderr: fd,
    env: { ...process.env, NO_COLOR: "1" },
  });
  closeSync(fd);
  for (let i = 0; i < 300 && listening() === before; i++) {
    if (relayProc.exitCode !== null)
      throw new Error(`bb relay run exited ${relayProc.exitCode}: ${readFileSync(log, "utf8")}`);
    await Bun.sleep(50);
  }
  expect(listening()).toBe(before + 1);
}

/** Runs a bun script inside namespace `n` and returns its stdout (15 s at most). */
async function runIn(n: Netns, script: string): Promise<string> {
  const path = join(work, `script-${randomBytes(4).toString("hex")}.ts`);
  writeFileSync(path, script);
  const p = Bun.spawn(n.exec(["timeout", "15", bun, path]), { stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  if (code !== 0) throw new Error(`script in ${n.name} exited ${code}: ${err}`);
  return out;
}

async function startProxy(localPort: number, extraEnv: Record<string, string> = {}) {
  const log = join(work, `proxy-${localPort}.log`);
  // One descriptor opened for appending, shared by stdout and stderr (two opens would overwrite each other).
  const fd = openSync(log, "a");
  const proc = Bun.spawn(
    L.exec([
      bun,
      join(repo, "bin/bb.ts"),
      "proxy",
      allocationId,
      "--local-port",
      String(localPort),
      "--remote-port",
      "22",
    ]),
    {
      stdout: fd,
      stderr: fd,
      env: {
        ...process.env,
        NO_COLOR: "1",
        BB_SCHEDULER_URL: `http://${SCHED}:8080`,
        BB_TOKEN: TOKEN,
        BB_CONNECTION_KEYS: issuer.verificationKeyText(),
        BB_RELAY_CA: relayCert.certPath,
        ...extraEnv,
      },
    },
  );
  closeSync(fd);
  const text = () =>
    Bun.file(log)
      .text()
      .catch(() => "");
  const waitFor = async (re: RegExp, ms = 20_000) => {
    for (let t = 0; t < ms; t += 50) {
      const m = re.exec(await text());
      if (m) return m;
      if (proc.exitCode !== null) throw new Error(`bb proxy exited ${proc.exitCode}: ${await text()}`);
      await Bun.sleep(50);
    }
    throw new Error(`bb proxy: no ${re} within ${ms} ms: ${await text()}`);
  };
  return { proc, text, waitFor };
}

/** Runs the kernel TCP echo client in the laptop namespace against 127.0.0.1:port; with `limitSeconds`, an echo still unfinished then is cut off (ok undefined). */
async function echoThrough(
  port: number,
  bytes: number,
  limitSeconds?: number,
): Promise<{ ok: boolean; bytes: number; ms: number }> {
  const limit = limitSeconds ? ["timeout", String(limitSeconds)] : [];
  const p = Bun.spawn(
    L.exec([...limit, bun, join(repo, "test/support/tcpEcho.ts"), "connect", "127.0.0.1", String(port), String(bytes)]),
    { stdout: "pipe", stderr: "pipe" },
  );
  const out = await new Response(p.stdout).text();
  await p.exited;
  return JSON.parse(out.trim().split("\n").at(-1) || "{}") as { ok: boolean; bytes: number; ms: number };
}

async function hostStats(): Promise<Record<string, any>> {
  return harness.stats();
}

async function connectivity(): Promise<Record<string, any>> {
  const from = harness.events.length;
  harness.send({ op: "connectivity" });
  return harness.waitFor((e) => e.ev === "connectivity", 5_000, "connectivity", from);
}

describe.skipIf(!!skipReason)("bb proxy across NATs to a placement behind the host endpoint", () => {
  beforeAll(async () => {
    buildTopology();
    await startRelays();
    issuerProc = child(
      S,
      [
        join(repo, "test/support/grantIssuerServer.ts"),
        JSON.stringify({
          hostname: SCHED,
          port: 8080,
          token: TOKEN,
          seed: issuer.seed,
          keyId: issuer.keyId,
          relays: RELAYS,
          stunServers: [`${STUN}:3478`],
        }),
      ],
      "issuer",
    );
    await issuerProc.waitFor((e) => e.ev === "ready", 15_000, "issuer ready");
    issuerProc.send({
      op: "allocation",
      id: allocationId,
      state: "ready",
      generation: 1,
      hostId: "host-1",
      allocationAddress: ALLOC,
    });
    stunProc = child(T, [join(repo, "test/support/stunResponder.ts"), STUN, "3478"], "stun");
    await stunProc.waitFor((e) => e.ev === "ready", 15_000, "stun ready");
    const echo = child(G, [join(repo, "test/support/tcpEcho.ts"), "listen", ALLOC, "22"], "echo");
    await echo.waitFor((e) => e.ev === "ready", 15_000, "echo ready");
    const cfg = {
      hostId: "host-1",
      dataDir: join(work, "host-data"),
      listen: { hostname: "0.0.0.0", port: 51820 },
      stunServers: [{ address: STUN, port: 3478 }],
      issuerUrl: `http://${SCHED}:8080`,
      verificationKeys: issuer.verificationKeyText(),
      placements: [{ allocationId, generation: 1, netns: P.name, table: TABLE, tap: "bbtap0" }],
      relayCa: relayCert.certPath,
    };
    harness = child(H, [join(repo, "test/support/endpointHarness.ts"), JSON.stringify(cfg)], "endpoint");
    await harness.waitFor((e) => e.ev === "ready", 15_000, "endpoint ready");
    impairer = child(M, [join(repo, "test/support/impairRouter.ts"), "imp0", JSON.stringify(LOSS)], "impairer");
    await impairer.waitFor((e) => e.ev === "ready", 15_000, "impairer ready");
    M.ip("link", "set", "imp0", "up");
    M.ip("route", "add", "default", "dev", "imp0", "table", IMPAIR_TABLE);
  }, 60_000);

  afterAll(async () => {
    for (const c of children.reverse()) await c.stop(5_000).catch(() => {});
    if (relayProc && relayProc.exitCode === null) {
      relayProc.kill("SIGTERM");
      const t = setTimeout(() => relayProc?.kill("SIGKILL"), 5_000);
      await relayProc.exited;
      clearTimeout(t);
    }
    for (const n of spaces.reverse()) n.delete();
    if (process.env.BB_TEST_SHOW_LOGS)
      for (const f of readdirSync(work).filter((f) => f.endsWith(".log")))
        console.log(`--- ${f}\n${readFileSync(join(work, f), "utf8").slice(-4000)}`);
    rmSync(work, { recursive: true, force: true });
  });

  test("the host publishes its STUN-mapped candidate, and the proxy its own (the laptop NAT's mapping) through the rendezvous to the host; bytes through bb proxy reach the guest's kernel echo server byte-exact over a direct path", async () => {
    const c = await connectivity();
    expect(c.candidates).toContainEqual({ address: HNAT_PUBLIC, port: 51820, kind: "stun" });
    expect(c.candidates).toContainEqual({ address: "10.2.0.2", port: 51820, kind: "local" });
    const px = await startProxy(2222);
    try {
      await px.waitFor(/listening on 127\.0\.0\.1:2222/);
      const results = await Promise.all([echoThrough(2222, 8 << 20), echoThrough(2222, 100_000), echoThrough(2222, 1)]);
      if (process.env.BB_TEST_SHOW_LOGS)
        console.log(JSON.stringify(await hostStats()), JSON.stringify(harness.events.filter((e) => e.ev !== "stats")));
      expect(results.map((r) => [r.ok, r.bytes])).toEqual([
        [true, 8 << 20],
        [true, 100_000],
        [true, 1],
      ]);
      await px.waitFor(new RegExp(`path: direct via ${HNAT_PUBLIC.replaceAll(".", "\\.")}:51820`));
      const st = await hostStats();
      const g = st.grants[0];
      // The host sees the laptop's symmetric-NAT mapping, which no candidate named: it learnt it by roaming.
      expect(g.path.path).toBe("direct");
      expect(g.path.direct).toStartWith(`${LNAT_PUBLIC}:`);
      expect(g.filter.inboundAccepted).toBeGreaterThan(100);
      expect(st.links).toEqual([expect.objectContaining({ netns: P.name, grants: 1 })]);
      // The proxy asked the deployment's STUN server (from the grant response) out of its tunnel socket: the server saw
      // the laptop NAT's public mapping, that mapping reached the Connection as a stun candidate, and the host holds it.
      const grantId = g.grantId as string;
      const seenFromLaptop = (
        await stunProc.waitFor(
          (e) => e.ev === "binding" && String(e.from).startsWith(`${LNAT_PUBLIC}:`),
          10_000,
          "a binding from the laptop NAT",
        )
      ).from as string;
      const i0 = issuerProc.events.length;
      issuerProc.send({ op: "client-candidates", grantId });
      const posted = (await issuerProc.waitFor((e) => e.ev === "client-candidates", 5_000, "client candidates", i0))
        .candidates as Array<Record<string, unknown>>;
      expect(posted).toContainEqual({ address: LNAT_PUBLIC, port: Number(seenFromLaptop.split(":")[1]), kind: "stun" });
      expect(posted).toContainEqual(expect.objectContaining({ address: "10.1.0.2", kind: "local" }));
      const heldByHost = async () =>
        ((await hostStats()).grants.find((x: any) => x.grantId === grantId)?.candidates ?? []) as string[];
      for (let i = 0; i < 50 && !(await heldByHost()).includes(seenFromLaptop); i++) await Bun.sleep(100);
      expect(await heldByHost()).toContain(seenFromLaptop);
      expect(await px.text()).toContain("to the rendezvous (1 from STUN)");
      expect(P.ip("link", "show", "dev", "bbconn0")).toContain("bbconn0");
    } finally {
      px.proc.kill("SIGINT");
      expect(await px.proc.exited).toBe(0);
    }
    expect(await px.text()).toMatch(/grant grt_[0-9a-f]{32} revoked/);
    // The revoke reached the host: no grant, no TUN in the placement, an empty bb_conn chain.
    for (let i = 0; i < 50 && (await hostStats()).grants.length; i++) await Bun.sleep(100);
    expect((await hostStats()).grants).toEqual([]);
    // The grant leaves the table first; the link (chain flushed, then the TUN closed) follows within moments.
    for (let i = 0; i < 50 && sh(P.exec(["ip", "link", "show", "dev", "bbconn0"])).code === 0; i++)
      await Bun.sleep(100);
    expect(sh(P.exec(["ip", "link", "show", "dev", "bbconn0"])).code).not.toBe(0);
    expect(must(P.exec(["nft", "list", "chain", "inet", TABLE, "bb_conn"]))).not.toContain("accept");
  }, 90_000);

  test("a path that drops full-size packets (wan MTU 1,400, ICMP frag-needed dropped at both NATs) carries every byte through bb proxy: direct with a relay offered, without and with 1 % loss, and relayed with 1 % loss", async () => {
    constrainWan(true);
    let impaired = false;
    let blocked = false;
    const pxs: Array<Awaited<ReturnType<typeof startProxy>>> = [];
    try {
      // The fault is real: a DF datagram of the old tunnel's full size (1,480 bytes) dies on the way and no ICMP says so;
      // one of the tunnel's full size now (1,340 bytes: 1,280 + 32 + 8 + 20) arrives.
      const ping = (size: number) =>
        sh(L.exec(["ping", "-n", "-q", "-M", "do", "-c", "1", "-W", "1", "-s", String(size - 28), SCHED])).code;
      expect([ping(1480), ping(1340)]).toEqual([1, 0]);

      // (a) Direct, no loss, with the relays offered as well (as in the issue, where the proxy stayed on the dead direct path).
      issuerProc.send({ op: "next-grant", relays: true });
      await issuerProc.waitFor((e) => e.ev === "next-grant", 5_000, "next-grant");
      const px = await startProxy(2240);
      pxs.push(px);
      await px.waitFor(/listening on 127\.0\.0\.1:2240/);
      const grantId = /grant (grt_[0-9a-f]{32})/.exec(await px.text())![1]!;
      const grantOf = async () => (await hostStats()).grants.find((g: any) => g.grantId === grantId);
      const [small, big] = await Promise.all([echoThrough(2240, 1_000, 60), echoThrough(2240, 8 << 20, 60)]);
      expect([small.ok, small.bytes, big.ok, big.bytes]).toEqual([true, 1_000, true, 8 << 20]);
      await px.waitFor(new RegExp(`path: direct via ${HNAT_PUBLIC.replaceAll(".", "\\.")}:51820`));
      expect((await grantOf()).path.path).toBe("direct");

      // (b) The same, with 1 % loss each way on the laptop's link.
      impairLaptopLink(true);
      impaired = true;
      const lossy = await echoThrough(2240, 8 << 20, 90);
      expect([lossy.ok, lossy.bytes]).toEqual([true, 8 << 20]);
      expect((await grantOf()).path.path).toBe("direct");
      const st = (await impairer.stats()) as {
        up: { dropped: number; passed: number };
        down: { dropped: number; passed: number };
      };
      expect(st.up.dropped).toBeGreaterThan(0);
      expect(st.down.dropped).toBeGreaterThan(0);

      // (c) Relayed, with the same loss: UDP between the NATs dropped.
      blockDirect(true);
      blocked = true;
      issuerProc.send({ op: "next-grant", relays: true });
      await issuerProc.waitFor((e) => e.ev === "next-grant", 5_000, "next-grant");
      const pr = await startProxy(2241);
      pxs.push(pr);
      await pr.waitFor(/listening on 127\.0\.0\.1:2241/);
      const relayed = await echoThrough(2241, 8 << 20, 90);
      expect([relayed.ok, relayed.bytes]).toEqual([true, 8 << 20]);
      await pr.waitFor(/path: relay relay-(1|cap)/);
      expect(await pr.text()).not.toContain("path: direct");
      if (process.env.BB_TEST_SHOW_LOGS)
        console.log(
          JSON.stringify({ ms: [small.ms, big.ms, lossy.ms, relayed.ms], impairment: await impairer.stats() }),
        );
    } finally {
      if (blocked) blockDirect(false);
      if (impaired) impairLaptopLink(false);
      constrainWan(false);
      for (const p of pxs) {
        p.proc.kill("SIGINT");
        await p.proc.exited;
      }
    }
  }, 240_000);

  test("relay: with UDP between the NATs dropped, bb relay run carries the session byte-exact; unblocked mid-transfer, the same inner TCP connection moves to direct and completes byte-exact; the relay sees only WireGuard messages; a third party with the grant's relay token is refused RELAY_PAIR_TAKEN and the pair stays", async () => {
    blockDirect(true);
    let blocked = true;
    issuerProc.send({ op: "next-grant", relays: true });
    await issuerProc.waitFor((e) => e.ev === "next-grant", 5_000, "next-grant");
    const px = await startProxy(2230);
    try {
      await px.waitFor(/listening on 127\.0\.0\.1:2230/);
      const grantId = /grant (grt_[0-9a-f]{32})/.exec(await px.text())![1]!;
      const marker = `BEACHBALL-RELAY-MARKER-${randomBytes(8).toString("hex")}`;
      const m0 = capture.events.length;
      capture.send({ op: "marker", text: marker });
      await capture.waitFor((e) => e.ev === "marker", 5_000, "marker set", m0);
      const grantOf = async () => (await hostStats()).grants.find((g: any) => g.grantId === grantId);

      // (a) Direct blocked: the relay carries the session, byte-exact, and both ends say relay.
      const r = await echoThrough(2230, 300_000);
      expect([r.ok, r.bytes]).toEqual([true, 300_000]);
      await px.waitFor(/path: relay relay-(1|cap)/);
      expect(await px.text()).not.toContain("path: direct");
      expect((await grantOf()).path.path).toBe("relay");
      const hostRelays = (await hostStats()).relays.filter((x: any) => x.pathId.endsWith(`/${grantId}`));
      expect(hostRelays.map((x: any) => [x.relayId, x.state, x.paired]).sort()).toEqual([
        ["relay-1", "open", true],
        ["relay-cap", "open", true],
      ]);

      // (b) One inner TCP connection: its first half (starting with the marker) over the relay; then the drop is lifted.
      const staged = child(
        L,
        [join(repo, "test/support/tcpEcho.ts"), "staged", "127.0.0.1", "2230", String(8 << 20), marker],
        "staged",
      );
      await staged.waitFor((e) => e.ev === "half", 60_000, "the first half echoed");
      expect(await px.text()).not.toContain("path: direct");
      expect((await grantOf()).path.path).toBe("relay");
      blockDirect(false);
      blocked = false;
      // The proxy's probes reach the host's STUN candidate: the host pins the laptop NAT's new mapping.
      for (let i = 0; i < 300 && (await grantOf()).path.path !== "direct"; i++) await Bun.sleep(100);
      expect((await grantOf()).path.direct).toStartWith(`${LNAT_PUBLIC}:`);
      staged.send({ op: "rest" });
      const done = await staged.waitFor((e) => e.ev === "done", 60_000, "the whole echo");
      expect([done.ok, done.bytes]).toEqual([true, 8 << 20]);
      // The proxy pinned the host's direct address during that connection (it had not at the half), after the relay.
      const log = await px.text();
      expect(log.indexOf(`path: direct via ${HNAT_PUBLIC}:51820`)).toBeGreaterThan(log.search(/path: relay relay-/));

      // (c) What the relay forwarded of this session: WireGuard messages with their exact lengths only, never the marker.
      const c0 = capture.events.length;
      capture.send({ op: "report" });
      const rep = await capture.waitFor((e) => e.ev === "report", 5_000, "capture report", c0);
      expect(rep.notWireGuard).toBe(0);
      expect(rep.markerHits).toBe(0);
      expect(Object.keys(rep.byType as object).every((t) => ["1", "2", "3", "4"].includes(t))).toBe(true);
      expect((rep.byType as Record<string, number>)["4"]).toBeGreaterThan(100);
      // bb relay run forwarded frames of it too.
      const metrics = await runIn(R, "console.log(await (await fetch('http://127.0.0.1:9443/metrics')).text());");
      expect(Number(/^bb_relay_frames_forwarded_total\S* (\d+)/m.exec(metrics)?.[1] ?? 0)).toBeGreaterThan(0);

      // (d) A third party presenting the client's relay token of this grant, while client and host are paired: refused, the pair stays.
      const i0 = issuerProc.events.length;
      issuerProc.send({ op: "client-relay-tokens", grantId });
      const toks = (await issuerProc.waitFor((e) => e.ev === "client-relay-tokens", 5_000, "tokens", i0))
        .tokens as Record<string, unknown>;
      const out = await runIn(
        L,
        `
        import { readFileSync } from "node:fs";
        import { connectRelay } from ${JSON.stringify(join(repo, "src/relayclient/index.ts"))};
        try {
          const t = await connectRelay({ url: ${JSON.stringify(RELAYS[0]!.url)}, token: ${JSON.stringify(toks["relay-1"])}, ca: readFileSync(${JSON.stringify(relayCert.certPath)}, "utf8"), onDatagram: () => {} });
          t.close();
          console.log(JSON.stringify({ admitted: true }));
        } catch (e) {
          console.log(JSON.stringify({ admitted: false, code: e?.close?.code ?? null }));
        }`,
      );
      expect(JSON.parse(out.trim())).toEqual({ admitted: false, code: "RELAY_PAIR_TAKEN" });
      const after = (await hostStats()).relays.find((x: any) => x.pathId === `relay-1/${grantId}`);
      expect([after.state, after.paired, after.connects]).toEqual(["open", true, 1]);
      expect(await px.text()).not.toMatch(/relay relay-1: (backoff|refused)/);
      expect((await echoThrough(2230, 100_000)).ok).toBe(true);
    } finally {
      if (blocked) blockDirect(false);
      px.proc.kill("SIGINT");
      expect(await px.proc.exited).toBe(0);
    }
    // The revoke closed the host's relay sessions of the grant.
    for (let i = 0; i < 50 && (await hostStats()).relays.length; i++) await Bun.sleep(100);
    expect((await hostStats()).relays).toEqual([]);
  }, 120_000);

  test("one-way UDP (kind: a path kept on the peer's datagrams, not on ours getting through): with the host's UDP to the laptop dropped and the laptop's arriving, neither end pins direct; the relays carry the handshake and an echo byte-exact, and bb proxy never says direct", async () => {
    blockTowardsLaptop(true);
    let blocked = true;
    issuerProc.send({ op: "next-grant", relays: true });
    await issuerProc.waitFor((e) => e.ev === "next-grant", 5_000, "next-grant");
    const px = await startProxy(2234);
    try {
      await px.waitFor(/listening on 127\.0\.0\.1:2234/);
      const grantId = /grant (grt_[0-9a-f]{32})/.exec(await px.text())![1]!;
      // Bounded: on a dead pin the echo never finishes.
      const r = await echoThrough(2234, 1 << 20, 30);
      expect([r.ok, r.bytes]).toEqual([true, 1 << 20]);
      const g = (await hostStats()).grants.find((x: any) => x.grantId === grantId);
      // The host hears the laptop directly, and that alone does not pin: its probes there go unanswered.
      expect(g.path).toMatchObject({ path: "relay", direct: null, pins: 0 });
      expect(g.path.probesSent).toBeGreaterThan(0);
      expect(await px.text()).not.toContain("path: direct");
      await px.waitFor(/path: relay relay-(1|cap)/);
    } finally {
      if (blocked) blockTowardsLaptop(false);
      blocked = false;
      px.proc.kill("SIGINT");
      expect(await px.proc.exited).toBe(0);
    }
  }, 90_000);

  test("black hole (kind: a dead pin kept until a handshake times out): with the direct path pinned and an 8 MiB transfer open, UDP between the NATs dropped: the same connection completes byte-exact over the relay, and bb proxy and the host report the direct path lost", async () => {
    issuerProc.send({ op: "next-grant", relays: true });
    await issuerProc.waitFor((e) => e.ev === "next-grant", 5_000, "next-grant");
    const px = await startProxy(2236);
    let blocked = false;
    try {
      await px.waitFor(/listening on 127\.0\.0\.1:2236/);
      const grantId = /grant (grt_[0-9a-f]{32})/.exec(await px.text())![1]!;
      expect((await echoThrough(2236, 100_000, 30)).ok).toBe(true);
      await px.waitFor(new RegExp(`path: direct via ${HNAT_PUBLIC.replaceAll(".", "\\.")}:51820`));
      await px.waitFor(/relay relay-1: session open, paired/);
      const grantOf = async () => (await hostStats()).grants.find((g: any) => g.grantId === grantId);
      for (let i = 0; i < 100 && (await grantOf()).path.path !== "direct"; i++) await Bun.sleep(100);
      expect((await grantOf()).path.path).toBe("direct");
      const staged = child(
        L,
        [join(repo, "test/support/tcpEcho.ts"), "staged", "127.0.0.1", "2236", String(8 << 20), "black-hole"],
        "staged-bh",
      );
      await staged.waitFor((e) => e.ev === "half", 60_000, "the first half echoed");
      blockDirect(true);
      blocked = true;
      const t0 = performance.now();
      staged.send({ op: "rest" });
      const done = await staged.waitFor((e) => e.ev === "done", 60_000, "the whole echo");
      expect([done.ok, done.bytes]).toEqual([true, 8 << 20]);
      const lost = await px.waitFor(
        new RegExp(`path: relay relay-(1|cap) \\(direct via ${HNAT_PUBLIC.replaceAll(".", "\\.")}:51820 lost\\)`),
      );
      // For the record only (tests never assert timings): how long the transfer's second half took.
      console.log(`black hole: ${lost[0]}; the rest of the 8 MiB echo took ${Math.round(performance.now() - t0)} ms`);
      const g = (await grantOf()).path;
      expect(g).toMatchObject({ path: "relay", direct: null });
      expect(g.lost).toStartWith(`${LNAT_PUBLIC}:`);
    } finally {
      if (blocked) blockDirect(false);
      px.proc.kill("SIGINT");
      expect(await px.proc.exited).toBe(0);
    }
  }, 120_000);

  test("relay tokens are renewed: with client tokens that live 8 s, the proxy gets fresh ones from the rendezvous, and when bb relay run restarts after the first ones expired it reconnects with them", async () => {
    blockDirect(true);
    let blocked = true;
    issuerProc.send({ op: "next-grant", relays: true, clientRelayTokenTtlMs: 8_000 });
    await issuerProc.waitFor((e) => e.ev === "next-grant", 5_000, "next-grant");
    const px = await startProxy(2232);
    const opens = async () => ((await px.text()).match(/relay relay-1: session open/g) ?? []).length;
    try {
      await px.waitFor(/listening on 127\.0\.0\.1:2232/);
      const grantId = /grant (grt_[0-9a-f]{32})/.exec(await px.text())![1]!;
      expect((await echoThrough(2232, 100_000)).ok).toBe(true);
      // Two thirds into each token's 8 s: the second refresh comes after the first tokens expired.
      for (let i = 0; i < 400 && ((await px.text()).match(/relay tokens refreshed/g) ?? []).length < 2; i++)
        await Bun.sleep(50);
      expect(((await px.text()).match(/relay tokens refreshed/g) ?? []).length).toBeGreaterThanOrEqual(2);
      const before = await opens();
      relayProc!.kill("SIGTERM");
      await relayProc!.exited;
      await startRelay1();
      for (let i = 0; i < 400 && (await opens()) === before; i++) await Bun.sleep(50);
      expect(await opens()).toBeGreaterThan(before);
      // With the grant's first token it would have been refused RELAY_TOKEN_EXPIRED.
      expect(await px.text()).not.toMatch(/relay relay-1: refused/);
      const hostRelay = async () => (await hostStats()).relays.find((x: any) => x.pathId === `relay-1/${grantId}`);
      for (let i = 0; i < 200 && !((await hostRelay())?.state === "open" && (await hostRelay())?.connects >= 2); i++)
        await Bun.sleep(50);
      expect(await hostRelay()).toMatchObject({ state: "open", paired: true });
      expect((await echoThrough(2232, 100_000)).ok).toBe(true);
    } finally {
      if (blocked) blockDirect(false);
      blocked = false;
      px.proc.kill("SIGINT");
      expect(await px.proc.exited).toBe(0);
    }
  }, 90_000);

  test("the inner filter passes only the granted flow and counts the rest; the guest cannot open a connection to the client", async () => {
    // A raw WireGuard client (test/support/wgHarness.ts) with a grant of its own, sending crafted packets.
    const key = keyPairFromPrivate(systemRandom.fill(new Uint8Array(32)));
    const b64 = (k: Uint8Array) => Buffer.from(k).toString("base64");
    const resp = await fetchFromLaptop(`/v1/allocations/${allocationId}/connection-grants`, {
      clientPublicKey: b64(key.publicKey),
      transport: "tcp",
      ports: [22],
    });
    const client: string = resp.grant.payload.clientAddress;
    const raw = child(
      L,
      [
        join(repo, "test/support/wgHarness.ts"),
        JSON.stringify({
          privateKey: b64(key.privateKey),
          listen: { address: "10.1.0.2", port: 0 },
          peer: {
            publicKey: resp.grant.payload.hostPublicKey,
            endpoint: { address: HNAT_PUBLIC, port: 51820 },
            allowedIps: ["fd00:bb:1:2::/64"],
          },
        }),
      ],
      "raw-client",
    );
    await raw.waitFor((e) => e.ev === "ready", 15_000, "raw client ready");
    const send = (p: Uint8Array) => raw.send({ op: "send", packet: b64(p) });
    send(tcpPacket(client, ALLOC, 40001, 23, 0x02)); // another port
    send(tcpPacket(client, "fd00:bb:1:2::99", 40002, 22, 0x02)); // another address
    send(tcpPacket(client, ALLOC, 40003, 22, 0x02)); // the granted flow: the guest's kernel answers SYN-ACK
    const synAck = await raw.waitFor(
      (e) => {
        if (e.ev !== "packet") return false;
        const t = parseTcp(new Uint8Array(Buffer.from(e.data as string, "base64")));
        return t !== null && t.sport === 22 && t.dport === 40003 && (t.flags & 0x12) === 0x12;
      },
      15_000,
      "SYN-ACK from the guest",
    );
    expect(synAck).toBeTruthy();
    const g = (await hostStats()).grants.find((x: any) => x.grantId === resp.grant.payload.grantId);
    expect(g.filter.drops.port).toBe(1);
    expect(g.filter.drops.destination).toBe(1);
    expect(g.filter.inboundAccepted).toBeGreaterThanOrEqual(1);
    // The guest opening a connection to the client is stopped by the placement's table (counted there).
    const before = nftCounter("ipv6_denied");
    // Its SYN is dropped silently, so the attempt is cut short after 3 s (asynchronously: a blocking spawn would stall the test).
    const attempt = Bun.spawn(
      G.exec(["timeout", "3", bun, join(repo, "test/support/tcpEcho.ts"), "connect", client, "22", "10"]),
      { stdout: "ignore", stderr: "ignore" },
    );
    expect(await attempt.exited).not.toBe(0);
    expect(nftCounter("ipv6_denied")).toBeGreaterThan(before);
    expect(g.filter.drops["no-flow"]).toBe(0);
    await raw.stop();
  }, 60_000);

  test("the control channel: openControlChannel in the laptop reaches a service on the guest's port 7390 by plain fetch with the grant header, and revokes on close; a grant for 7390 alone gets no SYN to port 22 past the inner filter (counted)", async () => {
    // The stand-in for the guest's control service: a kernel HTTP server on [ALLOC]:7390 that answers with the header it got.
    const service = join(work, "control-service.ts");
    writeFileSync(
      service,
      `Bun.serve({ hostname: ${JSON.stringify(ALLOC)}, port: ${GUEST_CONTROL_PORT}, fetch: (r) => Response.json({ path: new URL(r.url).pathname, grant: r.headers.get(${JSON.stringify(CONTROL_GRANT_HEADER)}) }) });\nconsole.log(JSON.stringify({ ev: "ready" }));\n`,
    );
    const svc = child(G, [service], "control-service");
    await svc.waitFor((e) => e.ev === "ready", 15_000, "control service ready");
    const out = await runIn(
      L,
      [
        `import { openControlChannel } from ${JSON.stringify(join(repo, "src/proxy/controlChannel.ts"))};`,
        `import { SchedulerClient } from ${JSON.stringify(join(repo, "src/client/index.ts"))};`,
        `import { parseVerificationKeys } from ${JSON.stringify(join(repo, "src/protocol/connectionSignature.ts"))};`,
        `import { selectAead, systemRandom, systemSuspendAwareClock } from ${JSON.stringify(join(repo, "src/wireguard/index.ts"))};`,
        `const ch = await openControlChannel({`,
        `  client: new SchedulerClient(${JSON.stringify(`http://${SCHED}:8080`)}, ${JSON.stringify(TOKEN)}),`,
        `  allocationId: ${JSON.stringify(allocationId)},`,
        `  keys: parseVerificationKeys(${JSON.stringify(issuer.verificationKeyText())}),`,
        `  clock: systemSuspendAwareClock, random: systemRandom, aead: (await selectAead()).aead,`,
        `  log: (l) => console.error(l),`,
        `});`,
        `try {`,
        `  const r = await fetch(ch.baseUrl + "/v1/exec", { headers: { [ch.grantHeaderName]: ch.grantHeader }, signal: AbortSignal.timeout(10000) });`,
        `  console.log(JSON.stringify({ baseUrl: ch.baseUrl, status: r.status, body: await r.json(), header: ch.grantHeader, grantId: ch.port.grant.grant.grantId, ports: ch.port.grant.grant.ports }));`,
        `} finally { await ch.close(); }`,
      ].join("\n"),
    );
    const r = JSON.parse(out.trim().split("\n").at(-1)!);
    expect(r.baseUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(r.ports).toEqual([GUEST_CONTROL_PORT]);
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ path: "/v1/exec", grant: r.header });
    const presented = JSON.parse(Buffer.from(r.body.grant, "base64url").toString("utf8"));
    expect(presented.payload.grantId).toBe(r.grantId);
    // close() revoked it: the host no longer holds the grant.
    for (let i = 0; i < 50 && (await hostStats()).grants.some((g: any) => g.grantId === r.grantId); i++)
      await Bun.sleep(100);
    expect((await hostStats()).grants.some((g: any) => g.grantId === r.grantId)).toBe(false);
    await svc.stop();

    // A raw WireGuard client with a grant for port 7390 only: its SYN to port 22 is dropped by the inner filter, counted.
    const key = keyPairFromPrivate(systemRandom.fill(new Uint8Array(32)));
    const b64 = (k: Uint8Array) => Buffer.from(k).toString("base64");
    const resp = await fetchFromLaptop(`/v1/allocations/${allocationId}/connection-grants`, {
      clientPublicKey: b64(key.publicKey),
      transport: "tcp",
      ports: [GUEST_CONTROL_PORT],
    });
    const clientAddr: string = resp.grant.payload.clientAddress;
    const raw = child(
      L,
      [
        join(repo, "test/support/wgHarness.ts"),
        JSON.stringify({
          privateKey: b64(key.privateKey),
          listen: { address: "10.1.0.2", port: 0 },
          peer: {
            publicKey: resp.grant.payload.hostPublicKey,
            endpoint: { address: HNAT_PUBLIC, port: 51820 },
            allowedIps: ["fd00:bb:1:2::/64"],
          },
        }),
      ],
      "raw-control-client",
    );
    try {
      await raw.waitFor((e) => e.ev === "ready", 15_000, "raw client ready");
      const grantOf = async () => (await hostStats()).grants.find((x: any) => x.grantId === resp.grant.payload.grantId);
      for (let i = 0; i < 100 && !(await grantOf()); i++) await Bun.sleep(50);
      raw.send({ op: "send", packet: b64(tcpPacket(clientAddr, ALLOC, 40101, 22, 0x02)) }); // not granted: the echo's port
      for (let i = 0; i < 100 && (await grantOf())?.filter.drops.port !== 1; i++) {
        if (i % 20 === 19) raw.send({ op: "send", packet: b64(tcpPacket(clientAddr, ALLOC, 40101, 22, 0x02)) });
        await Bun.sleep(50);
      }
      const g = await grantOf();
      expect(g.filter.drops.port).toBeGreaterThanOrEqual(1);
      // Nothing of port 22 came back: the guest never saw that SYN.
      expect(
        raw.events.some((e) => {
          if (e.ev !== "packet") return false;
          const t = parseTcp(new Uint8Array(Buffer.from(e.data as string, "base64")));
          return t !== null && t.sport === 22 && t.dport === 40101;
        }),
      ).toBe(false);
      expect(g.filter.inboundAccepted).toBe(0);
    } finally {
      await raw.stop();
    }
  }, 90_000);

  test("an expired grant stops working: the proxy exits 1 with GRANT_EXPIRED and the host removed the peer by itself", async () => {
    issuerProc.send({ op: "next-grant", ttlMs: 4_000 });
    await issuerProc.waitFor((e) => e.ev === "next-grant", 5_000, "next-grant");
    const px = await startProxy(2223);
    await px.waitFor(/listening on 127\.0\.0\.1:2223/);
    const grantId = /grant (grt_[0-9a-f]{32})/.exec(await px.text())![1]!;
    expect((await echoThrough(2223, 50_000)).ok).toBe(true);
    expect((await hostStats()).grants.map((g: any) => g.grantId)).toContain(grantId);
    expect(await px.proc.exited).toBe(1);
    expect(await px.text()).toContain("GRANT_EXPIRED");
    // The host drops the peer at the grant's expiry by itself (the proxy's revoke is not what removed it: it comes after).
    for (let i = 0; i < 50 && (await hostStats()).grants.some((g: any) => g.grantId === grantId); i++)
      await Bun.sleep(100);
    expect((await hostStats()).grants.map((g: any) => g.grantId)).not.toContain(grantId);
    const c = await connectivity();
    expect(c.appliedGrants.filter((a: any) => a.expiresAtMs <= Date.now())).toEqual([]);
  }, 60_000);

  test("a tampered grant is refused with GRANT_SIGNATURE_INVALID by the proxy (exit 1, nothing bound) and by the host", async () => {
    issuerProc.send({ op: "next-grant", tamper: true });
    await issuerProc.waitFor((e) => e.ev === "next-grant", 5_000, "next-grant");
    const from = harness.events.length;
    const px = await startProxy(2224);
    expect(await px.proc.exited).toBe(1);
    expect(await px.text()).toContain("GRANT_SIGNATURE_INVALID");
    expect(await px.text()).not.toContain("listening on");
    await harness.waitFor(
      (e) => e.ev === "refused" && e.code === "GRANT_SIGNATURE_INVALID",
      10_000,
      "the host's refusal",
      from,
    );
  }, 60_000);

  test("a client relay token for another grant is refused by the proxy with RELAY_TOKEN_INVALID before anything is bound", async () => {
    issuerProc.send({ op: "next-grant", relayTokenForAnotherGrant: true });
    await issuerProc.waitFor((e) => e.ev === "next-grant", 5_000, "next-grant");
    const px = await startProxy(2226);
    expect(await px.proc.exited).toBe(1);
    expect(await px.text()).toContain("RELAY_TOKEN_INVALID");
    expect(await px.text()).not.toContain("listening on");
  }, 60_000);

  test("a replacement removes the old generation's grants on the host; a grant for the older generation is then refused by the host (STALE_GENERATION) and the proxy ends with STALE_GENERATION", async () => {
    // The raw client's grant of the earlier test is still applied (generation 1, not revoked).
    expect((await hostStats()).grants.length).toBeGreaterThan(0);
    issuerProc.send({ op: "allocation", id: allocationId, generation: 2 });
    await issuerProc.waitFor((e) => e.ev === "allocation" && e.generation === 2, 5_000, "allocation at generation 2");
    const g0 = harness.events.length;
    harness.send({ op: "generation", allocationId, generation: 2 });
    await harness.waitFor((e) => e.ev === "generation" && e.ok === true, 5_000, "placement at generation 2", g0);
    // The replacement took the old generation's grants with it, without a revoke.
    expect((await hostStats()).grants).toEqual([]);
    try {
      issuerProc.send({ op: "next-grant", generation: 1 });
      await issuerProc.waitFor((e) => e.ev === "next-grant", 5_000, "next-grant");
      const from = harness.events.length;
      const px = await startProxy(2225);
      expect(await px.proc.exited).toBe(1);
      expect(await px.text()).toContain("STALE_GENERATION");
      await harness.waitFor(
        (e) => e.ev === "refused" && e.code === "STALE_GENERATION",
        10_000,
        "the host's refusal",
        from,
      );
      expect((await hostStats()).grants).toEqual([]);
    } finally {
      issuerProc.send({ op: "allocation", id: allocationId, generation: 1 });
      harness.send({ op: "generation", allocationId, generation: 1 });
    }
  }, 60_000);
});

/** The placement table's named counter `name`, in packets. */
function nftCounter(name: string): number {
  const out = must(P.exec(["nft", "list", "counter", "inet", TABLE, name]));
  return Number(/packets (\d+)/.exec(out)?.[1] ?? -1);
}

/** POST to the test issuer from inside the laptop namespace (the test process cannot reach it); 15 s at most. */
async function fetchFromLaptop(path: string, body: object): Promise<any> {
  const script = `const r = await fetch(${JSON.stringify(`http://${SCHED}:8080${path}`)}, { method: "POST", signal: AbortSignal.timeout(15000), headers: { authorization: "Bearer ${TOKEN}", "content-type": "application/json" }, body: ${JSON.stringify(JSON.stringify(body))} }); console.log(await r.text());`;
  const p = Bun.spawn(L.exec([bun, "-e", script]), { stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  if (code !== 0) throw new Error(`POST ${path} from the laptop exited ${code}: ${err}`);
  return JSON.parse(out);
}
