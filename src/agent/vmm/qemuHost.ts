/**
 * Host facts the QEMU driver needs: the TSC frequency (guests under TCG hang
 * calibrating it without `tsc_early_khz`; docs/architecture.md, "Booting without KVM") and the driver's
 * error constructor.
 *
 * Must never: guess silently; a frequency that cannot be read falls back to
 * /proc/cpuinfo's `cpu MHz` and, failing that, throws.
 */
import { readFile } from "node:fs/promises";
import { AgentError } from "../errors.ts";

/** The VMM subsystem's start failure: an AgentError with code VMM_START_FAILED. */
export function vmmError(msg: string, cause?: unknown): AgentError {
  return new AgentError("VMM_START_FAILED", msg, { subsystem: "vmm", ...(cause === undefined ? {} : { cause }) });
}

let cachedKhz: number | undefined;

/** Parses the TSC frequency in kHz from kernel log text (refined calibration preferred). */
export function parseTscKhzFromKernelLog(text: string): number | undefined {
  const refined = /Refined TSC clocksource calibration: ([0-9.]+) MHz/.exec(text);
  const detected = /tsc: Detected ([0-9.]+) MHz processor/.exec(text);
  const mhz = Number((refined ?? detected)?.[1]);
  return Number.isFinite(mhz) && mhz > 0 ? Math.round(mhz * 1000) : undefined;
}

/**
 * The host TSC frequency in kHz, read once: from the kernel log (`dmesg`),
 * else from /proc/cpuinfo `cpu MHz`. Throws VMM_START_FAILED when neither
 * yields a value.
 */
export async function hostTscKhz(): Promise<number> {
  if (cachedKhz) return cachedKhz;
  try {
    const p = Bun.spawn(["dmesg"], { stdout: "pipe", stderr: "ignore" });
    const khz = parseTscKhzFromKernelLog(await new Response(p.stdout).text());
    await p.exited;
    if (khz) return (cachedKhz = khz);
  } catch {}
  const cpuinfo = await readFile("/proc/cpuinfo", "utf8").catch(() => "");
  const mhz = Number(/^cpu MHz\s*:\s*([0-9.]+)/m.exec(cpuinfo)?.[1]);
  if (Number.isFinite(mhz) && mhz > 0) return (cachedKhz = Math.round(mhz * 1000));
  throw vmmError("cannot determine the host TSC frequency (dmesg and /proc/cpuinfo)");
}

/** How long the KVM probe waits for the kernel's first console line, ms. */
const KVM_PROBE_TIMEOUT_MS = 4000;

/**
 * True when QEMU can really boot `kernelPath` under KVM: starts a throwaway
 * microvm with `-accel kvm -cpu host` and waits up to 4 s for "Linux
 * version" on its serial console, then kills it by PID. A /dev/kvm that
 * exists but fails (nested KVM refusing MSRs, or hanging) yields false.
 * Never throws.
 */
export async function probeKvm(qemuBinary: string, kernelPath: string): Promise<boolean> {
  let p: ReturnType<typeof Bun.spawn> | undefined;
  try {
    p = Bun.spawn(
      [
        qemuBinary,
        "-M",
        "microvm",
        "-accel",
        "kvm",
        "-cpu",
        "host",
        "-m",
        "128",
        "-nodefaults",
        "-no-user-config",
        "-nographic",
        "-no-reboot",
        "-serial",
        "stdio",
        "-kernel",
        kernelPath,
        "-append",
        "console=ttyS0 panic=-1 reboot=k",
      ],
      { stdin: "ignore", stdout: "pipe", stderr: "ignore" },
    );
    const reader = (p.stdout as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    let seen = "";
    const timeout = Bun.sleep(KVM_PROBE_TIMEOUT_MS).then(() => null);
    for (;;) {
      const r = await Promise.race([reader.read(), timeout]);
      if (!r || r.done) return false;
      seen = (seen + decoder.decode(r.value, { stream: true })).slice(-4096);
      if (seen.includes("Linux version")) return true;
    }
  } catch {
    return false;
  } finally {
    if (p && p.exitCode === null) p.kill("SIGKILL");
  }
}
