import { describe, expect, test } from "bun:test";
import { Type } from "@sinclair/typebox";
import { TypeCompiler } from "@sinclair/typebox/compiler";
import { ConnectionMessagesBody } from "../protocol/connection.ts";
import { Envelope } from "../protocol/agent.ts";
import {
  declaredKeys,
  describeFirstSchemaError,
  MAX_ALLOWED_FIELDS_LISTED,
  MAX_SCHEMA_ERROR_CHARS,
  schemaValidationError,
} from "./schemaErrors.ts";

const describeFor = (schema: Parameters<typeof TypeCompiler.Compile>[0]) => {
  const c = TypeCompiler.Compile(schema);
  const known = declaredKeys(schema);
  return (v: unknown) => describeFirstSchemaError(c.Errors(v), known);
};

describe("describeFirstSchemaError", () => {
  const messages = describeFor(ConnectionMessagesBody);
  const envelope = describeFor(Envelope);
  const update = {
    seq: 1,
    placementId: "plc_1",
    allocationId: "alloc_1",
    generation: 1,
    state: "running",
    at: "2026-01-01T00:00:00.000Z",
  };
  const poll = {
    protocolVersion: "1.0",
    messageId: "m-1",
    hostId: "h",
    agentEpoch: "",
    sentAt: "2026-01-01T00:00:00.000Z",
    type: "poll",
    payload: { bootId: "b", updates: [update], acks: [], deliveryAcks: [] },
  };

  test("names the field path and the reason; an unknown field lists the fields allowed at its place", () => {
    expect(messages({ messages: [{ type: "ack", seq: 1, upTo: "x" }] })).toBe("/messages/0/upTo: Expected integer");
    expect(messages({ messages: [{ type: "ack", seq: 1, upTo: 0, extra: 1 }] })).toBe(
      "/messages/0/extra: unknown field; allowed fields here: type, seq, upTo",
    );
    expect(
      messages({
        messages: [
          { type: "candidates", seq: 1, candidates: [{ address: "192.0.2.1", port: 1, kind: "stun", zz: 1 }] },
        ],
      }),
    ).toBe("/messages/0/candidates/0/zz: unknown field; allowed fields here: address, port, kind");
    expect(messages({})).toBe("/messages: required field is missing");
    expect(envelope({ ...poll, payload: { ...poll.payload, bogus: 1 } })).toBe(
      "/payload/bogus: unknown field; allowed fields here: bootId, updates, acks, deliveryAcks, health, connectivity, waitMs",
    );
  });

  test("a union says which values or shapes it takes, following a discriminator into the chosen shape", () => {
    expect(messages({ messages: [{ type: "bogus", seq: 1 }] })).toBe(
      '/messages/0/type: must be one of "candidates", "path_observation", "ack"',
    );
    expect(envelope({ ...poll, type: "nope" })).toBe('/type: must be one of "poll", "messages"');
    expect(
      envelope({ ...poll, payload: { ...poll.payload, updates: [{ ...poll.payload.updates[0], state: "weird" }] } }),
    ).toMatch(/^\/payload\/updates\/0\/state: must be one of "/);
  });

  test("a key the caller chose is repeated only when it is a short plain identifier", () => {
    expect(messages({ messages: [{ type: "ack", seq: 1, upTo: 0, "<img src=x>": 1 }] })).toBe(
      "/messages/0/{key}: unknown field; allowed fields here: type, seq, upTo",
    );
    expect(messages({ messages: [{ type: "ack", seq: 1, upTo: 0, ["k".repeat(65)]: 1 }] })).toStartWith(
      "/messages/0/{key}: unknown field",
    );
  });

  test("the allowed list and the whole sentence are bounded", () => {
    const wide = Type.Object(
      Object.fromEntries(
        Array.from({ length: 100 }, (_, i) => [
          `field${i}`.padEnd(30, "x"),
          Type.Optional(Type.String({ maxLength: 1 })),
        ]),
      ),
      { additionalProperties: false },
    );
    const text = describeFor(wide)({ bogus: 1 });
    expect(text.length).toBeLessThanOrEqual(MAX_SCHEMA_ERROR_CHARS);
    expect(text.startsWith(`/bogus: unknown field; allowed fields here: field0`)).toBe(true);
    const fewer = Type.Object(
      Object.fromEntries(Array.from({ length: 30 }, (_, i) => [`f${i}`, Type.Optional(Type.String({ maxLength: 1 }))])),
      { additionalProperties: false },
    );
    expect(describeFor(fewer)({ bogus: 1 })).toEndWith(
      `f${MAX_ALLOWED_FIELDS_LISTED - 1} and ${30 - MAX_ALLOWED_FIELDS_LISTED} more`,
    );
  });

  test("the problem's extra carries the field and, for an unknown field, the allowed ones", () => {
    const c = TypeCompiler.Compile(ConnectionMessagesBody);
    const e = schemaValidationError(
      c.Errors({ messages: [{ type: "ack", seq: 1, upTo: 0, extra: 1 }] }),
      declaredKeys(ConnectionMessagesBody),
    );
    expect([e.code, e.status, e.extra]).toEqual([
      "VALIDATION_FAILED",
      400,
      { field: "/messages/0/extra", allowedFields: ["type", "seq", "upTo"] },
    ]);
    const t = schemaValidationError(
      c.Errors({ messages: [{ type: "nope", seq: 1 }] }),
      declaredKeys(ConnectionMessagesBody),
    );
    expect(t.extra).toEqual({ field: "/messages/0/type" });
  });
});
