/**
 * Connection-grant benchmark (spec "Data path" step 2): grants issued per
 * second by the real objects in-process (Allocation → Network → Host and
 * Connection, one SQLite file, group commit), each grant then revoked so the
 * per-allocation bound never stops the run; the baseline, measured in the
 * same run, is the signing alone (the grant, its relay map and one relay
 * token with the same key), so the figure reads as the cost of the object
 * plumbing and storage on top of Ed25519.
 *
 *   bun bench/grants.ts [--grants 2000] [--allocations 8]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { SchedulerWorker } from "../src/scheduler/worker.ts";
import { devConnections, type DeploymentManifest } from "../src/scheduler/manifest.ts";
import { connectionSigner } from "../src/scheduler/connectionSigner.ts";
import { keyFileSeed } from "../src/scheduler/connectionKeyFile.ts";
import type { Envelope } from "../src/protocol/agent.ts";
import { TEST_CONTROLLER as C, TEST_OPERATOR as O, testManifest } from "../test/support/testManifest.ts";
import { limitRunTime } from "./support/runLimit.ts";

limitRunTime("bench/grants.ts", 600);

const { values } = parseArgs({
  options: { grants: { type: "string", default: "2000" }, allocations: { type: "string", default: "8" } },
});
const GRANTS = Number(values.grants);
const ALLOCS = Number(values.allocations);
const dir = mkdtempSync(join(tmpdir(), "bb-bench-grants-"));
const connections = devConnections(dir);
connections.relays = [{ relayId: "relay-1", url: "wss://relay-1.example:443/v1/relay" }];
const base = testManifest();
const manifest: DeploymentManifest = {
  ...base,
  workloadClasses: { small: { ...base.workloadClasses["small"]!, cpuMillis: 100 } },
  connections,
};
const CAP = { cpuMillis: 64_000, memoryMiB: 65_536, ephemeralDiskMiB: 1 << 20, maxPlacements: 64 };

try {
  // Baseline: the three signatures a grant carries, with the same signer.
  const signer = connectionSigner(
    connections.signingKey.keyId,
    connections.verificationKeys[connections.signingKey.keyId]!,
    keyFileSeed(connections.signingKey.file),
  );
  const payload = {
    v: 1,
    grantId: `grt_${"a".repeat(32)}`,
    tenant: C.id,
    ports: [22],
    issuedAtMs: 0,
    expiresAtMs: 600_000,
  };
  let t0 = performance.now();
  for (let i = 0; i < GRANTS; i++) {
    signer.sign("grant", { ...payload, issuedAtMs: i });
    signer.sign("relay-map", { v: 1, relays: connections.relays, issuedAtMs: i, expiresAtMs: 600_000 });
    signer.sign("relay-token", {
      v: 1,
      relayId: "relay-1",
      grantId: payload.grantId,
      role: "client",
      issuedAtMs: i,
      expiresAtMs: 120_000,
    });
  }
  const signPerSec = GRANTS / ((performance.now() - t0) / 1000);

  const w = new SchedulerWorker({ dataDir: join(dir, "sched"), manifest, publicUrl: "http://bench" });
  w.runtime.recover();
  const t = await w.createEnrollmentToken(O, "h1", 3600);
  await w.enroll({
    token: t.token,
    capacity: CAP,
    region: "t",
    architecture: "x86_64",
    agentProtocolVersion: "1.0",
    vmmDriver: "t",
  });
  let epoch = "";
  let seq = 0;
  const env = (type: Envelope["type"], extra: Partial<Envelope["payload"]> = {}): Envelope => ({
    protocolVersion: "1.0",
    messageId: `m${++seq}`,
    hostId: "h1",
    agentEpoch: epoch,
    sentAt: new Date().toISOString(),
    type,
    payload: {
      bootId: "b",
      updates: [],
      acks: [],
      deliveryAcks: [],
      health: { isolationHealthy: true, quarantineCount: 0, vmmDriver: "t", inventory: CAP },
      waitMs: 0,
      ...extra,
    },
  });
  const poll = async (extra: Partial<Envelope["payload"]> = {}) => {
    const r = await w.agentEnvelope("h1", env("poll", extra));
    epoch = r.agentEpoch;
    await w.runtime.idle();
    return r;
  };
  await poll({
    connectivity: {
      seq: 1,
      hostPublicKey: Buffer.alloc(32, 1).toString("base64"),
      candidates: [{ address: "192.0.2.1", port: 51820, kind: "local" }],
      appliedGrants: [],
      refusedGrants: [],
      at: new Date().toISOString(),
    },
  });
  const ids: string[] = [];
  for (let i = 0; i < ALLOCS; i++)
    ids.push((await w.createAllocation(C, { clientRequestId: `b${i}`, workloadClass: "small" })).view.allocationId);
  for (let round = 0; round < 3; round++) {
    const r = await poll();
    for (const c of r.commands) {
      const u = (state: "prepared" | "running") => ({
        seq: ++seq,
        placementId: c.placementId,
        allocationId: c.allocationId,
        generation: c.generation,
        state,
        at: new Date().toISOString(),
      });
      if (c.type === "ensure_present") await w.agentEnvelope("h1", env("messages", { updates: [u("prepared")] }));
      if (c.type === "ensure_running") await w.agentEnvelope("h1", env("messages", { updates: [u("running")] }));
    }
    await w.runtime.idle();
  }
  for (const id of ids)
    if ((await w.getAllocation(C, id)).state !== "ready") throw new Error(`allocation ${id} is not ready`);

  t0 = performance.now();
  let next = 0;
  await Promise.all(
    ids.map(async (id) => {
      while (next < GRANTS) {
        next++;
        const g = await w.createConnectionGrant(C, id, {
          clientPublicKey: Buffer.alloc(32, 2).toString("base64"),
          transport: "tcp",
          ports: [22],
        });
        await w.revokeConnectionGrant(C, id, g.grant.payload.grantId);
      }
    }),
  );
  const grantPerSec = GRANTS / ((performance.now() - t0) / 1000);
  await w.close();
  console.log(`signing only (baseline): ${signPerSec.toFixed(0)} grants/s`);
  console.log(
    `issue + revoke through the objects: ${grantPerSec.toFixed(0)} grants/s (${ALLOCS} allocations in parallel)`,
  );
  console.log(`ratio objects/baseline: ${(grantPerSec / signPerSec).toFixed(2)}`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
