/**
 * Every table the scheduler stores, in one place: the input of drizzle-kit
 * (drizzle.config.ts), which generates the migrations in
 * src/scheduler/migrations/. The same schema serves both hosts: the
 * embedded runtime keeps all of it in one file; on workerd each object's
 * own database gets it too (the tables of other classes stay empty).
 */
export * from "./runtime/runtimeSchema.ts";
export * from "./objects/allocationSchema.ts";
export * from "./objects/hostSchema.ts";
export * from "./objects/hostDirectorySchema.ts";
export * from "./objects/singletonSchema.ts";
export * from "./objects/networkSchema.ts";
export * from "./objects/runSchema.ts";
export * from "./objects/usageSchema.ts";
export * from "./objects/leaseSchema.ts";
