import { afterEach, describe, expect, test } from "bun:test";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connectionSettings } from "./connectionSettings.ts";
import { connectionSigner } from "./connectionSigner.ts";
import { keyFileSeed } from "./connectionKeyFile.ts";
import { devConnections, tokenDigest, type DeploymentManifest } from "./manifest.ts";
import { checkSignedGrant } from "../protocol/connectionSignature.ts";
import type { ConnectionsSection } from "./manifestSchema.ts";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function fresh(): { dir: string; c: ConnectionsSection; manifest: (c: ConnectionsSection) => DeploymentManifest } {
  const dir = mkdtempSync(join(tmpdir(), "bb-connset-"));
  dirs.push(dir);
  const c = devConnections(dir);
  const manifest = (conn: ConnectionsSection): DeploymentManifest => ({
    version: 1,
    region: "t",
    principals: [{ id: "controller:t", role: "controller", tokenSha256: tokenDigest("c") }],
    workloadClasses: {
      small: { cpuMillis: 500, memoryMiB: 256, ephemeralDiskMiB: 1024, imageDigest: `sha256:${"0".repeat(64)}` },
    },
    limits: { maxConcurrentAllocationsPerController: 10, maxRegisteredHosts: 10 },
    hostEnrollment: { autoActivate: true },
    connections: conn,
  });
  return { dir, c, manifest };
}

describe("the manifest's connections section", () => {
  test("the development section is valid: a random /48, its signing key listed, a 0600 key file", () => {
    const { c, manifest } = fresh();
    const s = connectionSettings(manifest(c))!;
    expect(s.ula.text).toMatch(/^fd[0-9a-f]{2}:[0-9a-f]{1,4}:[0-9a-f]{1,4}::\/48$/);
    expect(s.policyFor("small")).toEqual({ transports: ["tcp", "udp"], ports: ["1-65535"] });
    expect(s.defaultTtlSeconds).toBe(600);
    expect(s.stunServers).toEqual([]);
    expect(
      connectionSettings(manifest({ ...c, stunServers: ["192.0.2.53:3478", "[2001:DB8::53]:3478"] }))!.stunServers,
    ).toEqual(["192.0.2.53:3478", "[2001:db8::53]:3478"]);
    expect(connectionSettings({ ...manifest(c), connections: undefined } as DeploymentManifest)).toBeNull();
  });

  test("refused, naming the field: a bad prefix, an unknown key, an undeclared class, a relay twice, a reversed range, a key that is not canonical base64 of 32 bytes, a STUN server that is not an address", () => {
    const { c, manifest } = fresh();
    const bad: [Partial<ConnectionsSection>, string][] = [
      [{ ulaPrefix: "fc00:1234:5678::/48" }, "/connections/ulaPrefix"],
      [{ signingKey: { keyId: "other", file: c.signingKey.file } }, "/connections/signingKey/keyId"],
      [
        { grants: { ...c.grants, workloadClasses: { nope: { transports: ["tcp"], ports: ["22"] } } } },
        "/connections/grants/workloadClasses/nope",
      ],
      [
        {
          relays: [
            { relayId: "r", url: "wss://a:443/v1/relay" },
            { relayId: "r", url: "wss://b:443/v1/relay" },
          ],
        },
        "listed twice",
      ],
      [
        { grants: { ...c.grants, default: { transports: ["tcp"], ports: ["9-8"] } } },
        "/connections/grants/default/ports",
      ],
      [
        { verificationKeys: { ...c.verificationKeys, junk: "A".repeat(42) + "B=" } },
        "/connections/verificationKeys/junk",
      ],
      [{ stunServers: ["999.0.0.1:3478"] }, "/connections/stunServers"],
    ];
    for (const [patch, field] of bad) expect(() => connectionSettings(manifest({ ...c, ...patch }))).toThrow(field);
  });
});

describe("the signer and its key file", () => {
  test("signs documents the shared verifier accepts; the host endpoint token is stable per Connection and differs between them", () => {
    const { c } = fresh();
    const signer = connectionSigner(
      c.signingKey.keyId,
      c.verificationKeys[c.signingKey.keyId]!,
      keyFileSeed(c.signingKey.file),
    );
    signer.check();
    const t = signer.hostEndpointToken(`con_${"1".repeat(32)}`);
    expect(t).toMatch(/^bbx_[0-9a-f]{64}$/);
    expect(signer.hostEndpointToken(`con_${"1".repeat(32)}`)).toBe(t);
    expect(signer.hostEndpointToken(`con_${"2".repeat(32)}`)).not.toBe(t);
    const payload = {
      v: 1 as const,
      grantId: `grt_${"a".repeat(32)}`,
      tenant: "controller:t",
      networkId: `net_${"b".repeat(32)}`,
      allocationId: `alloc_${"c".repeat(32)}`,
      generation: 1,
      hostId: "h1",
      clientPublicKey: Buffer.alloc(32, 1).toString("base64"),
      hostPublicKey: Buffer.alloc(32, 2).toString("base64"),
      clientAddress: "fd00:1:2:1:2::1",
      allocationAddress: "fd00:1:2:1:1::1",
      transport: "tcp" as const,
      ports: [22],
      policyRevision: 1,
      issuedAtMs: 1000,
      expiresAtMs: 61_000,
    };
    const keys = new Map(Object.entries(c.verificationKeys));
    expect(checkSignedGrant(signer.sign("grant", payload), keys, { generation: 1 }, 2000).ok).toBe(true);
  });

  test("a key that is not the listed one, a loose key file and a missing one are refused without the seed in the message", () => {
    const { dir, c } = fresh();
    const seed = readFileSync(c.signingKey.file, "utf8").trim();
    const wrong = connectionSigner(
      c.signingKey.keyId,
      Buffer.alloc(32, 9).toString("base64"),
      keyFileSeed(c.signingKey.file),
    );
    expect(() => wrong.check()).toThrow("is not the verification key listed");
    try {
      wrong.sign("grant", {});
    } catch (e) {
      expect((e as Error).message).not.toContain(seed);
      expect((e as { code?: string }).code).toBe("INTERNAL");
    }
    chmodSync(c.signingKey.file, 0o644);
    expect(() => keyFileSeed(c.signingKey.file)()).toThrow("chmod 600");
    expect(() => keyFileSeed(join(dir, "absent.key"))()).toThrow("ENOENT");
    writeFileSync(join(dir, "big.key"), "x".repeat(1000), { mode: 0o600 });
    expect(() => keyFileSeed(join(dir, "big.key"))()).toThrow("larger than");
  });
});
