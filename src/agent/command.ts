/**
 * `bb agent setup|join|run|doctor`: the host agent role. setup gathers the
 * join settings (flags, or prompts on a terminal), writes them to
 * `<data-dir>/join.json` and can join at once; join enrolls with a
 * one-use token (from flags, else join.json) and writes config +
 * credential (0600); run starts the daemon until SIGINT/SIGTERM (running
 * VMs are left for the next start to adopt); doctor runs the prerequisite
 * registry (spec "Enrollment" step 5) and exits 1 when a check fails.
 */
import { resolve } from "node:path";
import { consola } from "consola";
import { command } from "../command/define.ts";
import { runCli, UsageError } from "../command/run.ts";
import { useColour } from "../command/terminal.ts";
import { optionalIntegerFlag } from "../command/values.ts";
import { DEFAULT_AGENT_DATA_DIR } from "./config.ts";
import type { JoinSettings } from "./setup.ts";

const dataDirArg = {
  type: "string",
  valueHint: "DIR",
  default: DEFAULT_AGENT_DATA_DIR,
  description: "Agent state directory",
} as const;

/** The join settings flags, shared by setup and join. */
const joinArgs = {
  scheduler: { type: "string", valueHint: "URL", description: "Scheduler URL" },
  token: {
    type: "string",
    valueHint: "TOKEN",
    description: "One-use enrollment token from `bb host enrollment-token create`",
  },
  "data-dir": dataDirArg,
  "image-dir": {
    type: "string",
    valueHint: "DIRS",
    description: "Local image directories, comma-separated (default .bb/images/dev)",
  },
  "image-source": {
    type: "string",
    valueHint: "SOURCE",
    description:
      "Signed image source (dir, file:// or http(s):// base with <digest-hex>/manifest.json, see bb image publish) fetched through the verified cache",
  },
  "trusted-image-key": {
    type: "string",
    valueHint: "KEYS",
    description: "Trusted image signing keys: base64 public keys or .pub files (comma-separated)",
  },
  "max-placements": { type: "string", valueHint: "N", description: "Most VMs at once (default 8)" },
} as const;

const split = (v: string | undefined) => (v === undefined ? undefined : v.split(",").filter(Boolean));

/** Enrolls with `s` into `dataDir`; prints the outcome. */
async function enroll(s: JoinSettings, dataDir: string): Promise<void> {
  const { joinScheduler } = await import("./join.ts");
  const r = await joinScheduler({
    schedulerUrl: s.schedulerUrl,
    token: s.token,
    dataDir,
    imageDirs: s.imageDirs,
    ...(s.imageSource ? { imageSource: s.imageSource } : {}),
    ...(s.trustedImageKeys ? { trustedImageKeys: s.trustedImageKeys } : {}),
    ...(s.maxPlacements ? { capacity: { maxPlacements: s.maxPlacements } } : {}),
  });
  consola.success(
    r.enrolled ? `enrolled as host ${r.hostId}` : `already enrolled as host ${r.hostId}; credential kept`,
  );
  consola.info(`start the agent: bb agent run --data-dir ${dataDir}`);
}

const setup = command({
  meta: {
    name: "setup",
    description:
      "Set up this host to join a scheduler: asks for what flags leave out (on a terminal), writes DATA_DIR/join.json, and joins",
  },
  args: {
    ...joinArgs,
    join: {
      type: "boolean",
      description:
        "Enroll now (default: ask on a terminal, else yes); --no-join only writes join.json for `bb agent join`",
    },
    "no-input": {
      type: "boolean",
      default: false,
      description: "Never prompt; a missing --scheduler or --token is an error",
    },
  },
  examples: [
    "bb agent setup",
    "bb agent setup --no-input --scheduler http://10.0.0.1:7380 --token bbe_… --image-source http://images.example/ --trusted-image-key op.key.pub",
    "bb agent setup --no-input --scheduler http://127.0.0.1:7380 --token bbe_… --data-dir /var/lib/beachball --no-join",
  ],
  run: ({ args }) =>
    runCli(async () => {
      const setupMod = await import("./setup.ts");
      const dataDir = resolve(args["data-dir"]);
      const interactive = !args["no-input"] && !!process.stdin.isTTY && !!process.stderr.isTTY;
      const prompter = interactive ? await setupMod.clackPrompter() : null;
      const settings = await setupMod.collectJoinSettings(
        {
          scheduler: args.scheduler,
          token: args.token,
          imageDirs: split(args["image-dir"]),
          imageSource: args["image-source"],
          trustedImageKeys: split(args["trusted-image-key"]),
          maxPlacements: args["max-placements"],
        },
        prompter,
      );
      const file = setupMod.writeJoinSettings(dataDir, settings);
      const joinNow =
        args.join ??
        (prompter ? await prompter.confirm({ message: "Enroll this host now?", initialValue: true }) : true);
      if (!joinNow) {
        consola.info(`wrote ${file} (mode 0600); enroll with: bb agent join --data-dir ${dataDir}`);
        return;
      }
      await enroll(settings, dataDir);
      setupMod.removeJoinSettings(dataDir);
    }),
});

const join = command({
  meta: {
    name: "join",
    description: "Enroll this host with a one-use token (flags, else DATA_DIR/join.json from `bb agent setup`)",
  },
  args: joinArgs,
  examples: [
    "bb agent join --scheduler http://127.0.0.1:7380 --token bbe_… --data-dir /var/lib/beachball --image-dir .bb/images/dev --max-placements 8",
    "bb agent join --data-dir /var/lib/beachball",
  ],
  run: ({ args }) =>
    runCli(async () => {
      const { readJoinSettings, removeJoinSettings, joinFilePath, MAX_SETUP_PLACEMENTS } = await import("./setup.ts");
      const dataDir = resolve(args["data-dir"]);
      const saved = readJoinSettings(dataDir);
      const schedulerUrl = args.scheduler ?? saved?.schedulerUrl;
      const token = args.token ?? saved?.token;
      if (!schedulerUrl || !token)
        throw new UsageError(
          `missing ${[!schedulerUrl && "--scheduler", !token && "--token"].filter(Boolean).join(" and ")} (and no ${joinFilePath(dataDir)} from \`bb agent setup\`)`,
        );
      const maxPlacements =
        optionalIntegerFlag("--max-placements", args["max-placements"], { min: 1, max: MAX_SETUP_PLACEMENTS }) ??
        saved?.maxPlacements;
      const imageSource = args["image-source"] ?? saved?.imageSource;
      const trustedImageKeys = split(args["trusted-image-key"]) ?? saved?.trustedImageKeys;
      await enroll(
        {
          schedulerUrl,
          token,
          imageDirs: split(args["image-dir"]) ?? saved?.imageDirs ?? [".bb/images/dev"],
          ...(imageSource ? { imageSource } : {}),
          ...(trustedImageKeys ? { trustedImageKeys } : {}),
          ...(maxPlacements ? { maxPlacements } : {}),
        },
        dataDir,
      );
      if (saved) removeJoinSettings(dataDir);
    }),
});

const run = command({
  meta: { name: "run", description: "Run the host agent" },
  args: {
    "data-dir": dataDirArg,
    "log-format": {
      type: "string",
      valueHint: "FORMAT",
      description:
        "json or text: log lines as JSON objects or plain text (default: text on a terminal, else JSON; or BB_LOG_FORMAT). How much: BB_LOG_LEVEL 0 errors … 4 debug",
    },
  },
  examples: ["bb agent run", "bb agent run --data-dir /var/lib/beachball", "bb agent run --log-format json"],
  run: ({ args }) =>
    runCli(async () => {
      const { createLogger, routeConsola } = await import("../command/log.ts");
      const { parseLogFormat, parseLogLevel } = await import("../command/logOptions.ts");
      const level = parseLogLevel(process.env["BB_LOG_LEVEL"]);
      routeConsola(
        consola,
        createLogger(
          { format: parseLogFormat(args["log-format"] ?? process.env["BB_LOG_FORMAT"], !!process.stderr.isTTY), level },
          { role: "agent" },
        ),
        level,
      );
      const { AgentDaemon } = await import("./daemon.ts");
      const agent = await AgentDaemon.start({ dataDir: resolve(args["data-dir"]) });
      consola.info("agent running", { hostId: agent.hostId });
      await new Promise<void>((done) => {
        const stop = () => void agent.stop().then(done);
        process.once("SIGINT", stop);
        process.once("SIGTERM", stop);
      });
    }),
});

const doctor = command({
  meta: { name: "doctor", description: "Check this host's prerequisites (exit 1 when one fails)" },
  args: {
    "data-dir": { ...dataDirArg, description: "Agent state directory (its agent.json, if any, enables config checks)" },
    json: { type: "boolean", default: false, description: "Print JSON" },
  },
  examples: ["bb agent doctor", "bb agent doctor --json"],
  run: ({ args }) =>
    runCli(async () => {
      const { existsSync, readFileSync } = await import("node:fs");
      const { agentPaths } = await import("./config.ts");
      const { runChecks } = await import("./doctor/checks.ts");
      const { allPassed, formatResults } = await import("./doctor/format.ts");
      const cfgPath = agentPaths(resolve(args["data-dir"])).config;
      const config = existsSync(cfgPath) ? JSON.parse(readFileSync(cfgPath, "utf8")) : undefined;
      // As `bb agent run` does: under `ip netns exec` the cgroup hierarchies are mounted again in this mount namespace only, so the check sees what the agent will.
      const { restoreCgroupMounts, systemCgroupMountPorts } = await import("./isolation/cgroups/mountRestore.ts");
      await restoreCgroupMounts(systemCgroupMountPorts).catch(() => undefined);
      const results = await runChecks(config);
      console.log(args.json ? JSON.stringify(results) : formatResults(results, useColour(process.stdout)));
      if (!allPassed(results)) process.exitCode = 1;
    }),
});

/** The `bb agent` command group. */
export const agentCommand = command({
  meta: { name: "agent", description: "The host agent" },
  examples: ["bb agent setup", "bb agent run --data-dir /var/lib/beachball", "bb agent doctor"],
  subCommands: { setup, join, run, doctor },
});
