/**
 * How client commands show allocations, events and hosts to a person:
 * tables with a header row, one detail block per allocation. `--json`
 * output bypasses all of this.
 *
 * Must never: print a token or a payload.
 */
import type { AllocationEvent, AllocationView } from "../protocol/api.ts";
import type { AlertItem, HostView } from "../protocol/views.ts";
import { table } from "../command/terminal.ts";
import { describePlacement, UNPLACED_STATES } from "./wait.ts";

/** One human line for an event. */
export function formatEvent(e: AllocationEvent): string {
  const st = e.toState ? ` ${e.fromState ?? "∅"} → ${e.toState}` : "";
  const reason = e.reason ? ` [${e.reason}]` : "";
  const exit = e.type === "workload.exited" ? ` exitCode=${String(e.data?.["exitCode"])}` : "";
  const vm = typeof e.data?.["exitReason"] === "string" ? ` vmExit=${stripControl(e.data["exitReason"])}` : "";
  return `${e.at}  #${e.seq} ${e.type}${st}${reason}${exit}${vm}`;
}

/** Allocations as a table: ID, STATE, CLASS, HOST, GEN, EXIT, REASON, CREATED. */
export function allocationTable(views: readonly AllocationView[]): string {
  return table(
    ["ID", "STATE", "CLASS", "HOST", "GEN", "EXIT", "REASON", "CREATED"],
    views.map((v) => [
      v.allocationId,
      v.state,
      v.workloadClass,
      v.hostId ?? "-",
      String(v.generation),
      v.workloadExitCode === null ? "-" : String(v.workloadExitCode),
      v.reason ?? (v.conditions.join(",") || "-"),
      v.createdAt,
    ]),
  );
}

/** One allocation as `Key: value` lines, with why it waits when no host holds it. */
export function allocationDetail(v: AllocationView): string {
  const rows: [string, string][] = [
    ["ID", v.allocationId],
    ["State", v.state],
    ["Class", v.workloadClass],
    ["Generation", String(v.generation)],
    ["Host", v.hostId ?? "-"],
    ["Placement", v.placementId ?? "-"],
    [
      "Resources",
      `${v.resources.cpuMillis}m CPU, ${v.resources.memoryMiB} MiB memory, ${v.resources.ephemeralDiskMiB} MiB disk`,
    ],
    ["Image", v.imageDigest],
    ["Created", v.createdAt],
    ["Expires", v.expiresAt],
  ];
  if (v.reason) rows.push(["Reason", v.reason]);
  if (v.conditions.length) rows.push(["Conditions", v.conditions.join(", ")]);
  if (v.workloadExitCode !== null) rows.push(["Exit code", String(v.workloadExitCode)]);
  if (UNPLACED_STATES.has(v.state)) rows.push(["Why pending", describePlacement(v.placement)]);
  else if (v.placement) rows.push(["Last attempt", describePlacement(v.placement)]);
  if (Object.keys(v.labels).length)
    rows.push([
      "Labels",
      Object.entries(v.labels)
        .map(([k, x]) => `${k}=${x}`)
        .join(", "),
    ]);
  const x = v.placementExit;
  if (x) rows.push(["VM exit", `generation ${x.generation} ended on its own: ${stripControl(x.reason)} (${x.at})`]);
  const w = Math.max(...rows.map(([k]) => k.length)) + 1;
  const lines = rows.map(([k, val]) => `${`${k}:`.padEnd(w)} ${val}`);
  if (x) {
    lines.push("Console tail (last kernel lines):");
    for (const line of x.consoleTail.split("\n")) if (line) lines.push(`  ${stripControl(line)}`);
  }
  return lines.join("\n");
}

/** Drops C0/C1 control characters (escape sequences included): text that came from a host or guest never drives the terminal. */
export function stripControl(s: string): string {
  return s.replace(/[\x00-\x08\x0b-\x1f\x7f-\x9f]/g, "");
}

/** A duration in seconds as its largest whole unit: `24h`, `30m`, `45s`. Pure. */
function durationText(seconds: number): string {
  if (seconds >= 3600 && seconds % 3600 === 0) return `${seconds / 3600}h`;
  if (seconds >= 60 && seconds % 60 === 0) return `${seconds / 60}m`;
  return `${seconds}s`;
}

/** Hosts as a table: HOST, STATE, HEALTH, CPU, MEMORY, DISK, SLOTS (free/allocatable), PLACEMENTS, SUSPENDED (count, the disk they hold, the longest a VM may stay suspended), UNSCHEDULABLE. */
export function hostTable(hosts: readonly HostView[]): string {
  return table(
    [
      "HOST",
      "STATE",
      "HEALTH",
      "FREE CPU",
      "FREE MEMORY",
      "FREE DISK",
      "FREE SLOTS",
      "PLACEMENTS",
      "SUSPENDED",
      "UNSCHEDULABLE",
    ],
    hosts.map((h) => [
      h.hostId,
      h.adminState,
      h.health,
      `${h.free.cpuMillis}m/${h.allocatable.cpuMillis}m`,
      `${h.free.memoryMiB}/${h.allocatable.memoryMiB} MiB`,
      `${h.free.ephemeralDiskMiB}/${h.allocatable.ephemeralDiskMiB} MiB`,
      `${h.free.slots}/${h.allocatable.slots}`,
      String(h.placements.length),
      // Count, the disk their snapshots hold, and the longest a VM may stay suspended (issue 21).
      h.suspended.placements
        ? `${h.suspended.placements} (${h.suspended.diskMiB} MiB, max ${durationText(h.suspended.maxAgeSeconds)})`
        : "-",
      h.unschedulable.join(",") || "-",
    ]),
  );
}

/** Alerts as a table: SEQ, AT, TYPE, SUBJECT, REASON, RUNBOOK. */
export function alertTable(alerts: readonly AlertItem[]): string {
  return table(
    ["SEQ", "AT", "TYPE", "SUBJECT", "REASON", "RUNBOOK"],
    alerts.map((a) => [String(a.seq), a.at, a.type, a.subject, a.reason, a.runbook]),
  );
}
