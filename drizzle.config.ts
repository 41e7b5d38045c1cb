/**
 * drizzle-kit configuration: `npx drizzle-kit generate --name <what>`
 * writes the next migration of the scheduler's schema (src/scheduler/schema.ts)
 * into src/scheduler/migrations/; then list it in
 * src/scheduler/migrations/index.ts (test/architecture.test.ts checks both agree).
 */
export default {
  dialect: "sqlite",
  schema: "./src/scheduler/schema.ts",
  out: "./src/scheduler/migrations",
};
