/**
 * The one sentence a request gets when its JSON body breaks the route's
 * TypeBox schema: the JSON-pointer path of the offending field and what is
 * wrong with it; for an unknown field, the fields allowed at that place; for
 * a value outside a union of literals, the literals; for a value matching
 * none of a union's object shapes, the shape its discriminator
 * (a `kind`/`type` literal) picked and that shape's own first error. Every
 * server of the scheduler's HTTP API (edge.ts on both hosts, the
 * rendezvous WebSocket in rendezvousSocket.ts) describes errors here, so
 * the same bad body reads the same everywhere.
 *
 * Spec: "Admission and limits" (bounded work per hostile request); RFC 6901
 * (JSON pointer). Must never: compute more than the first error of a body (a
 * hostile body can hold thousands), echo a value from the body, or echo a
 * key the caller chose unless it is a short plain identifier
 * (SAFE_KEY); the sentence is at most MAX_SCHEMA_ERROR_CHARS long.
 */
import type { TSchema } from "@sinclair/typebox";
import { Value } from "@sinclair/typebox/value";
import { ValueErrorType, type ValueError, type ValueErrorIterator } from "@sinclair/typebox/errors";
import { BeachballError } from "../protocol/errors.ts";

/** Longest description returned, in characters (the problem's `detail` stays well under its own cap). */
export const MAX_SCHEMA_ERROR_CHARS = 400;
/** Most allowed field names listed for an unknown field (the rest are counted). */
export const MAX_ALLOWED_FIELDS_LISTED = 24;
/** A key the caller chose that may be repeated back: a plain identifier of at most 64 characters. */
const SAFE_KEY = /^[A-Za-z_][A-Za-z0-9_.-]{0,63}$/;
/** How deep a union is followed through discriminators before giving up (schemas nest a few levels). */
const MAX_UNION_DEPTH = 4;

type Node = Record<string, unknown>;
const obj = (v: unknown): Node => (typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Node) : {});

/** Property names declared anywhere in `schema`: keys a path may always name. */
export function declaredKeys(schema: unknown, out = new Set<string>()): Set<string> {
  if (typeof schema !== "object" || schema === null) return out;
  const props = (schema as { properties?: Record<string, unknown> }).properties;
  if (props) for (const k of Object.keys(props)) out.add(k);
  for (const v of Object.values(schema)) declaredKeys(v, out);
  return out;
}

/** `path` with every segment that is neither an index, a declared key nor a safe identifier replaced by `{key}`. */
function safePath(path: string, known: Set<string>): string {
  if (!path) return "/";
  return path
    .split("/")
    .slice(1)
    .map((s) => (/^\d{1,6}$/.test(s) || known.has(s) || SAFE_KEY.test(s) ? s : "{key}"))
    .reduce((a, s) => `${a}/${s}`, "");
}

/** "a, b, c" with at most MAX_ALLOWED_FIELDS_LISTED names (field names, or the literals a value may take). */
function listOf(names: string[]): string {
  if (names.length === 0) return "none";
  const shown = names.slice(0, MAX_ALLOWED_FIELDS_LISTED).join(", ");
  return names.length > MAX_ALLOWED_FIELDS_LISTED
    ? `${shown} and ${names.length - MAX_ALLOWED_FIELDS_LISTED} more`
    : shown;
}

/** The literal-valued property that tells a union's object shapes apart, with each shape's value; null when there is none. */
function discriminator(variants: Node[]): { key: string; values: unknown[] } | null {
  const first = obj(variants[0]?.["properties"]);
  for (const key of Object.keys(first)) {
    const values = variants.map((v) => obj(obj(v["properties"])[key])["const"]);
    if (values.every((x) => x !== undefined) && new Set(values).size === values.length) return { key, values };
  }
  return null;
}

/** What is wrong with a body, for a problem's `detail` and `extra` (VALIDATION_FAILED). */
export interface SchemaErrorReport {
  /** One bounded sentence "field: reason" (at most MAX_SCHEMA_ERROR_CHARS). */
  detail: string;
  /** The offending field as a JSON pointer ("/" for the whole body), caller-chosen keys that are not plain identifiers shown as `{key}`. */
  field: string;
  /** For an unknown field: the fields allowed at its place (at most MAX_ALLOWED_FIELDS_LISTED). */
  allowedFields?: string[];
}

type Finding = { field: string; reason: string; allowedFields?: string[] };

/** `field` + `/key` without doubling the root's slash. */
const child = (field: string, key: string) => `${field === "/" ? "" : field}/${key}`;

/** One error, described (see the module header); `known` are the keys the schema declares. */
function describe(e: ValueError, known: Set<string>, depth: number): Finding {
  const field = safePath(e.path, known);
  const schema = obj(e.schema);
  if (e.type === ValueErrorType.ObjectAdditionalProperties) {
    const patterns = Object.keys(obj(schema["patternProperties"]));
    if (patterns.length) return { field, reason: `key does not match ${patterns[0]}` };
    const allowed = Object.keys(obj(schema["properties"]));
    return {
      field,
      reason: `unknown field; allowed fields here: ${listOf(allowed)}`,
      allowedFields: allowed.slice(0, MAX_ALLOWED_FIELDS_LISTED),
    };
  }
  if (e.type === ValueErrorType.ObjectRequiredProperty) return { field, reason: "required field is missing" };
  if (e.type === ValueErrorType.Union && Array.isArray(schema["anyOf"]) && depth < MAX_UNION_DEPTH) {
    const variants = (schema["anyOf"] as unknown[]).map(obj);
    if (variants.every((v) => v["const"] !== undefined))
      return { field, reason: `must be one of ${listOf(variants.map((v) => JSON.stringify(v["const"])))}` };
    const d = variants.every((v) => v["type"] === "object") ? discriminator(variants) : null;
    if (d) {
      const value = obj(e.value)[d.key];
      const i = d.values.findIndex((x) => x === value);
      if (i < 0)
        return {
          field: child(field, d.key),
          reason: `must be one of ${listOf(d.values.map((x) => JSON.stringify(x)))}`,
        };
      const inner = Value.Errors(variants[i] as TSchema, e.value).First();
      if (inner) return describe({ ...inner, path: `${e.path}${inner.path}` }, known, depth + 1);
    }
    return { field, reason: "matches none of the allowed shapes" };
  }
  return { field, reason: e.message };
}

/**
 * The first error of `errors` (only the first is computed), described for
 * a VALIDATION_FAILED problem; `known` is declaredKeys(schema).
 */
export function firstSchemaError(errors: ValueErrorIterator, known: Set<string>): SchemaErrorReport {
  const first = errors.First();
  const f: Finding = first
    ? describe(first, known, 0)
    : { field: "/", reason: "request body does not match the schema" };
  const text = `${f.field}: ${f.reason}`;
  const detail = text.length > MAX_SCHEMA_ERROR_CHARS ? `${text.slice(0, MAX_SCHEMA_ERROR_CHARS - 1)}…` : text;
  return { detail, field: f.field, ...(f.allowedFields ? { allowedFields: f.allowedFields } : {}) };
}

/** firstSchemaError's sentence only (the rendezvous WebSocket's error frame carries no `extra`). */
export function describeFirstSchemaError(errors: ValueErrorIterator, known: Set<string>): string {
  return firstSchemaError(errors, known).detail;
}

/** The VALIDATION_FAILED error for the first schema error: `detail`, with `field` (and `allowedFields`) in `extra`. */
export function schemaValidationError(errors: ValueErrorIterator, known: Set<string>): BeachballError {
  const r = firstSchemaError(errors, known);
  return new BeachballError("VALIDATION_FAILED", r.detail, {
    field: r.field,
    ...(r.allowedFields ? { allowedFields: r.allowedFields } : {}),
  });
}
