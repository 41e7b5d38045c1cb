/**
 * The QMP client (qmp.ts) against a real QEMU (`-M none`: no guest, the
 * same QMP server) for stop, cont, query-status and QEMU's own error, and
 * against misbehaving peers on a Unix socket for what QEMU never sends: no
 * greeting, a line that is not JSON, an endless line, a close mid-command,
 * events before the answer.
 */
import { afterAll, expect, test } from "bun:test";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { createServer } from "node:net";
import { join } from "node:path";
import { MAX_QMP_LINE_BYTES, QmpSession, qmpExecute } from "./qmp.ts";

const work = mkdtempSync(join(tmpdir(), "bb-qmp-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));
const qemu = Bun.which("qemu-system-x86_64");
if (!qemu) console.log("SKIP qmp.test.ts real-QEMU case: qemu-system-x86_64 missing (scripts/setup.sh installs it)");

const GREETING = '{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}}, "capabilities": []}}\n';

/** A Unix-socket peer that greets (unless told not to) and answers each line with `answer(line)` (null: it closes). */
function peer(name: string, answer: (line: Record<string, unknown>) => string | null, greet = GREETING) {
  const path = join(work, `${name}.sock`);
  const server = createServer((s) => {
    if (greet) s.write(greet);
    s.on("error", () => {});
    s.on("data", (data) => {
      for (const l of data.toString().split("\n").filter(Boolean)) {
        const out = answer(JSON.parse(l) as Record<string, unknown>);
        if (out === null) s.destroy();
        else if (out) s.write(out);
      }
    });
  }).listen(path);
  return { path, stop: () => server.close() };
}
const ok = (l: Record<string, unknown>, ret: unknown = {}) => `${JSON.stringify({ return: ret, id: l.id })}\n`;

test.skipIf(!qemu)("a real QEMU: stop and cont change query-status; an unknown command is QEMU's error", async () => {
  const path = join(work, "real.sock");
  const p = Bun.spawn([qemu!, "-M", "none", "-nodefaults", "-nographic", "-qmp", `unix:${path},server=on,wait=off`], {
    stdout: "ignore",
    stderr: "pipe",
  });
  try {
    for (let i = 0; i < 200 && !existsSync(path); i++) await Bun.sleep(25);
    const s = await QmpSession.open(path);
    expect(await s.execute("query-status")).toMatchObject({ running: true, status: "running" });
    await s.execute("stop");
    await s.execute("stop"); // idempotent in QEMU too
    expect(await s.execute("query-status")).toMatchObject({ running: false, status: "paused" });
    await s.execute("cont");
    expect(await s.execute("query-status")).toMatchObject({ running: true });
    await expect(s.execute("no-such-command")).rejects.toMatchObject({
      code: "VMM_CONTROL_FAILED",
      message: expect.stringContaining("CommandNotFound"),
    });
    s.close();
    await expect(s.execute("query-status")).rejects.toMatchObject({ message: expect.stringContaining("closed") });
    expect(await qmpExecute(path, "query-status")).toMatchObject({ running: true });
  } finally {
    p.kill("SIGKILL");
    await p.exited;
  }
});

test("events before the answer are skipped; arguments are sent as given", async () => {
  const seen: Record<string, unknown>[] = [];
  const q = peer("events", (l) => {
    seen.push(l);
    return `{"event": "STOP", "timestamp": {"seconds": 1, "microseconds": 2}}\n${ok(l, { v: 1 })}`;
  });
  try {
    expect(await qmpExecute(q.path, "human-monitor-command", { "command-line": "info status" })).toEqual({ v: 1 });
    expect(seen[1]).toMatchObject({ execute: "human-monitor-command", arguments: { "command-line": "info status" } });
  } finally {
    q.stop();
  }
});

test("bad peers: no socket, no greeting, not JSON, an endless line, a close mid-command are VMM_CONTROL_FAILED", async () => {
  const failed = { code: "VMM_CONTROL_FAILED" };
  await expect(QmpSession.open(join(work, "absent.sock"), 500)).rejects.toMatchObject(failed);
  const silent = peer("silent", () => "", "");
  const garbage = peer("garbage", () => "", "not json\n");
  const endless = peer("endless", () => "", `{"QMP": "${"x".repeat(MAX_QMP_LINE_BYTES + 10)}`);
  const closing = peer("closing", (l) => (l.execute === "qmp_capabilities" ? ok(l) : null));
  try {
    await expect(QmpSession.open(silent.path, 300)).rejects.toMatchObject({
      ...failed,
      message: expect.stringContaining("no answer within 300 ms"),
    });
    await expect(QmpSession.open(garbage.path, 1000)).rejects.toMatchObject({
      ...failed,
      message: expect.stringContaining("not JSON"),
    });
    await expect(QmpSession.open(endless.path, 5000)).rejects.toMatchObject({
      ...failed,
      message: expect.stringContaining(`over ${MAX_QMP_LINE_BYTES} bytes`),
    });
    const s = await QmpSession.open(closing.path, 1000);
    await expect(s.execute("stop", undefined, 1000)).rejects.toMatchObject({
      ...failed,
      message: expect.stringContaining("closed"),
    });
  } finally {
    for (const p of [silent, garbage, endless, closing]) p.stop();
  }
});
