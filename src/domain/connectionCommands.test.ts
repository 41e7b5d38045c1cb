/** Unit tests of the Host's configure_connection queue rules (src/domain/connectionCommands.ts). */
import { describe, expect, test } from "bun:test";
import {
  acceptClientCandidates,
  ackOutcome,
  handoutDecision,
  isNewerConnectivity,
  MAX_CLIENT_CANDIDATE_UPDATES_PER_GRANT,
  type ApplyForCandidates,
} from "./connectionCommands.ts";
import { GRANT_EXPIRY_GRACE_MS } from "./grants.ts";

const NOW = 1_000_000;

describe("isNewerConnectivity", () => {
  test("the first update, a new session, or a higher seq in the same session is newer", () => {
    expect(isNewerConnectivity(null, "e1", 0)).toBe(true);
    expect(isNewerConnectivity({ agentEpoch: "e1", seq: 9 }, "e2", 1)).toBe(true);
    expect(isNewerConnectivity({ agentEpoch: "e1", seq: 3 }, "e1", 4)).toBe(true);
  });
  test("the same or a lower seq in the same session is not", () => {
    expect(isNewerConnectivity({ agentEpoch: "e1", seq: 3 }, "e1", 3)).toBe(false);
    expect(isNewerConnectivity({ agentEpoch: "e1", seq: 3 }, "e1", 2)).toBe(false);
  });
});

describe("ackOutcome", () => {
  test("a pending command becomes acked or rejected; only an accepted revoke is observed", () => {
    expect(ackOutcome("revoke", "pending", "accepted")).toEqual({ status: "acked", revokeObserved: true });
    expect(ackOutcome("revoke", "pending", "duplicate")).toEqual({ status: "acked", revokeObserved: true });
    expect(ackOutcome("revoke", "pending", "rejected")).toEqual({ status: "rejected", revokeObserved: false });
    expect(ackOutcome("apply", "pending", "accepted")).toEqual({ status: "acked", revokeObserved: false });
  });
  test("an ack for a command no longer pending is ignored", () => {
    for (const s of ["acked", "rejected", "superseded"] as const)
      expect(ackOutcome("revoke", s, "accepted")).toBeNull();
  });
});

describe("handoutDecision", () => {
  test("an apply is handed out until its grant expires, and only when it can be signed", () => {
    expect(handoutDecision("apply", NOW + 1, NOW, true)).toBe("hand_out");
    expect(handoutDecision("apply", NOW, NOW, true)).toBe("supersede");
    expect(handoutDecision("apply", NOW + 1, NOW, false)).toBe("supersede");
  });
  test("a revoke is handed out until GRANT_EXPIRY_GRACE_MS past its grant's expiry", () => {
    expect(handoutDecision("revoke", NOW - 1, NOW, false)).toBe("hand_out");
    expect(handoutDecision("revoke", NOW - GRANT_EXPIRY_GRACE_MS + 1, NOW, true)).toBe("hand_out");
    expect(handoutDecision("revoke", NOW - GRANT_EXPIRY_GRACE_MS, NOW, true)).toBe("supersede");
  });
});

describe("acceptClientCandidates", () => {
  const apply = (over: Partial<ApplyForCandidates> = {}): ApplyForCandidates => ({
    status: "acked",
    expiresAtMs: NOW + 60_000,
    clientCandidatesJson: null,
    clientCandidateUpdates: 0,
    ...over,
  });
  test("a new list for a live, unrevoked apply is taken", () => {
    expect(acceptClientCandidates(apply(), false, "[1]", NOW)).toBe(true);
    expect(acceptClientCandidates(apply({ status: "pending", clientCandidatesJson: "[0]" }), false, "[1]", NOW)).toBe(
      true,
    );
  });
  test("never for a refused, superseded, expired or revoked grant, nor an unchanged list", () => {
    expect(acceptClientCandidates(apply({ status: "rejected" }), false, "[1]", NOW)).toBe(false);
    expect(acceptClientCandidates(apply({ status: "superseded" }), false, "[1]", NOW)).toBe(false);
    expect(acceptClientCandidates(apply({ expiresAtMs: NOW }), false, "[1]", NOW)).toBe(false);
    expect(acceptClientCandidates(apply(), true, "[1]", NOW)).toBe(false);
    expect(acceptClientCandidates(apply({ clientCandidatesJson: "[1]" }), false, "[1]", NOW)).toBe(false);
  });
  test("at most MAX_CLIENT_CANDIDATE_UPDATES_PER_GRANT lists per grant", () => {
    const n = MAX_CLIENT_CANDIDATE_UPDATES_PER_GRANT;
    expect(acceptClientCandidates(apply({ clientCandidateUpdates: n - 1 }), false, "[1]", NOW)).toBe(true);
    expect(acceptClientCandidates(apply({ clientCandidateUpdates: n }), false, "[1]", NOW)).toBe(false);
  });
});
