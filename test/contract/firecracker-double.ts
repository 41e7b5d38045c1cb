/**
 * TEST DOUBLE of Firecracker's API server. It stands in for Firecracker only
 * because Firecracker cannot run on this machine (no working KVM); it boots
 * nothing. It listens on a Unix socket like Firecracker's `--api-sock` and:
 *
 * - validates EVERY request body against the real OpenAPI document
 *   (openapi.ts, read from ../reference/firecracker/firecracker.yaml);
 * - rejects unknown paths or methods, invalid JSON and schema violations with
 *   400 and `{"fault_message": ...}`, as Firecracker does;
 * - enforces the state rules the document states: "Pre-boot only"
 *   operations are refused after InstanceStart, "Post-boot only" ones
 *   before it; InstanceStart needs a boot source; a drive's or interface's
 *   path ID must equal the body's ID; with `root`, files the body names must
 *   exist inside the jail root (Firecracker opens them chrooted);
 * - on SendCtrlAltDel after start, ends like a guest rebooting with
 *   `reboot=k` (calls onGuestExit) unless told to ignore it;
 * - records every request, in order, with its validation result.
 *
 * Run as a process (what the driver tests spawn in the jailer's place):
 *   bun test/contract/firecracker-double.ts --api-sock P --id ID [--root DIR]
 *     [--log FILE.ndjson] [--ignore-ctrl-alt-del] [--ignore-sigterm] [--started]
 * Must never: be imported by production code.
 */
import { appendFileSync, existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import {
  bodyParameter,
  findOperation,
  isPostBootOnly,
  isPreBootOnly,
  loadOpenApi,
  type OpenApiDoc,
  validateSchema,
} from "./openapi.ts";

/** One request as the double saw it. `schemaErrors` is empty when the body matched the OpenAPI document. */
export interface RecordedRequest {
  method: string;
  path: string;
  body: unknown;
  status: number;
  schemaErrors: string[];
  fault?: string;
}

/** Options of the double. */
export interface DoubleOptions {
  socketPath: string;
  /** Instance ID reported by GET /. */
  id?: string;
  /** Jail root: when set, paths in bodies must name existing files under it. */
  root?: string;
  /** Appends each RecordedRequest as one JSON line. */
  logPath?: string;
  /** Start in the Running state (to provoke pre-boot rejections). */
  started?: boolean;
  ignoreCtrlAltDel?: boolean;
  /** Called when the emulated guest shuts down (SendCtrlAltDel). */
  onGuestExit?: () => void;
}

/** A running double. */
export interface FirecrackerDouble {
  readonly requests: RecordedRequest[];
  readonly state: () => "Not started" | "Running";
  stop(): void;
}

/** Largest accepted request body, bytes (Firecracker bounds its API payloads too). */
const MAX_BODY_BYTES = 50 * 1024;
/** Delay between SendCtrlAltDel and the emulated guest's exit, ms. */
const GUEST_SHUTDOWN_MS = 50;

/** Starts the double on opts.socketPath (replacing a stale socket file). */
export async function startFirecrackerDouble(opts: DoubleOptions, doc?: OpenApiDoc): Promise<FirecrackerDouble> {
  const api = doc ?? (await loadOpenApi());
  const requests: RecordedRequest[] = [];
  let state: "Not started" | "Running" = opts.started ? "Running" : "Not started";
  const config: Record<string, unknown> = {};

  const reply = (rec: RecordedRequest, status: number, fault?: string, json?: unknown): Response => {
    rec.status = status;
    if (fault) rec.fault = fault;
    requests.push(rec);
    if (opts.logPath) appendFileSync(opts.logPath, `${JSON.stringify(rec)}\n`);
    if (fault) return Response.json({ fault_message: fault }, { status });
    return json === undefined ? new Response(null, { status }) : Response.json(json, { status });
  };

  const missingFile = (body: Record<string, unknown>): string | null => {
    if (!opts.root) return null;
    for (const k of ["kernel_image_path", "initrd_path", "path_on_host"]) {
      const v = body[k];
      if (typeof v === "string" && !existsSync(join(opts.root, v)))
        return `${k} ${v}: No such file or directory (os error 2)`;
    }
    return null;
  };

  const handle = async (req: Request): Promise<Response> => {
    const url = new URL(req.url);
    const rec: RecordedRequest = {
      method: req.method,
      path: url.pathname,
      body: undefined,
      status: 0,
      schemaErrors: [],
    };
    const text = await req.text();
    if (text.length > MAX_BODY_BYTES) return reply(rec, 400, "Request payload is too large.");
    if (text) {
      try {
        rec.body = JSON.parse(text);
      } catch {
        rec.schemaErrors.push("body: not JSON");
        return reply(rec, 400, "An error occurred when deserializing the json body of a request.");
      }
    }
    const found = findOperation(api, req.method, url.pathname);
    if (!found) return reply(rec, 400, `Invalid request method and/or path: ${req.method} ${url.pathname}.`);
    const { op, params } = found;
    const bp = bodyParameter(op);
    if (bp && rec.body === undefined && bp.required) rec.schemaErrors.push("body: required body missing");
    if (!bp && rec.body !== undefined) rec.schemaErrors.push("body: this operation takes no body");
    if (bp && rec.body !== undefined) rec.schemaErrors.push(...validateSchema(api, bp.schema, rec.body));
    if (rec.schemaErrors.length > 0) return reply(rec, 400, rec.schemaErrors.join("; "));
    const body = (rec.body ?? {}) as Record<string, unknown>;
    for (const [name, value] of Object.entries(params)) {
      if (body[name] !== undefined && body[name] !== value)
        return reply(rec, 400, "The id from the path does not match the id from the body!");
    }
    if (isPreBootOnly(op) && state === "Running")
      return reply(rec, 400, "The requested operation is not supported after starting the microVM.");
    if (isPostBootOnly(op) && state !== "Running")
      return reply(rec, 400, "The requested operation is not supported before starting the microVM.");

    if (req.method === "GET") {
      if (op.template === "/")
        return reply(rec, 200, undefined, {
          id: opts.id ?? "anonymous-instance",
          state,
          vmm_version: api.version,
          app_name: "Firecracker",
        });
      if (op.template === "/version") return reply(rec, 200, undefined, { firecracker_version: api.version });
      if (op.template === "/machine-config")
        return reply(
          rec,
          200,
          undefined,
          config["/machine-config"] ?? { vcpu_count: 1, mem_size_mib: 128, smt: false },
        );
      return reply(rec, 501, `${op.method} ${op.template} is not implemented by the test double.`);
    }
    if (op.template === "/actions") {
      const action = body.action_type;
      if (action === "InstanceStart") {
        if (state === "Running")
          return reply(rec, 400, "The requested operation is not supported after starting the microVM.");
        if (!config["/boot-source"]) return reply(rec, 400, "Cannot start microvm without kernel configuration.");
        state = "Running";
        return reply(rec, 204);
      }
      if (action === "SendCtrlAltDel") {
        if (state !== "Running")
          return reply(rec, 400, "The requested operation is not supported before starting the microVM.");
        if (!opts.ignoreCtrlAltDel) setTimeout(() => opts.onGuestExit?.(), GUEST_SHUTDOWN_MS);
        return reply(rec, 204);
      }
      return reply(rec, 204); // FlushMetrics
    }
    const missing = missingFile(body);
    if (missing) return reply(rec, 400, missing);
    config[url.pathname] = body;
    return reply(rec, 204);
  };

  rmSync(opts.socketPath, { force: true });
  const server = Bun.serve({ unix: opts.socketPath, fetch: handle });
  return {
    requests,
    state: () => state,
    stop: () => {
      server.stop(true);
      rmSync(opts.socketPath, { force: true });
    },
  };
}

function arg(argv: string[], name: string): string | undefined {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
}

if (import.meta.main) {
  const argv = process.argv.slice(2);
  const socketPath = arg(argv, "--api-sock");
  if (!socketPath) {
    console.error("firecracker-double: --api-sock is required");
    process.exit(2);
  }
  const double = await startFirecrackerDouble({
    socketPath,
    ...(arg(argv, "--id") ? { id: arg(argv, "--id")! } : {}),
    ...(arg(argv, "--root") ? { root: arg(argv, "--root")! } : {}),
    ...(arg(argv, "--log") ? { logPath: arg(argv, "--log")! } : {}),
    started: argv.includes("--started"),
    ignoreCtrlAltDel: argv.includes("--ignore-ctrl-alt-del"),
    onGuestExit: () => {
      console.log("firecracker-double: guest rebooted (reboot=k); exiting");
      double.stop();
      process.exit(0);
    },
  });
  console.log(`firecracker-double: listening on ${socketPath}`);
  process.on("SIGTERM", () => {
    if (argv.includes("--ignore-sigterm")) return void console.log("firecracker-double: ignoring SIGTERM");
    double.stop();
    process.exit(143);
  });
}
