import { expect, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { CommandSpec } from "../../protocol/agent.ts";
import { commandSpecOf } from "./hostTypes.ts";

const spec = { cpuMillis: 1000, memoryMiB: 256, ephemeralDiskMiB: 1024, imageDigest: `sha256:${"a".repeat(64)}` };

test("a placement's command spec carries the allocation's private address when it has one", () => {
  expect(commandSpecOf(spec, "fd00:bb:1:2::2")).toEqual({ ...spec, ipv6Address: "fd00:bb:1:2::2" });
  expect(commandSpecOf(spec, null)).toEqual(spec);
  expect(Value.Check(CommandSpec, commandSpecOf(spec, "fd00:bb:1:2::2"))).toBe(true);
  expect(Value.Check(CommandSpec, commandSpecOf(spec, null))).toBe(true);
});

test("the command spec schema bounds the address and admits nothing else", () => {
  expect(Value.Check(CommandSpec, { ...spec, ipv6Address: "fd00::2/128" })).toBe(false);
  expect(Value.Check(CommandSpec, { ...spec, ipv6Address: `fd00:${"0:".repeat(20)}2` })).toBe(false);
  expect(Value.Check(CommandSpec, { ...spec, extra: 1 })).toBe(false);
});
