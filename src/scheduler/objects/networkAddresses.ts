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
import type { ObjectState } from "../runtime/api.ts";
import { BeachballError } from "../../protocol/errors.ts";
import { networkAddress, type AddressKind, type UlaPrefix } from "../../domain/network.ts";
import { GLOBAL, type SchedulerEnv } from "../env.ts";

/** The Network's row. */
export interface NetRow {
  tenant: string;
  subnet: number;
  last_allocation_index: number;
  last_client_index: number;
}

/** One allocation of the Network. */
export interface AllocRow {
  allocation_id: string;
  address: string;
  /** Grants are refused for generations up to this one. */
  closed_generation: number;
  /** The generation the allocation waits to see fenced, or 0. */
  waiting_generation: number;
  terminal_at_ms: number | null;
}

const ALLOC_COLUMNS = "allocation_id, address, closed_generation, waiting_generation, terminal_at_ms";

/** See the module header. */
export class NetworkAddresses {
  private creating: Promise<NetRow> | null = null;

  constructor(
    private readonly state: ObjectState<unknown>,
    private readonly env: SchedulerEnv,
  ) {}

  private get sql() {
    return this.state.storage.sql;
  }

  /** The Network's row, or null before its first use. */
  net(): NetRow | null {
    const r = this.sql
      .exec<NetRow>(
        "SELECT tenant, subnet, last_allocation_index, last_client_index FROM network WHERE obj = ?",
        this.state.name,
      )
      .next();
    return r.done ? null : r.value;
  }

  /** The allocation's row, or null. */
  alloc(allocationId: string): AllocRow | null {
    const r = this.sql
      .exec<AllocRow>(
        `SELECT ${ALLOC_COLUMNS} FROM network_allocations WHERE obj = ? AND allocation_id = ?`,
        this.state.name,
        allocationId,
      )
      .next();
    return r.done ? null : r.value;
  }

  /** Allocations waiting for a fence or ended (the ones a settle pass looks at). */
  unsettled(): AllocRow[] {
    return this.sql
      .exec<AllocRow>(
        `SELECT ${ALLOC_COLUMNS} FROM network_allocations WHERE obj = ? AND (waiting_generation > 0 OR terminal_at_ms IS NOT NULL)`,
        this.state.name,
      )
      .toArray();
  }

  /** Every allocation, by ID. */
  allocations(): AllocRow[] {
    return this.sql
      .exec<AllocRow>(
        `SELECT ${ALLOC_COLUMNS} FROM network_allocations WHERE obj = ? ORDER BY allocation_id`,
        this.state.name,
      )
      .toArray();
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
        const subnet = await this.env.NetworkDirectory.get(GLOBAL).subnetFor(this.state.name, tenant);
        const again = this.net();
        if (again) return again;
        this.sql.exec(
          "INSERT INTO network (obj, tenant, subnet, last_allocation_index, last_client_index, created_at_ms) VALUES (?, ?, ?, 0, 0, ?)",
          this.state.name,
          tenant,
          subnet,
          this.env.clock.now(),
        );
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
    const free = this.sql
      .exec<{ address: string }>(
        "SELECT address FROM network_free_addresses WHERE obj = ? AND kind = ? ORDER BY freed_at_ms, address LIMIT 1",
        this.state.name,
        kind,
      )
      .next();
    if (!free.done) {
      this.sql.exec(
        "DELETE FROM network_free_addresses WHERE obj = ? AND address = ?",
        this.state.name,
        free.value.address,
      );
      return free.value.address;
    }
    const net = this.net()!;
    const column = kind === "allocation" ? "last_allocation_index" : "last_client_index";
    const index = (kind === "allocation" ? net.last_allocation_index : net.last_client_index) + 1;
    const address = networkAddress(ula, net.subnet, kind, index);
    this.sql.exec(`UPDATE network SET ${column} = ? WHERE obj = ?`, index, this.state.name);
    return address;
  }

  /** Reserves a /128 for `allocationId` (idempotent) and returns it. Call after `ensure`. */
  reserve(allocationId: string, ula: UlaPrefix): string {
    const existing = this.alloc(allocationId);
    if (existing) return existing.address;
    return this.state.storage.transactionSync(() => {
      const a = this.take("allocation", ula);
      this.sql.exec(
        `INSERT INTO network_allocations (obj, ${ALLOC_COLUMNS}) VALUES (?, ?, ?, 0, 0, NULL)`,
        this.state.name,
        allocationId,
        a,
      );
      return a;
    });
  }

  /** Returns `address` to the free list. Call inside a transaction, once nothing may still route it. */
  free(kind: AddressKind, address: string): void {
    this.sql.exec(
      "INSERT OR IGNORE INTO network_free_addresses (obj, kind, address, freed_at_ms) VALUES (?, ?, ?, ?)",
      this.state.name,
      kind,
      address,
      this.env.clock.now(),
    );
  }

  /** Forgets an ended allocation and frees its address. Call inside a transaction, once its grants are gone. */
  release(a: AllocRow): void {
    this.sql.exec(
      "DELETE FROM network_allocations WHERE obj = ? AND allocation_id = ?",
      this.state.name,
      a.allocation_id,
    );
    this.free("allocation", a.address);
  }

  /** Free addresses, oldest first. */
  freeList(): string[] {
    return this.sql
      .exec<{ address: string }>(
        "SELECT address FROM network_free_addresses WHERE obj = ? ORDER BY freed_at_ms, address",
        this.state.name,
      )
      .toArray()
      .map((r) => r.address);
  }
}
