/**
 * The Host object's public surface (issue 19 item 1): every public method
 * is an RPC any caller with a stub can make, so the surface is pinned here,
 * and the admin state changes only through the one-at-a-time admin chain
 * (`changeAdminState`). Before, a public `setAdminState` let a caller skip
 * the chain, and with it Admission's active-host cap and count.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SchedulerWorker } from "./worker.ts";
import type { DeploymentManifest, Identity } from "./manifest.ts";
import { HostObject } from "./objects/hostObject.ts";
import type { Stub } from "./runtime/api.ts";

const OPERATOR: Identity = { id: "operator:t", role: "operator" };
const manifest: DeploymentManifest = {
  version: 1,
  region: "local",
  principals: [],
  workloadClasses: {},
  limits: { maxConcurrentAllocationsPerController: 4, maxRegisteredHosts: 4, maxActiveHosts: 1 },
  hostEnrollment: { autoActivate: false },
};

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

async function world(): Promise<SchedulerWorker> {
  const dir = mkdtempSync(join(tmpdir(), "bb-host-surface-"));
  dirs.push(dir);
  const w = new SchedulerWorker({ dataDir: dir, manifest, publicUrl: "http://127.0.0.1:1" });
  w.start();
  for (const hostId of ["a", "b"]) {
    const t = await w.createEnrollmentToken(OPERATOR, hostId, 600);
    await w.enroll({
      token: t.token,
      capacity: { cpuMillis: 1000, memoryMiB: 1024, ephemeralDiskMiB: 1024, maxPlacements: 2 },
      region: "local",
      architecture: "x86_64",
      agentProtocolVersion: "1.0",
      vmmDriver: "qemu-microvm",
    });
  }
  return w;
}

/** The Host's RPCs: what any object or the front may call. A new one is a decision; add it here with care. */
const PUBLIC_SURFACE = [
  "adminState",
  "alarm",
  "authenticate",
  "changeAdminState",
  "checkDelivery",
  "clientCandidates",
  "configureConnection",
  "connectionEndpoint",
  "deliver",
  "drain",
  "isRegistered",
  "placementStatus",
  "poll",
  "register",
  "requestAbsent",
  "requestPause",
  "requestResume",
  "requestSuspend",
  "reserve",
  "view",
];

describe("the Host object's public surface", () => {
  test("its methods are exactly the pinned RPCs: no helper is reachable by name", () => {
    const names = Object.getOwnPropertyNames(HostObject.prototype).filter((n) => n !== "constructor");
    expect(names.sort()).toEqual(PUBLIC_SURFACE);
  });

  test("a stub has no setAdminState: the admin chain cannot be bypassed (the cap still holds)", async () => {
    const w = await world();
    try {
      const a = w.objectEnv.Host.get("a");
      const b = w.objectEnv.Host.get("b");
      // @ts-expect-error: setAdminState is not part of the Host's surface.
      const bypass: unknown = a.setAdminState;
      void bypass;
      expect((await w.setHostState(OPERATOR, "a", "active")).adminState).toBe("active");
      // Through the chain, the cap of one active host refuses b.
      expect(await b.changeAdminState("active", 1).catch((e: { code?: string }) => e.code)).toBe("QUOTA_ACTIVE_HOSTS");
      // Around the chain: every former writer and helper is refused by the runtime, and nothing changed.
      const raw = b as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
      for (const name of ["setAdminState", "changeNow", "setRow", "setPlacement", "publish", "handleEnvelope"]) {
        const outcome = await raw[name]!("active").then(
          () => "called",
          (e: Error) => e.message,
        );
        expect({ name, outcome }).toEqual({ name, outcome: `Host has no method ${name}` });
      }
      expect(await b.adminState()).toBe("draining");
      expect(await w.activeHostIds()).toEqual(["a"]);
    } finally {
      await w.close();
    }
  });
});

/** Compile-time: the stub type offers changeAdminState and not setAdminState. */
type HasSetAdminState = "setAdminState" extends keyof Stub<HostObject> ? true : false;
const noSetAdminState: HasSetAdminState = false;
void noSetAdminState;
