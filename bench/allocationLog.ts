/**
 * Workload output benchmark (issue 13): the two hot paths of a log line,
 * each against a baseline measured in the same run.
 *
 * 1. Agent redaction (src/agent/logs/redact.ts): console bytes → redacted
 *    whole lines, with a payload's line and word digests loaded, against
 *    splitting the same bytes into lines and joining them (no redaction).
 * 2. Scheduler ring (src/scheduler/objects/allocationLog.ts) on the embedded
 *    store: appendLogChunk for pushes of 8 × 16 KiB chunks (one commit per
 *    push) and reading it all back in 256 KiB pages, against plain bun:sqlite
 *    INSERTs and SELECTs of the same rows (WAL, synchronous=NORMAL, one
 *    transaction per 8 rows).
 *
 *   bun bench/allocationLog.ts [--mib 32]
 */
import { Database } from "bun:sqlite";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { ConsoleRedactor, payloadDigests } from "../src/agent/logs/redact.ts";
import { appendLogChunk, readLogPage } from "../src/scheduler/objects/allocationLog.ts";
import { SqlStore } from "../src/scheduler/runtime/embedded/sqlStore.ts";
import { migrate } from "../src/scheduler/runtime/migrate.ts";
import { MIGRATIONS } from "../src/scheduler/migrations/index.ts";
import {
  LOG_RING_BYTES,
  MAX_LOG_CHUNK_BYTES,
  MAX_LOG_CHUNKS_PER_PUSH,
  MAX_LOG_READ_BYTES,
} from "../src/protocol/logs.ts";
import { limitRunTime } from "./support/runLimit.ts";

limitRunTime("bench/allocationLog.ts", 600);

const { values } = parseArgs({ options: { mib: { type: "string", default: "32" } } });
const MIB = Number(values.mib);
const dir = mkdtempSync(join(tmpdir(), "bb-bench-alloclog-"));
const mibps = (bytes: number, ms: number) => bytes / 1024 / 1024 / (ms / 1000);
const line = (i: number) =>
  `step ${i}: compiled module-${i % 97} in ${(i * 7) % 1000} ms, token-free output with some words and numbers ${i * 31}\n`;

try {
  // 1. Redaction.
  const parts: string[] = [];
  let size = 0;
  for (let i = 0; size < MIB * 1024 * 1024; i++) {
    const l = line(i);
    parts.push(l);
    size += l.length;
  }
  const raw = Buffer.from(parts.join(""));
  const reads = Array.from({ length: Math.ceil(raw.length / 65536) }, (_, i) =>
    raw.subarray(i * 65536, (i + 1) * 65536),
  );
  const payload = new TextEncoder().encode(
    Array.from(
      { length: 200 },
      (_, i) => `export SECRET_${i}=tok_${i}abcdef0123456789xyz\nrun-step ${i} --flag value-${i}`,
    ).join("\n"),
  );
  let t = performance.now();
  let partial = "";
  let baseOut = 0;
  for (const r of reads) {
    const text = partial + r.toString("utf8");
    const cut = text.lastIndexOf("\n") + 1;
    baseOut += text
      .slice(0, cut)
      .split("\n")
      .map((l) => l.replace(/\r$/, ""))
      .join("\n").length;
    partial = text.slice(cut);
  }
  const baseMs = performance.now() - t;
  const red = new ConsoleRedactor(["f".repeat(64)]);
  red.payloadDigests = payloadDigests(payload);
  t = performance.now();
  let out = 0;
  for (const r of reads) out += red.feed(r).length;
  const redMs = performance.now() - t;
  console.log(
    `redaction: ${mibps(raw.length, redMs).toFixed(1)} MiB/s; split-and-join baseline ${mibps(raw.length, baseMs).toFixed(1)} MiB/s; ratio ${(redMs / baseMs).toFixed(1)}× the baseline's time (${out} / ${baseOut} chars out)`,
  );

  // 2. The ring.
  const chunkText = ("x".repeat(1023) + "\n").repeat(MAX_LOG_CHUNK_BYTES / 1024);
  const pushes = Math.ceil((MIB * 1024 * 1024) / (MAX_LOG_CHUNK_BYTES * MAX_LOG_CHUNKS_PER_PUSH));
  const s = new SqlStore(join(dir, "objects.db"));
  migrate(s, MIGRATIONS, "bench store");
  s.commit();
  const A = "alloc_" + "b".repeat(32);
  const current = { placementId: "plc_1", generation: 1 };
  t = performance.now();
  let offset = 0;
  for (let p = 0; p < pushes; p++) {
    for (let c = 0; c < MAX_LOG_CHUNKS_PER_PUSH; c++) {
      s.transactionSync(() =>
        appendLogChunk(s, A, current, {
          allocationId: A,
          placementId: "plc_1",
          generation: 1,
          offset,
          text: chunkText,
        }),
      );
      offset += MAX_LOG_CHUNK_BYTES;
    }
    s.commit();
  }
  const ringMs = performance.now() - t;
  t = performance.now();
  let at = 0;
  let readBytes = 0;
  for (;;) {
    const page = readLogPage(s, A, at, MAX_LOG_READ_BYTES);
    if (page.nextOffset === at) break;
    readBytes += page.nextOffset - page.offset;
    at = page.nextOffset;
  }
  const ringReadMs = performance.now() - t;
  s.close();

  const db = new Database(join(dir, "baseline.db"), { create: true, strict: true });
  db.exec(
    "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; CREATE TABLE c (obj TEXT NOT NULL, start INTEGER NOT NULL, bytes INTEGER NOT NULL, text TEXT NOT NULL, PRIMARY KEY (obj, start))",
  );
  const ins = db.query("INSERT INTO c (obj, start, bytes, text) VALUES (?, ?, ?, ?)");
  const del = db.query("DELETE FROM c WHERE obj = ? AND start + bytes <= ?");
  t = performance.now();
  offset = 0;
  for (let p = 0; p < pushes; p++) {
    db.transaction(() => {
      for (let c = 0; c < MAX_LOG_CHUNKS_PER_PUSH; c++) {
        ins.run(A, offset, MAX_LOG_CHUNK_BYTES, chunkText);
        offset += MAX_LOG_CHUNK_BYTES;
        del.run(A, offset - LOG_RING_BYTES);
      }
    })();
  }
  const baseRingMs = performance.now() - t;
  const sel = db.query<{ start: number; bytes: number; text: string }, [string, number]>(
    "SELECT start, bytes, text FROM c WHERE obj = ? AND start + bytes > ? ORDER BY start LIMIT 16",
  );
  t = performance.now();
  let bat = 0;
  let baseRead = 0;
  for (;;) {
    const rows = sel.all(A, bat);
    if (rows.length === 0) break;
    for (const r of rows) baseRead += Buffer.byteLength(r.text);
    bat = rows[rows.length - 1]!.start + rows[rows.length - 1]!.bytes;
  }
  const baseReadMs = performance.now() - t;
  db.close();
  const total = pushes * MAX_LOG_CHUNKS_PER_PUSH * MAX_LOG_CHUNK_BYTES;
  console.log(
    `ring append: ${mibps(total, ringMs).toFixed(1)} MiB/s (${((pushes * 1000) / ringMs).toFixed(0)} pushes/s); bun:sqlite baseline ${mibps(total, baseRingMs).toFixed(1)} MiB/s; ratio ${(ringMs / baseRingMs).toFixed(2)}× the baseline's time`,
  );
  console.log(
    `ring read (the last ${(readBytes / 1024).toFixed(0)} KiB kept): ${mibps(readBytes, ringReadMs).toFixed(1)} MiB/s; baseline ${mibps(baseRead, baseReadMs).toFixed(1)} MiB/s; ratio ${(ringReadMs / baseReadMs).toFixed(2)}× the baseline's time`,
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
