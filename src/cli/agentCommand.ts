/**
 * `bb agent join|run`: the host agent role. join enrolls with a one-use
 * token and writes config + credential (0600); run starts the daemon until
 * SIGINT/SIGTERM (running VMs are left for the next start to adopt).
 */
import { resolve } from "node:path";
import { defineCommand } from "citty";
import { consola } from "consola";
import { runCli } from "./common.ts";
import { DEFAULT_AGENT_DATA_DIR } from "../agent/config.ts";

const join = defineCommand({
  meta: { name: "join", description: "Enroll this host with a one-use token" },
  args: {
    scheduler: { type: "string", required: true, description: "Scheduler URL" },
    token: { type: "string", required: true, description: "Enrollment token from `bb host enrollment-token create`" },
    "data-dir": { type: "string", default: DEFAULT_AGENT_DATA_DIR, description: "Agent state directory" },
    "image-dir": { type: "string", default: ".bb/images/dev", description: "Image directory (comma-separated list)" },
    "max-placements": { type: "string", description: "Most VMs at once (default 8)" },
  },
  run: ({ args }) =>
    runCli(async () => {
      const { joinScheduler } = await import("../agent/join.ts");
      const r = await joinScheduler({
        schedulerUrl: args.scheduler,
        token: args.token,
        dataDir: resolve(args["data-dir"]),
        imageDirs: args["image-dir"].split(",").filter(Boolean),
        ...(args["max-placements"] ? { capacity: { maxPlacements: Number(args["max-placements"]) } } : {}),
      });
      consola.success(r.enrolled ? `enrolled as host ${r.hostId}` : `already enrolled as host ${r.hostId}; credential kept`);
    }),
});

const run = defineCommand({
  meta: { name: "run", description: "Run the host agent" },
  args: { "data-dir": { type: "string", default: DEFAULT_AGENT_DATA_DIR, description: "Agent state directory" } },
  run: ({ args }) =>
    runCli(async () => {
      const { AgentDaemon } = await import("../agent/daemon.ts");
      const agent = await AgentDaemon.start({ dataDir: resolve(args["data-dir"]) });
      consola.info(`agent for host ${agent.hostId} running`);
      await new Promise<void>((done) => {
        const stop = () => void agent.stop().then(done);
        process.once("SIGINT", stop);
        process.once("SIGTERM", stop);
      });
    }),
});

/** The `bb agent` command group. */
export const agentCommand = defineCommand({
  meta: { name: "agent", description: "The host agent" },
  subCommands: { join, run },
});
