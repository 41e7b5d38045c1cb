/** `bb exec --env` (execCommand.ts execEnv): the environment an exec starts with, and its refusals before anything is sent. */
import { describe, expect, test } from "bun:test";
import { MAX_EXEC_ENV, MAX_EXEC_ENV_VALUE_BYTES } from "../protocol/control.ts";
import { UsageError } from "../command/run.ts";
import { execEnv } from "./execCommand.ts";

function usage(fn: () => unknown): string {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(UsageError);
    return (e as Error).message;
  }
  throw new Error("expected a UsageError");
}

describe("execEnv", () => {
  test("NAME=VALUE (a value may hold = or be empty), NAME alone from here, a later NAME wins", () => {
    expect(execEnv(["A=1", "B=x=y", "C=", "HOME", "A=2"], false, { HOME: "/home/me" })).toEqual({
      A: "2",
      B: "x=y",
      C: "",
      HOME: "/home/me",
    });
    expect(execEnv([], false, {})).toEqual({});
  });
  test("with a terminal TERM is this shell's (or xterm) unless given", () => {
    expect(execEnv([], true, { TERM: "screen" })).toEqual({ TERM: "screen" });
    expect(execEnv([], true, {})).toEqual({ TERM: "xterm" });
    expect(execEnv(["TERM=dumb"], true, { TERM: "screen" })).toEqual({ TERM: "dumb" });
  });
  test("refused with a usage error: a name that is not an identifier, NAME unset here, too many, too long", () => {
    expect(usage(() => execEnv(["1A=x"], false, {}))).toContain("shell identifier");
    expect(usage(() => execEnv(["=x"], false, {}))).toContain("shell identifier");
    expect(usage(() => execEnv(["A-B=x"], false, {}))).toContain("shell identifier");
    expect(usage(() => execEnv([`${"N".repeat(257)}=x`], false, {}))).toContain("at most 256 characters");
    expect(usage(() => execEnv(["NOPE"], false, {}))).toContain("NOPE is not set here");
    expect(usage(() => execEnv([`A=${"x".repeat(MAX_EXEC_ENV_VALUE_BYTES + 1)}`], false, {}))).toContain(
      `over ${MAX_EXEC_ENV_VALUE_BYTES} bytes`,
    );
    expect(execEnv([`A=${"é".repeat(MAX_EXEC_ENV_VALUE_BYTES / 2)}`], false, {})["A"]).toHaveLength(
      MAX_EXEC_ENV_VALUE_BYTES / 2,
    );
    const many = Array.from({ length: MAX_EXEC_ENV + 1 }, (_, i) => `V${i}=x`);
    expect(usage(() => execEnv(many, false, {}))).toContain(`at most ${MAX_EXEC_ENV} variables`);
    expect(Object.keys(execEnv(many.slice(1), false, {}))).toHaveLength(MAX_EXEC_ENV);
    expect(usage(() => execEnv(many.slice(1), true, {}))).toContain(`at most ${MAX_EXEC_ENV} variables`);
  });
});
