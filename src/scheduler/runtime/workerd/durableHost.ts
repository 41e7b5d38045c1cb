/**
 * The second host of the object classes: workerd, the open-source runtime
 * of Cloudflare's Durable Objects (docs/adr/0120-object-runtime-storage.md,
 * "Two hosts"). Wraps each class in a Durable Object whose own SQLite
 * database (`ctx.storage.sql`) holds the same tables as the embedded store,
 * and gives instances the same `ObjectState` and typed stubs.
 *
 * Differences from the embedded host, all behind the same API: each object
 * has its own database (so a post goes to an outbox in the sender's
 * database and is delivered by RPC after the sender's call, retried by
 * alarm until it lands); the platform's single alarm carries both the
 * object's alarm and outbox/inbox retries; the platform's output gate (not
 * ours) holds a response until its writes are durable; errors cross an RPC
 * as data and are rebuilt as BeachballError on the caller's side; there is
 * no fault hook and no process-wide instance bound (the platform evicts).
 * Must never: let an object see a platform type, or lose an outbox row
 * before the target acknowledged it.
 */
import { BeachballError, type ErrorCode } from "../../../protocol/errors.ts";
import type {
  AnyAuthorityObject,
  MessageOf,
  Namespace,
  ObjectClass,
  ObjectState,
  ObjectStorage,
  Stub,
} from "../api.ts";
import { DamagedStateError } from "../faults.ts";
import { migrate, type MigrationText } from "../migrate.ts";
import { ackInbox, insertInbox, readAlarm, readInbox, upsertInbox, writeAlarm } from "../stateRows.ts";

/** When an undelivered outbox is retried, ms. */
export const OUTBOX_RETRY_MS = 2_000;

/** The slice of workerd's DurableObjectState this host uses. */
export interface DurableState {
  storage: ObjectStorage & {
    setAlarm(at: number): Promise<void> | void;
    getAlarm(): Promise<number | null>;
    deleteAlarm(): Promise<void> | void;
    deleteAll(): Promise<void>;
  };
  blockConcurrencyWhile<T>(fn: () => Promise<T>): Promise<T>;
}

/** The slice of a Durable Object namespace binding this host uses. */
export interface DurableNamespace {
  idFromName(name: string): unknown;
  get(id: unknown): DurableRpc;
}

/** The RPC methods every wrapped object answers. */
export interface DurableRpc {
  invoke(name: string, method: string, args: unknown[]): Promise<unknown>;
  deliver(name: string, messages: { messageId: string; body: string; latest: boolean }[]): Promise<void>;
}

const ERROR_MARK = "bb-error:";

/** An error as data that survives an RPC (workerd keeps only the message of a thrown error). */
function encodeError(e: unknown): Error {
  if (e instanceof BeachballError)
    return new Error(ERROR_MARK + JSON.stringify({ code: e.code, message: e.message, extra: e.extra ?? null }));
  if (e instanceof DamagedStateError)
    return new Error(ERROR_MARK + JSON.stringify({ code: "OBJECT_DAMAGED", message: e.message, extra: null }));
  return e instanceof Error ? e : new Error(String(e));
}

/** The caller's side of encodeError. */
function decodeError(e: unknown): unknown {
  const msg = e instanceof Error ? e.message : "";
  const i = msg.indexOf(ERROR_MARK);
  if (i < 0) return e;
  const d = JSON.parse(msg.slice(i + ERROR_MARK.length)) as {
    code: ErrorCode;
    message: string;
    extra: Record<string, unknown> | null;
  };
  return new BeachballError(d.code, d.message, d.extra ?? undefined);
}

/** A typed namespace over a workerd binding: stubs call `invoke` with the instance name (errors rebuilt). */
export function durableNamespace<T extends AnyAuthorityObject>(
  className: string,
  binding: DurableNamespace,
): Namespace<T> {
  return {
    className,
    get(name: string): Stub<T> {
      const rpc = () => binding.get(binding.idFromName(name));
      return new Proxy({} as Stub<T>, {
        get: (_t, method) =>
          typeof method === "string" && method !== "then"
            ? (...args: unknown[]) =>
                rpc()
                  .invoke(name, method, args)
                  .catch((e: unknown) => {
                    throw decodeError(e);
                  })
            : undefined,
      });
    },
  };
}

/** What a wrapped class needs from the Worker's bindings. */
export interface HostBindings<E> {
  /** Builds the environment objects receive (namespaces over the bindings, configuration, ports). */
  env(raw: unknown): E;
  /** The binding of each class by class name (for outbox delivery). */
  binding(raw: unknown, className: string): DurableNamespace;
  migrations: readonly MigrationText[];
}

/**
 * Wraps `cls` as a Durable Object class for workerd. `Base` is workerd's
 * `DurableObject` (from "cloudflare:workers"), passed in so this module has
 * no platform import.
 */
export function durableClass<T extends AnyAuthorityObject, E>(
  Base: new (ctx: never, env: never) => object,
  cls: ObjectClass<T, E>,
  host: HostBindings<E>,
): new (
  ctx: DurableState,
  env: unknown,
) => DurableRpc & { alarm(): Promise<void> } {
  const className = cls.className;
  class Wrapped extends (Base as unknown as new (ctx: DurableState, env: unknown) => object) implements DurableRpc {
    private impl: T | undefined;
    private name: string | undefined;
    private deleteRequested = false;
    private kicking = false;
    /** The outbox delivery in flight (single-flight: at most one per object). */
    private delivering: Promise<void> | null = null;
    /** A call ended while a delivery was in flight: read the outbox again before that delivery settles. */
    private deliverAgain = false;
    constructor(
      private readonly ctx: DurableState,
      private readonly raw: unknown,
    ) {
      super(ctx, raw);
      void ctx.blockConcurrencyWhile(async () => {
        migrate(ctx.storage, host.migrations, `${className} object`);
      });
    }

    private get sql() {
      return this.ctx.storage.sql;
    }

    private instance(name?: string): T {
      if (this.impl) return this.impl;
      const stored = this.sql.exec<{ value: string }>("SELECT value FROM _meta WHERE key = 'name'").next();
      const n = name ?? (stored.done ? undefined : stored.value.value);
      if (!n) throw new Error(`${className}: instance name unknown`);
      if (stored.done) this.sql.exec("INSERT INTO _meta (key, value) VALUES ('name', ?)", n);
      this.name = n;
      this.impl = new cls(this.state(n), host.env(this.raw));
      return this.impl;
    }

    private state<M>(name: string): ObjectState<M> {
      const sql = this.sql;
      const self = this;
      return {
        className,
        name,
        storage: this.ctx.storage,
        setAlarm(atMs) {
          writeAlarm(sql, className, name, atMs);
          self.armPlatform();
        },
        getAlarm: () => readAlarm(sql, className, name),
        post<U extends AnyAuthorityObject>(to: Namespace<U>, target: string, messageId: string, message: MessageOf<U>) {
          sql.exec(
            "INSERT INTO _outbox (cls, obj, target_cls, target_obj, message_id, body, latest) VALUES (?, ?, ?, ?, ?, ?, 0)",
            className,
            name,
            to.className,
            target,
            messageId,
            JSON.stringify(message),
          );
        },
        postLatest<U extends AnyAuthorityObject>(to: Namespace<U>, target: string, key: string, message: MessageOf<U>) {
          sql.exec(
            "DELETE FROM _outbox WHERE target_cls = ? AND target_obj = ? AND message_id = ?",
            to.className,
            target,
            key,
          );
          sql.exec(
            "INSERT INTO _outbox (cls, obj, target_cls, target_obj, message_id, body, latest) VALUES (?, ?, ?, ?, ?, ?, 1)",
            className,
            name,
            to.className,
            target,
            key,
            JSON.stringify(message),
          );
        },
        readInbox: () =>
          readInbox<M>(sql, className, name, cls.messageSchema, (id, why) =>
            console.error(`beachball: ${className} ${name} dropped message ${id}: it ${why}`),
          ),
        ackInbox: (seq) => ackInbox(sql, className, name, seq),
        deleteSelf() {
          self.deleteRequested = true;
        },
      };
    }

    /** RPC: calls `method` on the instance `name`. */
    async invoke(name: string, method: string, args: unknown[]): Promise<unknown> {
      const obj = this.instance(name) as unknown as Record<string, (...a: unknown[]) => unknown>;
      const fn = obj[method];
      if (
        typeof fn !== "function" ||
        method.startsWith("_") ||
        method === "alarm" ||
        method === "onInbox" ||
        method === "drain"
      )
        throw new Error(`${className} has no method ${method}`);
      try {
        return await fn.apply(obj, args);
      } catch (e) {
        throw encodeError(e);
      } finally {
        await this.afterCall();
      }
    }

    /** RPC: appends messages to the inbox of `name` (deduplicated while pending, or replacing for latest-only ones) and runs onInbox soon. */
    async deliver(name: string, messages: { messageId: string; body: string; latest: boolean }[]): Promise<void> {
      this.instance(name);
      this.ctx.storage.transactionSync(() => {
        for (const m of messages) {
          if (m.latest) upsertInbox(this.sql, className, name, m.messageId, m.body);
          else insertInbox(this.sql, className, name, m.messageId, m.body);
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
        .catch((e: unknown) => console.error(`beachball: ${className} inbox failed:`, e))
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
      const at = readAlarm(this.sql, className, name);
      if (at !== null && at <= Date.now()) {
        await impl.alarm();
        if (readAlarm(this.sql, className, name) === at) writeAlarm(this.sql, className, name, null);
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
      const run = async () => {
        try {
          do {
            this.deliverAgain = false;
            await this.deliverOutbox();
          } while (this.deliverAgain);
        } finally {
          this.delivering = null;
        }
        if (this.deleteRequested) {
          this.deleteRequested = false;
          await this.ctx.storage.deleteAll();
          // deleteAll drops the tables too: a later call on this name finds an empty object, as the embedded runtime does.
          migrate(this.ctx.storage, host.migrations, `${className} object`);
          this.impl = undefined;
        }
      };
      this.delivering = run();
      return this.delivering;
    }

    /** One pass over the outbox: oldest first, one RPC per target; a failed target is retried by alarm. */
    private async deliverOutbox(): Promise<void> {
      const rows = this.sql
        .exec<{
          seq: number;
          target_cls: string;
          target_obj: string;
          message_id: string;
          body: string;
          latest: number;
        }>("SELECT seq, target_cls, target_obj, message_id, body, latest FROM _outbox ORDER BY seq LIMIT 256")
        .toArray();
      const byTarget = new Map<string, typeof rows>();
      for (const r of rows) {
        const k = `${r.target_cls}\u0000${r.target_obj}`;
        byTarget.set(k, [...(byTarget.get(k) ?? []), r]);
      }
      for (const group of byTarget.values()) {
        const first = group[0]!;
        try {
          const b = host.binding(this.raw, first.target_cls);
          await b.get(b.idFromName(first.target_obj)).deliver(
            first.target_obj,
            group.map((r) => ({ messageId: r.message_id, body: r.body, latest: r.latest === 1 })),
          );
          for (const r of group) this.sql.exec("DELETE FROM _outbox WHERE seq = ?", r.seq);
        } catch (e) {
          console.error(
            `beachball: ${className} could not deliver to ${first.target_cls} ${first.target_obj}; retrying:`,
            e instanceof Error ? e.message : e,
          );
          this.armPlatform(Date.now() + OUTBOX_RETRY_MS);
        }
      }
    }

    /** Sets the platform alarm to the earliest of `soon`, the object's alarm and a pending outbox retry. */
    private armPlatform(soon?: number): void {
      const name = this.name;
      const own = name ? readAlarm(this.sql, className, name) : null;
      const outbox =
        this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM _outbox").one().n > 0
          ? Date.now() + OUTBOX_RETRY_MS
          : null;
      const at = [soon, own, outbox]
        .filter((x): x is number => typeof x === "number")
        .reduce((a, b) => Math.min(a, b), Number.POSITIVE_INFINITY);
      if (Number.isFinite(at)) void this.ctx.storage.setAlarm(at);
    }
  }
  return Wrapped as unknown as new (
    ctx: DurableState,
    env: unknown,
  ) => DurableRpc & { alarm(): Promise<void> };
}
