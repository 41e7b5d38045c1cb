/**
 * Read views the scheduler returns and the CLI prints: hosts and alerts.
 *
 * Owns the shapes only (the Host and Operations objects fill them). The
 * lower layer's direction is fixed here: `src/protocol` depends on nothing
 * of ours; `src/domain` may import protocol shapes, never the reverse
 * (docs/architecture.md, "Layers"). Spec: "Administrative state and
 * health", "Observability and retention".
 */

/** A resource vector: CPU millicores, memory MiB, ephemeral disk MiB, placement slots. */
export interface Resources {
  cpuMillis: number;
  memoryMiB: number;
  ephemeralDiskMiB: number;
  slots: number;
}

/** Host health derived from heartbeat age (spec "Administrative state and health"). */
export type HostHealth = "unknown" | "healthy" | "suspect" | "lost";

/** The operator's view of a host (`GET /v1/hosts`, `POST /v1/hosts/{id}/…`). */
export interface HostView {
  hostId: string;
  adminState: string;
  health: HostHealth;
  registered: Resources;
  allocatable: Resources;
  free: Resources;
  placements: { placementId: string; allocationId: string; generation: number; state: string }[];
  /** ISO 8601 time of the last heartbeat, or null before the first. */
  heartbeatAt: string | null;
  vmmDriver: string;
  /** Why the host takes no reservations now (empty: schedulable). */
  unschedulable: string[];
  credentialVersion: number;
  /**
   * The host's suspended VMs (issue 21, "Timeouts and retention"): how many,
   * the disk they hold in MiB (each its ephemeral disk and its snapshot, the
   * memory again), the earliest of their last reports (ISO 8601, null with
   * none), and how long a VM may stay suspended before it is released
   * (SUSPEND_EXPIRED), seconds.
   */
  suspended: { placements: number; diskMiB: number; oldestReportAt: string | null; maxAgeSeconds: number };
}

/** One alert as operators see it (`GET /v1/operations/alerts`). */
export interface Alert {
  alertId: string;
  type: string;
  subject: string;
  reason: string;
  /** ISO 8601 time the alert was raised. */
  at: string;
  /** Runbook anchor for the alert type. */
  runbook: string;
}

/** An alert with its position in the operator's alert log (resume with `after=seq`). */
export type AlertItem = Alert & { seq: number };
