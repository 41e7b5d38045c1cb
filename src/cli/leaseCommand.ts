/**
 * `bb lease create|list|get|heartbeat|extend|release|share|unshare` (issue
 * 22, "Leases"): a VM held for a person or a tool until its TTL or an idle
 * timeout after its last activity (a heartbeat, or `bb exec`, `bb cp`,
 * `bb proxy` asking for a connection grant to it). Results on stdout (a
 * detail block or `--json`), messages on stderr.
 */
import { randomUUID } from "node:crypto";
import { consola } from "consola";
import { LEASE_IDLE_SECONDS, LEASE_TTL_SECONDS, type LeaseView } from "../protocol/leases.ts";
import { command } from "../command/define.ts";
import { runCli, UsageError } from "../command/run.ts";
import { integerFlag, optionalIntegerFlag } from "../command/values.ts";
import { table } from "../command/terminal.ts";
import { clientArgs } from "../command/clientArgs.ts";
import { clientFrom, flagError } from "./common.ts";

const idArg = { type: "positional", required: true, description: "Lease ID (lse_ and 32 hex digits)" } as const;
const ttlBounds = { ...LEASE_TTL_SECONDS, unit: "seconds" };

/** One lease as `Key: value` lines. */
export function leaseDetail(l: LeaseView): string {
  const shares = Object.entries(l.shares).map(([p, a]) => `${p} (${a})`);
  const lines: [string, string][] = [
    ["Lease", l.leaseId],
    ["State", l.state + (l.reason ? ` (${l.reason})` : "")],
    ["Owner", `${l.owner}${l.access === "owner" ? "" : ` (you: ${l.access})`}`],
    ["Allocation", l.allocationId],
    ["Class", l.workloadClass],
    ["Expires", l.expiresAt],
    ["Idle", l.idleSeconds === null ? "-" : `${l.idleSeconds} s (ends ${l.idleExpiresAt} without activity)`],
    ["Activity", l.lastActivityAt],
    ["Shared", shares.length ? shares.join(", ") : "-"],
  ];
  return lines.map(([k, v]) => `${`${k}:`.padEnd(12)}${v}`).join("\n");
}

const show = (l: LeaseView, json: boolean) => console.log(json ? JSON.stringify(l) : leaseDetail(l));
const idError = (e: unknown) =>
  Promise.reject(flagError(e, { ":id": "LEASE_ID", ttlSeconds: "--ttl", principal: "PRINCIPAL" }));

const create = command({
  meta: { name: "create", description: "Lease a VM of a class until --ttl, or --idle after its last activity" },
  args: {
    class: { type: "string", required: true, valueHint: "CLASS", description: "Workload class" },
    ttl: {
      type: "string",
      valueHint: "SECONDS",
      default: "3600",
      description: `Lifetime, ${LEASE_TTL_SECONDS.min} to ${LEASE_TTL_SECONDS.max} seconds`,
    },
    idle: {
      type: "string",
      valueHint: "SECONDS",
      description: "End it this long after its last activity (default: never idle)",
    },
    "request-id": { type: "string", valueHint: "KEY", description: "Idempotency key (default: a fresh one)" },
    ...clientArgs,
  },
  examples: ["bb lease create --class ci-small --ttl 7200 --idle 1800"],
  run: ({ args }) =>
    runCli(async () => {
      const ttl = integerFlag("--ttl", args.ttl, ttlBounds);
      const idle = optionalIntegerFlag("--idle", args.idle, { ...LEASE_IDLE_SECONDS, unit: "seconds" });
      const { view } = await clientFrom(args)
        .createLease({
          clientRequestId: args["request-id"] ?? randomUUID(),
          workloadClass: args.class,
          ttlSeconds: ttl,
          ...(idle !== undefined ? { idleSeconds: idle } : {}),
        })
        .catch((e: unknown) =>
          Promise.reject(flagError(e, { workloadClass: "--class", ttlSeconds: "--ttl", idleSeconds: "--idle" })),
        );
      show(view, args.json);
      if (!args.json)
        consola.info(
          `bb exec ${view.allocationId} -- …  (each exec counts as activity; \`bb lease heartbeat ${view.leaseId}\` too)`,
        );
    }),
});

const list = command({
  meta: { name: "list", description: "List the leases you own or were shared" },
  args: { ...clientArgs },
  examples: ["bb lease list", "bb lease list --json"],
  run: ({ args }) =>
    runCli(async () => {
      const items = await clientFrom(args).listLeases();
      if (args.json) return console.log(JSON.stringify({ items }));
      if (items.length === 0) return consola.info("no leases: make one with `bb lease create --class CLASS`");
      console.log(
        table(
          ["ID", "STATE", "OWNER", "ALLOCATION", "EXPIRES", "IDLE ENDS"],
          items.map((l) => [l.leaseId, l.state, l.owner, l.allocationId, l.expiresAt, l.idleExpiresAt ?? "-"]),
        ),
      );
    }),
});

/** A command on one lease: `name`, what it does, and the client call. */
const onLease = (
  name: string,
  description: string,
  call: (
    c: () => ReturnType<typeof clientFrom>,
    id: string,
    extra: { ttl?: string; principal?: string; access?: string },
  ) => Promise<LeaseView>,
  extraArgs: Record<
    string,
    { type: "string" | "positional"; required?: boolean; valueHint?: string; description: string; default?: string }
  > = {},
  example = `bb lease ${name} lse_0123456789abcdef0123456789abcdef`,
) =>
  command({
    meta: { name, description },
    args: { id: idArg, ...extraArgs, ...clientArgs },
    examples: [example],
    run: ({ args }) =>
      runCli(async () => show(await call(() => clientFrom(args), args.id, args as never).catch(idError), args.json)),
  });

const heartbeat = onLease("heartbeat", "Count as activity now (owner or a use share)", (c, id) =>
  c().heartbeatLease(id),
);
const extend = onLease(
  "extend",
  "Make it end --ttl seconds from now (never past its VM's lifetime)",
  (c, id, x) => {
    const ttl = integerFlag("--ttl", x.ttl ?? "", ttlBounds);
    return c().extendLease(id, ttl);
  },
  { ttl: { type: "string", required: true, valueHint: "SECONDS", description: "New lifetime from now" } },
  "bb lease extend lse_0123456789abcdef0123456789abcdef --ttl 3600",
);
const release = onLease("release", "End it and release its VM (owner)", (c, id) => c().releaseLease(id));
const principalArg = { type: "positional" as const, required: true, description: "A principal ID of the manifest" };
const share = onLease(
  "share",
  "Let PRINCIPAL read it, or use it (heartbeat, extend) with --access use",
  (c, id, x) => {
    if (x.access !== "read" && x.access !== "use")
      throw new UsageError(`--access ${JSON.stringify(x.access)}: read or use`);
    return c().shareLease(id, x.principal!, x.access);
  },
  {
    principal: principalArg,
    access: { type: "string", valueHint: "read|use", default: "read", description: "What PRINCIPAL may do" },
  },
  "bb lease share lse_0123456789abcdef0123456789abcdef controller:ops --access use",
);
const unshare = onLease(
  "unshare",
  "Take PRINCIPAL's share back",
  (c, id, x) => c().unshareLease(id, x.principal!),
  { principal: principalArg },
  "bb lease unshare lse_0123456789abcdef0123456789abcdef controller:ops",
);
const get = onLease("get", "Show one lease", (c, id) => c().getLease(id));

/** `bb lease`: see the module header. */
export const leaseCommand = command({
  meta: { name: "lease", description: "Hold a VM for a person or a tool, until a TTL or an idle timeout" },
  subCommands: { create, list, get, heartbeat, extend, release, share, unshare },
  examples: ["bb lease create --class ci-small --ttl 7200 --idle 1800", "bb lease list"],
});
