/**
 * `bb host enrollment-token create HOST_ID` and `bb host list`: operator
 * commands. Use the operator token (flag, env, or the config file's
 * operatorToken).
 */
import { defineCommand } from "citty";
import { clientArgs, clientFrom, runCli } from "./common.ts";

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

/** The `bb host` command group. */
export const hostCommand = defineCommand({
  meta: { name: "host", description: "Operator commands for hosts" },
  subCommands: { "enrollment-token": defineCommand({ meta: { name: "enrollment-token", description: "Enrollment tokens" }, subCommands: { create: tokenCreate } }), list },
});
