/** requestTarget: the path and query of a request whatever its Host header (issue 18 item 20). */
import { describe, expect, test } from "bun:test";
import { requestTarget, targetOf } from "./requestTarget.ts";

describe("the request target never depends on the Host header", () => {
  test("absolute URLs with short, odd or verbatim Host values", () => {
    for (const [url, host] of [
      ["http://x/healthz?a=1", "x"],
      ["http://abc/healthz?a=1", "abc"],
      ["http://x.y/healthz?a=1", "x.y"],
      ["http://a/b/healthz?a=1", "a/b"],
      ["http://a?b/healthz?a=1", "a?b"],
      ["http://%2F/healthz?a=1", "%2F"],
      ["http://[::1]:8/healthz?a=1", "[::1]:8"],
      ["http://localhost:99999/healthz?a=1", "localhost:99999"],
      ["/healthz?a=1", "a b"],
      ["/healthz?a=1", null],
    ] as const) {
      const u = requestTarget({ url, headers: new Headers(host === null ? {} : { host }) });
      expect([url, u.pathname, u.search]).toEqual([url, "/healthz", "?a=1"]);
    }
  });

  test("no path at all is /; a doubled slash stays a path", () => {
    expect(targetOf("http://x")).toBe("/");
    expect(targetOf("http://x?q=1")).toBe("/?q=1");
    expect(requestTarget({ url: "http://x//healthz", headers: new Headers({ host: "x" }) }).pathname).toBe("//healthz");
  });
});

describe("a request's target is parsed once (per-request cost in the shed path, issue 18 item 21)", () => {
  test("the guard and the request log get the same parse of one request; another request gets its own", () => {
    const req = new Request("http://x/v1/allocations/a/logs?follow=1&offset=0");
    const first = requestTarget(req);
    expect(requestTarget(req)).toBe(first);
    expect(first.pathname).toBe("/v1/allocations/a/logs");
    const other = new Request("http://x/healthz");
    expect(requestTarget(other)).not.toBe(first);
    expect(requestTarget(other).pathname).toBe("/healthz");
  });
});
