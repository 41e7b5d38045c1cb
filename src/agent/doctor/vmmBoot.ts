/**
 * The VMM test boot (issue "a VMM that cannot start must make the host
 * unhealthy"; spec "Agent runtime and local state": the prerequisite
 * registry): boots the configured kernel with the VMM driver the agent
 * uses, in a throwaway probe namespace with a TAP and an empty root disk,
 * and waits, bounded, for the kernel's first console line. `bb agent
 * doctor` runs it as check `vmm-boot`; the agent runs it at startup and,
 * while its VMM keeps failing, as the self-check that clears the condition.
 * Must never: leave the probe VM, namespace or directory behind, or use a
 * `bb-` name other than the probe prefix (inventory ignores those).
 */
import { mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MANIFEST_FILE_NAME, type ImageManifest } from "../../protocol/image.ts";
import type { AgentConfig } from "../config.ts";
import { AgentError } from "../errors.ts";
import { ip } from "../isolation/exec.ts";
import { PLACEMENT_TAP_NAME } from "../isolation/placementNet.ts";
import { PROBE_PREFIX } from "../inventory.ts";
import type { VmHandle, VmmDriver } from "../vmm/driver.ts";
import { readConsoleTail } from "../vmm/guestExit.ts";
import { SCRATCH_DISK_FILE } from "../vmm/driver.ts";

/** How long the test boot may take to reach the marker, ms (TCG boots print it within about a second). */
export const VMM_TEST_BOOT_TIMEOUT_MS = 30_000;
/** The console line that proves the VMM ran the kernel. */
export const VMM_TEST_BOOT_MARKER = "Linux version";
/** Size of the probe's empty disks, bytes (sparse). */
const PROBE_DISK_BYTES = 1024 * 1024;
/** Guest memory of the probe VM, MiB. */
const PROBE_MEMORY_MIB = 128;

/** Outcome of a test boot. */
export type VmmBootResult = { ok: true; ms: number } | { ok: false; detail: string };

/**
 * The kernel the test boot uses: `vmmTestKernel` from agent.json, else the
 * kernel of the first configured image directory that holds a manifest;
 * null when neither exists.
 */
export function testKernelOf(config: Partial<AgentConfig>): string | null {
  if (config.vmmTestKernel) return config.vmmTestKernel;
  for (const dir of config.imageDirs ?? []) {
    try {
      const m = JSON.parse(readFileSync(join(dir, MANIFEST_FILE_NAME), "utf8")) as ImageManifest;
      if (m.kernel?.path) return join(dir, m.kernel.path);
    } catch {
      /* not an image directory */
    }
  }
  return null;
}

/**
 * Boots `kernelPath` with `driver` and waits up to `timeoutMs` for
 * VMM_TEST_BOOT_MARKER on its console. Never throws: a failure says what
 * the VMM printed or why it did not start. Cleans up in every case.
 */
export async function testBootVmm(
  driver: VmmDriver,
  kernelPath: string,
  timeoutMs = VMM_TEST_BOOT_TIMEOUT_MS,
): Promise<VmmBootResult> {
  const name = `${PROBE_PREFIX}vmm-${process.pid}`;
  const dir = mkdtempSync(join(tmpdir(), `${name}-`));
  const consolePath = join(dir, "console.log");
  const t0 = performance.now();
  let handle: VmHandle | null = null;
  try {
    const add = await ip(undefined, ["netns", "add", name]);
    if (add.code !== 0) return { ok: false, detail: `cannot create the probe namespace: ${add.err}` };
    const tap = await ip(name, ["tuntap", "add", "dev", PLACEMENT_TAP_NAME, "mode", "tap"]);
    if (tap.code !== 0) return { ok: false, detail: `cannot create the probe TAP: ${tap.err}` };
    for (const f of ["rootfs.ext4", SCRATCH_DISK_FILE]) {
      writeFileSync(join(dir, f), "", { mode: 0o600 });
      truncateSync(join(dir, f), PROBE_DISK_BYTES);
    }
    handle = await driver.start({
      instanceId: name,
      dir,
      vcpus: 1,
      memoryMiB: PROBE_MEMORY_MIB,
      kernelPath,
      rootDiskPath: join(dir, "rootfs.ext4"),
      netns: name,
      tapName: PLACEMENT_TAP_NAME,
      kernelArgs: ["loglevel=7"], // after the driver's `quiet`: the marker is a notice-level line
      consoleLogPath: consolePath,
      controlSocketPath: join(dir, "ctl.sock"),
    });
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const text = readConsoleTail(consolePath);
      if (text.includes(VMM_TEST_BOOT_MARKER)) return { ok: true, ms: Math.round(performance.now() - t0) };
      if (!(await driver.isAlive(handle)))
        return {
          ok: false,
          detail: `the VMM exited before the kernel printed "${VMM_TEST_BOOT_MARKER}": ${lastLine(readConsoleTail(consolePath))}`,
        };
      if (performance.now() > deadline)
        return {
          ok: false,
          detail: `no "${VMM_TEST_BOOT_MARKER}" on the console within ${timeoutMs} ms: ${lastLine(text)}`,
        };
      await Bun.sleep(50);
    }
  } catch (e) {
    return { ok: false, detail: AgentError.from(e, "VMM_START_FAILED", "vmm").chain(600) };
  } finally {
    if (handle) await driver.stop(handle, 1_000).catch(() => undefined);
    await ip(undefined, ["netns", "delete", name]);
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The `vmm-boot` check's outcome for `driver` and the configured kernel (skip when there is none). Never throws. */
export async function vmmBootCheck(
  driver: VmmDriver,
  config: Partial<AgentConfig>,
): Promise<{ status: "pass" | "fail" | "skip"; detail: string }> {
  const kernel = testKernelOf(config);
  if (!kernel)
    return { status: "skip", detail: "no kernel to boot: no image directory with a manifest and no vmmTestKernel" };
  const r = await testBootVmm(driver, kernel);
  return r.ok
    ? { status: "pass", detail: `${driver.name} booted ${kernel} to "${VMM_TEST_BOOT_MARKER}" in ${r.ms} ms` }
    : { status: "fail", detail: `${driver.name}: ${r.detail}` };
}

function lastLine(text: string): string {
  const lines = text
    .replaceAll("\r", "")
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean);
  return (lines.slice(-3).join(" | ") || "(empty console)").slice(0, 400);
}
