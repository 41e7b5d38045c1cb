/**
 * The `bb` command tree: one lazy entry per role, plus `bb completion`.
 * Each role's module is imported only when that role (or the whole tree,
 * for completion and the CLI reference) is asked for, so entering one role
 * never loads another role's state or credentials (docs/architecture.md,
 * "Roles").
 */
import { command, type BbCommand } from "../src/command/define.ts";
import { completionCommand } from "../src/command/completion.ts";

/** The version `bb --version` prints. */
export const BB_VERSION = "0.1.0";

/** The root of the command tree. */
export const bbCommand: BbCommand = command({
  meta: { name: "bb", version: BB_VERSION, description: "Beachball: disposable microVMs on your own hosts" },
  examples: ["bb scheduler serve --dev", "bb allocation create --class ci-small --wait", "bb host list"],
  subCommands: {
    scheduler: () => import("../src/scheduler/command.ts").then((m) => m.schedulerCommand),
    agent: () => import("../src/agent/command.ts").then((m) => m.agentCommand),
    allocation: () => import("../src/cli/allocationCommand.ts").then((m) => m.allocationCommand),
    host: () => import("../src/cli/hostCommand.ts").then((m) => m.hostCommand),
    image: () => import("../src/cli/imageCommand.ts").then((m) => m.imageCommand),
    guest: () => import("../src/guest/command.ts").then((m) => m.guestCommand),
    relay: () => import("../src/relay/command.ts").then((m) => m.relayCommand),
    dev: () => import("../src/dev/command.ts").then((m) => m.devCommand),
    completion: () => completionCommand(() => bbCommand),
  },
});
