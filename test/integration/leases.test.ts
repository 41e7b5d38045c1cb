/**
 * Leases through the API (issue 22, "Leases") on the embedded scheduler with
 * a scripted agent (test/support/runAutopilot.ts) that brings each VM up.
 * Checked: an idle lease ends within a second of its idle timeout after its
 * last activity, after an expiring_soon event, and its VM is released; a
 * heartbeat moves the idle deadline; a heartbeat or extend after the end is
 * 409 LEASE_ENDED; a lease ends at its TTL; shares: a read share sees it and
 * may not heartbeat (403), a use share may, anyone else gets NOT_FOUND, and
 * an unshared principal no longer sees it; the active-lease cap is 409
 * QUOTA_ACTIVE_LEASES with nothing created; a repeat answers the same lease.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { startSchedulerOn, type SchedulerUnderTest } from "../support/schedulerHosts.ts";
import { ScriptedAgent } from "../support/scriptedAgent.ts";
import { RunAutopilot } from "../support/runAutopilot.ts";
import { enrollTestHost, testConnectivity } from "../support/scheduler.ts";
import { SchedulerClient } from "../../src/client/index.ts";

const tokenOf = (id: string) => `token-for-${id}-0123456789abcdef`;
let s: SchedulerUnderTest;
let pilot: RunAutopilot;
let b: SchedulerClient;
let c: SchedulerClient;

const codeOf = (p: Promise<unknown>) =>
  p.then(
    () => null,
    (e: { code?: string }) => e.code ?? String(e),
  );

describe("leases (scripted agent)", () => {
  beforeAll(async () => {
    s = await startSchedulerOn("embedded", (m) => {
      for (const id of ["controller:b", "controller:c"])
        (m["principals"] as Record<string, unknown>[]).push({
          id,
          role: "controller",
          tokenSha256: createHash("sha256").update(tokenOf(id)).digest("hex"),
        });
      (m["limits"] as Record<string, unknown>)["maxActiveLeasesPerController"] = 3;
    });
    b = new SchedulerClient(s.url, tokenOf("controller:b"));
    c = new SchedulerClient(s.url, tokenOf("controller:c"));
    const enrolled = await enrollTestHost(s, "lease-host");
    const agent = new ScriptedAgent(s.url, "lease-host", enrolled.credential);
    // A host endpoint, so a ready lease's VM can be granted a connection (activity).
    await agent.poll(0, { connectivity: testConnectivity() });
    await s.operator.setHostState("lease-host", "activate").catch(() => undefined);
    pilot = new RunAutopilot(agent, 50);
    pilot.start();
  });
  afterAll(async () => {
    await pilot?.stop();
    await s?.stop();
  });

  test("an idle lease ends within a second of its idle timeout; a heartbeat moves it; after the end nothing revives it", async () => {
    const body = { clientRequestId: "idle", workloadClass: "ci-small", ttlSeconds: 600, idleSeconds: 2 };
    const { view } = await s.controller.createLease(body);
    expect(view.state).toBe("active");
    expect((await s.controller.createLease(body)).created).toBe(false);
    await Bun.sleep(1200);
    const hb = await s.controller.heartbeatLease(view.leaseId);
    expect(Date.parse(hb.idleExpiresAt!)).toBeGreaterThan(Date.parse(view.idleExpiresAt!));
    for (let i = 0; i < 100 && (await s.controller.getLease(view.leaseId)).state === "active"; i++)
      await Bun.sleep(100);
    const ended = await s.controller.getLease(view.leaseId);
    expect(ended.state).toBe("expired");
    expect(ended.reason).toBe("IDLE_EXPIRED");
    const events = await s.controller.leaseEvents(view.leaseId);
    const expired = events.find((e) => e.type === "lease.expired")!;
    const late = Date.parse(expired.at) - (Date.parse(ended.lastActivityAt) + 2000);
    expect(late).toBeGreaterThanOrEqual(0);
    expect(late).toBeLessThan(1000);
    const soon = events.find((e) => e.type === "lease.expiring_soon");
    expect(soon).toBeDefined();
    expect(Date.parse(soon!.at)).toBeLessThan(Date.parse(expired.at));
    expect(await codeOf(s.controller.heartbeatLease(view.leaseId))).toBe("LEASE_ENDED");
    expect(await codeOf(s.controller.extendLease(view.leaseId, 600))).toBe("LEASE_ENDED");
    const alloc = await s.controller.waitFor(view.allocationId, (v) => v.state === "released", { timeoutMs: 10_000 });
    expect(alloc.state).toBe("released");
  }, 30_000);

  test("a connection grant for its VM (what bb exec, bb cp and bb proxy ask for) is activity", async () => {
    const { view } = await s.controller.createLease({
      clientRequestId: "granted",
      workloadClass: "ci-small",
      ttlSeconds: 600,
      idleSeconds: 3,
    });
    await s.controller.waitFor(view.allocationId, (v) => v.state === "ready", { timeoutMs: 10_000 });
    await Bun.sleep(1500);
    const before = Date.now();
    await s.controller.createConnectionGrant(view.allocationId, {
      clientPublicKey: Buffer.alloc(32, 9).toString("base64"),
      transport: "tcp",
      ports: [22],
    });
    let l = await s.controller.getLease(view.leaseId);
    for (let i = 0; i < 50 && Date.parse(l.lastActivityAt) < before - 50; i++) {
      await Bun.sleep(50);
      l = await s.controller.getLease(view.leaseId);
    }
    expect(Date.parse(l.lastActivityAt)).toBeGreaterThanOrEqual(before - 50);
    // Past the idle timeout from creation, it lives on from the grant.
    await Bun.sleep(Math.max(0, Date.parse(view.createdAt) + 3200 - Date.now()));
    expect((await s.controller.getLease(view.leaseId)).state).toBe("active");
    await s.controller.releaseLease(view.leaseId);
  }, 30_000);

  test("a lease ends at its TTL", async () => {
    const { view } = await s.controller.createLease({
      clientRequestId: "ttl",
      workloadClass: "ci-small",
      ttlSeconds: 10,
    });
    const end = await s.controller.waitFor(view.allocationId, (v) => v.state === "released", { timeoutMs: 20_000 });
    expect(end.state).toBe("released");
    const l = await s.controller.getLease(view.leaseId);
    expect(l.state).toBe("expired");
    expect(l.reason).toBe("TTL_EXPIRED");
    expect(Date.parse(l.endedAt!) - Date.parse(view.expiresAt)).toBeLessThan(1000);
  }, 30_000);

  test("shares: read sees it, use may heartbeat, others get NOT_FOUND; the cap refuses with nothing made", async () => {
    const { view } = await s.controller.createLease({
      clientRequestId: "shared",
      workloadClass: "ci-small",
      ttlSeconds: 600,
    });
    expect(await codeOf(b.getLease(view.leaseId))).toBe("NOT_FOUND");
    await s.controller.shareLease(view.leaseId, "controller:b", "read");
    expect((await b.getLease(view.leaseId)).access).toBe("read");
    expect((await b.listLeases()).map((l) => l.leaseId)).toEqual([view.leaseId]);
    expect(await codeOf(b.heartbeatLease(view.leaseId))).toBe("FORBIDDEN");
    expect(await codeOf(b.releaseLease(view.leaseId))).toBe("FORBIDDEN");
    await s.controller.shareLease(view.leaseId, "controller:b", "use");
    expect((await b.heartbeatLease(view.leaseId)).access).toBe("use");
    expect(await codeOf(c.getLease(view.leaseId))).toBe("NOT_FOUND");
    expect(await codeOf(c.heartbeatLease(view.leaseId))).toBe("NOT_FOUND");
    expect(await codeOf(s.controller.shareLease(view.leaseId, "controller:nobody", "read"))).toBe("VALIDATION_FAILED");
    await s.controller.unshareLease(view.leaseId, "controller:b");
    expect(await codeOf(b.getLease(view.leaseId))).toBe("NOT_FOUND");

    // The cap (3 active, the earlier leases all ended): this one and two more; the fourth is refused and makes nothing.
    await s.controller.createLease({ clientRequestId: "cap-1", workloadClass: "ci-small", ttlSeconds: 600 });
    await s.controller.createLease({ clientRequestId: "cap-2", workloadClass: "ci-small", ttlSeconds: 600 });
    const before = (await s.controller.list(undefined, 200)).items.length;
    expect(
      await codeOf(s.controller.createLease({ clientRequestId: "cap-3", workloadClass: "ci-small", ttlSeconds: 600 })),
    ).toBe("QUOTA_ACTIVE_LEASES");
    expect((await s.controller.list(undefined, 200)).items.length).toBe(before);
    const released = await s.controller.releaseLease(view.leaseId);
    expect(released.state).toBe("released");
    expect(
      (await s.controller.createLease({ clientRequestId: "cap-3", workloadClass: "ci-small", ttlSeconds: 600 }))
        .created,
    ).toBe(true);
  }, 30_000);

  test("creates at once cannot pass the cap; a heartbeat racing a release never revives it; a key reused mid-flight conflicts", async () => {
    for (const l of await s.controller.listLeases())
      if (l.state === "active") await s.controller.releaseLease(l.leaseId);
    const answers = await Promise.all(
      Array.from({ length: 5 }, (_, i) =>
        codeOf(s.controller.createLease({ clientRequestId: `burst-${i}`, workloadClass: "ci-small", ttlSeconds: 600 })),
      ),
    );
    expect(answers.filter((a) => a === null)).toHaveLength(3);
    expect(answers.filter((a) => a === "QUOTA_ACTIVE_LEASES")).toHaveLength(2);
    const active = (await s.controller.listLeases()).filter((l) => l.state === "active");
    expect(active).toHaveLength(3);
    const target = active[0]!;
    await Promise.all([codeOf(s.controller.heartbeatLease(target.leaseId)), s.controller.releaseLease(target.leaseId)]);
    expect((await s.controller.getLease(target.leaseId)).state).toBe("released");
    expect(await codeOf(s.controller.heartbeatLease(target.leaseId))).toBe("LEASE_ENDED");
    const types = (await s.controller.leaseEvents(target.leaseId)).map((e) => e.type);
    expect(types.filter((t) => t === "lease.released" || t === "lease.expired")).toEqual(["lease.released"]);
    // The newest first, active ones included.
    const listed = await s.controller.listLeases();
    expect(Date.parse(listed[0]!.createdAt)).toBeGreaterThanOrEqual(Date.parse(listed[listed.length - 1]!.createdAt));
    for (const l of active.slice(1)) await s.controller.releaseLease(l.leaseId);
    const same = { clientRequestId: "mid-flight", workloadClass: "ci-small" };
    const [one, two] = await Promise.all([
      codeOf(s.controller.createLease({ ...same, ttlSeconds: 600 })),
      codeOf(s.controller.createLease({ ...same, ttlSeconds: 900 })),
    ]);
    expect([one, two].filter((x) => x === null)).toHaveLength(1);
    expect([one, two].filter((x) => x === "IDEMPOTENCY_CONFLICT")).toHaveLength(1);
  }, 30_000);
});
