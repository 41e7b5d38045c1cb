/**
 * The Operations object keeps alerts deduplicated by ID and lists them
 * oldest first after a sequence number (spec "Observability and
 * retention"), on the real objects and SQLite file (test/support/grantWorld.ts).
 */
import { afterEach, expect, test } from "bun:test";
import { closeWorlds, world } from "../../test/support/grantWorld.ts";
import { GLOBAL } from "./env.ts";

afterEach(closeWorlds);

const alert = (i: number) => ({
  kind: "alert" as const,
  alertId: `al-${i}`,
  type: "host.unhealthy",
  subject: `host-${i}`,
  reason: "test",
  atMs: 1_000 + i,
});

test("an alert raised twice is kept once; the list pages oldest first by sequence number", async () => {
  const { w } = world();
  const ops = w.env.Operations.get(GLOBAL);
  for (let i = 0; i < 5; i++) await ops.raise(alert(i));
  await ops.raise(alert(0));
  const first = await ops.list(0, 3);
  expect(first.map((a) => a.alertId)).toEqual(["al-0", "al-1", "al-2"]);
  expect(first[0]).toMatchObject({ subject: "host-0", reason: "test", at: new Date(1_000).toISOString() });
  const rest = await ops.list(first[2]!.seq, 10);
  expect(rest.map((a) => a.alertId)).toEqual(["al-3", "al-4"]);
});
