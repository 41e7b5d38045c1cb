/**
 * Proves the contract check can fail: the TEST DOUBLE of Firecracker's API
 * server (firecracker-double.ts), validating against the real OpenAPI
 * document, rejects malformed bodies, unknown paths and methods, and
 * out-of-order calls with 400 and a fault_message, and accepts the
 * driver's own bodies (config.ts) for both root formats. In-process; leaves
 * no socket behind.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { VmSpec } from "../../src/agent/vmm/driver.ts";
import { actionBody, preBootRequests } from "../../src/agent/vmm/firecracker/config.ts";
import { snapshotCreateBody, snapshotLoadBody, vmStateBody } from "../../src/agent/vmm/firecracker/snapshot.ts";
import { type FirecrackerDouble, startFirecrackerDouble } from "./firecracker-double.ts";
import {
  findOperation,
  isPostBootOnly,
  isPreBootOnly,
  loadOpenApi,
  type OpenApiDoc,
  validateSchema,
} from "./openapi.ts";

const work = mkdtempSync(join(tmpdir(), "bb-fc-openapi-"));
let doc: OpenApiDoc;
let n = 0;
const doubles: FirecrackerDouble[] = [];

beforeAll(async () => {
  doc = await loadOpenApi();
});
afterAll(() => {
  for (const d of doubles) d.stop();
  rmSync(work, { recursive: true, force: true });
});

async function fresh(): Promise<{
  d: FirecrackerDouble;
  send: (method: string, path: string, body?: string) => Promise<{ status: number; fault?: string }>;
}> {
  const socketPath = join(work, `api${++n}.sock`);
  const d = await startFirecrackerDouble({ socketPath }, doc);
  doubles.push(d);
  const send = async (method: string, path: string, body?: string) => {
    const res = await fetch(`http://localhost${path}`, {
      unix: socketPath,
      method,
      ...(body === undefined ? {} : { body }),
    });
    const text = await res.text();
    return {
      status: res.status,
      ...(text ? { fault: (JSON.parse(text) as { fault_message?: string }).fault_message } : {}),
    };
  };
  return { d, send };
}

const spec: VmSpec = {
  instanceId: "bb-000000000000000000000001",
  dir: "/a",
  vcpus: 2,
  memoryMiB: 256,
  kernelPath: "/a/k",
  rootDiskPath: "/a/rootfs.ext4",
  netns: "n",
  tapName: "bbtap0",
  kernelArgs: ["beachball.generation=1"],
  consoleLogPath: "/a/c",
  controlSocketPath: "/a/s",
};

describe("the OpenAPI document as loaded", () => {
  test("resolves templated paths and marks the pre-boot operations the driver uses", () => {
    expect(findOperation(doc, "PUT", "/drives/scratch")?.params).toEqual({ drive_id: "scratch" });
    expect(findOperation(doc, "PUT", "/nonexistent")).toBeNull();
    expect(findOperation(doc, "DELETE", "/vsock")).toBeNull();
    for (const p of ["/machine-config", "/boot-source", "/drives/x", "/network-interfaces/x", "/vsock"])
      expect(isPreBootOnly(findOperation(doc, "PUT", p)!.op), p).toBe(true);
    expect(isPreBootOnly(findOperation(doc, "PUT", "/actions")!.op)).toBe(false);
  });

  test("every body the driver builds validates, for ext4 and squashfs roots", () => {
    const squash = { ...spec, rootDiskPath: "/a/rootfs.squashfs", initrdPath: "/a/initrd" };
    for (const s of [spec, squash])
      for (const r of [
        ...preBootRequests(s),
        { path: "/actions", body: actionBody("InstanceStart") },
        { path: "/actions", body: actionBody("SendCtrlAltDel") },
      ]) {
        const { op } = findOperation(doc, "PUT", r.path)!;
        const schema = op.parameters.find((p) => p.in === "body")!.schema!;
        expect(validateSchema(doc, schema, r.body), r.path).toEqual([]);
      }
  });
});

describe("snapshot requests per the OpenAPI document", () => {
  test("every snapshot body the driver builds validates: PATCH /vm both states, snapshot/create, snapshot/load", () => {
    for (const [method, path, body] of [
      ["PATCH", "/vm", vmStateBody("Paused")],
      ["PATCH", "/vm", vmStateBody("Resumed")],
      ["PUT", "/snapshot/create", snapshotCreateBody()],
      ["PUT", "/snapshot/load", snapshotLoadBody(spec)],
    ] as const) {
      const { op } = findOperation(doc, method, path)!;
      const schema = op.parameters.find((p) => p.in === "body")!.schema!;
      expect(validateSchema(doc, schema, body), `${method} ${path}`).toEqual([]);
    }
    expect(isPreBootOnly(findOperation(doc, "PUT", "/snapshot/load")!.op)).toBe(true);
    expect(isPostBootOnly(findOperation(doc, "PUT", "/snapshot/create")!.op)).toBe(true);
  });

  test("the snapshot schemas catch what Firecracker's parser would: a bad state, a bad type, an unknown override field", () => {
    const bodyOf = (m: string, p: string) =>
      findOperation(doc, m, p)!.op.parameters.find((x) => x.in === "body")!.schema!;
    expect(validateSchema(doc, bodyOf("PATCH", "/vm"), { state: "Stopped" }).join()).toContain("is not one of");
    expect(
      validateSchema(doc, bodyOf("PUT", "/snapshot/create"), { ...snapshotCreateBody(), snapshot_type: "Fast" }).join(),
    ).toContain("is not one of");
    expect(
      validateSchema(doc, bodyOf("PUT", "/snapshot/load"), {
        ...snapshotLoadBody(spec),
        network_overrides: [{ iface_id: "eth0", host_dev_name: "t", guest_mac: "06:00:00:00:00:01" }],
      }).join(),
    ).toContain("unknown field guest_mac");
  });

  test("state machine: PATCH /vm only after boot and idempotent; snapshot/create only while paused; load only on a fresh process", async () => {
    const root = join(work, "snaproot");
    mkdirSync(join(root, "snapshot"), { recursive: true });
    writeFileSync(join(root, "vmlinux"), "k");
    const socketPath = join(work, "snap.sock");
    const d = await startFirecrackerDouble({ socketPath, root }, doc);
    doubles.push(d);
    const send = async (method: string, path: string, body: unknown) => {
      const res = await fetch(`http://localhost${path}`, { unix: socketPath, method, body: JSON.stringify(body) });
      const text = await res.text();
      return { status: res.status, fault: text ? (JSON.parse(text) as { fault_message: string }).fault_message : "" };
    };
    expect(await send("PATCH", "/vm", vmStateBody("Paused"))).toEqual({
      status: 400,
      fault: "The requested operation is not supported before starting the microVM.",
    });
    expect((await send("PUT", "/snapshot/create", snapshotCreateBody())).status).toBe(400); // post-boot only
    expect(await send("PUT", "/boot-source", { kernel_image_path: "/vmlinux" })).toEqual({ status: 204, fault: "" });
    expect(await send("PUT", "/snapshot/load", snapshotLoadBody(spec))).toEqual({
      status: 400,
      fault: "Loading a microVM snapshot not allowed after configuring boot-specific resources.",
    });
    expect((await send("PUT", "/network-interfaces/eth0", { iface_id: "eth0", host_dev_name: "tap0" })).status).toBe(
      204,
    );
    expect((await send("PUT", "/actions", actionBody("InstanceStart"))).status).toBe(204);
    expect(await send("PUT", "/snapshot/create", snapshotCreateBody())).toEqual({
      status: 400,
      fault: "Cannot create a snapshot: the microVM is not paused.",
    });
    expect((await send("PATCH", "/vm", vmStateBody("Resumed"))).status).toBe(204); // resuming a running VM: ignored
    expect(d.state()).toBe("Running");
    expect((await send("PATCH", "/vm", vmStateBody("Paused"))).status).toBe(204);
    expect((await send("PATCH", "/vm", vmStateBody("Paused"))).status).toBe(204);
    expect(d.state()).toBe("Paused");
    expect((await send("PUT", "/snapshot/create", snapshotCreateBody())).status).toBe(204);
    expect((await send("PUT", "/snapshot/load", snapshotLoadBody(spec))).status).toBe(400); // pre-boot only
    expect(d.requests.every((r) => r.schemaErrors.length === 0)).toBe(true); // refused for state, never for shape

    // A fresh process loads it, with exactly one memory source, and runs (resume_vm).
    const fresh = await startFirecrackerDouble({ socketPath: join(work, "snap2.sock"), root }, doc);
    doubles.push(fresh);
    const send2 = async (body: unknown) =>
      (
        await fetch("http://localhost/snapshot/load", {
          unix: join(work, "snap2.sock"),
          method: "PUT",
          body: JSON.stringify(body),
        })
      ).status;
    expect(await send2({ ...snapshotLoadBody(spec), mem_file_path: "/snapshot/memory" })).toBe(400);
    expect(
      await send2({ ...snapshotLoadBody(spec), network_overrides: [{ iface_id: "eth9", host_dev_name: "t" }] }),
    ).toBe(400);
    expect(fresh.state()).toBe("Not started");
    expect(await send2(snapshotLoadBody(spec))).toBe(204);
    expect(fresh.state()).toBe("Running");
  });
});

describe("the double rejects what Firecracker rejects", () => {
  const bad: [string, string, string, string][] = [
    ["wrong type", "/machine-config", '{"vcpu_count":"2","mem_size_mib":128}', "expected integer"],
    ["below minimum", "/machine-config", '{"vcpu_count":0,"mem_size_mib":128}', "minimum 1"],
    ["above maximum", "/machine-config", '{"vcpu_count":33,"mem_size_mib":128}', "maximum 32"],
    ["missing required", "/machine-config", '{"vcpu_count":1}', "missing required field mem_size_mib"],
    [
      "unknown field",
      "/drives/rootfs",
      '{"drive_id":"rootfs","is_root_device":true,"path_on_host":"/r","readonly":true}',
      "unknown field readonly",
    ],
    ["bad enum", "/actions", '{"action_type":"Reboot"}', "is not one of"],
    [
      "nested $ref",
      "/network-interfaces/eth0",
      '{"iface_id":"eth0","host_dev_name":"t","rx_rate_limiter":{"bandwidth":{"size":"x","refill_time":1}}}',
      "bandwidth.size: expected integer",
    ],
    ["vsock cid below minimum", "/vsock", '{"guest_cid":2,"uds_path":"/v.sock"}', "minimum 3"],
    ["not JSON", "/boot-source", "{kernel_image_path:", "deserializing"],
  ];
  for (const [what, path, body, fault] of bad)
    test(`${what}: 400 with fault_message, recorded as a validation failure`, async () => {
      const { d, send } = await fresh();
      const r = await send("PUT", path, body);
      expect(r.status).toBe(400);
      expect(r.fault).toContain(fault);
      expect(d.requests).toHaveLength(1);
      expect(d.requests[0]!.schemaErrors.length).toBeGreaterThan(0);
    });

  test("unknown path and unknown method: 400 'Invalid request method and/or path'", async () => {
    const { send } = await fresh();
    expect(await send("PUT", "/machine_config", '{"vcpu_count":1,"mem_size_mib":128}')).toEqual({
      status: 400,
      fault: "Invalid request method and/or path: PUT /machine_config.",
    });
    expect((await send("DELETE", "/vsock")).fault).toContain("Invalid request method and/or path");
  });

  test("path ID and body ID must agree", async () => {
    const { send } = await fresh();
    const r = await send(
      "PUT",
      "/drives/rootfs",
      '{"drive_id":"other","is_root_device":true,"is_read_only":false,"path_on_host":"/r"}',
    );
    expect(r).toEqual({ status: 400, fault: "The id from the path does not match the id from the body!" });
  });

  test("state rules: InstanceStart needs a boot source; pre-boot calls are refused after it; SendCtrlAltDel only after it", async () => {
    const { d, send } = await fresh();
    expect(await send("PUT", "/actions", '{"action_type":"SendCtrlAltDel"}')).toMatchObject({ status: 400 });
    expect(await send("PUT", "/actions", '{"action_type":"InstanceStart"}')).toEqual({
      status: 400,
      fault: "Cannot start microvm without kernel configuration.",
    });
    expect(d.state()).toBe("Not started");
    expect(await send("PUT", "/boot-source", '{"kernel_image_path":"/vmlinux"}')).toEqual({ status: 204 });
    expect(await send("PUT", "/actions", '{"action_type":"InstanceStart"}')).toEqual({ status: 204 });
    expect(d.state()).toBe("Running");
    for (const [p, b] of [
      ["/machine-config", '{"vcpu_count":1,"mem_size_mib":128}'],
      ["/vsock", '{"guest_cid":3,"uds_path":"/v"}'],
      ["/boot-source", '{"kernel_image_path":"/k"}'],
    ])
      expect(await send("PUT", p!, b), p).toEqual({
        status: 400,
        fault: "The requested operation is not supported after starting the microVM.",
      });
    expect(await send("PUT", "/actions", '{"action_type":"InstanceStart"}')).toMatchObject({ status: 400 });
    expect(d.requests.map((r) => r.status)).toEqual([400, 400, 204, 204, 400, 400, 400, 400]);
    expect(d.requests.every((r) => r.schemaErrors.length === 0)).toBe(true); // rejected for state, not shape
  });

  test("with a jail root, a drive whose file is absent is refused", async () => {
    const socketPath = join(work, "rooted.sock");
    const d = await startFirecrackerDouble({ socketPath, root: work }, doc);
    doubles.push(d);
    const res = await fetch("http://localhost/drives/rootfs", {
      unix: socketPath,
      method: "PUT",
      body: '{"drive_id":"rootfs","is_root_device":true,"is_read_only":false,"path_on_host":"/missing.ext4"}',
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { fault_message: string }).fault_message).toContain("No such file");
  });
});
