/**
 * A minimal agent for in-process scheduler tests: it speaks the real agent
 * envelope (src/protocol/agent.ts) straight to a SchedulerWorker under a
 * fake clock, with no VM, and keeps the commands it was handed. Used by
 * the fencing, capacity and connection-grant tests (one copy).
 */
import type {
  AgentCommand,
  CommandAck,
  ConfigureConnection,
  Envelope,
  PlacementUpdate,
  PollResponse,
} from "../../src/protocol/agent.ts";
import type { SchedulerWorker } from "../../src/scheduler/worker.ts";
import type { FakeClock } from "../../src/protocol/fakeClock.ts";

/** How an InProcessAgent presents itself. */
export interface InProcessAgentOptions {
  /** The boot ID in every envelope (default "boot-1"). */
  bootId?: string;
  /** Added to the clock for `sentAt`, ms (a skewed host clock; default 0). */
  skewMs?: number;
  /** The health report's inventory (left out by default). */
  inventory?: NonNullable<Envelope["payload"]["health"]>["inventory"];
}

/** See the module comment. */
export class InProcessAgent {
  epoch = "";
  /** Envelopes sent (their message IDs). */
  seq = 0;
  /** Placement updates sent (their sequence numbers). */
  updateSeq = 0;
  cmds: AgentCommand[] = [];
  conns: ConfigureConnection[] = [];
  constructor(
    readonly w: SchedulerWorker,
    readonly hostId: string,
    readonly clock: FakeClock,
    public o: InProcessAgentOptions = {},
  ) {}
  /** An envelope of `type` under `epoch` (the current one by default), with `extra` over an empty payload. */
  env(type: Envelope["type"], extra: Partial<Envelope["payload"]> = {}, epoch = this.epoch): Envelope {
    const health = {
      isolationHealthy: true,
      quarantineCount: 0,
      vmmDriver: "t",
      ...(this.o.inventory ? { inventory: this.o.inventory } : {}),
    };
    return {
      protocolVersion: "1.0",
      messageId: `m${this.hostId}${++this.seq}`,
      hostId: this.hostId,
      agentEpoch: epoch,
      sentAt: new Date(this.clock.wallMs() + (this.o.skewMs ?? 0)).toISOString(),
      type,
      payload: {
        bootId: this.o.bootId ?? "boot-1",
        updates: [],
        acks: [],
        deliveryAcks: [],
        health,
        waitMs: 0,
        ...extra,
      },
    };
  }
  /** Polls once: takes the epoch, the commands and the connections handed out, then lets the runtime settle. */
  async poll(extra: Partial<Envelope["payload"]> = {}): Promise<PollResponse> {
    const r = await this.w.agentEnvelope(this.hostId, this.env("poll", extra));
    this.epoch = r.agentEpoch;
    this.cmds.push(...r.commands);
    this.conns.push(...(r.connections ?? []));
    await this.w.runtime.idle();
    return r;
  }
  /** Sends a messages envelope carrying `extra`, then lets the runtime settle. */
  async send(extra: Partial<Envelope["payload"]>): Promise<void> {
    await this.w.agentEnvelope(this.hostId, this.env("messages", extra));
    await this.w.runtime.idle();
  }
  /** Reports placement `c` observed in `state`. */
  async report(
    c: Pick<AgentCommand, "placementId" | "allocationId" | "generation">,
    state: PlacementUpdate["state"],
  ): Promise<void> {
    await this.send({
      updates: [
        {
          seq: ++this.updateSeq,
          placementId: c.placementId,
          allocationId: c.allocationId,
          generation: c.generation,
          state,
          at: new Date(this.clock.wallMs()).toISOString(),
        },
      ],
    });
  }
  /** Acknowledges `commandIds` as accepted. */
  async ack(commandIds: string[]): Promise<void> {
    await this.send({ acks: commandIds.map((commandId): CommandAck => ({ commandId, result: "accepted" })) });
  }
  /** The command of `type` handed out for the allocation's `generation`, if any. */
  cmd(type: AgentCommand["type"], allocationId: string, generation = 1): AgentCommand | undefined {
    return this.cmds.find((c) => c.type === type && c.allocationId === allocationId && c.generation === generation);
  }
  /** Drives one placement to running (prepared, then running, polling between). */
  async run(allocationId: string, generation = 1): Promise<AgentCommand> {
    await this.poll();
    const p = this.cmd("ensure_present", allocationId, generation)!;
    await this.report(p, "prepared");
    await this.poll();
    await this.report(p, "running");
    await this.poll();
    return p;
  }
}
