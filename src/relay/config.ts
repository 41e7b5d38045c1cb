/**
 * The relay's configuration file (spec "Packet relays"; docs/relay.md,
 * example deploy/relay.example.json): the relay's ID, where it listens,
 * its TLS certificate, the Ed25519 keys whose relay tokens it accepts, the
 * caps on what a token may ask for, and its bounds.
 *
 * Owns: the schema (TypeBox, unknown fields rejected), defaults and the
 * checks a schema cannot express (keys decode to 32 bytes, key IDs are
 * unique, listen addresses parse). Reads the one file it is given; the
 * TLS files are read by the server at start (src/relay/server.ts).
 * Must never: hold a private key other than the TLS key's path, or write
 * anything.
 */
import { readFileSync } from "node:fs";
import { Type, type Static } from "@sinclair/typebox";
import { Value } from "@sinclair/typebox/value";
import { UsageError } from "../command/run.ts";
import { RelayLimits } from "../protocol/connection.ts";
import { RELAY_ID_PATTERN } from "../protocol/ids.ts";

/** Default WebSocket-over-TLS listen address. */
export const DEFAULT_RELAY_LISTEN = "0.0.0.0:443";
/** Default health endpoint address (plain HTTP; liveness and counters only). */
export const DEFAULT_HEALTH_LISTEN = "127.0.0.1:9443";
/** Default caps on a token's limits. */
export const DEFAULT_LIMIT_CAPS: RelayLimits = {
  /** 16 GiB per pair. */
  maxBytes: 16 * 1024 ** 3,
  /** 25 MB/s per direction (200 Mbit/s). */
  maxBytesPerSecond: 25_000_000,
  /** 10 minutes. */
  idleTimeoutMs: 600_000,
};
/** Default bound on admitted sessions (each pair is two). */
export const DEFAULT_MAX_SESSIONS = 10_000;
/** Default bound on grants with one side waiting for the other. */
export const DEFAULT_MAX_PENDING_PAIRS = 2_000;
/** Default bound on sockets that have not presented a token yet, all addresses together. */
export const DEFAULT_MAX_HANDSHAKES = 1_024;
/** Default bound on sockets that have not presented a token yet, per remote IP address. */
export const DEFAULT_MAX_HANDSHAKES_PER_ADDRESS = 16;
/** Most trusted keys a relay lists (key rotation needs two or three). */
export const MAX_TRUSTED_KEYS = 16;
/** Most listen addresses of one kind. */
export const MAX_LISTEN_ADDRESSES = 8;

const ListenAddress = Type.String({ minLength: 3, maxLength: 64, description: "HOST:PORT, IPv6 in brackets" });
const Bound = (max: number, d: string) => Type.Integer({ minimum: 1, maximum: max, description: d });

/** The file's shape. */
export const RelayConfigFile = Type.Object(
  {
    /** This relay's ID; tokens name it in `relayId`. */
    relayId: Type.String({ pattern: RELAY_ID_PATTERN }),
    /** WebSocket-over-TLS listen addresses (default ["0.0.0.0:443"]). */
    listen: Type.Optional(Type.Array(ListenAddress, { minItems: 1, maxItems: MAX_LISTEN_ADDRESSES })),
    /** QUIC listen address (same certificate); absent: no QUIC. */
    quicListen: Type.Optional(ListenAddress),
    /** Health endpoint address (default "127.0.0.1:9443"). */
    healthListen: Type.Optional(ListenAddress),
    /** PEM certificate chain and private key paths. Required unless the relay runs with --insecure-listen only. */
    tls: Type.Optional(
      Type.Object(
        {
          certPath: Type.String({ minLength: 1, maxLength: 4096 }),
          keyPath: Type.String({ minLength: 1, maxLength: 4096 }),
        },
        { additionalProperties: false },
      ),
    ),
    /** Ed25519 public keys (base64 of 32 raw bytes) whose signed relay tokens this relay accepts, by key ID. */
    trustedKeys: Type.Array(
      Type.Object(
        {
          keyId: Type.String({ minLength: 1, maxLength: 64, pattern: "^[A-Za-z0-9._:-]+$" }),
          publicKey: Type.String({ pattern: "^[A-Za-z0-9+/]{43}=$" }),
        },
        { additionalProperties: false },
      ),
      { minItems: 1, maxItems: MAX_TRUSTED_KEYS },
    ),
    /** The most a token may ask for; a token over any cap is refused (RELAY_LIMITS_OVER_CAP). */
    limitCaps: Type.Optional(RelayLimits),
    maxSessions: Type.Optional(Bound(1_000_000, "admitted sessions")),
    maxPendingPairs: Type.Optional(Bound(1_000_000, "grants with one side waiting")),
    maxHandshakes: Type.Optional(Bound(100_000, "sockets without a token yet")),
    maxHandshakesPerAddress: Type.Optional(Bound(10_000, "sockets without a token yet, per remote IP")),
  },
  { additionalProperties: false },
);
/** The file's shape. */
export type RelayConfigFile = Static<typeof RelayConfigFile>;

/** A host and port. */
export interface ListenAt {
  hostname: string;
  port: number;
}

/** A loaded configuration with every default applied. */
export interface RelayConfig {
  relayId: string;
  listen: ListenAt[];
  quicListen: ListenAt | null;
  health: ListenAt;
  tls: { certPath: string; keyPath: string } | null;
  /** Raw 32-byte Ed25519 public keys by key ID. */
  trustedKeys: Map<string, Uint8Array>;
  limitCaps: RelayLimits;
  maxSessions: number;
  maxPendingPairs: number;
  maxHandshakes: number;
  maxHandshakesPerAddress: number;
}

/** A configuration problem: the message names the field; exit code 2 (usage), without a pointer to `--help` (the file is wrong, not the command line). */
export class RelayConfigError extends UsageError {
  constructor(message: string) {
    super(message, { helpHint: false });
    this.name = "RelayConfigError";
  }
}

/** Parses `HOST:PORT` (IPv6 in brackets). Throws RelayConfigError naming `field` when malformed. */
export function parseListenAddress(addr: string, field: string): ListenAt {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([A-Za-z0-9.-]+)):(\d{1,5})$/.exec(addr);
  const port = Number(m?.[3]);
  if (!m || port > 65535)
    throw new RelayConfigError(`${field} must be HOST:PORT (IPv6 in brackets), got ${JSON.stringify(addr)}`);
  return { hostname: m[1] ?? m[2]!, port };
}

/** True for an address that only this machine can reach: 127.0.0.0/8, ::1 or "localhost". */
export function isLoopback(hostname: string): boolean {
  return hostname === "localhost" || hostname === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(hostname);
}

/**
 * Throws RelayConfigError (`prefix` + which field repeats which) when two
 * TCP listeners name the same HOST:PORT (port 0 aside): the relay would
 * otherwise fail on its own second bind with a bare "port in use".
 */
export function assertDistinctAddresses(entries: ReadonlyArray<readonly [ListenAt, string]>, prefix = ""): void {
  const seen = new Map<string, string>();
  for (const [l, field] of entries) {
    const key = `${l.hostname.toLowerCase()}:${l.port}`;
    const earlier = seen.get(key);
    if (earlier && l.port !== 0)
      throw new RelayConfigError(`${prefix}${field} repeats the address of ${earlier} (${l.hostname}:${l.port})`);
    seen.set(key, field);
  }
}

/** Validates a parsed file and applies defaults. Throws RelayConfigError with the first problem (JSON pointer + message), including a listen or health address given twice (port 0 aside). */
export function relayConfigFrom(raw: unknown, source: string): RelayConfig {
  if (!Value.Check(RelayConfigFile, raw)) {
    const first = Value.Errors(RelayConfigFile, raw).First();
    throw new RelayConfigError(
      `invalid relay config ${source}: ${first?.path || "/"} ${first?.message ?? "does not match the schema"}`,
    );
  }
  const f = raw;
  const trustedKeys = new Map<string, Uint8Array>();
  f.trustedKeys.forEach((k, i) => {
    if (trustedKeys.has(k.keyId))
      throw new RelayConfigError(`invalid relay config ${source}: /trustedKeys/${i} repeats the key ID ${k.keyId}`);
    const bytes = Buffer.from(k.publicKey, "base64");
    if (bytes.length !== 32 || bytes.toString("base64") !== k.publicKey)
      throw new RelayConfigError(
        `invalid relay config ${source}: /trustedKeys/${i}/publicKey is not base64 of 32 bytes`,
      );
    trustedKeys.set(k.keyId, new Uint8Array(bytes));
  });
  const at = (addr: string, field: string): ListenAt => {
    try {
      return parseListenAddress(addr, field);
    } catch (e) {
      throw new RelayConfigError(`invalid relay config ${source}: ${(e as Error).message}`);
    }
  };
  const listen = (f.listen ?? [DEFAULT_RELAY_LISTEN]).map((a, i) => at(a, `/listen/${i}`));
  const health = at(f.healthListen ?? DEFAULT_HEALTH_LISTEN, "/healthListen");
  assertDistinctAddresses(
    [...listen.map((l, i) => [l, `/listen/${i}`] as const), [health, "/healthListen"]],
    `invalid relay config ${source}: `,
  );
  return {
    relayId: f.relayId,
    listen,
    quicListen: f.quicListen ? at(f.quicListen, "/quicListen") : null,
    health,
    tls: f.tls ?? null,
    trustedKeys,
    limitCaps: f.limitCaps ?? DEFAULT_LIMIT_CAPS,
    maxSessions: f.maxSessions ?? DEFAULT_MAX_SESSIONS,
    maxPendingPairs: f.maxPendingPairs ?? DEFAULT_MAX_PENDING_PAIRS,
    maxHandshakes: f.maxHandshakes ?? DEFAULT_MAX_HANDSHAKES,
    maxHandshakesPerAddress: f.maxHandshakesPerAddress ?? DEFAULT_MAX_HANDSHAKES_PER_ADDRESS,
  };
}

/** Reads and validates the file at `path`. Throws RelayConfigError when it cannot be read, is not JSON, or is invalid. */
export function loadRelayConfig(path: string): RelayConfig {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new RelayConfigError(
      `cannot read relay config ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`,
    );
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new RelayConfigError(`relay config ${path} is not valid JSON: ${(e as Error).message}`);
  }
  return relayConfigFrom(raw, path);
}
