/**
 * Starts a relay from its configuration (spec "Packet relays"; docs/relay.md):
 * the hub, one WebSocket listener per address (TLS, or plain `ws://` on
 * loopback only when asked for explicitly), QUIC when configured, the health
 * endpoint, and the sweep timer.
 *
 * Owns: composing those parts and stopping them. Reads the TLS files once
 * at start. Must never: write a file, hold a scheduler credential, or serve
 * plain WebSocket on an address other machines can reach.
 */
import { readFileSync } from "node:fs";
import { createPrivateKey, X509Certificate } from "node:crypto";
import { assertDistinctAddresses, isLoopback, RelayConfigError, type ListenAt, type RelayConfig } from "./config.ts";
import { startHealthListener, type HealthListener } from "./health.ts";
import { RelayHub } from "./hub.ts";
import { startQuicListener, type QuicListener } from "./quicServer.ts";
import { publicKeyObjects } from "./token.ts";
import { startWsListener, type WsListener } from "./wsServer.ts";
import { type Clock, systemClock } from "../protocol/clock.ts";

/** How often deadlines (handshake, probe, idle) are checked, ms. */
export const RELAY_SWEEP_MS = 250;

/** Options of startRelay beyond the configuration. */
export interface StartRelayOptions {
  config: RelayConfig;
  /** Serve plain `ws://` on these loopback addresses instead of TLS on `config.listen` (tests). */
  insecureListen?: ListenAt[];
  /** Overrides `config.quicListen`. */
  quicListen?: ListenAt | null;
  /** Overrides `config.health`. */
  health?: ListenAt;
  clock?: Clock;
  /** Test hook (see HubOptions.observeFrame). */
  observeFrame?: (frame: Uint8Array) => void;
}

/** A running relay. */
export interface RunningRelay {
  readonly hub: RelayHub;
  /** WebSocket URLs, one per listener. */
  readonly urls: string[];
  /** QUIC `host:port`, when QUIC is on. */
  readonly quic: string | null;
  readonly healthUrl: string;
  /** Closes every session (SHUTTING_DOWN), then every listener. */
  stop(): Promise<void>;
}

function readPem(path: string, what: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (e) {
    throw new RelayConfigError(
      `cannot read the TLS ${what} ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`,
    );
  }
}

/**
 * Reads the TLS certificate chain and key and checks that the first
 * certificate parses and matches the key, so a wrong or swapped file is a
 * RelayConfigError (exit 2, the file named) before anything binds, not a
 * TLS library error from the listener.
 */
function tlsMaterial(certPath: string, keyPath: string): { cert: string; key: string } {
  const cert = readPem(certPath, "certificate");
  const key = readPem(keyPath, "key");
  let x509: X509Certificate;
  try {
    x509 = new X509Certificate(cert);
  } catch {
    throw new RelayConfigError(`the TLS certificate ${certPath} holds no PEM certificate`);
  }
  let keyObject: ReturnType<typeof createPrivateKey>;
  try {
    keyObject = createPrivateKey(key);
  } catch {
    throw new RelayConfigError(`the TLS key ${keyPath} holds no PEM private key`);
  }
  if (!x509.checkPrivateKey(keyObject))
    throw new RelayConfigError(`the TLS key ${keyPath} does not match the certificate ${certPath}`);
  return { cert, key };
}

/** Starts the relay. Throws RelayConfigError for a missing TLS setting, unreadable or mismatched TLS files, or a non-loopback insecure address; rejects when an address cannot be bound (everything started so far is stopped). */
export async function startRelay(o: StartRelayOptions): Promise<RunningRelay> {
  const c = o.config;
  const insecure = o.insecureListen ?? [];
  for (const a of insecure)
    if (!isLoopback(a.hostname))
      throw new RelayConfigError(
        `--insecure-listen serves plain ws:// and is allowed on loopback only, not ${a.hostname}`,
      );
  const quicAt = o.quicListen === undefined ? c.quicListen : o.quicListen;
  // The command line may override addresses the config file's own check passed: check what will really be bound (TCP; QUIC is UDP).
  assertDistinctAddresses([
    ...(insecure.length > 0
      ? insecure.map((a) => [a, "--insecure-listen"] as const)
      : c.listen.map((a, i) => [a, `listen[${i}]`] as const)),
    [o.health ?? c.health, o.health ? "--health-listen" : "healthListen"],
  ]);
  const needTls = insecure.length === 0 || quicAt !== null;
  if (needTls && !c.tls)
    throw new RelayConfigError(
      "the relay config has no tls {certPath, keyPath}: WebSocket and QUIC listeners need TLS (plain ws:// only with --insecure-listen on loopback)",
    );
  const tls = needTls && c.tls ? tlsMaterial(c.tls.certPath, c.tls.keyPath) : null;
  const clock = o.clock ?? systemClock;
  const hub = new RelayHub({
    policy: { relayId: c.relayId, keys: publicKeyObjects(c.trustedKeys), caps: c.limitCaps },
    bounds: {
      maxSessions: c.maxSessions,
      maxPendingPairs: c.maxPendingPairs,
      maxHandshakes: c.maxHandshakes,
      maxHandshakesPerAddress: c.maxHandshakesPerAddress,
    },
    clock,
    ...(o.observeFrame ? { observeFrame: o.observeFrame } : {}),
  });
  let serving = true;
  const ws: WsListener[] = [];
  let quic: QuicListener | null = null;
  let health: HealthListener | null = null;
  const sweep = setInterval(() => hub.sweep(), RELAY_SWEEP_MS);
  const stop = async () => {
    serving = false;
    clearInterval(sweep);
    hub.shutdown();
    for (const l of ws) l.stop();
    await quic?.stop();
    health?.stop();
  };
  try {
    if (insecure.length > 0) for (const a of insecure) ws.push(startWsListener({ hub, ...a, tls: null }));
    else for (const a of c.listen) ws.push(startWsListener({ hub, ...a, tls }));
    if (quicAt && tls) {
      let key;
      try {
        key = createPrivateKey(tls.key);
      } catch (e) {
        throw new RelayConfigError(`the TLS key ${c.tls!.keyPath} is not a PEM private key: ${(e as Error).message}`);
      }
      quic = await startQuicListener({
        hub,
        ...quicAt,
        tls: { cert: tls.cert, key },
        maxConnections: c.maxSessions + c.maxHandshakes,
      });
    }
    health = startHealthListener({
      ...(o.health ?? c.health),
      relayId: c.relayId,
      counters: hub.counters,
      serving: () => serving,
    });
  } catch (e) {
    await stop();
    throw e;
  }
  return { hub, urls: ws.map((l) => l.url), quic: quic?.address ?? null, healthUrl: health.url, stop };
}
