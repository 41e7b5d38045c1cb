/**
 * The guest bootstrap (`bb guest`), PID 1 inside a Beachball VM: announces
 * the guest over the control channel, answers pings, runs the one delivered
 * payload with /bin/sh, and powers off on request.
 *
 * Implements spec "Guest handshake" and the in-memory bootstrap hand-off of
 * "One allocation end to end" (reference image: text/x-shellscript via
 * /bin/sh; markers per "Images"). Must never: write payload bytes to disk or
 * the console, run more than one payload per boot, or exit (PID 1 exiting
 * panics the kernel; shutdown goes through reboot(2) so QEMU exits).
 */
import { closeSync, openSync, readFileSync, writeSync } from "node:fs";
import { createHash, randomBytes } from "node:crypto";
import { constants } from "node:os";
import {
  GUEST_CMDLINE_KEYS, type GuestIdentity, type GuestToHost, JOB_EXIT_MARKER, JOB_START_MARKER, NdjsonDecoder, encodeGuestMessage,
} from "../protocol/guest.ts";
import { PortChannel, findControlPort } from "./channel.ts";

/** Where the initramfs leaves private kernel arguments (see src/agent/vmm/initrdFragment.ts). */
export const PRIVATE_ARGS_FILE = "/etc/beachball/kernel-args";

/** Version reported in guest_ready. */
export const GUEST_VERSION = "0.1.0";
/** The one payload content type the reference guest runs. */
export const SHELL_SCRIPT_CONTENT_TYPE = "text/x-shellscript";
/** How long to wait for the control port to appear at boot, ms. */
const PORT_WAIT_MS = 10_000;
/** Runs the payload from memory: the script arrives on stdin, stdin is then detached from it. */
const SHELL_RUNNER = 'script=$(cat); exec </dev/null; eval "$script"';

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

/** Runs `script` with /bin/sh, stdout and stderr on the console, between the job markers. Returns the exit code. */
async function runPayload(script: Uint8Array, onStarted: () => void): Promise<number> {
  const consoleFd = openSync("/dev/console", "w");
  try {
    writeSync(consoleFd, `${JOB_START_MARKER}\n`);
    const p = Bun.spawn(["/bin/sh", "-c", SHELL_RUNNER], {
      stdin: script, stdout: consoleFd, stderr: consoleFd, cwd: "/root",
      env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin", HOME: "/root" },
    });
    onStarted();
    const code = await p.exited;
    const sig = p.signalCode;
    const exitCode = sig === null || sig === undefined ? code : 128 + (typeof sig === "number" ? sig : (constants.signals[sig] ?? 0));
    writeSync(consoleFd, `${JOB_EXIT_MARKER} ${exitCode}\n`);
    return exitCode;
  } finally {
    closeSync(consoleFd);
  }
}

/**
 * The guest main loop. Finds and opens the `ctl` port once, sends
 * guest_ready (identity from /proc/cmdline, random bootId), then serves host
 * messages forever. Throws only at startup (no port, no identity); the
 * caller being PID 1, that panics the kernel and QEMU exits (panic=1,
 * -no-reboot).
 */
export async function runGuest(): Promise<never> {
  const identity = parseGuestIdentity(`${readFileSync("/proc/cmdline", "utf8")} ${readPrivateArgs()}`);
  const port = new PortChannel(await findControlPort(PORT_WAIT_MS));
  const send = (m: GuestToHost) => port.send(encodeGuestMessage(m)).catch((e) => consoleLine(`beachball-guest: send failed: ${e}`));
  const bootId = randomBytes(16).toString("hex");
  let delivered: { deliveryId: string; digest: string } | null = null;

  const onBootstrap = (deliveryId: string, contentType: string, dataBase64: string) => {
    if (delivered) {
      if (delivered.deliveryId === deliveryId) void send({ type: "bootstrap_consumed", ...delivered });
      else void send({ type: "bootstrap_rejected", deliveryId, reason: "a payload was already consumed in this boot" });
      return;
    }
    if (contentType !== SHELL_SCRIPT_CONTENT_TYPE) {
      void send({ type: "bootstrap_rejected", deliveryId, reason: `unsupported content type ${contentType}` });
      return;
    }
    const bytes = new Uint8Array(Buffer.from(dataBase64, "base64"));
    delivered = { deliveryId, digest: `sha256:${createHash("sha256").update(bytes).digest("hex")}` };
    void send({ type: "bootstrap_consumed", ...delivered });
    runPayload(bytes, () => void send({ type: "workload_started", deliveryId }))
      .then((exitCode) => send({ type: "workload_exited", deliveryId, exitCode }))
      .catch((e) => consoleLine(`beachball-guest: payload failed to start: ${e}`));
  };

  const onMessage = async (m: Record<string, unknown>) => {
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
        await send({ type: "shutting_down" });
        Bun.spawnSync(["/bin/busybox", "sync"]);
        Bun.spawnSync(["/bin/busybox", "reboot", "-f"]);
        break;
      default: // ready_ack and unknown types: nothing to do
    }
  };

  void send({ type: "guest_ready", bootId, guestVersion: GUEST_VERSION, ...identity });
  let decoder = new NdjsonDecoder();
  return port.readLoop((chunk) => {
    let messages: Record<string, unknown>[] = [];
    try {
      messages = decoder.push(chunk).messages;
    } catch {
      decoder = new NdjsonDecoder(); // over-long line: drop it and resync
    }
    for (const m of messages) void onMessage(m);
  });
}
