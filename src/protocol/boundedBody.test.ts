import { describe, expect, test } from "bun:test";
import { BeachballError } from "./errors.ts";
import {
  declaredLength,
  MAX_JSON_DEPTH,
  nestsDeeperThan,
  parseBoundedJson,
  readBoundedBody,
  repeatedKey,
  RequestBody,
  requireJsonMediaType,
} from "./boundedBody.ts";

const bytes = (s: string) => new TextEncoder().encode(s);

async function codeOf(p: Promise<unknown> | (() => unknown)): Promise<string> {
  try {
    await (typeof p === "function" ? p() : p);
    return "OK";
  } catch (e) {
    return e instanceof BeachballError ? e.code : String(e);
  }
}

/** A body stream of `chunks` chunks of `size` bytes that counts what was pulled and whether it was cancelled. */
function countingStream(chunks: number, size: number) {
  const seen = { pulled: 0, cancelled: false };
  const stream = new ReadableStream<Uint8Array>({
    pull(c) {
      if (seen.pulled === chunks) return c.close();
      seen.pulled++;
      c.enqueue(new Uint8Array(size).fill(0x20));
    },
    cancel() {
      seen.cancelled = true;
    },
  });
  return { stream, seen };
}

describe("JSON depth is checked before parsing", () => {
  test("counts arrays and objects, not brackets inside strings or after escapes", () => {
    expect(nestsDeeperThan(bytes("[[[]]]"), 3)).toBe(false);
    expect(nestsDeeperThan(bytes("[[[[]]]]"), 3)).toBe(true);
    expect(nestsDeeperThan(bytes('{"a":{"b":[1]}}'), 3)).toBe(false);
    expect(nestsDeeperThan(bytes('["[[[[[[", "\\"[[[[[["]'), 1)).toBe(false);
    expect(nestsDeeperThan(bytes('["\\\\", [[[]]]]'), 3)).toBe(true);
  });

  test("30,000 nested arrays are refused as JSON_TOO_DEEP, never handed to JSON.parse", async () => {
    const deep = bytes("[".repeat(30_000) + "]".repeat(30_000));
    expect(await codeOf(() => parseBoundedJson(deep))).toBe("JSON_TOO_DEEP");
    const ok = bytes("[".repeat(MAX_JSON_DEPTH) + "]".repeat(MAX_JSON_DEPTH));
    expect(parseBoundedJson(ok)).toBeArray();
  });

  test("empty, non-UTF-8 and non-JSON bodies are MALFORMED_JSON", async () => {
    expect(await codeOf(() => parseBoundedJson(new Uint8Array(0)))).toBe("MALFORMED_JSON");
    expect(await codeOf(() => parseBoundedJson(new Uint8Array([0x22, 0xff, 0xfe, 0x22])))).toBe("MALFORMED_JSON");
    expect(await codeOf(() => parseBoundedJson(bytes("{nope")))).toBe("MALFORMED_JSON");
  });
});

describe("the byte limit holds however the body is framed", () => {
  test("a body without Content-Length is cut off at the limit and its stream cancelled", async () => {
    const { stream, seen } = countingStream(1000, 16 * 1024);
    const req = new Request("http://x/", { method: "POST", body: stream, duplex: "half" } as RequestInit);
    expect(await codeOf(readBoundedBody(req, 64 * 1024, "ENVELOPE_TOO_LARGE"))).toBe("ENVELOPE_TOO_LARGE");
    expect(seen.pulled).toBeLessThan(10);
    await Bun.sleep(0);
    expect(seen.cancelled).toBe(true);
  });

  test("a body within the limit is read whole", async () => {
    const { stream } = countingStream(3, 1000);
    const req = new Request("http://x/", { method: "POST", body: stream, duplex: "half" } as RequestInit);
    expect((await readBoundedBody(req, 3000, "BODY_TOO_LARGE")).byteLength).toBe(3000);
  });

  test("a declared length over the limit is refused before one byte is read", async () => {
    const { stream, seen } = countingStream(10, 10);
    const req = new Request("http://x/", {
      method: "POST",
      body: stream,
      headers: { "content-length": "999999" },
      duplex: "half",
    } as RequestInit);
    expect(await codeOf(readBoundedBody(req, 1000, "PAYLOAD_TOO_LARGE"))).toBe("PAYLOAD_TOO_LARGE");
    expect(seen.pulled).toBeLessThanOrEqual(1);
  });

  test("a Content-Length that is not one decimal count is INVALID_CONTENT_LENGTH", async () => {
    for (const v of ["abc", "-1", "1.5", "0x10", "1e3", "5, 5", "99999999999999999999"])
      expect(await codeOf(() => declaredLength(new Headers({ "content-length": v })))).toBe("INVALID_CONTENT_LENGTH");
    expect(declaredLength(new Headers({ "content-length": "0042" }))).toBe(42);
    expect(declaredLength(new Headers())).toBeNull();
  });
});

describe("a refused upload is drained, within bounds, so the refusal is not lost to a reset", () => {
  test("drain reads what the client still sends, up to the byte bound, then releases the body", async () => {
    const { stream, seen } = countingStream(10_000, 64 * 1024);
    const body = new RequestBody(
      new Request("http://x/", { method: "POST", body: stream, duplex: "half" } as RequestInit),
    );
    expect(await codeOf(body.read(1024, "BODY_TOO_LARGE"))).toBe("BODY_TOO_LARGE");
    await body.drain(1024 * 1024, 5_000, 1_000);
    expect(seen.pulled).toBeGreaterThan(16);
    expect(seen.pulled).toBeLessThan(40);
    expect(body.unread).toBe(false);
    await Bun.sleep(0);
    expect(seen.cancelled).toBe(true);
  });

  test("drain stops when the client goes quiet, whatever length it declared", async () => {
    // A client that sends nothing more: without the idle stop this would wait 60 s and fail on the test's timeout.
    const quiet = new ReadableStream<Uint8Array>({ pull: () => new Promise(() => undefined) });
    const idle = new RequestBody(
      new Request("http://x/", { method: "POST", body: quiet, duplex: "half" } as RequestInit),
    );
    await idle.drain(1 << 20, 60_000, 50);
    expect(idle.unread).toBe(false);
    const { stream, seen } = countingStream(10, 10);
    const lying = new RequestBody(
      new Request("http://x/", {
        method: "POST",
        body: stream,
        headers: { "content-length": String(1 << 30) },
        duplex: "half",
      } as RequestInit),
    );
    await lying.drain(1 << 20, 60_000, 50);
    expect(seen.pulled).toBe(10);
    expect(lying.unread).toBe(false);
  });
});

describe("a JSON route takes application/json only, judged from the headers", () => {
  const code = (h: Record<string, string>) => {
    try {
      requireJsonMediaType(new Headers(h));
      return "ok";
    } catch (e) {
      return `${(e as BeachballError).code}: ${(e as BeachballError).message}`;
    }
  };
  test("application/json with or without a UTF-8 charset, in any case, is accepted", () => {
    for (const t of [
      "application/json",
      "Application/JSON",
      "application/json; charset=utf-8",
      'application/json;charset="UTF-8"',
      "application/json; boundary=x",
    ])
      expect(code({ "content-type": t })).toBe("ok");
    expect(code({ "content-type": "application/json", "content-encoding": "identity" })).toBe("ok");
  });
  test("anything else is UNSUPPORTED_MEDIA_TYPE, naming the type only when it is a plain token", () => {
    expect(code({})).toBe("UNSUPPORTED_MEDIA_TYPE: this route takes a JSON body: send Content-Type: application/json");
    expect(code({ "content-type": "text/plain;charset=UTF-8" })).toBe(
      "UNSUPPORTED_MEDIA_TYPE: this route takes Content-Type: application/json (got text/plain)",
    );
    expect(code({ "content-type": "application/json-patch+json" })).toBe(
      "UNSUPPORTED_MEDIA_TYPE: this route takes Content-Type: application/json (got application/json-patch+json)",
    );
    expect(code({ "content-type": `text/${"x".repeat(100)}` })).toBe(
      "UNSUPPORTED_MEDIA_TYPE: this route takes Content-Type: application/json",
    );
    expect(code({ "content-type": "application/json; charset=utf-16" })).toBe(
      "UNSUPPORTED_MEDIA_TYPE: a JSON body must be UTF-8 (charset=utf-8 or none)",
    );
    expect(code({ "content-type": "application/json", "content-encoding": "gzip" })).toBe(
      "UNSUPPORTED_MEDIA_TYPE: request bodies may not be content-encoded; send plain application/json",
    );
  });
  test("a charset parameter must be well-formed to count as UTF-8 (a token or one quoted string, RFC 9110 §5.6.6)", () => {
    for (const t of [
      'application/json; charset="utf-8"x',
      'application/json; charset=utf-8"',
      'application/json; charset="utf-8',
      "application/json; charset=utf-8 x",
      "application/json; charset",
    ]) {
      expect(code({ "content-type": t })).toBe(
        "UNSUPPORTED_MEDIA_TYPE: a JSON body must be UTF-8 (charset=utf-8 or none)",
      );
    }
    // Two charsets, even both UTF-8, are one too many.
    expect(code({ "content-type": "application/json; charset=utf-8; charset=utf-8" })).toBe(
      "UNSUPPORTED_MEDIA_TYPE: a JSON body must be UTF-8 (charset=utf-8 or none)",
    );
    // Other parameters and an empty one (a trailing semicolon) do not matter.
    for (const t of ["application/json;", "application/json; version=2", "application/json;charset=utf8"])
      expect(code({ "content-type": t })).toBe("ok");
  });
});

describe("an object may not repeat a member name (RFC 7493 §2.3)", () => {
  test("finds a repeat at any depth, escaped spellings included, and nothing else", () => {
    expect(repeatedKey('{"a":1,"a":2}')).toBe("a");
    expect(repeatedKey('{"x":[{"b":1},{"b":2,"c":{"d":1,"d":[]}}]}')).toBe("d");
    expect(repeatedKey('{"a":1,"\\\\u0061":2}')).toBeNull();
    expect(repeatedKey('{"a":1,"\\u0061":2}')).toBe("a");
    expect(repeatedKey('{"a":"a","b":["a","a"],"c":{"a":1}}')).toBeNull();
    expect(repeatedKey('[{"a":1},{"a":1}]')).toBeNull();
    expect(repeatedKey('{"s":"\\\\\\"","s2":"{\\\\"}')).toBeNull();
    for (const t of ['{"a":1,"\\\\u0061":2}', '{"s":"\\\\\\"","s2":"{\\\\"}'])
      expect(() => JSON.parse(t)).not.toThrow();
    expect(repeatedKey('"a"')).toBeNull();
  });
  test("parseBoundedJson refuses a repeat as MALFORMED_JSON, naming a plain key only", async () => {
    const err = (t: string) => {
      try {
        parseBoundedJson(bytes(t));
        return "parsed";
      } catch (e) {
        return `${(e as BeachballError).code}: ${(e as BeachballError).message}`;
      }
    };
    expect(err('{"workloadClass":"x","workloadClass":"y"}')).toBe(
      'MALFORMED_JSON: request body repeats the field "workloadClass" in one object; field names must be unique (RFC 7493 §2.3)',
    );
    expect(err('{"<b>":1,"<b>":2}')).toBe(
      "MALFORMED_JSON: request body repeats the field in one object; field names must be unique (RFC 7493 §2.3)",
    );
  });
});
