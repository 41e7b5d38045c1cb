import { afterEach, describe, expect, test } from "bun:test";
import { Type, type Static } from "@sinclair/typebox";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { AuthorityObject, type Namespace, type ObjectState } from "../api.ts";
import { DamagedStateError } from "../faults.ts";
import { migrate } from "../migrate.ts";
import { MIGRATIONS } from "../../migrations/index.ts";
import { EmbeddedRuntime, SimulatedCrash } from "./embeddedRuntime.ts";
import { FakeClock } from "../../../protocol/fakeClock.ts";
import { BeachballError } from "../../../protocol/errors.ts";

const Hello = Type.Object({ kind: Type.Literal("hello"), from: Type.String() }, { additionalProperties: false });
type Hello = Static<typeof Hello>;

interface Env {
  Counter: Namespace<Counter>;
}

/** A counter that records alarms and inbox messages. */
class Counter extends AuthorityObject<Env, Hello> {
  static readonly className = "Counter";
  static readonly messageSchema = Hello;
  static readonly tables = ["counter"] as const;
  constructor(state: ObjectState<Hello>, env: Env) {
    super(state, env);
  }
  private row(): { n: number; alarms: number; seen: string } {
    const r = this.state.storage.sql
      .exec<{ n: number; alarms: number; seen: string }>(
        "SELECT n, alarms, seen FROM counter WHERE obj = ?",
        this.state.name,
      )
      .next();
    return r.done ? { n: 0, alarms: 0, seen: "" } : r.value;
  }
  private write(p: { n?: number; alarms?: number; seen?: string }): void {
    const r = { ...this.row(), ...p };
    this.state.storage.sql.exec(
      "INSERT OR REPLACE INTO counter (obj, n, alarms, seen) VALUES (?, ?, ?, ?)",
      this.state.name,
      r.n,
      r.alarms,
      r.seen,
    );
  }
  get(): { n: number; alarms: number; seen: string } {
    return this.row();
  }
  increment(): number {
    const n = this.row().n + 1;
    this.write({ n });
    return n;
  }
  async incrementAcrossAwait(): Promise<number> {
    const before = this.row().n;
    await Bun.sleep(2);
    this.write({ n: before + 1 });
    return before + 1;
  }
  arm(at: number): void {
    this.state.setAlarm(at);
  }
  send(to: string, id: string): void {
    this.state.storage.transactionSync(() =>
      this.state.post(this.env.Counter, to, id, { kind: "hello", from: this.state.name }),
    );
  }
  announce(to: string, key: string, text: string): void {
    this.state.postLatest(this.env.Counter, to, key, { kind: "hello", from: text });
  }
  announceThenFail(to: string, key: string): void {
    this.state.storage.transactionSync(() => {
      this.state.postLatest(this.env.Counter, to, key, { kind: "hello", from: "rolled-back" });
      this.state.setAlarm(123_456);
      throw new Error("boom");
    });
  }
  announceThenPost(to: string, key: string, id: string): void {
    this.state.postLatest(this.env.Counter, to, key, { kind: "hello", from: this.state.name });
    this.state.post(this.env.Counter, to, id, { kind: "hello", from: this.state.name });
  }
  armTwice(first: number, second: number): void {
    this.state.setAlarm(first);
    this.state.setAlarm(second);
  }
  async announceArmAndCall(to: string): Promise<void> {
    this.state.postLatest(this.env.Counter, to, "before-crash", { kind: "hello", from: this.state.name });
    this.state.setAlarm(9_000);
    await this.env.Counter.get(to).get();
  }
  getAlarmForTest(): number | null {
    return this.state.getAlarm();
  }
  readNow(): void {
    this.onInbox();
  }
  sendBad(to: string, id: string): void {
    this.state.post(this.env.Counter, to, id, { kind: "nope" } as unknown as Hello);
  }
  broken(): void {
    throw new DamagedStateError("row fails its checks");
  }
  purge(): void {
    this.state.deleteSelf();
  }
  override alarm(): void {
    this.write({ alarms: this.row().alarms + 1 });
  }
  override onInbox(): void {
    const msgs = this.state.readInbox();
    if (!msgs.length) return;
    this.state.storage.transactionSync(() => {
      this.write({ seen: this.row().seen + msgs.map((m) => `${m.messageId}<${m.message.from};`).join("") });
      this.state.ackInbox(msgs[msgs.length - 1]!.seq);
    });
  }
}

const dirs: string[] = [];
const runtimes: EmbeddedRuntime<Env>[] = [];
afterEach(async () => {
  for (const r of runtimes.splice(0)) await r.close().catch(() => undefined);
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function open(dir: string, clock: FakeClock, opts: ConstructorParameters<typeof EmbeddedRuntime<Env>>[3] = {}) {
  const rt = new EmbeddedRuntime<Env>(join(dir, "objects.db"), clock, [Counter], opts);
  migrate(rt.store, MIGRATIONS, "test");
  rt.store.sql.exec(
    "CREATE TABLE IF NOT EXISTS counter (obj TEXT PRIMARY KEY, n INTEGER NOT NULL, alarms INTEGER NOT NULL, seen TEXT NOT NULL)",
  );
  rt.store.commit();
  rt.bind({ Counter: rt.namespace(Counter, { gated: false, from: "object" }) });
  rt.recover();
  runtimes.push(rt);
  return { rt, front: rt.namespace(Counter, { gated: true }) };
}

function tmp(): string {
  const d = mkdtempSync(join(tmpdir(), "bb-rt-"));
  dirs.push(d);
  return d;
}

describe("embedded runtime: Durable Objects semantics on one file", () => {
  test("synchronous read-modify-write never interleaves; code across an await may (as on Durable Objects)", async () => {
    const { front } = open(tmp(), new FakeClock({ wallMs: 1000 }));
    const results = await Promise.all(Array.from({ length: 20 }, () => front.get("a").increment()));
    expect(results.sort((x, y) => x - y)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
    const across = await Promise.all(Array.from({ length: 5 }, () => front.get("b").incrementAcrossAwait()));
    expect(Math.max(...across)).toBeLessThan(5);
  });

  test("group commit: many concurrent calls share one commit, and a gated result waits for it", async () => {
    const { rt, front } = open(tmp(), new FakeClock({ wallMs: 1000 }));
    const before = rt.store.commits;
    const results = await Promise.all(Array.from({ length: 50 }, (_, i) => front.get(`c${i}`).increment()));
    expect(results.every((n) => n === 1)).toBe(true);
    expect(rt.store.pending).toBe(false);
    expect(rt.store.commits - before).toBe(1);
  });

  test("a crash loses what was not committed, and no gated output of it ever left", async () => {
    const dir = tmp();
    const clock = new FakeClock({ wallMs: 1000 });
    const { rt, front } = open(dir, clock);
    await front.get("a").increment();
    const internal = rt.namespace(Counter, { gated: false });
    const late = internal.get("a").increment();
    expect(await late).toBe(2);
    expect(rt.store.pending).toBe(true);
    await rt.abandon();
    const again = open(dir, clock);
    expect((await again.front.get("a").get()).n).toBe(1);
  });

  test("the fault hook commits the caller's writes, then every call fails", async () => {
    const dir = tmp();
    const clock = new FakeClock({ wallMs: 1000 });
    let crash = false;
    const { rt, front } = open(dir, clock, { faultHook: () => crash });
    await front.get("a").increment();
    crash = true;
    const internal = rt.namespace(Counter, { gated: false, from: "Counter" });
    await expect(internal.get("b").increment()).rejects.toBeInstanceOf(SimulatedCrash);
    await expect(front.get("a").get()).rejects.toBeInstanceOf(SimulatedCrash);
    expect(rt.isCrashed).toBe(true);
    await rt.abandon();
    expect((await open(dir, clock).front.get("a").get()).n).toBe(1);
  });

  test("alarms are rows: they fire when due, survive a restart, and a handler that does not re-arm clears its alarm", async () => {
    const dir = tmp();
    const clock = new FakeClock({ wallMs: 1000 });
    const { rt, front } = open(dir, clock);
    await front.get("a").arm(5000);
    rt.tick();
    await rt.idle();
    expect((await front.get("a").get()).alarms).toBe(0);
    await rt.close();
    const { rt: rt2, front: f2 } = open(dir, clock);
    clock.advance(5000);
    rt2.tick();
    await rt2.idle();
    expect((await f2.get("a").get()).alarms).toBe(1);
    clock.advance(10_000);
    rt2.tick();
    await rt2.idle();
    expect((await f2.get("a").get()).alarms).toBe(1);
  });

  test("posts are delivered after the sender's commit, deduplicated while pending; a message failing its schema is dropped", async () => {
    const dir = tmp();
    const clock = new FakeClock({ wallMs: 1000 });
    const { rt, front } = open(dir, clock);
    await Promise.all([front.get("a").send("b", "m1"), front.get("a").send("b", "m1")]);
    await front.get("a").sendBad("b", "bad");
    await rt.idle();
    expect((await front.get("b").get()).seen).toBe("m1<a;");
    await front.get("a").send("b", "m2");
    await rt.abandon();
    const { rt: rt2, front: f2 } = open(dir, clock);
    await rt2.idle();
    expect((await f2.get("b").get()).seen).toBe("m1<a;m2<a;");
  });

  test("damaged state quarantines the instance by name, across restarts, without touching others", async () => {
    const dir = tmp();
    const clock = new FakeClock({ wallMs: 1000 });
    const quarantined: string[] = [];
    const { rt, front } = open(dir, clock, { onQuarantine: (c, n) => quarantined.push(`${c}/${n}`) });
    await front.get("ok").increment();
    const err = await front
      .get("bad")
      .broken()
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BeachballError);
    expect((err as BeachballError).code).toBe("OBJECT_DAMAGED");
    expect((err as BeachballError).message).toContain("Counter bad");
    expect(quarantined).toEqual(["Counter/bad"]);
    await rt.close();
    const { front: f2 } = open(dir, clock);
    expect(
      (
        (await f2
          .get("bad")
          .get()
          .catch((e: unknown) => e)) as BeachballError
      ).code,
    ).toBe("OBJECT_DAMAGED");
    expect((await f2.get("ok").get()).n).toBe(1);
  });

  test("deleteSelf removes the instance's rows and alarm once its call ends", async () => {
    const { rt, front } = open(tmp(), new FakeClock({ wallMs: 1000 }));
    await front.get("a").increment();
    await front.get("a").arm(99_999);
    await front.get("a").purge();
    await rt.idle();
    expect(rt.store.sql.exec("SELECT COUNT(*) AS n FROM counter").one()).toEqual({ n: 0 });
    expect(rt.store.sql.exec("SELECT COUNT(*) AS n FROM _alarm").one()).toEqual({ n: 0 });
  });

  test("live instances stay bounded: idle ones are dropped and rebuilt from their rows", async () => {
    const { front } = open(tmp(), new FakeClock({ wallMs: 1000 }), { maxLiveInstances: 4 });
    for (let i = 0; i < 20; i++) await front.get(`x${i}`).increment();
    for (let i = 0; i < 20; i++) expect((await front.get(`x${i}`).get()).n).toBe(1);
  });

  test("latest-only messages wait in memory for the commit: a replaced one is written once, in its last version; one read in the same batch is never written", async () => {
    const { rt, front } = open(tmp(), new FakeClock({ wallMs: 1000 }));
    rt.store.sql.exec("CREATE TABLE inbox_writes (n INTEGER)");
    rt.store.sql.exec(
      "CREATE TRIGGER count_inbox_writes AFTER INSERT ON _inbox BEGIN INSERT INTO inbox_writes VALUES (1); END",
    );
    await front.get("b").get();
    const internal = rt.namespace(Counter, { gated: false });
    const writes = () => rt.store.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM inbox_writes").one().n;
    // Same turn, same batch: the second replaces the first before anything is written.
    await Promise.all([internal.get("a").announce("b", "k", "v1"), internal.get("a").announce("b", "k", "v2")]);
    await rt.idle();
    expect((await front.get("b").get()).seen).toBe("k<v2;");
    expect(writes()).toBe(1);
    // Read and acknowledged by the receiver within the batch: delivered without a row.
    await Promise.all([internal.get("a").announce("b", "k2", "v3"), internal.get("b").readNow()]);
    await rt.idle();
    expect((await front.get("b").get()).seen).toBe("k<v2;k2<v3;");
    expect(writes()).toBe(1);
    expect(rt.store.sql.exec("SELECT COUNT(*) AS n FROM _inbox").one()).toEqual({ n: 0 });
  });

  test("held messages and alarms of a savepoint that rolls back are undone; a plain post after a held message is read after it", async () => {
    const { rt, front } = open(tmp(), new FakeClock({ wallMs: 1000 }));
    await expect(front.get("a").announceThenFail("b", "k")).rejects.toThrow("boom");
    await rt.idle();
    expect((await front.get("b").get()).seen).toBe("");
    expect(await front.get("a").getAlarmForTest()).toBeNull();
    expect(rt.store.sql.exec("SELECT COUNT(*) AS n FROM _alarm").one()).toEqual({ n: 0 });
    await front.get("a").announceThenPost("b", "k", "m1");
    await rt.idle();
    expect((await front.get("b").get()).seen).toBe("k<a;m1<a;");
  });

  test("an alarm set twice in one batch is written once, with the last value", async () => {
    const { rt, front } = open(tmp(), new FakeClock({ wallMs: 1000 }));
    rt.store.sql.exec("CREATE TABLE alarm_writes (n INTEGER)");
    rt.store.sql.exec(
      "CREATE TRIGGER count_alarm_inserts AFTER INSERT ON _alarm BEGIN INSERT INTO alarm_writes VALUES (1); END",
    );
    rt.store.sql.exec(
      "CREATE TRIGGER count_alarm_updates AFTER UPDATE ON _alarm BEGIN INSERT INTO alarm_writes VALUES (1); END",
    );
    await front.get("a").armTwice(5_000, 7_000);
    expect(rt.store.sql.exec("SELECT obj, at_ms FROM _alarm").toArray()).toEqual([{ obj: "a", at_ms: 7_000 }]);
    expect(rt.store.sql.exec("SELECT COUNT(*) AS n FROM alarm_writes").one()).toEqual({ n: 1 });
  });

  test("the fault hook's commit includes held messages and alarms (the caller's intent is durable)", async () => {
    const dir = tmp();
    const clock = new FakeClock({ wallMs: 1000 });
    let crash = false;
    const { rt, front } = open(dir, clock, { faultHook: () => crash });
    await front.get("b").get();
    crash = true;
    await expect(front.get("a").announceArmAndCall("b")).rejects.toBeInstanceOf(SimulatedCrash);
    await rt.abandon();
    const { rt: rt2, front: f2 } = open(dir, clock);
    await rt2.idle();
    expect((await f2.get("b").get()).seen).toBe("before-crash<a;");
    expect(rt2.store.sql.exec("SELECT obj, at_ms FROM _alarm").toArray()).toEqual([{ obj: "a", at_ms: 9_000 }]);
  });
});
