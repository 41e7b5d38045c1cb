/**
 * The agent's outbound control client (spec "Transport"): builds envelopes
 * and posts them to /v1/agents/poll and /v1/agents/messages. The agent
 * initiates every connection.
 * Must never: send the credential anywhere but the configured scheduler URL.
 */
import { AGENT_PROTOCOL_VERSION } from "../protocol/platform.ts";
import { errorFromAnswer } from "../protocol/problem.ts";
import { MAX_ENVELOPE_BYTES, type AgentPayload, type Envelope, type PollResponse } from "../protocol/agent.ts";
import { MAX_LOG_PUSH_BODY_BYTES, type LogChunk, type LogPushBody, type LogPushResponse } from "../protocol/logs.ts";
import type { ControlChannel, LogSink } from "./ports.ts";

/** How long one log push may take, ms. */
const LOG_PUSH_TIMEOUT_MS = 15_000;

/** Extra time beyond the park a poll request may take, ms. */
const POLL_SLACK_MS = 10_000;

/** A scheduler client bound to one host credential: the real ControlChannel port. */
export class ControlClient implements ControlChannel, LogSink {
  constructor(
    private readonly baseUrl: string,
    private readonly hostId: string,
    private readonly credential: string,
  ) {}

  /**
   * Posts one envelope. Throws BeachballError for a problem answer (e.g.
   * STALE_AGENT_EPOCH), UnexpectedAnswerError for an error answer without
   * one, and a plain Error for transport failures.
   */
  async send(
    type: Envelope["type"],
    agentEpoch: string,
    payload: AgentPayload,
    signal?: AbortSignal,
  ): Promise<PollResponse> {
    const env: Envelope = {
      protocolVersion: AGENT_PROTOCOL_VERSION,
      messageId: crypto.randomUUID(),
      hostId: this.hostId,
      agentEpoch,
      sentAt: new Date().toISOString(),
      type,
      payload,
    };
    const body = JSON.stringify(env);
    if (body.length > MAX_ENVELOPE_BYTES)
      throw new Error(`envelope is ${body.length} bytes (limit ${MAX_ENVELOPE_BYTES})`);
    const timeoutMs = (payload.waitMs ?? 0) + POLL_SLACK_MS;
    const res = await fetch(`${this.baseUrl}/v1/agents/${type === "poll" ? "poll" : "messages"}`, {
      method: "POST",
      headers: { authorization: `Bearer ${this.credential}`, "content-type": "application/json" },
      body,
      signal: signal ? AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)]) : AbortSignal.timeout(timeoutMs),
    });
    const text = await res.text();
    if (!res.ok) throw errorFromAnswer(res.status, text);
    return JSON.parse(text) as PollResponse;
  }

  /**
   * Posts chunks of redacted workload output to /v1/agents/logs (the LogSink
   * port). Throws like `send`, and a plain Error for a body over
   * MAX_LOG_PUSH_BODY_BYTES (never sent).
   */
  async push(chunks: LogChunk[], signal?: AbortSignal): Promise<LogPushResponse> {
    const body = JSON.stringify({ hostId: this.hostId, chunks } satisfies LogPushBody);
    if (Buffer.byteLength(body) > MAX_LOG_PUSH_BODY_BYTES)
      throw new Error(`log push is ${Buffer.byteLength(body)} bytes (limit ${MAX_LOG_PUSH_BODY_BYTES})`);
    const timeout = AbortSignal.timeout(LOG_PUSH_TIMEOUT_MS);
    const res = await fetch(`${this.baseUrl}/v1/agents/logs`, {
      method: "POST",
      headers: { authorization: `Bearer ${this.credential}`, "content-type": "application/json" },
      body,
      signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
    });
    const text = await res.text();
    if (!res.ok) throw errorFromAnswer(res.status, text);
    return JSON.parse(text) as LogPushResponse;
  }
}
