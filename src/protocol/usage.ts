/**
 * Usage (issue 22, "Usage and cost"): what `GET /v1/usage` answers. Usage
 * accrues per allocation generation from the scheduler observing its VM
 * running to observing it absent, never from a timeout alone; it is kept
 * after the allocation's record is purged. docs/runs.md, "Usage".
 * Owns: the report's shape and its bounds. Pure shapes.
 */
import { Type, type Static } from "@sinclair/typebox";

/** How a report may be grouped: by tenant (in this release the controller identity; `controller` is the same), workload class or host. */
export const USAGE_GROUPS = ["tenant", "controller", "class", "host"] as const;
/** One grouping. */
export type UsageGroup = (typeof USAGE_GROUPS)[number];
/** `by` as a query pattern. */
export const USAGE_GROUP_PATTERN = new RegExp(`^(?:${USAGE_GROUPS.join("|")})$`);
/** Longest report window, ms (400 days: a year and its edges). */
export const MAX_USAGE_WINDOW_MS = 400 * 86_400_000;
/** Days an interval is kept after it ended. */
export const USAGE_RETENTION_DAYS = 400;

/** One group's totals over the window: exact integers in ms, and the same in seconds. */
export const UsageItem = Type.Object(
  {
    key: Type.String({ maxLength: 200 }),
    /** Allocation generations that ran within the window. */
    vms: Type.Integer({ minimum: 0 }),
    /** VM time within the window, ms. */
    vmMs: Type.Integer({ minimum: 0 }),
    /** Σ VM time × millicores, millicore-ms (vCPU-seconds × 10^6). */
    cpuMillicoreMs: Type.Integer({ minimum: 0 }),
    /** Σ VM time × MiB, MiB-ms. */
    memoryMiBMs: Type.Integer({ minimum: 0 }),
    vmSeconds: Type.Number({ minimum: 0 }),
    vcpuSeconds: Type.Number({ minimum: 0 }),
    mibSeconds: Type.Number({ minimum: 0 }),
  },
  { additionalProperties: false },
);
/** One group's totals. */
export type UsageItem = Static<typeof UsageItem>;

/** GET /v1/usage answer: the window [from, to), the grouping, one item per group (largest VM time first) and the total. */
export const UsageReport = Type.Object(
  {
    from: Type.String({ maxLength: 40 }),
    to: Type.String({ maxLength: 40 }),
    by: Type.Union(USAGE_GROUPS.map((g) => Type.Literal(g))),
    items: Type.Array(UsageItem, { maxItems: 10_000 }),
    total: UsageItem,
  },
  { additionalProperties: false },
);
/** GET /v1/usage answer. */
export type UsageReport = Static<typeof UsageReport>;
