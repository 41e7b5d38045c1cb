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
import { createHash } from "node:crypto";
import { ControlClient } from "../../src/agent/controlClient.ts";
import type { SchedulerClient } from "../../src/client/index.ts";

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

  /**
   * Has `controller` deliver `payload` (a shell script) to `allocationId`'s
   * generation 1 under `deliveryId`, polls until it arrives and acks it
   * `consumed` from `placementId` with its SHA-256, then waits for the
   * delivery call's answer.
   */
  async consumeDelivery(
    controller: SchedulerClient,
    allocationId: string,
    placementId: string,
    deliveryId: string,
    payload: string,
  ): Promise<void> {
    const digest = `sha256:${createHash("sha256").update(payload).digest("hex")}`;
    const delivery = controller.deliver(allocationId, {
      deliveryId,
      generation: 1,
      contentType: "text/x-shellscript",
      payloadBase64: Buffer.from(payload).toString("base64"),
    });
    for (let i = 0; i < 20 && this.deliveries.length === 0; i++) await this.poll(200);
    await this.send({ deliveryAcks: [{ deliveryId, placementId, generation: 1, result: "consumed", digest }] });
    await delivery;
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
