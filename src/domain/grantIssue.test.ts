/** Unit tests of the Network's grant refusals (src/domain/grantIssue.ts). */
import { describe, expect, test } from "bun:test";
import {
  closedGrantRefusal,
  grantLimitRefusal,
  MAX_GRANTS_PER_NETWORK,
  MAX_LIVE_GRANTS_PER_ALLOCATION,
  revokedWhileIssuedRefusal,
} from "./grantIssue.ts";

const live = { terminalAtMs: null, closedGeneration: 1 };

describe("when the Network refuses a grant", () => {
  test("no private address or a released allocation: INVALID_STATE; a replaced generation: STALE_GENERATION", () => {
    expect(closedGrantRefusal(null, 2)?.code).toBe("INVALID_STATE");
    expect(closedGrantRefusal({ terminalAtMs: 5, closedGeneration: 0 }, 2)?.code).toBe("INVALID_STATE");
    expect(closedGrantRefusal(live, 1)?.code).toBe("STALE_GENERATION");
    expect(closedGrantRefusal(live, 2)).toBeNull();
  });

  test("at the allocation's or the Network's bound: RATE_LIMITED with a retry hint", () => {
    expect(grantLimitRefusal(MAX_LIVE_GRANTS_PER_ALLOCATION - 1, MAX_GRANTS_PER_NETWORK - 1)).toBeNull();
    expect(grantLimitRefusal(MAX_LIVE_GRANTS_PER_ALLOCATION, 0)).toMatchObject({
      code: "RATE_LIMITED",
      retryAfterSeconds: 5,
    });
    expect(grantLimitRefusal(0, MAX_GRANTS_PER_NETWORK)).toMatchObject({ code: "RATE_LIMITED", retryAfterSeconds: 30 });
  });

  test("revoked while handed to the host: released is INVALID_STATE, replaced is STALE_GENERATION", () => {
    expect(revokedWhileIssuedRefusal(false, null)).toBeNull();
    expect(revokedWhileIssuedRefusal(true, null)?.code).toBe("INVALID_STATE");
    expect(revokedWhileIssuedRefusal(true, { terminalAtMs: 5, closedGeneration: 2 })?.code).toBe("INVALID_STATE");
    expect(revokedWhileIssuedRefusal(true, live)?.code).toBe("STALE_GENERATION");
  });
});
