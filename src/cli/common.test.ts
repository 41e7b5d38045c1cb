import { describe, expect, test } from "bun:test";
import { BeachballError } from "../protocol/errors.ts";
import { UsageError } from "../command/run.ts";
import { flagError } from "./common.ts";

describe("flagError", () => {
  test("a malformed path parameter becomes a usage error about the positional argument; a body field one about its flag; others pass", () => {
    const param = flagError(
      new BeachballError("VALIDATION_FAILED", "path parameter id (host ID) must match ^[a-z0-9][a-z0-9-]{0,62}$"),
      { ":id": "HOST_ID" },
    );
    expect(param).toBeInstanceOf(UsageError);
    expect((param as Error).message).toBe("HOST_ID must match ^[a-z0-9][a-z0-9-]{0,62}$");
    const field = flagError(new BeachballError("VALIDATION_FAILED", "/ttlSeconds: Expected integer"), {
      ttlSeconds: "--ttl",
    });
    expect([field instanceof UsageError, (field as Error).message]).toEqual([true, "--ttl: Expected integer"]);
    const other = new BeachballError("NOT_FOUND", "no such host");
    expect(flagError(other, { ":id": "HOST_ID" })).toBe(other);
    const unmapped = new BeachballError(
      "VALIDATION_FAILED",
      "path parameter grantId (grant ID) must match ^grt_[0-9a-f]{32}$",
    );
    expect(flagError(unmapped, { ":id": "HOST_ID" })).toBe(unmapped);
  });
});
