import { afterEach, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SqlStore } from "./sqlStore.ts";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe("the embedded store", () => {
  test("a savepoint that throws rolls back only its own writes inside the open batch", async () => {
    const dir = mkdtempSync(join(tmpdir(), "bb-store-"));
    dirs.push(dir);
    const s = new SqlStore(join(dir, "o.db"));
    s.sql.exec("CREATE TABLE t (k TEXT PRIMARY KEY)");
    s.transactionSync(() => s.sql.exec("INSERT INTO t VALUES ('kept')"));
    expect(() => s.transactionSync(() => {
      s.sql.exec("INSERT INTO t VALUES ('lost')");
      throw new Error("boom");
    })).toThrow("boom");
    await s.durable();
    expect(s.sql.exec("SELECT k FROM t").toArray()).toEqual([{ k: "kept" }]);
    s.close();
  });

  test("background checkpoints run on a worker thread and keep the WAL from growing", async () => {
    const dir = mkdtempSync(join(tmpdir(), "bb-store-"));
    dirs.push(dir);
    const file = join(dir, "o.db");
    const s = new SqlStore(file);
    const cp = s.checkpointInBackground();
    expect(cp.inWorker).toBe(true);
    s.sql.exec("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)");
    await s.durable();
    // The worker thread starts asynchronously: wait for its first checkpoint before measuring.
    for (let i = 0; i < 100 && cp.completed === 0; i++) await Bun.sleep(50);
    const blob = "x".repeat(4000);
    for (let round = 0; round < 12; round++) {
      for (let i = 0; i < 500; i++) s.sql.exec("INSERT INTO t (v) VALUES (?)", blob);
      await s.durable();
      await Bun.sleep(300);
    }
    expect(cp.completed).toBeGreaterThan(1);
    // 24 MB went through the WAL; passive checkpoints let it wrap instead of growing to that size.
    expect(statSync(`${file}-wal`).size).toBeLessThan(20 * 1024 * 1024);
    s.close();
    const again = new Database(file);
    expect(again.query("SELECT COUNT(*) AS n FROM t").get()).toEqual({ n: 6000 });
    again.close();
  });
});
