/** The host endpoint's settings (startEndpoint.ts) and where it finds a grant's placement (placementLookup.ts). */
import { expect, test } from "bun:test";
import type { LocalPlacement } from "../store.ts";
import { placementTargetOf } from "./placementLookup.ts";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { endpointSettings, relayCaOf } from "./startEndpoint.ts";

const KEY = Buffer.alloc(32, 9).toString("base64");

test("settings: defaults, STUN servers of both families, and a clear error naming each bad field", () => {
  const s = endpointSettings({
    verificationKeys: { "conn-1": KEY },
    stunServers: ["192.0.2.53:3478", "[2001:db8::53]:3478"],
  });
  expect(s.listen).toEqual({ hostname: "0.0.0.0", port: 51820 });
  expect(s.keys.get("conn-1")).toBe(KEY);
  expect(s.stun).toEqual([
    { address: "192.0.2.53", port: 3478 },
    { address: "2001:db8::53", port: 3478 },
  ]);
  expect(() => endpointSettings({ verificationKeys: {} })).toThrow("connections.verificationKeys: at least one key");
  expect(() => endpointSettings({ verificationKeys: { "conn-1": "short" } })).toThrow(
    "connections.verificationKeys.conn-1",
  );
  const nine = Object.fromEntries(Array.from({ length: 9 }, (_, i) => [`conn-${i}`, KEY]));
  expect(() => endpointSettings({ verificationKeys: nine })).toThrow("MAX_CONTROL_VERIFICATION_KEYS");
  expect(() => endpointSettings({ verificationKeys: { "conn-1": KEY }, listenPort: 70000 })).toThrow(
    "connections.listenPort",
  );
  expect(() => endpointSettings({ verificationKeys: { "conn-1": KEY }, listenAddress: "example.org" })).toThrow(
    "connections.listenAddress",
  );
  expect(() =>
    endpointSettings({ verificationKeys: { "conn-1": KEY }, stunServers: Array(5).fill("192.0.2.1:3478") }),
  ).toThrow("at most 4");
  for (const bad of ["stun.example.org:3478", "192.0.2.1", "2001:db8::1:3478", "192.0.2.1:0", "192.0.2.1:65536"])
    expect(() => endpointSettings({ verificationKeys: { "conn-1": KEY }, stunServers: [bad] })).toThrow(
      "connections.stunServers",
    );
});

test("a grant's placement: networked states only, not one being removed, the highest generation of a replacement", () => {
  const row = (o: Partial<LocalPlacement>): LocalPlacement =>
    ({
      placementId: "p",
      allocationId: "a",
      generation: 1,
      specJson: "{}",
      dirName: "bb-aaaa",
      desired: "running",
      observed: "running",
      errorCode: null,
      vmPid: null,
      vmStartTime: null,
      leaseExpiresAtMs: 0,
      workloadExitCode: null,
      updatedAtMs: 0,
      ...o,
    }) as LocalPlacement;
  expect(placementTargetOf([row({})], "a")).toEqual({
    allocationId: "a",
    generation: 1,
    netns: "bb-aaaa",
    table: "bb_aaaa",
    tap: "bbtap0",
  });
  expect(placementTargetOf([row({})], "b")).toBeNull();
  expect(placementTargetOf([row({ observed: "preparing" })], "a")).toBeNull();
  expect(placementTargetOf([row({ observed: "stopping" })], "a")).toBeNull();
  expect(placementTargetOf([row({ desired: "absent" })], "a")).toBeNull();
  expect(placementTargetOf([row({ observed: "prepared" })], "a")?.generation).toBe(1);
  const both = [
    row({ generation: 1, dirName: "bb-old" }),
    row({ placementId: "q", generation: 2, dirName: "bb-new", observed: "starting" }),
  ];
  expect(placementTargetOf(both, "a")).toEqual(expect.objectContaining({ generation: 2, netns: "bb-new" }));
});

test("connections.relayCaPath: the PEM text when it holds a certificate; a clear error naming the field otherwise; undefined when unset", () => {
  const dir = mkdtempSync(join(tmpdir(), "bb-relayca-"));
  try {
    const good = join(dir, "ca.pem");
    const bad = join(dir, "empty.pem");
    writeFileSync(good, "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");
    writeFileSync(bad, "not a certificate\n");
    const base = { verificationKeys: { "conn-1": KEY } };
    expect(relayCaOf(base)).toBeUndefined();
    expect(relayCaOf({ ...base, relayCaPath: good })).toContain("BEGIN CERTIFICATE");
    expect(() => relayCaOf({ ...base, relayCaPath: bad })).toThrow("connections.relayCaPath");
    expect(() => relayCaOf({ ...base, relayCaPath: join(dir, "missing.pem") })).toThrow("connections.relayCaPath");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
