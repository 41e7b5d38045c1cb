/**
 * `bb agent join`: enrolls this host with a one-use token (spec
 * "Enrollment"). Reads the discovery document, detects capacity, calls
 * POST /v1/agents/enroll, and writes the configuration and the credential
 * (mode 0600). Run again with an existing credential, it validates the
 * files and does not enroll again.
 */
import { AGENT_PROTOCOL_VERSION, SUPPORTED_ARCHITECTURE } from "../protocol/platform.ts";
import { existsSync, statfsSync } from "node:fs";
import { cpus, totalmem } from "node:os";
import { join, resolve } from "node:path";
import { readPublicKeyArg, TRUSTED_DEV_KEY_FILE } from "../image/keyFile.ts";
import { errorFromResponse } from "../protocol/problem.ts";
import type { Capacity, WellKnown } from "../protocol/api.ts";
import type { EnrollResponse } from "../protocol/agent.ts";
import {
  agentPaths,
  DEFAULT_CONSOLE_BUDGET_BYTES,
  loadAgentFiles,
  saveAgentFiles,
  type AgentConfig,
} from "./config.ts";

/** Memory kept back for the host itself when detecting capacity, MiB. */
export const HOST_MEMORY_RESERVE_MIB = 1024;
/** Default most placements per host. */
export const DEFAULT_MAX_PLACEMENTS = 8;

/** Options of `joinScheduler`. */
export interface JoinOptions {
  schedulerUrl: string;
  token: string;
  dataDir: string;
  imageDirs: string[];
  /** Overrides for detected capacity. */
  capacity?: Partial<Capacity>;
  guestBootTimeoutMs?: number;
  /** Image source base for the verified cache (see AgentConfig.imageSource). */
  imageSource?: string;
  /** More trusted image keys: base64 Ed25519 public keys or files holding one (operator keys of `bb image build`). */
  trustedImageKeys?: string[];
}

/** Capacity detected from this machine: all CPUs, memory less a host reserve, free disk of the data dir. */
export function detectCapacity(dataDir: string): Capacity {
  let diskMiB = 10 * 1024;
  try {
    const s = statfsSync(existsSync(dataDir) ? dataDir : "/");
    diskMiB = Math.floor((Number(s.bavail) * Number(s.bsize)) / (1024 * 1024));
  } catch {
    /* keep the default */
  }
  return {
    cpuMillis: cpus().length * 1000,
    memoryMiB: Math.max(256, Math.floor(totalmem() / (1024 * 1024)) - HOST_MEMORY_RESERVE_MIB),
    ephemeralDiskMiB: Math.max(1024, diskMiB),
    maxPlacements: DEFAULT_MAX_PLACEMENTS,
  };
}

/** Enrolls (or validates an existing enrollment). Returns the host ID. Throws BeachballError with the server's code. */
export async function joinScheduler(opts: JoinOptions): Promise<{ hostId: string; enrolled: boolean }> {
  const dataDir = resolve(opts.dataDir);
  if (existsSync(agentPaths(dataDir).credential)) {
    const { config } = loadAgentFiles(dataDir);
    return { hostId: config.hostId, enrolled: false };
  }
  const base = opts.schedulerUrl.replace(/\/+$/, "");
  const wk = (await (
    await fetch(`${base}/v1/.well-known/beachball`, { signal: AbortSignal.timeout(10_000) })
  ).json()) as WellKnown;
  const capacity = { ...detectCapacity(dataDir), ...opts.capacity };
  const res = await fetch(`${base}/v1/agents/enroll`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      token: opts.token,
      capacity,
      region: wk.region,
      architecture: SUPPORTED_ARCHITECTURE,
      agentProtocolVersion: AGENT_PROTOCOL_VERSION,
      vmmDriver: "qemu-microvm",
      labels: {},
    }),
    signal: AbortSignal.timeout(10_000),
  });
  if (!res.ok) throw await errorFromResponse(res);
  const body = (await res.json()) as EnrollResponse;
  const trustedImageKeys: string[] = [];
  for (const d of opts.imageDirs) {
    const pub = join(resolve(d), TRUSTED_DEV_KEY_FILE);
    if (existsSync(pub)) trustedImageKeys.push(readPublicKeyArg(pub));
  }
  for (const k of opts.trustedImageKeys ?? []) trustedImageKeys.push(readPublicKeyArg(k));
  const config: AgentConfig = {
    schedulerUrl: base,
    hostId: body.hostId,
    region: wk.region,
    capacity,
    imageDirs: opts.imageDirs.map((d) => resolve(d)),
    consoleBudgetBytes: DEFAULT_CONSOLE_BUDGET_BYTES,
    guestBootTimeoutMs: opts.guestBootTimeoutMs ?? 180_000,
    trustedImageKeys,
    ...(wk.connectionVerificationKeys && Object.keys(wk.connectionVerificationKeys).length
      ? { connections: { verificationKeys: wk.connectionVerificationKeys } }
      : {}),
    ...(opts.imageSource
      ? {
          imageSource: /^[a-z][a-z0-9+.-]*:\/\//i.test(opts.imageSource) ? opts.imageSource : resolve(opts.imageSource),
        }
      : {}),
  };
  saveAgentFiles(dataDir, config, body.credential);
  return { hostId: body.hostId, enrolled: true };
}
