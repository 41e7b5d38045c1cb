/**
 * Contract tests of the Firecracker driver against the TEST DOUBLE of
 * Firecracker's API server (firecracker-double.ts), which validates every
 * body against the real OpenAPI document. The spawn port records the exact
 * jailer argv and starts the double as a real detached process at the API
 * socket path that argv implies, so isAlive, stop and signals act on a real
 * PID. Leaves no process, socket or directory behind.
 */
import { afterAll, afterEach, expect, test } from "bun:test";
import {
  chownSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import type { VmHandle, VmSpec } from "../../src/agent/vmm/driver.ts";
import { unixSocketApi } from "../../src/agent/vmm/firecracker/apiClient.ts";
import { AgentError } from "../../src/agent/errors.ts";
import { FirecrackerDriver, type FirecrackerPorts, type SpawnedVmm } from "../../src/agent/vmm/firecracker/driver.ts";
import type { RecordedRequest } from "./firecracker-double.ts";

const work = mkdtempSync(join(tmpdir(), "bb-fc-contract-"));
const DOUBLE = join(import.meta.dir, "firecracker-double.ts");
const spawned: SpawnedVmm[] = [];
let seq = 0;

afterEach(() => {
  for (const p of spawned.splice(0)) if (p.exitCode === null && p.signalCode === null) process.kill(p.pid, "SIGKILL");
});
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** A placement's files: kernel in a cache dir, ext4 root and sparse scratch disk in the allocation dir. */
function fixture(): { spec: VmSpec; base: string; cgroupRoot: string } {
  const base = join(work, `case${++seq}`);
  const cache = join(base, "cache");
  const dir = join(base, "alloc");
  mkdirSync(cache, { recursive: true });
  mkdirSync(join(dir, "logs"), { recursive: true });
  writeFileSync(join(cache, "vmlinux"), "kernel");
  writeFileSync(join(dir, "rootfs.ext4"), "");
  truncateSync(join(dir, "rootfs.ext4"), 64 * 1024 * 1024);
  writeFileSync(join(dir, "scratch.ext4"), "");
  truncateSync(join(dir, "scratch.ext4"), 32 * 1024 * 1024);
  const instanceId = `bb-${seq.toString().padStart(24, "0")}`;
  const spec: VmSpec = {
    instanceId,
    dir,
    vcpus: 2,
    memoryMiB: 256,
    kernelPath: join(cache, "vmlinux"),
    rootDiskPath: join(dir, "rootfs.ext4"),
    netns: instanceId,
    tapName: "bbtap0",
    kernelArgs: ["beachball.generation=3", "beachball.ipv4=10.0.0.2/30"],
    consoleLogPath: join(dir, "logs", "console.log"),
    controlSocketPath: join(dir, "control.sock"),
  };
  return { spec, base, cgroupRoot: join(base, "cgroup") };
}

interface Harness {
  driver: FirecrackerDriver;
  argvs: string[][];
  chowns: [string, number, number][];
  logPath: string;
  log: () => RecordedRequest[];
}

/** A driver whose spawn port plays the jailer: creates the cgroup dir the jailer would, then runs the double at the API socket the argv implies. */
function harness(
  f: ReturnType<typeof fixture>,
  doubleFlags: string[] = [],
  extra: Partial<FirecrackerPorts> = {},
  shutdownWaitMs = 2_000,
): Harness {
  const argvs: string[][] = [];
  const chowns: [string, number, number][] = [];
  const logPath = join(f.base, "requests.ndjson");
  const driver = new FirecrackerDriver({
    firecrackerBinary: "/opt/fc/firecracker",
    jailerBinary: "/opt/fc/jailer",
    chrootBase: join(f.base, "jails"),
    uidRange: { first: 40_000, count: 4 },
    cgroupRoot: f.cgroupRoot,
    startTimeoutMs: 10_000,
    shutdownWaitMs,
    ports: {
      chown: (p, uid, gid) => void chowns.push([p, uid, gid]),
      spawn: (argv, io) => {
        argvs.push(argv);
        const val = (flag: string) => argv[argv.indexOf(flag) + 1]!;
        const root = join(val("--chroot-base-dir"), basename(val("--exec-file")), val("--id"), "root");
        const apiSock = argv[argv.indexOf("--api-sock", argv.indexOf("--")) + 1]!;
        mkdirSync(join(f.cgroupRoot, val("--parent-cgroup"), val("--id")), { recursive: true });
        const p = Bun.spawn(
          [
            process.execPath,
            DOUBLE,
            "--api-sock",
            join(root, apiSock),
            "--id",
            val("--id"),
            "--root",
            root,
            "--log",
            logPath,
            ...doubleFlags,
          ],
          {
            cwd: io.cwd,
            detached: true,
            stdin: "ignore",
            stdout: io.logFd,
            stderr: io.logFd,
          },
        );
        spawned.push(p);
        return p;
      },
      ...extra,
    },
  });
  const log = () =>
    existsSync(logPath)
      ? readFileSync(logPath, "utf8")
          .trim()
          .split("\n")
          .map((l) => JSON.parse(l) as RecordedRequest)
      : [];
  return { driver, argvs, chowns, logPath, log };
}

const procGone = (pid: number) => {
  try {
    return readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.startsWith("Z");
  } catch {
    return true;
  }
};

test("start: exact jailer argv, pre-boot configuration in a valid order, every body valid per the OpenAPI document, then InstanceStart", async () => {
  const f = fixture();
  const h = harness(f);
  const handle = await h.driver.start(f.spec);
  const id = f.spec.instanceId;
  expect(h.argvs).toEqual([
    [
      "/opt/fc/jailer",
      "--id",
      id,
      "--exec-file",
      "/opt/fc/firecracker",
      "--uid",
      "40000",
      "--gid",
      "40000",
      "--chroot-base-dir",
      join(f.base, "jails"),
      "--netns",
      `/var/run/netns/${id}`,
      "--cgroup-version",
      "2",
      "--parent-cgroup",
      "beachball",
      "--cgroup",
      "cpu.max=200000 100000",
      "--cgroup",
      `memory.max=${(256 + 64) * 1024 * 1024}`,
      "--cgroup",
      "memory.swap.max=0",
      "--cgroup",
      "pids.max=64",
      "--resource-limit",
      `fsize=${64 * 1024 * 1024}`,
      "--",
      "--api-sock",
      "/run/firecracker.socket",
    ],
  ]);
  const log = h.log();
  expect(log.map((r) => `${r.method} ${r.path}`)).toEqual([
    "PUT /machine-config",
    "PUT /boot-source",
    "PUT /drives/rootfs",
    "PUT /drives/scratch",
    "PUT /network-interfaces/eth0",
    "PUT /vsock",
    "PUT /actions",
  ]);
  expect(log.filter((r) => r.schemaErrors.length > 0 || r.status !== 204)).toEqual([]);
  expect(log[0]!.body).toEqual({ vcpu_count: 2, mem_size_mib: 256, smt: false });
  expect(log[1]!.body).toEqual({
    kernel_image_path: "/vmlinux",
    boot_args:
      "console=ttyS0 reboot=k panic=1 pci=off root=/dev/vda rw beachball.generation=3 beachball.ipv4=10.0.0.2/30",
  });
  expect(log[2]!.body).toEqual({
    drive_id: "rootfs",
    path_on_host: "/rootfs.ext4",
    is_root_device: true,
    is_read_only: false,
  });
  expect(log[3]!.body).toEqual({
    drive_id: "scratch",
    path_on_host: "/scratch.ext4",
    is_root_device: false,
    is_read_only: false,
  });
  expect((log[4]!.body as { host_dev_name: string }).host_dev_name).toBe("bbtap0");
  expect((log[4]!.body as { guest_mac: string }).guest_mac).toMatch(/^06(:[0-9A-F]{2}){5}$/);
  expect(log[5]!.body).toEqual({ guest_cid: 3, uds_path: "/v.sock" });
  expect(log[6]!.body).toEqual({ action_type: "InstanceStart" });

  const root = h.driver.layout(id).root;
  expect(statSync(join(root, "vmlinux")).ino).toBe(statSync(f.spec.kernelPath).ino); // hard link, not a copy
  expect(statSync(join(root, "rootfs.ext4")).ino).toBe(statSync(f.spec.rootDiskPath).ino);
  const chowned = h.chowns.map(([p]) => p);
  expect(chowned).toEqual(
    expect.arrayContaining([
      root,
      join(root, "run"),
      join(root, "rootfs.ext4"),
      join(root, "scratch.ext4"),
      join(root, "v.sock_1025"),
    ]),
  );
  expect(chowned).not.toContain(join(root, "vmlinux"));
  expect(h.chowns.every(([, u, g]) => u === 40_000 && g === 40_000)).toBe(true);
  expect(readlinkSync(f.spec.controlSocketPath)).toBe(join(root, "v.sock"));

  expect(await h.driver.isAlive(handle)).toBe(true);
  expect(await h.driver.isAlive({ ...handle, startTime: handle.startTime + 1 })).toBe(false);
  expect(await h.driver.isAlive({ ...handle, instanceId: "bb-someone-else" })).toBe(false);

  // A pre-boot call after InstanceStart: the double answers 400 and the driver's client surfaces it typed.
  const err = await unixSocketApi(h.driver.layout(id).apiSocket)
    .put("/machine-config", { vcpu_count: 1, mem_size_mib: 128 })
    .catch((e) => e);
  expect(err).toBeInstanceOf(AgentError);
  expect(err).toMatchObject({
    code: "VMM_START_FAILED",
    subsystem: "firecracker-api",
    facts: { status: 400, faultMessage: "The requested operation is not supported after starting the microVM." },
  });

  // Guest handshake transport: the guest's connection to host port 1025 (Firecracker forwards it to <uds>_1025).
  const guestGot: string[] = [];
  const guest = await Bun.connect({
    unix: join(root, "v.sock_1025"),
    socket: { data: (_s, d) => void guestGot.push(d.toString()) },
  });
  guest.write('{"type":"GuestReady"}\n');
  const channel = await h.driver.connectControl(f.spec, 2_000);
  const hostGot = await new Promise<string>((resolve) => channel.onData(resolve));
  expect(hostGot).toBe('{"type":"GuestReady"}\n');
  channel.send('{"type":"ping"}\n');
  for (let i = 0; i < 100 && guestGot.length === 0; i++) await Bun.sleep(10);
  expect(guestGot.join("")).toBe('{"type":"ping"}\n');
  expect(existsSync(join(root, "v.sock_1025"))).toBe(false); // one connection, then the listener is gone
  guest.end();
  channel.close();

  const t0 = performance.now();
  await h.driver.stop(handle, 5_000);
  expect(performance.now() - t0).toBeLessThan(2_000); // ended by SendCtrlAltDel, not by the SIGTERM grace
  expect(h.log().at(-2)).toMatchObject({ method: "PUT", path: "/machine-config", status: 400 });
  expect(h.log().at(-1)).toMatchObject({
    method: "PUT",
    path: "/actions",
    body: { action_type: "SendCtrlAltDel" },
    status: 204,
    schemaErrors: [],
  });
  expect(readFileSync(f.spec.consoleLogPath, "utf8")).toContain("guest rebooted (reboot=k)");
  expect(procGone(handle.pid)).toBe(true);
  expect(await h.driver.isAlive(handle)).toBe(false);
  expect(existsSync(h.driver.layout(id).jailDir)).toBe(false);
  expect(existsSync(h.driver.cgroupDir(id))).toBe(false);
  expect(existsSync(f.spec.rootDiskPath)).toBe(true); // the allocation's own disk is the agent's to delete
}, 30_000);

test("stop escalates: SendCtrlAltDel ignored, SIGTERM ignored, SIGKILL after the grace period", async () => {
  const f = fixture();
  const h = harness(f, ["--ignore-ctrl-alt-del", "--ignore-sigterm"], {}, 200);
  const handle: VmHandle = await h.driver.start(f.spec);
  const t0 = performance.now();
  await h.driver.stop(handle, 300);
  expect(performance.now() - t0).toBeGreaterThanOrEqual(500); // 200 ms after CtrlAltDel + 300 ms SIGTERM grace
  expect(h.log().at(-1)).toMatchObject({ path: "/actions", body: { action_type: "SendCtrlAltDel" }, status: 204 });
  expect(readFileSync(f.spec.consoleLogPath, "utf8")).toContain("ignoring SIGTERM");
  expect(procGone(handle.pid)).toBe(true);
  expect(existsSync(h.driver.layout(f.spec.instanceId).jailDir)).toBe(false);
}, 30_000);

test("a request Firecracker rejects fails start with a typed VMM_START_FAILED and rolls everything back", async () => {
  const f = fixture();
  const h = harness(f, ["--started"]); // the double is already past InstanceStart: pre-boot calls are refused
  const err = await h.driver.start(f.spec).catch((e) => e);
  expect(err).toBeInstanceOf(AgentError);
  expect(err).toMatchObject({ code: "VMM_START_FAILED", facts: { status: 400, path: "/machine-config" } });
  expect((err as AgentError).facts["faultMessage"]).toContain("not supported after starting");
  expect(h.log()).toHaveLength(1);
  expect(procGone(spawned.at(-1)!.pid)).toBe(true);
  expect(existsSync(h.driver.layout(f.spec.instanceId).jailDir)).toBe(false);
  expect(existsSync(f.spec.controlSocketPath)).toBe(false);
}, 30_000);

test("InstanceStart without a boot source is refused by the double, and start reports Firecracker's fault", async () => {
  const f = fixture();
  const dropBootSource: Partial<FirecrackerPorts> = {
    api: (sock, ms) => {
      const real = unixSocketApi(sock, ms);
      return { get: real.get, put: (p, b) => (p === "/boot-source" ? Promise.resolve() : real.put(p, b)) };
    },
  };
  const h = harness(f, [], dropBootSource);
  const err = await h.driver.start(f.spec).catch((e) => e);
  expect(err).toMatchObject({
    code: "VMM_START_FAILED",
    facts: { status: 400, path: "/actions", faultMessage: "Cannot start microvm without kernel configuration." },
  });
  expect(h.log().map((r) => r.path)).not.toContain("/boot-source");
  expect(procGone(spawned.at(-1)!.pid)).toBe(true);
}, 30_000);

test("start refuses a placement without its scratch disk before spawning anything", async () => {
  const f = fixture();
  rmSync(join(f.spec.dir, "scratch.ext4"));
  const h = harness(f);
  const err = await h.driver.start(f.spec).catch((e) => e);
  expect(err).toMatchObject({ code: "VMM_START_FAILED" });
  expect((err as Error).message).toContain("scratch disk");
  expect(h.argvs).toHaveLength(0);
});

const isRoot = process.getuid?.() === 0;
test.skipIf(!isRoot)(
  "UIDs come from the range: the next free UID while a jail holds one, the lowest again after stop (needs root for real chown)",
  async () => {
    const f1 = fixture();
    const f2 = fixture();
    const f3 = fixture();
    const h = harness(f1, [], { chown: chownSync });
    const uidOf = (i: number) => h.argvs[i]![h.argvs[i]!.indexOf("--uid") + 1];
    const a = await h.driver.start(f1.spec);
    const b = await h.driver.start(f2.spec);
    expect([uidOf(0), uidOf(1)]).toEqual(["40000", "40001"]);
    expect(statSync(h.driver.layout(b.instanceId).root).uid).toBe(40_001);
    await h.driver.stop(a, 2_000);
    const c = await h.driver.start(f3.spec);
    expect(uidOf(2)).toBe("40000");
    await h.driver.stop(b, 2_000);
    await h.driver.stop(c, 2_000);
  },
  30_000,
);
