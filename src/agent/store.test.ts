/** agent.db: observations carry their diagnosis, batches stay under a byte bound, leases only grow, commands are idempotent by ID and digest; the file upgrades in place and files of earlier builds open. */
import { Database } from "bun:sqlite";
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { AgentCommand } from "../protocol/agent.ts";
import { AGENT_SCHEMA_VERSION, AgentStore } from "./store.ts";

const dir = mkdtempSync(join(tmpdir(), "bb-store-test-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const cmd: AgentCommand = {
  commandId: "p:present:1",
  type: "ensure_present",
  allocationId: "a",
  placementId: "p",
  generation: 1,
  agentEpoch: "e",
  leaseExpiresAt: new Date(2_000_000).toISOString(),
  spec: { cpuMillis: 1000, memoryMiB: 256, ephemeralDiskMiB: 1024, imageDigest: `sha256:${"c".repeat(64)}` },
};

test("outbox batches are bounded in bytes, oldest first, at least one", () => {
  const s = new AgentStore(join(dir, "a.db"));
  expect(s.recordCommand(cmd, "d1", "bb-x", 1)).toBe("accepted");
  expect(s.recordCommand(cmd, "d1", "bb-x", 1)).toBe("duplicate");
  expect(s.recordCommand(cmd, "d2", "bb-x", 1)).toBe("conflict");
  const p = s.placement("p")!;
  const tail = "[    1.000000] Kernel panic - not syncing: x\n".repeat(40).slice(0, 2000);
  for (let i = 0; i < 10; i++)
    s.observe(p, "error", { errorCode: "VM_EXITED", exit: { reason: "KERNEL_PANIC", consoleTail: tail } }, 1_000 + i);
  expect(s.hasPendingUpdates()).toBe(true);
  const batch = s.pendingUpdates(200, 5_000);
  expect(batch.length).toBe(2);
  expect(batch[0]!.exit).toEqual({ reason: "KERNEL_PANIC", consoleTail: tail });
  expect(batch[0]!.seq).toBeLessThan(batch[1]!.seq);
  expect(s.pendingUpdates(200, 10)).toHaveLength(1);
  s.ackUpdates(batch[1]!.seq);
  expect(s.pendingUpdates(200)).toHaveLength(8);
  s.close();
});

test("leases only grow", () => {
  const s = new AgentStore(join(dir, "b.db"));
  s.recordCommand(cmd, "d1", "bb-x", 1);
  s.applyLeases({ p: new Date(3_000_000).toISOString() });
  expect(s.placement("p")!.leaseExpiresAtMs).toBe(3_000_000);
  s.applyLeases({ p: new Date(2_500_000).toISOString(), other: "not a time" });
  expect(s.placement("p")!.leaseExpiresAtMs).toBe(3_000_000);
  s.close();
});

/** agent.db as the hand-written DDL of builds before the migrations wrote it (main at 269f4d9), verbatim. */
const HAND_DDL_V1 = `
CREATE TABLE IF NOT EXISTS placements (placement_id TEXT PRIMARY KEY, allocation_id TEXT NOT NULL, generation INTEGER NOT NULL, spec_json TEXT NOT NULL,
  dir_name TEXT NOT NULL, desired TEXT NOT NULL, observed TEXT NOT NULL, error_code TEXT, vm_pid INTEGER, vm_start_time INTEGER,
  lease_expires_at_ms INTEGER NOT NULL, workload_exit_code INTEGER, updated_at_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS commands (command_id TEXT PRIMARY KEY, placement_id TEXT NOT NULL, type TEXT NOT NULL, generation INTEGER NOT NULL,
  digest TEXT NOT NULL, received_at_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS deliveries (delivery_id TEXT PRIMARY KEY, placement_id TEXT NOT NULL, digest TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, update_json TEXT NOT NULL);
`;

/** Columns of every table of a file: name, declared type (case-folded) and primary-key position. */
function columns(file: string): Record<string, [string, string, number][]> {
  const db = new Database(file, { readonly: true });
  try {
    const out: Record<string, [string, string, number][]> = {};
    for (const t of ["placements", "commands", "deliveries", "outbox"])
      out[t] = db
        .query<{ name: string; type: string; pk: number }, []>(`PRAGMA table_info(${t})`)
        .all()
        .map((c) => [c.name, c.type.toUpperCase(), c.pk]);
    return out;
  } finally {
    db.close();
  }
}

describe("agent.db upgrades in place (migrations from src/agent/storeSchema.ts)", () => {
  test("a store file written by the hand DDL of earlier builds opens unchanged, with its rows, and takes writes", () => {
    const file = join(dir, "old.db");
    const old = new Database(file, { create: true });
    old.exec(HAND_DDL_V1);
    old.exec("PRAGMA user_version = 1");
    old
      .query(
        "INSERT INTO placements VALUES ('p', 'a', 1, '{}', 'bb-x', 'running', 'running', NULL, 42, 7, 2000000, NULL, 1)",
      )
      .run();
    old.query("INSERT INTO commands VALUES ('p:present:1', 'p', 'ensure_present', 1, 'd1', 1)").run();
    old.close();
    const s = new AgentStore(file);
    expect(s.placement("p")).toMatchObject({ placementId: "p", desired: "running", vmPid: 42, vmStartTime: 7 });
    expect(s.recordCommand(cmd, "d1", "bb-x", 1)).toBe("duplicate");
    s.observe(s.placement("p")!, "stopping", {}, 5);
    expect(s.pendingUpdates(10)).toHaveLength(1);
    expect(s.sql.query<{ user_version: number }, []>("PRAGMA user_version").get()!.user_version).toBe(
      AGENT_SCHEMA_VERSION,
    );
    s.close();
  });

  test("a fresh store has the same columns, types and keys as one the hand DDL wrote, once upgraded", () => {
    const old = join(dir, "hand.db");
    const db = new Database(old, { create: true });
    db.exec(HAND_DDL_V1);
    db.exec("PRAGMA user_version = 1");
    db.close();
    new AgentStore(old).close(); // 0001_snapshots adds placements.snapshot_json (issue 21)
    const fresh = join(dir, "fresh.db");
    new AgentStore(fresh).close();
    expect(columns(fresh)).toEqual(columns(old));
  });

  test("a file a newer build migrated is refused, naming it, and left unchanged", () => {
    const file = join(dir, "newer.db");
    new AgentStore(file).close();
    const db = new Database(file);
    db.exec(`PRAGMA user_version = ${AGENT_SCHEMA_VERSION + 1}`);
    db.close();
    expect(() => new AgentStore(file)).toThrow(`${file} has schema version ${AGENT_SCHEMA_VERSION + 1}`);
    const after = new Database(file, { readonly: true });
    expect(after.query<{ user_version: number }, []>("PRAGMA user_version").get()!.user_version).toBe(
      AGENT_SCHEMA_VERSION + 1,
    );
    after.close();
  });
});
