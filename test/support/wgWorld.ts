/**
 * The full tunnel path for tests and benchmarks, in namespaces of the caller's own:
 *
 *   NAME-a-PID: wgNetstackClient.ts (our TCP/IP stack + our WireGuard on UDP
 *     192.0.2.1:51821; tunnel addresses 10.O.0.1, fdO::1)
 *       ─ veth 192.0.2.1/24 ⇄ 192.0.2.2/24 ─
 *   NAME-b-PID: Debian's wireguard-go (configured by `wg`) on TUN, UDP 51820,
 *     tunnel 10.O.0.2/24, fdO::2/64; the kernel TCP server tcpPeer.ts on port 7000
 *   NAME-c-PID (with `baseline`): a second wireguard-go as a client of the one in b
 *     (veth 198.51.100.1/24 ⇄ .2, tunnel 10.O.0.3, fdO::3), where tcpClient.ts
 *     runs kernel TCP through it: the wireguard-go + kernel TCP baseline.
 *
 * (O is the `octet` argument.) With `impair`, the veth between a and b is
 * impaired both ways by `tc netem` on each end when the kernel has the qdisc,
 * otherwise by the userspace Impairment on the client's UDP datagrams (both
 * ways); `impairedBy` says which, with the reason for the fallback.
 * Nothing is routed outside these namespaces;
 * `close()` ends every process it started by PID and deletes the namespaces.
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { systemRandom } from "../../src/wireguard/ports.ts";
import { keyPairFromPrivate } from "../../src/wireguard/x25519.ts";
import type { ImpairmentOptions } from "./impairment.ts";
import { LineChild } from "./lineChild.ts";
import { netemMissingReason, netemQdiscArgs } from "./netem.ts";
import { Netns, must } from "./netns.ts";

const support = resolve(import.meta.dir);
const bun = process.execPath;
const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64");
const newKey = () => keyPairFromPrivate(systemRandom.fill(new Uint8Array(32)));

/** Why the full path cannot run here, or null. */
export function wgWorldSkipReason(): string | null {
  if (process.getuid?.() !== 0) return "needs root (network namespaces, TUN)";
  const missing = ["ip", "wg", "wireguard-go"].filter((c) => !Bun.which(c));
  if (missing.length) return `missing ${missing.join(", ")} (apt-get install -y iproute2 wireguard-tools wireguard-go)`;
  if (!existsSync("/dev/net/tun")) return "no /dev/net/tun";
  return null;
}

/** A running world; see the module comment. */
export interface WgWorld {
  a: Netns;
  b: Netns;
  c: Netns | null;
  /** Our client (LineChild speaking wgNetstackClient.ts's protocol). */
  client: LineChild;
  /** The server's tunnel addresses and port. */
  server4: string;
  server6: string;
  port: number;
  /** How the link is impaired: "none", "netem", or "userspace (REASON netem could not be used)". */
  impairedBy: string;
  /** Runs `tcpClient.ts ARGS…` in namespace c (baseline) and returns its JSON result. */
  baselineClient(args: string[]): Promise<{ ok: boolean; bytes: number; ms: number }>;
  close(): Promise<void>;
}

interface WgGo {
  proc: ReturnType<typeof Bun.spawn>;
  iface: string;
}

async function startWireguardGo(ns: Netns, iface: string, work: string): Promise<WgGo> {
  const log = join(work, `${iface}.log`);
  const env = { ...process.env, WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD: "1", LOG_LEVEL: "error" };
  const proc = Bun.spawn(ns.exec(["wireguard-go", "-f", iface]), { stdout: Bun.file(log), stderr: Bun.file(log), env });
  const sock = `/var/run/wireguard/${iface}.sock`;
  for (let i = 0; i < 100 && !existsSync(sock); i++) await Bun.sleep(50);
  if (!existsSync(sock)) throw new Error(`wireguard-go did not create ${sock}`);
  return { proc, iface };
}

async function stopWireguardGo(w: WgGo): Promise<void> {
  if (w.proc.exitCode === null) {
    w.proc.kill("SIGTERM");
    const t = setTimeout(() => w.proc.kill("SIGKILL"), 3_000);
    await w.proc.exited;
    clearTimeout(t);
  }
  rmSync(`/var/run/wireguard/${w.iface}.sock`, { force: true });
}

/**
 * Builds the world; `name` prefixes namespaces and interfaces (unique per caller), `octet` picks the tunnel subnets.
 * `clientBunArgs` go to the client's bun (e.g. --cpu-prof-md for a profile).
 */
export async function startWgWorld(
  name: string,
  octet: number,
  opts: { baseline?: boolean; impair?: ImpairmentOptions; clientBunArgs?: string[] } = {},
): Promise<WgWorld> {
  const pid = process.pid;
  const work = mkdtempSync(join(tmpdir(), `${name}-`));
  const namespaces: Netns[] = [];
  const wgs: WgGo[] = [];
  const children: LineChild[] = [];
  let tcpPeer: ReturnType<typeof Bun.spawn> | null = null;
  const cleanup = async () => {
    for (const ch of children) {
      ch.proc.stdin.end();
      const t = setTimeout(() => ch.proc.kill("SIGKILL"), 3_000);
      await ch.proc.exited;
      clearTimeout(t);
    }
    tcpPeer?.kill("SIGKILL");
    await tcpPeer?.exited;
    for (const w of wgs) await stopWireguardGo(w);
    for (const n of namespaces) n.delete();
    rmSync(work, { recursive: true, force: true });
  };
  try {
    const ours = newKey();
    const server = newKey();
    const a = new Netns(`${name}-a-${pid}`);
    namespaces.push(a);
    const b = new Netns(`${name}-b-${pid}`);
    namespaces.push(b);
    must([
      "ip",
      "-n",
      a.name,
      "link",
      "add",
      `${name}a0`,
      "type",
      "veth",
      "peer",
      "name",
      `${name}b0`,
      "netns",
      b.name,
    ]);
    a.ip("addr", "add", "192.0.2.1/24", "dev", `${name}a0`);
    a.ip("link", "set", `${name}a0`, "up");
    b.ip("addr", "add", "192.0.2.2/24", "dev", `${name}b0`);
    b.ip("link", "set", `${name}b0`, "up");

    let impairedBy = "none";
    let impairClient: ImpairmentOptions | undefined;
    if (opts.impair) {
      const missing = netemMissingReason(`${name}-p-${pid}`);
      if (missing === null) {
        must(a.exec(netemQdiscArgs(`${name}a0`, opts.impair)));
        must(b.exec(netemQdiscArgs(`${name}b0`, opts.impair)));
        impairedBy = "netem";
      } else {
        impairClient = opts.impair;
        impairedBy = `userspace (${missing})`;
      }
    }

    const server4 = `10.${octet}.0.2`;
    const server6 = `fd${octet}::2`;
    const ifB = `${name}g${pid}`.slice(0, 15);
    const wgB = await startWireguardGo(b, ifB, work);
    wgs.push(wgB);
    const keyB = join(work, "b.key");
    writeFileSync(keyB, b64(server.privateKey) + "\n", { mode: 0o600 });
    must(
      b.exec([
        "wg",
        "set",
        ifB,
        "private-key",
        keyB,
        "listen-port",
        "51820",
        "peer",
        b64(ours.publicKey),
        "allowed-ips",
        `10.${octet}.0.1/32,fd${octet}::1/128`,
        "endpoint",
        "192.0.2.1:51821",
      ]),
    );
    b.ip("addr", "add", `${server4}/24`, "dev", ifB);
    b.ip("-6", "addr", "add", `${server6}/64`, "dev", ifB, "nodad");
    b.ip("link", "set", ifB, "up");
    const tp = Bun.spawn(b.exec([bun, join(support, "tcpPeer.ts"), "7000", server4, server6]), {
      stdout: "pipe",
      stderr: "inherit",
    });
    tcpPeer = tp;
    const reader = tp.stdout.getReader();
    if (!new TextDecoder().decode((await reader.read()).value).includes("ready"))
      throw new Error("tcpPeer did not start");
    reader.releaseLock();
    void tp.stdout.pipeTo(new WritableStream());

    let c: Netns | null = null;
    if (opts.baseline) {
      const base = newKey();
      c = new Netns(`${name}-c-${pid}`);
      namespaces.push(c);
      must([
        "ip",
        "-n",
        c.name,
        "link",
        "add",
        `${name}c0`,
        "type",
        "veth",
        "peer",
        "name",
        `${name}b1`,
        "netns",
        b.name,
      ]);
      c.ip("addr", "add", "198.51.100.1/24", "dev", `${name}c0`);
      c.ip("link", "set", `${name}c0`, "up");
      b.ip("addr", "add", "198.51.100.2/24", "dev", `${name}b1`);
      b.ip("link", "set", `${name}b1`, "up");
      must(
        b.exec([
          "wg",
          "set",
          ifB,
          "peer",
          b64(base.publicKey),
          "allowed-ips",
          `10.${octet}.0.3/32,fd${octet}::3/128`,
          "endpoint",
          "198.51.100.1:51820",
        ]),
      );
      const ifC = `${name}h${pid}`.slice(0, 15);
      wgs.push(await startWireguardGo(c, ifC, work));
      const keyC = join(work, "c.key");
      writeFileSync(keyC, b64(base.privateKey) + "\n", { mode: 0o600 });
      must(
        c.exec([
          "wg",
          "set",
          ifC,
          "private-key",
          keyC,
          "listen-port",
          "51820",
          "peer",
          b64(server.publicKey),
          "allowed-ips",
          `10.${octet}.0.0/24,fd${octet}::/64`,
          "endpoint",
          "198.51.100.2:51820",
        ]),
      );
      c.ip("addr", "add", `10.${octet}.0.3/24`, "dev", ifC);
      c.ip("-6", "addr", "add", `fd${octet}::3/64`, "dev", ifC, "nodad");
      c.ip("link", "set", ifC, "up");
    }

    const cfg = {
      privateKey: b64(ours.privateKey),
      listen: { address: "192.0.2.1", port: 51821 },
      peer: {
        publicKey: b64(server.publicKey),
        endpoint: { address: "192.0.2.2", port: 51820 },
        allowedIps: [`10.${octet}.0.0/24`, `fd${octet}::/64`],
      },
      stack: { ipv4: { address: `10.${octet}.0.1`, prefixLength: 24 }, ipv6: [`fd${octet}::1`] },
      ...(impairClient ? { impair: impairClient } : {}),
    };
    const client = new LineChild(
      a.exec([bun, ...(opts.clientBunArgs ?? []), join(support, "wgNetstackClient.ts"), JSON.stringify(cfg)]),
      join(work, "client.log"),
    );
    children.push(client);
    await client.waitFor((e) => e.ev === "ready", 20_000, "wgNetstackClient ready");
    const cNs = c;
    return {
      a,
      b,
      c,
      client,
      server4,
      server6,
      port: 7000,
      impairedBy,
      async baselineClient(args) {
        if (!cNs) throw new Error("world started without baseline");
        const p = Bun.spawn(cNs.exec([bun, join(support, "tcpClient.ts"), ...args]), {
          stdout: "pipe",
          stderr: "pipe",
        });
        const [out, err, code] = await Promise.all([
          new Response(p.stdout).text(),
          new Response(p.stderr).text(),
          p.exited,
        ]);
        if (code !== 0) throw new Error(`tcpClient ${args.join(" ")} exited ${code}: ${err}`);
        return JSON.parse(out.trim().split("\n").pop()!);
      },
      close: cleanup,
    };
  } catch (e) {
    await cleanup();
    throw e;
  }
}

/** Runs jobs in the client and returns its "done" event. */
export async function runJobs(
  w: WgWorld,
  jobs: { kind: "sink" | "source" | "echo"; host: string; bytes: number; seed: number }[],
  timeoutMs: number,
): Promise<{
  ms: number;
  cpuMs: number;
  results: { kind: string; host: string; bytes: number; ms: number; ok: boolean; error?: string }[];
}> {
  const from = w.client.events.length;
  w.client.send({ op: "run", jobs: jobs.map((j) => ({ ...j, port: w.port })) });
  const done = await w.client.waitFor((e) => e.ev === "done", timeoutMs, "jobs done", from);
  return done as unknown as {
    ms: number;
    cpuMs: number;
    results: { kind: string; host: string; bytes: number; ms: number; ok: boolean; error?: string }[];
  };
}

/** The client's counters. */
export async function clientStats(w: WgWorld): Promise<Record<string, unknown>> {
  const from = w.client.events.length;
  w.client.send({ op: "stats" });
  return w.client.waitFor((e) => e.ev === "stats", 10_000, "stats", from);
}
