/**
 * A scripted agent for scheduler tests: speaks the real agent protocol
 * through the real ControlClient, but instead of booting VMs it reports the
 * observed states a test tells it to. It exists so scheduler rules can be
 * tested in milliseconds; the real agent with a real QEMU VM is covered by
 * test/e2e.
 */
import type {
  AgentCommand,
  AgentPayload,
  BootstrapDelivery,
  PlacementUpdate,
  PollResponse,
} from "../../src/protocol/agent.ts";
import { ControlClient } from "../../src/agent/controlClient.ts";

/** See the module header. */
export class ScriptedAgent {
  readonly client: ControlClient;
  epoch = "";
  private seq = 0;
  readonly bootId = crypto.randomUUID();
  readonly commands: AgentCommand[] = [];
  readonly deliveries: BootstrapDelivery[] = [];

  constructor(
    url: string,
    readonly hostId: string,
    credential: string,
  ) {
    this.client = new ControlClient(url, hostId, credential);
  }

  /** One poll (short park); records commands and deliveries. */
  async poll(waitMs = 0, extra: Partial<AgentPayload> = {}): Promise<PollResponse> {
    const r = await this.client.send("poll", this.epoch, {
      bootId: this.bootId,
      updates: [],
      acks: [],
      deliveryAcks: [],
      waitMs,
      ...extra,
    });
    this.epoch = r.agentEpoch;
    this.commands.push(...r.commands);
    this.deliveries.push(...r.deliveries);
    return r;
  }

  /** Reports an observed state for the placement of `cmd`. */
  async report(
    cmd: Pick<AgentCommand, "placementId" | "allocationId" | "generation">,
    state: PlacementUpdate["state"],
    extra: Partial<PlacementUpdate> = {},
  ): Promise<PollResponse> {
    const u: PlacementUpdate = {
      seq: ++this.seq,
      placementId: cmd.placementId,
      allocationId: cmd.allocationId,
      generation: cmd.generation,
      state,
      at: new Date().toISOString(),
      ...extra,
    };
    return this.client.send("messages", this.epoch, { bootId: this.bootId, updates: [u], acks: [], deliveryAcks: [] });
  }

  /** Sends a raw messages envelope. */
  send(payload: Partial<AgentPayload>, epoch = this.epoch): Promise<PollResponse> {
    return this.client.send("messages", epoch, {
      bootId: this.bootId,
      updates: [],
      acks: [],
      deliveryAcks: [],
      ...payload,
    });
  }

  /** Polls until a command of `type` for `allocationId` arrives (bounded). */
  async waitCommand(type: AgentCommand["type"], allocationId: string, attempts = 40): Promise<AgentCommand> {
    for (let i = 0; i < attempts; i++) {
      const found = this.commands.find((c) => c.type === type && c.allocationId === allocationId);
      if (found) return found;
      await this.poll(250);
    }
    throw new Error(`no ${type} for ${allocationId}`);
  }
}
