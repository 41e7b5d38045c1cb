/**
 * What every command prints besides its result (issue "CLI conventions"):
 * results go to stdout, progress and messages to stderr; colour only when
 * the stream is a terminal and NO_COLOR is unset (no-color.org); tables
 * with a header row; spinners only on a terminal.
 *
 * Lower layer. Must never: write a result to stderr or a message to stdout.
 */
import { consola, type LogObject } from "consola";
import { spinner as clackSpinner } from "@clack/prompts";

/** The standard streams, as far as these helpers need them (a port: tests pass fakes). */
export interface Stream {
  isTTY?: boolean;
  write(text: string): unknown;
}

/** Whether to colour what goes to `stream`: a terminal, NO_COLOR unset or empty, TERM not "dumb". */
export function useColour(stream: Stream, env: Record<string, string | undefined> = process.env): boolean {
  return !!stream.isTTY && !env["NO_COLOR"] && env["TERM"] !== "dumb";
}

/** ANSI styles that are the identity when colour is off. */
export function styles(colour: boolean) {
  const wrap = (open: number, close: number) => (t: string) => (colour ? `\x1b[${open}m${t}\x1b[${close}m` : t);
  return {
    bold: wrap(1, 22),
    dim: wrap(2, 22),
    red: wrap(31, 39),
    yellow: wrap(33, 39),
    green: wrap(32, 39),
    cyan: wrap(36, 39),
  };
}

/** consola's levels: 0 error, 1 warn, 2 log, 3 info/success, 4 debug, 5 trace. */
const PREFIX: Record<string, (s: ReturnType<typeof styles>) => string> = {
  fatal: (s) => s.red("error: "),
  error: (s) => s.red("error: "),
  warn: (s) => s.yellow("warning: "),
  success: (s) => s.green("✔ "),
  debug: (s) => s.dim("debug: "),
  trace: (s) => s.dim("trace: "),
};

/**
 * Sends every consola message to `stream` (stderr) as one plain line
 * (`error: …`, `warning: …`, info as is), coloured only per useColour.
 * Called once by the entry point.
 */
export function routeMessagesTo(
  stream: Stream = process.stderr,
  env: Record<string, string | undefined> = process.env,
): void {
  const s = styles(useColour(stream, env));
  consola.setReporters([
    {
      log(o: LogObject) {
        const text = o.args
          .map((a) => (a instanceof Error ? a.message : typeof a === "string" ? a : String(a)))
          .join(" ");
        stream.write(`${PREFIX[o.type]?.(s) ?? ""}${text}\n`);
      },
    },
  ]);
}

/**
 * Lays rows out under a header as aligned columns (two spaces apart, the
 * last column not padded). `header` is printed as given (upper case by
 * convention).
 */
export function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
      .join("  ")
      .trimEnd();
  return [line(header), ...rows.map(line)].join("\n");
}

/** A progress indicator: a spinner on a terminal, nothing at all elsewhere (so pipes and logs stay clean). */
export interface Progress {
  /** Shows `text` as the current state on the spinner (dropped without one). */
  update(text: string): void;
  /** A step of a long job: the spinner's text on a terminal, a line elsewhere. */
  step(text: string): void;
  /** Prints a line above the spinner (or to the stream when there is none). */
  note(text: string): void;
  /** Ends the indicator, leaving `text` if given. */
  stop(text?: string): void;
}

/**
 * A spinner on `stream` when it is a terminal that reports its width and
 * `quiet` is false; otherwise notes go to the stream as plain lines and
 * updates are dropped. (A terminal of width 0, such as a pseudo-terminal
 * nobody sized, would get the spinner's text one character per line.)
 */
export function progress(stream: NodeJS.WriteStream | Stream = process.stderr, quiet = false): Progress {
  if (quiet) return { update() {}, step() {}, note() {}, stop() {} };
  const line = (t: string) => void stream.write(`${t}\n`);
  const columns = (stream as { columns?: unknown }).columns;
  if (!stream.isTTY || typeof columns !== "number" || columns < 1)
    return { update() {}, step: line, note: line, stop: (t) => void (t && line(t)) };
  const sp = clackSpinner({
    output: stream as NodeJS.WriteStream,
    withGuide: false,
    onCancel: () => process.exit(130),
    ...(useColour(stream) ? {} : { styleFrame: (f: string) => f }),
  });
  let running = false;
  let current = "";
  const update = (text: string) => {
    current = text;
    if (!running) {
      sp.start(text);
      running = true;
    } else sp.message(text);
  };
  return {
    update,
    step: update,
    note(text) {
      if (running) sp.clear();
      stream.write(`${text}\n`);
      if (running) sp.start(current);
    },
    stop(text) {
      if (running) sp.clear();
      running = false;
      if (text) stream.write(`${text}\n`);
    },
  };
}
