/**
 * The path and query of an HTTP request, read without its Host header: the
 * one place every server of the project (the scheduler on both hosts, the
 * relay's WebSocket and health listeners, the request log) takes a route
 * from. Issue 18 item 20: a short Host (`x`, `abc`, `x.y`) made every route
 * 404, because Elysia 1.4 cuts `request.url` at a fixed offset
 * (`url.indexOf("/", 11)`, assuming an authority of at least four
 * characters); and a Host that is not a valid authority (`a/b`, `@x`,
 * `h:99999`, an empty one) makes Bun hand over a relative `request.url`, or
 * an absolute one `new URL` refuses, so parsing it threw.
 *
 * RFC 9112 §3.2: the request target names the resource; the Host header
 * names the authority and says nothing about the route. The authority of
 * `request.url` is therefore skipped (whatever it is) and the rest is parsed
 * against a fixed origin (TARGET_ORIGIN), so the same target gives the same
 * pathname and query whatever Host was sent.
 * Must never: let the Host header (or an absolute-form target's authority)
 * change which route a request reaches, or throw on any Host value.
 */

/** The origin a request target is parsed against (RFC 6761 `.invalid`: it names no real host). */
export const TARGET_ORIGIN = "http://request.invalid";

/**
 * The request target of `url` (a Request's `url`: absolute, or relative
 * when the runtime found no usable Host): what follows the authority, or
 * `/` when nothing does. `host` is the request's Host header: runtimes that
 * build the URL as scheme + "://" + Host + target verbatim (workerd does,
 * so `Host: a/b` gives `http://a/b/healthz`) are undone by removing exactly
 * that prefix; otherwise the authority ends at the first "/", "?" or "#"
 * (RFC 3986 §3.2).
 */
export function targetOf(url: string, host: string | null = null): string {
  if (url.startsWith("/")) return url;
  const scheme = url.indexOf("://");
  const from = scheme < 0 ? 0 : scheme + 3;
  let end = -1;
  if (host !== null && host !== "" && url.slice(from, from + host.length).toLowerCase() === host.toLowerCase()) {
    const next = url[from + host.length];
    if (next === undefined || next === "/" || next === "?" || next === "#") end = from + host.length;
  }
  if (end < 0) {
    end = url.length;
    for (const c of ["/", "?", "#"]) {
      const i = url.indexOf(c, from);
      if (i >= 0 && i < end) end = i;
    }
  }
  const rest = url.slice(end);
  return rest.startsWith("/") ? rest : `/${rest}`;
}

/** Each request's parsed target, so the guard and the request log parse it once between them (bench/shedPath.ts). */
const parsed = new WeakMap<object, URL>();

/**
 * The request's target as a URL on TARGET_ORIGIN: `pathname` and
 * `searchParams` as `new URL(request.url)` would give them for a well-formed
 * Host, for every Host value. Parsed once per request object: callers get
 * the same URL and must not modify it. Never throws.
 */
export function requestTarget(request: { url: string; headers: Headers }): URL {
  const known = parsed.get(request);
  if (known) return known;
  let url: URL;
  try {
    url = new URL(TARGET_ORIGIN + targetOf(request.url, request.headers.get("host")));
  } catch {
    // Not reachable for a target that starts with "/" (path parsing has no failure); kept so no Host can throw here.
    url = new URL(`${TARGET_ORIGIN}/`);
  }
  parsed.set(request, url);
  return url;
}
