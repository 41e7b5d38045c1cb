/**
 * HostConnectionStore.insert is one statement (issue 19 item 4, kind of
 * fault: check-then-insert): the conflict clause decides whether a command
 * is new, not a read before the write. Runs on the real embedded store
 * (SQLite in memory) with the real migrations.
 */
import { describe, expect, test } from "bun:test";
import { SqlStore } from "../../src/scheduler/runtime/embedded/sqlStore.ts";
import { migrate } from "../../src/scheduler/runtime/migrate.ts";
import { MIGRATIONS } from "../../src/scheduler/migrations/index.ts";
import { HostConnectionStore } from "../../src/scheduler/objects/hostConnectionStore.ts";

const ROW = {
  commandId: "cmd_a",
  grantId: "grt_a",
  action: "apply" as const,
  networkId: "net_a",
  allocationId: "alc_a",
  placementId: "plc_a",
  generation: 1,
  connectionId: "con_a",
  grantJson: "{}",
  relayMapJson: "{}",
  expiresAtMs: 10_000,
  createdAtMs: 1_000,
};

describe("check-then-insert: a connection command is queued by one statement", () => {
  test("a new command is written and reported new; the same ID again writes nothing and is reported old", () => {
    const store = new SqlStore(":memory:");
    migrate(store, MIGRATIONS, "test");
    const rows = new HostConnectionStore(store, "hst_a");
    const before = store.statements;
    expect(rows.insert(ROW)).toBe(true);
    expect(store.statements - before).toBe(1);
    expect(rows.insert({ ...ROW, grantJson: '{"other":true}' })).toBe(false);
    expect(store.statements - before).toBe(2);
    expect(rows.command("cmd_a")?.grantJson).toBe("{}");
    expect(rows.pending().map((r) => r.commandId)).toEqual(["cmd_a"]);
    store.close();
  });
});
