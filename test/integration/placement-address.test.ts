/**
 * The allocation's private IPv6 address rides in its placement's commands
 * (spec "Networks, addresses, and grants"): the embedded scheduler with its
 * development manifest (private networking on), a scripted agent speaking
 * the real agent protocol. Both ensure_* commands carry the address the
 * grant names as the allocation's, inside the deployment's ULA /48.
 * The agent's side (kernel arguments, the guest's eth0) is covered by
 * src/agent/isolation/guestIpv6.test.ts and test/e2e/private-ssh.test.ts.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { CommandSpec } from "../../src/protocol/agent.ts";
import { connectionGrantsPath, type ConnectionGrantResponse } from "../../src/protocol/connection.ts";
import { enrollTestHost, startTestScheduler, type TestScheduler } from "../support/scheduler.ts";
import { ScriptedAgent } from "../support/scriptedAgent.ts";

let s: TestScheduler;
beforeAll(async () => {
  s = await startTestScheduler();
});
afterAll(async () => {
  await s.stop();
});

test("ensure_present and ensure_running carry the allocation's address, the one its grants name", async () => {
  const capacity = { cpuMillis: 2500, memoryMiB: 1024, ephemeralDiskMiB: 4096, maxPlacements: 2 };
  const agent = new ScriptedAgent(s.url, "addr-host", (await enrollTestHost(s, "addr-host", capacity)).credential);
  await agent.poll(0, {
    connectivity: {
      seq: 1,
      hostPublicKey: Buffer.alloc(32, 3).toString("base64"),
      candidates: [{ address: "127.0.0.1", port: 51820, kind: "local" }],
      appliedGrants: [],
      refusedGrants: [],
      at: new Date().toISOString(),
    },
  });
  const { view } = await s.controller.create({ clientRequestId: "addr-1", workloadClass: "ci-small" });
  const present = await agent.waitCommand("ensure_present", view.allocationId);
  const address = present.spec.ipv6Address;
  expect(typeof address).toBe("string");
  expect(Value.Check(CommandSpec, present.spec)).toBe(true);
  await agent.report(present, "prepared");
  const running = await agent.waitCommand("ensure_running", view.allocationId);
  expect(running.spec.ipv6Address).toBe(address);
  await agent.report(present, "running");
  for (let i = 0; i < 200 && (await s.controller.get(view.allocationId)).state !== "ready"; i++) await Bun.sleep(25);
  const res = await fetch(`${s.url}${connectionGrantsPath(view.allocationId)}`, {
    method: "POST",
    headers: { authorization: `Bearer ${s.tokens.token}`, "content-type": "application/json" },
    body: JSON.stringify({ clientPublicKey: Buffer.alloc(32, 4).toString("base64"), transport: "tcp", ports: [22] }),
  });
  expect(res.status).toBe(201);
  const g = (await res.json()) as ConnectionGrantResponse;
  expect(g.grant.payload.allocationAddress).toBe(address!);
  // A second allocation gets another address.
  const second = await s.controller.create({ clientRequestId: "addr-2", workloadClass: "ci-small" });
  const other = await agent.waitCommand("ensure_present", second.view.allocationId);
  expect(other.spec.ipv6Address).toBeString();
  expect(other.spec.ipv6Address).not.toBe(address);
});
