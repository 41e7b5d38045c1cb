/**
 * Contract tests of the Firecracker driver's pause, resume, suspend and restore (issue 21)
 * against the TEST DOUBLE of Firecracker's API server (firecracker-double.ts): every request
 * is checked against the real OpenAPI document and snapshot-support.md's state machine, the
 * double runs as a real process under the jailer's RLIMIT_FSIZE, and the snapshot files are
 * the double's small fakes. Leaves no process, socket or directory behind.
 */
import { afterAll, afterEach, expect, test } from "bun:test";
import {
  chmodSync,
  closeSync,
  cpSync,
  existsSync,
  mkdirSync,
  openSync,
  readFileSync,
  readlinkSync,
  readSync,
  statSync,
} from "node:fs";
import { join } from "node:path";
import type { VmSnapshot } from "../../src/agent/vmm/driver.ts";
import { unixSocketApi } from "../../src/agent/vmm/firecracker/apiClient.ts";
import type { FirecrackerPorts } from "../../src/agent/vmm/firecracker/driver.ts";
import { AgentError } from "../../src/agent/errors.ts";
import { fixture, harness, killSpawned, procGone, removeWork } from "./firecracker-harness.ts";
import { FAKE_STATE_FORMAT } from "./firecracker-double.ts";
import { loadOpenApi } from "./openapi.ts";

afterEach(killSpawned);
afterAll(removeWork);

const doc = await loadOpenApi();
/** What would change if a restore touched a snapshot file: its first 64 KiB (the double's fake memory is a few KiB, the rest a hole), size, mtime, inode and mode. */
const fingerprint = (p: string) => {
  const st = statSync(p);
  const buf = Buffer.alloc(64 * 1024);
  const fd = openSync(p, "r");
  const n = readSync(fd, buf, 0, buf.length, 0);
  closeSync(fd);
  const head = new Bun.CryptoHasher("sha256").update(buf.subarray(0, n)).digest("hex");
  return [head, st.size, st.mtimeMs, st.ino, st.mode]; // not ctime: a hard link into a jail changes it
};
const snapshotDirOf = (f: ReturnType<typeof fixture>) => {
  const d = join(f.base, "snapshot");
  mkdirSync(d);
  return d;
};

test("pause and resume: PATCH /vm Paused and Resumed, idempotent, each body valid per the OpenAPI document", async () => {
  const f = fixture();
  const h = harness(f);
  const handle = await h.driver.start(f.spec);
  const info = () => unixSocketApi(h.driver.layout(f.spec.instanceId).apiSocket).get("/");
  await h.driver.pause(handle);
  await h.driver.pause(handle);
  expect(await info()).toMatchObject({ state: "Paused" });
  await h.driver.resume(handle);
  await h.driver.resume(handle);
  expect(await info()).toMatchObject({ state: "Running" });
  const vm = h.log().filter((r) => r.path === "/vm");
  expect(vm.map((r) => [r.method, r.body, r.status, r.schemaErrors])).toEqual([
    ["PATCH", { state: "Paused" }, 204, []],
    ["PATCH", { state: "Paused" }, 204, []],
    ["PATCH", { state: "Resumed" }, 204, []],
    ["PATCH", { state: "Resumed" }, 204, []],
  ]);
  await h.driver.stop(handle, 2_000);
  const err = await h.driver.pause(handle).catch((e) => e);
  expect(err).toBeInstanceOf(AgentError);
  expect(err).toMatchObject({ code: "VMM_CONTROL_FAILED", subsystem: "firecracker-api" });
}, 30_000);

test("suspend then restore twice: snapshot/create while paused, files out of the jail read-only, load copy-on-write with the new TAP, snapshot never modified", async () => {
  const f = fixture();
  const h = harness(f);
  const handle = await h.driver.start(f.spec);
  await h.driver.pause(handle);
  await h.driver.resume(handle);
  const dir = snapshotDirOf(f);
  const snap = await h.driver.suspend(handle, f.spec, dir);

  const suspendLog = h.log().slice(9); // after the 7 boot requests and the pause/resume pair
  expect(suspendLog.map((r) => `${r.method} ${r.path} ${r.status}`)).toEqual([
    "PATCH /vm 204",
    "GET /version 200",
    "PUT /snapshot/create 204",
  ]);
  expect(suspendLog[2]!.body).toEqual({
    snapshot_type: "Full",
    snapshot_path: "/snapshot/vmstate",
    mem_file_path: "/snapshot/memory",
  });
  expect(h.log().every((r) => r.schemaErrors.length === 0)).toBe(true);
  expect(procGone(handle.pid)).toBe(true);
  expect(existsSync(h.driver.layout(f.spec.instanceId).jailDir)).toBe(false);
  expect(existsSync(h.driver.cgroupDir(f.spec.instanceId))).toBe(false);

  const files = ["vmstate", "memory"].map((n) => join(dir, n));
  expect(snap).toEqual({
    dir,
    driver: "firecracker",
    compat: {
      firecracker_version: doc.version,
      vcpu_count: 2,
      mem_size_mib: 256,
      cpu_template: "None",
      devices: "block:rootfs=/rootfs.ext4:rw,block:scratch=/scratch.ext4:rw,net:eth0,vsock:3=/v.sock",
      cpu_model: expect.any(String),
      arch: process.arch,
    },
    bytes: files.reduce((n, p) => n + statSync(p).blocks * 512, 0),
  });
  expect(snap.bytes).toBeGreaterThan(0);
  expect(JSON.parse(readFileSync(files[0]!, "utf8"))).toMatchObject({ format: FAKE_STATE_FORMAT });
  expect(statSync(files[1]!).size).toBe(256 * 1024 * 1024); // the double's sparse memory file: guest RAM long
  for (const p of files) expect(statSync(p).mode & 0o777).toBe(0o444);
  const agent = process.getuid!();
  expect(h.chowns.filter(([p]) => p.startsWith(dir))).toEqual(files.map((p) => [p, agent, process.getgid!()]));
  const before = files.map(fingerprint);

  // Two restores (forks) from the one snapshot, each for its own placement and TAP.
  const forks = [fixture(), fixture()];
  forks.forEach((g, i) => void (g.spec.tapName = `bbtap${i + 7}`));
  const handles = [];
  for (const g of forks) {
    const mark = h.log().length;
    const r = await h.driver.restore(g.spec, snap);
    handles.push(r);
    expect(await h.driver.isAlive(r)).toBe(true);
    const log = h.log().slice(mark);
    expect(log.map((x) => `${x.method} ${x.path} ${x.status}`)).toEqual(["GET /version 200", "PUT /snapshot/load 204"]);
    expect(log.every((x) => x.schemaErrors.length === 0)).toBe(true);
    expect(log[1]!.body).toEqual({
      snapshot_path: "/snapshot/vmstate",
      mem_backend: { backend_type: "File", backend_path: "/snapshot/memory" },
      network_overrides: [{ iface_id: "eth0", host_dev_name: g.spec.tapName }],
      vsock_override: { uds_path: "/v.sock" },
      resume_vm: true,
    });
    const root = h.driver.layout(g.spec.instanceId).root;
    expect(statSync(join(root, "snapshot", "memory")).ino).toBe(statSync(files[1]!).ino); // a hard link, not a copy
    expect(statSync(join(root, "snapshot")).mode & 0o777).toBe(0o755); // the jail cannot replace the names
    expect(await unixSocketApi(h.driver.layout(g.spec.instanceId).apiSocket).get("/")).toMatchObject({
      id: g.spec.instanceId,
      state: "Running",
    });
    expect(readlinkSync(g.spec.controlSocketPath)).toBe(join(root, "v.sock")); // connectControl dials guest port 1024
    expect(existsSync(join(root, "v.sock_1025"))).toBe(false); // no listener: a restored guest does not dial again
  }
  expect(files.map(fingerprint)).toEqual(before);
  for (const r of handles) await h.driver.stop(r, 2_000);
  for (const [i, g] of forks.entries()) {
    expect(procGone(handles[i]!.pid)).toBe(true);
    expect(existsSync(h.driver.layout(g.spec.instanceId).jailDir)).toBe(false);
  }
  expect(files.map(fingerprint)).toEqual(before);
  for (const p of files) expect(statSync(p).nlink).toBe(1); // every jail's link went with its jail
}, 60_000);

test("file-size limit: a suspend writes the guest's RAM, larger than every disk, under the jailer's RLIMIT_FSIZE", async () => {
  // The kind of fault: RLIMIT_FSIZE sized to the writable disks alone (64 MiB here) killed the
  // VMM with SIGXFSZ when /snapshot/create wrote the 256 MiB memory file.
  const f = fixture();
  const h = harness(f);
  const handle = await h.driver.start(f.spec);
  const snap = await h.driver.suspend(handle, f.spec, snapshotDirOf(f));
  expect(statSync(join(snap.dir, "memory")).size).toBe(256 * 1024 * 1024);
  expect(h.log().at(-1)).toMatchObject({ path: "/snapshot/create", status: 204 });
}, 30_000);

async function suspended(): Promise<{ h: ReturnType<typeof harness>; snap: VmSnapshot }> {
  const f = fixture();
  const h = harness(f);
  const snap = await h.driver.suspend(await h.driver.start(f.spec), f.spec, snapshotDirOf(f));
  return { h, snap };
}

test("restore refuses SNAPSHOT_INCOMPATIBLE before spawning anything: another driver, another memory size or device list", async () => {
  const { h, snap } = await suspended();
  const g = fixture();
  const spawnedBefore = h.argvs.length;
  const cases: [VmSnapshot, typeof g.spec, string][] = [
    [{ ...snap, driver: "qemu-microvm" }, g.spec, "driver"],
    [snap, { ...g.spec, memoryMiB: 512 }, "mem_size_mib"],
    [snap, { ...g.spec, vcpus: 1 }, "vcpu_count"],
    [{ ...snap, compat: { ...snap.compat, devices: "block:rootfs=/rootfs.squashfs:ro" } }, g.spec, "devices"],
    [{ ...snap, compat: { ...snap.compat, cpu_model: "another CPU" } }, g.spec, "cpu_model"],
  ];
  for (const [s, spec, key] of cases) {
    const err = await h.driver.restore(spec, s).catch((e) => e);
    expect(err, key).toBeInstanceOf(AgentError);
    expect(err, key).toMatchObject({ code: "SNAPSHOT_INCOMPATIBLE", facts: { differs: key } });
  }
  expect(h.argvs.length).toBe(spawnedBefore);
  expect(existsSync(h.driver.layout(g.spec.instanceId).jailDir)).toBe(false);
}, 30_000);

test("restore refuses SNAPSHOT_INCOMPATIBLE from another Firecracker version after GET /version, and rolls back", async () => {
  const { h, snap } = await suspended();
  const g = fixture();
  const files = ["vmstate", "memory"].map((n) => join(snap.dir, n));
  const before = files.map(fingerprint);
  const err = await h.driver
    .restore(g.spec, { ...snap, compat: { ...snap.compat, firecracker_version: "1.0.0" } })
    .catch((e) => e);
  expect(err).toMatchObject({ code: "SNAPSHOT_INCOMPATIBLE", facts: { differs: "firecracker_version" } });
  expect(h.log().at(-1)).toMatchObject({ method: "GET", path: "/version", status: 200 });
  expect(h.log().some((r) => r.path === "/snapshot/load")).toBe(false);
  expect(existsSync(h.driver.layout(g.spec.instanceId).jailDir)).toBe(false);
  expect(existsSync(g.spec.controlSocketPath)).toBe(false);
  expect(files.map(fingerprint)).toEqual(before);
}, 30_000);

test("restore refuses snapshot files the jail could write (VMM_START_FAILED), never changing them", async () => {
  const { h, snap } = await suspended();
  const copy = join(snap.dir, "..", "writable");
  cpSync(snap.dir, copy, { recursive: true });
  chmodSync(join(copy, "memory"), 0o666);
  const g = fixture();
  const err = await h.driver.restore(g.spec, { ...snap, dir: copy }).catch((e) => e);
  expect(err).toMatchObject({ code: "VMM_START_FAILED" });
  expect((err as Error).message).toContain("writable by the jail");
  expect(statSync(join(copy, "memory")).mode & 0o777).toBe(0o666);
  expect(existsSync(h.driver.layout(g.spec.instanceId).jailDir)).toBe(false);
}, 30_000);

test("snapshot/create while running is refused by the double as Firecracker would: suspend fails VMM_CONTROL_FAILED, the VM lives on", async () => {
  const f = fixture();
  const skipPause: Partial<FirecrackerPorts> = {
    api: (sock, ms) => ({ ...unixSocketApi(sock, ms), patch: () => Promise.resolve() }),
  };
  const h = harness(f, [], skipPause);
  const handle = await h.driver.start(f.spec);
  const err = await h.driver.suspend(handle, f.spec, snapshotDirOf(f)).catch((e) => e);
  expect(err).toBeInstanceOf(AgentError);
  expect(err).toMatchObject({
    code: "VMM_CONTROL_FAILED",
    subsystem: "firecracker-api",
    facts: {
      path: "/snapshot/create",
      status: 400,
      faultMessage: "Cannot create a snapshot: the microVM is not paused.",
    },
  });
  expect(await h.driver.isAlive(handle)).toBe(true);
  await h.driver.stop(handle, 2_000);
}, 30_000);
