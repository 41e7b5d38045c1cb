/**
 * A child process that speaks JSON lines on stdin/stdout (wgHarness.ts,
 * udpEcho.ts), with waiting for an event by predicate. Ended by its PID only.
 * Must never: leave the process running after stop().
 */
import { openSync, closeSync } from "node:fs";

/** One line-speaking child. */
export class LineChild {
  readonly proc: ReturnType<typeof Bun.spawn<"pipe", "pipe", number>>;
  /** Every event received, in order. */
  readonly events: Record<string, unknown>[] = [];
  private waiters: (() => void)[] = [];

  /** Starts `cmd`; stderr goes to `logPath`. */
  constructor(cmd: string[], logPath: string, env: Record<string, string | undefined> = process.env) {
    const fd = openSync(logPath, "a");
    this.proc = Bun.spawn(cmd, { stdin: "pipe", stdout: "pipe", stderr: fd, env });
    closeSync(fd);
    void this.read();
  }

  private async read(): Promise<void> {
    const decoder = new TextDecoder();
    let buf = "";
    for await (const chunk of this.proc.stdout) {
      buf += decoder.decode(chunk, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        try {
          this.events.push(JSON.parse(line) as Record<string, unknown>);
        } catch {
          this.events.push({ ev: "unparsed", line });
        }
        this.waiters.splice(0).forEach((w) => w());
      }
    }
    this.waiters.splice(0).forEach((w) => w());
  }

  /** Writes one command line. */
  send(command: object): void {
    this.proc.stdin.write(JSON.stringify(command) + "\n");
    this.proc.stdin.flush();
  }

  /** The first event at index ≥ `from` matching `pred`, waiting up to `timeoutMs`; throws with `what` on timeout. */
  async waitFor(
    pred: (e: Record<string, unknown>) => boolean,
    timeoutMs: number,
    what: string,
    from = 0,
  ): Promise<Record<string, unknown>> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const hit = this.events.slice(from).find(pred);
      if (hit) return hit;
      if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
      if (this.proc.exitCode !== null)
        throw new Error(`child exited (${this.proc.exitCode}) while waiting for ${what}`);
      await new Promise<void>((r) => {
        this.waiters.push(r);
        setTimeout(r, Math.min(100, Math.max(1, deadline - Date.now())));
      });
    }
  }

  /** Asks for stats and returns the next stats event (harness only). */
  async stats(): Promise<Record<string, any>> {
    const from = this.events.length;
    this.send({ op: "stats" });
    return (await this.waitFor((e) => e.ev === "stats", 5_000, "stats", from)) as Record<string, any>;
  }

  /** Closes stdin, then SIGKILLs by PID after `graceMs`, and waits for the exit. */
  async stop(graceMs = 2_000): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    try {
      this.proc.stdin.end();
    } catch {}
    const t = setTimeout(() => this.proc.kill("SIGKILL"), graceMs);
    await this.proc.exited;
    clearTimeout(t);
  }
}
