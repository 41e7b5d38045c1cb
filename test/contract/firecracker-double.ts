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
 *   operations are refused after InstanceStart (or a snapshot load),
 *   "Post-boot only" ones before it; InstanceStart needs a boot source; a
 *   drive's or interface's path ID must equal the body's ID; with `root`,
 *   files the body names must exist inside the jail root (Firecracker opens
 *   them chrooted);
 * - follows snapshot-support.md's state machine: `PATCH /vm` only after boot
 *   (Paused and Resumed are idempotent), `/snapshot/create` only while
 *   Paused, `/snapshot/load` only on a fresh process (nothing configured but
 *   the logger and metrics) with exactly one of mem_file_path and
 *   mem_backend, network overrides naming an interface of the snapshot, and
 *   a state file of its own version; a failed load ends the process
 *   (onFatal), as Firecracker does. Snapshot files are small FAKES: a JSON
 *   state file (version, configuration) and a sparse memory file as long as
 *   the guest's RAM (so a file-size limit bites as it would) holding a few
 *   KiB; a load only reads them (the real one maps the memory MAP_PRIVATE);
 * - on SendCtrlAltDel while running, ends like a guest rebooting with
 *   `reboot=k` (calls onGuestExit) unless told to ignore it; a paused guest
 *   cannot react;
 * - records every request, in order, with its validation result.
 *
 * Run as a process (what the driver tests spawn in the jailer's place):
 *   bun test/contract/firecracker-double.ts --api-sock P --id ID [--root DIR]
 *     [--log FILE.ndjson] [--ignore-ctrl-alt-del] [--ignore-sigterm] [--started]
 * Must never: be imported by production code.
 */
import {
  appendFileSync,
  closeSync,
  existsSync,
  openSync,
  readFileSync,
  readSync,
  rmSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { dirname, join } from "node:path";
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
  /** Called after a failed /snapshot/load has been answered (Firecracker ends the process then). */
  onFatal?: () => void;
}

/** The instance states of firecracker.yaml InstanceInfo. */
export type DoubleState = "Not started" | "Running" | "Paused";

/** What the double writes as a snapshot's state file (a FAKE; Firecracker's is a binary format). */
export interface FakeVmState {
  format: typeof FAKE_STATE_FORMAT;
  firecracker_version: string;
  /** Every configured resource, by request path, as PUT. */
  config: Record<string, unknown>;
}

/** Marker of the double's fake state files. */
export const FAKE_STATE_FORMAT = "beachball-firecracker-double-vmstate";
/** Bytes the double writes into its sparse fake memory file (a real one holds all guest RAM). */
export const FAKE_MEMORY_BYTES = 4096;
/** Resources that may be configured before a snapshot load (firecracker.yaml /snapshot/load). */
const LOAD_ALLOWED_CONFIG = new Set(["/logger", "/metrics"]);

/** A running double. */
export interface FirecrackerDouble {
  readonly requests: RecordedRequest[];
  readonly state: () => DoubleState;
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
  let state: DoubleState = opts.started ? "Running" : "Not started";
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
    const backend = body.mem_backend as { backend_path?: unknown } | undefined;
    for (const [k, v] of [
      ...["kernel_image_path", "initrd_path", "path_on_host", "snapshot_path", "mem_file_path"].map(
        (k) => [k, body[k]] as const,
      ),
      ["mem_backend.backend_path", backend?.backend_path] as const,
    ]) {
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
    if (isPreBootOnly(op) && state !== "Not started")
      return reply(rec, 400, "The requested operation is not supported after starting the microVM.");
    if ((isPostBootOnly(op) || op.template === "/vm") && state === "Not started")
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
    if (op.template === "/vm" && req.method === "PATCH") {
      state = body.state === "Paused" ? "Paused" : "Running"; // both idempotent (snapshot-support.md)
      return reply(rec, 204);
    }
    if (op.template === "/snapshot/create") return createSnapshot(rec, body);
    if (op.template === "/snapshot/load") return loadSnapshot(rec, body);
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
        if (state === "Not started")
          return reply(rec, 400, "The requested operation is not supported before starting the microVM.");
        if (!opts.ignoreCtrlAltDel && state === "Running") setTimeout(() => opts.onGuestExit?.(), GUEST_SHUTDOWN_MS);
        return reply(rec, 204);
      }
      return reply(rec, 204); // FlushMetrics
    }
    const missing = missingFile(body);
    if (missing) return reply(rec, 400, missing);
    config[url.pathname] = body;
    return reply(rec, 204);
  };

  const inRoot = (p: string) => (opts.root ? join(opts.root, p) : p);

  const createSnapshot = (rec: RecordedRequest, body: Record<string, unknown>): Response => {
    if (state !== "Paused") return reply(rec, 400, "Cannot create a snapshot: the microVM is not paused.");
    const statePath = inRoot(body.snapshot_path as string);
    const memPath = inRoot(body.mem_file_path as string);
    for (const p of [statePath, memPath])
      if (!existsSync(dirname(p))) return reply(rec, 400, `${p}: No such file or directory (os error 2)`);
    const fake: FakeVmState = { format: FAKE_STATE_FORMAT, firecracker_version: api.version, config };
    try {
      writeFileSync(statePath, JSON.stringify(fake)); // Firecracker truncates and overwrites existing files
      // As long as the guest's RAM (so the process's RLIMIT_FSIZE applies as to Firecracker), but sparse:
      // only FAKE_MEMORY_BYTES are written.
      const memMiB = (config["/machine-config"] as { mem_size_mib?: number } | undefined)?.mem_size_mib ?? 128;
      writeFileSync(memPath, Buffer.alloc(FAKE_MEMORY_BYTES, 0xbb));
      truncateSync(memPath, memMiB * 1024 * 1024);
    } catch (e) {
      return reply(rec, 400, `Cannot create snapshot: ${(e as Error).message}`); // e.g. EFBIG past RLIMIT_FSIZE
    }
    return reply(rec, 204);
  };

  const backendOf = (body: Record<string, unknown>) =>
    (body.mem_backend as { backend_path?: string } | undefined)?.backend_path;

  const loadFailed = (rec: RecordedRequest, fault: string): Response => {
    const r = reply(rec, 400, fault);
    setTimeout(() => opts.onFatal?.(), 0);
    return r;
  };

  const loadSnapshot = (rec: RecordedRequest, body: Record<string, unknown>): Response => {
    if (Object.keys(config).some((k) => !LOAD_ALLOWED_CONFIG.has(k)))
      return reply(rec, 400, "Loading a microVM snapshot not allowed after configuring boot-specific resources.");
    if ((body.mem_file_path === undefined) === (body.mem_backend === undefined))
      return reply(rec, 400, "Exactly one of mem_file_path and mem_backend must be given.");
    const missing = missingFile(body);
    if (missing) return loadFailed(rec, missing);
    let fake: FakeVmState;
    try {
      fake = JSON.parse(readFileSync(inRoot(body.snapshot_path as string), "utf8")) as FakeVmState;
      if (fake.format !== FAKE_STATE_FORMAT) throw new Error("not a state file");
    } catch {
      return loadFailed(rec, "Load snapshot error: cannot deserialize the microVM state.");
    }
    if (fake.firecracker_version !== api.version)
      return loadFailed(rec, `Load snapshot error: snapshot version ${fake.firecracker_version} is not supported.`);
    const ifaces = Object.values(fake.config)
      .map((c) => (c as { iface_id?: unknown }).iface_id)
      .filter((id) => typeof id === "string");
    for (const o of (body.network_overrides ?? []) as { iface_id: string }[])
      if (!ifaces.includes(o.iface_id))
        return loadFailed(rec, `Load snapshot error: network override for unknown interface ${o.iface_id}.`);
    for (const c of Object.values(fake.config)) {
      const gone = missingFile(c as Record<string, unknown>);
      if (gone && !("kernel_image_path" in (c as object))) return loadFailed(rec, `Load snapshot error: ${gone}`);
    }
    // Only opened and its first page read, read-only: Firecracker maps the file MAP_PRIVATE and
    // faults pages in on demand, never writing it.
    const memFd = openSync(inRoot((backendOf(body) ?? body.mem_file_path) as string), "r");
    try {
      readSync(memFd, Buffer.alloc(FAKE_MEMORY_BYTES), 0, FAKE_MEMORY_BYTES, 0);
    } finally {
      closeSync(memFd);
    }
    Object.assign(config, fake.config);
    state = body.resume_vm === true ? "Running" : "Paused";
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
    onFatal: () => {
      console.log("firecracker-double: snapshot load failed; exiting");
      double.stop();
      process.exit(1);
    },
  });
  console.log(`firecracker-double: listening on ${socketPath}`);
  process.on("SIGTERM", () => {
    if (argv.includes("--ignore-sigterm")) return void console.log("firecracker-double: ignoring SIGTERM");
    double.stop();
    process.exit(143);
  });
}
