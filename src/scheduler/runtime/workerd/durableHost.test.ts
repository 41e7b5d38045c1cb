/**
 * The workerd host's outbox under interleaved calls (issue 18 item 17):
 * while one call's delivery awaits its target, a second call on the same
 * object must not deliver the same rows again or an older latest-only
 * message after a newer one, and the AllocationIndex must never store an
 * older view over a newer one, whatever order deliveries arrive in.
 *
 * workerd's DurableObjectState and namespace bindings are replaced by test
 * doubles (FakeDurableState over an in-memory bun:sqlite database; a
 * binding whose deliveries the test holds and releases): the interleaving
 * must be chosen by the test, which the real platform does not let a test
 * do. The wrapper (durableClass), the migrations and the AllocationIndex
 * are the real ones.
 */
import { describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { AuthorityObject, type Namespace, type SqlCursor, type SqlStorage, type SqlValue } from "../api.ts";
import { MIGRATIONS } from "../../migrations/index.ts";
import { AllocationIndexObject } from "../../objects/allocationIndex.ts";
import type { AllocationView } from "../../../protocol/api.ts";
import {
  durableClass,
  durableNamespace,
  type DurableNamespace,
  type DurableRpc,
  type DurableState,
} from "./durableHost.ts";

/** Test double of workerd's `ctx.storage.sql` over bun:sqlite. */
function fakeSql(db: Database): SqlStorage {
  return {
    exec<T>(query: string, ...bindings: unknown[]): SqlCursor<T> {
      const st = db.query(query);
      const reads = st.columnNames.length > 0;
      let written = 0;
      const rows = (
        reads ? st.all(...(bindings as never[])) : ((written = st.run(...(bindings as never[])).changes), [])
      ) as T[];
      let i = 0;
      return {
        toArray: () => rows,
        one: () => {
          if (rows.length !== 1) throw new Error(`expected one row, got ${rows.length}`);
          return rows[0]!;
        },
        next: () => (i < rows.length ? { done: false, value: rows[i++]! } : { done: true, value: undefined }),
        raw: () =>
          Object.assign(
            rows.map((r) => Object.values(r as object) as SqlValue[]),
            { toArray: () => rows.map((r) => Object.values(r as object) as SqlValue[]) },
          ),
        columnNames: st.columnNames,
        rowsWritten: written,
        [Symbol.iterator]: () => rows[Symbol.iterator](),
      };
    },
  };
}

/** Test double of workerd's DurableObjectState: one in-memory database, alarms recorded and never fired. */
function fakeState(): DurableState {
  const db = new Database(":memory:");
  let depth = 0;
  return {
    storage: {
      sql: fakeSql(db),
      transactionSync<T>(fn: () => T): T {
        const sp = `sp${depth++}`;
        db.run(`SAVEPOINT ${sp}`);
        try {
          const r = fn();
          db.run(`RELEASE ${sp}`);
          return r;
        } catch (e) {
          db.run(`ROLLBACK TO ${sp}`);
          db.run(`RELEASE ${sp}`);
          throw e;
        } finally {
          depth--;
        }
      },
      setAlarm: () => undefined,
      getAlarm: async () => null,
      deleteAlarm: () => undefined,
      deleteAll: async () => undefined,
    },
    blockConcurrencyWhile: (fn) => fn(),
  };
}

const IDENTITY = "controller:dev";
const ALLOCATION = `alloc_${"a".repeat(32)}`;

/** A valid view of ALLOCATION in `state`. */
function view(state: AllocationView["state"]): AllocationView {
  const at = "2026-01-01T00:00:00.000Z";
  return {
    allocationId: ALLOCATION,
    clientRequestId: "r1",
    workloadClass: "ci-small",
    state,
    generation: 1,
    hostId: null,
    placementId: null,
    reason: null,
    conditions: [],
    resources: { cpuMillis: 1000, memoryMiB: 512, ephemeralDiskMiB: 1024 },
    imageDigest: `sha256:${"ab".repeat(32)}`,
    labels: {},
    createdAt: at,
    updatedAt: at,
    expiresAt: at,
    workloadExitCode: null,
    placement: null,
  };
}

const STATES = ["pending", "provisioning", "ready"] as const;

/** A sender: each publish(n) posts one plain message and the latest view (version n) to the index, in one transaction. */
class Publisher extends AuthorityObject<{ index: Namespace<AllocationIndexObject> }> {
  static readonly className = "Publisher";
  static readonly messageSchema = null;
  static readonly tables = [] as const;
  publish(n: number): void {
    this.state.storage.transactionSync(() => {
      // A plain post to the index's class: a purge of another allocation (harmless, and deduplicated by its ID).
      this.state.post(this.env.index, "global", `plain:${n}`, {
        kind: "purge",
        allocationId: `alloc_${String(n).padStart(32, "0")}`,
      });
      this.state.postLatest(this.env.index, "global", `idx:${ALLOCATION}`, {
        kind: "upsert",
        identity: IDENTITY,
        view: view(STATES[n - 1]!),
        version: n,
      });
    });
  }
}

/** The index's binding: every delivery recorded; the first `held` deliveries wait until released. */
function world(held: number) {
  const Index = durableClass(class {}, AllocationIndexObject, {
    env: () => ({}) as never,
    binding: () => indexBinding,
    migrations: MIGRATIONS,
  });
  const index = new Index(fakeState(), {});
  const deliveries: string[][] = [];
  let inFlight = 0;
  let maxInFlight = 0;
  const gates: (() => void)[] = [];
  const indexBinding: DurableNamespace = {
    idFromName: (n) => n,
    get: (): DurableRpc => ({
      invoke: (name, method, args) => index.invoke(name, method, args),
      async deliver(name, messages) {
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        deliveries.push(
          messages.map(
            (m) => m.messageId + (m.latest ? `=${(JSON.parse(m.body) as { version: number }).version}` : ""),
          ),
        );
        if (deliveries.length <= held) await new Promise<void>((r) => gates.push(r));
        await index.deliver(name, messages);
        inFlight--;
      },
    }),
  };
  const env = { index: durableNamespace<AllocationIndexObject>("AllocationIndex", indexBinding) };
  const Sender = durableClass(class {}, Publisher, {
    env: () => env,
    binding: () => indexBinding,
    migrations: MIGRATIONS,
  });
  const sender = new Sender(fakeState(), {});
  const listed = async () =>
    ((await index.invoke("global", "list", [IDENTITY, null, 10])) as { view: AllocationView | null }[]).map(
      (e) => e.view?.state,
    );
  return { sender, index, deliveries, gates, listed, maxInFlight: () => maxInFlight };
}

describe("workerd outbox delivery is single-flight per object, and index views never go backwards", () => {
  test("two interleaved calls: one delivery at a time, each row once, the newest view last", async () => {
    const w = world(1);
    const first = w.sender.invoke("p", "publish", [1]);
    for (let i = 0; i < 20 && w.gates.length === 0; i++) await Bun.sleep(1);
    expect(w.deliveries).toEqual([["plain:1", `idx:${ALLOCATION}=1`]]);
    // The second call ends while the first call's delivery is still held at the target.
    const second = w.sender.invoke("p", "publish", [2]);
    await Bun.sleep(5);
    w.gates.shift()!();
    await Promise.all([first, second]);
    expect({ deliveries: w.deliveries, maxInFlight: w.maxInFlight() }).toEqual({
      deliveries: [
        ["plain:1", `idx:${ALLOCATION}=1`],
        ["plain:2", `idx:${ALLOCATION}=2`],
      ],
      maxInFlight: 1,
    });
    await Bun.sleep(5);
    expect(await w.listed()).toEqual(["provisioning"]);
  });

  test("the index keeps the newer view when an older one arrives after it", async () => {
    const w = world(0);
    const upsert = (n: number) => ({
      messageId: `idx:${ALLOCATION}`,
      body: JSON.stringify({ kind: "upsert", identity: IDENTITY, view: view(STATES[n - 1]!), version: n }),
      latest: true,
    });
    await w.index.deliver("global", [upsert(3)]);
    expect(await w.listed()).toEqual(["ready"]);
    await w.index.deliver("global", [upsert(2)]);
    expect(await w.listed()).toEqual(["ready"]);
    // Two in one inbox read, oldest last: the highest version wins.
    await w.index.deliver("global", [
      { ...upsert(1), messageId: "a" },
      { ...upsert(3), messageId: "b" },
      { ...upsert(2), messageId: "c" },
    ]);
    expect(await w.listed()).toEqual(["ready"]);
  });
});
