import { describe, expect, test } from "bun:test";
import { expiringSoonAt, leaseAccess, leaseDeadline } from "./leases.ts";

describe("lease rules", () => {
  test("the deadline is the earlier of the TTL and the idle timeout after the last activity", () => {
    expect(leaseDeadline({ expiresAtMs: 10_000, idleMs: 2_000, lastActivityAtMs: 1_000 })).toEqual({
      atMs: 3_000,
      reason: "IDLE_EXPIRED",
    });
    expect(leaseDeadline({ expiresAtMs: 10_000, idleMs: 20_000, lastActivityAtMs: 1_000 })).toEqual({
      atMs: 10_000,
      reason: "TTL_EXPIRED",
    });
    expect(leaseDeadline({ expiresAtMs: 10_000, idleMs: null, lastActivityAtMs: 9_999 }).reason).toBe("TTL_EXPIRED");
  });

  test("expiring soon: a tenth of the idle timeout or TTL span ahead, at most five minutes", () => {
    expect(expiringSoonAt({ expiresAtMs: 100_000, idleMs: 2_000, lastActivityAtMs: 0 }, 0)).toBe(1_800);
    expect(expiringSoonAt({ expiresAtMs: 100_000, idleMs: null, lastActivityAtMs: 0 }, 0)).toBe(90_000);
    expect(expiringSoonAt({ expiresAtMs: 86_400_000, idleMs: null, lastActivityAtMs: 0 }, 0)).toBe(
      86_400_000 - 300_000,
    );
  });

  test("access: the owner, a share, or nothing", () => {
    expect(leaseAccess("a", { b: "read" }, "a")).toBe("owner");
    expect(leaseAccess("a", { b: "use" }, "b")).toBe("use");
    expect(leaseAccess("a", { b: "read" }, "c")).toBeNull();
  });
});
