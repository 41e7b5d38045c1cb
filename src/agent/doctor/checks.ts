/**
 * The prerequisite registry (spec "Agent runtime and local state": the
 * agent runs "the same prerequisite registry as bb agent doctor" before it
 * accepts commands): KVM or TCG, /dev/net/tun, cgroup controllers per
 * version, root/capabilities, required commands, a probe network namespace
 * with an nftables load, the uplink (when configured), isolation settings,
 * a real test boot of the VMM (doctor/vmmBoot.ts) and scheduler liveness
 * (when configured).
 * Must never: leave the probe namespace behind, or send anything but
 * GET /healthz to the scheduler.
 */
import { closeSync, openSync, readFileSync } from "node:fs";
import type { AgentConfig } from "../config.ts";
import { detectControllers } from "../isolation/cgroups/hierarchy.ts";
import { LIMITED_CONTROLLERS } from "../isolation/cgroups/limits.ts";
import { inNetns, ip, linkExists, nftLoad, runCmd } from "../isolation/exec.ts";
import { isolationFromConfig } from "../isolation/isolation.ts";
import type { CheckResult } from "./format.ts";
import type { VmmDriver } from "../vmm/driver.ts";
import { selectVmmDriver } from "../vmm/select.ts";
import { testKernelOf, vmmBootCheck } from "./vmmBoot.ts";
import { fixHintFor } from "../../domain/osErrorHint.ts";

/** ID of the VMM test boot check (its failure marks the VMM failing, not isolation unhealthy). */
export const VMM_BOOT_CHECK_ID = "vmm-boot";

/** Linux capability numbers the agent needs (linux/capability.h). */
export const REQUIRED_CAPABILITIES = { CAP_NET_ADMIN: 12, CAP_SYS_ADMIN: 21 } as const;
/** Commands the agent runs. */
export const REQUIRED_COMMANDS = ["ip", "nft", "mkfs.ext4", "qemu-system-x86_64", "prlimit"] as const;
/** Scheduler liveness timeout, ms. */
export const HEALTHZ_TIMEOUT_MS = 3_000;

/** Side effects the registry uses; tests replace them. */
export interface DoctorDeps {
  fetch: (url: string, init: { signal: AbortSignal }) => Promise<{ ok: boolean; status: number }>;
  /** The VMM driver the agent would use (default: probed by selectVmmDriver). */
  vmmDriver?: () => Promise<VmmDriver>;
}

/** One registered check. */
export interface PrerequisiteCheck {
  id: string;
  title: string;
  run(config: Partial<AgentConfig> | undefined, deps: DoctorDeps): Promise<Omit<CheckResult, "id" | "title">>;
}

/** Parses the CapEff hex mask of /proc/self/status and tells which of REQUIRED_CAPABILITIES are missing. Pure. */
export function missingCapabilities(procStatus: string): string[] {
  const hex = /^CapEff:\s*([0-9a-fA-F]+)$/m.exec(procStatus)?.[1] ?? "0";
  const eff = BigInt(`0x${hex}`);
  return Object.entries(REQUIRED_CAPABILITIES)
    .filter(([, bit]) => !((eff >> BigInt(bit)) & 1n))
    .map(([n]) => n);
}

function canOpen(path: string): boolean {
  try {
    closeSync(openSync(path, "r+"));
    return true;
  } catch {
    return false;
  }
}

const pass = (detail: string) => ({ status: "pass" as const, detail });
const fail = (detail: string, fix: string) => ({ status: "fail" as const, detail, fix });

/** Every check, in display order. */
export const PREREQUISITES: readonly PrerequisiteCheck[] = [
  {
    id: "kvm",
    title: "Virtualization",
    run: async () => {
      if (canOpen("/dev/kvm"))
        return pass(
          "/dev/kvm opens; the driver test-boots under KVM at its first start and falls back to TCG if that fails",
        );
      if (Bun.which("qemu-system-x86_64"))
        return {
          status: "warn",
          detail: "no usable /dev/kvm: QEMU falls back to TCG (slow)",
          fix: "enable VT-x/AMD-V or nested virtualization and load kvm_intel/kvm_amd",
        };
      return fail(
        "no /dev/kvm and no qemu-system-x86_64 for TCG",
        "apt-get install -y qemu-system-x86 (or run on a KVM host)",
      );
    },
  },
  {
    id: "tun",
    title: "TUN/TAP device",
    run: async () =>
      canOpen("/dev/net/tun")
        ? pass("/dev/net/tun is usable")
        : fail("/dev/net/tun missing or not openable", "modprobe tun and grant the agent /dev/net/tun"),
  },
  {
    id: "cgroups",
    title: "cgroup controllers",
    run: async () => {
      let found: ReturnType<typeof detectControllers>;
      try {
        found = detectControllers();
      } catch (e) {
        return fail(
          `cannot read cgroup mounts: ${(e as Error).message}`,
          "mount cgroup2 (or the v1 cpu, memory, pids hierarchies) under /sys/fs/cgroup",
        );
      }
      const desc = found.map((p) => `${p.controller} v${p.mount.version}`).join(", ");
      const absent = LIMITED_CONTROLLERS.filter((c) => !found.some((p) => p.controller === c));
      return absent.length
        ? fail(
            `missing ${absent.join(", ")}${desc ? ` (have ${desc})` : ""}`,
            "enable the controllers (cgroup v2 subtree_control, or mount the v1 hierarchies)",
          )
        : pass(desc);
    },
  },
  {
    id: "capabilities",
    title: "Privileges",
    run: async () => {
      const missing = missingCapabilities(readFileSync("/proc/self/status", "utf8"));
      const who = process.getuid?.() === 0 ? "root" : `uid ${process.getuid?.()}`;
      return missing.length
        ? fail(
            `${who}, missing ${missing.join(", ")}`,
            "run as root or grant CAP_NET_ADMIN and CAP_SYS_ADMIN (systemd AmbientCapabilities=)",
          )
        : pass(`${who} with CAP_NET_ADMIN and CAP_SYS_ADMIN`);
    },
  },
  ...REQUIRED_COMMANDS.map(
    (cmd): PrerequisiteCheck => ({
      id: `cmd.${cmd}`,
      title: `Command ${cmd}`,
      run: async () => {
        const path = Bun.which(cmd);
        const pkg = {
          ip: "iproute2",
          nft: "nftables",
          "mkfs.ext4": "e2fsprogs",
          "qemu-system-x86_64": "qemu-system-x86",
          prlimit: "util-linux",
        }[cmd];
        return path ? pass(path) : fail("not found in PATH", `apt-get install -y ${pkg}`);
      },
    }),
  ),
  {
    id: "netns-probe",
    title: "Probe network namespace",
    run: async () => {
      const ns = `bb-probe-${process.pid}`;
      const t0 = performance.now();
      const add = await ip(undefined, ["netns", "add", ns]);
      if (add.code !== 0)
        return fail(
          `ip netns add failed: ${add.err}`,
          fixHintFor(add.err, "grant CAP_SYS_ADMIN and access to /run/netns"),
        );
      try {
        await nftLoad(
          ns,
          "table inet bb_probe {\n  chain input { type filter hook input priority filter; policy drop; }\n}\n",
        );
        const tap = await ip(ns, ["tuntap", "add", "dev", "bbprobe0", "mode", "tap"]);
        if (tap.code !== 0)
          return fail(`TAP create failed: ${tap.err}`, fixHintFor(tap.err, "modprobe tun; grant CAP_NET_ADMIN"));
        return pass(`create, TAP, nft load and delete in ${Math.round(performance.now() - t0)} ms`);
      } catch (e) {
        return fail((e as Error).message, fixHintFor(e, "install nftables and load nf_tables (modprobe nf_tables)"));
      } finally {
        await ip(undefined, ["netns", "delete", ns]);
      }
    },
  },
  {
    id: "isolation-config",
    title: "Isolation settings",
    run: async (config) => {
      if (!config) return { status: "skip", detail: "no agent configuration" };
      try {
        const iso = isolationFromConfig(config);
        const u = iso.network.uplink;
        return pass(
          `${u ? `uplink ${u.device}${u.netns ? ` in ${u.netns}` : ""}` : "no uplink (guests have no route off the host)"}; pool ${iso.network.egressPoolCidr}; ${iso.network.dnsResolvers.length} resolvers`,
        );
      } catch (e) {
        return fail((e as Error).message, "fix the named field in agent.json");
      }
    },
  },
  {
    id: "uplink",
    title: "Uplink",
    run: async (config) => {
      const u = config?.uplink;
      if (!u) return { status: "skip", detail: "no uplink configured" };
      const where = u.netns ?? "the root namespace";
      const exists = await linkExists(u.netns, u.device).catch((e: unknown) => e as Error);
      if (exists instanceof Error)
        return fail(exists.message, fixHintFor(exists, "check that `ip link` works for the agent"));
      if (!exists)
        return fail(`device ${u.device} not found in ${where}`, "set uplink.device to the interface that leads out");
      const fwd = (await runCmd(inNetns(u.netns, ["cat", "/proc/sys/net/ipv4/ip_forward"]))).out.trim();
      return fwd === "1"
        ? pass(`${u.device} in ${where}, forwarding on`)
        : fail(
            `net.ipv4.ip_forward=${fwd || "?"} in ${where}`,
            "sysctl -w net.ipv4.ip_forward=1 (persist it in /etc/sysctl.d)",
          );
    },
  },
  {
    id: VMM_BOOT_CHECK_ID,
    title: "VMM test boot",
    run: async (config, deps) => {
      if (!config) return { status: "skip", detail: "no agent configuration" };
      if (!testKernelOf(config))
        return { status: "skip", detail: "no kernel to boot: no image directory with a manifest and no vmmTestKernel" };
      const r = await vmmBootCheck(await (deps.vmmDriver ?? (async () => (await selectVmmDriver()).driver))(), config);
      return r.status === "fail"
        ? fail(
            r.detail,
            "check the VMM binary on PATH (qemu-system-x86_64, or firecracker and jailer) and the kernel; run it by hand to see its error",
          )
        : r;
    },
  },
  {
    id: "scheduler",
    title: "Scheduler liveness",
    run: async (config, deps) => {
      if (!config?.schedulerUrl) return { status: "skip", detail: "no scheduler configured" };
      const url = new URL("/healthz", config.schedulerUrl).toString();
      try {
        const r = await deps.fetch(url, { signal: AbortSignal.timeout(HEALTHZ_TIMEOUT_MS) });
        return r.ok
          ? pass(`GET ${url}: ${r.status}`)
          : fail(`GET ${url}: HTTP ${r.status}`, "check the scheduler deployment and schedulerUrl in agent.json");
      } catch (e) {
        return fail(`GET ${url}: ${(e as Error).message}`, "check network reachability and schedulerUrl in agent.json");
      }
    },
  },
];

/** Real side effects. */
export const REAL_DOCTOR_DEPS: DoctorDeps = { fetch: (url, init) => fetch(url, init) };

/**
 * Runs every registered check in order (the netns probe must not overlap
 * itself, so sequentially) and returns one result each; a throwing check
 * becomes a `fail`. `config` absent: config-dependent checks are skipped.
 */
export async function runChecks(
  config?: Partial<AgentConfig>,
  deps: DoctorDeps = REAL_DOCTOR_DEPS,
  checks: readonly PrerequisiteCheck[] = PREREQUISITES,
): Promise<CheckResult[]> {
  const out: CheckResult[] = [];
  for (const c of checks) {
    try {
      out.push({ id: c.id, title: c.title, ...(await c.run(config, deps)) });
    } catch (e) {
      out.push({
        id: c.id,
        title: c.title,
        status: "fail",
        detail: `check crashed: ${(e as Error).message}`,
        fix: "report this as a bug",
      });
    }
  }
  return out;
}
