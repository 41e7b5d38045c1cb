/**
 * `bb dev demo`: the main job for a newcomer (see devDemo.ts). Prints the
 * job's own output, the state sequence, and the per-phase timing breakdown;
 * exits 1 if anything of the placement was left behind.
 */
import { readFileSync, statSync } from "node:fs";
import { consola } from "consola";
import { command } from "../command/define.ts";
import { runCli, UsageError } from "../command/run.ts";

const demo = command({
  meta: { name: "demo", description: "Run a sample CI job in a real VM on this machine, end to end" },
  args: {
    root: { type: "string", valueHint: "DIR", default: ".bb", description: "Demo state directory" },
    payload: { type: "string", valueHint: "FILE", description: "Shell script to run instead of the sample job" },
  },
  examples: ["bb dev demo", "bb dev demo --payload job.sh"],
  run: ({ args }) =>
    runCli(async () => {
      const { checkPayloadSize, runDevDemo, SAMPLE_JOB } = await import("./demo.ts");
      let payload = SAMPLE_JOB;
      if (args.payload) {
        // The size is checked before the file is read and before anything boots.
        let size: number;
        try {
          size = statSync(args.payload).size;
        } catch (e) {
          throw new UsageError(
            `cannot read --payload ${args.payload}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`,
          );
        }
        checkPayloadSize(size, `--payload ${args.payload}`);
        payload = readFileSync(args.payload, "utf8");
      }
      // First Ctrl-C: release the allocation and stop cleanly; a second one exits at once.
      const interrupt = new AbortController();
      const onSignal = () => {
        if (interrupt.signal.aborted) process.exit(130);
        consola.warn("interrupted: releasing the allocation and stopping (press Ctrl-C again to exit at once)");
        interrupt.abort();
      };
      process.on("SIGINT", onSignal);
      process.on("SIGTERM", onSignal);
      let r: Awaited<ReturnType<typeof runDevDemo>>;
      try {
        r = await runDevDemo({
          signal: interrupt.signal,
          root: args.root,
          payload,
          print: (l) => console.log(l),
          status: (l) => consola.info(l),
        });
      } finally {
        process.off("SIGINT", onSignal);
        process.off("SIGTERM", onSignal);
      }
      console.log("");
      console.log(`states: ${r.states.join(" → ")}`);
      console.log(`workload exit code: ${r.exitCode}`);
      console.log("timing:");
      for (const t of r.timings) console.log(`  ${t.phase.padEnd(36)} ${String(t.ms).padStart(7)} ms`);
      if (r.leftovers.length) {
        consola.error(`left behind: ${r.leftovers.join("; ")}`);
        process.exitCode = 1;
      } else
        console.log(
          "cleanup: no VMM process, namespace, TAP or allocation directory left; host capacity back to its registered value",
        );
    }),
});

/** The `bb dev` command group. */
export const devCommand = command({
  meta: { name: "dev", description: "Developer conveniences" },
  examples: ["bb dev demo"],
  subCommands: { demo },
});
