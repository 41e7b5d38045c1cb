/**
 * The declared ID shapes (src/protocol/ids.ts): the wire text of each
 * pattern (OpenAPI and every schema carry it, so it must not drift), what
 * each accepts and refuses, and the host credential's groups.
 */
import { describe, expect, test } from "bun:test";
import {
  ALLOCATION_ID,
  ALLOCATION_ID_PATTERN,
  CONNECTION_ID,
  ENDPOINT_TOKEN,
  GRANT_ID,
  HOST_CREDENTIAL,
  HOST_ID,
  HOST_ID_PATTERN,
  NETWORK_ID,
  RELAY_ID,
} from "./ids.ts";

const hex32 = "0123456789abcdef".repeat(2);
const hex64 = hex32.repeat(2);

describe("ID patterns", () => {
  test("the wire text is the one the API documents", () => {
    expect(ALLOCATION_ID_PATTERN).toBe("^alloc_[0-9a-f]{32}$");
    expect(HOST_ID_PATTERN).toBe("^[a-z0-9][a-z0-9-]{0,62}$");
    expect(GRANT_ID.source).toBe("^grt_[0-9a-f]{32}$");
    expect(CONNECTION_ID.source).toBe("^con_[0-9a-f]{32}$");
    expect(ENDPOINT_TOKEN.source).toBe("^bbx_[0-9a-f]{64}$");
  });

  test("prefixed IDs take exactly 32 lower-case hex digits after their own prefix", () => {
    for (const [re, prefix] of [
      [ALLOCATION_ID, "alloc_"],
      [GRANT_ID, "grt_"],
      [CONNECTION_ID, "con_"],
      [NETWORK_ID, "net_"],
    ] as const) {
      expect(re.test(`${prefix}${hex32}`)).toBe(true);
      expect(re.test(`${prefix}${hex32.slice(1)}`)).toBe(false);
      expect(re.test(`${prefix}${hex32}0`)).toBe(false);
      expect(re.test(`${prefix}${hex32.toUpperCase()}`)).toBe(false);
      expect(re.test(`x${prefix}${hex32}`)).toBe(false);
    }
    expect(ALLOCATION_ID.test(`grt_${hex32}`)).toBe(false);
  });

  test("host and relay IDs are DNS labels: 1..63 characters, no leading dash, no upper case", () => {
    for (const re of [HOST_ID, RELAY_ID]) {
      expect(re.test("h1")).toBe(true);
      expect(re.test("a".repeat(63))).toBe(true);
      expect(re.test("a".repeat(64))).toBe(false);
      expect(re.test("-h")).toBe(false);
      expect(re.test("H1")).toBe(false);
      expect(re.test("")).toBe(false);
    }
  });

  test("a host credential yields its host ID and secret; a malformed one matches nothing", () => {
    expect(HOST_CREDENTIAL.exec(`bbh_host-1.${hex64}`)?.slice(1)).toEqual(["host-1", hex64]);
    expect(HOST_CREDENTIAL.test(`bbh_-host.${hex64}`)).toBe(false);
    expect(HOST_CREDENTIAL.test(`bbh_host.${hex32}`)).toBe(false);
    expect(ENDPOINT_TOKEN.test(`bbx_${hex64}`)).toBe(true);
  });
});
