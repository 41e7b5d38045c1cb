import { describe, expect, test } from "bun:test";
import { BeachballError } from "./errors.ts";
import {
  BEARER_CHALLENGE,
  errorFromAnswer,
  errorFromResponse,
  MAX_PROBLEM_DETAIL_CHARS,
  MAX_QUOTED_ANSWER_CHARS,
  problem,
  problemResponse,
  UnexpectedAnswerError,
} from "./problem.ts";

describe("problem bodies (RFC 9457)", () => {
  test("a server's problem response carries the code, status, content type and Retry-After", async () => {
    const res = problemResponse(new BeachballError("RATE_LIMITED", "slow down", { retryAfterSeconds: 3 }));
    expect(res.status).toBe(429);
    expect(res.headers.get("content-type")).toBe("application/problem+json");
    expect(res.headers.get("retry-after")).toBe("3");
    expect(await res.json()).toMatchObject({
      code: "RATE_LIMITED",
      status: 429,
      title: "RATE_LIMITED",
      detail: "slow down",
    });
    expect(problem("METHOD_NOT_ALLOWED", "x", undefined, { allow: "GET" }).headers.get("allow")).toBe("GET");
  });

  test("every 401 carries a Bearer challenge (RFC 9110 §15.5.2, RFC 6750 §3); other statuses none", () => {
    for (const code of ["UNAUTHENTICATED", "ENROLLMENT_TOKEN_INVALID", "RELAY_TOKEN_EXPIRED"] as const)
      expect(problem(code, "x").headers.get("www-authenticate")).toBe(BEARER_CHALLENGE);
    expect(problem("FORBIDDEN", "x").headers.get("www-authenticate")).toBeNull();
  });

  test("a client reads it back into a BeachballError with the HTTP status in extra", async () => {
    const e = await errorFromResponse(problemResponse(new BeachballError("QUOTA_ACTIVE_HOSTS", "cap", { limit: 2 })));
    expect(e).toBeInstanceOf(BeachballError);
    expect(e).toMatchObject({ code: "QUOTA_ACTIVE_HOSTS", message: "cap", extra: { limit: 2, status: 409 } });
  });

  test("an answer without a known problem is an UnexpectedAnswerError, quoted briefly and printably", () => {
    for (const text of [
      "",
      "<html>bad gateway</html>",
      "[1,2]",
      "null",
      '{"code":"NOT_A_CODE","detail":"x"}',
      '{"code": 5}',
    ]) {
      const e = errorFromAnswer(502, text);
      expect(e).toBeInstanceOf(UnexpectedAnswerError);
      expect((e as UnexpectedAnswerError).status).toBe(502);
    }
    const long = errorFromAnswer(413, `\u0000\u001b[31m${"x".repeat(10_000)}`);
    expect(long.message.length).toBeLessThan(MAX_QUOTED_ANSWER_CHARS + 60);
    expect(long.message).not.toMatch(/[\u0000-\u001f]/);
  });

  test("a peer's detail is bounded", () => {
    const e = errorFromAnswer(422, JSON.stringify({ code: "VALIDATION_FAILED", detail: "d".repeat(100_000) }));
    expect(e.message.length).toBe(MAX_PROBLEM_DETAIL_CHARS);
  });

  test("a peer's detail reaches a terminal printable: control characters, escape sequences and bidi overrides become spaces", () => {
    const e = errorFromAnswer(
      400,
      JSON.stringify({
        code: "VALIDATION_FAILED",
        detail: "bad\u001b]0;owned\u0007\r\nOK \u009b31m\u202eevil\u2069 § …\tx\u007f",
      }),
    );
    expect(e.message).not.toMatch(/[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/);
    // Printable text, non-ASCII included (the scheduler's own details quote § and …), stays as it was.
    expect(e.message).toBe("bad ]0;owned OK 31m evil § … x");
  });
});
