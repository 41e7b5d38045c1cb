/**
 * `bb agent join|run|doctor`: the host agent role. join enrolls with a
 * one-use token and writes config + credential (0600); run starts the daemon
 * until SIGINT/SIGTERM (running VMs are left for the next start to adopt);
 * doctor runs the prerequisite registry (spec "Enrollment" step 5) and exits
 * 1 when a check fails.
 */
import { resolve } from "node:path";
import { defineCommand } from "citty";
import { consola } from "consola";
import { runCli } from "../command/run.ts";
import { DEFAULT_AGENT_DATA_DIR } from "./config.ts";

const join = defineCommand({
  meta: { name: "join", description: "Enroll this host with a one-use token" },
  args: {
    scheduler: { type: "string", required: true, description: "Scheduler URL" },
    token: { type: "string", required: true, description: "Enrollment token from `bb host enrollment-token create`" },
    "data-dir": { type: "string", default: DEFAULT_AGENT_DATA_DIR, description: "Agent state directory" },
    "image-dir": { type: "string", default: ".bb/images/dev", description: "Image directory (comma-separated list)" },
    "max-placements": { type: "string", description: "Most VMs at once (default 8)" },
    "image-source": { type: "string", description: "Signed image source (dir, file:// or http(s):// base with <digest-hex>/manifest.json, see bb image publish) fetched through the verified cache" },
    "trusted-image-key": { type: "string", description: "Trusted image signing keys: base64 public keys or .pub files (comma-separated)" },
  },
  run: ({ args }) =>
    runCli(async () => {
      const { joinScheduler } = await import("./join.ts");
      const r = await joinScheduler({
        schedulerUrl: args.scheduler,
        token: args.token,
        dataDir: resolve(args["data-dir"]),
        imageDirs: args["image-dir"].split(",").filter(Boolean),
        ...(args["image-source"] ? { imageSource: args["image-source"] } : {}),
        ...(args["trusted-image-key"] ? { trustedImageKeys: args["trusted-image-key"].split(",").filter(Boolean) } : {}),
        ...(args["max-placements"] ? { capacity: { maxPlacements: Number(args["max-placements"]) } } : {}),
      });
      consola.success(r.enrolled ? `enrolled as host ${r.hostId}` : `already enrolled as host ${r.hostId}; credential kept`);
    }),
});

const run = defineCommand({
  meta: { name: "run", description: "Run the host agent" },
  args: {
    "data-dir": { type: "string", default: DEFAULT_AGENT_DATA_DIR, description: "Agent state directory" },
    "log-format": { type: "string", description: "Log lines as json or text (default: text on a terminal, else json; or BB_LOG_FORMAT). Level: BB_LOG_LEVEL 0 errors … 4 debug" },
  },
  run: ({ args }) =>
    runCli(async () => {
      const { createLogger, parseLogFormat, parseLogLevel, routeConsola } = await import("../command/log.ts");
      const level = parseLogLevel(process.env["BB_LOG_LEVEL"]);
      routeConsola(consola, createLogger({ format: parseLogFormat(args["log-format"] ?? process.env["BB_LOG_FORMAT"], !!process.stderr.isTTY), level }, { role: "agent" }), level);
      const { AgentDaemon } = await import("./daemon.ts");
      const agent = await AgentDaemon.start({ dataDir: resolve(args["data-dir"]) });
      consola.info(`agent for host ${agent.hostId} running`);
      await new Promise<void>((done) => {
        const stop = () => void agent.stop().then(done);
        process.once("SIGINT", stop);
        process.once("SIGTERM", stop);
      });
    }),
});

const doctor = defineCommand({
  meta: { name: "doctor", description: "Check this host's prerequisites (exit 1 when one fails)" },
  args: {
    "data-dir": { type: "string", default: DEFAULT_AGENT_DATA_DIR, description: "Agent state directory (its agent.json, if any, enables config checks)" },
    json: { type: "boolean", default: false, description: "Print JSON" },
  },
  run: ({ args }) =>
    runCli(async () => {
      const { existsSync, readFileSync } = await import("node:fs");
      const { agentPaths } = await import("./config.ts");
      const { runChecks } = await import("./doctor/checks.ts");
      const { allPassed, formatResults } = await import("./doctor/format.ts");
      const cfgPath = agentPaths(resolve(args["data-dir"])).config;
      const config = existsSync(cfgPath) ? JSON.parse(readFileSync(cfgPath, "utf8")) : undefined;
      const results = await runChecks(config);
      console.log(args.json ? JSON.stringify(results) : formatResults(results, !!process.stdout.isTTY && !process.env["NO_COLOR"]));
      if (!allPassed(results)) process.exitCode = 1;
    }),
});

/** The `bb agent` command group. */
export const agentCommand = defineCommand({
  meta: { name: "agent", description: "The host agent" },
  subCommands: { join, run, doctor },
});
