/**
 * Schema checks for stored and received values (messages, JSON columns,
 * index views), compiled once per schema with TypeBox's compiler where the
 * host allows code generation (the embedded host: ~10× faster than
 * interpreting), and interpreted (`Value.Check`) where it does not
 * (workerd forbids `new Function`).
 * Must never: accept a value the schema rejects.
 */
import type { Static, TSchema } from "@sinclair/typebox";
import { TypeCompiler } from "@sinclair/typebox/compiler";
import { Value } from "@sinclair/typebox/value";

type Check = (v: unknown) => boolean;
const compiled = new WeakMap<TSchema, Check>();
let codegen: boolean | undefined;

/** A checker for `schema` (compiled when the host allows it). */
export function checkerOf<S extends TSchema>(schema: S): (v: unknown) => v is Static<S> {
  let c = compiled.get(schema);
  if (!c) {
    if (codegen !== false) {
      try {
        const t = TypeCompiler.Compile(schema);
        c = (v) => t.Check(v);
        codegen = true;
      } catch {
        codegen = false;
      }
    }
    c ??= (v) => Value.Check(schema, v);
    compiled.set(schema, c);
  }
  return c as (v: unknown) => v is Static<S>;
}

/** The first reason `v` fails `schema` (for a log line or an error message). */
export function firstError(schema: TSchema, v: unknown): string {
  return [...Value.Errors(schema, v)][0]?.message ?? "does not match";
}
