import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { Validator } from "@seriousme/openapi-schema-validator";
import { Type } from "@sinclair/typebox";
import { openApiDocument, openApiPath } from "./openapi.ts";
import { ROUTES, type RouteSpec } from "./routes.ts";
import { REFERENCE_PATH, referenceText, SNAPSHOT_PATH, snapshotText } from "../../scripts/api-docs.ts";

describe("the OpenAPI document", () => {
  test("is a valid OpenAPI 3.1 document whose every $ref resolves", async () => {
    const v = new Validator();
    const res = await v.validate(structuredClone(openApiDocument()));
    expect(res.errors ?? []).toEqual([]);
    expect(res.valid).toBe(true);
    expect(v.version).toBe("3.1");
    const resolved = JSON.stringify(v.resolveRefs());
    expect(resolved).not.toContain('"$ref"');
  });

  test("the validator does catch a broken document (the check can fail)", async () => {
    const doc = structuredClone(openApiDocument()) as {
      paths: Record<string, Record<string, { responses?: unknown }>>;
    };
    delete doc.paths["/healthz"]!["get"]!.responses;
    doc.paths["/healthz"]!["get"]!["parameters" as "responses"] = [{ in: "path" }];
    expect((await new Validator().validate(doc)).valid).toBe(false);
  });

  test("matches the snapshot in docs/openapi.json (run `bun scripts/api-docs.ts` after an intended API change)", () => {
    expect(readFileSync(SNAPSHOT_PATH, "utf8")).toBe(snapshotText());
  });

  test("docs/http-api.md is the reference rendered from it (run `bun scripts/api-docs.ts`)", () => {
    expect(readFileSync(REFERENCE_PATH, "utf8")).toBe(referenceText());
  });

  test("every route of the table is an operation with a success response schema, and a new route appears with no other change", () => {
    const doc = openApiDocument() as {
      paths: Record<string, Record<string, { operationId: string; responses: Record<string, unknown> }>>;
    };
    for (const [name, r] of Object.entries(ROUTES) as [string, RouteSpec][]) {
      const op = doc.paths[openApiPath(r.path)]?.[r.method.toLowerCase()];
      expect(op?.operationId).toBe(name);
      expect(Object.keys(op!.responses)).toContain(String(r.response.status));
    }
    const extra: Record<string, RouteSpec> = {
      ...ROUTES,
      grant: {
        method: "POST",
        path: "/v1/allocations/:id/grants",
        auth: "controller",
        summary: "x",
        body: { schema: Type.Object({ a: Type.String({ maxLength: 3 }) }), maxBytes: 100, tooLarge: "BODY_TOO_LARGE" },
        response: { status: 201, schema: Type.Object({ b: Type.Integer() }) },
      },
    };
    const grown = openApiDocument(extra) as typeof doc;
    const op = grown.paths["/v1/allocations/{id}/grants"]!["post"]!;
    expect(op.operationId).toBe("grant");
    expect(JSON.stringify(op)).toContain('"b":{"type":"integer"}');
  });

  test("errors are problem+json and the guard's refusals are listed per route", () => {
    const doc = openApiDocument() as {
      paths: Record<string, Record<string, { responses: Record<string, { content?: Record<string, unknown> }> }>>;
    };
    const create = doc.paths["/v1/allocations"]!["post"]!.responses;
    expect(Object.keys(create).sort()).toEqual([
      "200",
      "201",
      "400",
      "401",
      "403",
      "413",
      "415",
      "422",
      "429",
      "default",
    ]);
    expect(Object.keys(create["413"]!.content!)).toEqual(["application/problem+json"]);
    expect(Object.keys(doc.paths["/healthz"]!["get"]!.responses).sort()).toEqual(["200", "default"]);
  });
});
