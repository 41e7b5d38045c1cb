/** Unit tests of the applied-grant reconciliation rules (src/domain/grantReconcile.ts). */
import { describe, expect, test } from "bun:test";
import { MAX_GRANT_REDELIVERIES_PER_SESSION, reconcileGrants, type HeldGrant } from "./grantReconcile.ts";

const NOW = 1_000_000;
const g = (grantId: string, over: Partial<HeldGrant> = {}): HeldGrant => ({
  grantId,
  placementId: "plc_1",
  generation: 2,
  expiresAtMs: NOW + 60_000,
  apply: "acked",
  revoke: null,
  ...over,
});
const current = (placementId: string, generation: number) => placementId === "plc_1" && generation === 2;
const never = () => 0;

describe("reconcileGrants", () => {
  test("an acknowledged live grant the host does not report is applied again; one it reports is left alone", () => {
    expect(reconcileGrants([g("a"), g("b")], new Set(["b"]), NOW, current, never)).toEqual({
      reapply: ["a"],
      rerevoke: [],
    });
  });

  test("never an apply for a revoked, expired, refused, still pending or stale-generation grant", () => {
    const held = [
      g("revoked", { revoke: "pending" }),
      g("revokeAcked", { revoke: "acked" }),
      g("expired", { expiresAtMs: NOW }),
      g("refused", { apply: "rejected" }),
      g("pending", { apply: "pending" }),
      g("superseded", { apply: "superseded" }),
      g("oldGeneration", { generation: 1 }),
      g("otherPlacement", { placementId: "plc_0" }),
    ];
    expect(reconcileGrants(held, new Set(), NOW, current, never)).toEqual({ reapply: [], rerevoke: [] });
  });

  test("a grant the host still holds after acknowledging its revoke is revoked again; a pending revoke needs nothing", () => {
    const held = [
      g("acked", { revoke: "acked" }),
      g("pending", { revoke: "pending" }),
      g("expired", { revoke: "acked", expiresAtMs: NOW - 1 }),
    ];
    expect(reconcileGrants(held, new Set(["acked", "pending", "expired"]), NOW, current, never)).toEqual({
      reapply: [],
      rerevoke: ["acked"],
    });
  });

  test("a grant redelivered MAX_GRANT_REDELIVERIES_PER_SESSION times in this session is not redelivered again", () => {
    const counts = new Map([
      ["a", MAX_GRANT_REDELIVERIES_PER_SESSION],
      ["b", MAX_GRANT_REDELIVERIES_PER_SESSION - 1],
    ]);
    const held = [g("a"), g("b"), g("c", { revoke: "acked" })];
    counts.set("c", MAX_GRANT_REDELIVERIES_PER_SESSION);
    expect(reconcileGrants(held, new Set(["c"]), NOW, current, (id) => counts.get(id) ?? 0)).toEqual({
      reapply: ["b"],
      rerevoke: [],
    });
  });
});
