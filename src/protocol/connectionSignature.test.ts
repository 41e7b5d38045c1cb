import { describe, expect, test } from "bun:test";
import { generateKeyPairSync } from "node:crypto";
import type { GrantPayload, RelayMapPayload, RelayTokenPayload } from "./connection.ts";
import {
  checkSignedGrant,
  checkSignedRelayMap,
  checkSignedRelayToken,
  connectionPublicKeyOf,
  parseVerificationKeys,
  signConnectionDocument,
} from "./connectionSignature.ts";

function seed(): string {
  const der = generateKeyPairSync("ed25519").privateKey.export({ format: "der", type: "pkcs8" });
  return Buffer.from(der.subarray(16)).toString("base64");
}

const signer = seed();
const other = seed();
const keys = new Map([["k1", connectionPublicKeyOf(signer)]]);
const NOW = 1_800_000_000_000;
const key32 = (c: string) => Buffer.alloc(32, c).toString("base64");

const grant: GrantPayload = {
  v: 1,
  grantId: `grt_${"a".repeat(32)}`,
  tenant: "alice",
  networkId: `net_${"b".repeat(32)}`,
  allocationId: `alloc_${"c".repeat(32)}`,
  generation: 2,
  hostId: "host-1",
  clientPublicKey: key32("c"),
  hostPublicKey: key32("h"),
  clientAddress: "fd00:1:2:3::10",
  allocationAddress: "fd00:1:2:3::2",
  transport: "tcp",
  ports: [22],
  policyRevision: 0,
  issuedAtMs: NOW - 1000,
  expiresAtMs: NOW + 60_000,
};

describe("grants", () => {
  test("a grant signed by a configured key verifies and returns its payload", () => {
    const r = checkSignedGrant(
      signConnectionDocument("grant", grant, "k1", signer),
      keys,
      { allocationId: grant.allocationId, generation: 2, port: 22, hostId: "host-1" },
      NOW,
    );
    expect(r).toEqual({ ok: true, payload: grant });
  });

  test("every payload field is covered by the signature: changing any one is GRANT_SIGNATURE_INVALID", () => {
    const doc = signConnectionDocument("grant", grant, "k1", signer);
    const edits: Array<Partial<GrantPayload>> = [
      { ports: [22, 23] },
      { generation: 3 },
      { clientAddress: "fd00:1:2:3::11" },
      { expiresAtMs: NOW + 61_000 },
      { hostId: "host-2" },
      { transport: "udp" },
      { policyRevision: 1 },
    ];
    for (const e of edits) {
      const r = checkSignedGrant({ ...doc, payload: { ...grant, ...e } }, keys, {}, NOW);
      expect(r.ok ? "ok" : r.code).toBe("GRANT_SIGNATURE_INVALID");
    }
  });

  test("an unknown key ID, another signer's key, a relay-token signature replayed as a grant, and malformed documents are refused", () => {
    const byOther = signConnectionDocument("grant", grant, "k1", other);
    const unknownId = signConnectionDocument("grant", grant, "k2", signer);
    const asToken = signConnectionDocument("relay-token", grant, "k1", signer);
    for (const d of [
      byOther,
      unknownId,
      asToken,
      { ...byOther, extra: 1 },
      { payload: grant },
      null,
      "grant",
      { ...byOther, signature: "x" },
    ]) {
      const r = checkSignedGrant(d, keys, {}, NOW);
      expect(r.ok ? "ok" : r.code).toBe("GRANT_SIGNATURE_INVALID");
    }
  });

  test("expiry, issue time beyond the skew, a lifetime over the bound, and each expected field give their codes", () => {
    const doc = (p: Partial<GrantPayload>) => signConnectionDocument("grant", { ...grant, ...p }, "k1", signer);
    const code = (d: unknown, e = {}, now = NOW) => {
      const r = checkSignedGrant(d, keys, e, now);
      return r.ok ? "ok" : r.code;
    };
    expect(code(doc({}), {}, grant.expiresAtMs)).toBe("GRANT_EXPIRED");
    expect(code(doc({}), {}, grant.expiresAtMs - 1)).toBe("ok");
    expect(code(doc({ issuedAtMs: NOW + 31_000, expiresAtMs: NOW + 90_000 }))).toBe("GRANT_NOT_YET_VALID");
    expect(code(doc({ issuedAtMs: NOW + 29_000, expiresAtMs: NOW + 90_000 }))).toBe("ok");
    expect(code(doc({ expiresAtMs: grant.issuedAtMs + 3_600_001 }))).toBe("GRANT_MISMATCH");
    expect(code(doc({ allocationAddress: grant.clientAddress }))).toBe("GRANT_MISMATCH");
    expect(code(doc({ clientAddress: "fd00::1::2" }))).toBe("GRANT_MISMATCH");
    expect(code(doc({}), { generation: 1 })).toBe("GRANT_MISMATCH");
    expect(code(doc({}), { hostPublicKey: key32("x") })).toBe("GRANT_MISMATCH");
    expect(code(doc({}), { clientPublicKey: key32("x") })).toBe("GRANT_MISMATCH");
    expect(code(doc({}), { port: 23 })).toBe("GRANT_MISMATCH");
    expect(code(doc({}), { hostId: "host-9" })).toBe("GRANT_MISMATCH");
  });
});

describe("relay maps and relay tokens", () => {
  const map: RelayMapPayload = {
    v: 1,
    relays: [{ relayId: "r1", url: "wss://relay.example:443/v1/relay" }],
    issuedAtMs: NOW,
    expiresAtMs: NOW + 60_000,
  };
  const token: RelayTokenPayload = {
    v: 1,
    relayId: "r1",
    grantId: grant.grantId,
    role: "client",
    limits: { maxBytes: 1 << 30, maxBytesPerSecond: 1 << 20, idleTimeoutMs: 30_000 },
    issuedAtMs: NOW,
    expiresAtMs: NOW + 60_000,
  };

  test("a relay map verifies; tampering, a grant signature and a duplicate relay ID are refused", () => {
    expect(checkSignedRelayMap(signConnectionDocument("relay-map", map, "k1", signer), keys, NOW).ok).toBe(true);
    const tampered = {
      ...signConnectionDocument("relay-map", map, "k1", signer),
      payload: { ...map, relays: [{ relayId: "evil", url: "ws://127.0.0.1:1/x" }] },
    };
    const r1 = checkSignedRelayMap(tampered, keys, NOW);
    expect(r1.ok ? "ok" : r1.code).toBe("GRANT_SIGNATURE_INVALID");
    const r2 = checkSignedRelayMap(signConnectionDocument("grant", map, "k1", signer), keys, NOW);
    expect(r2.ok ? "ok" : r2.code).toBe("GRANT_SIGNATURE_INVALID");
    const dup = signConnectionDocument("relay-map", { ...map, relays: [map.relays[0]!, map.relays[0]!] }, "k1", signer);
    const r3 = checkSignedRelayMap(dup, keys, NOW);
    expect(r3.ok ? "ok" : r3.code).toBe("GRANT_MISMATCH");
  });

  test("a relay token verifies for its relay, grant and role only", () => {
    const doc = signConnectionDocument("relay-token", token, "k1", signer);
    const code = (e: object, now = NOW) => {
      const r = checkSignedRelayToken(doc, keys, e, now);
      return r.ok ? "ok" : r.code;
    };
    expect(code({ relayId: "r1", grantId: grant.grantId, role: "client" })).toBe("ok");
    expect(code({ relayId: "r2" })).toBe("RELAY_TOKEN_WRONG_RELAY");
    expect(code({ grantId: `grt_${"f".repeat(32)}` })).toBe("RELAY_TOKEN_INVALID");
    expect(code({ role: "host" })).toBe("RELAY_TOKEN_INVALID");
    expect(code({}, token.expiresAtMs)).toBe("RELAY_TOKEN_EXPIRED");
    const long = signConnectionDocument("relay-token", { ...token, expiresAtMs: NOW + 301_000 }, "k1", signer);
    const r = checkSignedRelayToken(long, keys, {}, NOW);
    expect(r.ok ? "ok" : r.code).toBe("RELAY_TOKEN_EXPIRED");
  });
});

test("verification keys parse from KEYID=BASE64 pairs and bad entries are refused", () => {
  const pub = connectionPublicKeyOf(signer);
  expect(parseVerificationKeys(`k1=${pub}, k2=${pub}`)).toEqual(
    new Map([
      ["k1", pub],
      ["k2", pub],
    ]),
  );
  expect(() => parseVerificationKeys(pub)).toThrow(/KEYID=BASE64/);
  expect(() => parseVerificationKeys("k1=abc")).toThrow(/KEYID=BASE64/);
  expect(() => parseVerificationKeys(`k1=${pub},k1=${Buffer.alloc(32, 9).toString("base64")}`)).toThrow(
    "verification key ID k1 is given twice",
  );
});
