/**
 * The agent store's migrations, in order: SQL that drizzle-kit generated
 * from src/agent/storeSchema.ts (drizzle.agent.config.ts), embedded as text
 * so a compiled `bb` binary (which cannot read a migrations folder) carries
 * them. Add each new file here; test/architecture.test.ts checks this list
 * against drizzle-kit's journal.
 *
 * 0000_initial creates the same tables the hand-written DDL of earlier
 * builds created (those files say `PRAGMA user_version = 1`, the count of
 * migrations applied), so they open unchanged.
 */
import m0000 from "./0000_initial.sql" with { type: "text" };
import m0001 from "./0001_snapshots.sql" with { type: "text" };
import type { Migration } from "../../storage/sqlite.ts";

/** Every migration of agent.db, oldest first. */
export const AGENT_MIGRATIONS: readonly Migration[] = [
  { tag: "0000_initial", sql: m0000 },
  { tag: "0001_snapshots", sql: m0001 },
];
