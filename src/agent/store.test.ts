/** agent.db: observations carry their diagnosis, batches stay under a byte bound, leases only grow, commands are idempotent by ID and digest. */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { AgentCommand } from "../protocol/agent.ts";
import { AgentStore } from "./store.ts";

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
