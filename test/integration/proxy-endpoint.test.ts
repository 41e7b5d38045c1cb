/**
 * bb proxy's session against the real host endpoint, in one process on
 * loopback, no root: the test grant issuer (test/support, standing in for the
 * scheduler's grant route) over HTTP, the host endpoint with a placement link
 * that is a second userspace TCP/IP stack (the "guest", echoing on port 22),
 * and runProxy forwarding a local port; openControlChannel (the same path
 * for the guest's control port 7390) reached by plain fetch. The kernel path (TUN in a placement
 * namespace, nftables) is test/integration/proxy-netns.test.ts. It pairs two
 * roles (proxy and agent), so it lives here, not beside either. A STUN
 * server on loopback answers as a NAT would (127.0.0.2, the port it saw).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash, randomBytes } from "node:crypto";
import { createConnection } from "node:net";
import { TestGrantIssuer, testId } from "../support/grantIssuer.ts";
import { IssuerState, startIssuerServer } from "../support/grantIssuerServer.ts";
import { HostEndpoint } from "../../src/agent/endpoint/endpoint.ts";
import type { PlacementTarget } from "../../src/agent/endpoint/grantCheck.ts";
import type { PlacementLinkPort } from "../../src/agent/endpoint/placementLink.ts";
import { SchedulerClient } from "../../src/client/index.ts";
import { createNetstack, type Netstack } from "../../src/netstack/index.ts";
import { BeachballError } from "../../src/protocol/errors.ts";
import { startLoopbackStun } from "../support/loopbackStun.ts";
import { keyPairFromPrivate, selectAead, systemSuspendAwareClock, systemRandom } from "../../src/wireguard/index.ts";
import { runProxy, type ProxyOptions } from "../../src/proxy/session.ts";
import { openControlChannel } from "../../src/proxy/controlChannel.ts";
import { CONTROL_GRANT_HEADER, GUEST_CONTROL_PORT } from "../../src/protocol/control.ts";
import { checkSignedGrant } from "../../src/protocol/connectionSignature.ts";
import { canonicalJson } from "../../src/protocol/canonical.ts";

const ALLOC_ADDR = "fd00:bb:1:2::2";
const TOKEN = "test-token";
const issuer = new TestGrantIssuer();
const state = new IssuerState(issuer);
const { aead } = await selectAead();
const server = startIssuerServer({ hostname: "127.0.0.1", port: 0, token: TOKEN, state });
const client = new SchedulerClient(`http://127.0.0.1:${server.port}`, TOKEN);
const placements = new Map<string, PlacementTarget>();
let endpoint: HostEndpoint;
let pollTimer: ReturnType<typeof setInterval>;

/** The placement link: packets go into the guest stack and its output comes back out. */
const links: PlacementLinkPort = {
  async open(_t, onPackets) {
    let up = true;
    const guest: Netstack = createNetstack({
      ipv6: [ALLOC_ADDR],
      output: (p) => up && queueMicrotask(() => onPackets([p.slice()])),
    });
    guest.listen(ALLOC_ADDR, 22, (c) => {
      void (async () => {
        for (;;) {
          const chunk = await c.read().catch(() => null);
          if (chunk === null) break;
          await c.write(chunk).catch(() => {});
        }
        await c.closeWrite().catch(() => {});
      })();
    });
    // A stand-in for the guest's control service: answers one HTTP request with the grant header it was sent.
    guest.listen(ALLOC_ADDR, GUEST_CONTROL_PORT, (c) => {
      void (async () => {
        let head = "";
        while (!head.includes("\r\n\r\n")) {
          const chunk = await c.read().catch(() => null);
          if (chunk === null) return c.abort();
          head += Buffer.from(chunk).toString("latin1");
        }
        const line = head.split("\r\n").find((l) => l.toLowerCase().startsWith(`${CONTROL_GRANT_HEADER}:`));
        const body = line ? line.slice(CONTROL_GRANT_HEADER.length + 1).trim() : "";
        await c
          .write(Buffer.from(`HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`))
          .catch(() => {});
        await c.closeWrite().catch(() => {});
      })();
    });
    return {
      write: (p) => guest.input(p),
      configure: async () => {},
      close: async () => {
        up = false;
        guest.close();
      },
      stats: () => ({ packetsIn: 0, packetsOut: 0, writesDropped: 0 }),
    };
  },
};

beforeAll(async () => {
  endpoint = await HostEndpoint.start({
    hostId: "host-1",
    keyPair: keyPairFromPrivate(systemRandom.fill(new Uint8Array(32))),
    verificationKeys: issuer.verificationKeys(),
    listen: { hostname: "127.0.0.1", port: 0 },
    stunServers: [],
    clock: systemSuspendAwareClock,
    random: systemRandom,
    aead,
    placements: { byAllocation: (id) => placements.get(id) ?? null },
    links,
    interfaces: () => ({}),
  });
  state.hosts.set("host-1", {
    hostPublicKey: endpoint.publicKey,
    candidates: [{ address: "127.0.0.1", port: endpoint.port, kind: "local" }],
  });
  // The host side of the agent protocol, in miniature: apply commands in order.
  let after = 0;
  let busy = false;
  pollTimer = setInterval(async () => {
    if (busy) return;
    busy = true;
    for (const c of state.commands.filter((x) => x.seq > after)) {
      after = c.seq;
      await endpoint.configure(c.command);
      const conn = endpoint.connectivity();
      state.report(
        conn.appliedGrants.map((g) => g.grantId),
        conn.refusedGrants.map((g) => g.grantId),
      );
    }
    busy = false;
  }, 20);
});

afterAll(async () => {
  clearInterval(pollTimer);
  await endpoint.close();
  server.stop(true);
});

function allocation(generation = 1): string {
  const id = testId("alloc");
  state.allocations.set(id, { state: "ready", generation, hostId: "host-1", allocationAddress: ALLOC_ADDR });
  placements.set(id, { allocationId: id, generation, netns: `bb-${id.slice(6, 18)}`, table: "bb_t", tap: "bbtap0" });
  return id;
}

function start(allocationId: string, extra: Partial<ProxyOptions> = {}) {
  const stop = new AbortController();
  const lines: string[] = [];
  let ready!: (i: { port: number; grantId: string }) => void;
  const readyP = new Promise<{ port: number; grantId: string }>((r) => (ready = r));
  const done = runProxy(
    {
      client,
      allocationId,
      localPort: 0,
      remotePort: 22,
      keys: issuer.verificationKeys(),
      clock: systemSuspendAwareClock,
      random: systemRandom,
      aead,
      // No interface addresses: the host would probe this machine's own ones (only loopback traffic here).
      interfaces: () => ({}),
      log: (l) => lines.push(l),
      onReady: (i) => ready({ port: i.port, grantId: i.grant.grant.grantId }),
      ...extra,
    },
    stop.signal,
  );
  const readyOrEnd = Promise.race([readyP, done.then(() => Promise.reject(new Error("ended early")))]);
  readyOrEnd.catch(() => {}); // tests that only look at `done` never await it
  done.catch(() => {});
  return { stop, done, ready: readyOrEnd, lines };
}

async function echo(port: number, bytes: number): Promise<boolean> {
  const data = randomBytes(bytes);
  const want = createHash("sha256").update(data).digest("hex");
  return new Promise((resolve, reject) => {
    const h = createHash("sha256");
    let n = 0;
    const s = createConnection({ host: "127.0.0.1", port, allowHalfOpen: true }, () => s.end(data));
    s.on("data", (d) => ((n += d.length), h.update(d)));
    s.on("end", () => resolve(n === bytes && h.digest("hex") === want));
    s.on("error", reject);
  });
}

const codeOf = async (p: Promise<unknown>) => {
  try {
    await p;
    return "ok";
  } catch (e) {
    return e instanceof BeachballError ? e.code : String(e);
  }
};

describe("bb proxy session (loopback, userspace guest)", () => {
  test("a local connection reaches the guest byte-exact, several at once; the grant is revoked when the proxy stops", async () => {
    const p = start(allocation());
    const { port, grantId } = await p.ready;
    const results = await Promise.all([echo(port, 2 << 20), echo(port, 300_000), echo(port, 1)]);
    expect(results).toEqual([true, true, true]);
    expect(endpoint.connectivity().appliedGrants.map((g) => g.grantId)).toContain(grantId);
    p.stop.abort();
    await p.done;
    expect(p.lines.some((l) => l.includes(`grant ${grantId} revoked`))).toBe(true);
    for (let i = 0; i < 100 && endpoint.connectivity().appliedGrants.length; i++) await Bun.sleep(20);
    expect(endpoint.connectivity().appliedGrants).toEqual([]);
  }, 30_000);

  test("the deployment's STUN servers (grant response): the proxy asks them from its tunnel socket and the host learns that mapping as a candidate", async () => {
    const stun = await startLoopbackStun((src) => ({ address: "127.0.0.2", port: src.port }));
    state.stunServers = [`127.0.0.1:${stun.port}`];
    try {
      const p = start(allocation());
      const { port, grantId } = await p.ready;
      const grantStats = () => endpoint.stats().grants.find((g) => g.grantId === grantId);
      for (let i = 0; i < 200 && !state.clientCandidates.has(grantId); i++) await Bun.sleep(10);
      // The binding went out of the tunnel's socket: the port the STUN server saw is the one the host already hears the proxy from.
      expect(stun.seen.length).toBeGreaterThan(0);
      expect(state.clientCandidates.get(grantId)).toEqual([
        { address: "127.0.0.2", port: stun.seen[0]!.port, kind: "stun" },
      ]);
      for (let i = 0; i < 200 && !grantStats()?.candidates.length; i++) await Bun.sleep(10);
      expect(grantStats()?.candidates).toEqual([`127.0.0.2:${stun.seen[0]!.port}`]);
      expect(await echo(port, 10_000)).toBe(true);
      expect(grantStats()?.path.direct).toBe(`127.0.0.1:${stun.seen[0]!.port}`);
      expect(p.lines).toContain("posted 1 candidate to the rendezvous (1 from STUN)");
      p.stop.abort();
      await p.done;
    } finally {
      state.stunServers = [];
      stun.close();
    }
  }, 30_000);

  test("refused before anything is bound: a tampered grant (GRANT_SIGNATURE_INVALID, also refused by the host on its own), a released allocation (INVALID_STATE)", async () => {
    state.next = { tamper: true };
    expect(await codeOf(start(allocation()).done)).toBe("GRANT_SIGNATURE_INVALID");
    const released = allocation();
    state.allocations.get(released)!.state = "released";
    expect(await codeOf(start(released).done)).toBe("INVALID_STATE");
    // The host refuses the tampered grant too, by itself.
    for (let i = 0; i < 100 && !endpoint.connectivity().refusedGrants.length; i++) await Bun.sleep(20);
    expect(endpoint.connectivity().refusedGrants.map((r) => r.code)).toContain("GRANT_SIGNATURE_INVALID");
  }, 30_000);

  test("an expired grant ends the session with GRANT_EXPIRED and the host drops the peer on its own", async () => {
    // 5 s: room for the echo to finish before the expiry on a loaded machine (2 s flaked under CI-like load).
    state.next = { ttlMs: 5_000 };
    const p = start(allocation());
    const { port } = await p.ready;
    expect(await echo(port, 10_000)).toBe(true);
    expect(await codeOf(p.done)).toBe("GRANT_EXPIRED");
    for (let i = 0; i < 250 && endpoint.connectivity().appliedGrants.length; i++) await Bun.sleep(20);
    expect(endpoint.connectivity().appliedGrants).toEqual([]);
  }, 30_000);

  test("a replacement (new generation) ends the session with STALE_GENERATION", async () => {
    const id = allocation(1);
    const p = start(id, { watchIntervalMs: 100 });
    await p.ready;
    state.allocations.get(id)!.generation = 2;
    expect(await codeOf(p.done)).toBe("STALE_GENERATION");
  }, 30_000);
});

describe("the control channel (openControlChannel: openAllocationPort for port 7390)", () => {
  test("plain fetch on the loopback base URL reaches the guest's port 7390 with the grant header; the grant verifies for that port; close() revokes it", async () => {
    const id = allocation();
    const lines: string[] = [];
    const ch = await openControlChannel({
      client,
      allocationId: id,
      keys: issuer.verificationKeys(),
      clock: systemSuspendAwareClock,
      random: systemRandom,
      aead,
      interfaces: () => ({}),
      log: (l) => lines.push(l),
    });
    try {
      expect(ch.baseUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      expect(ch.port.grant.grant.ports).toEqual([GUEST_CONTROL_PORT]);
      const res = await fetch(`${ch.baseUrl}/v1/exec`, { headers: { [ch.grantHeaderName]: ch.grantHeader } });
      expect(res.status).toBe(200);
      const seen = await res.text();
      expect(seen).toBe(ch.grantHeader);
      const presented = JSON.parse(Buffer.from(seen, "base64url").toString("utf8"));
      expect(canonicalJson(presented)).toBe(canonicalJson(ch.port.signedGrant));
      const check = checkSignedGrant(
        presented,
        issuer.verificationKeys(),
        { allocationId: id, port: GUEST_CONTROL_PORT },
        Date.now(),
      );
      expect(check.ok).toBe(true);
      expect(endpoint.connectivity().appliedGrants.map((g) => g.grantId)).toContain(ch.port.grant.grant.grantId);
    } finally {
      await ch.close();
    }
    expect(await ch.ended).toBeNull();
    expect(lines.some((l) => l.includes(`grant ${ch.port.grant.grant.grantId} revoked`))).toBe(true);
  }, 30_000);
});
