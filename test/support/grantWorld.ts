/**
 * Test support for the scheduler's connection-grant unit tests
 * (src/scheduler/connectionGrants.test.ts, connectionReconcile.test.ts):
 * a scheduler on the real objects (Allocation, Network, NetworkDirectory,
 * Host, Connection; one SQLite file) under a fake clock with private
 * networking, and a minimal in-process agent speaking the real envelope
 * with a host endpoint's connectivity_update (no VM: the scheduler's side).
 * Every test file that uses it calls `closeWorlds()` after each test.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "bun:test";
import { BeachballError, ERROR_STATUS } from "../../src/protocol/errors.ts";
import type {
  AgentCommand,
  AppliedGrant,
  CommandAck,
  ConfigureConnection,
  ConnectivityUpdate,
  Envelope,
  PlacementUpdate,
  PollResponse,
} from "../../src/protocol/agent.ts";
import type { ConnectionGrantBody } from "../../src/protocol/connection.ts";
import { parseUlaPrefix, type UlaPrefix } from "../../src/domain/network.ts";
import { SchedulerWorker } from "../../src/scheduler/worker.ts";
import { devConnections, tokenDigest, type DeploymentManifest, type Identity } from "../../src/scheduler/manifest.ts";
import { FakeClock } from "../../src/protocol/fakeClock.ts";
import { SeededRandom } from "../sim/rng.ts";
import { TEST_CONTROLLER, TEST_OPERATOR, testManifest } from "./testManifest.ts";
import { InProcessAgent } from "./inProcessAgent.ts";

/** The controller that owns the test allocations. */
export const C = TEST_CONTROLLER;
/** A second controller, owning nothing of C's. */
export const C2: Identity = { id: "controller:u", role: "controller" };
/** The operator. */
export const O = TEST_OPERATOR;
/** Every test host's capacity. */
export const CAP = { cpuMillis: 4000, memoryMiB: 4096, ephemeralDiskMiB: 8192, maxPlacements: 8 };
const T0 = 1_900_000_000_000;
const dirs: string[] = [];
const workers: SchedulerWorker[] = [];

/** A scheduler on the real objects (one SQLite file) under a fake clock, with private networking, one relay and two STUN servers. */
export function world() {
  const dir = mkdtempSync(join(tmpdir(), "bb-grants-"));
  dirs.push(dir);
  const clock = new FakeClock({ wallMs: T0 });
  const connections = devConnections(dir);
  connections.relays = [{ relayId: "relay-1", url: "wss://relay-1.example:443/v1/relay" }];
  connections.stunServers = ["192.0.2.53:3478", "[2001:db8::53]:3478"];
  connections.grants = {
    maxTtlSeconds: 600,
    defaultTtlSeconds: 120,
    policyRevision: 7,
    default: { transports: ["tcp"], ports: ["22", "8000-8010"] },
  };
  const base = testManifest();
  const manifest: DeploymentManifest = {
    ...base,
    // A second controller owns nothing of the first's; the class is small enough for several per host.
    principals: [...base.principals, { id: C2.id, role: "controller", tokenSha256: tokenDigest("c2") }],
    workloadClasses: { small: { ...base.workloadClasses["small"]!, cpuMillis: 500 } },
    connections,
  };
  const w = new SchedulerWorker({
    dataDir: dir,
    manifest,
    publicUrl: "http://t",
    clock,
    random: new SeededRandom(7),
    timeouts: { leaseMs: 30_000, hostCheckIntervalMs: 5_000, leaseGraceMs: 10_000, retentionDays: 1 },
  });
  w.runtime.recover();
  workers.push(w);
  const settle = async (ms = 0) => {
    clock.advance(ms);
    w.runtime.tick();
    await w.runtime.idle();
  };
  const keys = new Map(Object.entries(w.wellKnown().connectionVerificationKeys ?? {}));
  return { w, clock, settle, keys, ula: parseUlaPrefix(connections.ulaPrefix) as UlaPrefix };
}

/** A 32-byte key in standard base64 (stands in for an X25519 public key: the scheduler only carries it). */
export const key = (n: number) => Buffer.alloc(32, n).toString("base64");

/** An in-process agent (test/support/inProcessAgent.ts) with a host endpoint's connectivity_update. */
export class Agent extends InProcessAgent {
  connSeq = 0;
  readonly publicKey: string;
  constructor(w: SchedulerWorker, hostId: string, clock: FakeClock, keyByte: number) {
    super(w, hostId, clock, { inventory: CAP });
    this.publicKey = key(keyByte);
  }
  /** The next connectivity_update, reporting `appliedGrants` (none by default). */
  connectivity(appliedGrants: AppliedGrant[] = []): ConnectivityUpdate {
    return {
      seq: ++this.connSeq,
      hostPublicKey: this.publicKey,
      candidates: [{ address: "192.0.2.10", port: 51820, kind: "local" }],
      appliedGrants,
      refusedGrants: [],
      at: new Date(this.clock.wallMs()).toISOString(),
    };
  }
}

/** Enrolls host `hostId`. */
export async function enroll(w: SchedulerWorker, hostId: string): Promise<void> {
  const t = await w.createEnrollmentToken(O, hostId, 3600);
  await w.enroll({
    token: t.token,
    capacity: CAP,
    region: "t",
    architecture: "x86_64",
    agentProtocolVersion: "1.0",
    vmmDriver: "t",
  });
}

/** The stable code (and its HTTP status) a call fails with, or "OK". */
export async function code(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return "OK";
  } catch (e) {
    return e instanceof BeachballError ? `${e.code} ${ERROR_STATUS[e.code]}` : String(e);
  }
}

/** A grant request for TCP port 22. */
export const SSH: ConnectionGrantBody = { clientPublicKey: key(200), transport: "tcp", ports: [22] };

/** One or two hosts reporting their endpoint, and an allocation of C ready on the first. */
export async function readyAllocation(hosts = 1) {
  const x = world();
  const agents: Agent[] = [];
  for (let i = 0; i < hosts; i++) {
    const id = `h${i + 1}`;
    await enroll(x.w, id);
    const a = new Agent(x.w, id, x.clock, 10 + i);
    await a.poll({ connectivity: a.connectivity() });
    agents.push(a);
  }
  const { view } = await x.w.createAllocation(C, { clientRequestId: "r1", workloadClass: "small" });
  await x.settle();
  const hostId = (await x.w.getAllocation(C, view.allocationId)).hostId;
  const owner = agents.find((a) => a.hostId === hostId)!;
  const placement = await owner.run(view.allocationId);
  expect((await x.w.getAllocation(C, view.allocationId)).state).toBe("ready");
  return { ...x, agents, owner, others: agents.filter((a) => a !== owner), id: view.allocationId, placement };
}

/** The owner's host goes silent until it is lost; the controller authorizes the replacement (spec "Replacement"). */
export async function loseAndAuthorize(x: Awaited<ReturnType<typeof readyAllocation>>): Promise<void> {
  for (let t = 0; t < 150_000; t += 5_000) {
    await x.settle(5_000);
    for (const o of x.others) await o.poll();
  }
  expect((await x.w.getAllocation(C, x.id)).conditions).toContain("replacement_blocked");
  await x.w.authorizeReplacement(C, x.id, 1);
  await x.settle(1_000);
}

/** Closes every world's scheduler and removes its directory. */
export async function closeWorlds(): Promise<void> {
  for (const w of workers.splice(0)) await w.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
}
