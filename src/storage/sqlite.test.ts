import { afterEach, describe, expect, test } from "bun:test";
import { chmodSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openDb } from "./sqlite.ts";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
const mode = (p: string) => (statSync(p).mode & 0o777).toString(8);

describe("database files readable by other users", () => {
  test("a new database, its -wal and -shm are 0600 in a 0700 directory, whatever the umask allows", () => {
    const root = mkdtempSync(join(tmpdir(), "bb-sqlite-"));
    dirs.push(root);
    const old = process.umask(0o022);
    try {
      const file = join(root, "objects", "Host", "x.db");
      const db = openDb(file);
      db.exec("CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (1);");
      expect([mode(file), mode(`${file}-wal`), mode(`${file}-shm`), mode(join(root, "objects", "Host"))]).toEqual([
        "600",
        "600",
        "600",
        "700",
      ]);
      db.close();
    } finally {
      process.umask(old);
    }
  });

  test("an existing 0644 database in a 0755 directory is tightened when opened", () => {
    const root = mkdtempSync(join(tmpdir(), "bb-sqlite-"));
    dirs.push(root);
    const dir = join(root, "old");
    mkdirSync(dir, { mode: 0o755 });
    chmodSync(dir, 0o755);
    const file = join(dir, "old.db");
    writeFileSync(file, "");
    chmodSync(file, 0o644);
    openDb(file).close();
    expect([mode(file), mode(dir)]).toEqual(["600", "700"]);
  });
});
