/**
 * A client of the QEMU Machine Protocol (QMP; QEMU's docs/interop/qmp-spec):
 * one connection to a VMM's QMP Unix socket, the greeting read, capabilities
 * negotiated, then commands sent one at a time, each answered by a `return`
 * or an `error` carrying the same `id`; asynchronous `event` lines are
 * skipped. The QEMU driver pauses and resumes its VMs through it (issue 21).
 *
 * Bounds: a line from QEMU is at most MAX_QMP_LINE_BYTES, a command waits at
 * most its timeout. Every failure is an AgentError VMM_CONTROL_FAILED
 * (subsystem `vmm`) naming the command. Must never: send a command built
 * from client text (the agent names every command and argument).
 */
import { connect, type Socket } from "node:net";
import { AgentError } from "../errors.ts";

/** The longest line QMP may send before the client gives up, bytes (a query-status answer is ~60). */
export const MAX_QMP_LINE_BYTES = 1024 * 1024;

/** Default wait for the greeting and for each command's answer, ms. */
export const QMP_TIMEOUT_MS = 10_000;

/** The QMP socket's file name in a placement's allocation directory. */
export const QMP_SOCKET_FILE = "qmp.sock";

/** The error of a failed QMP exchange: VMM_CONTROL_FAILED, subsystem `vmm`. */
export function qmpError(message: string, cause?: unknown): AgentError {
  return new AgentError("VMM_CONTROL_FAILED", `QMP: ${message}`, { subsystem: "vmm", cause });
}

/** One QMP answer or event line, as far as the client reads it. */
interface QmpLine {
  QMP?: unknown;
  return?: unknown;
  error?: { class?: string; desc?: string };
  event?: string;
  id?: number;
}

/**
 * An open QMP session (QmpSession.open); close it when done. Not for
 * concurrent commands; and QEMU serves one QMP client at a time, so callers
 * keep one session per VM at a time (the QEMU driver serialises them).
 */
export class QmpSession {
  private buffer = "";
  private readonly waiting: ((line: QmpLine | Error) => void)[] = [];
  private readonly queued: (QmpLine | Error)[] = [];
  private nextId = 1;
  private closed = false;

  private constructor(private readonly socket: Socket) {
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => this.push(chunk));
    socket.on("error", (e) => this.fail(qmpError(`socket error: ${e.message}`, e)));
    socket.on("close", () => this.fail(qmpError("QEMU closed the QMP connection")));
  }

  /**
   * Connects to the QMP socket at `path`, reads the greeting and negotiates
   * capabilities (`qmp_capabilities`). Throws VMM_CONTROL_FAILED when the
   * socket is absent, QEMU does not greet within `timeoutMs`, or refuses.
   */
  static async open(path: string, timeoutMs = QMP_TIMEOUT_MS): Promise<QmpSession> {
    const socket = await new Promise<Socket>((resolve, reject) => {
      const s = connect(path);
      const timer = setTimeout(() => {
        s.destroy();
        reject(qmpError(`no connection to ${path} within ${timeoutMs} ms`));
      }, timeoutMs);
      const refused = (e: Error) => {
        clearTimeout(timer);
        reject(qmpError(`cannot connect to ${path}: ${e.message}`, e));
      };
      s.once("error", refused);
      s.once("connect", () => {
        clearTimeout(timer);
        s.off("error", refused); // the session's own handler takes over
        resolve(s);
      });
    });
    const session = new QmpSession(socket);
    try {
      const greeting = await session.next(timeoutMs);
      if (greeting.QMP === undefined) throw qmpError(`${path} did not greet as QMP`);
      await session.execute("qmp_capabilities", undefined, timeoutMs);
    } catch (e) {
      session.close();
      throw e;
    }
    return session;
  }

  /**
   * Runs `command` with `args` and returns its `return` value. Throws
   * VMM_CONTROL_FAILED with QEMU's error class and description when it
   * answers with an error, or when no answer comes within `timeoutMs`.
   */
  async execute(command: string, args?: Record<string, unknown>, timeoutMs = QMP_TIMEOUT_MS): Promise<unknown> {
    if (this.closed) throw qmpError(`${command}: the session is closed`);
    const id = this.nextId++;
    this.socket.write(
      `${JSON.stringify(args ? { execute: command, arguments: args, id } : { execute: command, id })}\n`,
    );
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const line = await this.next(Math.max(1, deadline - Date.now()), command);
      if (line.event !== undefined || line.id !== id) continue;
      if (line.error)
        throw qmpError(`${command}: ${line.error.class ?? "Error"}: ${line.error.desc ?? "no description"}`);
      return line.return;
    }
  }

  /** Closes the connection (idempotent). */
  close(): void {
    this.closed = true;
    this.socket.destroy();
  }

  private push(chunk: string): void {
    if (this.closed) return;
    this.buffer += chunk;
    for (let nl = this.buffer.indexOf("\n"); nl >= 0; nl = this.buffer.indexOf("\n")) {
      const text = this.buffer.slice(0, nl).trim();
      this.buffer = this.buffer.slice(nl + 1);
      if (!text) continue;
      let line: QmpLine | Error;
      try {
        const parsed = JSON.parse(text) as unknown;
        line =
          parsed && typeof parsed === "object" && !Array.isArray(parsed)
            ? (parsed as QmpLine)
            : qmpError("a line that is not a JSON object");
      } catch {
        line = qmpError(`a line that is not JSON: ${text.slice(0, 80)}`);
      }
      this.deliver(line);
    }
    if (this.buffer.length > MAX_QMP_LINE_BYTES) {
      this.fail(qmpError(`a line over ${MAX_QMP_LINE_BYTES} bytes`));
      this.socket.destroy();
    }
  }

  private deliver(line: QmpLine | Error): void {
    const w = this.waiting.shift();
    if (w) w(line);
    else this.queued.push(line);
  }

  private fail(e: Error): void {
    if (this.closed && this.waiting.length === 0) return;
    this.closed = true;
    while (this.waiting.length) this.waiting.shift()!(e);
    this.queued.push(e);
  }

  /** The next line (an Error from the socket is thrown), waiting at most `timeoutMs`. */
  private next(timeoutMs: number, command = "greeting"): Promise<QmpLine> {
    const ready = this.queued.shift();
    if (ready) return ready instanceof Error ? Promise.reject(ready) : Promise.resolve(ready);
    return new Promise<QmpLine>((resolve, reject) => {
      const take = (line: QmpLine | Error) => {
        clearTimeout(timer);
        if (line instanceof Error) reject(line);
        else resolve(line);
      };
      const timer = setTimeout(() => {
        const i = this.waiting.indexOf(take);
        if (i >= 0) this.waiting.splice(i, 1);
        reject(qmpError(`${command}: no answer within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiting.push(take);
    });
  }
}

/**
 * Runs one command in a session of its own (open, execute, close) and
 * returns its `return` value; errors as QmpSession.open and execute.
 */
export async function qmpExecute(
  path: string,
  command: string,
  args?: Record<string, unknown>,
  timeoutMs = QMP_TIMEOUT_MS,
): Promise<unknown> {
  const s = await QmpSession.open(path, timeoutMs);
  try {
    return await s.execute(command, args, timeoutMs);
  } finally {
    s.close();
  }
}
