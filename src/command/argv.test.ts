/**
 * The strict command-line parser and checked values: every accepted form,
 * and every refusal a usage error (exit 2) naming the flag or argument.
 */
import { describe, expect, test } from "bun:test";
import type { ArgDef } from "citty";
import { closest, flagValues, parseArgv } from "./argv.ts";
import { placeholder } from "./define.ts";
import { UsageError } from "./run.ts";
import { integerFlag, httpUrlValue } from "./values.ts";

const ARGS: Record<string, ArgDef> = {
  id: { type: "positional", required: true, description: "ID" },
  ttl: { type: "string", description: "seconds" },
  timeout: { type: "string", default: "300" },
  wait: { type: "boolean", default: false },
  quiet: { type: "boolean", alias: "q", default: false },
  kind: { type: "enum", options: ["a", "b"] },
  "data-dir": { type: "string", required: true },
};

function usage(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(UsageError);
    expect((e as UsageError).exitCode).toBe(2);
    return (e as Error).message;
  }
  throw new Error("expected a UsageError");
}

describe("parseArgv", () => {
  test("accepts every documented form and applies defaults", () => {
    const a = parseArgv(["x1", "--ttl", "60", "--wait", "-q", "--kind=b", "--data-dir=/d"], ARGS);
    expect(a).toMatchObject({
      id: "x1",
      ttl: "60",
      wait: true,
      quiet: true,
      kind: "b",
      "data-dir": "/d",
      timeout: "300",
      _: [],
    });
    expect(parseArgv(["x", "--data-dir", "d", "--wait=false", "--no-quiet"], ARGS)).toMatchObject({
      wait: false,
      quiet: false,
    });
    expect(parseArgv(["--data-dir", "d", "--", "--not-a-flag"], ARGS)).toMatchObject({ id: "--not-a-flag" });
    expect(parseArgv(["x", "--data-dir", "d", "--ttl", "-"], ARGS)).toMatchObject({ ttl: "-" });
  });

  test("refuses an unknown flag, naming it and the closest known one", () => {
    expect(usage(() => parseArgv(["x", "--data-dir", "d", "--tttl", "5"], ARGS))).toBe(
      "unknown flag --tttl (did you mean --ttl?)",
    );
    expect(usage(() => parseArgv(["x", "--data-dir", "d", "--bogus"], ARGS))).toBe("unknown flag --bogus");
    expect(usage(() => parseArgv(["x", "--data-dir", "d", "-z"], ARGS))).toBe("unknown flag -z");
    expect(usage(() => parseArgv(["x", "--data-dir", "d", "--no-ttl"], ARGS))).toContain("unknown flag --no-ttl");
  });

  test("refuses a missing value, a value for a switch, a bad enum, missing and extra arguments", () => {
    expect(usage(() => parseArgv(["x", "--data-dir", "d", "--ttl"], ARGS))).toBe("--ttl needs a value");
    expect(usage(() => parseArgv(["x", "--data-dir", "d", "--ttl", "--wait"], ARGS))).toBe("--ttl needs a value");
    expect(usage(() => parseArgv(["x", "--data-dir", "d", "--wait=yes"], ARGS))).toContain("--wait is a switch");
    expect(usage(() => parseArgv(["x", "--data-dir", "d", "--kind", "c"], ARGS))).toBe(
      '--kind must be one of a, b (got "c")',
    );
    expect(usage(() => parseArgv(["--data-dir", "d"], ARGS))).toBe("missing argument ID");
    expect(usage(() => parseArgv(["x"], ARGS))).toBe("missing required flag --data-dir");
    expect(usage(() => parseArgv(["x", "y", "--data-dir", "d"], ARGS))).toBe('unexpected argument "y"');
    expect(parseArgv(["x", "y", "z", "--data-dir", "d"], ARGS, true)._).toEqual(["y", "z"]);
  });

  test("closest: within two edits, or a prefix of at least three letters", () => {
    expect(closest("--lisen", ["--listen", "--data-dir"])).toBe("--listen");
    expect(closest("--dat", ["--listen", "--data-dir"])).toBe("--data-dir");
    expect(closest("--zzzzzz", ["--listen"])).toBeNull();
  });
});

describe("flagValues", () => {
  const EXEC: Record<string, ArgDef> = {
    allocation: { type: "positional", required: true },
    env: { type: "string", alias: "e" },
    user: { type: "string" },
    tty: { type: "boolean", alias: "t" },
  };
  test("every value of a repeated flag in order, in each form; words after -- and other flags' values never count", () => {
    const argv = ["a1", "-e", "A=1", "--env", "B=2", "--env=C=3=x", "--user", "-e", "-t", "--", "grep", "-e", "D=4"];
    expect(flagValues(argv, EXEC, "env", true)).toEqual(["A=1", "B=2", "C=3=x"]);
    expect(parseArgv(argv, EXEC, true)).toMatchObject({
      env: "C=3=x",
      user: "-e",
      tty: true,
      _: ["grep", "-e", "D=4"],
    });
    expect(flagValues(["a1"], EXEC, "env", true)).toEqual([]);
  });
  test("the same words fail the same way as parseArgv", () => {
    expect(usage(() => flagValues(["a1", "--env"], EXEC, "env"))).toBe("--env needs a value");
    expect(usage(() => flagValues(["a1", "--envv", "x"], EXEC, "env"))).toContain("did you mean --env?");
  });
});

describe("placeholder", () => {
  test("arguments and values are named in upper snake case", () => {
    expect([
      placeholder("id"),
      placeholder("hostId"),
      placeholder("data-dir"),
      placeholder("client-request-id"),
    ]).toEqual(["ID", "HOST_ID", "DATA_DIR", "CLIENT_REQUEST_ID"]);
    expect(usage(() => parseArgv([], { hostId: { type: "positional", required: true } }))).toBe(
      "missing argument HOST_ID",
    );
  });
});

describe("checked values", () => {
  test("integerFlag takes plain decimal digits inside the bounds and names the flag otherwise", () => {
    const b = { min: 10, max: 604800, unit: "seconds" };
    expect(integerFlag("--ttl", "600", b)).toBe(600);
    for (const bad of ["abc", "1e3", "-5", "12.5", " 60", "0x10", ""])
      expect(usage(() => integerFlag("--ttl", bad, b))).toBe(
        `--ttl must be a whole number of seconds from 10 to 604800 (got ${JSON.stringify(bad)})`,
      );
    expect(usage(() => integerFlag("--ttl", "5", b))).toBe(
      "--ttl must be a whole number of seconds from 10 to 604800 (got 5)",
    );
    expect(usage(() => integerFlag("--ttl", "99999999999999999", b))).toContain("--ttl must be");
  });

  test("httpUrlValue takes http(s) URLs only and names where the value came from", () => {
    expect(httpUrlValue("http://127.0.0.1:7380/", "x")).toBe("http://127.0.0.1:7380");
    for (const bad of ["foo", "127.0.0.1:7380", "ftp://h/", "http://h/?q=1", "http://u:p@h/"])
      expect(usage(() => httpUrlValue(bad, `scheduler URL ${JSON.stringify(bad)} (from BB_SCHEDULER_URL)`))).toContain(
        "(from BB_SCHEDULER_URL) is not an http",
      );
  });
});
