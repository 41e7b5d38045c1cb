/**
 * One object on workerd, without the platform class (./durableHost.ts
 * wraps it in workerd's DurableObject and delegates its three RPC entry
 * points here): finds or records the instance name, builds the instance's
 * ObjectState over the object's own database, runs calls, the inbox and
 * the alarm, and after each call delivers the outbox and honours
 * deleteSelf. The platform's single alarm carries the object's alarm and
 * the outbox/inbox retries (OUTBOX_RETRY_MS).
 * Must never: lose an outbox row before its target acknowledged it, or
 * let two deliveries read the same outbox at once.
 */
import type { AnyAuthorityObject, MessageOf, Namespace, ObjectClass, ObjectState } from "../api.ts";
import { migrate } from "../migrate.ts";
import { ackInbox, insertInbox, readAlarm, readInbox, upsertInbox, writeAlarm } from "../stateRows.ts";
import { encodeError } from "./durableErrors.ts";
import { deleteOutbox, type OutboxRow, outboxPending, readOutboxByTarget, writeOutbox } from "./durableOutbox.ts";
import type { DurableState, HostBindings, OutboxMessage } from "./durableTypes.ts";

/** When an undelivered outbox is retried, ms. */
export const OUTBOX_RETRY_MS = 2_000;

/** Methods of an instance that are never callable by RPC (the runtime's own entry points and `_` helpers). */
function callable(method: string): boolean {
  return !method.startsWith("_") && method !== "alarm" && method !== "onInbox" && method !== "drain";
}

/** The runtime of one workerd object: `ctx` is the platform's state, `raw` the Worker's bindings. */
export class DurableInstance<T extends AnyAuthorityObject, E> {
  private impl: T | undefined;
  private name: string | undefined;
  private deleteRequested = false;
  private kicking = false;
  /** The outbox delivery in flight (single-flight: at most one per object). */
  private delivering: Promise<void> | null = null;
  /** A call ended while a delivery was in flight: read the outbox again before that delivery settles. */
  private deliverAgain = false;
  private readonly className: string;

  constructor(
    private readonly ctx: DurableState,
    private readonly raw: unknown,
    private readonly cls: ObjectClass<T, E>,
    private readonly host: HostBindings<E>,
  ) {
    this.className = cls.className;
    void ctx.blockConcurrencyWhile(async () => {
      migrate(ctx.storage, host.migrations, `${this.className} object`);
    });
  }

  private get sql() {
    return this.ctx.storage.sql;
  }

  private instance(name?: string): T {
    if (this.impl) return this.impl;
    const stored = this.sql.exec<{ value: string }>("SELECT value FROM _meta WHERE key = 'name'").next();
    const n = name ?? (stored.done ? undefined : stored.value.value);
    if (!n) throw new Error(`${this.className}: instance name unknown`);
    if (stored.done) this.sql.exec("INSERT INTO _meta (key, value) VALUES ('name', ?)", n);
    this.name = n;
    this.impl = new this.cls(this.state(n), this.host.env(this.raw));
    return this.impl;
  }

  private state<M>(name: string): ObjectState<M> {
    const { sql, className } = this;
    const post = (to: Namespace<AnyAuthorityObject>, target: string, id: string, message: unknown, latest: boolean) =>
      writeOutbox(
        sql,
        { cls: className, obj: name, targetCls: to.className, targetObj: target },
        id,
        JSON.stringify(message),
        latest,
      );
    return {
      className,
      name,
      storage: this.ctx.storage,
      setAlarm: (atMs) => {
        writeAlarm(sql, className, name, atMs);
        this.armPlatform();
      },
      getAlarm: () => readAlarm(sql, className, name),
      post: <U extends AnyAuthorityObject>(
        to: Namespace<U>,
        target: string,
        messageId: string,
        message: MessageOf<U>,
      ) => post(to, target, messageId, message, false),
      postLatest: <U extends AnyAuthorityObject>(
        to: Namespace<U>,
        target: string,
        key: string,
        message: MessageOf<U>,
      ) => post(to, target, key, message, true),
      readInbox: () =>
        readInbox<M>(sql, className, name, this.cls.messageSchema, (id, why) =>
          console.error(`beachball: ${className} ${name} dropped message ${id}: it ${why}`),
        ),
      ackInbox: (seq) => ackInbox(sql, className, name, seq),
      deleteSelf: () => {
        this.deleteRequested = true;
      },
    };
  }

  /** RPC: calls `method` on the instance `name`; its error crosses as data (./durableErrors.ts). */
  async invoke(name: string, method: string, args: unknown[]): Promise<unknown> {
    const obj = this.instance(name) as unknown as Record<string, (...a: unknown[]) => unknown>;
    const fn = obj[method];
    if (typeof fn !== "function" || !callable(method)) throw new Error(`${this.className} has no method ${method}`);
    try {
      return await fn.apply(obj, args);
    } catch (e) {
      throw encodeError(e);
    } finally {
      await this.afterCall();
    }
  }

  /** RPC: appends messages to the inbox of `name` (deduplicated while pending, or replacing for latest-only ones) and runs onInbox soon. */
  async deliver(name: string, messages: OutboxMessage[]): Promise<void> {
    this.instance(name);
    this.ctx.storage.transactionSync(() => {
      for (const m of messages) {
        if (m.latest) upsertInbox(this.sql, this.className, name, m.messageId, m.body);
        else insertInbox(this.sql, this.className, name, m.messageId, m.body);
      }
    });
    this.armPlatform(Date.now());
    this.kick();
  }

  /** Runs onInbox on a later turn (the platform alarm set by `deliver` is the safety net). */
  private kick(): void {
    if (this.kicking) return;
    this.kicking = true;
    void Promise.resolve()
      .then(() => this.runInbox())
      .catch((e: unknown) => console.error(`beachball: ${this.className} inbox failed:`, e))
      .finally(() => {
        this.kicking = false;
      });
  }

  private async runInbox(): Promise<void> {
    const impl = this.instance();
    const pending = this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM _inbox").one().n;
    if (pending > 0) await impl.onInbox();
    await this.afterCall();
  }

  /** Platform alarm: the inbox, the outbox, then the object's own alarm if due. */
  async alarm(): Promise<void> {
    const impl = this.instance();
    await this.runInbox();
    const name = this.name!;
    const at = readAlarm(this.sql, this.className, name);
    if (at !== null && at <= Date.now()) {
      await impl.alarm();
      if (readAlarm(this.sql, this.className, name) === at) writeAlarm(this.sql, this.className, name, null);
      await this.afterCall();
    }
    this.armPlatform();
  }

  /**
   * After a call: delivers the outbox and honours deleteSelf. Single-flight
   * (issue 18 item 17): while one delivery is awaiting its targets, calls
   * (an RPC, the inbox, the alarm) interleave, and a second reader of the
   * outbox would send the same rows again, or an older latest-only row
   * after the newer one that replaced it. So a call that ends during a
   * delivery only asks it to read the outbox once more, and waits for it:
   * rows leave in seq order, each once per successful attempt.
   */
  private afterCall(): Promise<void> {
    if (this.delivering) {
      this.deliverAgain = true;
      return this.delivering;
    }
    this.delivering = this.deliverAll();
    return this.delivering;
  }

  /** The single delivery in flight: passes over the outbox until no call asked for another, then deleteSelf. */
  private async deliverAll(): Promise<void> {
    try {
      do {
        this.deliverAgain = false;
        await this.deliverOutbox();
      } while (this.deliverAgain);
    } finally {
      this.delivering = null;
    }
    if (this.deleteRequested) await this.deleteNow();
  }

  /** Honours deleteSelf: drops every row and table, then recreates the tables for a later call on this name. */
  private async deleteNow(): Promise<void> {
    this.deleteRequested = false;
    await this.ctx.storage.deleteAll();
    // deleteAll drops the tables too: a later call on this name finds an empty object, as the embedded runtime does.
    migrate(this.ctx.storage, this.host.migrations, `${this.className} object`);
    this.impl = undefined;
  }

  /** One pass over the outbox: oldest first, one RPC per target; a failed target is retried by alarm. */
  private async deliverOutbox(): Promise<void> {
    for (const group of readOutboxByTarget(this.sql)) await this.deliverTo(group);
  }

  /** Sends one target's rows in one RPC and deletes them once it acknowledged; on failure arms a retry. */
  private async deliverTo(group: OutboxRow[]): Promise<void> {
    const first = group[0]!;
    try {
      const b = this.host.binding(this.raw, first.target_cls);
      await b.get(b.idFromName(first.target_obj)).deliver(
        first.target_obj,
        group.map((r) => ({ messageId: r.message_id, body: r.body, latest: r.latest === 1 })),
      );
      deleteOutbox(this.sql, group);
    } catch (e) {
      console.error(
        `beachball: ${this.className} could not deliver to ${first.target_cls} ${first.target_obj}; retrying:`,
        e instanceof Error ? e.message : e,
      );
      this.armPlatform(Date.now() + OUTBOX_RETRY_MS);
    }
  }

  /** Sets the platform alarm to the earliest of `soon`, the object's alarm and a pending outbox retry. */
  private armPlatform(soon?: number): void {
    const name = this.name;
    const own = name ? readAlarm(this.sql, this.className, name) : null;
    const outbox = outboxPending(this.sql) ? Date.now() + OUTBOX_RETRY_MS : null;
    const at = [soon, own, outbox]
      .filter((x): x is number => typeof x === "number")
      .reduce((a, b) => Math.min(a, b), Number.POSITIVE_INFINITY);
    if (Number.isFinite(at)) void this.ctx.storage.setAlarm(at);
  }
}
