/**
 * A scripted agent that runs jobs by itself (a test double of the host
 * agent for run tests: it speaks the real agent protocol through
 * ScriptedAgent; test/e2e/runs.test.ts runs the same jobs in real VMs).
 * Each placement is reported prepared and running when asked; a delivered
 * payload is acknowledged consumed with its SHA-256; then, `jobMs` later,
 * the job's exit is reported with the code of the script's last
 * `exit N` line (0 without one). A script holding the line `sleep forever`
 * never exits. Absent is reported when the scheduler asks.
 */
import { createHash } from "node:crypto";
import type { AgentCommand, BootstrapDelivery } from "../../src/protocol/agent.ts";
import { ScriptedAgent } from "./scriptedAgent.ts";

/** See the module header. */
export class RunAutopilot {
  private stopped = false;
  private loop: Promise<void> | null = null;
  private readonly seen = new Set<string>();
  private readonly placements = new Map<string, AgentCommand>();
  /** Payloads consumed, by deliveryId: how many times each was handed over (a run must never get two). */
  readonly consumed = new Map<string, number>();
  /** Placements ever started, by allocation ID. */
  readonly started = new Set<string>();
  /** Placements reported absent. */
  readonly absent = new Set<string>();

  constructor(
    readonly agent: ScriptedAgent,
    private readonly jobMs = 200,
  ) {}

  /** Starts the loop (polls with a short park). */
  start(): void {
    this.loop = (async () => {
      while (!this.stopped) {
        try {
          const r = await this.agent.poll(100);
          for (const c of r.commands) await this.command(c);
          for (const d of r.deliveries) await this.delivery(d);
        } catch {
          await Bun.sleep(50);
        }
      }
    })();
  }

  /** Ends the loop. */
  async stop(): Promise<void> {
    this.stopped = true;
    await this.loop;
  }

  private async command(c: AgentCommand): Promise<void> {
    if (this.seen.has(c.commandId)) return;
    this.seen.add(c.commandId);
    if (c.type === "ensure_present") {
      this.placements.set(c.placementId, c);
      this.started.add(c.allocationId);
      await this.agent.report(c, "prepared");
    } else if (c.type === "ensure_running") await this.agent.report(c, "running");
    else if (c.type === "ensure_absent") {
      this.absent.add(c.allocationId);
      await this.agent.report(c, "absent");
    }
  }

  private async delivery(d: BootstrapDelivery): Promise<void> {
    const bytes = Buffer.from(d.payloadBase64, "base64");
    const digest = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
    this.consumed.set(d.deliveryId, (this.consumed.get(d.deliveryId) ?? 0) + 1);
    await this.agent.send({
      deliveryAcks: [
        { deliveryId: d.deliveryId, placementId: d.placementId, generation: d.generation, result: "consumed", digest },
      ],
    });
    const script = bytes.toString("utf8");
    if (/^sleep forever$/m.test(script)) return;
    const code = Number([...script.matchAll(/^exit (\d+)$/gm)].pop()?.[1] ?? 0);
    const p = this.placements.get(d.placementId);
    if (!p) return;
    setTimeout(() => {
      if (!this.stopped) void this.agent.report(p, "running", { workloadExitCode: code }).catch(() => undefined);
    }, this.jobMs);
  }
}
