/**
 * Chooses the VMM driver for this host: Firecracker (production) when KVM and
 * the pinned firecracker and jailer binaries are usable, else QEMU `microvm`
 * (docs/adr/0003-qemu-microvm-beside-firecracker.md).
 *
 * "Usable" is probed, not assumed: /dev/kvm must open read-write, both
 * binaries must be executable files, and `firecracker --version` must exit 0
 * within a bound. None of that proves KVM can run a guest (on a host whose
 * nested KVM refuses MSRs, /dev/kvm opens fine and only a boot fails), so when
 * `kvmProbeKernelPath` is set the selection also boots that kernel under KVM
 * with QEMU (qemuHost.ts probeKvm) and requires it to print "Linux version".
 * Without it, a broken KVM shows up later as VMM_START_FAILED at InstanceStart.
 * Must never: throw (every probe failure selects QEMU and says why).
 */
import { accessSync, closeSync, constants, openSync, statSync } from "node:fs";
import type { VmmDriver } from "./driver.ts";
import { FirecrackerDriver, type FirecrackerDriverOptions } from "./firecracker/driver.ts";
import { QemuMicrovmDriver, type QemuDriverOptions } from "./qemu.ts";
import { probeKvm } from "./qemuHost.ts";

/** How long `firecracker --version` may take, ms. */
export const VERSION_PROBE_TIMEOUT_MS = 3_000;

/** Options of selectVmmDriver. */
export interface VmmSelectionOptions {
  /** Options of the Firecracker driver (its binaries are the ones probed; defaults as in FirecrackerDriverOptions). */
  firecracker?: FirecrackerDriverOptions;
  /** Options of the QEMU fallback. */
  qemu?: QemuDriverOptions;
  /** KVM device (default /dev/kvm). */
  kvmDevice?: string;
  /** When set, a kernel booted under KVM with QEMU must reach "Linux version" (a real KVM probe). */
  kvmProbeKernelPath?: string;
  /** Runs `argv` and resolves true on exit 0 within `timeoutMs` (a port; default Bun.spawn). */
  runsOk?: (argv: string[], timeoutMs: number) => Promise<boolean>;
}

/** The chosen driver and a one-line reason for the agent's log. */
export interface VmmSelection {
  driver: VmmDriver;
  reason: string;
}

/** Default runsOk: Bun.spawn with output discarded, killed after `timeoutMs`. */
async function spawnRunsOk(argv: string[], timeoutMs: number): Promise<boolean> {
  try {
    const p = Bun.spawn(argv, { stdin: "ignore", stdout: "ignore", stderr: "ignore" });
    const timer = setTimeout(() => p.kill("SIGKILL"), timeoutMs);
    const code = await p.exited;
    clearTimeout(timer);
    return code === 0;
  } catch {
    return false;
  }
}

function isExecutableFile(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

/** Why Firecracker cannot be used here, or null when every probe passed. Never throws. */
export async function firecrackerUnusableReason(opts: VmmSelectionOptions = {}): Promise<string | null> {
  const fc = new FirecrackerDriver(opts.firecracker);
  const kvm = opts.kvmDevice ?? "/dev/kvm";
  try {
    closeSync(openSync(kvm, "r+"));
  } catch (e) {
    return `${kvm} cannot be opened read-write (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`;
  }
  for (const bin of [fc.firecrackerBinary, fc.jailerBinary])
    if (!isExecutableFile(bin)) return `${bin} is not an executable file`;
  if (!(await (opts.runsOk ?? spawnRunsOk)([fc.firecrackerBinary, "--version"], VERSION_PROBE_TIMEOUT_MS)))
    return `${fc.firecrackerBinary} --version did not exit 0 within ${VERSION_PROBE_TIMEOUT_MS} ms`;
  if (
    opts.kvmProbeKernelPath &&
    !(await probeKvm(opts.qemu?.qemuBinary ?? "qemu-system-x86_64", opts.kvmProbeKernelPath))
  )
    return `KVM did not boot ${opts.kvmProbeKernelPath} (device present but not working)`;
  return null;
}

/** Firecracker when firecrackerUnusableReason finds nothing, else QemuMicrovmDriver; never throws. */
export async function selectVmmDriver(opts: VmmSelectionOptions = {}): Promise<VmmSelection> {
  const why = await firecrackerUnusableReason(opts);
  if (why === null)
    return {
      driver: new FirecrackerDriver(opts.firecracker),
      reason: "KVM and the pinned firecracker and jailer binaries are usable",
    };
  return { driver: new QemuMicrovmDriver(opts.qemu), reason: `firecracker unusable: ${why}; using QEMU microvm` };
}
