/**
 * Contract tests of the Firecracker driver against the TEST DOUBLE of
 * Firecracker's API server (firecracker-double.ts), which validates every
 * body against the real OpenAPI document. The spawn port records the exact
 * jailer argv and starts the double as a real detached process at the API
 * socket path that argv implies, so isAlive, stop and signals act on a real
 * PID. Leaves no process, socket or directory behind.
 */
import { afterAll, afterEach, expect, test } from "bun:test";
import { fixture, harness, killSpawned, procGone, removeWork, spawned } from "./firecracker-harness.ts";
import { chownSync, existsSync, readFileSync, readlinkSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import type { VmHandle } from "../../src/agent/vmm/driver.ts";
import { unixSocketApi } from "../../src/agent/vmm/firecracker/apiClient.ts";
import { AgentError } from "../../src/agent/errors.ts";
import type { FirecrackerPorts } from "../../src/agent/vmm/firecracker/driver.ts";

afterEach(killSpawned);
afterAll(removeWork);

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
      `fsize=${256 * 1024 * 1024}`, // the guest's 256 MiB (a suspend's memory file), above the 64 MiB root disk
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
      return {
        get: real.get,
        patch: real.patch,
        put: (p, b) => (p === "/boot-source" ? Promise.resolve() : real.put(p, b)),
      };
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
