/**
 * `bb cp SRC DEST` (issue 20, "Surface"): copies a file or a directory tree
 * into or out of an allocation, one side written `ALLOC:PATH` (an allocation
 * ID or a unique prefix, a colon, an absolute path in the guest), as
 * `docker cp` and `kubectl cp` write it. The bytes go through the private
 * network to the guest's control service (./controlOpen.ts, ./cpRun.ts),
 * never through the scheduler. `-` as the local side is a tar stream on
 * stdin or stdout (./cpRun.ts). Paths in the guest must lie under its allowed
 * roots (docs/exec-and-files.md); a path that leaves them is PATH_ESCAPE.
 * Exit codes: 0, or the CLI's (1 with the stable code printed, 2 usage, 4
 * refused credentials).
 * Must never: print the grant or a key.
 */
import { consola } from "consola";
import { command } from "../command/define.ts";
import { runCli, UsageError } from "../command/run.ts";
import { openControl, controlArgs } from "./controlOpen.ts";
import { copyIn, copyInTar, copyOut, copyOutTar, parseCpOperand } from "./cpRun.ts";

/** The `bb cp` command. */
export const cpCommand = command({
  meta: { name: "cp", description: "Copy files or directories into or out of an allocation" },
  args: {
    ...controlArgs,
    source: {
      type: "positional",
      required: true,
      valueHint: "SRC",
      description: "A local path, - (a tar stream on stdin), or ALLOCATION_ID:PATH",
    },
    destination: {
      type: "positional",
      required: true,
      valueHint: "DEST",
      description:
        "A local path, - (the tree as a tar stream on stdout), or ALLOCATION_ID:PATH (exactly one side is in an allocation)",
    },
  },
  examples: [
    "bb cp ./build alloc_0123456789abcdef0123456789abcdef:/srv/build",
    "bb cp alloc_0123456789abcdef0123456789abcdef:/root/results.tar.gz .",
    "tar -c -C ./site . | bb cp - alloc_0123456789abcdef0123456789abcdef:/srv/site",
    "bb cp alloc_0123456789abcdef0123456789abcdef:/root/out - | tar -t",
  ],
  run: ({ args }) =>
    runCli(async () => {
      const src = parseCpOperand(args.source);
      const dst = parseCpOperand(args.destination);
      if ((src.kind === "remote") === (dst.kind === "remote"))
        throw new UsageError("exactly one of SRC and DEST must be ALLOCATION_ID:PATH (a path in an allocation)");
      const remote = src.kind === "remote" ? src : dst.kind === "remote" ? dst : null;
      if (!remote!.path.startsWith("/"))
        throw new UsageError(`the path in ${remote!.allocation}:${remote!.path} must be absolute`);
      const { client, channel } = await openControl(args, remote!.allocation);
      try {
        const r =
          src.kind === "local"
            ? await copyIn(client, src.path, remote!.path)
            : src.kind === "stream"
              ? await copyInTar(client, process.stdin as unknown as AsyncIterable<Uint8Array>, remote!.path)
              : dst.kind === "stream"
                ? await copyOutTar(client, remote!.path, process.stdout)
                : await copyOut(client, remote!.path, (dst as { path: string }).path);
        consola.debug(
          `copied to ${r.path}: ${r.bytes} bytes${r.entries !== undefined ? `, ${r.entries} entries` : ""}`,
        );
      } finally {
        await channel.close();
      }
    }),
});
