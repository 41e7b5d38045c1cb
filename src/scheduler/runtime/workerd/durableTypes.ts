/**
 * The slices of workerd's platform types the workerd host uses
 * (./durableHost.ts, ./durableInstance.ts), declared here so no module of
 * the host imports "cloudflare:workers", and what a wrapped class needs
 * from the Worker's bindings.
 */
import type { ObjectStorage } from "../api.ts";
import type { MigrationText } from "../migrate.ts";

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

/** One message as it crosses from a sender's outbox to a target's inbox. */
export interface OutboxMessage {
  messageId: string;
  body: string;
  latest: boolean;
}

/** The RPC methods every wrapped object answers. */
export interface DurableRpc {
  invoke(name: string, method: string, args: unknown[]): Promise<unknown>;
  deliver(name: string, messages: OutboxMessage[]): Promise<void>;
}

/** What a wrapped class needs from the Worker's bindings. */
export interface HostBindings<E> {
  /** Builds the environment objects receive (namespaces over the bindings, configuration, ports). */
  env(raw: unknown): E;
  /** The binding of each class by class name (for outbox delivery). */
  binding(raw: unknown, className: string): DurableNamespace;
  migrations: readonly MigrationText[];
}
