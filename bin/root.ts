/**
 * The `bb` command tree: one lazy entry per role, plus `bb completion`.
 * Each role's module is imported only when that role (or the whole tree,
 * for completion and the CLI reference) is asked for, so entering one role
 * never loads another role's state or credentials (docs/architecture.md,
 * "Roles"). Each entry carries the role's one-line summary beside its
 * import, so `bb --help` and `bb --version` import no role at all (issue
 * 19, "Fast start"); test/cli-definitions.test.ts fails when a summary
 * differs from the role's own `meta` or a subcommand lacks one.
 */
import { command, lazyCommand, type BbCommand } from "../src/command/define.ts";
import { completionCommand } from "../src/command/completion.ts";

/** The version `bb --version` prints. */
export const BB_VERSION = "0.1.0";

/** The root of the command tree. */
export const bbCommand: BbCommand = command({
  meta: { name: "bb", version: BB_VERSION, description: "Beachball: disposable microVMs on your own hosts" },
  examples: ["bb scheduler serve --dev", "bb allocation create --class ci-small --wait", "bb host list"],
  subCommands: {
    scheduler: lazyCommand({ description: "The control plane" }, () =>
      import("../src/scheduler/command.ts").then((m) => m.schedulerCommand),
    ),
    agent: lazyCommand({ description: "The host agent" }, () =>
      import("../src/agent/command.ts").then((m) => m.agentCommand),
    ),
    allocation: lazyCommand({ description: "Request, inspect and release VMs" }, () =>
      import("../src/cli/allocationCommand.ts").then((m) => m.allocationCommand),
    ),
    run: lazyCommand({ description: "Submit scripts as runs, queued fairly, and read them back" }, () =>
      import("../src/cli/runCommand.ts").then((m) => m.runCommand),
    ),
    lease: lazyCommand({ description: "Hold a VM for a person or a tool, until a TTL or an idle timeout" }, () =>
      import("../src/cli/leaseCommand.ts").then((m) => m.leaseCommand),
    ),
    usage: lazyCommand({ description: "VM, vCPU and memory time used, by tenant, class or host" }, () =>
      import("../src/cli/usageCommand.ts").then((m) => m.usageCommand),
    ),
    host: lazyCommand({ description: "Operator commands for hosts" }, () =>
      import("../src/cli/hostCommand.ts").then((m) => m.hostCommand),
    ),
    image: lazyCommand({ description: "Build, sign, verify and publish Beachball images" }, () =>
      import("../src/cli/imageCommand.ts").then((m) => m.imageCommand),
    ),
    proxy: lazyCommand({ description: "Forward 127.0.0.1:LOCAL to a port inside a private allocation (no root)" }, () =>
      import("../src/proxy/command.ts").then((m) => m.proxyCommand),
    ),
    exec: lazyCommand({ description: "Run a command in an allocation (over the private network)" }, () =>
      import("../src/proxy/execCommand.ts").then((m) => m.execCommand),
    ),
    cp: lazyCommand({ description: "Copy files or directories into or out of an allocation" }, () =>
      import("../src/proxy/cpCommand.ts").then((m) => m.cpCommand),
    ),
    relay: lazyCommand({ description: "A packet relay for private networking" }, () =>
      import("../src/relay/command.ts").then((m) => m.relayCommand),
    ),
    dev: lazyCommand({ description: "Developer conveniences" }, () =>
      import("../src/dev/command.ts").then((m) => m.devCommand),
    ),
    completion: lazyCommand({ description: "Print a shell completion script (bash, zsh or fish)" }, async () =>
      completionCommand(() => bbCommand),
    ),
  },
});
