/**
 * Storage faults of the scheduler (issue "Storage faults look like a healthy
 * server", and the data-directory rules): one scheduler per data directory,
 * files 0600 in a 0700 directory, a read-only or full data directory that
 * is reported rather than hidden, damaged or missing object state that is
 * named and quarantined (never a fresh start) without breaking listing, and
 * open descriptors bounded whatever the number of objects. Real SQLite files;
 * the read-only and full cases use a bind mount and a small tmpfs this file
 * creates (root; skipped with a reason otherwise) and removes.
 */
import { afterAll, afterEach, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { BeachballError } from "../../src/protocol/errors.ts";
import { SchedulerWorker, STORE_FILE } from "../../src/scheduler/worker.ts";
import { ensureDevManifest, type DeploymentManifest } from "../../src/scheduler/manifest.ts";
import { FAKE_IMAGE_DIGEST } from "../support/scheduler.ts";
import { TEST_CONTROLLER, TEST_OPERATOR, testManifest } from "../support/testManifest.ts";
import type { Logger } from "../../src/command/log.ts";
import { closeSync, openSync, truncateSync, writeSync } from "node:fs";

const C = TEST_CONTROLLER;
const O = TEST_OPERATOR;
const ROOT = process.getuid?.() === 0;
const dirs: string[] = [];
const mounts: string[] = [];
const workers: SchedulerWorker[] = [];

const manifest = testManifest({
  maxConcurrentAllocationsPerController: 100_000,
  controllerRequestsPerSecond: 1e9,
  deploymentRequestsPerSecond: 1e9,
  maxAllocations: 100_000,
});

function tmp(): string {
  const d = mkdtempSync(join(tmpdir(), "bb-stfault-"));
  dirs.push(d);
  return d;
}

/** Error lines a worker logged: message and fields. */
type Lines = { msg: string; fields: Record<string, unknown> }[];

/** A logger that keeps error lines in `into` (the rest is dropped). */
function capture(into: Lines): Logger {
  const l: Logger = {
    error: (msg, fields) => void into.push({ msg, fields: { ...fields } }),
    warn: () => {},
    info: () => {},
    debug: () => {},
    child: () => l,
  };
  return l;
}

function open(dataDir: string, log?: Logger): SchedulerWorker {
  const w = new SchedulerWorker({ dataDir, manifest, publicUrl: "http://t", ...(log ? { log } : {}) });
  w.runtime.recover();
  workers.push(w);
  return w;
}

async function closeAll(): Promise<void> {
  for (const w of workers.splice(0)) await w.close().catch(() => undefined);
}

function sh(cmd: string[]): void {
  const r = spawnSync(cmd[0]!, cmd.slice(1), { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`${cmd.join(" ")}: ${r.stderr}`);
}

afterEach(closeAll);
afterAll(() => {
  for (const m of mounts.splice(0).reverse()) spawnSync("umount", ["-l", m]);
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function codeOf(p: Promise<unknown>): Promise<string> {
  return p.then(
    () => "ok",
    (e: unknown) => (e instanceof BeachballError ? e.code : String(e)),
  );
}

describe("the data directory", () => {
  test("a second scheduler on the same data directory refuses to start, in-process and as a second bb scheduler serve", async () => {
    const dir = tmp();
    const w = open(dir);
    expect(() => new SchedulerWorker({ dataDir: dir, manifest, publicUrl: "http://t" })).toThrow(
      /in use by another process \(PID \d+\)/,
    );
    await w.close();
    workers.splice(workers.indexOf(w), 1);
    // The lock went with the first one: the directory opens again.
    open(dir);
    await closeAll();

    const served = tmp();
    const m = ensureDevManifest(served, FAKE_IMAGE_DIGEST).manifestPath;
    const bb = resolve("bin/bb.ts");
    const first = Bun.spawn(
      [process.execPath, bb, "scheduler", "serve", "--data-dir", served, "--manifest", m, "--listen", "127.0.0.1:0"],
      { stdout: "pipe", stderr: "pipe" },
    );
    try {
      for (let i = 0; i < 100 && !readdirSync(served).includes(STORE_FILE); i++) await Bun.sleep(50);
      await Bun.sleep(200);
      const second = Bun.spawnSync(
        [process.execPath, bb, "scheduler", "serve", "--data-dir", served, "--manifest", m, "--listen", "127.0.0.1:0"],
        { stdout: "pipe", stderr: "pipe" },
      );
      expect(second.exitCode).toBe(1);
      expect(second.stderr.toString() + second.stdout.toString()).toContain("in use by another process");
    } finally {
      first.kill("SIGTERM");
      await first.exited;
    }
  }, 30_000);

  test("a data directory of the earlier per-object-file layout is refused, not silently ignored", () => {
    const dir = tmp();
    writeFileSync(join(dir, "registry.db"), "");
    expect(() => new SchedulerWorker({ dataDir: dir, manifest, publicUrl: "http://t" })).toThrow(
      /earlier release .*move the directory aside/,
    );
  });

  test("storage files are 0600 in a 0700 directory", async () => {
    const dir = join(tmp(), "data");
    const w = open(dir);
    await w.createAllocation(C, { clientRequestId: "perm", workloadClass: "small" });
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    const files = readdirSync(dir);
    expect(files).toContain(STORE_FILE);
    for (const f of files) expect([f, statSync(join(dir, f)).mode & 0o777]).toEqual([f, 0o600]);
  });

  test.skipIf(!ROOT)(
    "a read-only data directory refuses to start with a clear error instead of serving 500s",
    async () => {
      const dir = tmp();
      const w = open(dir);
      await w.createAllocation(C, { clientRequestId: "ro", workloadClass: "small" });
      await closeAll();
      sh(["mount", "--bind", dir, dir]);
      mounts.push(dir);
      sh(["mount", "-o", "remount,bind,ro", dir]);
      expect(() => new SchedulerWorker({ dataDir: dir, manifest, publicUrl: "http://t" })).toThrow(
        /cannot write .*the data directory must be writable/,
      );
    },
  );

  test.skipIf(!ROOT)(
    "a full disk makes health fail and calls answer 503 STORAGE_UNAVAILABLE; freeing space recovers",
    async () => {
      const dir = tmp();
      sh(["mount", "-t", "tmpfs", "-o", "size=3m,mode=0700", "bb-stfault", dir]);
      mounts.push(dir);
      const w = open(join(dir, "data"));
      w.start();
      await w.createAllocation(C, { clientRequestId: "before", workloadClass: "small" });
      const filler = join(dir, "filler");
      // Leave a little room, then create until the store cannot commit.
      spawnSync("dd", ["if=/dev/zero", `of=${filler}`, "bs=64k", "count=64"]);
      let fault = "";
      for (let i = 0; i < 2000 && !fault; i++) {
        const code = await codeOf(w.createAllocation(C, { clientRequestId: `fill-${i}`, workloadClass: "small" }));
        if (code !== "ok") fault = code;
      }
      expect(fault).toBe("STORAGE_UNAVAILABLE");
      expect(w.health().ok).toBe(false);
      rmSync(filler);
      await Bun.sleep(1100);
      expect(w.health()).toEqual({ ok: true, detail: "ok" });
      expect(await codeOf(w.createAllocation(C, { clientRequestId: "after", workloadClass: "small" }))).toBe("ok");
    },
    60_000,
  );
});

describe("health follows real writes, and storage errors name the code, the file and the next step", () => {
  test.skipIf(!ROOT)(
    "a full disk: health stays 503 with SQLITE_FULL while creates fail, even though a tiny probe write still fits; one error line names the code and the file",
    async () => {
      const dir = tmp();
      sh(["mount", "-t", "tmpfs", "-o", "size=3m,mode=0700", "bb-stfault", dir]);
      mounts.push(dir);
      const lines: Lines = [];
      const w = open(join(dir, "data"), capture(lines));
      w.start();
      await w.createAllocation(C, { clientRequestId: "before", workloadClass: "small" });
      const filler = join(dir, "filler");
      spawnSync("dd", ["if=/dev/zero", `of=${filler}`, "bs=64k", "count=64"]);
      const codes: string[] = [];
      for (let i = 0; i < 2000 && !codes.includes("STORAGE_UNAVAILABLE"); i++)
        codes.push(await codeOf(w.createAllocation(C, { clientRequestId: `fill-${i}`, workloadClass: "small" })));
      // Creates keep failing past the probe interval; health must say so each time (the probe then runs again).
      for (let round = 0; round < 3; round++) {
        await Bun.sleep(1100);
        expect(await codeOf(w.createAllocation(C, { clientRequestId: `more-${round}`, workloadClass: "small" }))).toBe(
          "STORAGE_UNAVAILABLE",
        );
        const h = w.health();
        expect([h.ok, h.code]).toEqual([false, "SQLITE_FULL"]);
        expect(h.detail).toContain(join(dir, "data", STORE_FILE));
        expect(h.detail).toContain("free space");
      }
      const faults = lines.filter((l) => l.msg === "storage write failed");
      expect(faults.map((l) => [l.fields["code"], l.fields["file"]])).toEqual([
        ["SQLITE_FULL", join(dir, "data", STORE_FILE)],
      ]);
      rmSync(filler);
      await Bun.sleep(1100);
      expect(w.health()).toEqual({ ok: true, detail: "ok" });
      expect(await codeOf(w.createAllocation(C, { clientRequestId: "after", workloadClass: "small" }))).toBe("ok");
    },
    60_000,
  );

  test("a corrupted page: writes that meet it are 503, and health is 503 with SQLITE_CORRUPT until the file is restored (no probe clears it)", async () => {
    const dir = tmp();
    const w = open(dir);
    for (let i = 0; i < 20; i++) await w.createAllocation(C, { clientRequestId: `c-${i}`, workloadClass: "small" });
    await closeAll();
    const file = join(dir, STORE_FILE);
    const db = new Database(file);
    const { rootpage } = db.query("SELECT rootpage FROM sqlite_master WHERE name = 'allocation'").get() as {
      rootpage: number;
    };
    const pageSize = (db.query("PRAGMA page_size").get() as { page_size: number }).page_size;
    db.close();
    const fd = openSync(file, "r+");
    writeSync(fd, Buffer.alloc(pageSize, 0xab), 0, pageSize, pageSize * (rootpage - 1));
    closeSync(fd);
    const lines: Lines = [];
    const w2 = open(dir, capture(lines));
    expect(w2.health().ok).toBe(true);
    expect(await codeOf(w2.createAllocation(C, { clientRequestId: "after-damage", workloadClass: "small" }))).toBe(
      "STORAGE_UNAVAILABLE",
    );
    for (let round = 0; round < 2; round++) {
      const h = w2.health();
      expect([h.ok, h.code]).toEqual([false, "SQLITE_CORRUPT"]);
      expect(h.detail).toContain(`restore ${file} from a backup`);
      await Bun.sleep(1100);
    }
    expect(
      lines.filter((l) => l.msg === "storage write failed").map((l) => [l.fields["code"], l.fields["file"]]),
    ).toEqual([["SQLITE_CORRUPT", file]]);
  });

  test("a truncated store refuses to start naming the file, the code and what to do", async () => {
    const dir = tmp();
    const w = open(dir);
    for (let i = 0; i < 50; i++) await w.createAllocation(C, { clientRequestId: `t-${i}`, workloadClass: "small" });
    await closeAll();
    const file = join(dir, STORE_FILE);
    truncateSync(file, Math.floor(statSync(file).size / 2));
    let said = "";
    try {
      open(dir);
    } catch (e) {
      said = (e as Error).message;
    }
    expect(said).toBe(
      `the scheduler's store ${file} is damaged (SQLITE_CORRUPT: database disk image is malformed): stop the scheduler, restore ${file} from a backup (or move the data directory aside to start empty), then start it again`,
    );
    // The lock went with the failed start: the directory is free for the restored file.
    rmSync(file);
    open(dir);
  });
});

describe("damaged and missing object state", () => {
  test("a damaged allocation is reported by name and quarantined; listing and the other allocations still work", async () => {
    const dir = tmp();
    const w = open(dir);
    const good = (await w.createAllocation(C, { clientRequestId: "good", workloadClass: "small" })).view;
    const bad = (await w.createAllocation(C, { clientRequestId: "bad", workloadClass: "small" })).view;
    await closeAll();
    const db = new Database(join(dir, STORE_FILE));
    db.query("UPDATE allocation SET spec_json = '{not json' WHERE obj = ?").run(bad.allocationId);
    db.close();
    const w2 = open(dir);
    const err = await w2.getAllocation(C, bad.allocationId).catch((e: unknown) => e as BeachballError);
    expect(err).toBeInstanceOf(BeachballError);
    expect([(err as BeachballError).code, (err as BeachballError).status]).toEqual(["OBJECT_DAMAGED", 500]);
    expect((err as BeachballError).message).toContain(bad.allocationId);
    expect((await w2.getAllocation(C, good.allocationId)).state).toBe("pending");
    const page = await w2.listAllocations(C, null, 50);
    expect(page.items.map((v) => v.allocationId).sort()).toEqual([good.allocationId, bad.allocationId].sort());
    await w2.runtime.idle();
    expect((await w2.alerts(O, 0, 50)).map((a) => [a.type, a.subject])).toContainEqual([
      "object.quarantined",
      `Allocation ${bad.allocationId}`,
    ]);
    // Quarantine outlives a restart: the object is not re-read as if it were healthy.
    await closeAll();
    expect(await codeOf(open(dir).getAllocation(C, bad.allocationId))).toBe("OBJECT_DAMAGED");
  });

  test("an allocation whose state is missing is an error, never a fresh start", async () => {
    const dir = tmp();
    const w = open(dir);
    const v = (await w.createAllocation(C, { clientRequestId: "gone", workloadClass: "small" })).view;
    await closeAll();
    const db = new Database(join(dir, STORE_FILE));
    db.query("DELETE FROM allocation WHERE obj = ?").run(v.allocationId);
    db.query("DELETE FROM allocation_events WHERE obj = ?").run(v.allocationId);
    db.close();
    const w2 = open(dir);
    expect(await codeOf(w2.getAllocation(C, v.allocationId))).toBe("OBJECT_DAMAGED");
    expect(await codeOf(w2.createAllocation(C, { clientRequestId: "gone", workloadClass: "small" }))).toBe(
      "OBJECT_DAMAGED",
    );
    // A never-created allocation is still simply absent.
    expect(await codeOf(w2.getAllocation(C, `alloc_${"0".repeat(32)}`))).toBe("NOT_FOUND");
  });
});

describe("open descriptors", () => {
  test("stay bounded whatever the number of objects: 600 allocations under ulimit -n 64", async () => {
    const dir = tmp();
    const m = ensureDevManifest(dir, FAKE_IMAGE_DIGEST).manifestPath;
    const cfg = JSON.parse(await Bun.file(m).text()) as DeploymentManifest;
    cfg.limits = {
      ...cfg.limits,
      maxConcurrentAllocationsPerController: 10_000,
      controllerRequestsPerSecond: 1e9,
      deploymentRequestsPerSecond: 1e9,
    };
    writeFileSync(m, JSON.stringify(cfg));
    const token = (JSON.parse(await Bun.file(join(dir, "client.json")).text()) as { token: string }).token;
    const data = join(dir, "data");
    mkdirSync(data);
    const port = 20_000 + Math.floor(Math.random() * 20_000);
    const proc = Bun.spawn(
      [
        "prlimit",
        "--nofile=64:64",
        process.execPath,
        resolve("bin/bb.ts"),
        "scheduler",
        "serve",
        "--data-dir",
        data,
        "--manifest",
        m,
        "--listen",
        `127.0.0.1:${port}`,
      ],
      { stdout: "pipe", stderr: "pipe" },
    );
    try {
      const url = `http://127.0.0.1:${port}`;
      for (
        let i = 0;
        i < 200 &&
        !(await fetch(`${url}/healthz`)
          .then((r) => r.ok)
          .catch(() => false));
        i++
      )
        await Bun.sleep(50);
      let ok = 0;
      for (let i = 0; i < 600; i += 20) {
        const rs = await Promise.all(
          Array.from({ length: 20 }, (_, j) =>
            fetch(`${url}/v1/allocations`, {
              method: "POST",
              headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
              body: JSON.stringify({ clientRequestId: `fd-${i + j}`, workloadClass: "ci-small" }),
            }),
          ),
        );
        ok += rs.filter((r) => r.status === 201).length;
      }
      expect(ok).toBe(600);
      const fds = readdirSync(`/proc/${proc.pid}/fd`).length;
      console.log(`open descriptors after 600 allocations: ${fds} (limit 64)`);
      expect(fds).toBeLessThan(64);
      const list = (await (
        await fetch(`${url}/v1/allocations?limit=200`, { headers: { authorization: `Bearer ${token}` } })
      ).json()) as { items: unknown[] };
      expect(list.items).toHaveLength(200);
    } finally {
      proc.kill("SIGTERM");
      await proc.exited;
    }
  }, 60_000);
});
