import { describe, expect, test } from "bun:test";
import { checkPathParams, ROUTES, type RouteSpec } from "./routes.ts";
import { DeploymentManifest } from "./manifest.ts";

/** Why a JSON-schema node lets a peer send something unbounded, or null. */
function unbounded(node: Record<string, unknown>): string | null {
  const boundedPattern = (p: unknown) =>
    typeof p === "string" && p.startsWith("^") && p.endsWith("$") && !/[*+]|\{\d+,\}/.test(p);
  if (node["const"] !== undefined) return null;
  switch (node["type"]) {
    case "object":
      if (node["patternProperties"] && node["additionalProperties"] !== false)
        return "record that leaves keys outside its pattern unchecked";
      if (node["additionalProperties"] !== false) return "object without additionalProperties: false";
      if (node["patternProperties"]) {
        if (typeof node["maxProperties"] !== "number") return "record without maxProperties";
        for (const k of Object.keys(node["patternProperties"] as object))
          if (!boundedPattern(k)) return `record key pattern ${k} is not bounded`;
      }
      return null;
    case "string":
      return typeof node["maxLength"] === "number" || boundedPattern(node["pattern"])
        ? null
        : "string without maxLength";
    case "array":
      return typeof node["maxItems"] === "number" ? null : "array without maxItems";
    case "integer":
    case "number":
      return typeof node["maximum"] === "number" &&
        node["maximum"] <= Number.MAX_SAFE_INTEGER &&
        typeof node["minimum"] === "number"
        ? null
        : "number without minimum and a maximum ≤ 2^53-1";
    default:
      return null;
  }
}

/** Every unbounded node under `schema`, as "path: reason". */
function findUnbounded(schema: unknown, path = ""): string[] {
  if (typeof schema !== "object" || schema === null) return [];
  const node = schema as Record<string, unknown>;
  const out: string[] = [];
  const why = typeof node["type"] === "string" ? unbounded(node) : null;
  if (why) out.push(`${path || "/"}: ${why}`);
  for (const [k, v] of Object.entries(node)) {
    if (k === "properties" || k === "patternProperties")
      for (const [name, sub] of Object.entries(v as object)) out.push(...findUnbounded(sub, `${path}/${name}`));
    else if (k === "items" || k === "anyOf") out.push(...findUnbounded(v, `${path}/${k}`));
    else if (Array.isArray(v)) v.forEach((x, i) => out.push(...findUnbounded(x, `${path}/${k}/${i}`)));
  }
  return out;
}

describe("every path parameter has a pattern", () => {
  test("each :name segment of every route names a pattern in the route's params, and no pattern is unused", () => {
    for (const [name, r] of Object.entries(ROUTES) as [string, RouteSpec][]) {
      const inPath = r.path
        .split("/")
        .filter((seg) => seg.startsWith(":"))
        .map((seg) => seg.slice(1))
        .sort();
      expect({ name, params: Object.keys(r.params ?? {}).sort() }).toEqual({ name, params: inPath });
      for (const p of Object.values(r.params ?? {}))
        expect(p.source.startsWith("^") && p.source.endsWith("$")).toBe(true);
    }
  });

  test("a malformed ID is refused 400 VALIDATION_FAILED naming the parameter and its pattern, never the value", () => {
    const spec = ROUTES.revokeConnectionGrant;
    expect(() => checkPathParams(spec, { id: `alloc_${"0".repeat(32)}`, grantId: "grt_<script>" })).toThrow(
      "path parameter grantId (grant ID) must match ^grt_[0-9a-f]{32}$",
    );
    expect(() =>
      checkPathParams(spec, { id: `alloc_${"0".repeat(32)}`, grantId: `grt_${"0".repeat(32)}` }),
    ).not.toThrow();
  });
});

describe("every size a peer controls has a bound", () => {
  test("every field of every route's body is bounded and every record (map) field is closed", () => {
    const problems: string[] = [];
    for (const [name, r] of Object.entries(ROUTES))
      if ("body" in r) problems.push(...findUnbounded(r.body.schema).map((p) => `${name} ${p}`));
    expect(problems).toEqual([]);
  });

  test("the manifest's records are closed too", () => {
    expect(findUnbounded(DeploymentManifest).filter((p) => p.includes("record"))).toEqual([]);
  });

  test("the check itself finds an open record, an unbounded string and an unbounded integer", () => {
    const open = {
      type: "object",
      properties: {
        labels: { type: "object", patternProperties: { "^a$": { type: "string", maxLength: 1 } } },
        n: { type: "integer", minimum: 0 },
        s: { type: "string" },
      },
      additionalProperties: false,
    };
    expect(findUnbounded(open)).toEqual([
      "/labels: record that leaves keys outside its pattern unchecked",
      "/n: number without minimum and a maximum ≤ 2^53-1",
      "/s: string without maxLength",
    ]);
  });

  test("every route with a body has a byte limit no larger than 512 KiB and a 413 code", () => {
    for (const r of Object.values(ROUTES)) {
      if (!("body" in r)) continue;
      expect(r.body.maxBytes).toBeLessThanOrEqual(512 * 1024);
      expect(["BODY_TOO_LARGE", "PAYLOAD_TOO_LARGE", "ENVELOPE_TOO_LARGE"]).toContain(r.body.tooLarge);
    }
  });
});
