/** Unit tests of the doctor's formatting, capability parsing and registry runner (with fake checks). */
import { expect, test } from "bun:test";
import { missingCapabilities, runChecks, type PrerequisiteCheck } from "./checks.ts";
import { allPassed, formatResults } from "./format.ts";

test("CapEff parsing", () => {
  expect(missingCapabilities("Name:\tx\nCapEff:\t000001fffeffffff\n")).toEqual([]);
  expect(missingCapabilities("CapEff:\t0000000000001000\n")).toEqual(["CAP_SYS_ADMIN"]); // bit 12 only
  expect(missingCapabilities("CapEff:\t0000000000000000\n")).toEqual(["CAP_NET_ADMIN", "CAP_SYS_ADMIN"]);
});

test("runner: order kept, a crashing check becomes a failure, fake fetch for liveness", async () => {
  const checks: PrerequisiteCheck[] = [
    { id: "a", title: "A", run: async () => ({ status: "pass", detail: "fine" }) },
    {
      id: "b",
      title: "B",
      run: async () => {
        throw new Error("boom");
      },
    },
    {
      id: "c",
      title: "C",
      run: async (cfg, deps) =>
        (await deps.fetch(`${cfg?.schedulerUrl}/healthz`, { signal: AbortSignal.timeout(10) })).ok
          ? { status: "pass", detail: "up" }
          : { status: "fail", detail: "down", fix: "start it" },
    },
  ];
  const r = await runChecks({ schedulerUrl: "http://s" }, { fetch: async () => ({ ok: false, status: 503 }) }, checks);
  expect(r.map((x) => `${x.id}:${x.status}`)).toEqual(["a:pass", "b:fail", "c:fail"]);
  expect(r[1]!.detail).toContain("boom");
  expect(allPassed(r)).toBe(false);
  expect(allPassed([r[0]!])).toBe(true);
});

test("formatting: one line per check, fix lines under failures, summary", () => {
  const text = formatResults([
    { id: "a", title: "A", status: "pass", detail: "fine" },
    { id: "b", title: "B", status: "fail", detail: "missing", fix: "install it" },
    { id: "c", title: "C", status: "skip", detail: "n/a" },
  ]);
  expect(text).toBe(
    "ok   A: fine\nFAIL B: missing\n     fix: install it\nskip C: n/a\n1 passed, 0 warnings, 1 failed, 1 skipped",
  );
  expect(formatResults([{ id: "a", title: "A", status: "pass", detail: "x" }], true)).toContain("\x1b[32m");
});
