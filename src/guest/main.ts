/**
 * The guest bootstrap (`bb guest`), PID 1 inside a Beachball VM (or a
 * service under systemd in the reference image): announces the guest over
 * the control channel, answers pings, runs the one delivered payload the
 * way the image asks (workload.ts), reaps orphans and forwards signals to
 * the workload when it is PID 1, and powers off on request.
 *
 * Implements spec "Guest handshake" and the in-memory bootstrap hand-off of
 * "One allocation end to end" (markers per "Images"). With
 * `--workload-root DIR` (squashfs images: the initramfs mounted the
 * workload's root there) it enters that root with chroot(2) once the
 * control port is open. Must never: write payload bytes to a disk or the
 * console, run more than one payload per boot, or exit (PID 1 exiting
 * panics the kernel; shutdown goes through reboot(2) so QEMU exits).
 */
import { closeSync, openSync, readdirSync, readFileSync, writeSync } from "node:fs";
import { createHash, randomBytes } from "node:crypto";
import {
  GUEST_CMDLINE_KEYS,
  type GuestIdentity,
  type GuestToHost,
  NdjsonDecoder,
  encodeGuestMessage,
} from "../protocol/guest.ts";
import { PortChannel, findControlPort } from "./channel.ts";
import { enterRoot, loadLibc, reapIfZombie, syncAndReboot } from "./libc.ts";
import { type RunningWorkload, type WorkloadPlan, startWorkload, workloadPlan } from "./workload.ts";

export { SHELL_SCRIPT_CONTENT_TYPE } from "./workload.ts";

/** Where the initramfs leaves private kernel arguments (see src/agent/vmm/initrdFragment.ts). */
export const PRIVATE_ARGS_FILE = "/etc/beachball/kernel-args";

/** Version reported in guest_ready. */
export const GUEST_VERSION = "0.1.0";
/** How long to wait for the control port to appear at boot, ms. */
const PORT_WAIT_MS = 10_000;
/** How long a running workload has to exit after SIGTERM when the host asks for shutdown, ms. */
export const SHUTDOWN_GRACE_MS = 2_000;
/** How often PID 1 looks for orphaned zombies to reap, ms. */
const REAP_INTERVAL_MS = 1_000;
/** Signals PID 1 passes on to the running workload. */
const FORWARDED_SIGNALS: NodeJS.Signals[] = ["SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"];

/** Parses the guest identity from a kernel command line. Throws when a key is missing or malformed. */
export function parseGuestIdentity(cmdline: string): GuestIdentity {
  const kv = new Map<string, string>();
  for (const tok of cmdline.trim().split(/\s+/)) {
    const eq = tok.indexOf("=");
    if (eq > 0) kv.set(tok.slice(0, eq), tok.slice(eq + 1));
  }
  const get = (k: string) => {
    const v = kv.get(k);
    if (!v) throw new Error(`kernel command line lacks ${k}`);
    return v;
  };
  const generation = Number(get(GUEST_CMDLINE_KEYS.generation));
  if (!Number.isSafeInteger(generation) || generation < 0) throw new Error(`bad ${GUEST_CMDLINE_KEYS.generation}`);
  return {
    allocationId: get(GUEST_CMDLINE_KEYS.allocationId),
    placementId: get(GUEST_CMDLINE_KEYS.placementId),
    generation,
    nonce: get(GUEST_CMDLINE_KEYS.nonce),
  };
}

/** Private kernel arguments the host handed over outside the command line (the initramfs copies them here), or "". */
function readPrivateArgs(): string {
  try {
    return readFileSync(PRIVATE_ARGS_FILE, "utf8");
  } catch {
    return "";
  }
}

function consoleLine(text: string): void {
  try {
    const fd = openSync("/dev/console", "w");
    writeSync(fd, `${text}\n`);
    closeSync(fd);
  } catch {
    process.stderr.write(`${text}\n`);
  }
}

/** Reaps orphaned zombies (children of PID 1 that are not ours) found in /proc. */
function reapOrphans(own: Set<number>): void {
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name) || own.has(Number(name))) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (f[0] === "Z" && f[1] === String(process.pid)) reapIfZombie(Number(name));
    } catch {
      /* gone meanwhile */
    }
  }
}

/** Options of runGuest. */
export interface GuestOptions {
  /** The workload's root (squashfs images: mounted by the initramfs); entered with chroot(2) after the port is open. */
  workloadRoot?: string;
}

/**
 * The guest main loop. Finds and opens the `ctl` port once, enters the
 * workload root when given, sends guest_ready (identity from /proc/cmdline
 * and the private arguments, random bootId), then serves host messages
 * forever. Throws only at startup (no port, no identity, a malformed
 * workload.json); the caller being PID 1, that panics the kernel and QEMU
 * exits (panic=1, -no-reboot).
 */
export async function runGuest(opts: GuestOptions = {}): Promise<never> {
  const identity = parseGuestIdentity(`${readFileSync("/proc/cmdline", "utf8")} ${readPrivateArgs()}`);
  const port = new PortChannel(await findControlPort(PORT_WAIT_MS));
  const send = (m: GuestToHost) =>
    port.send(encodeGuestMessage(m)).catch((e) => consoleLine(`beachball-guest: send failed: ${e}`));
  const bootId = randomBytes(16).toString("hex");
  loadLibc();
  if (opts.workloadRoot) enterRoot(opts.workloadRoot);
  const plan: WorkloadPlan = workloadPlan();
  let delivered: { deliveryId: string; digest: string } | null = null;
  let running: RunningWorkload | null = null;
  const own = new Set<number>();

  if (process.pid === 1) {
    setInterval(() => reapOrphans(own), REAP_INTERVAL_MS);
    for (const sig of FORWARDED_SIGNALS) process.on(sig, () => running?.kill(sig));
  }

  const onBootstrap = (deliveryId: string, contentType: string, dataBase64: string) => {
    if (delivered) {
      if (delivered.deliveryId === deliveryId) void send({ type: "bootstrap_consumed", ...delivered });
      else void send({ type: "bootstrap_rejected", deliveryId, reason: "a payload was already consumed in this boot" });
      return;
    }
    const refused = plan.refuses(contentType);
    if (refused) {
      void send({ type: "bootstrap_rejected", deliveryId, reason: refused });
      return;
    }
    const bytes = new Uint8Array(Buffer.from(dataBase64, "base64"));
    delivered = { deliveryId, digest: `sha256:${createHash("sha256").update(bytes).digest("hex")}` };
    // The receipt leaves the guest before the payload runs: a payload that crashes the VM was still consumed.
    void send({ type: "bootstrap_consumed", ...delivered }).then(() => {
      try {
        const w = startWorkload(plan, bytes, contentType);
        running = w;
        own.add(w.pid);
        void send({ type: "workload_started", deliveryId });
        void w.exited.then((exitCode) => {
          running = null;
          own.delete(w.pid);
          return send({ type: "workload_exited", deliveryId, exitCode });
        });
      } catch (e) {
        consoleLine(`beachball-guest: payload failed to start: ${e}`);
        void send({ type: "workload_exited", deliveryId, exitCode: 127 });
      }
    });
  };

  const shutdown = async () => {
    const w = running;
    if (w) {
      w.kill("SIGTERM");
      const gone = await Promise.race([w.exited.then(() => true), Bun.sleep(SHUTDOWN_GRACE_MS).then(() => false)]);
      if (!gone) w.kill("SIGKILL");
    }
    await send({ type: "shutting_down" });
    try {
      syncAndReboot();
    } catch (e) {
      consoleLine(`beachball-guest: reboot(2) failed: ${e}`);
    }
  };

  const onMessage = (m: Record<string, unknown>) => {
    switch (m.type) {
      case "ping":
        if (typeof m.id === "string") void send({ type: "pong", id: m.id });
        break;
      case "identify":
        void send({ type: "guest_ready", bootId, guestVersion: GUEST_VERSION, ...identity });
        break;
      case "bootstrap":
        if (typeof m.deliveryId === "string" && typeof m.contentType === "string" && typeof m.dataBase64 === "string") {
          onBootstrap(m.deliveryId, m.contentType, m.dataBase64);
        }
        break;
      case "shutdown":
        void shutdown();
        break;
      default: // ready_ack and unknown types: nothing to do
    }
  };

  void send({ type: "guest_ready", bootId, guestVersion: GUEST_VERSION, ...identity });
  const up = readFileSync("/proc/uptime", "utf8").split(" ")[0];
  consoleLine(`beachball-guest: ready (${plan.kind} workload) at ${up}s`);
  let decoder = new NdjsonDecoder();
  return port.readLoop((chunk) => {
    let messages: Record<string, unknown>[] = [];
    try {
      messages = decoder.push(chunk).messages;
    } catch {
      decoder = new NdjsonDecoder(); // over-long line: drop it and resync
    }
    for (const m of messages) onMessage(m);
  });
}
