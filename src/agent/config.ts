/**
 * Agent configuration and credential files (spec "Enrollment" step 2 and 4).
 *
 * Owns: `<dataDir>/agent.json` (non-secret settings) and
 * `<dataDir>/credential` (the host credential, mode 0600). Must never: log
 * the credential or write it with a wider mode.
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Capacity } from "../protocol/api.ts";

/** Default state directory (spec "Agent runtime and local state"). */
export const DEFAULT_AGENT_DATA_DIR = "/var/lib/beachball";
/** Serial console capture budget per placement, bytes. */
export const DEFAULT_CONSOLE_BUDGET_BYTES = 4 * 1024 * 1024;

/** The agent's settings. */
export interface AgentConfig {
  schedulerUrl: string;
  hostId: string;
  region: string;
  capacity: Capacity;
  /** Directories holding image manifests (each a dir with manifest.json); indexed by digest. */
  imageDirs: string[];
  /** Serial console budget per placement, bytes. */
  consoleBudgetBytes: number;
  /** How long to wait for the guest's GuestReady after the VMM starts, ms. */
  guestBootTimeoutMs: number;
  /** Ed25519 public keys (base64, raw 32 bytes) whose image signatures this host trusts; empty accepts unsigned dev images. */
  trustedImageKeys?: string[];
  /**
   * Where signed images are fetched from: a directory, file:// or http(s):// base holding
   * `<digest hex>/manifest.json` and its artifacts. When set, images go through
   * the verified content-addressed cache under `<dataDir>/images` (spec "Prepare");
   * otherwise `imageDirs` are used in place.
   */
  imageSource?: string;
  /** Bound on the image cache's shared artifact bytes; unused images are evicted past it (default 32 GiB). */
  imageCacheMaxBytes?: number;
  /**
   * Bound on the bytes the host's templates take (issue 21, ADR 0182); the
   * least recently used are evicted past it (default 8 GiB). Like the image
   * cache, disk the operator sets aside outside the capacity placements reserve.
   */
  templateCacheMaxBytes?: number;
  /**
   * Where guest egress leaves the host (spec "Guest network isolation"):
   * `device` in `netns` (absent = root namespace); the agent masquerades
   * placement traffic out of it. Absent (the default): guests get no route
   * off the host.
   */
  uplink?: { netns?: string; device: string };
  /** IPv4 resolvers guests may query on port 53 (default none). */
  dnsResolvers?: string[];
  /** Extra denied IPv4 ranges (management networks), CIDR (default none). */
  deniedRanges?: string[];
  /** Pool of per-placement /31 egress addresses (default 100.127.0.0/16, inside CGNAT, which guests are denied). */
  egressPoolCidr?: string;
  /** Absolute cgroup path holding placement cgroups in every hierarchy (default `<agent's cgroup>/beachball`). */
  cgroupParent?: string;
  /** memory.max = memoryMiB + this, MiB (default 192: QEMU/TCG overhead). */
  vmmMemoryOverheadMiB?: number;
  /** pids.max per placement (default 256). */
  vmmPidsMax?: number;
  /** Where the agent serves its Prometheus metrics (`GET /metrics`), `IP:PORT`, e.g. `127.0.0.1:9465`; absent (the default): not served. */
  metricsListen?: string;
  /** Kernel the VMM test boot uses (default: the first image directory's kernel); see doctor/vmmBoot.ts. */
  vmmTestKernel?: string;
  /** While VMM starts keep failing, how often the agent re-runs the VMM test boot, ms (default 60 000). */
  vmmSelfCheckIntervalMs?: number;
  /**
   * How long the console log of a failed placement is kept after cleanup,
   * under `<dataDir>/failed-consoles/`, ms (default 0: deleted with the
   * placement). It holds what the workload printed: keep it only as long as
   * the operator needs it.
   */
  failedConsoleRetentionMs?: number;
  /**
   * The private-networking host endpoint (spec "Data path"; src/agent/endpoint);
   * absent: this host runs none and refuses configure_connection. `bb agent
   * join` fills it in when the scheduler's discovery document lists
   * connection verification keys.
   */
  connections?: AgentConnectionsConfig;
}

/** Settings of the host endpoint. */
export interface AgentConnectionsConfig {
  /** Key ID → standard base64 Ed25519 public key that grants must be signed with (the deployment's connection verification keys). */
  verificationKeys: Record<string, string>;
  /** Address of the shared UDP socket: "0.0.0.0" (default, IPv4) or "::" (both families) or one literal. */
  listenAddress?: string;
  /** Its port (default 51820, DEFAULT_ENDPOINT_PORT). */
  listenPort?: number;
  /** STUN servers whose view of the socket becomes a candidate, "IPv4:PORT" or "[IPv6]:PORT" (default none). */
  stunServers?: string[];
  /** PEM file of CA certificates to trust for relays besides the system's (a deployment whose relays use a private CA). */
  relayCaPath?: string;
}

/** Paths inside a data directory. */
export function agentPaths(dataDir: string) {
  return {
    config: join(dataDir, "agent.json"),
    credential: join(dataDir, "credential"),
    db: join(dataDir, "agent.db"),
    lock: join(dataDir, "agent.lock"),
    allocations: join(dataDir, "allocations"),
    images: join(dataDir, "images"),
    failedConsoles: join(dataDir, "failed-consoles"),
    templates: join(dataDir, "templates"),
  };
}

function writeAtomic(path: string, text: string, mode: number): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, text, { mode });
  chmodSync(tmp, mode);
  renameSync(tmp, path);
}

/** Writes config and credential atomically (credential mode 0600). */
export function saveAgentFiles(dataDir: string, config: AgentConfig, credential: string): void {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const p = agentPaths(dataDir);
  writeAtomic(p.credential, credential + "\n", 0o600);
  writeAtomic(p.config, JSON.stringify(config, null, 2) + "\n", 0o644);
}

/** Loads config and credential. Throws a clear Error if the agent has not joined or the credential mode is too wide. */
export function loadAgentFiles(dataDir: string): { config: AgentConfig; credential: string } {
  const p = agentPaths(dataDir);
  if (!existsSync(p.config) || !existsSync(p.credential))
    throw new Error(`no agent configuration in ${dataDir}: run \`bb agent join --scheduler URL --token TOKEN\` first`);
  const mode = statSync(p.credential).mode & 0o777;
  if (mode & 0o077) throw new Error(`${p.credential} has mode ${mode.toString(8)}; it must be 0600`);
  return {
    config: JSON.parse(readFileSync(p.config, "utf8")) as AgentConfig,
    credential: readFileSync(p.credential, "utf8").trim(),
  };
}
