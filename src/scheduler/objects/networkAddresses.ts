/**
 * The Network object's address book (spec "Networks, addresses, and
 * grants"): its row (owner, /64 from the NetworkDirectory, the two address
 * counters), each allocation's /128 with the generations closed to grants,
 * and the free list. Addresses come from the counters through
 * src/domain/network.ts, never from an identifier; a freed one is reused
 * oldest first.
 *
 * A part of NetworkObject (it runs inside that instance, on its storage, in
 * its calls), kept in its own file; the Network decides when an address
 * may be freed.
 * Must never: hand out an address outside the Network's /64, give two
 * holders one address, or free an address on its own.
 */
import { and, asc, eq, gt, isNotNull, or, sql } from "drizzle-orm";
import type { ObjectState } from "../runtime/api.ts";
import { param, placeholders, prepared, type ObjectDb } from "../runtime/drizzle.ts";
import { BeachballError } from "../../protocol/errors.ts";
import { networkAddress, type AddressKind, type UlaPrefix } from "../../domain/network.ts";
import { GLOBAL, type SchedulerEnv } from "../env.ts";
import { networkAllocationTable, networkFreeAddressTable, networkTable } from "./networkSchema.ts";

/** The Network's row (./networkSchema.ts). */
export type NetRow = typeof networkTable.$inferSelect;

/** One allocation of the Network (./networkSchema.ts): its /128, closed and waited-for generations, end. */
export type AllocRow = typeof networkAllocationTable.$inferSelect;

const obj = sql.placeholder("obj");
const n = networkTable;
const a = networkAllocationTable;
const f = networkFreeAddressTable;
const mine = eq(a.obj, obj);

/** The address book's statements (built once per storage). */
const queries = (db: ObjectDb) => ({ ...netAndAllocations(db), ...freeList(db) });

/** The Network's row and counters, and its allocations' rows. */
function netAndAllocations(db: ObjectDb) {
  return {
    net: db.select().from(n).where(eq(n.obj, obj)).prepare(),
    alloc: db
      .select()
      .from(a)
      .where(and(mine, eq(a.allocationId, sql.placeholder("id"))))
      .prepare(),
    unsettled: db
      .select()
      .from(a)
      .where(and(mine, or(gt(a.waitingGeneration, 0), isNotNull(a.terminalAtMs))))
      .prepare(),
    allocations: db.select().from(a).where(mine).orderBy(asc(a.allocationId)).prepare(),
    insertNet: db
      .insert(n)
      .values({
        obj,
        ...placeholders("tenant", "subnet"),
        lastAllocationIndex: 0,
        lastClientIndex: 0,
        createdAtMs: sql.placeholder("now"),
      })
      .prepare(),
    setLastAllocationIndex: db
      .update(n)
      .set({ lastAllocationIndex: param<number>("index") })
      .where(eq(n.obj, obj))
      .prepare(),
    setLastClientIndex: db
      .update(n)
      .set({ lastClientIndex: param<number>("index") })
      .where(eq(n.obj, obj))
      .prepare(),
    insertAlloc: db
      .insert(a)
      .values({
        obj,
        allocationId: sql.placeholder("id"),
        address: sql.placeholder("address"),
        closedGeneration: 0,
        waitingGeneration: 0,
        terminalAtMs: null,
      })
      .prepare(),
    deleteAlloc: db
      .delete(a)
      .where(and(mine, eq(a.allocationId, sql.placeholder("id"))))
      .prepare(),
  };
}

/** The free list of returned addresses. */
function freeList(db: ObjectDb) {
  return {
    oldestFree: db
      .select({ address: f.address })
      .from(f)
      .where(and(eq(f.obj, obj), eq(f.kind, sql.placeholder("kind"))))
      .orderBy(asc(f.freedAtMs), asc(f.address))
      .limit(1)
      .prepare(),
    deleteFree: db
      .delete(f)
      .where(and(eq(f.obj, obj), eq(f.address, sql.placeholder("address"))))
      .prepare(),
    insertFree: db
      .insert(f)
      .values({
        obj,
        ...placeholders("kind", "address"),
        freedAtMs: sql.placeholder("now"),
      })
      .onConflictDoNothing()
      .prepare(),
    freeList: db
      .select({ address: f.address })
      .from(f)
      .where(eq(f.obj, obj))
      .orderBy(asc(f.freedAtMs), asc(f.address))
      .prepare(),
  };
}

/** See the module header. */
export class NetworkAddresses {
  private creating: Promise<NetRow> | null = null;
  private readonly q;

  constructor(
    private readonly state: ObjectState<unknown>,
    private readonly env: SchedulerEnv,
  ) {
    this.q = prepared(state.storage, queries);
  }

  private get obj() {
    return this.state.name;
  }

  /** The Network's row, or null before its first use. */
  net(): NetRow | null {
    return this.q.net.get({ obj: this.obj }) ?? null;
  }

  /** The allocation's row, or null. */
  alloc(allocationId: string): AllocRow | null {
    return this.q.alloc.get({ obj: this.obj, id: allocationId }) ?? null;
  }

  /** Allocations waiting for a fence or ended (the ones a settle pass looks at). */
  unsettled(): AllocRow[] {
    return this.q.unsettled.all({ obj: this.obj });
  }

  /** Every allocation, by ID. */
  allocations(): AllocRow[] {
    return this.q.allocations.all({ obj: this.obj });
  }

  /** The Network row, created on first use with the next subnet from the directory (single-flight). Throws FORBIDDEN for another tenant. */
  async ensure(tenant: string): Promise<NetRow> {
    const have = this.net();
    if (have) {
      if (have.tenant !== tenant) throw new BeachballError("FORBIDDEN", "this Network belongs to another principal");
      return have;
    }
    this.creating ??= (async () => {
      try {
        const subnet = await this.env.NetworkDirectory.get(GLOBAL).subnetFor(this.obj, tenant);
        const again = this.net();
        if (again) return again;
        this.q.insertNet.run({ obj: this.obj, tenant, subnet, now: this.env.clock.wallMs() });
        return this.net()!;
      } finally {
        this.creating = null;
      }
    })();
    const row = await this.creating;
    if (row.tenant !== tenant) throw new BeachballError("FORBIDDEN", "this Network belongs to another principal");
    return row;
  }

  /** The next address of `kind` in the Network's /64 of `ula`: the oldest freed one, else the next index of its counter. Call inside a transaction, after `ensure`. */
  take(kind: AddressKind, ula: UlaPrefix): string {
    const free = this.q.oldestFree.get({ obj: this.obj, kind });
    if (free) {
      this.q.deleteFree.run({ obj: this.obj, address: free.address });
      return free.address;
    }
    const net = this.net()!;
    const index = (kind === "allocation" ? net.lastAllocationIndex : net.lastClientIndex) + 1;
    const address = networkAddress(ula, net.subnet, kind, index);
    (kind === "allocation" ? this.q.setLastAllocationIndex : this.q.setLastClientIndex).run({ obj: this.obj, index });
    return address;
  }

  /** Reserves a /128 for `allocationId` (idempotent) and returns it. Call after `ensure`. */
  reserve(allocationId: string, ula: UlaPrefix): string {
    const existing = this.alloc(allocationId);
    if (existing) return existing.address;
    return this.state.storage.transactionSync(() => {
      const address = this.take("allocation", ula);
      this.q.insertAlloc.run({ obj: this.obj, id: allocationId, address });
      return address;
    });
  }

  /** Returns `address` to the free list. Call inside a transaction, once nothing may still route it. */
  free(kind: AddressKind, address: string): void {
    this.q.insertFree.run({ obj: this.obj, kind, address, now: this.env.clock.wallMs() });
  }

  /** Forgets an ended allocation and frees its address. Call inside a transaction, once its grants are gone. */
  release(a: AllocRow): void {
    this.q.deleteAlloc.run({ obj: this.obj, id: a.allocationId });
    this.free("allocation", a.address);
  }

  /** Free addresses, oldest first. */
  freeList(): string[] {
    return this.q.freeList.all({ obj: this.obj }).map((r) => r.address);
  }
}
