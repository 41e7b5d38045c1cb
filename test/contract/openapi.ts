/**
 * Loads Firecracker's real OpenAPI (Swagger 2.0) document and checks request
 * bodies against it: operation lookup by method and templated path, `$ref`
 * resolution, and a small JSON-schema check covering what that document
 * uses (type, enum, required, properties, additionalProperties, items,
 * minimum, maximum).
 *
 * Test support for the Firecracker contract tests (ARCHITECTURE.md: the
 * driver's requests are checked against ../reference/firecracker/firecracker.yaml).
 * One deliberate strictness: an object schema without `additionalProperties`
 * is treated as closed, because Firecracker's API parser rejects unknown
 * fields (STYLE.md: "config rejects unknown fields"); the document itself
 * is silent. Must never: copy the document's text into the project; it is
 * read from the reference directory at run time.
 */

/** Path of the reference document (outside the repository, read-only). */
export const FIRECRACKER_OPENAPI_PATH = "/work/shared/reference/firecracker/firecracker.yaml";

/** A JSON-schema fragment as it appears in the document. */
export type Schema = {
  $ref?: string;
  type?: string;
  enum?: unknown[];
  required?: string[];
  properties?: Record<string, Schema>;
  additionalProperties?: boolean | Schema;
  items?: Schema;
  minimum?: number;
  maximum?: number;
};

interface Parameter {
  in: string;
  name: string;
  required?: boolean;
  schema?: Schema;
}

/** One operation of the document. */
export interface Operation {
  method: string;
  /** The templated path, e.g. `/drives/{drive_id}`. */
  template: string;
  summary: string;
  description: string;
  parameters: Parameter[];
}

/** The parsed document. */
export interface OpenApiDoc {
  version: string;
  definitions: Record<string, Schema>;
  operations: Operation[];
}

/** Parses the document at `path` with Bun's built-in YAML parser. */
export async function loadOpenApi(path = FIRECRACKER_OPENAPI_PATH): Promise<OpenApiDoc> {
  const raw = Bun.YAML.parse(await Bun.file(path).text()) as {
    info: { version: string };
    definitions: Record<string, Schema>;
    paths: Record<string, Record<string, { summary?: string; description?: string; parameters?: Parameter[] }>>;
  };
  const operations: Operation[] = [];
  for (const [template, methods] of Object.entries(raw.paths))
    for (const [method, op] of Object.entries(methods))
      operations.push({
        method: method.toUpperCase(),
        template,
        summary: op.summary ?? "",
        description: op.description ?? "",
        parameters: op.parameters ?? [],
      });
  return { version: raw.info.version, definitions: raw.definitions, operations };
}

/** The operation for `method` and concrete `path` with its path parameters, or null (unknown path or method). */
export function findOperation(
  doc: OpenApiDoc,
  method: string,
  path: string,
): { op: Operation; params: Record<string, string> } | null {
  const segs = path.split("/");
  for (const op of doc.operations) {
    if (op.method !== method) continue;
    const tsegs = op.template.split("/");
    if (tsegs.length !== segs.length) continue;
    const params: Record<string, string> = {};
    let ok = true;
    for (let i = 0; i < segs.length && ok; i++) {
      const t = tsegs[i]!;
      const s = segs[i]!;
      if (t.startsWith("{") && t.endsWith("}")) {
        if (s === "") ok = false;
        else params[t.slice(1, -1)] = decodeURIComponent(s);
      } else ok = t === s;
    }
    if (ok) return { op, params };
  }
  return null;
}

function resolve(doc: OpenApiDoc, s: Schema): Schema {
  let cur = s;
  for (let depth = 0; cur.$ref; depth++) {
    if (depth > 16 || !cur.$ref.startsWith("#/definitions/")) throw new Error(`unresolvable $ref ${cur.$ref}`);
    const next = doc.definitions[cur.$ref.slice("#/definitions/".length)];
    if (!next) throw new Error(`unknown $ref ${cur.$ref}`);
    cur = next;
  }
  return cur;
}

function typeOf(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
  return typeof v;
}

/** Errors of `value` against `schema` (empty when valid); each names the JSON path. */
export function validateSchema(doc: OpenApiDoc, schema: Schema, value: unknown, at = "body"): string[] {
  const s = resolve(doc, schema);
  const errors: string[] = [];
  const t = typeOf(value);
  if (s.type) {
    const fits = s.type === t || (s.type === "number" && t === "integer");
    if (!fits) return [`${at}: expected ${s.type}, got ${t}`];
  }
  if (s.enum && !s.enum.some((e) => e === value))
    errors.push(`${at}: ${JSON.stringify(value)} is not one of ${JSON.stringify(s.enum)}`);
  if (typeof value === "number") {
    if (s.minimum !== undefined && value < s.minimum) errors.push(`${at}: ${value} < minimum ${s.minimum}`);
    if (s.maximum !== undefined && value > s.maximum) errors.push(`${at}: ${value} > maximum ${s.maximum}`);
  }
  if (t === "array" && s.items)
    (value as unknown[]).forEach((v, i) => errors.push(...validateSchema(doc, s.items!, v, `${at}[${i}]`)));
  if (t === "object" && (s.type === "object" || s.properties)) {
    const obj = value as Record<string, unknown>;
    for (const r of s.required ?? []) if (!(r in obj)) errors.push(`${at}: missing required field ${r}`);
    for (const [k, v] of Object.entries(obj)) {
      const p = s.properties?.[k];
      if (p) errors.push(...validateSchema(doc, p, v, `${at}.${k}`));
      else if (typeof s.additionalProperties === "object")
        errors.push(...validateSchema(doc, s.additionalProperties, v, `${at}.${k}`));
      else if (s.additionalProperties !== true) errors.push(`${at}: unknown field ${k}`);
    }
  }
  return errors;
}

/** The body parameter of `op` (schema and whether it is required), or null when the operation takes no body. */
export function bodyParameter(op: Operation): { schema: Schema; required: boolean } | null {
  const p = op.parameters.find((x) => x.in === "body");
  return p?.schema ? { schema: p.schema, required: p.required === true } : null;
}

/** True when the document marks `op` as accepted only before InstanceStart ("Pre-boot only"). */
export function isPreBootOnly(op: Operation): boolean {
  return /pre-boot only/i.test(`${op.summary} ${op.description}`);
}

/** True when the document marks `op` as accepted only after InstanceStart ("Post-boot only"). */
export function isPostBootOnly(op: Operation): boolean {
  return /post-boot only/i.test(`${op.summary} ${op.description}`);
}
