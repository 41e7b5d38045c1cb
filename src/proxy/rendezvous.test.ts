/**
 * The proxy's candidates reach the host through the scheduler: a real
 * scheduler on loopback (test/support/scheduler.ts, its development manifest
 * with private networking) and a scripted agent; announceCandidates posts
 * to the grant's Connection under the client's endpoint token, and the
 * host's next configure_connection apply carries them; a later list (the
 * next sequence number, e.g. a refreshed STUN mapping) replaces them;
 * fetchRelayTokens gets fresh relay tokens from the same Connection. A wrong token is
 * refused with UNAUTHENTICATED. No root, no VM.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { BeachballError } from "../protocol/errors.ts";
import type { Candidate } from "../protocol/connection.ts";
import {
  openTestConnection,
  rawPost,
  startTestScheduler,
  type TestConnection,
  type TestScheduler,
} from "../../test/support/scheduler.ts";
import { ScriptedAgent } from "../../test/support/scriptedAgent.ts";
import { announceCandidates, fetchRelayTokens } from "./rendezvous.ts";

let s: TestScheduler;
let conn: TestConnection;
let credential: string;

beforeAll(async () => {
  s = await startTestScheduler();
  const t = await s.operator.enrollmentToken("rdv-host");
  const r = await rawPost(
    `${s.url}/v1/agents/enroll`,
    null,
    JSON.stringify({
      token: t.token,
      capacity: { cpuMillis: 2000, memoryMiB: 2048, ephemeralDiskMiB: 8192, maxPlacements: 2 },
      region: "local",
      architecture: "x86_64",
      agentProtocolVersion: "1.0",
      vmmDriver: "qemu-microvm",
    }),
  );
  credential = String(r.body["credential"]);
  conn = await openTestConnection(s, "rdv-host", credential, "rdv-conn");
});
afterAll(async () => {
  await s.stop();
});

describe("the proxy's rendezvous", () => {
  test("posted under the client's endpoint token, they ride in the host's configure_connection apply", async () => {
    const candidates: Candidate[] = [{ address: "10.1.0.2", port: 40_001, kind: "local" }];
    expect(await announceCandidates(s.url, conn, candidates)).toBe(1);
    const host = new ScriptedAgent(s.url, "rdv-host", credential);
    const apply = (await host.poll()).connections?.find((c) => c.grantId === conn.grantId && c.action === "apply");
    expect(apply?.clientCandidates).toEqual(candidates);
    // A refresh: the next sequence number with the public mapping a STUN server saw; the apply comes again carrying it.
    const refreshed: Candidate[] = [{ address: "198.51.100.10", port: 61_000, kind: "stun" }, ...candidates];
    expect(await announceCandidates(s.url, conn, refreshed, 2)).toBe(2);
    const again = (await host.poll()).connections?.find((c) => c.grantId === conn.grantId && c.action === "apply");
    expect(again?.clientCandidates).toEqual(refreshed);
  });

  test("fresh relay tokens over HTTP under the client's endpoint token: for this grant and role, at most one per 10 s (RATE_LIMITED)", async () => {
    const r = await fetchRelayTokens(s.url, conn);
    // The development manifest lists no relays: no token, but the grant, role and expiry of this Connection.
    expect(r).toMatchObject({ grantId: conn.grantId, role: "client", relayTokens: {} });
    expect(r.expiresAtMs).toBeGreaterThan(Date.now());
    const again = await fetchRelayTokens(s.url, conn).catch((e: unknown) => e);
    expect(again instanceof BeachballError && again.code).toBe("RATE_LIMITED");
  });

  test("a wrong endpoint token is refused with UNAUTHENTICATED", async () => {
    const err = await announceCandidates(s.url, { ...conn, endpointToken: `bbx_${"0".repeat(64)}` }, [
      { address: "10.1.0.2", port: 1, kind: "local" },
    ]).catch((e: unknown) => e);
    expect(err instanceof BeachballError && err.code).toBe("UNAUTHENTICATED");
    const tokens = await fetchRelayTokens(s.url, { ...conn, endpointToken: `bbx_${"0".repeat(64)}` }).catch(
      (e: unknown) => e,
    );
    expect(tokens instanceof BeachballError && tokens.code).toBe("UNAUTHENTICATED");
  });
});
