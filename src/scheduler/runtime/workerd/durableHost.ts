/**
 * The second host of the object classes: workerd, the open-source runtime
 * of Cloudflare's Durable Objects (docs/adr/0120-object-runtime-storage.md,
 * "Two hosts"). Wraps each class in a Durable Object whose own SQLite
 * database (`ctx.storage.sql`) holds the same tables as the embedded store,
 * and gives instances the same `ObjectState` and typed stubs. The wrapper
 * is thin: it delegates its RPC entry points to a DurableInstance
 * (./durableInstance.ts), which keeps the per-object runtime.
 *
 * Differences from the embedded host, all behind the same API: each object
 * has its own database (so a post goes to an outbox in the sender's
 * database and is delivered by RPC after the sender's call, retried by
 * alarm until it lands); the platform's single alarm carries both the
 * object's alarm and outbox/inbox retries; the platform's output gate (not
 * ours) holds a response until its writes are durable; errors cross an RPC
 * as data and are rebuilt as BeachballError on the caller's side
 * (./durableErrors.ts); there is no fault hook and no process-wide instance
 * bound (the platform evicts).
 * Must never: let an object see a platform type, or lose an outbox row
 * before the target acknowledged it.
 */
import type { AnyAuthorityObject, Namespace, ObjectClass, Stub } from "../api.ts";
import { decodeError } from "./durableErrors.ts";
import { DurableInstance } from "./durableInstance.ts";
import type { DurableNamespace, DurableRpc, DurableState, HostBindings, OutboxMessage } from "./durableTypes.ts";

export { OUTBOX_RETRY_MS } from "./durableInstance.ts";
export type { DurableNamespace, DurableRpc, DurableState, HostBindings, OutboxMessage } from "./durableTypes.ts";

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

/** A wrapped class as workerd sees it: the RPC methods and the platform alarm. */
export type DurableClass = new (ctx: DurableState, env: unknown) => DurableRpc & { alarm(): Promise<void> };

/**
 * Wraps `cls` as a Durable Object class for workerd. `Base` is workerd's
 * `DurableObject` (from "cloudflare:workers"), passed in so this module has
 * no platform import. Only `invoke`, `deliver` and `alarm` are on the
 * wrapper's prototype (workerd offers a prototype's methods by RPC); the
 * runtime itself lives in a private DurableInstance.
 */
export function durableClass<T extends AnyAuthorityObject, E>(
  Base: new (ctx: never, env: never) => object,
  cls: ObjectClass<T, E>,
  host: HostBindings<E>,
): DurableClass {
  class Wrapped extends (Base as unknown as new (ctx: DurableState, env: unknown) => object) implements DurableRpc {
    readonly #instance: DurableInstance<T, E>;
    constructor(ctx: DurableState, raw: unknown) {
      super(ctx, raw);
      this.#instance = new DurableInstance(ctx, raw, cls, host);
    }
    /** RPC: calls `method` on the instance `name`. */
    invoke(name: string, method: string, args: unknown[]): Promise<unknown> {
      return this.#instance.invoke(name, method, args);
    }
    /** RPC: appends messages to the inbox of `name` and runs onInbox soon. */
    deliver(name: string, messages: OutboxMessage[]): Promise<void> {
      return this.#instance.deliver(name, messages);
    }
    /** Platform alarm: the inbox, the outbox, then the object's own alarm if due. */
    alarm(): Promise<void> {
      return this.#instance.alarm();
    }
  }
  return Wrapped as unknown as DurableClass;
}
