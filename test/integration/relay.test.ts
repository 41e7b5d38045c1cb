/**
 * `bb relay run` on loopback with TLS (a self-signed certificate made with
 * openssl): real WireGuard traffic between two src/wireguard Devices
 * through the relay over WebSocket and QUIC, refusals as the clients see
 * them, limits, the health endpoint, and the relay as a subprocess that
 * writes no file (strace).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, readFileSync, rmSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { randomBytes } from "node:crypto";
import type { RelayRole, RelayTokenPayload } from "../../src/protocol/connection.ts";
import { startRelay, type RunningRelay } from "../../src/relay/server.ts";
import { grantId, makeSigner, TEST_LIMITS, tokenPayload } from "../../src/relay/testing.ts";
import {
  connectRelay,
  connectRelayQuic,
  RelayConnectError,
  relayConnector,
  type RelayTransport,
} from "../../src/relayclient/index.ts";
import { selectAead, type Aead } from "../../src/wireguard/index.ts";
import { udp4, parseUdp4 } from "../support/packets.ts";
import {
  isWireGuardMessage,
  makeTestCert,
  relayConfig,
  relayConfigFile,
  relayedPair,
  waitFor,
  writeRelayConfig,
} from "../support/relay.ts";

const signer = makeSigner("conn-test");
let dir: string;
let cert: ReturnType<typeof makeTestCert>;
let relay: RunningRelay;
let aead: Aead;
const frames: Uint8Array[] = [];
let grantSeq = 100;

const token = (role: RelayRole, grant: string, over: Partial<RelayTokenPayload> = {}) =>
  signer.sign(tokenPayload("relay-test", role, grant, Date.now(), over));

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "bb-relay-it-"));
  cert = makeTestCert(dir);
  aead = (await selectAead()).aead;
  relay = await startRelay({
    config: relayConfig(signer, cert, { quicListen: "127.0.0.1:0" }),
    observeFrame: (f) => frames.push(f.slice()),
  });
});

afterAll(async () => {
  await relay?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** Client and host connections for a fresh grant, over the given transports, each feeding a relayed Device. */
async function tunnel(clientOver: "ws" | "quic", hostOver: "ws" | "quic") {
  const grant = grantId(grantSeq++);
  const { a, b } = relayedPair(aead);
  const open = (over: "ws" | "quic", role: RelayRole, onDatagram: (d: Uint8Array) => void) =>
    over === "ws"
      ? connectRelay({ url: relay.urls[0]!, token: token(role, grant), ca: cert.cert, onDatagram })
      : connectRelayQuic({
          address: relay.quic!,
          servername: "localhost",
          token: token(role, grant),
          ca: cert.cert,
          onDatagram,
        });
  const ct = await open(clientOver, "client", (d) => a.receive(d));
  const ht = await open(hostOver, "host", (d) => b.receive(d));
  a.attach(ct);
  b.attach(ht);
  return { a, b, ct, ht, grant, close: () => (a.stop(), b.stop(), ct.close(), ht.close()) };
}

/** Sends a marker inside the tunnel both ways and returns it after checking it arrived decrypted. */
async function exchange(t: Awaited<ReturnType<typeof tunnel>>): Promise<Uint8Array> {
  const marker = new TextEncoder().encode(`BEACHBALL-TUNNEL-MARKER-${randomBytes(8).toString("hex")}`);
  t.a.sendPacket(udp4("10.0.0.1", 4000, "10.0.0.2", 5000, marker));
  await waitFor(() => t.b.delivered.length > 0, "the client's packet at the host");
  t.b.sendPacket(udp4("10.0.0.2", 5000, "10.0.0.1", 4000, marker));
  await waitFor(() => t.a.delivered.length > 0, "the host's packet at the client");
  expect(parseUdp4(t.b.delivered[0]!)?.payload).toEqual(marker);
  expect(parseUdp4(t.a.delivered[0]!)?.payload).toEqual(marker);
  return marker;
}

const contains = (hay: Uint8Array, needle: Uint8Array) => Buffer.from(hay).indexOf(Buffer.from(needle)) !== -1;

describe("WireGuard through the relay", () => {
  test("over wss: a handshake and packets both ways; the relay handles only WireGuard messages and never the marker's plaintext", async () => {
    const from = frames.length;
    const t = await tunnel("ws", "ws");
    expect([t.ct.paired, t.ht.paired]).toEqual([true, true]);
    const marker = await exchange(t);
    const seen = frames.slice(from);
    expect(seen.length).toBeGreaterThanOrEqual(4); // initiation, response, and a transport message each way
    expect(seen.filter((f) => !isWireGuardMessage(f))).toEqual([]);
    expect(seen.some((f) => contains(f, marker))).toBe(false);
    // The capture would catch plaintext: a raw datagram carrying the marker is seen as sent.
    t.ct.send(marker);
    await waitFor(() => frames.length > from + seen.length, "the raw datagram at the relay");
    expect(frames.slice(from).some((f) => contains(f, marker))).toBe(true);
    t.close();
  });

  test("over QUIC (length-prefixed frames on one stream) for one side and wss for the other: the same tunnel works", async () => {
    const from = frames.length;
    const t = await tunnel("quic", "ws");
    const marker = await exchange(t);
    const seen = frames.slice(from);
    expect(seen.filter((f) => !isWireGuardMessage(f))).toEqual([]);
    expect(seen.some((f) => contains(f, marker))).toBe(false);
    const q = await tunnel("quic", "quic");
    await exchange(q);
    t.close();
    q.close();
  });
});

describe("the roles' connector (src/relayclient relayConnector)", () => {
  const ca = () => cert.cert;
  const pair = async (entry: { relayId: string; url: string; quic?: string }) => {
    const grant = grantId(grantSeq++);
    const got: Uint8Array[] = [];
    const connect = relayConnector({ ca: ca(), timeoutMs: 3_000 });
    const c = await connect(entry, token("client", grant), () => {});
    const h = await connect({ relayId: entry.relayId, url: relay.urls[0]! }, token("host", grant), (d) => got.push(d));
    await waitFor(() => c.paired && h.paired, "paired");
    const msg = new Uint8Array(64).fill(7);
    msg.set([4, 0, 0, 0]);
    expect(c.send(msg)).toBe(true);
    await waitFor(() => got.length === 1, "the datagram at the host");
    c.close();
    h.close();
  };

  test("QUIC when the entry names a quic address (the WebSocket URL here leads nowhere)", async () => {
    // The TLS server name comes from the URL's host (QUIC verifies a DNS name, not an IP address).
    await pair({ relayId: "relay-test", url: "wss://localhost:1/v1/relay", quic: relay.quic! });
  });

  test("falls back to the WebSocket when the quic address does not answer", async () => {
    await pair({ relayId: "relay-test", url: relay.urls[0]!, quic: "127.0.0.1:9" });
  });

  test("a refusal over QUIC is not retried over the WebSocket", async () => {
    const t = token("client", grantId(grantSeq++));
    // The WebSocket URL leads nowhere: a retry there would fail with 1006, not the relay's code.
    const p = relayConnector({ ca: ca() })(
      { relayId: "relay-test", url: "wss://localhost:1/v1/relay", quic: relay.quic! },
      { ...t, payload: { ...t.payload, role: "host" } },
      () => {},
    );
    const e = await p.then(
      () => null,
      (e: unknown) => e,
    );
    expect(e).toBeInstanceOf(RelayConnectError);
    expect((e as RelayConnectError).close.code).toBe("RELAY_TOKEN_INVALID");
  });
});

describe("refusals as a client sees them", () => {
  const refusal = async (p: Promise<RelayTransport>) => {
    try {
      const t = await p;
      t.close();
      return "accepted";
    } catch (e) {
      if (!(e instanceof RelayConnectError)) throw e;
      return `${e.close.code} ${e.close.closeCode}`;
    }
  };
  const ws = (tok: unknown) =>
    connectRelay({ url: relay.urls[0]!, token: tok as never, ca: cert.cert, onDatagram: () => {} });

  test("tampered, expired, wrong relay, untrusted key, limits over the caps: each closes with its stable code and 4000+status", async () => {
    const grant = grantId(grantSeq++);
    const t = token("client", grant);
    expect(await refusal(ws({ ...t, payload: { ...t.payload, role: "host" } }))).toBe("RELAY_TOKEN_INVALID 4401");
    expect(
      await refusal(ws(token("client", grant, { issuedAtMs: Date.now() - 120_000, expiresAtMs: Date.now() - 60_000 }))),
    ).toBe("RELAY_TOKEN_EXPIRED 4401");
    expect(await refusal(ws(signer.sign(tokenPayload("relay-other", "client", grant, Date.now()))))).toBe(
      "RELAY_TOKEN_WRONG_RELAY 4403",
    );
    expect(await refusal(ws(makeSigner(signer.keyId).sign(t.payload)))).toBe("RELAY_TOKEN_INVALID 4401");
    expect(
      await refusal(ws(token("client", grant, { limits: { ...TEST_LIMITS, maxBytesPerSecond: 100_000_001 } }))),
    ).toBe("RELAY_LIMITS_OVER_CAP 4403");
    expect(relay.hub.counters.sessions).toBe(0);
  });

  test("over QUIC a refusal carries the same code", async () => {
    const t = token("client", grantId(grantSeq++));
    const p = connectRelayQuic({
      address: relay.quic!,
      servername: "localhost",
      token: { ...t, payload: { ...t.payload, role: "host" } },
      ca: cert.cert,
      onDatagram: () => {},
    });
    expect(await refusal(p)).toBe("RELAY_TOKEN_INVALID 4401");
  });

  test("a third party with a valid token for a role of a live pair is refused RELAY_PAIR_TAKEN; the pair keeps working", async () => {
    const t = await tunnel("ws", "ws");
    await exchange(t);
    expect(await refusal(ws(token("client", t.grant)))).toBe("RELAY_PAIR_TAKEN 4409");
    t.a.delivered.length = 0;
    t.b.delivered.length = 0;
    await exchange(t);
    t.close();
  });

  test("a client that does not trust the relay's certificate does not connect", async () => {
    const p = connectRelay({ url: relay.urls[0]!, token: token("client", grantId(grantSeq++)), onDatagram: () => {} });
    expect(await refusal(p)).toBe("null 1006");
  });
});

describe("limits and health", () => {
  test("a pair whose maxBytes runs out is closed with RELAY_BYTES_EXHAUSTED on both sides", async () => {
    const grant = grantId(grantSeq++);
    const limits = { ...TEST_LIMITS, maxBytes: 10_000 };
    const got: number[] = [];
    const c = await connectRelay({
      url: relay.urls[0]!,
      token: token("client", grant, { limits }),
      ca: cert.cert,
      onDatagram: () => {},
    });
    const h = await connectRelay({
      url: relay.urls[0]!,
      token: token("host", grant, { limits }),
      ca: cert.cert,
      onDatagram: (d) => got.push(d.length),
    });
    for (let i = 0; i < 8; i++) c.send(new Uint8Array(1400));
    const [cc, hc] = await Promise.all([c.closed, h.closed]);
    expect([cc.code, hc.code, cc.closeCode]).toEqual(["RELAY_BYTES_EXHAUSTED", "RELAY_BYTES_EXHAUSTED", 4429]);
    expect(got).toEqual([1400, 1400, 1400, 1400, 1400, 1400, 1400]);
  });

  test("the health endpoint shows liveness and counters, and nothing that names a grant", async () => {
    const res = await fetch(`${relay.healthUrl}/healthz`);
    expect(res.status).toBe(200);
    const body = (await res.json()) as { status: string; relayId: string; counters: Record<string, unknown> };
    expect(body).toMatchObject({ status: "ok", relayId: "relay-test" });
    expect(body.counters["framesForwarded"]).toBeGreaterThan(0);
    const metrics = await (await fetch(`${relay.healthUrl}/metrics`)).text();
    expect(metrics).toMatch(/^bb_relay_frames_forwarded_total \d+$/m);
    expect(metrics).toMatch(/bb_relay_closes_total\{code="RELAY_PAIR_TAKEN"\} [1-9]/);
    expect(`${JSON.stringify(body)}${metrics}`).not.toMatch(/grt_/);
  });
});

describe("bb relay run as a process", () => {
  const strace = Bun.which("strace");
  test.skipIf(!strace)(
    "starts from its config, relays, stops on SIGTERM with exit 0, writes no file and opens no file in its directory but its config and TLS files (strace; empty HOME and cwd)",
    async () => {
      const work = join(dir, "proc");
      const home = join(work, "home");
      const cwd = join(work, "cwd");
      mkdirSync(home, { recursive: true });
      mkdirSync(cwd, { recursive: true });
      const configPath = writeRelayConfig(dir, relayConfigFile(signer, cert));
      const trace = join(dir, "strace.log");
      const proc = Bun.spawn(
        [
          strace!,
          "-f",
          "-qq",
          "-e",
          "trace=open,openat,creat,mkdir,mkdirat,rename,renameat,renameat2,unlink,unlinkat,link,linkat,symlink,symlinkat,truncate",
          "-o",
          trace,
          resolve("node_modules/.bin/bun"),
          resolve("bin/bb.ts"),
          "relay",
          "run",
          "--config",
          configPath,
        ],
        // Bun caches transpiled sources under $HOME when running from source; the compiled `bb` has nothing to transpile.
        {
          cwd,
          env: {
            PATH: process.env["PATH"] ?? "/usr/bin:/bin",
            HOME: home,
            NO_COLOR: "1",
            BUN_RUNTIME_TRANSPILER_CACHE_PATH: "0",
          },
          stdout: "pipe",
          stderr: "pipe",
        },
      );
      try {
        let out = "";
        // Messages go to stderr (results alone go to stdout; src/command/main.ts).
        const reader = proc.stderr.getReader();
        while (!/relay listening .*urls=([^,\s]+)\S* health=(\S+)/.test(out)) {
          const { value, done } = await reader.read();
          if (done) throw new Error(`relay exited: ${out}${await new Response(proc.stdout).text()}`);
          out += new TextDecoder().decode(value);
        }
        reader.releaseLock();
        const [, url, health] = /relay listening .*urls=([^,\s]+)\S* health=(\S+)/.exec(out)!;
        const grant = grantId(grantSeq++);
        const got: Uint8Array[] = [];
        const c = await connectRelay({ url: url!, token: token("client", grant), ca: cert.cert, onDatagram: () => {} });
        const h = await connectRelay({
          url: url!,
          token: token("host", grant),
          ca: cert.cert,
          onDatagram: (d) => got.push(d),
        });
        c.send(Uint8Array.of(4, 0, 0, 0, 9, 9));
        await waitFor(() => got.length === 1, "a datagram through the relay process");
        expect((await fetch(health!)).status).toBe(200);
        // strace detaches on SIGTERM: signal the relay itself, strace's child.
        const relayPid = Number(
          readFileSync(`/proc/${proc.pid}/task/${proc.pid}/children`, "utf8").trim().split(/\s+/)[0],
        );
        expect(relayPid).toBeGreaterThan(0);
        process.kill(relayPid, "SIGTERM");
        const [cc] = await Promise.all([c.closed, h.closed]);
        expect(cc.code).toBe("SHUTTING_DOWN");
        expect(await proc.exited).toBe(0);
      } finally {
        proc.kill("SIGKILL");
        await proc.exited;
      }
      expect(readdirSync(home)).toEqual([]);
      expect(readdirSync(cwd)).toEqual([]);
      const writes = readFileSync(trace, "utf8")
        .split("\n")
        .filter(
          (l) =>
            /\b(open|openat|creat)\(.*(O_WRONLY|O_RDWR|O_CREAT|O_TRUNC)/.test(l) ||
            /\b(mkdir|mkdirat|rename|renameat2?|unlink|unlinkat|link|linkat|symlink|symlinkat|truncate)\(/.test(l),
        )
        .filter((l) => !/"\/dev\/(null|tty|pts\/\d+)"/.test(l) && !/= -1 E/.test(l));
      expect(writes).toEqual([]);
      // It reads what it is given and no other file there: its config and the TLS files the config names
      // (directories are opened too, by Bun's module resolution walking up from the cwd).
      const opened = new Set(
        readFileSync(trace, "utf8")
          .split("\n")
          .filter((l) => !l.includes("O_DIRECTORY"))
          .flatMap((l) => [...(/\bopen(?:at)?\((?:[^,]+, )?"([^"]+)"[^=]*= \d+/.exec(l)?.slice(1) ?? [])])
          .filter((p) => p.startsWith(dir)),
      );
      expect([...opened].sort()).toEqual([configPath, cert.certPath, cert.keyPath].sort());
    },
    30_000,
  );
});
