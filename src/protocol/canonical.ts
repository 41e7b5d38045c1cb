/**
 * Canonical JSON: the one byte form every digest and signature in the
 * protocol covers (body digests, image manifests, grants, relay tokens).
 * Object keys sorted at every level, `undefined` members dropped, arrays in
 * order, no whitespace. Pure. Must never: change, since stored digests and
 * signatures depend on these exact bytes.
 */

/** The canonical JSON text of `v` (see the module header). Throws on values JSON cannot hold (BigInt, cycles). */
export function canonicalJson(v: unknown): string {
  if (v === null || typeof v !== "object") return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(",")}]`;
  const o = v as Record<string, unknown>;
  return `{${Object.keys(o)
    .filter((k) => o[k] !== undefined)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`)
    .join(",")}}`;
}
