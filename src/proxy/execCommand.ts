/**
 * `bb exec ALLOCATION -- COMMAND [ARG…]` (issue 20, "Surface"): runs a
 * command in the allocation's guest through its control service, over the
 * private network (./controlOpen.ts), never through the scheduler. stdin is
 * piped (`--no-stdin`: /dev/null); with a terminal on stdin and stdout (or
 * `--tty`) the command gets a PTY of the terminal's size, stdin goes raw and
 * the PTY follows SIGWINCH. The exit code is the command's (128 + N when
 * signal N ended it); bb's own failures keep the CLI's codes (1 with the
 * stable code printed, 2 usage, 4 refused credentials, including
 * CONTROL_UNAUTHORIZED).
 *
 * `bb exec --detach ALLOCATION -- COMMAND…` prints the exec ID and leaves
 * the command running; `bb exec attach ALLOCATION EXEC_ID [--offset N]
 * [--stderr-offset N]` copies its output from those byte offsets to its end
 * (none lost: a killed client re-attaches from the bytes it has) and exits
 * with its code. Detaching or killing the client never signals the command;
 * Ctrl-C without a PTY forwards SIGINT to it. `--env/-e NAME=VALUE`
 * (repeatable; `NAME` alone passes this shell's value) sets variables on
 * top of the guest's minimal base.
 * Must never: print the grant or a key.
 */
import type { ArgDef } from "citty";
import { flagValues } from "../command/argv.ts";
import { type BbCommand, command } from "../command/define.ts";
import { runCli, UsageError } from "../command/run.ts";
import {
  EXEC_ENV_NAME_PATTERN,
  type ExecStartBody,
  MAX_EXEC_ENV,
  MAX_EXEC_ENV_NAME_CHARS,
  MAX_EXEC_ENV_VALUE_BYTES,
} from "../protocol/control.ts";
import { openControl, controlArgs } from "./controlOpen.ts";
import { exitCodeOf, followExec, runExec, type ExecIo } from "./execRun.ts";

/** The word that makes `bb exec` re-attach (an allocation ID always starts with `alloc_`, so it cannot be one). */
export const ATTACH_WORD = "attach";

/** A writer to a Node stream that waits for `drain` when the stream's buffer is full. */
function writerOf(s: NodeJS.WriteStream): (b: Uint8Array) => Promise<void> {
  return (b) => new Promise<void>((resolve) => (s.write(b) ? resolve() : s.once("drain", () => resolve())));
}

function offsetFlag(v: string | undefined, flag: string): number {
  if (v === undefined) return 0;
  if (!/^\d{1,16}$/.test(v) || !Number.isSafeInteger(Number(v)))
    throw new UsageError(`--${flag} must be a byte offset (decimal digits)`);
  return Number(v);
}

/**
 * The environment of an exec from its `--env` values, in order (a later NAME wins): `NAME=VALUE`, or
 * `NAME` alone for `local[NAME]`. With a terminal, TERM is `local.TERM` (or xterm) unless given.
 * Throws UsageError for a name that is not a shell identifier, a `NAME` unset here, more than
 * MAX_EXEC_ENV variables, or a value over MAX_EXEC_ENV_VALUE_BYTES (the control service's bounds,
 * src/protocol/control.ts, checked before anything is sent).
 */
export function execEnv(
  values: readonly string[],
  tty: boolean,
  local: Record<string, string | undefined>,
): Record<string, string> {
  const env: Record<string, string> = {};
  const name = new RegExp(EXEC_ENV_NAME_PATTERN);
  for (const v of values) {
    const eq = v.indexOf("=");
    const key = eq < 0 ? v : v.slice(0, eq);
    if (!name.test(key) || key.length > MAX_EXEC_ENV_NAME_CHARS)
      throw new UsageError(
        `--env ${JSON.stringify(v)}: the name must be a shell identifier of at most ${MAX_EXEC_ENV_NAME_CHARS} characters (NAME=VALUE)`,
      );
    const value = eq < 0 ? local[key] : v.slice(eq + 1);
    if (value === undefined) throw new UsageError(`--env ${key}: ${key} is not set here (give NAME=VALUE)`);
    if (Buffer.byteLength(value) > MAX_EXEC_ENV_VALUE_BYTES)
      throw new UsageError(`--env ${key}: the value is over ${MAX_EXEC_ENV_VALUE_BYTES} bytes`);
    env[key] = value;
  }
  if (tty && env["TERM"] === undefined) env["TERM"] = local["TERM"] || "xterm";
  if (Object.keys(env).length > MAX_EXEC_ENV)
    throw new UsageError(`--env: at most ${MAX_EXEC_ENV} variables (got ${Object.keys(env).length})`);
  return env;
}

/** The terminal's size, 80x24 when stdout is not a terminal. */
function terminalSize(): { cols: number; rows: number } {
  return { cols: process.stdout.columns || 80, rows: process.stdout.rows || 24 };
}

/** The output side of ExecIo on this process's stdout, stderr and terminal. */
const terminalIo: Pick<ExecIo, "stdout" | "stderr" | "size" | "onResize"> = {
  stdout: writerOf(process.stdout),
  stderr: writerOf(process.stderr),
  size: terminalSize,
  onResize: (on) => {
    process.on("SIGWINCH", on);
    return () => process.off("SIGWINCH", on);
  },
};

/** The `bb exec` command. */
export const execCommand = command({
  meta: { name: "exec", description: "Run a command in an allocation (over the private network)" },
  args: {
    ...controlArgs,
    allocation: {
      type: "positional",
      required: true,
      valueHint: "ALLOCATION_ID",
      description: "Allocation ID, or a unique prefix of one; `attach` re-attaches (then ALLOCATION_ID EXEC_ID)",
    },
    detach: { type: "boolean", alias: "d", description: "Start the command, print its exec ID and leave it running" },
    tty: {
      type: "boolean",
      alias: "t",
      description: "Give the command a terminal (default: when stdin and stdout are one)",
    },
    stdin: { type: "boolean", default: true, description: "Pipe stdin to the command (--no-stdin: /dev/null)" },
    env: {
      type: "string",
      alias: "e",
      valueHint: "NAME=VALUE",
      description: "Set an environment variable (repeatable; NAME alone passes this shell's value)",
    },
    cwd: { type: "string", valueHint: "DIR", description: "Working directory (absolute; default: the user's home)" },
    user: {
      type: "string",
      valueHint: "USER",
      description: "User name or uid to run as (default: the guest service's)",
    },
    timeout: { type: "string", valueHint: "SECONDS", description: "Kill the command's process group after this long" },
    offset: { type: "string", valueHint: "BYTES", description: "attach: stdout (or terminal) offset to copy from" },
    "stderr-offset": { type: "string", valueHint: "BYTES", description: "attach: stderr offset to copy from" },
  },
  variadic: "COMMAND…",
  examples: [
    "bb exec alloc_0123456789abcdef0123456789abcdef -- uname -a",
    "bb exec -e CI=1 -e HOME=/root alloc_0123456789abcdef0123456789abcdef -- make test",
    "bb exec --detach alloc_0123456789abcdef0123456789abcdef -- sh -c 'make test > /tmp/log'",
    "bb exec attach alloc_0123456789abcdef0123456789abcdef exec_0123456789abcdef0123456789abcdef --offset 1048576",
  ],
  run: ({ args, rawArgs, cmd }) =>
    runCli(async () => {
      const words = (args as { _: string[] })._;
      if (args.allocation === ATTACH_WORD) {
        if (words.length !== 2) throw new UsageError("bb exec attach takes ALLOCATION_ID EXEC_ID");
        if (args.env !== undefined) throw new UsageError("--env is for starting a command, not bb exec attach");
        const offsets = {
          stdout: offsetFlag(args.offset, "offset"),
          pty: offsetFlag(args.offset, "offset"),
          stderr: offsetFlag(args["stderr-offset"], "stderr-offset"),
        };
        const { client, channel } = await openControl(args, words[0]!);
        try {
          const view = await client.getExec(words[1]!);
          process.exitCode = exitCodeOf(await followExec(client, view, terminalIo, offsets));
        } finally {
          await channel.close();
        }
        return;
      }
      if (words.length === 0) throw new UsageError("missing COMMAND (bb exec ALLOCATION_ID -- COMMAND [ARG…])");
      if (args.offset !== undefined || args["stderr-offset"] !== undefined)
        throw new UsageError("--offset and --stderr-offset are for bb exec attach");
      const timeout = args.timeout === undefined ? undefined : Number(args.timeout);
      if (timeout !== undefined && (!/^\d{1,6}$/.test(args.timeout!) || timeout < 1))
        throw new UsageError("--timeout must be a whole number of seconds, at least 1");
      const tty = args.detach ? false : (args.tty ?? Boolean(process.stdin.isTTY && process.stdout.isTTY));
      const envValues = flagValues(
        rawArgs,
        cmd.args as Record<string, ArgDef>,
        "env",
        Boolean((cmd as BbCommand).variadic),
      );
      const env = execEnv(envValues, tty, process.env);
      const start: ExecStartBody = {
        argv: words,
        ...(args.cwd ? { cwd: args.cwd } : {}),
        ...(args.user ? { user: args.user } : {}),
        ...(timeout !== undefined ? { timeoutSeconds: timeout } : {}),
        ...(Object.keys(env).length > 0 ? { env } : {}),
        ...(tty ? { pty: terminalSize() } : {}),
      };
      const { client, channel } = await openControl(args, args.allocation);
      const raw = tty && process.stdin.isTTY;
      let onInt: (() => void) | null = null;
      try {
        if (args.detach) {
          const view = await client.startExec(start);
          process.stdout.write(`${view.execId}\n`);
          return;
        }
        if (raw) process.stdin.setRawMode(true);
        let execId: string | null = null;
        const io: ExecIo = {
          ...terminalIo,
          stdin: args.stdin || tty ? (process.stdin as AsyncIterable<Uint8Array>) : null,
          onStart: (v) => (execId = v.execId),
        };
        if (!tty) {
          // Ctrl-C without a terminal: the command gets SIGINT; its exit status is still the answer.
          onInt = () => {
            if (execId) client.signal(execId, "INT").catch(() => {});
          };
          process.on("SIGINT", onInt);
        }
        const started = runExec(client, start, io);
        process.exitCode = exitCodeOf(await started);
      } finally {
        if (onInt) process.off("SIGINT", onInt);
        if (raw) process.stdin.setRawMode(false);
        process.stdin.destroy();
        await channel.close();
      }
    }),
});
