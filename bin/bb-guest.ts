#!/usr/bin/env bun
/**
 * The guest-only entry point: `bb guest` without the other roles, compiled
 * on its own (`bun build --compile --bytecode`, src/image/bbBinary.ts
 * compileGuest) into the small build that images carry. It loads only
 * src/guest and src/protocol, and no argument parser (only the usage-error
 * text form, src/command/usageText.ts, which imports nothing), so the guest starts
 * fast under TCG (docs/adr/0130-guest-start-and-stop.md).
 *
 * Usage: `bb-guest [guest] [--workload-root DIR]` (the optional `guest`
 * word keeps the command line the same as the full `bb guest`).
 */
import { runGuest } from "../src/guest/main.ts";
import { usageErrorText } from "../src/command/usageText.ts";

const args = process.argv.slice(2).filter((a, i) => !(i === 0 && a === "guest"));
let workloadRoot: string | undefined;
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--workload-root" && i + 1 < args.length) workloadRoot = args[++i];
  else if (args[i]!.startsWith("--workload-root=")) workloadRoot = args[i]!.slice("--workload-root=".length);
  else {
    process.stderr.write(usageErrorText(`bb-guest: unknown argument ${JSON.stringify(args[i])}`, undefined));
    process.exit(2);
  }
}
void runGuest(workloadRoot ? { workloadRoot } : {});
