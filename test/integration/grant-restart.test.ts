/**
 * Applied grants survive an agent restart (issue 11; spec "The agent
 * protocol": connectivity_update, configure_connection; the scheduler is the
 * source of truth): a scheduler on loopback, a real `bb agent run` process
 * with its host endpoint on 127.0.0.1 and a real guest booted by QEMU (TCG
 * here). A grant is applied (a WireGuard handshake from the grant's client
 * key to the host endpoint completes, while one from a key without a grant
 * never does); the agent is stopped with SIGTERM (the VM stays for the next
 * start to adopt, the grants in the endpoint's memory go) and started again;
 * without the client asking anew, the scheduler hands the grant to the new
 * endpoint (its connectivity_update reports none) and the handshake
 * completes again. Needs root, QEMU and `ip`; skips with a reason otherwise.
 * Leaves nothing behind.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { randomBytes, randomUUID } from "node:crypto";
import { buildDevImage } from "../../src/image/devBuild.ts";
import { compileGuest } from "../../src/image/bbBinary.ts";
import { joinScheduler } from "../../src/agent/join.ts";
import { agentPaths } from "../../src/agent/config.ts";
import { connectionGrantsPath, type ConnectionGrantResponse } from "../../src/protocol/connection.ts";
import {
  keyPairFromPrivate,
  MultipathDevice,
  openSharedSocket,
  selectAead,
  systemSuspendAwareClock,
  systemRandom,
  type KeyPair25519,
  type SharedSocket,
} from "../../src/wireguard/index.ts";
import { startTestScheduler, type TestScheduler } from "../support/scheduler.ts";
import {
  cleanUpPlacements,
  startRole,
  stopRole,
  vmTestSkipReason,
  waitUntil,
  type Role,
} from "../support/processes.ts";

const skip = vmTestSkipReason();
if (skip) console.log(`SKIP test/integration/grant-restart.test.ts: ${skip}`);
const d = skip ? describe.skip : describe;

const HOST = "grestart-host";
const work = mkdtempSync(join(tmpdir(), "bb-grestart-"));
const dataDir = join(work, "agent");
let s: TestScheduler | null = null;
let agent: Role | null = null;
let endpointPort = 0;
let allocationId: string | null = null;

/** Waits for `probe` (test/support/processes.ts waitUntil), with the agent's log on failure. */
const until = <T>(what: string, probe: () => Promise<T | null | undefined | false>, ms = 240_000) =>
  waitUntil(what, probe, ms, agent ? [agent.log] : []);

/** A free UDP port on 127.0.0.1 (bound, read, released). */
async function freeUdpPort(): Promise<number> {
  const sock = await Bun.udpSocket({ hostname: "127.0.0.1", port: 0 });
  const port = sock.port;
  sock.close();
  return port;
}

/**
 * One WireGuard handshake from `client` to the host endpoint: true when the
 * endpoint answered within `ms` (it answers only a key it holds a grant for).
 * The shared socket counts the ICMP errors of a closed port instead of throwing.
 */
async function handshakes(client: KeyPair25519, hostPublicKey: string, ms: number): Promise<boolean> {
  const { aead } = await selectAead();
  let sock: SharedSocket | null = null;
  const mp = new MultipathDevice({
    privateKey: client.privateKey,
    clock: systemSuspendAwareClock,
    random: systemRandom,
    aead,
    io: { sendUdp: (d, a, p) => sock?.sendUdp(d, a, p), sendRelay: () => false },
    deliver: () => {},
  });
  sock = await openSharedSocket({
    hostname: "127.0.0.1",
    port: 0,
    random: systemRandom,
    onWireGuard: (d, from) => mp.receive(d, from),
  });
  try {
    const { peer, selector } = mp.addPeer({
      publicKey: new Uint8Array(Buffer.from(hostPublicKey, "base64")),
      allowedIps: ["::/0"],
    });
    selector.setCandidates([{ address: "127.0.0.1", port: endpointPort }]);
    mp.device.initiateHandshake(peer);
    const deadline = Date.now() + ms;
    while (Date.now() < deadline) {
      if (mp.device.counters.handshakesCompleted > 0) return true;
      await Bun.sleep(50);
    }
    return false;
  } finally {
    sock.close();
  }
}

const hostHealthy = async () => (await s!.operator.hosts()).some((h) => h.hostId === HOST && h.health === "healthy");

d("applied grants across an agent restart (real agent, QEMU guest)", () => {
  beforeAll(async () => {
    const img = await buildDevImage({
      outDir: resolve(".bb/images/dev"),
      cacheDir: resolve(".bb/cache"),
      bbBinaryPath: await compileGuest(),
    });
    s = await startTestScheduler({ imageDigest: img.digest });
    const t = await s.operator.enrollmentToken(HOST);
    await joinScheduler({
      schedulerUrl: s.url,
      token: t.token,
      dataDir,
      imageDirs: [img.dir],
      capacity: { maxPlacements: 1 },
    });
    // The endpoint on loopback and a port of its own (not the machine's 51820).
    endpointPort = await freeUdpPort();
    const cfgPath = agentPaths(dataDir).config;
    const cfg = JSON.parse(readFileSync(cfgPath, "utf8")) as { connections?: Record<string, unknown> };
    expect(cfg.connections).toBeDefined();
    writeFileSync(
      cfgPath,
      JSON.stringify({
        ...cfg,
        connections: { ...cfg.connections, listenAddress: "127.0.0.1", listenPort: endpointPort },
      }),
    );
    agent = startRole(["agent", "run", "--data-dir", dataDir], join(work, "agent.log"));
    await until("a healthy host", hostHealthy, 60_000);
  }, 600_000);

  afterAll(async () => {
    // A test that failed midway leaves its allocation: release it through a running agent, which removes the VM, its namespace and its cgroup.
    if (s && allocationId && (await s.controller.get(allocationId).catch(() => null))?.state !== "released") {
      if (!agent || agent.proc.exitCode !== null || agent.proc.signalCode !== null)
        agent = startRole(["agent", "run", "--data-dir", dataDir], join(work, "agent-cleanup.log"));
      await s.controller.release(allocationId).catch(() => undefined);
      await waitUntil(
        "the allocation released in clean-up",
        async () => (await s!.controller.get(allocationId!)).state === "released",
        120_000,
      ).catch(() => undefined);
    }
    if (agent) await stopRole(agent);
    await s?.stop();
    await cleanUpPlacements(agentPaths(dataDir).allocations);
    rmSync(work, { recursive: true, force: true });
  }, 60_000);

  test("grant applied → agent SIGTERM → agent started again → the grant is applied on the new endpoint, the client never asked again", async () => {
    const { view } = await s!.controller.create({
      clientRequestId: `grestart-${randomUUID()}`,
      workloadClass: "ci-small",
    });
    const id = view.allocationId;
    allocationId = id;
    await until("the allocation ready", async () => (await s!.controller.get(id)).state === "ready");

    const client = keyPairFromPrivate(new Uint8Array(randomBytes(32)));
    const stranger = keyPairFromPrivate(new Uint8Array(randomBytes(32)));
    const res = await fetch(`${s!.url}${connectionGrantsPath(id)}`, {
      method: "POST",
      headers: { authorization: `Bearer ${s!.tokens.token}`, "content-type": "application/json" },
      body: JSON.stringify({
        clientPublicKey: Buffer.from(client.publicKey).toString("base64"),
        transport: "tcp",
        ports: [22],
        ttlSeconds: 600,
      }),
    });
    expect(res.status).toBe(201);
    const g = (await res.json()) as ConnectionGrantResponse;
    const hostKey = g.grant.payload.hostPublicKey;
    expect(g.hostCandidates.some((c) => c.address === "127.0.0.1" && c.port === endpointPort)).toBe(true);

    // Applied: the grant's client key gets a handshake; a key without a grant never does.
    await until("the grant applied on the host endpoint", () => handshakes(client, hostKey, 1_000), 60_000);
    expect(await handshakes(stranger, hostKey, 3_000)).toBe(false);

    // SIGTERM: the VM stays, the endpoint (and the grant in its memory) goes.
    await stopRole(agent!);
    expect(agent!.proc.exitCode).toBe(0);
    expect(await handshakes(client, hostKey, 1_000)).toBe(false);
    agent = startRole(["agent", "run", "--data-dir", dataDir], join(work, "agent-2.log"));
    await until("the restarted agent's host healthy", hostHealthy, 60_000);
    expect((await s!.controller.get(id)).state).toBe("ready");

    // Nobody asked for a grant again: the scheduler saw the new endpoint report none and handed the same grant out again.
    await until("the grant applied on the new endpoint", () => handshakes(client, hostKey, 1_000), 60_000);
    expect(await handshakes(stranger, hostKey, 2_000)).toBe(false);
    const metrics = await s!.operator.metrics();
    expect(metrics).toMatch(
      new RegExp(`bb_connection_grant_redeliveries_total\\{host="${HOST}",phase="apply"\\} [1-9]`),
    );

    await s!.controller.release(id);
    await until("the allocation released", async () => (await s!.controller.get(id)).state === "released");
  }, 600_000);
});
