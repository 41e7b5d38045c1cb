import { describe, expect, test } from "bun:test";
import { FakeClock } from "../protocol/fakeClock.ts";
import { createLogger, formatLine, redactFields, redactText, routeConsola, type LogFields } from "./log.ts";
import { parseLogFormat, parseLogLevel } from "./logOptions.ts";

const T0 = Date.parse("2026-01-02T03:04:05.000Z");

function capture(format: "json" | "text", level = 3) {
  const lines: string[] = [];
  return {
    lines,
    log: createLogger({ format, level, sink: (l) => void lines.push(l), clock: new FakeClock({ wallMs: T0 }) }),
  };
}

describe("the role log", () => {
  test("JSON lines carry time, level, msg and the fields; child loggers add theirs", () => {
    const { lines, log } = capture("json");
    log.child({ role: "scheduler" }).info("allocation state", { allocationId: "alloc_1", to: "ready", generation: 2 });
    expect(JSON.parse(lines[0]!)).toEqual({
      time: "2026-01-02T03:04:05.000Z",
      level: "info",
      msg: "allocation state",
      role: "scheduler",
      allocationId: "alloc_1",
      to: "ready",
      generation: 2,
    });
  });

  test("text lines are one line like the CLI's messages, with key=value pairs quoted when needed", () => {
    expect(formatLine("text", "warn", "http request", { path: "/v1/x", note: "two words" }, T0)).toBe(
      'warning: http request path=/v1/x note="two words"',
    );
    expect(formatLine("text", "info", "scheduler listening on http://127.0.0.1:7380", {}, T0)).toBe(
      "scheduler listening on http://127.0.0.1:7380",
    );
  });

  test("levels filter (BB_LOG_LEVEL numbers), and bad values are usage errors", () => {
    const { lines, log } = capture("json", 1);
    log.info("hidden");
    log.debug("hidden");
    log.warn("shown");
    expect(lines.map((l) => JSON.parse(l).msg)).toEqual(["shown"]);
    expect(parseLogLevel(undefined)).toBe(3);
    expect(parseLogLevel("4")).toBe(4);
    expect(() => parseLogLevel("loud")).toThrow("BB_LOG_LEVEL");
    expect(parseLogFormat(undefined, true)).toBe("text");
    expect(parseLogFormat(undefined, false)).toBe("json");
    expect(() => parseLogFormat("yaml", true)).toThrow("--log-format must be json or text");
  });

  test("secret-named fields and secret-shaped text never reach a line", () => {
    const secrets = {
      bearer: "Bearer sk-live-0123456789",
      host: `bbh_host-1.${"ab".repeat(32)}`,
      enroll: `bbe_${"cd".repeat(24)}`,
      pem: "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkq\n-----END PRIVATE KEY-----",
    };
    const fields: LogFields = {
      token: "t0k3n",
      payloadBase64: "ZWNobyBoaQ==",
      authorization: "x",
      privateKey: "k",
      note: `joined with ${secrets.host} and ${secrets.enroll}`,
    };
    const { lines, log } = capture("json");
    log.error(`failed: ${secrets.bearer} ${secrets.pem}`, fields);
    const text = lines.join("\n");
    for (const s of [...Object.values(secrets), "t0k3n", "ZWNobyBoaQ==", "sk-live", "MIIEvQIBADANBgkq", "abababab"])
      expect(text).not.toContain(s);
    expect(redactFields(fields)).toMatchObject({
      token: "[redacted]",
      payloadBase64: "[redacted]",
      note: "joined with bbh_host-1.[redacted] and bbe_[redacted]",
    });
    expect(redactText("x".repeat(5000)).length).toBeLessThanOrEqual(2001);
  });

  test("consola's lines go through the same logger", () => {
    const { lines, log } = capture("json");
    let reporters: { log: (o: { type: string; level: number; args: unknown[] }) => void }[] = [];
    const fake = { level: 0, setReporters: (r: typeof reporters) => void (reporters = r) };
    routeConsola(fake, log, 3);
    reporters[0]!.log({
      type: "error",
      level: 0,
      args: ["could not enroll with", `bbe_${"00".repeat(24)}`, new Error("boom")],
    });
    expect(JSON.parse(lines[0]!)).toMatchObject({ level: "error", msg: "could not enroll with bbe_[redacted] boom" });
    expect(fake.level).toBe(3);
  });
});
