/**
 * Test support for the relay: a self-signed TLS certificate made with
 * Debian's openssl, a relay configuration for loopback, and WireGuard
 * Devices (src/wireguard) whose transport is a relay connection.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import {
  Device,
  DeviceTimerDriver,
  systemSuspendAwareClock,
  systemRandom,
  type Aead,
  type Peer,
} from "../../src/wireguard/index.ts";
import { relayConfigFrom, type RelayConfig, type RelayConfigFile } from "../../src/relay/config.ts";
import type { TokenSigner } from "../../src/relay/testing.ts";
import type { RelayTransport } from "../../src/relayclient/index.ts";

/** A self-signed P-256 certificate for localhost, 127.0.0.1 and ::1 (or the given subjectAltName list), written into `dir`. */
export function makeTestCert(
  dir: string,
  subjectAltName = "DNS:localhost,IP:127.0.0.1,IP:::1",
): { certPath: string; keyPath: string; cert: string } {
  const certPath = join(dir, "relay.crt");
  const keyPath = join(dir, "relay.key");
  const r = Bun.spawnSync(
    [
      "openssl",
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:P-256",
      "-nodes",
      "-days",
      "2",
      "-subj",
      "/CN=localhost",
      "-addext",
      `subjectAltName=${subjectAltName}`,
      "-keyout",
      keyPath,
      "-out",
      certPath,
    ],
    { stdout: "pipe", stderr: "pipe" },
  );
  if (r.exitCode !== 0) throw new Error(`openssl failed: ${r.stderr.toString()}`);
  return { certPath, keyPath, cert: readFileSync(certPath, "utf8") };
}

/** A relay config file's content for loopback with ephemeral ports; `over` replaces fields. */
export function relayConfigFile(
  signer: TokenSigner,
  tls: { certPath: string; keyPath: string } | null,
  over: Partial<RelayConfigFile> = {},
): RelayConfigFile {
  return {
    relayId: "relay-test",
    listen: ["127.0.0.1:0"],
    healthListen: "127.0.0.1:0",
    ...(tls ? { tls: { certPath: tls.certPath, keyPath: tls.keyPath } } : {}),
    trustedKeys: [{ keyId: signer.keyId, publicKey: signer.publicKeyB64 }],
    limitCaps: { maxBytes: 1 << 30, maxBytesPerSecond: 100_000_000, idleTimeoutMs: 60_000 },
    ...over,
  };
}

/** The loaded form of relayConfigFile. */
export function relayConfig(
  signer: TokenSigner,
  tls: { certPath: string; keyPath: string } | null,
  over: Partial<RelayConfigFile> = {},
): RelayConfig {
  return relayConfigFrom(relayConfigFile(signer, tls, over), "test");
}

/** Writes a config file into `dir` and returns its path. */
export function writeRelayConfig(dir: string, file: RelayConfigFile): string {
  const p = join(dir, "relay.json");
  writeFileSync(p, JSON.stringify(file, null, 2));
  return p;
}

/** The one endpoint a relayed Device knows: the relay connection. */
const RELAY_ENDPOINT = { key: "relay" };

/** A WireGuard Device whose datagrams go through a relay connection. */
export interface RelayedDevice {
  readonly device: Device<typeof RELAY_ENDPOINT>;
  readonly peer: Peer<typeof RELAY_ENDPOINT>;
  /** Decrypted IP packets delivered by the Device. */
  readonly delivered: Uint8Array[];
  /** Connects the Device's output to `t`; t's onDatagram must call receive(). */
  attach(t: RelayTransport): void;
  receive(datagram: Uint8Array): void;
  sendPacket(packet: Uint8Array): void;
  stop(): void;
}

/** Two Devices peered with each other (a at 10.0.0.1, b at 10.0.0.2), not yet attached to any transport. */
export function relayedPair(aead: Aead): { a: RelayedDevice; b: RelayedDevice } {
  const keyA = new Uint8Array(randomBytes(32));
  const keyB = new Uint8Array(randomBytes(32));
  const make = (key: Uint8Array): { dev: RelayedDevice; setPeer(pub: Uint8Array, allowed: string): void } => {
    let transport: RelayTransport | null = null;
    const delivered: Uint8Array[] = [];
    const device = new Device<typeof RELAY_ENDPOINT>({
      privateKey: key,
      clock: systemSuspendAwareClock,
      random: systemRandom,
      aead,
      io: {
        sendDatagram: (d) => void transport?.send(d),
        deliverPacket: (p) => void delivered.push(p.slice()),
      },
    });
    const driver = new DeviceTimerDriver(device, systemSuspendAwareClock);
    let peer: Peer<typeof RELAY_ENDPOINT> | null = null;
    const dev: RelayedDevice = {
      device,
      get peer() {
        return peer!;
      },
      delivered,
      attach: (t) => void (transport = t),
      receive(d) {
        device.receiveDatagram(d, RELAY_ENDPOINT);
        driver.poke();
      },
      sendPacket(p) {
        device.sendPacket(p);
        driver.poke();
      },
      stop: () => driver.stop(),
    };
    return {
      dev,
      setPeer(pub, allowed) {
        peer = device.addPeer({ publicKey: pub, endpoint: RELAY_ENDPOINT, allowedIps: [allowed] });
      },
    };
  };
  const a = make(keyA);
  const b = make(keyB);
  a.setPeer(b.dev.device.publicKey, "10.0.0.2/32");
  b.setPeer(a.dev.device.publicKey, "10.0.0.1/32");
  return { a: a.dev, b: b.dev };
}

/** Polls `cond` every 10 ms until it holds or `timeoutMs` passes; throws with `what` on timeout. */
export async function waitFor(cond: () => boolean, what: string, timeoutMs = 5_000): Promise<void> {
  const end = performance.now() + timeoutMs;
  while (!cond()) {
    if (performance.now() > end) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(10);
  }
}

/** True when `frame` has the shape of a WireGuard message (type 1–4, three zero reserved bytes, a length that type allows). */
export function isWireGuardMessage(frame: Uint8Array): boolean {
  if (frame.length < 4 || frame[1] !== 0 || frame[2] !== 0 || frame[3] !== 0) return false;
  switch (frame[0]) {
    case 1:
      return frame.length === 148;
    case 2:
      return frame.length === 92;
    case 3:
      return frame.length === 64;
    case 4:
      return frame.length >= 32 && (frame.length - 32) % 16 === 0;
    default:
      return false;
  }
}
