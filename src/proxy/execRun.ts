/**
 * What `bb exec` does once the control client is open (issue 20, "Exec"):
 * start an exec (argv; stdin a pipe unless told otherwise; a PTY of the
 * terminal's size when asked), pump stdin by offset, copy every output
 * stream to the caller's stdout and stderr from the offsets asked, resize
 * the PTY when the terminal resizes, and answer the exit code the shell
 * would (the exec's code, 128 + the signal's number when a signal ended it).
 * Re-attaching (`bb exec attach`) is the same copy from later offsets:
 * nothing is lost, since the guest keeps every byte of every stream up to
 * MAX_EXEC_OUTPUT_BYTES and the copy starts exactly where asked.
 *
 * Every side effect is a port (ExecIo) so tests drive it without a terminal.
 * Must never: signal the exec when the client detaches or dies (only an
 * explicit forwarded signal does); hold a whole stream in memory.
 */
import { constants } from "node:os";
import type { ControlClient } from "../client/index.ts";
import type { ExecStartBody, ExecStream, ExecView } from "../protocol/control.ts";
import { BeachballError } from "../protocol/errors.ts";

/** The caller's side of an exec: where its bytes come from and go to. */
export interface ExecIo {
  /** stdin's chunks (null: stdin is not piped). */
  stdin: AsyncIterable<Uint8Array> | null;
  /** Writes stdout (or a PTY's output) bytes; resolves once they are taken. */
  stdout: (bytes: Uint8Array) => Promise<void>;
  /** Writes stderr bytes. */
  stderr: (bytes: Uint8Array) => Promise<void>;
  /** The terminal's size, when the exec gets a PTY. */
  size?: () => { cols: number; rows: number };
  /** Calls `on` whenever the terminal resizes (SIGWINCH); returns the unsubscribe. */
  onResize?: (on: () => void) => () => void;
  /** Called once the exec has started, with its view (the CLI forwards Ctrl-C to its ID). */
  onStart?: (view: ExecView) => void;
}

/** Offsets to re-attach from, per stream (0 when absent). */
export type StreamOffsets = Partial<Record<ExecStream, number>>;

/** The shell's exit code for a finished exec: its code, or 128 + the signal's number (1 when unknown). */
export function exitCodeOf(view: ExecView): number {
  if (view.exitCode !== null) return view.exitCode;
  if (view.signal) {
    const n = (constants.signals as Record<string, number>)[`SIG${view.signal}`];
    return n !== undefined ? 128 + n : 1;
  }
  return 1;
}

/** Pumps `stdin` into the exec from offset 0, closing it at the end; stops quietly once the exec no longer takes stdin. */
async function pumpStdin(client: ControlClient, execId: string, stdin: AsyncIterable<Uint8Array>): Promise<void> {
  let offset = 0;
  try {
    for await (const chunk of stdin) {
      if (chunk.length > 0) offset = await client.writeStdin(execId, offset, chunk);
    }
    await client.closeStdin(execId, offset);
  } catch (e) {
    if (e instanceof BeachballError && e.code === "EXEC_STATE_CONFLICT") return; // exited, or stdin closed
    throw e;
  }
}

/**
 * Copies every output stream of `view` from `offsets` to io's writers
 * until the exec exits and each stream is read to its end, then answers the
 * exec's final view. Resizes the exec's PTY on io.onResize.
 */
export async function followExec(
  client: ControlClient,
  view: ExecView,
  io: Pick<ExecIo, "stdout" | "stderr" | "size" | "onResize">,
  offsets: StreamOffsets = {},
): Promise<ExecView> {
  const off =
    view.pty && io.onResize && io.size
      ? io.onResize(() => {
          const s = io.size!();
          client.resize(view.execId, s).catch(() => {}); // an exited exec refuses: nothing to resize
        })
      : () => {};
  try {
    await Promise.all(
      Object.keys(view.outputBytes).map(async (name) => {
        const stream = name as ExecStream;
        const write = stream === "stderr" ? io.stderr : io.stdout;
        for await (const c of client.followOutput(view.execId, { stream, fromOffset: offsets[stream] ?? 0 }))
          await write(c.bytes);
      }),
    );
  } finally {
    off();
  }
  return client.getExec(view.execId);
}

/**
 * Runs `start` to its end: starts it (stdin piped when io.stdin is given,
 * a PTY when `start.pty` is set), pumps stdin, copies the output, and
 * answers the final view. Errors are the guest's BeachballError codes.
 */
export async function runExec(client: ControlClient, start: ExecStartBody, io: ExecIo): Promise<ExecView> {
  const view = await client.startExec({ ...start, ...(io.stdin && !start.pty ? { stdin: true } : {}) });
  io.onStart?.(view);
  const pump = io.stdin ? pumpStdin(client, view.execId, io.stdin) : Promise.resolve();
  pump.catch(() => {}); // a refused write ends the pump; the exit status below is the answer
  return followExec(client, view, io);
}
