/**
 * The scheduler's migrations, in order: SQL that drizzle-kit generated from
 * src/scheduler/schema.ts, embedded as text so a compiled `bb` binary (which
 * cannot read a migrations folder) carries them. Add each new file here;
 * test/architecture.test.ts checks this list against drizzle-kit's journal.
 */
import m0000 from "./0000_initial.sql" with { type: "text" };
import m0001 from "./0001_allocation_log.sql" with { type: "text" };
import m0002 from "./0002_private_networking.sql" with { type: "text" };
import m0003 from "./0003_client_candidates.sql" with { type: "text" };
import m0004 from "./0004_index_view_version.sql" with { type: "text" };
import m0005 from "./0005_pause_suspend.sql" with { type: "text" };
import m0006 from "./0006_runs.sql" with { type: "text" };
import m0007 from "./0007_usage.sql" with { type: "text" };
import m0008 from "./0008_usage_reservations.sql" with { type: "text" };
import m0009 from "./0009_run_delivery_and_reservation_expiry.sql" with { type: "text" };
import m0010 from "./0010_leases.sql" with { type: "text" };

/** One migration: drizzle-kit's tag and its SQL (statements split by `--> statement-breakpoint`). */
export interface Migration {
  tag: string;
  sql: string;
}

/** Every migration, oldest first. */
export const MIGRATIONS: readonly Migration[] = [
  { tag: "0000_initial", sql: m0000 },
  { tag: "0001_allocation_log", sql: m0001 },
  { tag: "0002_private_networking", sql: m0002 },
  { tag: "0003_client_candidates", sql: m0003 },
  { tag: "0004_index_view_version", sql: m0004 },
  { tag: "0005_pause_suspend", sql: m0005 },
  { tag: "0006_runs", sql: m0006 },
  { tag: "0007_usage", sql: m0007 },
  { tag: "0008_usage_reservations", sql: m0008 },
  { tag: "0009_run_delivery_and_reservation_expiry", sql: m0009 },
  { tag: "0010_leases", sql: m0010 },
];
