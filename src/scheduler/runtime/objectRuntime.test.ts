import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { AuthorityObject, ObjectRuntime, type ObjectContext } from "./objectRuntime.ts";
import { FakeClock, SeededRandom } from "../../../test/sim/rng.ts";

/** A counter object that records alarms and inbox messages. */
class Counter extends AuthorityObject {
  static readonly className = "Counter";
  constructor(ctx: ObjectContext) {
    super(ctx);
    ctx.sql.exec("CREATE TABLE IF NOT EXISTS c (id INTEGER PRIMARY KEY CHECK (id = 1), n INTEGER NOT NULL, alarms INTEGER NOT NULL, seen TEXT NOT NULL); INSERT OR IGNORE INTO c VALUES (1, 0, 0, '');");
  }
  get(): { n: number; alarms: number; seen: string } {
    return this.ctx.sql.query<{ n: number; alarms: number; seen: string }, []>("SELECT n, alarms, seen FROM c").get()!;
  }
  async slowIncrement(): Promise<number> {
    const before = this.get().n;
    await Bun.sleep(5);
    this.ctx.sql.query("UPDATE c SET n = ?").run(before + 1);
    return before + 1;
  }
  arm(at: number): void {
    this.ctx.setAlarm(at);
  }
  send(to: string, id: string): void {
    this.ctx.sql.transaction(() => this.ctx.post("Counter", to, { messageId: id, kind: "hello", body: { from: this.ctx.name } }))();
  }
  purge(): void {
    this.ctx.deleteSelf();
  }
  override alarm(): void {
    this.ctx.sql.query("UPDATE c SET alarms = alarms + 1").run();
  }
  override onInbox(): void {
    const msgs = this.ctx.readInbox();
    if (!msgs.length) return;
    for (const m of msgs) this.ctx.sql.query("UPDATE c SET seen = seen || ?").run(`${m.messageId};`);
    this.ctx.ackInbox(msgs[msgs.length - 1]!.seq);
  }
}

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
function rt(dir: string, clock: FakeClock): ObjectRuntime {
  const r = new ObjectRuntime(dir, clock, new SeededRandom(1), [Counter]);
  r.recover();
  return r;
}

describe("object runtime", () => {
  test("one turn at a time per instance: concurrent read-modify-write loses nothing", async () => {
    const dir = mkdtempSync(join(tmpdir(), "bb-rt-"));
    dirs.push(dir);
    const r = rt(dir, new FakeClock(1000));
    const results = await Promise.all(Array.from({ length: 20 }, () => r.call(Counter, "a", (o) => o.slowIncrement())));
    expect(results.sort((x, y) => x - y)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    await r.close();
  });

  test("an alarm survives a restart and fires once when due", async () => {
    const dir = mkdtempSync(join(tmpdir(), "bb-rt-"));
    dirs.push(dir);
    const clock = new FakeClock(1000);
    let r = rt(dir, clock);
    await r.call(Counter, "a", (o) => o.arm(5000));
    await r.close();
    r = rt(dir, clock);
    clock.advance(3000);
    r.tick();
    await r.idle();
    expect((await r.call(Counter, "a", (o) => o.get())).alarms).toBe(0);
    clock.advance(2000);
    r.tick();
    await r.idle();
    clock.advance(10_000);
    r.tick();
    await r.idle();
    expect((await r.call(Counter, "a", (o) => o.get())).alarms).toBe(1);
    await r.close();
  });

  test("posts reach the target's inbox once, even when posted twice", async () => {
    const dir = mkdtempSync(join(tmpdir(), "bb-rt-"));
    dirs.push(dir);
    const r = rt(dir, new FakeClock(1000));
    await r.call(Counter, "a", (o) => o.send("b", "m1"));
    await r.call(Counter, "a", (o) => o.send("b", "m1"));
    await r.call(Counter, "a", (o) => o.send("b", "m2"));
    await r.idle();
    expect((await r.call(Counter, "b", (o) => o.get())).seen).toBe("m1;m2;");
    await r.close();
  });

  test("deleteSelf removes the database and the registry row", async () => {
    const dir = mkdtempSync(join(tmpdir(), "bb-rt-"));
    dirs.push(dir);
    const r = rt(dir, new FakeClock(1000));
    await r.call(Counter, "gone", (o) => o.slowIncrement());
    expect(r.exists("Counter", "gone")).toBe(true);
    await r.call(Counter, "gone", (o) => o.purge());
    expect(r.exists("Counter", "gone")).toBe(false);
    expect((await r.call(Counter, "gone", (o) => o.get())).n).toBe(0);
    await r.close();
  });

  test("a database from another schema version is refused with a clear message", async () => {
    const dir = mkdtempSync(join(tmpdir(), "bb-rt-"));
    dirs.push(dir);
    let r = rt(dir, new FakeClock(1000));
    await r.call(Counter, "a", (o) => o.slowIncrement());
    await r.close();
    (Counter as unknown as { schemaVersion: number }).schemaVersion = 2;
    try {
      r = rt(dir, new FakeClock(1000));
      await expect(r.call(Counter, "a", (o) => o.get())).rejects.toThrow("schema version 1 but this build expects 2");
      await r.close();
    } finally {
      (Counter as unknown as { schemaVersion: number }).schemaVersion = 1;
    }
  });
});
