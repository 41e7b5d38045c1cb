/** VmmHealth: three failed starts raise VMM_START_FAILING; only a passing self-check or a launch clears it; re-checks wait for the interval. */
import { expect, test } from "bun:test";
import { FakeTimeline, MemoryLog } from "./fakePorts.ts";
import { VMM_START_FAILURES_UNHEALTHY, VmmHealth, type VmmSelfCheck } from "./vmmHealth.ts";

function rig(result: () => VmmSelfCheck) {
  const tl = new FakeTimeline(1_000_000);
  let checks = 0;
  const h = new VmmHealth({
    clock: tl.clock,
    log: new MemoryLog(),
    intervalMs: 10_000,
    selfCheck: async () => (checks++, result()),
  });
  return { tl, h, checks: () => checks };
}

test("repeated start failures raise the condition; a success in between resets the count", () => {
  const { h } = rig(() => ({ status: "pass", detail: "" }));
  for (let i = 0; i < VMM_START_FAILURES_UNHEALTHY - 1; i++) h.noteStart(false);
  h.noteStart(true);
  for (let i = 0; i < VMM_START_FAILURES_UNHEALTHY - 1; i++) h.noteStart(false);
  expect(h.failing).toBe(false);
  h.noteStart(false);
  expect(h.failing).toBe(true);
});

test("while failing, the self-check runs once per interval and a pass clears it", async () => {
  let status: VmmSelfCheck["status"] = "fail";
  const { tl, h, checks } = rig(() => ({ status, detail: "x" }));
  h.noteSelfCheck({ status: "fail", detail: "boot failed" });
  expect(h.failing).toBe(true);
  await h.recheckIfDue();
  expect(checks()).toBe(0); // too soon
  await tl.advance(10_000);
  await h.recheckIfDue();
  expect(checks()).toBe(1);
  expect(h.failing).toBe(true);
  status = "skip"; // a skipped check proves nothing
  await tl.advance(10_000);
  await h.recheckIfDue();
  expect(h.failing).toBe(true);
  status = "pass";
  await tl.advance(10_000);
  await h.recheckIfDue();
  expect(h.failing).toBe(false);
  await tl.advance(10_000);
  await h.recheckIfDue();
  expect(checks()).toBe(3); // healthy: no more test boots
});
