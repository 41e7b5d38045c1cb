/**
 * The proxy's candidates reach the host through the scheduler: a real
 * scheduler on loopback (test/support/scheduler.ts, its development manifest
 * with private networking) and a scripted agent; announceCandidates posts
 * to the grant's Connection under the client's endpoint token, and the
 * host's next configure_connection apply carries them. A wrong token is
 * refused with UNAUTHENTICATED. No root, no VM.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { BeachballError } from "../protocol/errors.ts";
import type { Candidate } from "../protocol/connection.ts";
import { openTestConnection, rawPost, startTestScheduler, type TestConnection, type TestScheduler } from "../../test/support/scheduler.ts";
import { ScriptedAgent } from "../../test/support/scriptedAgent.ts";
import { announceCandidates, proxyCandidates } from "./rendezvous.ts";

let s: TestScheduler;
let conn: TestConnection;
let credential: string;

beforeAll(async () => {
  s = await startTestScheduler();
  const t = await s.operator.enrollmentToken("rdv-host");
  const r = await rawPost(`${s.url}/v1/agents/enroll`, null, JSON.stringify({ token: t.token, capacity: { cpuMillis: 2000, memoryMiB: 2048, ephemeralDiskMiB: 8192, maxPlacements: 2 }, region: "local", architecture: "x86_64", agentProtocolVersion: "1.0", vmmDriver: "qemu-microvm" }));
  credential = String(r.body["credential"]);
  conn = await openTestConnection(s, "rdv-host", credential, "rdv-conn");
});
afterAll(async () => {
  await s.stop();
});

describe("the proxy's rendezvous", () => {
  test("proxyCandidates: the bound socket's interface addresses on its port, never loopback or link-local", () => {
    const iface = (address: string, internal = false) => ({ address, internal, family: address.includes(":") ? "IPv6" : "IPv4", netmask: "", mac: "", cidr: null }) as import("node:os").NetworkInterfaceInfo;
    const list = proxyCandidates("0.0.0.0", 40_000, { lo: [iface("127.0.0.1", true)], eth0: [iface("10.1.0.2"), iface("169.254.1.1"), iface("fe80::1")] });
    expect(list).toEqual([{ address: "10.1.0.2", port: 40_000, kind: "local" }]);
    expect(proxyCandidates("0.0.0.0", 40_000, {})).toEqual([]);
  });

  test("posted under the client's endpoint token, they ride in the host's configure_connection apply", async () => {
    const candidates: Candidate[] = [{ address: "10.1.0.2", port: 40_001, kind: "local" }];
    expect(await announceCandidates(s.url, conn, candidates)).toBe(1);
    const host = new ScriptedAgent(s.url, "rdv-host", credential);
    const apply = (await host.poll()).connections?.find((c) => c.grantId === conn.grantId && c.action === "apply");
    expect(apply?.clientCandidates).toEqual(candidates);
    expect(await announceCandidates(s.url, conn, [])).toBe(0);
  });

  test("a wrong endpoint token is refused with UNAUTHENTICATED", async () => {
    const err = await announceCandidates(s.url, { ...conn, endpointToken: `bbx_${"0".repeat(64)}` }, [{ address: "10.1.0.2", port: 1, kind: "local" }]).catch((e: unknown) => e);
    expect(err instanceof BeachballError && err.code).toBe("UNAUTHENTICATED");
  });
});
