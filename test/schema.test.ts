/**
 * The migrations in src/scheduler/migrations/ are up to date with the one
 * schema definition (src/scheduler/schema.ts): drizzle-kit, run on a copy of
 * the migrations folder, finds nothing to generate. (~1.5 s: drizzle-kit
 * loads the schema through its own bundler.)
 */
import { describe, expect, test } from "bun:test";
import { cpSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

describe("schema and migrations", () => {
  test("drizzle-kit finds no schema change that lacks a migration", () => {
    const dir = mkdtempSync(join(tmpdir(), "bb-schema-"));
    try {
      cpSync(resolve("src/scheduler/migrations"), join(dir, "migrations"), { recursive: true });
      // drizzle-kit resolves `out` against the working directory.
      writeFileSync(
        join(dir, "drizzle.config.ts"),
        `export default { dialect: "sqlite", schema: ${JSON.stringify(resolve("src/scheduler/schema.ts"))}, out: "./migrations" };`,
      );
      const before = readdirSync(join(dir, "migrations")).sort();
      const r = Bun.spawnSync([resolve("node_modules/.bin/drizzle-kit"), "generate", "--config", "drizzle.config.ts"], {
        cwd: dir,
        stdout: "pipe",
        stderr: "pipe",
      });
      const out = r.stdout.toString() + r.stderr.toString();
      expect(out).toContain("No schema changes");
      expect(readdirSync(join(dir, "migrations")).sort(), out).toEqual(before);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
