/**
 * The deployment manifest (spec "Authentication and identity", "Admission
 * and limits"): principals by token digest, workload classes, limits, region.
 *
 * Owns: the schema (unknown fields rejected), loading, and the development
 * manifest `serve` writes when none is given. Must never: store a raw token
 * (only SHA-256 digests) or log one.
 */
import { Value } from "@sinclair/typebox/value";
import { generateKeyPairSync, randomBytes } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  readFileSync,
  writeFileSync,
  renameSync,
  chmodSync,
  openSync,
  writeSync,
  fsyncSync,
  closeSync,
  rmSync,
} from "node:fs";
import { dirname, join, resolve } from "node:path";

export {
  DeploymentManifest,
  MAX_WORKLOAD_CLASSES,
  WorkloadClass,
  identify,
  tokenDigest,
  type Identity,
} from "./manifestSchema.ts";
import { DeploymentManifest, tokenDigest, type ConnectionsSection } from "./manifestSchema.ts";
import { connectionSettings } from "./connectionSettings.ts";
import { UsageError } from "../command/run.ts";

/** A fault in the data directory, not the command line: no pointer to --help. */
const NOT_THE_COMMAND_LINE = { helpHint: false } as const;

/**
 * Loads and validates a manifest file. Every error names the file: it cannot
 * be read, it is not JSON (with the parser's position), the first schema
 * violation, two principals sharing an ID or a token digest (the second
 * would be shadowed by the first and never authenticate), or a
 * `connections` section that fails its checks (./connectionSettings.ts:
 * the ULA prefix, port ranges, policy classes, relay IDs, the signing key ID),
 * or a workload class both `template` and `suspendable` (ADR 0182).
 */
export function loadManifest(path: string): DeploymentManifest {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new Error(`cannot read manifest ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new Error(`manifest ${path} is not valid JSON: ${(e as Error).message}`);
  }
  if (!Value.Check(DeploymentManifest, raw)) {
    const first = Value.Errors(DeploymentManifest, raw).First();
    throw new Error(`invalid manifest ${path}: ${first?.path || "/"} ${first?.message ?? "does not match the schema"}`);
  }
  const ids = new Map<string, number>();
  const digests = new Map<string, string>();
  for (const [i, p] of raw.principals.entries()) {
    if (ids.has(p.id))
      throw new Error(
        `invalid manifest ${path}: /principals/${i} repeats the principal id ${p.id} (first at /principals/${ids.get(p.id)})`,
      );
    ids.set(p.id, i);
    const other = digests.get(p.tokenSha256);
    if (other !== undefined)
      throw new Error(
        `invalid manifest ${path}: principals ${other} and ${p.id} have the same tokenSha256; each principal needs its own token`,
      );
    digests.set(p.tokenSha256, p.id);
  }
  for (const [name, c] of Object.entries(raw.workloadClasses))
    if (c.template && c.suspendable)
      throw new Error(
        `invalid manifest ${path}: /workloadClasses/${name} is both template and suspendable; a VM started from a template cannot be suspended yet (ADR 0182): choose one`,
      );
  try {
    connectionSettings(raw);
  } catch (e) {
    throw new Error(`invalid manifest ${path}: ${(e as Error).message}`);
  }
  return raw;
}

/** Name of the development connection-signing key file in a dev data directory. */
export const DEV_CONNECTION_KEY_FILE = "connection-signing.key";

/**
 * The development manifest's private networking: a fresh random ULA /48,
 * a connection-signing key written to `dataDir/connection-signing.key`
 * (created exclusively, mode 0600), no relays, and a policy that lets any
 * class open any TCP or UDP port for up to an hour.
 */
export function devConnections(dataDir: string): ConnectionsSection {
  const keyFile = resolve(dataDir, DEV_CONNECTION_KEY_FILE);
  const pair = generateKeyPairSync("ed25519");
  const seed = Buffer.from(pair.privateKey.export({ format: "der", type: "pkcs8" }).subarray(16)).toString("base64");
  const publicKey = Buffer.from(pair.publicKey.export({ format: "der", type: "spki" }).subarray(12)).toString("base64");
  // A key file left without a manifest signs nothing anyone trusts: a fresh manifest gets a fresh key.
  rmSync(keyFile, { force: true });
  const fd = openSync(keyFile, "wx", 0o600);
  try {
    writeSync(fd, `${seed}\n`);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  chmodSync(keyFile, 0o600);
  const g = randomBytes(5);
  if (g.every((x) => x === g[0])) g[0] = (g[0]! + 1) & 0xff;
  const hex = g.toString("hex");
  return {
    ulaPrefix: `fd${hex.slice(0, 2)}:${hex.slice(2, 6)}:${hex.slice(6, 10)}::/48`,
    signingKey: { keyId: "dev-1", file: keyFile },
    verificationKeys: { "dev-1": publicKey },
    relays: [],
    relayLimits: { maxBytes: 4 * 1024 ** 3, maxBytesPerSecond: 64 * 1024 ** 2, idleTimeoutMs: 120_000 },
    grants: { maxTtlSeconds: 3600, policyRevision: 1, default: { transports: ["tcp", "udp"], ports: ["1-65535"] } },
  };
}

/** Files the development setup writes: the manifest and a client config holding the raw tokens (mode 0600). */
export interface DevManifestPaths {
  manifestPath: string;
  clientConfigPath: string;
}

/**
 * Writes a development manifest with fresh random tokens into `dataDir`
 * when neither it nor its `client.json` exists, plus `client.json` (mode
 * 0600) with the raw tokens for the CLI (its URL is filled in by
 * publishDevClientConfig once the server listens). `imageDigest` is the dev
 * image the default classes boot; an existing manifest keeps every edit and
 * only has its classes re-pointed at that image. A new one has private
 * networking (devConnections). Never replaces an existing manifest: when only one of the two files exists, throws an Error (exit
 * code 2) saying which one is missing and how to go on.
 */
export function ensureDevManifest(dataDir: string, imageDigest: string): DevManifestPaths {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const manifestPath = join(dataDir, "manifest.json");
  const clientConfigPath = join(dataDir, "client.json");
  const haveManifest = existsSync(manifestPath);
  const haveClient = existsSync(clientConfigPath);
  if (haveManifest && !haveClient)
    throw new UsageError(
      `${clientConfigPath} is missing, and it holds the only copy of the development tokens of ${manifestPath}; dev mode never replaces an existing manifest: restore ${clientConfigPath}, or serve this manifest with --manifest and your own tokens, or move ${manifestPath} aside to start a fresh development deployment`,
      NOT_THE_COMMAND_LINE,
    );
  if (!haveManifest && haveClient)
    throw new UsageError(
      `${manifestPath} is missing but ${clientConfigPath} exists; restore the manifest, or move ${clientConfigPath} aside to start a fresh development deployment`,
      NOT_THE_COMMAND_LINE,
    );
  if (haveManifest) {
    const m = loadManifest(manifestPath);
    let changed = false;
    for (const c of Object.values(m.workloadClasses))
      if (c.imageDigest !== imageDigest) (c.imageDigest = imageDigest), (changed = true);
    if (changed) writeAtomic(manifestPath, JSON.stringify(m, null, 2), 0o600);
    return { manifestPath, clientConfigPath };
  }
  const controllerToken = `bbt_${randomBytes(24).toString("hex")}`;
  const operatorToken = `bbo_${randomBytes(24).toString("hex")}`;
  const manifest: DeploymentManifest = {
    version: 1,
    region: "local",
    principals: [
      { id: "controller:dev", role: "controller", tokenSha256: tokenDigest(controllerToken) },
      { id: "operator:dev", role: "operator", tokenSha256: tokenDigest(operatorToken) },
    ],
    workloadClasses: {
      "ci-small": { cpuMillis: 1000, memoryMiB: 256, ephemeralDiskMiB: 1024, imageDigest, maxTtlSeconds: 3600 },
      "ci-medium": { cpuMillis: 2000, memoryMiB: 512, ephemeralDiskMiB: 2048, imageDigest, maxTtlSeconds: 3600 },
    },
    limits: { maxConcurrentAllocationsPerController: 16, maxRegisteredHosts: 64 },
    hostEnrollment: { autoActivate: true },
    connections: devConnections(dataDir),
  };
  writeAtomic(manifestPath, JSON.stringify(manifest, null, 2), 0o600);
  writeAtomic(
    clientConfigPath,
    JSON.stringify({ schedulerUrl: "", token: controllerToken, operatorToken }, null, 2),
    0o600,
  );
  return { manifestPath, clientConfigPath };
}

/**
 * Points the dev client config at `schedulerUrl`, copies the manifest's
 * public connection verification keys into its `connectionKeys` (so `bb
 * proxy` works against a dev scheduler without --connection-key; public keys
 * only, never the signing key), and copies it to each of `copies` (mode
 * 0600), so the CLI finds it. Throws if the dev manifest was never written.
 */
export function publishDevClientConfig(paths: DevManifestPaths, schedulerUrl: string, copies: string[]): void {
  const cfg = JSON.parse(readFileSync(paths.clientConfigPath, "utf8")) as Record<string, unknown>;
  cfg["schedulerUrl"] = schedulerUrl;
  const keys = loadManifest(paths.manifestPath).connections?.verificationKeys;
  if (keys && Object.keys(keys).length > 0) cfg["connectionKeys"] = keys;
  else delete cfg["connectionKeys"];
  const text = JSON.stringify(cfg, null, 2);
  for (const p of [paths.clientConfigPath, ...copies]) {
    mkdirSync(dirname(p), { recursive: true });
    writeAtomic(p, text, 0o600);
  }
}

/** Writes a file through a temporary name and an atomic rename, with `mode`. */
export function writeAtomic(path: string, text: string, mode: number): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, text, { mode });
  chmodSync(tmp, mode);
  renameSync(tmp, path);
}
