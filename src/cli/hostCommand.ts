/**
 * `bb host enrollment-token create HOST_ID` and `bb host list`: operator
 * commands. Use the operator token (flag, env, or the config file's
 * operatorToken).
 */
import { defineCommand } from "citty";
import { clientArgs, clientFrom } from "./common.ts";
import { runCli } from "../command/run.ts";

const tokenCreate = defineCommand({
  meta: { name: "create", description: "Mint a one-use enrollment token for HOST_ID and print the join command" },
  args: { ...clientArgs, hostId: { type: "positional", required: true, description: "Host ID" }, ttl: { type: "string", description: "Seconds (≤ 3600)" } },
  run: ({ args }) =>
    runCli(async () => {
      const r = await clientFrom(args, true).enrollmentToken(args.hostId, args.ttl ? Number(args.ttl) : undefined);
      console.log(args.json ? JSON.stringify(r) : `${r.joinCommand}\n(expires ${r.expiresAt})`);
    }),
});

const list = defineCommand({
  meta: { name: "list", description: "List hosts with health and free capacity" },
  args: { ...clientArgs },
  run: ({ args }) =>
    runCli(async () => {
      const hosts = await clientFrom(args, true).hosts();
      if (args.json) return console.log(JSON.stringify(hosts));
      for (const h of hosts)
        console.log(`${h.hostId}  ${h.adminState}/${h.health}${h.unschedulable.length ? ` unschedulable: ${h.unschedulable.join(",")}` : ""}  free cpu ${h.free.cpuMillis}m mem ${h.free.memoryMiB}MiB disk ${h.free.ephemeralDiskMiB}MiB slots ${h.free.slots}  placements ${h.placements.length}`);
    }),
});

const stateCommand = (action: "activate" | "drain" | "disable", description: string) =>
  defineCommand({
    meta: { name: action, description },
    args: { ...clientArgs, hostId: { type: "positional", required: true, description: "Host ID" } },
    run: ({ args }) =>
      runCli(async () => {
        const h = await clientFrom(args, true).setHostState(args.hostId, action);
        console.log(args.json ? JSON.stringify(h) : `${h.hostId}  ${h.adminState}  credential version ${h.credentialVersion}  placements ${h.placements.length}`);
      }),
  });

const alerts = defineCommand({
  meta: { name: "alerts", description: "Operator alerts (no eligible host, replacement blocked, host disabled, overlapping session)" },
  args: { ...clientArgs, after: { type: "string", default: "0", description: "Resume after this sequence number" } },
  run: ({ args }) =>
    runCli(async () => {
      for (const a of await clientFrom(args, true).alerts(Number(args.after))) console.log(args.json ? JSON.stringify(a) : `${a.at}  #${a.seq} ${a.type} ${a.subject} [${a.reason}]  ${a.runbook}`);
    }),
});

const metrics = defineCommand({
  meta: { name: "metrics", description: "Prometheus metrics text" },
  args: { ...clientArgs },
  run: ({ args }) => runCli(async () => void process.stdout.write(await clientFrom(args, true).metrics())),
});

/** The `bb host` command group. */
export const hostCommand = defineCommand({
  meta: { name: "host", description: "Operator commands for hosts" },
  subCommands: {
    "enrollment-token": defineCommand({ meta: { name: "enrollment-token", description: "Enrollment tokens" }, subCommands: { create: tokenCreate } }),
    list,
    activate: stateCommand("activate", "Let the host take reservations (subject to maxActiveHosts)"),
    drain: stateCommand("drain", "Take no new reservations; keep existing placements running"),
    disable: stateCommand("disable", "Fence the host: revoke its credential and count its placements absent"),
    alerts,
    metrics,
  },
});
