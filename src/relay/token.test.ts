import { describe, expect, test } from "bun:test";
import { MAX_RELAY_TOKEN_TTL_SECONDS } from "../protocol/connection.ts";
import { grantId, makeSigner, TEST_LIMITS, tokenPayload } from "./testing.ts";
import { publicKeyObjects, RELAY_TOKEN_SKEW_MS, verifyRelayToken, type TokenPolicy } from "./token.ts";

const NOW = 1_800_000_000_000;
const signer = makeSigner("conn-1");
const other = makeSigner("conn-2");
const policy: TokenPolicy = {
  relayId: "relay-a",
  keys: publicKeyObjects(new Map([[signer.keyId, signer.publicKey]])),
  caps: TEST_LIMITS,
};
const good = tokenPayload("relay-a", "client", grantId(1), NOW);
const check = (doc: unknown, at = NOW) =>
  verifyRelayToken(typeof doc === "string" ? doc : JSON.stringify(doc), policy, at);
const code = (doc: unknown, at = NOW) => {
  const r = check(doc, at);
  return r.ok ? "ok" : r.code;
};

describe("relay token verification", () => {
  test("a token signed by a trusted key for this relay, fresh and within caps, is accepted with its payload", () => {
    const r = check(signer.sign(good));
    expect(r).toEqual({ ok: true, token: good });
  });

  test("tampered: any change to the payload or the signature after signing is RELAY_TOKEN_INVALID", () => {
    const t = signer.sign(good);
    expect(code({ ...t, payload: { ...t.payload, role: "host" } })).toBe("RELAY_TOKEN_INVALID");
    expect(code({ ...t, payload: { ...t.payload, grantId: grantId(2) } })).toBe("RELAY_TOKEN_INVALID");
    expect(code({ ...t, payload: { ...t.payload, limits: { ...t.payload.limits, maxBytes: 1 } } })).toBe(
      "RELAY_TOKEN_INVALID",
    );
    const sig = Buffer.from(t.signature, "base64");
    sig[10]! ^= 1;
    expect(code({ ...t, signature: sig.toString("base64") })).toBe("RELAY_TOKEN_INVALID");
  });

  test("a signature over another document kind (domain separation) does not verify as a relay token", async () => {
    const { signingBytes } = await import("../protocol/connection.ts");
    const { generateKeyPairSync, createPublicKey, sign } = await import("node:crypto");
    const { privateKey } = generateKeyPairSync("ed25519");
    const raw = new Uint8Array(createPublicKey(privateKey).export({ format: "der", type: "spki" }).subarray(12));
    const p2: TokenPolicy = { ...policy, keys: publicKeyObjects(new Map([["k", raw]])) };
    const asGrant = sign(null, signingBytes("grant", good), privateKey).toString("base64");
    const asToken = sign(null, signingBytes("relay-token", good), privateKey).toString("base64");
    expect(verifyRelayToken(JSON.stringify({ payload: good, keyId: "k", signature: asGrant }), p2, NOW).ok).toBe(false);
    expect(verifyRelayToken(JSON.stringify({ payload: good, keyId: "k", signature: asToken }), p2, NOW).ok).toBe(true);
  });

  test("wrong key: an untrusted signer, or a trusted key ID with another key's signature, is RELAY_TOKEN_INVALID", () => {
    expect(code(other.sign(good))).toBe("RELAY_TOKEN_INVALID");
    expect(code({ ...other.sign(good), keyId: signer.keyId })).toBe("RELAY_TOKEN_INVALID");
  });

  test("wrong relay: a token minted for another relay is RELAY_TOKEN_WRONG_RELAY", () => {
    expect(code(signer.sign({ ...good, relayId: "relay-b" }))).toBe("RELAY_TOKEN_WRONG_RELAY");
  });

  test("expired at expiresAtMs, valid just before; issued in the future beyond the skew is RELAY_TOKEN_EXPIRED, within it is accepted", () => {
    const t = signer.sign(good);
    expect(code(t, good.expiresAtMs - 1)).toBe("ok");
    expect(code(t, good.expiresAtMs)).toBe("RELAY_TOKEN_EXPIRED");
    expect(code(t, good.issuedAtMs - RELAY_TOKEN_SKEW_MS)).toBe("ok");
    expect(code(t, good.issuedAtMs - RELAY_TOKEN_SKEW_MS - 1)).toBe("RELAY_TOKEN_EXPIRED");
  });

  test("a lifetime over MAX_RELAY_TOKEN_TTL_SECONDS, or an empty one, is RELAY_TOKEN_INVALID even when signed", () => {
    expect(code(signer.sign({ ...good, expiresAtMs: good.issuedAtMs + MAX_RELAY_TOKEN_TTL_SECONDS * 1000 }))).toBe(
      "ok",
    );
    expect(code(signer.sign({ ...good, expiresAtMs: good.issuedAtMs + MAX_RELAY_TOKEN_TTL_SECONDS * 1000 + 1 }))).toBe(
      "RELAY_TOKEN_INVALID",
    );
    expect(code(signer.sign({ ...good, expiresAtMs: good.issuedAtMs }))).toBe("RELAY_TOKEN_INVALID");
  });

  test("limits over any of the relay's caps are RELAY_LIMITS_OVER_CAP; at the caps they are accepted", () => {
    expect(code(signer.sign({ ...good, limits: TEST_LIMITS }))).toBe("ok");
    for (const k of ["maxBytes", "maxBytesPerSecond", "idleTimeoutMs"] as const) {
      expect(code(signer.sign({ ...good, limits: { ...TEST_LIMITS, [k]: TEST_LIMITS[k] + 1 } })), k).toBe(
        "RELAY_LIMITS_OVER_CAP",
      );
    }
  });

  test("malformed input is RELAY_TOKEN_INVALID: not JSON, wrong shape, unknown fields, oversized text", () => {
    const t = signer.sign(good);
    for (const bad of [
      "",
      "{",
      "null",
      "[]",
      JSON.stringify({ ...t, extra: 1 }),
      JSON.stringify({ ...t, payload: { ...t.payload, extra: 1 } }),
      JSON.stringify({ payload: t.payload, keyId: t.keyId }),
      `${JSON.stringify(t)}${" ".repeat(5000)}`,
    ]) {
      expect(code(bad), bad.slice(0, 40)).toBe("RELAY_TOKEN_INVALID");
    }
  });
});
