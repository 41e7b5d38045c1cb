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
    expect(() =>
      s.transactionSync(() => {
        s.sql.exec("INSERT INTO t VALUES ('lost')");
        throw new Error("boom");
      }),
    ).toThrow("boom");
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

  test("statements stay prepared past bun:sqlite's 20-string cache; a schema change prepares them again with the new columns", async () => {
    const dir = mkdtempSync(join(tmpdir(), "bb-store-"));
    dirs.push(dir);
    const s = new SqlStore(join(dir, "o.db"));
    s.sql.exec("CREATE TABLE t (k INTEGER PRIMARY KEY)");
    s.sql.exec("INSERT INTO t VALUES (1)");
    let prepares = 0;
    const prepare = s.db.prepare.bind(s.db);
    s.db.prepare = ((q: string) => {
      prepares++;
      return prepare(q);
    }) as typeof s.db.prepare;
    for (let round = 0; round < 3; round++)
      for (let i = 0; i < 30; i++) expect(s.sql.exec(`SELECT k + ${i} AS v FROM t`).one()).toEqual({ v: 1 + i });
    expect(prepares).toBe(30);
    expect(s.sql.exec("SELECT * FROM t").toArray()).toEqual([{ k: 1 }]);
    s.sql.exec("ALTER TABLE t ADD COLUMN w TEXT NOT NULL DEFAULT 'x'");
    expect(s.sql.exec("SELECT * FROM t").toArray()).toEqual([{ k: 1, w: "x" }]);
    s.close();
  });

  test("in-memory changes registered with onRollback are undone with their savepoint (also those of inner savepoints it had released)", () => {
    const dir = mkdtempSync(join(tmpdir(), "bb-store-"));
    dirs.push(dir);
    const s = new SqlStore(join(dir, "o.db"));
    const log: string[] = [];
    const change = (what: string) => {
      log.push(what);
      s.onRollback(() => log.splice(log.lastIndexOf(what), 1));
    };
    s.transactionSync(() => change("kept"));
    expect(() =>
      s.transactionSync(() => {
        change("outer");
        s.transactionSync(() => change("inner"));
        throw new Error("boom");
      }),
    ).toThrow("boom");
    expect(log).toEqual(["kept"]);
    s.close();
  });

  test("writes held until the commit land in the same commit; a failing one fails the commit and its waiters", async () => {
    const dir = mkdtempSync(join(tmpdir(), "bb-store-"));
    dirs.push(dir);
    const s = new SqlStore(join(dir, "o.db"));
    s.sql.exec("CREATE TABLE t (k TEXT PRIMARY KEY)");
    await s.durable();
    let held: string | null = "held";
    s.setBeforeCommit(() => {
      if (held === "fail") throw new Error("held write failed");
      if (held) s.sql.exec("INSERT INTO t VALUES (?)", held);
      held = null;
    });
    s.sql.exec("INSERT INTO t VALUES ('direct')");
    const commits = s.commits;
    await s.durable();
    expect(s.commits - commits).toBe(1);
    expect(s.sql.exec("SELECT k FROM t ORDER BY k").toArray()).toEqual([{ k: "direct" }, { k: "held" }]);
    held = "fail";
    s.sql.exec("INSERT INTO t VALUES ('lost')");
    await expect(s.durable()).rejects.toThrow("held write failed");
    expect(s.failure?.message).toBe("held write failed");
    expect(s.sql.exec("SELECT k FROM t ORDER BY k").toArray()).toEqual([{ k: "direct" }, { k: "held" }]);
    held = null;
    s.close();
  });
});

describe("writes with RETURNING on the embedded store", () => {
  test("answer their rows, count them as written, and an ignored conflict answers none", async () => {
    const s = new SqlStore(":memory:");
    s.sql.exec("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)");
    const insert = "INSERT INTO t (k, v) VALUES (?, ?) ON CONFLICT DO NOTHING RETURNING k";
    const first = s.sql.exec<{ k: string }>(insert, "a", 1);
    expect(first.toArray()).toEqual([{ k: "a" }]);
    expect(first.rowsWritten).toBe(1);
    const again = s.sql.exec<{ k: string }>(insert, "a", 2);
    expect(again.toArray()).toEqual([]);
    expect(again.rowsWritten).toBe(0);
    await s.durable();
    expect(s.sql.exec("SELECT k, v FROM t").toArray()).toEqual([{ k: "a", v: 1 }]);
    s.close();
  });
});
