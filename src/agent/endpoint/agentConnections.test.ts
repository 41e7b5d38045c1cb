/**
 * Private networking in the agent (agent.ts, control/controlLoop.ts,
 * endpoint/agentConnections.ts): the real Agent over fake VMM, isolation
 * and control-channel ports, with the real HostEndpoint on loopback UDP and
 * a recording placement link (the kernel link is covered by
 * test/integration/proxy-netns.test.ts). configure_connection from
 * PollResponse.connections is applied and acknowledged; connectivity_update
 * rides in AgentPayload.connectivity with a growing seq; refusals carry
 * their code; a placement that goes away takes its grants with it; a host
 * without an endpoint rejects the commands.
 */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TestGrantIssuer, testId } from "../../../test/support/grantIssuer.ts";
import type { AgentCommand, AgentPayload, ConfigureConnection, PollResponse } from "../../protocol/agent.ts";
import type { SignedGrant } from "../../protocol/connection.ts";
import { keyPairFromPrivate, selectAead, systemSuspendAwareClock, systemRandom } from "../../wireguard/index.ts";
import { Agent, type AgentPorts } from "../agent.ts";
import { FakeControlChannel, FakeTimeline, FixedHostProbe, MemoryLog } from "../fakePorts.ts";
import { FakeImages } from "../image/fakeImages.ts";
import { FakeIsolation } from "../isolation/fakeIsolation.ts";
import { FakeVmHost, FakeVmmDriver, steadyBehaviour } from "../vmm/fakeDriver.ts";
import { HostEndpoint } from "./endpoint.ts";
import type { PlacementTarget } from "./grantCheck.ts";
import type { PlacementLink, PlacementLinkPort } from "./placementLink.ts";

const work = mkdtempSync(join(tmpdir(), "bb-agent-conn-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const EPOCH = "c".repeat(32);
const SPEC = { cpuMillis: 1000, memoryMiB: 256, ephemeralDiskMiB: 1024, imageDigest: `sha256:${"a".repeat(64)}` };
const issuer = new TestGrantIssuer();
const { aead } = await selectAead();
const b64 = (k: Uint8Array) => Buffer.from(k).toString("base64");

/** A placement link that records what the endpoint asked of it (test double of the kernel link). */
class RecordingLinks implements PlacementLinkPort {
  readonly opened: PlacementTarget[] = [];
  closed = 0;
  async open(t: PlacementTarget): Promise<PlacementLink> {
    this.opened.push(t);
    return {
      write: () => true,
      configure: async () => {},
      close: async () => void this.closed++,
      stats: () => ({ packetsIn: 0, packetsOut: 0, writesDropped: 0 }),
    };
  }
}

async function rig(name: string, withEndpoint: boolean) {
  const dir = join(work, name);
  const tl = new FakeTimeline(Date.now());
  const timers = tl.timers("agent");
  const host = new FakeVmHost(tl.timers("host"), steadyBehaviour({ launchMs: 20, bootMs: 500, shutdownMs: 100 }));
  const channel = new FakeControlChannel(timers);
  const links = new RecordingLinks();
  const hostKey = keyPairFromPrivate(systemRandom.fill(new Uint8Array(32)));
  let endpoint: HostEndpoint | null = null;
  const ports: AgentPorts = {
    clock: tl.clock,
    timers,
    random: { bytes: (k) => new Uint8Array(k).fill(7) },
    log: new MemoryLog(),
    probe: new FixedHostProbe(),
    channel,
    driver: new FakeVmmDriver(host, timers),
    isolation: new FakeIsolation(),
    images: new FakeImages(timers, join(dir, "image"), { resolveMs: () => 0 }),
    lock: () => () => {},
    selfChecks: async () => [],
    inventory: async () => [],
    vmmSelfCheck: async () => ({ status: "pass", detail: "fake" }),
    ...(withEndpoint
      ? {
          connections: async ({ placements, onChange }) =>
            (endpoint = await HostEndpoint.start({
              hostId: "h1",
              keyPair: hostKey,
              verificationKeys: issuer.verificationKeys(),
              listen: { hostname: "127.0.0.1", port: 0 },
              stunServers: [],
              clock: systemSuspendAwareClock,
              random: systemRandom,
              aead,
              placements,
              links,
              interfaces: () => ({}),
              onChange,
            })),
        }
      : {}),
  };
  const agent = await Agent.start(
    {
      hostId: "h1",
      bootId: "boot-1",
      dbPath: join(dir, "agent.db"),
      allocationsDir: join(dir, "allocations"),
      guestBootTimeoutMs: 5_000,
      consoleBudgetBytes: 4096,
    },
    ports,
  );
  const payloads: AgentPayload[] = [];
  /** Answers waiting requests for a while: polls with `commands` and `connections` (once each), messages with nothing. */
  const exchange = async (commands: AgentCommand[] = [], connections: ConfigureConnection[] = []) => {
    let pc = commands;
    let pn = connections;
    for (let i = 0; i < 30; i++) {
      await tl.advance(10);
      await Bun.sleep(1); // the endpoint's own work (UDP, its queue) runs on real time
      for (const r of channel.take()) {
        payloads.push(r.payload);
        const resp: PollResponse = {
          agentEpoch: EPOCH,
          commands: r.type === "poll" ? pc : [],
          deliveries: [],
          leases: {},
          ...(r.type === "poll" && pn.length ? { connections: pn } : {}),
        };
        if (r.type === "poll") (pc = []), (pn = []);
        r.resolve(resp);
      }
    }
  };
  const allocationId = testId("alloc");
  const command = (type: AgentCommand["type"], generation = 1): AgentCommand => {
    const kind = type === "ensure_present" ? "present" : type === "ensure_running" ? "running" : "absent";
    return {
      commandId: `plc-1:${kind}:${generation}`,
      type,
      allocationId,
      placementId: "plc-1",
      generation,
      agentEpoch: EPOCH,
      leaseExpiresAt: new Date(tl.clock.wallMs() + 60_000).toISOString(),
      spec: SPEC,
    };
  };
  const clientKey = keyPairFromPrivate(systemRandom.fill(new Uint8Array(32)));
  const grant = (generation = 1): SignedGrant =>
    issuer.grant(
      {
        allocationId,
        generation,
        hostId: "h1",
        hostPublicKey: b64(hostKey.publicKey),
        clientPublicKey: b64(clientKey.publicKey),
        clientAddress: "fd00:1::10",
        allocationAddress: "fd00:1::2",
        ports: [22],
      },
      Date.now(),
      60_000,
    );
  const apply = (g: SignedGrant): ConfigureConnection => ({
    commandId: `${g.payload.grantId}:apply`,
    type: "configure_connection",
    action: "apply",
    grantId: g.payload.grantId,
    grant: g,
  });
  const acks = () => payloads.flatMap((p) => p.acks);
  const updates = () => payloads.flatMap((p) => (p.connectivity ? [p.connectivity] : []));
  const stop = async () => {
    const s = agent.stop();
    await tl.advance(10_000);
    await s;
  };
  return { agent, exchange, command, grant, apply, acks, updates, links, hostKey, stop, endpoint: () => endpoint };
}

test("configure_connection is applied and acknowledged, connectivity_update reports it with a growing seq, and a placement that goes away takes its grant", async () => {
  const r = await rig("applied", true);
  await r.exchange([r.command("ensure_present")]);
  await r.exchange([r.command("ensure_running")]);
  await r.exchange(); // the guest boots (500 ms of fake time)
  await r.exchange();
  // The session's first envelopes carry the endpoint's public key (never the private key).
  const first = r.updates()[0]!;
  expect(first.hostPublicKey).toBe(b64(r.hostKey.publicKey));
  expect(JSON.stringify(r.updates())).not.toContain(b64(r.hostKey.privateKey));
  const g = r.grant();
  const cmd = r.apply(g);
  // Redelivered on the next poll while the first copy may still be applying: applied once, acknowledged.
  await r.exchange([], [cmd, cmd]);
  expect(r.acks().filter((a) => a.commandId === cmd.commandId)[0]).toEqual({
    commandId: cmd.commandId,
    result: "accepted",
  });
  expect(r.links.opened).toHaveLength(1);
  expect(r.links.opened[0]!.generation).toBe(1);
  expect(r.links.opened[0]!.netns).toMatch(/^bb-/);
  const last = r.updates().at(-1)!;
  expect(last.appliedGrants.map((a) => [a.grantId, a.generation])).toEqual([[g.payload.grantId, 1]]);
  const seqs = r.updates().map((u) => u.seq);
  expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
  expect(new Set(seqs).size).toBe(seqs.length);
  // A grant for another generation is refused; its ack says rejected and the update names the code.
  const newer = r.apply(r.grant(2));
  await r.exchange([], [newer]);
  expect(r.acks().find((a) => a.commandId === newer.commandId)).toEqual({
    commandId: newer.commandId,
    result: "rejected",
  });
  expect(r.updates().at(-1)!.refusedGrants).toContainEqual({ grantId: newer.grantId, code: "GRANT_MISMATCH" });
  // The placement goes away: the grant goes with it, without a revoke.
  await r.exchange([r.command("ensure_absent")]);
  await r.exchange();
  expect(r.updates().at(-1)!.appliedGrants).toEqual([]);
  expect(r.links.closed).toBe(1);
  // A late revoke is acknowledged (the peer is gone).
  const revoke: ConfigureConnection = {
    commandId: `${g.payload.grantId}:revoke`,
    type: "configure_connection",
    action: "revoke",
    grantId: g.payload.grantId,
  };
  await r.exchange([], [revoke]);
  expect(r.acks().find((a) => a.commandId === revoke.commandId)).toEqual({
    commandId: revoke.commandId,
    result: "accepted",
  });
  await r.stop();
});

test("a host without an endpoint rejects configure_connection with NETWORK_SETUP_FAILED and reports no connectivity", async () => {
  const r = await rig("none", false);
  await r.exchange();
  const cmd = r.apply(r.grant());
  await r.exchange([], [cmd]);
  expect(r.acks().find((a) => a.commandId === cmd.commandId)).toEqual({
    commandId: cmd.commandId,
    result: "rejected",
    errorCode: "NETWORK_SETUP_FAILED",
  });
  expect(r.updates()).toEqual([]);
  await r.stop();
});
