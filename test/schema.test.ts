/**
 * The migrations in src/scheduler/migrations/ and src/agent/migrations/ are
 * up to date with their one schema definition (src/scheduler/schema.ts,
 * src/agent/storeSchema.ts): drizzle-kit, run on a copy of each migrations
 * folder, finds nothing to generate. (~1.5 s: drizzle-kit
 * loads the schema through its own bundler.)
 */
import { describe, expect, test } from "bun:test";
import { cpSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

/** The stores whose tables drizzle-kit turns into migrations: the schema file and the migrations folder. */
const STORES = [
  { schema: "src/scheduler/schema.ts", migrations: "src/scheduler/migrations" },
  { schema: "src/agent/storeSchema.ts", migrations: "src/agent/migrations" },
];

describe("schema and migrations", () => {
  for (const store of STORES)
    test(`drizzle-kit finds no change of ${store.schema} that lacks a migration`, () => {
      const dir = mkdtempSync(join(tmpdir(), "bb-schema-"));
      try {
        cpSync(resolve(store.migrations), join(dir, "migrations"), { recursive: true });
        // drizzle-kit resolves `out` against the working directory.
        writeFileSync(
          join(dir, "drizzle.config.ts"),
          `export default { dialect: "sqlite", schema: ${JSON.stringify(resolve(store.schema))}, out: "./migrations" };`,
        );
        const before = readdirSync(join(dir, "migrations")).sort();
        const r = Bun.spawnSync(
          [resolve("node_modules/.bin/drizzle-kit"), "generate", "--config", "drizzle.config.ts"],
          { cwd: dir, stdout: "pipe", stderr: "pipe" },
        );
        const out = r.stdout.toString() + r.stderr.toString();
        expect(out).toContain("No schema changes");
        expect(readdirSync(join(dir, "migrations")).sort(), out).toEqual(before);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }, 60_000);
});
