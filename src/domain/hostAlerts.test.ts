import { describe, expect, test } from "bun:test";
import { alertsAfterReport, fencingAlert } from "./hostAlerts.ts";
import { NO_FACTS } from "./hostSession.ts";

describe("when a host raises an alert", () => {
  test("an overlapping session raises one, with an ID from host and time", () => {
    expect(alertsAfterReport("h1", NO_FACTS, NO_FACTS, true, 7)).toEqual([
      {
        kind: "alert",
        alertId: "alert:overlap:h1:7",
        type: "host.overlapping_agent_session",
        subject: "h1",
        reason: "OVERLAPPING_AGENT_SESSION",
        atMs: 7,
      },
    ]);
  });

  test("a VMM that starts failing raises one per episode, not per heartbeat", () => {
    const failing = { ...NO_FACTS, vmmStartFailing: true };
    expect(alertsAfterReport("h1", NO_FACTS, failing, false, 7).map((a) => a.alertId)).toEqual(["alert:vmm:h1:7"]);
    expect(alertsAfterReport("h1", failing, failing, false, 8)).toEqual([]);
    expect(alertsAfterReport("h1", failing, NO_FACTS, false, 9)).toEqual([]);
  });

  test("both at once: the overlap first", () => {
    const failing = { ...NO_FACTS, vmmStartFailing: true };
    expect(alertsAfterReport("h1", NO_FACTS, failing, true, 7).map((a) => a.type)).toEqual([
      "host.overlapping_agent_session",
      "host.vmm_start_failing",
    ]);
  });

  test("no change, no alert", () => {
    expect(alertsAfterReport("h1", NO_FACTS, NO_FACTS, false, 7)).toEqual([]);
  });

  test("fencing raises host.disabled", () => {
    expect(fencingAlert("h1", 9)).toEqual({
      kind: "alert",
      alertId: "alert:host_disabled:h1:9",
      type: "host.disabled",
      subject: "h1",
      reason: "HOST_FENCED",
      atMs: 9,
    });
  });
});
