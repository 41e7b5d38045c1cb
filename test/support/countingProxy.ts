/**
 * Test support: a loopback HTTP proxy in front of a test scheduler that
 * counts every request it forwards (path, query, status, how many events an
 * events page carried), so a test asserts how a client waits by what
 * reached the server, never by timings. It can also cut the answers of the
 * requests in flight (the client's read fails like a dropped connection:
 * headers, then a body that errors) and hold new requests until released,
 * to test that a wait resumes after a dropped stream. Listens on 127.0.0.1
 * only; the caller stops it.
 */

/** One request the proxy forwarded. */
export interface ProxiedRequest {
  path: string;
  query: URLSearchParams;
  /** The scheduler's status, or null while in flight or when cut. */
  status: number | null;
  /** Items in the answer's `items` (events and list pages), or null. */
  items: number | null;
  /** True when the proxy cut this request's answer. */
  cut: boolean;
}

/** A running counting proxy. */
export interface CountingProxy {
  url: string;
  /** Every request so far, in arrival order. */
  requests: ProxiedRequest[];
  /** The events requests so far (GET …/events). */
  eventsRequests(): ProxiedRequest[];
  /** Requests whose answer has not been sent yet. */
  inFlight(): ProxiedRequest[];
  /** Cuts every answer in flight; returns how many were cut. */
  cutInFlight(): number;
  /** Holds new requests (they reach the scheduler only after release()). */
  hold(): void;
  /** Lets held requests through. */
  release(): void;
  stop(): Promise<void>;
}

/** A body that fails once read: the client sees a dropped connection after the headers (Bun prints the error once). */
function brokenBody(): ReadableStream<Uint8Array> {
  return new ReadableStream({
    pull(c) {
      c.error(new Error("stream cut by the test proxy (expected)"));
    },
  });
}

/** Starts a counting proxy on 127.0.0.1 forwarding to `target` (a loopback URL). */
export function startCountingProxy(target: string): CountingProxy {
  const requests: ProxiedRequest[] = [];
  const cutters = new Map<ProxiedRequest, () => void>();
  let gate: Promise<void> | null = null;
  let open: (() => void) | null = null;
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    idleTimeout: 0,
    async fetch(req) {
      const u = new URL(req.url);
      const r: ProxiedRequest = { path: u.pathname, query: u.searchParams, status: null, items: null, cut: false };
      requests.push(r);
      if (gate) await gate;
      const upstream = new AbortController();
      const headers = new Headers(req.headers);
      headers.delete("host");
      const cut = new Promise<"cut">((resolve) => cutters.set(r, () => resolve("cut")));
      const answer = fetch(`${target}${u.pathname}${u.search}`, {
        method: req.method,
        headers,
        ...(req.method === "GET" || req.method === "HEAD" ? {} : { body: await req.arrayBuffer() }),
        signal: upstream.signal,
      }).then(async (res) => ({ res, text: await res.text() }));
      const won = await Promise.race([answer, cut]);
      cutters.delete(r);
      if (won === "cut") {
        upstream.abort();
        answer.catch(() => undefined);
        r.cut = true;
        return new Response(brokenBody(), { status: 200, headers: { "content-type": "application/json" } });
      }
      r.status = won.res.status;
      try {
        const items = (JSON.parse(won.text) as { items?: unknown }).items;
        if (Array.isArray(items)) r.items = items.length;
      } catch {
        // not JSON: nothing to count
      }
      return new Response(won.text, { status: won.res.status, headers: won.res.headers });
    },
  });
  return {
    url: `http://127.0.0.1:${server.port}`,
    requests,
    eventsRequests: () => requests.filter((r) => r.path.endsWith("/events")),
    inFlight: () => [...cutters.keys()],
    cutInFlight() {
      const all = [...cutters.values()];
      for (const c of all) c();
      return all.length;
    },
    hold() {
      gate ??= new Promise<void>((r) => (open = r));
    },
    release() {
      open?.();
      gate = null;
      open = null;
    },
    async stop() {
      this.release();
      await server.stop(true);
    },
  };
}
