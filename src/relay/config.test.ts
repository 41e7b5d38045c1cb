import { describe, expect, test } from "bun:test";
import {
  DEFAULT_HEALTH_LISTEN,
  DEFAULT_LIMIT_CAPS,
  DEFAULT_MAX_SESSIONS,
  isLoopback,
  parseListenAddress,
  RelayConfigError,
  relayConfigFrom,
} from "./config.ts";
import { startRelay } from "./server.ts";
import { makeSigner } from "./testing.ts";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { makeTestCert } from "../../test/support/relay.ts";

const key = makeSigner("conn-1");
const minimal = { relayId: "relay-a", trustedKeys: [{ keyId: "conn-1", publicKey: key.publicKeyB64 }] };
const problem = (raw: unknown) => {
  try {
    relayConfigFrom(raw, "t.json");
    return "ok";
  } catch (e) {
    expect(e).toBeInstanceOf(RelayConfigError);
    return (e as Error).message;
  }
};

describe("relay config", () => {
  test("a minimal file gets the defaults: wss on 0.0.0.0:443, health on 127.0.0.1:9443, default caps and bounds, no QUIC", () => {
    const c = relayConfigFrom({ ...minimal, tls: { certPath: "/c", keyPath: "/k" } }, "t.json");
    expect(c.listen).toEqual([{ hostname: "0.0.0.0", port: 443 }]);
    expect(c.health).toEqual(parseListenAddress(DEFAULT_HEALTH_LISTEN, "x"));
    expect(c.health.port).toBe(9443);
    expect(c.quicListen).toBeNull();
    expect(c.limitCaps).toEqual(DEFAULT_LIMIT_CAPS);
    expect(c.maxSessions).toBe(DEFAULT_MAX_SESSIONS);
    expect(c.trustedKeys.get("conn-1")).toEqual(key.publicKey);
  });

  test("unknown fields anywhere are rejected with their path", () => {
    expect(problem({ ...minimal, extra: 1 })).toBe("invalid relay config t.json: /extra Unexpected property");
    expect(problem({ ...minimal, tls: { certPath: "/c", keyPath: "/k", ca: "/x" } })).toMatch(/\/tls/);
    expect(problem({ ...minimal, trustedKeys: [{ keyId: "k", publicKey: key.publicKeyB64, note: "x" }] })).toMatch(
      /\/trustedKeys\/0/,
    );
    expect(problem({ ...minimal, limitCaps: { ...DEFAULT_LIMIT_CAPS, burst: 1 } })).toMatch(/\/limitCaps/);
  });

  test("missing keys, repeated key IDs, malformed keys and addresses, and bounds out of range are refused", () => {
    expect(problem({ relayId: "relay-a", trustedKeys: [] })).toMatch(/\/trustedKeys/);
    expect(problem({ ...minimal, trustedKeys: [minimal.trustedKeys[0], minimal.trustedKeys[0]] })).toMatch(
      /repeats the key ID conn-1/,
    );
    expect(problem({ ...minimal, trustedKeys: [{ keyId: "k", publicKey: "not-base64" }] })).toMatch(/publicKey/);
    expect(problem({ ...minimal, listen: ["443"] })).toMatch(/\/listen\/0 must be HOST:PORT/);
    expect(problem({ ...minimal, quicListen: "[::1]:70000" })).toMatch(/\/quicListen/);
    expect(problem({ ...minimal, maxSessions: 0 })).toMatch(/\/maxSessions/);
    expect(problem({ ...minimal, relayId: "Relay A" })).toMatch(/\/relayId/);
  });

  test("listen addresses: IPv4, IPv6 in brackets, names; loopback is 127/8, ::1 and localhost only", () => {
    expect(parseListenAddress("[::1]:8443", "x")).toEqual({ hostname: "::1", port: 8443 });
    expect(parseListenAddress("relay.example:443", "x")).toEqual({ hostname: "relay.example", port: 443 });
    expect(["127.0.0.1", "127.9.9.9", "::1", "localhost"].every(isLoopback)).toBe(true);
    expect(["0.0.0.0", "::", "192.0.2.1", "10.0.0.1"].some(isLoopback)).toBe(false);
  });

  test("startRelay refuses plain ws:// off loopback, and TLS listeners without a certificate, before binding anything", async () => {
    const config = relayConfigFrom(minimal, "t.json");
    await expect(startRelay({ config, insecureListen: [{ hostname: "0.0.0.0", port: 0 }] })).rejects.toThrow(
      /loopback only/,
    );
    await expect(startRelay({ config })).rejects.toThrow(/no tls/);
    await expect(
      startRelay({
        config,
        insecureListen: [{ hostname: "127.0.0.1", port: 0 }],
        quicListen: { hostname: "127.0.0.1", port: 0 },
      }),
    ).rejects.toThrow(/no tls/);
    const withMissingFiles = relayConfigFrom(
      { ...minimal, tls: { certPath: "/nonexistent/c.pem", keyPath: "/nonexistent/k.pem" } },
      "t.json",
    );
    await expect(startRelay({ config: withMissingFiles })).rejects.toThrow(
      /cannot read the TLS certificate \/nonexistent\/c\.pem: ENOENT/,
    );
  });

  test("startRelay refuses command-line addresses that clash, before binding anything (the file's own check cannot see them)", async () => {
    const config = relayConfigFrom(minimal, "t.json");
    const at = { hostname: "127.0.0.1", port: 18443 };
    await expect(startRelay({ config, insecureListen: [at], health: at })).rejects.toMatchObject({
      name: "RelayConfigError",
      message: "--health-listen repeats the address of --insecure-listen (127.0.0.1:18443)",
    });
    await expect(startRelay({ config, insecureListen: [at, at] })).rejects.toThrow(
      /--insecure-listen repeats the address of --insecure-listen/,
    );
  });

  test("a TLS key that does not match the certificate, or a file that is not PEM, is a RelayConfigError naming the file, before binding", async () => {
    const a = mkdtempSync(join(tmpdir(), "bb-relay-tls-a-"));
    const b = mkdtempSync(join(tmpdir(), "bb-relay-tls-b-"));
    try {
      const one = makeTestCert(a);
      const other = makeTestCert(b);
      const notPem = join(a, "not.pem");
      writeFileSync(notPem, "not pem\n");
      const start = (certPath: string, keyPath: string) =>
        startRelay({
          config: relayConfigFrom(
            { ...minimal, listen: ["127.0.0.1:0"], healthListen: "127.0.0.1:0", tls: { certPath, keyPath } },
            "t.json",
          ),
        });
      await expect(start(one.certPath, other.keyPath)).rejects.toThrow(
        new RelayConfigError(`the TLS key ${other.keyPath} does not match the certificate ${one.certPath}`),
      );
      await expect(start(notPem, one.keyPath)).rejects.toThrow(
        `the TLS certificate ${notPem} holds no PEM certificate`,
      );
      await expect(start(one.certPath, notPem)).rejects.toThrow(`the TLS key ${notPem} holds no PEM private key`);
      await expect(start(one.certPath, one.keyPath).then((r) => r.stop())).resolves.toBeUndefined();
    } finally {
      rmSync(a, { recursive: true, force: true });
      rmSync(b, { recursive: true, force: true });
    }
  });

  test("an address given twice among listen and healthListen is refused with the file and both fields named; a malformed one names the file", () => {
    const problem = (raw: unknown) => {
      try {
        relayConfigFrom(raw, "t.json");
        return "accepted";
      } catch (e) {
        expect(e).toBeInstanceOf(RelayConfigError);
        return (e as Error).message;
      }
    };
    expect(problem({ ...minimal, listen: ["127.0.0.1:8443", "127.0.0.1:8443"] })).toBe(
      "invalid relay config t.json: /listen/1 repeats the address of /listen/0 (127.0.0.1:8443)",
    );
    expect(problem({ ...minimal, listen: ["127.0.0.1:9443"], healthListen: "127.0.0.1:9443" })).toMatch(
      /\/healthListen repeats the address of \/listen\/0/,
    );
    expect(problem({ ...minimal, listen: ["127.0.0.1:0", "127.0.0.1:0"], healthListen: "127.0.0.1:0" })).toBe(
      "accepted",
    );
    expect(problem({ ...minimal, listen: ["127.0.0.1:70000"] })).toBe(
      'invalid relay config t.json: /listen/0 must be HOST:PORT (IPv6 in brackets), got "127.0.0.1:70000"',
    );
  });
});
