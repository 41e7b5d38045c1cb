/**
 * Usage arithmetic (issue 22, "Usage and cost"), without I/O: how much of
 * an interval lies in a window, and a report's totals per group. An
 * interval still open counts up to `nowMs`. Integers throughout (ms,
 * millicore-ms, MiB-ms), so a total is exact to the millisecond.
 */
import type { UsageGroup, UsageItem } from "../protocol/usage.ts";

/** One VM's time as the report reads it (ms since the epoch; `endedAtMs` null while it runs). */
export interface UsageInterval {
  tenant: string;
  workloadClass: string;
  hostId: string;
  cpuMillis: number;
  memoryMiB: number;
  startedAtMs: number;
  endedAtMs: number | null;
}

/** Milliseconds of [start, end ?? nowMs) inside [fromMs, toMs). */
export function overlapMs(
  startedAtMs: number,
  endedAtMs: number | null,
  fromMs: number,
  toMs: number,
  nowMs: number,
): number {
  const end = Math.min(endedAtMs ?? nowMs, toMs);
  return Math.max(0, end - Math.max(startedAtMs, fromMs));
}

const keyOf = (i: UsageInterval, by: UsageGroup) =>
  by === "class" ? i.workloadClass : by === "host" ? i.hostId : i.tenant;

const empty = (key: string): UsageItem => ({
  key,
  vms: 0,
  vmMs: 0,
  cpuMillicoreMs: 0,
  memoryMiBMs: 0,
  vmSeconds: 0,
  vcpuSeconds: 0,
  mibSeconds: 0,
});

function add(item: UsageItem, i: UsageInterval, ms: number): void {
  item.vms += 1;
  item.vmMs += ms;
  item.cpuMillicoreMs += ms * i.cpuMillis;
  item.memoryMiBMs += ms * i.memoryMiB;
}

function seconds(item: UsageItem): UsageItem {
  return {
    ...item,
    vmSeconds: item.vmMs / 1000,
    vcpuSeconds: item.cpuMillicoreMs / 1_000_000,
    mibSeconds: item.memoryMiBMs / 1000,
  };
}

/** The totals of `intervals` inside [fromMs, toMs) per group `by` (largest VM time first) and overall; intervals outside the window count nowhere. */
export function usageTotals(
  intervals: Iterable<UsageInterval>,
  by: UsageGroup,
  fromMs: number,
  toMs: number,
  nowMs: number,
): { items: UsageItem[]; total: UsageItem } {
  const groups = new Map<string, UsageItem>();
  const total = empty("total");
  for (const i of intervals) {
    const ms = overlapMs(i.startedAtMs, i.endedAtMs, fromMs, toMs, nowMs);
    if (ms <= 0) continue;
    const k = keyOf(i, by);
    let g = groups.get(k);
    if (!g) groups.set(k, (g = empty(k)));
    add(g, i, ms);
    add(total, i, ms);
  }
  const items = [...groups.values()].map(seconds).sort((a, b) => b.vmMs - a.vmMs || a.key.localeCompare(b.key));
  return { items, total: seconds(total) };
}
