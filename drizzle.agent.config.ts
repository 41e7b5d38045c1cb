/**
 * drizzle-kit configuration of the agent's store: `npx drizzle-kit generate
 * --config drizzle.agent.config.ts --name <what>` writes the next migration
 * of agent.db's tables (src/agent/storeSchema.ts) into src/agent/migrations/;
 * then list it in src/agent/migrations/index.ts (test/architecture.test.ts
 * checks both agree, test/schema.test.ts that none is missing).
 */
export default {
  dialect: "sqlite",
  schema: "./src/agent/storeSchema.ts",
  out: "./src/agent/migrations",
};
