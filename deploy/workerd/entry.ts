/**
 * The scheduler as a workerd Worker: the front (src/scheduler/front.ts)
 * behind the same front door as the embedded host (src/scheduler/app.ts,
 * built with `codeGeneration: false`: workerd forbids the code generation
 * Elysia's compiled handlers and TypeBox's compiled checks use; see
 * docs/adr/0161-one-front-door.md), and every
 * object class wrapped as a SQLite-backed Durable Object
 * (src/scheduler/runtime/workerd/durableHost.ts). Built by
 * deploy/workerd/build.ts into dist/workerd/; config.capnp serves it.
 * Bindings: one Durable Object namespace per class (named by class name),
 * BB_MANIFEST, the deployment manifest as JSON, and, with private
 * networking, BB_CONNECTION_SIGNING_KEY: the connection-signing key's seed
 * (the secret the manifest's `connections.signingKey` names; workerd has no
 * key file, so the reference resolves to this binding at each use), and
 * BB_PUBLIC_URL, the URL agents use (printed in join commands; default
 * DEFAULT_PUBLIC_URL, config.capnp's socket). It is never taken from a
 * request's Host header: the first caller would choose it for everyone.
 */
import { DurableObject } from "cloudflare:workers";
import { Value } from "@sinclair/typebox/value";
import {
  durableClass,
  durableNamespace,
  type DurableNamespace,
  type HostBindings,
} from "../../src/scheduler/runtime/workerd/durableHost.ts";
import { systemClock } from "../../src/protocol/clock.ts";
import { systemRandomness } from "../../src/scheduler/runtime/ports.ts";
import { MIGRATIONS } from "../../src/scheduler/migrations/index.ts";
import { schedulerConfig, type SchedulerEnv } from "../../src/scheduler/env.ts";
import { DeploymentManifest } from "../../src/scheduler/manifestSchema.ts";
import { Metrics } from "../../src/scheduler/metrics.ts";
import { createLogger } from "../../src/command/log.ts";
import { SchedulerFront } from "../../src/scheduler/front.ts";
import { buildApp } from "../../src/scheduler/app.ts";
import { withRequestLog } from "../../src/scheduler/requestLog.ts";
import { AllocationObject } from "../../src/scheduler/objects/allocationObject.ts";
import { AllocationIndexObject } from "../../src/scheduler/objects/allocationIndex.ts";
import { AdmissionObject } from "../../src/scheduler/objects/admissionObject.ts";
import { EnrollmentObject } from "../../src/scheduler/objects/enrollmentObject.ts";
import { HostObject } from "../../src/scheduler/objects/hostObject.ts";
import { HostDirectoryObject } from "../../src/scheduler/objects/hostDirectory.ts";
import { OperationsObject } from "../../src/scheduler/objects/operationsObject.ts";
import { NetworkObject } from "../../src/scheduler/objects/networkObject.ts";
import { NetworkDirectoryObject } from "../../src/scheduler/objects/networkDirectory.ts";
import { ConnectionObject } from "../../src/scheduler/objects/connectionObject.ts";
import { RunQueueObject } from "../../src/scheduler/objects/runQueueObject.ts";
import { UsageObject } from "../../src/scheduler/objects/usageObject.ts";
import { LeasesObject } from "../../src/scheduler/objects/leaseObject.ts";
import { connectionSigner } from "../../src/scheduler/connectionSigner.ts";

type Raw = Record<string, unknown> & {
  BB_MANIFEST?: string;
  BB_PUBLIC_URL?: string;
  BB_CONNECTION_SIGNING_KEY?: string;
};

const envs = new WeakMap<object, SchedulerEnv>();
const metrics = new Metrics();
/** JSON lines through console.log: workerd has no stderr, its log collects console output. */
const log = createLogger({ format: "json", sink: (line) => console.log(line) }, { role: "scheduler" });

function buildEnv(raw: Raw): SchedulerEnv {
  const known = envs.get(raw);
  if (known) return known;
  const manifest: unknown = JSON.parse(raw.BB_MANIFEST ?? "null");
  if (!Value.Check(DeploymentManifest, manifest)) throw new Error("BB_MANIFEST is not a valid deployment manifest");
  const b = (name: string) => raw[name] as DurableNamespace;
  const config = schedulerConfig(manifest);
  const c = config.connections;
  const signer = c
    ? connectionSigner(c.signingKeyId, c.verificationKeys[c.signingKeyId]!, () => {
        const seed = raw.BB_CONNECTION_SIGNING_KEY;
        if (!seed) throw new Error("the BB_CONNECTION_SIGNING_KEY binding is not set");
        return seed;
      })
    : null;
  const env: SchedulerEnv = {
    Allocation: durableNamespace<AllocationObject>("Allocation", b("Allocation")),
    AllocationIndex: durableNamespace<AllocationIndexObject>("AllocationIndex", b("AllocationIndex")),
    Admission: durableNamespace<AdmissionObject>("Admission", b("Admission")),
    Enrollment: durableNamespace<EnrollmentObject>("Enrollment", b("Enrollment")),
    Host: durableNamespace<HostObject>("Host", b("Host")),
    HostDirectory: durableNamespace<HostDirectoryObject>("HostDirectory", b("HostDirectory")),
    Operations: durableNamespace<OperationsObject>("Operations", b("Operations")),
    Network: durableNamespace<NetworkObject>("Network", b("Network")),
    NetworkDirectory: durableNamespace<NetworkDirectoryObject>("NetworkDirectory", b("NetworkDirectory")),
    Connection: durableNamespace<ConnectionObject>("Connection", b("Connection")),
    RunQueue: durableNamespace<RunQueueObject>("RunQueue", b("RunQueue")),
    Usage: durableNamespace<UsageObject>("Usage", b("Usage")),
    Leases: durableNamespace<LeasesObject>("Leases", b("Leases")),
    config,
    signer,
    clock: systemClock,
    random: systemRandomness,
    metrics,
    log,
  };
  envs.set(raw, env);
  return env;
}

const host: HostBindings<SchedulerEnv> = {
  env: (raw) => buildEnv(raw as Raw),
  binding: (raw, className) => (raw as Raw)[className] as DurableNamespace,
  migrations: MIGRATIONS,
};

export const Allocation = durableClass(DurableObject, AllocationObject, host);
export const AllocationIndex = durableClass(DurableObject, AllocationIndexObject, host);
export const Admission = durableClass(DurableObject, AdmissionObject, host);
export const Enrollment = durableClass(DurableObject, EnrollmentObject, host);
export const Host = durableClass(DurableObject, HostObject, host);
export const HostDirectory = durableClass(DurableObject, HostDirectoryObject, host);
export const Operations = durableClass(DurableObject, OperationsObject, host);
export const Network = durableClass(DurableObject, NetworkObject, host);
export const NetworkDirectory = durableClass(DurableObject, NetworkDirectoryObject, host);
export const Connection = durableClass(DurableObject, ConnectionObject, host);
export const RunQueue = durableClass(DurableObject, RunQueueObject, host);
export const Usage = durableClass(DurableObject, UsageObject, host);
export const Leases = durableClass(DurableObject, LeasesObject, host);

/** The public URL when BB_PUBLIC_URL is not set: config.capnp's socket address. */
const DEFAULT_PUBLIC_URL = "http://127.0.0.1:8787";

const routers = new WeakMap<object, (req: Request) => Promise<Response>>();

export default {
  fetch(req: Request, raw: Raw): Promise<Response> {
    let r = routers.get(raw);
    if (!r) {
      const env = buildEnv(raw);
      const app = buildApp(new SchedulerFront(env, raw.BB_PUBLIC_URL || DEFAULT_PUBLIC_URL), {
        codeGeneration: false,
        drainRefusedBodies: "always",
      });
      r = withRequestLog((req) => app.handle(req), {
        log,
        clock: env.clock,
        random: env.random,
      });
      routers.set(raw, r);
    }
    return r(req);
  },
};
