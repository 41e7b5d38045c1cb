/**
 * The deployment manifest the in-process scheduler tests share: one
 * controller (token "c") and one operator (token "o"), a 1-core/256 MiB
 * "small" workload class with a placeholder image digest, and automatic host
 * activation. Tests override only the limits they exercise.
 */
import { tokenDigest, type DeploymentManifest, type Identity } from "../../src/scheduler/manifest.ts";

/** The controller principal of {@link testManifest} (bearer token "c"). */
export const TEST_CONTROLLER: Identity = { id: "controller:t", role: "controller" };
/** The operator principal of {@link testManifest} (bearer token "o"). */
export const TEST_OPERATOR: Identity = { id: "operator:t", role: "operator" };

/**
 * A manifest for region "t" with {@link TEST_CONTROLLER} and {@link TEST_OPERATOR};
 * `limits` replaces the matching defaults (100 allocations per controller,
 * 10 hosts, 1,000 controller requests/s).
 */
export function testManifest(limits: Partial<DeploymentManifest["limits"]> = {}): DeploymentManifest {
  return {
    version: 1,
    region: "t",
    principals: [
      { id: TEST_CONTROLLER.id, role: "controller", tokenSha256: tokenDigest("c") },
      { id: TEST_OPERATOR.id, role: "operator", tokenSha256: tokenDigest("o") },
    ],
    workloadClasses: {
      small: { cpuMillis: 1000, memoryMiB: 256, ephemeralDiskMiB: 1024, imageDigest: `sha256:${"0".repeat(64)}` },
    },
    limits: {
      maxConcurrentAllocationsPerController: 100,
      maxRegisteredHosts: 10,
      controllerRequestsPerSecond: 1000,
      ...limits,
    },
    hostEnrollment: { autoActivate: true },
  };
}
