/**
 * The OpenAPI document tells the truth: every answer the scheduler gives
 * during a whole allocation run (with the scripted agent as host) is checked
 * against the schema the route table publishes for it: success bodies
 * against the route's response schema, error bodies against Problem. The
 * public client runs with a validating fetch port, so its calls are checked
 * too. The same run on both hosts of the scheduler (embedded, in-process,
 * and workerd: docs/adr/0161-one-front-door.md), on loopback (~1 s, and
 * ~5 s on workerd).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { SchedulerClient } from "../../src/client/index.ts";
import { ROUTES, type RouteSpec } from "../../src/scheduler/routes.ts";
import { Problem } from "../../src/protocol/responses.ts";
import type { AgentCommand, EnrollResponse } from "../../src/protocol/agent.ts";
import { SCHEDULER_HOSTS, startSchedulerOn, type SchedulerUnderTest } from "../support/schedulerHosts.ts";
import { ScriptedAgent } from "../support/scriptedAgent.ts";

let s: SchedulerUnderTest;
const checked = new Map<string, Set<number>>();
const mismatches: string[] = [];

/** The route a request went to, by method and path. */
function routeOf(method: string, pathname: string): [string, RouteSpec] | null {
  const parts = pathname.split("/");
  for (const [name, r] of Object.entries(ROUTES) as [string, RouteSpec][]) {
    const segs = r.path.split("/");
    if (
      r.method === method &&
      segs.length === parts.length &&
      segs.every((seg, i) => seg.startsWith(":") || seg === parts[i])
    )
      return [name, r];
  }
  return null;
}

/** fetch that checks each answer against the published schema. */
async function checkedFetch(url: string | URL | Request, init: RequestInit = {}): Promise<Response> {
  const u = new URL(String(url));
  const method = init.method ?? "GET";
  const res = await fetch(url, init);
  const text = await res.clone().text();
  const found = routeOf(method, u.pathname);
  if (!found) {
    mismatches.push(`${method} ${u.pathname}: not in the route table`);
    return res;
  }
  const [name, r] = found;
  (checked.get(name) ?? checked.set(name, new Set()).get(name)!).add(res.status);
  if (res.ok) {
    if (res.status !== r.response.status && !("also" in r.response && r.response.also === res.status))
      mismatches.push(`${name}: status ${res.status}, published ${r.response.status}`);
    if ("schema" in r.response) {
      const body = JSON.parse(text);
      if (!Value.Check(r.response.schema, body))
        mismatches.push(
          `${name}: ${[...Value.Errors(r.response.schema, body)]
            .slice(0, 3)
            .map((e) => `${e.path} ${e.message}`)
            .join("; ")}`,
        );
    } else if ("contentType" in r.response) {
      if (!res.headers.get("content-type")?.startsWith(r.response.contentType.split(";")[0]!))
        mismatches.push(`${name}: content type ${res.headers.get("content-type")}`);
    } else if (text !== "") mismatches.push(`${name}: ${res.status} with a body`);
  } else {
    if (res.headers.get("content-type") !== "application/problem+json")
      mismatches.push(`${name} ${res.status}: content type ${res.headers.get("content-type")}`);
    const body = JSON.parse(text);
    if (!Value.Check(Problem, body)) mismatches.push(`${name} ${res.status}: not a Problem: ${text.slice(0, 200)}`);
  }
  return res;
}

/** The client ports that check every answer (and never retry, so each answer is one request). */
const CHECKING_PORTS = { fetch: (u: string, i: RequestInit) => checkedFetch(u, i), maxAttempts: 1 };

/** What the steps of the run share: the checking clients, the scripted agent and the allocation it runs. */
interface Run {
  controller: SchedulerClient;
  operator: SchedulerClient;
  agent: ScriptedAgent;
  /** The agent's host credential. */
  credential: string;
  allocationId: string;
  present: AgentCommand;
}

/** An agent envelope of `type` for the run's scripted agent (nothing to report). */
const envelope = (agent: ScriptedAgent, type: "poll" | "messages") => ({
  protocolVersion: "1.0",
  messageId: crypto.randomUUID(),
  hostId: "conf-host",
  agentEpoch: agent.epoch,
  sentAt: new Date().toISOString(),
  type,
  payload: {
    bootId: agent.bootId,
    updates: [],
    acks: [],
    deliveryAcks: [],
    ...(type === "poll" ? { waitMs: 0 } : {}),
  },
});

/** Enrolls the host, creates (and replays) the allocation and drives it to ready. */
async function enrollAndCreate(controller: SchedulerClient, operator: SchedulerClient): Promise<Run> {
  const token = await operator.enrollmentToken("conf-host");
  const cap = { cpuMillis: 2000, memoryMiB: 2048, ephemeralDiskMiB: 8192, maxPlacements: 2 };
  const enrolled = (await (
    await checkedFetch(`${s.url}/v1/agents/enroll`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        token: token.token,
        capacity: cap,
        region: "local",
        architecture: "x86_64",
        agentProtocolVersion: "1.0",
        vmmDriver: "qemu-microvm",
      }),
    })
  ).json()) as EnrollResponse;
  const agent = new ScriptedAgent(s.url, "conf-host", enrolled.credential);
  await agent.poll();
  const { view } = await controller.create({
    clientRequestId: "conf-1",
    workloadClass: "ci-small",
    labels: { team: "a" },
  });
  await controller.create({ clientRequestId: "conf-1", workloadClass: "ci-small", labels: { team: "a" } });
  const present = await agent.waitCommand("ensure_present", view.allocationId);
  await agent.report(present, "prepared");
  await agent.waitCommand("ensure_running", view.allocationId);
  await agent.report(present, "running");
  await controller.waitFor(view.allocationId, (v) => v.state === "ready", { timeoutMs: 5000 });
  return { controller, operator, agent, credential: enrolled.credential, allocationId: view.allocationId, present };
}

/** The agent routes (envelopes and a log push) and the owner's log read. */
async function agentRoutes(run: Run): Promise<void> {
  const { controller, agent, credential, allocationId, present } = run;
  // The agent routes, through the checking fetch (the scripted agent's own client is not instrumented).
  for (const type of ["poll", "messages"] as const)
    await checkedFetch(`${s.url}/v1/agents/${type}`, {
      method: "POST",
      headers: { authorization: `Bearer ${credential}`, "content-type": "application/json" },
      body: JSON.stringify(envelope(agent, type)),
    });

  // Workload output: the agent pushes a chunk, the owner reads it.
  await checkedFetch(`${s.url}/v1/agents/logs`, {
    method: "POST",
    headers: { authorization: `Bearer ${credential}`, "content-type": "application/json" },
    body: JSON.stringify({
      hostId: "conf-host",
      chunks: [
        {
          allocationId: allocationId,
          placementId: present.placementId,
          generation: 1,
          offset: 0,
          text: "hello from the guest\n",
        },
      ],
    }),
  });
  expect((await controller.logs(allocationId)).text).toBe("hello from the guest\n");
}

/** Private networking: the host endpoint reports itself, then a grant, its rendezvous and its revocation. */
async function networkingRoutes(run: Run): Promise<void> {
  const { agent, credential, allocationId } = run;
  // Private networking: the host endpoint reports itself, then a grant, its rendezvous and its revocation.
  await agent.send({
    connectivity: {
      seq: 1,
      hostPublicKey: Buffer.alloc(32, 9).toString("base64"),
      candidates: [{ address: "127.0.0.1", port: 51820, kind: "local" }],
      appliedGrants: [],
      refusedGrants: [],
      at: new Date().toISOString(),
    },
  });
  const json = (token: string, body: unknown): RequestInit => ({
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const grant = (await (
    await checkedFetch(
      `${s.url}/v1/allocations/${allocationId}/connection-grants`,
      json(s.tokens.token, {
        clientPublicKey: Buffer.alloc(32, 7).toString("base64"),
        transport: "tcp",
        ports: [22],
      }),
    )
  ).json()) as { grant: { payload: { grantId: string } }; connectionId: string; endpointToken: string };
  await checkedFetch(
    `${s.url}/v1/connections/${grant.connectionId}/messages`,
    json(grant.endpointToken, {
      messages: [{ type: "candidates", seq: 1, candidates: [{ address: "127.0.0.1", port: 40000, kind: "local" }] }],
    }),
  );
  await checkedFetch(`${s.url}/v1/connections/${grant.connectionId}/poll`, json(grant.endpointToken, { after: 0 }));
  await checkedFetch(`${s.url}/v1/connections/${grant.connectionId}/relay-tokens`, {
    method: "POST",
    headers: { authorization: `Bearer ${grant.endpointToken}` },
  });
  // A second request within 10 s: 429 RATE_LIMITED, a Problem.
  await checkedFetch(`${s.url}/v1/connections/${grant.connectionId}/relay-tokens`, {
    method: "POST",
    headers: { authorization: `Bearer ${grant.endpointToken}` },
  });
  await checkedFetch(`${s.url}/v1/agents/poll`, {
    method: "POST",
    headers: { authorization: `Bearer ${credential}`, "content-type": "application/json" },
    body: JSON.stringify(envelope(agent, "poll")),
  });
  await checkedFetch(`${s.url}/v1/allocations/${allocationId}/connection-grants/${grant.grant.payload.grantId}`, {
    method: "DELETE",
    headers: { authorization: `Bearer ${s.tokens.token}` },
  });
}

/** A bootstrap delivery, the read and admin routes, and the release. */
/** The run routes (issue 22): submit (201, then 200 for the repeat), list, get, events, logs, cancel. */
async function runRoutes(run: Run): Promise<void> {
  const { controller } = run;
  const body = {
    clientRequestId: "conf-run",
    workloadClass: "ci-small",
    scriptBase64: "ZXhpdCAwCg==",
    budgetSeconds: 60,
  };
  const { view } = await controller.submitRun(body);
  expect((await controller.submitRun(body)).created).toBe(false);
  await controller.listRuns();
  await controller.getRun(view.runId);
  await controller.runEvents(view.runId);
  await controller.runLogs(view.runId);
  await controller.cancelRun(view.runId);
  await controller.usage({ by: "class" });
  const lease = (
    await controller.createLease({ clientRequestId: "conf-lease", workloadClass: "ci-small", ttlSeconds: 600 })
  ).view;
  await controller.listLeases();
  await controller.getLease(lease.leaseId);
  await controller.leaseEvents(lease.leaseId);
  await controller.heartbeatLease(lease.leaseId);
  await controller.extendLease(lease.leaseId, 900);
  await controller.shareLease(lease.leaseId, "operator:dev", "read");
  await controller.unshareLease(lease.leaseId, "operator:dev");
  await controller.releaseLease(lease.leaseId);
  await run.operator.usage({ fromMs: Date.now() - 86_400_000, toMs: Date.now() + 1000, by: "host" });
}

async function deliveryAndAdmin(run: Run): Promise<void> {
  const { controller, operator, agent, allocationId, present } = run;
  await agent.consumeDelivery(controller, allocationId, present.placementId, "conf-d", "echo conformance");

  await controller.list();
  await controller.get(allocationId);
  await controller.events(allocationId);
  await operator.hosts();
  await operator.setHostState("conf-host", "drain");
  await operator.setHostState("conf-host", "activate");
  await operator.alerts();
  await operator.metrics();
  await controller.authorizeReplacement(allocationId, 1).catch(() => undefined); // 409 REPLACEMENT_NOT_BLOCKED: a Problem
  await controller.resume(allocationId); // 202: a ready allocation is left as it is
  await controller.pause(allocationId); // 202: asked of the host
  // 409 NOT_SUSPENDABLE: the class is not suspendable (a Problem with its code).
  expect(
    await controller.suspend(allocationId).then(
      () => null,
      (e: { code?: string }) => e.code,
    ),
  ).toBe("NOT_SUSPENDABLE");
  // 409 INVALID_STATE: a fork of an allocation that is not suspended.
  expect(
    await controller.fork(allocationId, { clientRequestId: "conf-fork", count: 2 }).then(
      () => null,
      (e: { code?: string }) => e.code,
    ),
  ).toBe("INVALID_STATE");
  // 409 INVALID_STATE: a resume while the pause is not yet confirmed.
  expect(
    await controller.resume(allocationId).then(
      () => null,
      (e: { code?: string }) => e.code,
    ),
  ).toBe("INVALID_STATE");
  await controller.release(allocationId);
  await agent.waitCommand("ensure_absent", allocationId);
  await agent.report(present, "absent");
  await controller.waitFor(allocationId, (v) => v.state === "released", { timeoutMs: 5000 });
  await operator.setHostState("conf-host", "disable");
}

/** Errors: each must be a Problem. */
async function refusals(run: Run): Promise<void> {
  const { controller } = run;
  await controller.get("alloc_" + "0".repeat(32)).catch(() => undefined);
  await controller.create({ clientRequestId: "conf-x", workloadClass: "nope" }).catch(() => undefined);
  await new SchedulerClient(s.url, "wrong", CHECKING_PORTS).list().catch(() => undefined);
  await controller.hosts().catch(() => undefined);
}

for (const host of SCHEDULER_HOSTS)
  describe(`${host}: answers match the published schemas`, () => {
    beforeAll(async () => {
      s = await startSchedulerOn(host);
      checked.clear();
      mismatches.length = 0;
    });
    afterAll(async () => {
      await s.stop();
    });

    test("a whole run, every route, successes and errors", async () => {
      const ports = CHECKING_PORTS;
      const controller = new SchedulerClient(s.url, s.tokens.token, ports);
      const operator = new SchedulerClient(s.url, s.tokens.operatorToken, ports);
      await checkedFetch(`${s.url}/healthz`);
      await checkedFetch(`${s.url}/openapi.json`);
      await controller.discover();

      const run = await enrollAndCreate(controller, operator);
      await agentRoutes(run);
      await networkingRoutes(run);
      await runRoutes(run);
      await deliveryAndAdmin(run);
      await refusals(run);

      expect(mismatches).toEqual([]);
      // Every route answered successfully at least once, but two: authorizing a replacement succeeds only
      // for a blocked replacement (test/integration/fencing.test.ts), and the rendezvous WebSocket's success
      // is a 101 upgrade (src/scheduler/rendezvousSocket.test.ts); here their refusals were checked as Problems.
      const missing = Object.keys(ROUTES).filter((n) => ![...(checked.get(n) ?? [])].some((st) => st < 300));
      expect(missing).toEqual([
        "suspendAllocation",
        "forkAllocation",
        "replacementAuthorizations",
        "connectionConnect",
      ]);
      expect([...checked.get("replacementAuthorizations")!]).toEqual([409]);
      expect([...checked.get("connectionRelayTokens")!]).toEqual([200, 429]);
    });
  });
