#!/usr/bin/env bun
/**
 * The `bb` entry point: dispatches to one role and nothing else.
 *
 * Each role's module is imported lazily, so entering one role never loads
 * (or initialises) another role's state or credentials (docs/architecture.md,
 * "Roles").
 */
import { defineCommand, runMain } from "citty";
import { consola } from "consola";

// consola hides info lines when NODE_ENV=test; a role's log level is ours to set (BB_LOG_LEVEL: 0 errors … 4 debug).
consola.level = Number(process.env["BB_LOG_LEVEL"] ?? 3);

const main = defineCommand({
  meta: { name: "bb", version: "0.1.0", description: "Beachball: disposable microVMs on your own hosts" },
  subCommands: {
    scheduler: () => import("../src/scheduler/command.ts").then((m) => m.schedulerCommand),
    agent: () => import("../src/agent/command.ts").then((m) => m.agentCommand),
    allocation: () => import("../src/cli/allocationCommand.ts").then((m) => m.allocationCommand),
    host: () => import("../src/cli/hostCommand.ts").then((m) => m.hostCommand),
    image: () => import("../src/cli/imageCommand.ts").then((m) => m.imageCommand),
    guest: () => import("../src/guest/command.ts").then((m) => m.guestCommand),
    relay: () => import("../src/relay/command.ts").then((m) => m.relayCommand),
    dev: () => import("../src/dev/command.ts").then((m) => m.devCommand),
  },
});

await runMain(main);
