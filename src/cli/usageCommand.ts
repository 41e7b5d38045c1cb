/**
 * `bb usage [--from T] [--to T] [--by tenant|class|host] [--all]` (issue 22,
 * "Usage and cost"): VM, vCPU and MiB time from observed running to observed
 * absence, over a window (default: this month to now). A controller sees its
 * own; `--all` uses the operator token and shows everyone's. Times are ISO
 * 8601 (`2026-12-01`, `2026-12-01T12:00:00Z`) or ms since the epoch.
 */
import { consola } from "consola";
import { USAGE_GROUPS, type UsageGroup } from "../protocol/usage.ts";
import { command } from "../command/define.ts";
import { runCli, UsageError } from "../command/run.ts";
import { table } from "../command/terminal.ts";
import { clientArgs } from "../command/clientArgs.ts";
import { clientFrom, flagError } from "./common.ts";

/** A `--from`/`--to` value as ms since the epoch: decimal ms, or an ISO 8601 date or time. Throws UsageError. */
export function timeFlag(flag: string, raw: string | undefined): number | undefined {
  if (raw === undefined) return undefined;
  if (/^\d+$/.test(raw)) return Number(raw);
  const ms = /^\d{4}-\d{2}-\d{2}(?:T[\d:.]+(?:Z|[+-]\d{2}:\d{2})?)?$/.test(raw) ? Date.parse(raw) : Number.NaN;
  if (Number.isNaN(ms))
    throw new UsageError(`${flag} ${JSON.stringify(raw)}: give an ISO 8601 date or time, or ms since the epoch`);
  return ms;
}

/** `bb usage`: see the module header. */
export const usageCommand = command({
  meta: { name: "usage", description: "VM, vCPU and memory time used, by tenant, class or host" },
  args: {
    from: { type: "string", valueHint: "TIME", description: "Window start (default: the 1st of this month, UTC)" },
    to: { type: "string", valueHint: "TIME", description: "Window end (default: now)" },
    by: { type: "string", valueHint: "GROUP", default: "tenant", description: `Group by ${USAGE_GROUPS.join(", ")}` },
    all: { type: "boolean", default: false, description: "Everyone's usage (the operator token)" },
    ...clientArgs,
  },
  examples: ["bb usage", "bb usage --from 2026-11-01 --to 2026-12-01 --by class --all --json"],
  run: ({ args }) =>
    runCli(async () => {
      if (!(USAGE_GROUPS as readonly string[]).includes(args.by))
        throw new UsageError(`--by ${JSON.stringify(args.by)}: one of ${USAGE_GROUPS.join(", ")}`);
      const fromMs = timeFlag("--from", args.from);
      const toMs = timeFlag("--to", args.to);
      const r = await clientFrom(args, args.all)
        .usage({
          ...(fromMs !== undefined ? { fromMs } : {}),
          ...(toMs !== undefined ? { toMs } : {}),
          by: args.by as UsageGroup,
        })
        .catch((e: unknown) => Promise.reject(flagError(e, {})));
      if (args.json) return console.log(JSON.stringify(r));
      if (r.items.length === 0) return consola.info(`no VM ran between ${r.from} and ${r.to}`);
      const row = (x: (typeof r.items)[number]) => [
        x.key,
        String(x.vms),
        x.vmSeconds.toFixed(1),
        x.vcpuSeconds.toFixed(1),
        (x.mibSeconds / 1024 / 3600).toFixed(3),
      ];
      console.log(
        table(
          [args.by.toUpperCase(), "VMS", "VM-SECONDS", "VCPU-SECONDS", "GIB-HOURS"],
          [...r.items.map(row), row(r.total)],
        ),
      );
      consola.info(`from ${r.from} to ${r.to}`);
    }),
});
