/**
 * `bb host …`: operator commands (enrollment tokens, list, activate, drain,
 * disable, alerts, metrics). They use the operator token: a flag, BB_TOKEN,
 * or the config file's operatorToken. Results on stdout (tables with a
 * header, or `--json`), messages on stderr.
 */
import { consola } from "consola";
import { EnrollmentTokenBody, MAX_PAGE_SIZE, MAX_WIRE_INTEGER } from "../protocol/api.ts";
import { command } from "../command/define.ts";
import { runCli } from "../command/run.ts";
import { integerFlag, optionalIntegerFlag } from "../command/values.ts";
import { clientArgs } from "../command/clientArgs.ts";
import { clientFrom, flagError } from "./common.ts";
import { alertTable, hostTable } from "./format.ts";

/** Bounds of `--ttl` of an enrollment token, seconds: the body's own (src/protocol/api.ts). */
export const ENROLLMENT_TTL_BOUNDS = {
  min: EnrollmentTokenBody.properties.ttlSeconds.minimum!,
  max: EnrollmentTokenBody.properties.ttlSeconds.maximum!,
  unit: "seconds",
};

const hostIdArg = { type: "positional", required: true, description: "Host ID" } as const;

const tokenCreate = command({
  meta: { name: "create", description: "Mint a one-use enrollment token for HOST_ID and print the join command" },
  args: {
    hostId: hostIdArg,
    ttl: {
      type: "string",
      valueHint: "SECONDS",
      description: `Token lifetime, ${ENROLLMENT_TTL_BOUNDS.min} to ${ENROLLMENT_TTL_BOUNDS.max} seconds (default 3600)`,
    },
    ...clientArgs,
  },
  examples: ["bb host enrollment-token create host-1", "bb host enrollment-token create host-1 --ttl 600 --json"],
  run: ({ args }) =>
    runCli(async () => {
      const ttl = optionalIntegerFlag("--ttl", args.ttl, ENROLLMENT_TTL_BOUNDS);
      const r = await clientFrom(args, true)
        .enrollmentToken(args.hostId, ttl)
        .catch((e: unknown) => Promise.reject(flagError(e, { ttlSeconds: "--ttl", ":id": "HOST_ID" })));
      if (args.json) return console.log(JSON.stringify(r));
      console.log(r.joinCommand);
      consola.info(`expires ${r.expiresAt}; run the command above on the host as root (or \`bb agent setup\` there)`);
    }),
});

const list = command({
  meta: { name: "list", description: "List hosts with health and free capacity" },
  args: { ...clientArgs },
  examples: ["bb host list", "bb host list --json"],
  run: ({ args }) =>
    runCli(async () => {
      const hosts = await clientFrom(args, true).hosts();
      if (args.json) return console.log(JSON.stringify(hosts));
      if (hosts.length === 0)
        consola.info("no hosts: mint an enrollment token with `bb host enrollment-token create HOST_ID`");
      else console.log(hostTable(hosts));
    }),
});

const stateCommand = (action: "activate" | "drain" | "disable", description: string) =>
  command({
    meta: { name: action, description },
    args: { hostId: hostIdArg, ...clientArgs },
    examples: [`bb host ${action} host-1`, `bb host ${action} host-1 --json`],
    run: ({ args }) =>
      runCli(async () => {
        const h = await clientFrom(args, true)
          .setHostState(args.hostId, action)
          .catch((e: unknown) => Promise.reject(flagError(e, { ":id": "HOST_ID" })));
        console.log(args.json ? JSON.stringify(h) : hostTable([h]));
      }),
  });

const alerts = command({
  meta: {
    name: "alerts",
    description: "Operator alerts (no eligible host, replacement blocked, host disabled, overlapping session)",
  },
  args: {
    after: { type: "string", valueHint: "SEQ", default: "0", description: "Resume after this sequence number" },
    ...clientArgs,
  },
  examples: ["bb host alerts", "bb host alerts --after 40 --json"],
  run: ({ args }) =>
    runCli(async () => {
      const after = integerFlag("--after", args.after, { min: 0, max: MAX_WIRE_INTEGER });
      const items = await clientFrom(args, true).alerts(after, MAX_PAGE_SIZE);
      if (args.json) return items.forEach((a) => console.log(JSON.stringify(a)));
      if (items.length === 0) consola.info("no alerts");
      else console.log(alertTable(items));
    }),
});

const metrics = command({
  meta: { name: "metrics", description: "Prometheus metrics text" },
  args: { scheduler: clientArgs.scheduler, token: clientArgs.token },
  examples: ["bb host metrics", "bb host metrics | grep bb_allocations"],
  run: ({ args }) => runCli(async () => void process.stdout.write(await clientFrom(args, true).metrics())),
});

/** The `bb host` command group. */
export const hostCommand = command({
  meta: { name: "host", description: "Operator commands for hosts" },
  examples: ["bb host enrollment-token create host-1", "bb host list", "bb host drain host-1"],
  subCommands: {
    "enrollment-token": command({
      meta: { name: "enrollment-token", description: "Enrollment tokens" },
      examples: ["bb host enrollment-token create host-1 --ttl 600"],
      subCommands: { create: tokenCreate },
    }),
    list,
    activate: stateCommand("activate", "Let the host take reservations (subject to maxActiveHosts)"),
    drain: stateCommand("drain", "Take no new reservations; keep existing placements running"),
    disable: stateCommand("disable", "Fence the host: revoke its credential and count its placements absent"),
    alerts,
    metrics,
  },
});
