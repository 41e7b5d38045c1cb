/**
 * The embedded object host of `bb scheduler serve`: runs authority-object
 * classes with Durable Objects' semantics in one process over one SQLite
 * file (./sqlStore.ts). docs/architecture.md, "The object runtime";
 * docs/adr/0120-object-runtime-storage.md.
 *
 * Owns: the live instances (one per class and name, in memory, bounded:
 * idle ones beyond MAX_LIVE_INSTANCES are dropped and rebuilt from their
 * rows on next use), typed stubs (a call is an RPC: it starts on a later
 * microtask and may interleave with other calls while it awaits another
 * object), the alarm timer (one timer for the earliest due alarm; rows in
 * `_alarm`; alarm writes wait in memory until the batch commits), inbox
 * delivery (a post appends to the target's inbox in the sender's
 * transaction, a latest-only post waits in memory until the batch commits
 * (./pendingInbox.ts); the target is nudged after the commit), retention
 * deletion, quarantine of damaged instances, and the simulation's crash
 * hook. Stubs handed to the front (not to objects) pass the output gate:
 * their result leaves only after the writes it saw are durable.
 * Must never: keep a closure or service bag that crosses objects, lose an
 * alarm across a restart, or deliver a message before its sender's writes
 * committed.
 */
import type { TSchema } from "@sinclair/typebox";
import { BeachballError } from "../../../protocol/errors.ts";
import type { AnyAuthorityObject, MessageOf, Namespace, ObjectClass, ObjectState, Stub } from "../api.ts";
import { DamagedStateError, isStorageFault } from "../faults.ts";
import type { Clock } from "../../../protocol/clock.ts";
import { Inboxes } from "./inboxes.ts";
import { PendingAlarms } from "./pendingAlarms.ts";
import { BatchAbandoned, SqlStore } from "./sqlStore.ts";
import { HEALTH_PROBE_BYTES, StorageHealth } from "./storageHealth.ts";
import { createLogger, type Logger } from "../../../command/log.ts";

/** Most instances kept in memory; idle ones beyond it are dropped (their rows stay). */
export const MAX_LIVE_INSTANCES = 8192;
/** Most alarms fired by one tick. */
export const MAX_ALARMS_PER_TICK = 256;
/** Longest the alarm timer sleeps before looking again, ms. */
export const MAX_TIMER_SLEEP_MS = 60_000;
/** Alarms due within this window fire in one tick (fewer timer wake-ups), ms. */
export const ALARM_COALESCE_MS = 50;
/** When a failed alarm handler runs again, ms. */
export const ALARM_RETRY_MS = 5_000;

/** Thrown by every call after the simulation's fault hook crashed the runtime. */
export class SimulatedCrash extends Error {
  constructor() {
    super("simulated scheduler crash");
    this.name = "SimulatedCrash";
  }
}

/** Options of the embedded runtime. */
export interface EmbeddedRuntimeOptions {
  /**
   * Simulation hook consulted before each object-to-object call. Returning
   * true commits what is written so far (the caller's intent is durable) and
   * then crashes the runtime: that call and every later one throw SimulatedCrash.
   */
  faultHook?: (fromClass: string, toClass: string) => boolean;
  /** Told when an instance is quarantined (the scheduler raises an alert). */
  onQuarantine?: (className: string, name: string, reason: string) => void;
  /** Live-instance bound (default MAX_LIVE_INSTANCES). */
  maxLiveInstances?: number;
  /** Called once the store is closed (by `close` or `abandon`): the owner releases its data-directory lock. */
  onClosed?: () => void;
  /** Where storage faults are logged (default: JSON lines on stderr). */
  log?: Logger;
}

interface Instance {
  readonly cls: string;
  readonly name: string;
  readonly obj: AnyAuthorityObject;
  busy: number;
  deleteRequested: boolean;
  /** Its in-memory copies may hold writes a failed commit lost: forget it when idle. */
  stale: boolean;
}

type Method = (...args: unknown[]) => unknown;

/** See the module header. `E` is the environment every instance receives. */
export class EmbeddedRuntime<E> {
  readonly store: SqlStore;
  private readonly classes = new Map<string, ObjectClass<AnyAuthorityObject, E>>();
  private readonly instances = new Map<string, Instance>();
  private readonly quarantined = new Map<string, string>();
  private readonly firing = new Set<string>();
  /** Stored and held inbox messages (./inboxes.ts). */
  private readonly inboxes: Inboxes;
  /** Alarm writes of the open batch, held until it commits (./pendingAlarms.ts). */
  private readonly heldAlarms: PendingAlarms;
  private readonly background = new Set<Promise<unknown>>();
  private env: E | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private timerAt = Number.POSITIVE_INFINITY;
  private started = false;
  private closed = false;
  private crashed = false;
  private readonly maxLive: number;
  /** Whether real writes succeed (./storageHealth.ts): what /healthz reports. */
  readonly storageHealth: StorageHealth;

  constructor(
    file: string,
    readonly clock: Clock,
    classes: ObjectClass<AnyAuthorityObject, E>[],
    private readonly options: EmbeddedRuntimeOptions = {},
  ) {
    this.storageHealth = new StorageHealth(
      file,
      options.log ??
        createLogger({ format: "json", sink: (line) => process.stderr.write(line + "\n") }, { role: "scheduler" }),
    );
    this.store = new SqlStore(file, () => this.afterCommitFailure());
    this.inboxes = new Inboxes(this.store, key);
    this.heldAlarms = new PendingAlarms(this.store);
    this.store.setBeforeCommit(() => this.flushHeld());
    for (const c of classes) this.classes.set(c.className, c);
    this.maxLive = options.maxLiveInstances ?? MAX_LIVE_INSTANCES;
  }

  /** Sets the environment instances receive (built from this runtime's namespaces, so it comes after construction). */
  bind(env: E): void {
    this.env = env;
    this.inboxes.rebuild();
    for (const r of this.store.sql.exec<{ cls: string; obj: string; reason: string }>(
      "SELECT cls, obj, reason FROM _quarantine",
    ))
      this.quarantined.set(key(r.cls, r.obj), r.reason);
  }

  /**
   * A namespace of `cls`. `gated` stubs (for the front) resolve only after
   * the writes they saw are durable; stubs for objects are not gated (one
   * file keeps intent and effect in order) but pass the crash hook.
   */
  namespace<T extends AnyAuthorityObject>(
    cls: ObjectClass<T, E>,
    opts: { gated: boolean; from?: string },
  ): Namespace<T> {
    const stubs = new Map<string, Stub<T>>();
    const rt = this;
    return {
      className: cls.className,
      get(name: string): Stub<T> {
        let s = stubs.get(name);
        if (s) return s;
        s = new Proxy({} as Stub<T>, {
          get: (_t, method) =>
            typeof method === "string" && method !== "then"
              ? (...args: unknown[]) => rt.invoke(cls.className, name, method, args, opts.gated, opts.from ?? null)
              : undefined,
        });
        if (stubs.size < 1024) stubs.set(name, s);
        return s;
      },
    };
  }

  /**
   * Names of the instances of `className` that have stored state (rows in
   * the class's tables, an alarm or inbox messages), sorted. Reads the
   * store; for tools and tests.
   */
  listNames(className: string): string[] {
    const c = this.classes.get(className);
    if (!c) return [];
    const names = new Set<string>();
    for (const t of c.tables)
      for (const r of this.store.sql.exec<{ obj: string }>(`SELECT DISTINCT obj FROM ${t}`)) names.add(r.obj);
    for (const t of ["_alarm", "_inbox"])
      for (const r of this.store.sql.exec<{ obj: string }>(`SELECT DISTINCT obj FROM ${t} WHERE cls = ?`, className))
        names.add(r.obj);
    for (const n of this.inboxes.heldNames(className)) names.add(n);
    for (const n of this.heldAlarms.armedNames(className)) names.add(n);
    return [...names].sort();
  }

  /** True after the fault hook crashed this runtime. */
  get isCrashed(): boolean {
    return this.crashed;
  }

  /** Starts the alarm timer and nudges instances with pending inbox messages (left by a previous process). */
  start(): void {
    this.started = true;
    this.recover();
    this.armTimer();
  }

  /** Nudges instances with pending inbox messages without starting the timer (a simulation calls `tick()` itself). */
  recover(): void {
    for (const k of this.inboxes.pending()) {
      const [cls, name] = k.split("\u0000") as [string, string];
      this.nudge(cls, name);
    }
  }

  /** Calls `method` on the instance (cls, name) as an RPC. */
  private async invoke(
    cls: string,
    name: string,
    method: string,
    args: unknown[],
    gated: boolean,
    from: string | null,
  ): Promise<unknown> {
    if (from !== null && !this.crashed && this.options.faultHook?.(from, cls)) {
      this.store.commit();
      this.crashed = true;
    }
    await undefined;
    const inst = this.instance(cls, name);
    const fn = (inst.obj as unknown as Record<string, Method>)[method];
    if (typeof fn !== "function" || method.startsWith("_")) throw new Error(`${cls} has no method ${method}`);
    inst.busy++;
    let result: unknown;
    try {
      result = await fn.apply(inst.obj, args);
    } catch (e) {
      throw this.translate(inst, e);
    } finally {
      this.release(inst);
    }
    if (gated) await this.gate();
    return result;
  }

  /** The output gate for the front: waits until the writes seen so far are durable. */
  private async gate(): Promise<void> {
    try {
      await this.store.durable();
    } catch (e) {
      if (e instanceof BatchAbandoned || this.crashed) throw new SimulatedCrash();
      throw new BeachballError("STORAGE_UNAVAILABLE", "the scheduler could not write its state; retry later", {
        retryAfterSeconds: 5,
      });
    }
  }

  /** Maps a thrown error to what the caller sees: storage faults become STORAGE_UNAVAILABLE, damaged state quarantines the instance. */
  private translate(inst: Instance, e: unknown): unknown {
    if (this.crashed) return new SimulatedCrash();
    if (e instanceof DamagedStateError) {
      this.quarantine(inst.cls, inst.name, e.message);
      return new BeachballError(
        "OBJECT_DAMAGED",
        `${inst.cls} ${inst.name} is damaged and was quarantined: ${e.message}`,
      );
    }
    if (isStorageFault(e)) {
      this.storageHealth.record(e, `${inst.cls} ${inst.name}`, this.clock.wallMs());
      return new BeachballError("STORAGE_UNAVAILABLE", "the scheduler could not read or write its state; retry later", {
        retryAfterSeconds: 5,
      });
    }
    return e;
  }

  private quarantine(cls: string, name: string, reason: string): void {
    const k = key(cls, name);
    if (this.quarantined.has(k)) return;
    this.quarantined.set(k, reason);
    this.instances.delete(k);
    try {
      this.store.sql.exec(
        "INSERT OR REPLACE INTO _quarantine (cls, obj, reason, at_ms) VALUES (?, ?, ?, ?)",
        cls,
        name,
        reason.slice(0, 500),
        this.clock.wallMs(),
      );
    } catch {
      /* the in-memory mark still holds for this process */
    }
    console.error(`beachball: quarantined ${cls} ${name}: ${reason}`);
    this.options.onQuarantine?.(cls, name, reason);
  }

  private instance(cls: string, name: string): Instance {
    if (this.crashed) throw new SimulatedCrash();
    if (this.closed)
      throw new BeachballError("SHUTTING_DOWN", "the scheduler is shutting down", { retryAfterSeconds: 1 });
    const k = key(cls, name);
    const reason = this.quarantined.get(k);
    if (reason !== undefined) throw new BeachballError("OBJECT_DAMAGED", `${cls} ${name} is quarantined: ${reason}`);
    const found = this.instances.get(k);
    if (found) {
      // Map order is the LRU order: move to the back.
      this.instances.delete(k);
      this.instances.set(k, found);
      return found;
    }
    const c = this.classes.get(cls);
    if (!c) throw new Error(`unknown object class ${cls}`);
    if (!this.env) throw new Error("the runtime has no environment yet (call bind)");
    this.evict();
    const inst: Instance = {
      cls,
      name,
      obj: undefined as unknown as AnyAuthorityObject,
      busy: 0,
      deleteRequested: false,
      stale: false,
    };
    const state = this.makeState(c, name, inst);
    (inst as { obj: AnyAuthorityObject }).obj = new c(state, this.env);
    this.instances.set(k, inst);
    return inst;
  }

  private evict(): void {
    if (this.instances.size < this.maxLive) return;
    for (const [k, inst] of this.instances) {
      if (this.instances.size < this.maxLive) break;
      if (inst.busy === 0 && !this.firing.has(k)) this.instances.delete(k);
    }
  }

  private release(inst: Instance): void {
    inst.busy--;
    if (inst.busy > 0) return;
    if (inst.deleteRequested) this.destroy(inst);
    else if (inst.stale && this.instances.get(key(inst.cls, inst.name)) === inst)
      this.instances.delete(key(inst.cls, inst.name));
  }

  /** Deletes every row of the instance (its class's tables, alarm, inbox) and forgets it. */
  private destroy(inst: Instance): void {
    const c = this.classes.get(inst.cls)!;
    this.store.transactionSync(() => {
      for (const t of c.tables) this.store.sql.exec(`DELETE FROM ${t} WHERE obj = ?`, inst.name);
      this.store.sql.exec("DELETE FROM _alarm WHERE cls = ? AND obj = ?", inst.cls, inst.name);
      this.store.sql.exec("DELETE FROM _inbox WHERE cls = ? AND obj = ?", inst.cls, inst.name);
      this.inboxes.drop(key(inst.cls, inst.name));
      this.heldAlarms.drop(key(inst.cls, inst.name));
    });
    this.instances.delete(key(inst.cls, inst.name));
  }

  private makeState<M>(c: ObjectClass<AnyAuthorityObject, E>, name: string, inst: Instance): ObjectState<M> {
    const rt = this;
    const cls = c.className;
    const schema: TSchema | null = c.messageSchema;
    const k = key(cls, name);
    // The alarm as last read or written by this instance (undefined: not known yet), so an unchanged alarm costs no write.
    let alarm: number | null | undefined;
    let alarmRollbacks = 0;
    const inbox = this.inboxes.reader<M>(cls, name, schema);
    return {
      className: cls,
      name,
      storage: this.store,
      setAlarm(atMs) {
        const at = atMs === null ? null : Math.floor(atMs);
        // A rolled-back savepoint may have undone the cached write: then write again.
        if (alarm === at && alarmRollbacks === rt.store.rollbacks) return;
        rt.heldAlarms.set(k, cls, name, at);
        alarm = at;
        alarmRollbacks = rt.store.rollbacks;
        if (at !== null) rt.store.onCommitted(() => rt.alarmArmed(at));
      },
      getAlarm() {
        if (alarm === undefined || alarmRollbacks !== rt.store.rollbacks) {
          alarm = rt.heldAlarms.get(k, cls, name);
          alarmRollbacks = rt.store.rollbacks;
        }
        return alarm;
      },
      post<T extends AnyAuthorityObject>(to: Namespace<T>, target: string, messageId: string, message: MessageOf<T>) {
        if (!rt.classes.has(to.className)) throw new Error(`unknown object class ${to.className}`);
        if (rt.inboxes.post(to.className, target, messageId, JSON.stringify(message)))
          rt.delivered(to.className, target);
      },
      postLatest<T extends AnyAuthorityObject>(
        to: Namespace<T>,
        target: string,
        messageKey: string,
        message: MessageOf<T>,
      ) {
        if (!rt.classes.has(to.className)) throw new Error(`unknown object class ${to.className}`);
        // Held until the batch commits: replaced or consumed before then, it costs no statement.
        rt.inboxes.postLatest(to.className, target, messageKey, JSON.stringify(message));
        rt.delivered(to.className, target);
      },
      readInbox: () => inbox.read(),
      ackInbox: (seq) => inbox.ack(seq),
      deleteSelf() {
        inst.deleteRequested = true;
      },
    };
  }

  /** A message was sent to (cls, name): nudge it after the commit. */
  private delivered(cls: string, name: string): void {
    this.store.onCommitted(() => this.nudge(cls, name));
  }

  /** Writes the held messages to `_inbox` and the held alarms to `_alarm` (just before COMMIT). */
  private flushHeld(): void {
    this.inboxes.flushAll();
    this.heldAlarms.flush();
  }

  /** A batch failed to commit: its writes are gone, so are its held messages; in-memory copies are dropped and the inbox map re-read. */
  private afterCommitFailure(): void {
    if (this.store.failure && !this.crashed)
      this.storageHealth.record(this.store.failure, "commit", this.clock.wallMs());
    this.inboxes.clearHeld();
    this.heldAlarms.clear();
    this.dropInstances();
    try {
      this.inboxes.rebuild();
    } catch {
      /* the store is failing: keep what is known; a later read finds the truth */
    }
  }

  /** Runs the target's onInbox after a commit (background; errors are logged, the messages stay for the next nudge or alarm). */
  private nudge(cls: string, name: string): void {
    if (this.closed || this.crashed) return;
    this.spawn(this.invoke(cls, name, "onInbox", [], false, null));
  }

  private spawn(p: Promise<unknown>): void {
    const q = p
      .catch((e) => {
        if (!this.crashed && !this.closed && !(e instanceof SimulatedCrash))
          console.error("beachball: background object work failed:", e instanceof Error ? e.message : e);
      })
      .finally(() => this.background.delete(q));
    this.background.add(q);
  }

  private alarmArmed(atMs: number): void {
    if (this.started && atMs < this.timerAt) this.armTimer(atMs);
  }

  private armTimer(at?: number): void {
    if (!this.started || this.closed) return;
    const now = this.clock.wallMs();
    // Alarms still firing keep their rows until their handler returns: never spin on them.
    const next = Math.max(
      at ?? this.nextAlarmAt() ?? now + MAX_TIMER_SLEEP_MS,
      now + (at === undefined ? ALARM_COALESCE_MS : 0),
    );
    if (this.timer) clearTimeout(this.timer);
    this.timerAt = next;
    const delay = Math.max(0, Math.min(next - now, MAX_TIMER_SLEEP_MS));
    this.timer = setTimeout(() => {
      this.timerAt = Number.POSITIVE_INFINITY;
      this.tick();
      this.armTimer();
    }, delay);
    this.timer.unref?.();
  }

  private nextAlarmAt(): number | null {
    this.heldAlarms.flush();
    return this.store.sql.exec<{ at: number | null }>("SELECT MIN(at_ms) AS at FROM _alarm").one().at;
  }

  /** Fires every alarm that is due now (the timer calls this; a simulation calls it directly with its fake clock). */
  tick(): void {
    if (this.closed || this.crashed) return;
    this.heldAlarms.flush();
    const now = this.clock.wallMs();
    const due = this.store.sql
      .exec<{ cls: string; obj: string; at_ms: number }>(
        "SELECT cls, obj, at_ms FROM _alarm WHERE at_ms <= ? ORDER BY at_ms, cls, obj LIMIT ?",
        now,
        MAX_ALARMS_PER_TICK + this.firing.size,
      )
      .toArray();
    let fired = 0;
    for (const d of due) {
      const k = key(d.cls, d.obj);
      if (this.firing.has(k) || fired >= MAX_ALARMS_PER_TICK) continue;
      fired++;
      this.firing.add(k);
      this.spawn(this.fire(d.cls, d.obj, d.at_ms).finally(() => this.firing.delete(k)));
    }
  }

  /** Runs one alarm: the row stays until the handler returns, so a crash inside it leaves the alarm armed for the next process. */
  private async fire(cls: string, name: string, atMs: number): Promise<void> {
    const k = key(cls, name);
    await this.invoke(cls, name, "alarm", [], false, null).catch((e) => {
      if (this.crashed || this.closed) throw e;
      const damaged = e instanceof BeachballError && e.code === "OBJECT_DAMAGED";
      if (this.heldAlarms.get(k, cls, name) === atMs)
        this.heldAlarms.set(k, cls, name, damaged ? null : this.clock.wallMs() + ALARM_RETRY_MS);
      throw e;
    });
    if (this.crashed || this.closed) return;
    if (this.heldAlarms.get(k, cls, name) === atMs) this.heldAlarms.set(k, cls, name, null);
  }

  /** Forgets every live instance (after a failed commit their in-memory copies may hold writes that are gone). */
  private dropInstances(): void {
    for (const [k, inst] of this.instances) {
      if (inst.busy === 0) this.instances.delete(k);
      else inst.stale = true;
    }
  }

  /** Waits until background work (nudges, alarms) settled and the open batch committed. For tests, simulations and shutdown. */
  async idle(): Promise<void> {
    for (let i = 0; i < 10_000; i++) {
      if (this.background.size > 0) await Promise.allSettled([...this.background]);
      else if (this.store.pending) await this.store.durable().catch(() => undefined);
      else return;
    }
  }

  /**
   * Writes and commits a probe row of `bytes` (then, for a large one,
   * deletes it in a second commit): throws if the store cannot be written
   * (read-only, full, failing).
   */
  probe(bytes = 16): void {
    const value = bytes <= 16 ? String(this.clock.wallMs()) : "x".repeat(bytes);
    this.store.sql.exec(
      "INSERT INTO _meta (key, value) VALUES ('probe', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
      value,
    );
    this.store.commit();
    if (this.store.failure) throw this.store.failure;
    if (bytes <= 16) return;
    this.store.sql.exec("UPDATE _meta SET value = ? WHERE key = 'probe'", String(this.clock.wallMs()));
    this.store.commit();
    if (this.store.failure) throw this.store.failure;
  }

  /**
   * Storage health (./storageHealth.ts): ok, or the recorded fault of a real
   * write with its SQLite code, file and next step. While a fault that a
   * probe can clear is recorded, a probe of HEALTH_PROBE_BYTES runs (at most
   * once a second); only its success clears the fault.
   */
  health(): { ok: boolean; detail: string; code?: string } {
    if (this.closed) return { ok: false, detail: "shutting down" };
    const now = this.clock.wallMs();
    if (this.storageHealth.probeDue(now)) {
      try {
        this.probe(HEALTH_PROBE_BYTES);
        this.storageHealth.probeSucceeded(now);
      } catch {
        /* still failing: the recorded fault stands */
      }
    }
    return this.storageHealth.health();
  }

  /** Stops the timer, ends waits (parked polls), waits for background work, commits and closes the file. */
  async close(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    for (const inst of this.instances.values()) inst.obj.drain();
    await this.idle();
    this.closed = true;
    try {
      this.store.close();
    } finally {
      this.options.onClosed?.();
    }
  }

  /** Abandons a crashed runtime: the open batch is rolled back (as a real crash loses it) and the file closed. */
  async abandon(): Promise<void> {
    this.crashed = true;
    this.inboxes.clearHeld();
    this.heldAlarms.clear();
    if (this.timer) clearTimeout(this.timer);
    await Promise.allSettled([...this.background]);
    this.closed = true;
    try {
      this.store.closeAbandoned();
    } finally {
      this.options.onClosed?.();
    }
  }
}

function key(cls: string, name: string): string {
  return `${cls}\u0000${name}`;
}
