/**
 * `bb proxy` throughput (issue "Private networking", done-when), in one run:
 *
 * - ours: kernel TCP (test/support/tcpClient.ts) to 127.0.0.1 → the real
 *   `bb proxy` (loopback forwarder, our TCP/IP stack, our multipath
 *   WireGuard on UDP) in namespace L → the host endpoint
 *   (test/support/endpointHarness.ts: our WireGuard, inner filter, a
 *   bbconn0 TUN moved into the placement namespace P with the real
 *   placement table) in namespace H → a kernel TCP server
 *   (test/support/tcpPeer.ts) on the allocation's IPv6 address in G;
 *   grants from the test grant issuer (test/support/grantIssuerServer.ts);
 * - baseline, same run: kernel TCP through two Debian wireguard-go
 *   instances to a kernel TCP server (test/support/wgWorld.ts).
 *
 * - with --relay, also ours over the relay path: `bb relay run` (TLS, a
 *   certificate made by openssl) in namespace H, UDP between L and H
 *   dropped by nftables in L, so every datagram goes through the relay.
 *
 * - with --mtu-baseline N, also ours direct with both ends at tunnel MTU N
 *   (BB_DEBUG_TUNNEL_MTU, e.g. 1420, the MTU before ADR 0103), printing
 *   ours at TUNNEL_MTU / ours at N for the cost of the smaller MTU.
 *
 * Prints MiB/s each way and the ratio ours / baseline. Needs root, ip, nft,
 * wg and wireguard-go; prints why and exits 0 otherwise. Bounded: each
 * transfer gets TRANSFER_SECONDS, the whole run RUN_SECONDS (then it cleans
 * up and exits 1; bench/support/runLimit.ts).
 *
 *   bun bench/proxy.ts [--mib 64] [--relay] [--mtu-baseline 1420]
 * Run under `flock /tmp/bb-heavy.lock` on shared machines.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { placementRuleset } from "../src/agent/isolation/rules.ts";
import { TestGrantIssuer, testId } from "../test/support/grantIssuer.ts";
import { LineChild } from "../test/support/lineChild.ts";
import { Netns } from "../test/support/netns.ts";
import { startWgWorld, wgWorldSkipReason } from "../test/support/wgWorld.ts";
import { makeTestCert } from "../test/support/relay.ts";
import { debugTunnelMtu } from "../src/protocol/debugKnobs.ts";
import { TUNNEL_MTU } from "../src/protocol/tunnelMtu.ts";
import { writeFileSync } from "node:fs";
import { limitRunTime, onRunLimit } from "./support/runLimit.ts";

/** Longest one transfer may take, seconds (then it counts as FAILED). */
const TRANSFER_SECONDS = 180;
/** Longest the whole benchmark may take, seconds. */
const RUN_SECONDS = 900;
limitRunTime("bench/proxy.ts", RUN_SECONDS);

const { values } = parseArgs({
  options: {
    mib: { type: "string", default: "64" },
    relay: { type: "boolean", default: false },
    "mtu-baseline": { type: "string" },
  },
});
/** BB_DEBUG_TUNNEL_MTU for the comparison run (checked here, before anything starts), or null. */
const MTU_BASELINE =
  values["mtu-baseline"] === undefined ? null : debugTunnelMtu({ BB_DEBUG_TUNNEL_MTU: values["mtu-baseline"] });
const BYTES = Number(values.mib) << 20;
const repo = resolve(import.meta.dir, "..");
const bun = process.execPath;
const skip = wgWorldSkipReason() ?? (!Bun.which("nft") ? "nft is not installed" : null);
if (skip) {
  console.log(`bench/proxy.ts: skipped (${skip})`);
  process.exit(0);
}

const ID = process.pid.toString(36);
const ALLOC = "fd00:bb:9:2::2";
const TOKEN = "bench-proxy-token";
const TABLE = `bb_bp${ID}`;
const work = mkdtempSync(join(tmpdir(), "bb-bench-proxy-"));
const spaces: Netns[] = [];
const children: LineChild[] = [];
const mibps = (bytes: number, ms: number) => bytes / (1 << 20) / (ms / 1000);
/** Processes started with Bun.spawn, killed if the run-time bound passes. */
const procs: Array<ReturnType<typeof Bun.spawn>> = [];
onRunLimit(async () => {
  for (const p of procs) if (p.exitCode === null) p.kill("SIGKILL");
  for (const c of children.reverse()) await c.stop(2_000).catch(() => {});
  for (const n of spaces.reverse()) n.delete();
  rmSync(work, { recursive: true, force: true });
});

function veth(a: Netns, ifA: string, b: Netns, ifB: string): void {
  a.ip("link", "add", ifA, "type", "veth", "peer", "name", ifB, "netns", b.name);
  a.ip("link", "set", ifA, "up");
  b.ip("link", "set", ifB, "up");
}

async function tcpClient(ns: Netns, args: string[]): Promise<{ ok: boolean; bytes: number; ms: number }> {
  const p = Bun.spawn(
    ns.exec(["timeout", String(TRANSFER_SECONDS), bun, join(repo, "test/support/tcpClient.ts"), ...args]),
    { stdout: "pipe", stderr: "inherit" },
  );
  const out = await new Response(p.stdout).text();
  await p.exited;
  const r = JSON.parse(out.trim().split("\n").at(-1) || "{}");
  // Killed at the bound: nothing printed; counted as FAILED, with the bound as its time.
  return r.ok === undefined ? { ok: false, bytes: 0, ms: TRANSFER_SECONDS * 1000 } : r;
}

async function ours(
  relay: boolean,
  mtu: number | null = null,
): Promise<Record<"sink" | "source", { ok: boolean; bytes: number; ms: number }>> {
  const tag = relay ? "r" : mtu !== null ? "m" : "";
  // Both ends of the session take the same MTU (the proxy's stack, the host's TUN and SYN clamp).
  const mtuEnv: Record<string, string> = mtu !== null ? { BB_DEBUG_TUNNEL_MTU: String(mtu) } : {};
  const [L, H, P, G] = ["l", "h", "p", "g"].map((n) => new Netns(`bbb-px${tag}${n}-${ID}`)) as [
    Netns,
    Netns,
    Netns,
    Netns,
  ];
  spaces.push(L, H, P, G);
  veth(L, "eth0", H, "eth0");
  L.ip("addr", "add", "192.0.2.1/24", "dev", "eth0");
  H.ip("addr", "add", "192.0.2.2/24", "dev", "eth0");
  veth(P, "bbtap0", G, "eth0");
  const nft = Bun.spawnSync(P.exec(["nft", "-f", "-"]), {
    stdin: new TextEncoder().encode(
      placementRuleset({
        table: TABLE,
        tap: "bbtap0",
        guestIpv4: "10.0.0.2",
        routerIpv4: "10.0.0.1",
        resolvers: [],
        operatorRanges: [],
        hostRanges: ["100.127.0.0/16"],
      }),
    ),
  });
  if (nft.exitCode !== 0) throw new Error(`nft: ${nft.stderr}`);
  G.ip("-6", "addr", "add", `${ALLOC}/128`, "dev", "eth0", "nodad");
  G.ip("-6", "route", "add", "default", "via", "fe80::1", "dev", "eth0");
  const child = (ns: Netns, args: string[], name: string) => {
    const c = new LineChild(ns.exec([bun, ...args]), join(work, `${name}.log`), { ...process.env, ...mtuEnv });
    children.push(c);
    return c;
  };
  const issuer = new TestGrantIssuer("bench");
  const allocationId = testId("alloc");
  let relayProc: ReturnType<typeof Bun.spawn> | null = null;
  const cert = makeTestCert(work, "IP:192.0.2.2");
  if (relay) {
    const conf = join(work, "relay.json");
    writeFileSync(
      conf,
      JSON.stringify({
        relayId: "relay-1",
        listen: ["192.0.2.2:8443"],
        healthListen: "127.0.0.1:0",
        tls: { certPath: cert.certPath, keyPath: cert.keyPath },
        trustedKeys: [{ keyId: issuer.keyId, publicKey: issuer.publicKey }],
        limitCaps: { maxBytes: 1 << 30, maxBytesPerSecond: 100_000_000, idleTimeoutMs: 60_000 },
      }),
    );
    relayProc = Bun.spawn(H.exec([bun, join(repo, "bin/bb.ts"), "relay", "run", "--config", conf]), {
      stdout: "ignore",
      stderr: "ignore",
    });
    procs.push(relayProc);
    // Every WireGuard datagram between the two must take the relay.
    const block = Bun.spawnSync(L.exec(["nft", "-f", "-"]), {
      stdin: new TextEncoder().encode(
        "table ip bb_block {\n chain drop_udp { type filter hook output priority 0; policy accept; ip daddr 192.0.2.2 udp dport 51820 drop; }\n}\n",
      ),
    });
    if (block.exitCode !== 0) throw new Error(`nft: ${block.stderr}`);
  }
  const relays = relay ? [{ relayId: "relay-1", url: "wss://192.0.2.2:8443/v1/relay" }] : [];
  const iss = child(
    H,
    [
      join(repo, "test/support/grantIssuerServer.ts"),
      JSON.stringify({
        hostname: "192.0.2.2",
        port: 8080,
        token: TOKEN,
        seed: issuer.seed,
        keyId: issuer.keyId,
        relays,
      }),
    ],
    "issuer",
  );
  await iss.waitFor((e) => e.ev === "ready", 15_000, "issuer");
  if (relay) iss.send({ op: "next-grant", relays: true });
  iss.send({
    op: "allocation",
    id: allocationId,
    state: "ready",
    generation: 1,
    hostId: "host-1",
    allocationAddress: ALLOC,
  });
  const peer = Bun.spawn(G.exec([bun, join(repo, "test/support/tcpPeer.ts"), "7000", ALLOC]), {
    stdout: "pipe",
    stderr: "inherit",
  });
  procs.push(peer);
  const reader = peer.stdout.getReader();
  if (!new TextDecoder().decode((await reader.read()).value).includes("ready"))
    throw new Error("tcpPeer did not start");
  const cfg = {
    hostId: "host-1",
    dataDir: join(work, "host-data"),
    listen: { hostname: "0.0.0.0", port: 51820 },
    stunServers: [],
    issuerUrl: "http://192.0.2.2:8080",
    verificationKeys: issuer.verificationKeyText(),
    placements: [{ allocationId, generation: 1, netns: P.name, table: TABLE, tap: "bbtap0" }],
    relayCa: cert.certPath,
  };
  const ep = child(H, [join(repo, "test/support/endpointHarness.ts"), JSON.stringify(cfg)], "endpoint");
  await ep.waitFor((e) => e.ev === "ready", 15_000, "endpoint");
  await Bun.sleep(300); // its first connectivity report reaches the issuer
  const proxy = Bun.spawn(
    L.exec([bun, join(repo, "bin/bb.ts"), "proxy", allocationId, "--local-port", "2222", "--remote-port", "7000"]),
    {
      stdout: "pipe",
      stderr: "pipe",
      env: {
        ...process.env,
        NO_COLOR: "1",
        BB_SCHEDULER_URL: "http://192.0.2.2:8080",
        BB_TOKEN: TOKEN,
        BB_CONNECTION_KEYS: issuer.verificationKeyText(),
        BB_RELAY_CA: cert.certPath,
        ...mtuEnv,
      },
    },
  );
  procs.push(proxy);
  let text = "";
  void (async () => {
    for await (const c of proxy.stderr) text += new TextDecoder().decode(c);
  })();
  for (let i = 0; i < 300 && !text.includes("listening on"); i++) await Bun.sleep(50);
  if (!text.includes("listening on")) throw new Error(`bb proxy did not start: ${text}`);
  try {
    const sink = await tcpClient(L, ["sink", "127.0.0.1", "2222", String(BYTES), "11"]);
    const source = await tcpClient(L, ["source", "127.0.0.1", "2222", String(BYTES), "11"]);
    if (relay && (!/path: relay relay-1/.test(text) || text.includes("path: direct")))
      throw new Error(`the relay run did not stay on the relay path: ${text}`);
    return { sink, source };
  } finally {
    proxy.kill("SIGINT");
    await proxy.exited;
    peer.kill("SIGKILL");
    await peer.exited;
    if (relayProc) {
      relayProc.kill("SIGTERM");
      await relayProc.exited;
    }
  }
}

try {
  const w = await startWgWorld("bbpb", 86, { baseline: true });
  const base: Record<string, { ok: boolean; bytes: number; ms: number }> = {};
  try {
    for (const kind of ["sink", "source"] as const)
      base[kind] = await w.baselineClient([kind, w.server4, String(w.port), String(BYTES), "11"]);
  } finally {
    await w.close();
  }
  const runs: Array<[string, Awaited<ReturnType<typeof ours>>]> = [["direct", await ours(false)]];
  if (values.relay) runs.push(["relay ", await ours(true)]);
  const atBaselineMtu = MTU_BASELINE !== null ? await ours(false, MTU_BASELINE) : null;
  console.log(
    `bb proxy throughput, ${BYTES >> 20} MiB each way, one connection (MiB/s; ratio vs wireguard-go + kernel TCP direct, same run):`,
  );
  for (const [path, o] of runs) {
    for (const kind of ["sink", "source"] as const) {
      const a = mibps(o[kind].bytes, o[kind].ms);
      const b = mibps(base[kind]!.bytes, base[kind]!.ms);
      const dir = kind === "sink" ? "to the VM  " : "from the VM";
      console.log(
        `  ${path} ${dir} bb proxy ${a.toFixed(1).padStart(6)}${o[kind].ok ? "" : " (FAILED)"}   wireguard-go+kernel ${b.toFixed(1).padStart(6)}${base[kind]!.ok ? "" : " (FAILED)"}   ratio ${(a / b).toFixed(2)}`,
      );
    }
  }
  if (atBaselineMtu) {
    console.log(`bb proxy direct at tunnel MTU ${TUNNEL_MTU} against MTU ${MTU_BASELINE} (same run, MiB/s):`);
    const direct = runs[0]![1];
    for (const kind of ["sink", "source"] as const) {
      const a = mibps(direct[kind].bytes, direct[kind].ms);
      const b = mibps(atBaselineMtu[kind].bytes, atBaselineMtu[kind].ms);
      const dir = kind === "sink" ? "to the VM  " : "from the VM";
      console.log(
        `  ${dir} MTU ${TUNNEL_MTU} ${a.toFixed(1).padStart(6)}${direct[kind].ok ? "" : " (FAILED)"}   MTU ${MTU_BASELINE} ${b.toFixed(1).padStart(6)}${atBaselineMtu[kind].ok ? "" : " (FAILED)"}   ratio ${(a / b).toFixed(2)}`,
      );
    }
  }
} finally {
  for (const c of children.reverse()) await c.stop(5_000).catch(() => {});
  for (const n of spaces.reverse()) n.delete();
  rmSync(work, { recursive: true, force: true });
}
