import { describe, expect, test } from "bun:test";
import {
  checkGrantRequest,
  generationFenced,
  GRANT_EXPIRY_GRACE_MS,
  grantGone,
  grantStale,
  parsePortRange,
  portAllowed,
  type ConnectionPolicy,
} from "./grants.ts";

const ssh: ConnectionPolicy = { transports: ["tcp"], ports: ["22", "8000-8010"] };
const limits = { maxTtlSeconds: 900, defaultTtlSeconds: 300 };

describe("grant policy", () => {
  test("port ranges parse inclusively; malformed or reversed ranges are refused", () => {
    expect(parsePortRange("22")).toEqual([22, 22]);
    expect(parsePortRange("8000-8010")).toEqual([8000, 8010]);
    for (const bad of ["0", "65536", "10-9", "1-", "-5", "a", "1,2", " 22"]) expect(parsePortRange(bad)).toBeNull();
    expect([21, 22, 23, 7999, 8000, 8010, 8011].map((p) => portAllowed(ssh, p))).toEqual([
      false,
      true,
      false,
      false,
      true,
      true,
      false,
    ]);
  });
  test("a request inside the policy gets its TTL (default when absent, never above the maximum)", () => {
    expect(checkGrantRequest(ssh, { transport: "tcp", ports: [22, 8005] }, limits)).toEqual({
      ok: true,
      ttlMs: 300_000,
    });
    expect(checkGrantRequest(ssh, { transport: "tcp", ports: [22], ttlSeconds: 60 }, limits)).toEqual({
      ok: true,
      ttlMs: 60_000,
    });
    expect(checkGrantRequest(ssh, { transport: "tcp", ports: [22], ttlSeconds: 3600 }, limits)).toEqual({
      ok: true,
      ttlMs: 900_000,
    });
  });
  test("refused with FORBIDDEN naming the transport or the first port outside the policy, or a class without a policy", () => {
    const r1 = checkGrantRequest(ssh, { transport: "udp", ports: [22] }, limits);
    expect(r1.ok ? null : r1.refusal).toEqual({
      code: "FORBIDDEN",
      message: "transport udp is not allowed for this workload class (allowed: tcp)",
    });
    const r2 = checkGrantRequest(ssh, { transport: "tcp", ports: [22, 25, 26] }, limits);
    expect(r2.ok ? null : r2.refusal.message).toBe(
      "port 25 is not allowed for this workload class (allowed: 22, 8000-8010)",
    );
    const r3 = checkGrantRequest(null, { transport: "tcp", ports: [22] }, limits);
    expect(r3.ok ? null : r3.refusal.code).toBe("FORBIDDEN");
  });
});

describe("when a grant is gone from its host", () => {
  const T = 1_000_000;
  test("a live grant is not gone; a revoke acknowledged by the host is; expiry is, after the grace", () => {
    expect(grantGone({ expiresAtMs: T + 60_000, revokeObservedAtMs: null }, T)).toBe(false);
    expect(grantGone({ expiresAtMs: T + 60_000, revokeObservedAtMs: T }, T)).toBe(true);
    expect(grantGone({ expiresAtMs: T, revokeObservedAtMs: null }, T + GRANT_EXPIRY_GRACE_MS - 1)).toBe(false);
    expect(grantGone({ expiresAtMs: T, revokeObservedAtMs: null }, T + GRANT_EXPIRY_GRACE_MS)).toBe(true);
  });
  test("a generation is fenced once every grant is gone; until then the answer says by when expiry alone fences it", () => {
    expect(generationFenced([], T)).toEqual({ fenced: true });
    const gs = [
      { expiresAtMs: T + 10_000, revokeObservedAtMs: null },
      { expiresAtMs: T + 90_000, revokeObservedAtMs: T },
      { expiresAtMs: T + 30_000, revokeObservedAtMs: null },
    ];
    expect(generationFenced(gs, T)).toEqual({ fenced: false, byMs: T + 30_000 + GRANT_EXPIRY_GRACE_MS });
    expect(generationFenced(gs, T + 30_000 + GRANT_EXPIRY_GRACE_MS)).toEqual({ fenced: true });
  });
});

describe("when a grant is stale (must be revoked)", () => {
  const live = { generation: 2, revokedAtMs: null, goneAtMs: null };
  const open = { closedGeneration: 1, terminalAtMs: null };
  test("a live grant of an open generation of a live allocation is not stale", () => {
    expect(grantStale(live, open)).toBe(false);
    expect(grantStale(live, null)).toBe(false);
  });
  test("a live grant is stale once its generation is closed or its allocation ended", () => {
    expect(grantStale(live, { closedGeneration: 2, terminalAtMs: null })).toBe(true);
    expect(grantStale(live, { closedGeneration: 3, terminalAtMs: null })).toBe(true);
    expect(grantStale(live, { closedGeneration: 0, terminalAtMs: 5 })).toBe(true);
  });
  test("a grant already revoked or gone is never stale again (its revoke was already sent)", () => {
    const ended = { closedGeneration: 9, terminalAtMs: 5 };
    expect(grantStale({ ...live, revokedAtMs: 1 }, ended)).toBe(false);
    expect(grantStale({ ...live, goneAtMs: 1 }, ended)).toBe(false);
  });
});
