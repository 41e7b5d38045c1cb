/**
 * Errors across a workerd RPC (./durableHost.ts): workerd keeps only the
 * message of a thrown error, so a BeachballError (or a DamagedStateError,
 * as OBJECT_DAMAGED) travels as a marked JSON message and is rebuilt on
 * the caller's side with its code and extra fields.
 * Must never: turn an unmarked error into a BeachballError.
 */
import { BeachballError, type ErrorCode } from "../../../protocol/errors.ts";
import { DamagedStateError } from "../faults.ts";

const ERROR_MARK = "bb-error:";

/** An error as data that survives an RPC (workerd keeps only the message of a thrown error). */
export function encodeError(e: unknown): Error {
  if (e instanceof BeachballError)
    return new Error(ERROR_MARK + JSON.stringify({ code: e.code, message: e.message, extra: e.extra ?? null }));
  if (e instanceof DamagedStateError)
    return new Error(ERROR_MARK + JSON.stringify({ code: "OBJECT_DAMAGED", message: e.message, extra: null }));
  return e instanceof Error ? e : new Error(String(e));
}

/** The caller's side of encodeError: a marked error becomes its BeachballError again; any other is returned as is. */
export function decodeError(e: unknown): unknown {
  const msg = e instanceof Error ? e.message : "";
  const i = msg.indexOf(ERROR_MARK);
  if (i < 0) return e;
  const d = JSON.parse(msg.slice(i + ERROR_MARK.length)) as {
    code: ErrorCode;
    message: string;
    extra: Record<string, unknown> | null;
  };
  return new BeachballError(d.code, d.message, d.extra ?? undefined);
}
