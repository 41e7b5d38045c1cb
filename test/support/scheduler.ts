/**
 * Test support: a real scheduler on loopback with a fresh data directory and
 * development manifest, plus helpers to enroll a host. Every test that uses
 * it calls `stop()` (and the directory is removed).
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ensureDevManifest, publishDevClientConfig } from "../../src/scheduler/manifest.ts";
import { serveScheduler, type RunningScheduler } from "../../src/scheduler/serve.ts";
import { SchedulerClient } from "../../src/client/index.ts";
import type { TimeoutPolicy } from "../../src/domain/allocation.ts";
import { connectionGrantsPath, type ConnectionGrantResponse } from "../../src/protocol/connection.ts";
import { ScriptedAgent } from "./scriptedAgent.ts";
import { AGENT_PROTOCOL_VERSION, SUPPORTED_ARCHITECTURE } from "../../src/protocol/platform.ts";

/** A digest that names no real image (scheduler-only tests never boot it). */
export const FAKE_IMAGE_DIGEST = `sha256:${"ab".repeat(32)}`;

/** A running test scheduler. */
export interface TestScheduler {
  dir: string;
  server: RunningScheduler;
  url: string;
  controller: SchedulerClient;
  operator: SchedulerClient;
  tokens: { token: string; operatorToken: string };
  restart(): Promise<void>;
  stop(): Promise<void>;
}

/** Starts a scheduler in-process on 127.0.0.1 with an ephemeral port. */
export async function startTestScheduler(
  opts: { imageDigest?: string; dir?: string; timeouts?: Partial<TimeoutPolicy> } = {},
): Promise<TestScheduler> {
  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), "bb-sched-"));
  const dev = ensureDevManifest(dir, opts.imageDigest ?? FAKE_IMAGE_DIGEST);
  const start = (port: number) =>
    serveScheduler({
      dataDir: dir,
      manifestPath: dev.manifestPath,
      hostname: "127.0.0.1",
      port,
      ...(opts.timeouts ? { timeouts: opts.timeouts } : {}),
    });
  let server = start(0);
  publishDevClientConfig(dev, server.url, []);
  const tokens = JSON.parse(readFileSync(dev.clientConfigPath, "utf8")) as { token: string; operatorToken: string };
  const t: TestScheduler = {
    dir,
    server,
    url: server.url,
    controller: new SchedulerClient(server.url, tokens.token),
    operator: new SchedulerClient(server.url, tokens.operatorToken),
    tokens,
    async restart() {
      const port = Number(new URL(t.url).port);
      await t.server.stop();
      server = start(port);
      t.server = server;
    },
    async stop() {
      await t.server.stop();
      if (!opts.dir) rmSync(dir, { recursive: true, force: true });
    },
  };
  return t;
}

/** POSTs raw bytes with a bearer token; returns status and parsed body. */
export async function rawPost(
  url: string,
  token: string | null,
  body: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}), ...headers },
    body,
  });
  return { status: res.status, body: (await res.json().catch(() => ({}))) as Record<string, unknown> };
}

/** The capacity a test host enrolls with unless a test says otherwise (millicores, MiB, slots). */
export const TEST_HOST_CAPACITY = { cpuMillis: 2000, memoryMiB: 2048, ephemeralDiskMiB: 8192, maxPlacements: 4 };

/** What the scheduler answers a successful enrollment (the fields tests use). */
export interface TestEnrollment {
  hostId: string;
  credential: string;
  [field: string]: unknown;
}

/**
 * Enrolls `hostId` on `s` over raw HTTP (a fresh one-use token from the
 * operator, region "local", this build's architecture and agent protocol
 * version, the QEMU microvm driver) and returns the scheduler's answer.
 * Throws, naming the status and body, unless the answer is 201.
 */
export async function enrollTestHost(
  s: { url: string; operator: SchedulerClient },
  hostId: string,
  capacity: typeof TEST_HOST_CAPACITY = TEST_HOST_CAPACITY,
): Promise<TestEnrollment> {
  const t = await s.operator.enrollmentToken(hostId);
  const r = await rawPost(
    `${s.url}/v1/agents/enroll`,
    null,
    JSON.stringify({
      token: t.token,
      capacity,
      region: "local",
      architecture: SUPPORTED_ARCHITECTURE,
      agentProtocolVersion: AGENT_PROTOCOL_VERSION,
      vmmDriver: "qemu-microvm",
    }),
  );
  if (r.status !== 201) throw new Error(`enrolling ${hostId}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body as TestEnrollment;
}

/** A live connection grant on a test scheduler: its allocation, grant, Connection and the client's endpoint token. */
export interface TestConnection {
  allocationId: string;
  grantId: string;
  connectionId: string;
  endpointToken: string;
}

/** A connectivity_update of a scripted host endpoint (a public key, one local candidate, no grants), so grants can be issued for its VMs. */
export function testConnectivity(seq = 1) {
  return {
    seq,
    hostPublicKey: Buffer.alloc(32, 3).toString("base64"),
    candidates: [{ address: "127.0.0.1", port: 51820, kind: "local" as const }],
    appliedGrants: [],
    refusedGrants: [],
    at: new Date().toISOString(),
  };
}

/**
 * Opens a real connection grant on `s` (whose development manifest has
 * private networking): a scripted agent for the enrolled host `hostId`
 * drives a new allocation to ready and reports a host endpoint, then the
 * controller asks for a grant over HTTP. For tests that need a live
 * Connection (the rendezvous routes authenticate against one).
 */
export async function openTestConnection(
  s: Pick<TestScheduler, "url" | "controller" | "tokens">,
  hostId: string,
  credential: string,
  clientRequestId = "conn-1",
): Promise<TestConnection> {
  const agent = new ScriptedAgent(s.url, hostId, credential);
  await agent.poll(0, { connectivity: testConnectivity() });
  const { view } = await s.controller.create({ clientRequestId, workloadClass: "ci-small" });
  const present = await agent.waitCommand("ensure_present", view.allocationId);
  await agent.report(present, "prepared");
  await agent.waitCommand("ensure_running", view.allocationId);
  await agent.report(present, "running");
  await s.controller.waitFor(view.allocationId, (v) => v.state === "ready", { timeoutMs: 5_000 });
  const res = await fetch(`${s.url}${connectionGrantsPath(view.allocationId)}`, {
    method: "POST",
    headers: { authorization: `Bearer ${s.tokens.token}`, "content-type": "application/json" },
    body: JSON.stringify({ clientPublicKey: Buffer.alloc(32, 4).toString("base64"), transport: "tcp", ports: [22] }),
  });
  if (res.status !== 201) throw new Error(`connection grant refused: ${res.status} ${await res.text()}`);
  const g = (await res.json()) as ConnectionGrantResponse;
  return {
    allocationId: view.allocationId,
    grantId: g.grant.payload.grantId,
    connectionId: g.connectionId,
    endpointToken: g.endpointToken,
  };
}
