/**
 * The client outside this repository (issue 18 item 12: "the typed client
 * cannot be used outside this repository"): `npm pack` builds and packs
 * packages/client (@beachball/client); the tarball is installed with
 * `npm install --offline` and an empty npm cache into a temporary directory
 * outside the repository, together with a tarball of its one dependency
 * (@sinclair/typebox, packed from node_modules: no registry is reached).
 * There, a controller written against the package type-checks (and a
 * misspelt body field does not), and Node runs it against a real scheduler
 * on loopback: create, get, list, a typed error, release.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { startTestScheduler, type TestScheduler } from "../support/scheduler.ts";

const ROOT = resolve(import.meta.dir, "../..");
const TSC = join(ROOT, "node_modules/.bin/tsc");
let work: string;
let s: TestScheduler;

function sh(argv: string[], cwd: string, env: Record<string, string> = {}) {
  const p = Bun.spawnSync(argv, {
    cwd,
    stdout: "pipe",
    stderr: "pipe",
    env: { PATH: process.env.PATH!, HOME: work, npm_config_cache: join(work, "npm-cache"), ...env },
  });
  return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() };
}

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), "bb-client-pkg-"));
  s = await startTestScheduler();
});
afterAll(async () => {
  await s?.stop();
  rmSync(work, { recursive: true, force: true });
});

// No @types/node in the controller's project: the package's own types must not need them.
const CONTROLLER = `import { SchedulerClient, BeachballError, type AllocationView } from "@beachball/client";
declare const process: { env: Record<string, string | undefined> };

const client = new SchedulerClient(process.env.BB_SCHEDULER_URL!, process.env.BB_TOKEN!);
const { view, created } = await client.create({ clientRequestId: "pkg-job-1", workloadClass: "ci-small" });
const again: AllocationView = await client.get(view.allocationId);
const page = await client.list(undefined, 10);
let missing = "";
try {
  await client.get("alloc_" + "0".repeat(32));
} catch (e) {
  if (e instanceof BeachballError) missing = e.code;
}
const released = await client.release(view.allocationId);
console.log(JSON.stringify({ created, id: again.allocationId, listed: page.items.some((v) => v.allocationId === view.allocationId), missing, state: released.state }));
`;

const TSCONFIG = JSON.stringify({
  compilerOptions: {
    target: "ES2022",
    module: "NodeNext",
    moduleResolution: "NodeNext",
    lib: ["ES2022", "DOM"],
    types: [],
    strict: true,
    noEmit: true,
  },
  files: ["controller.ts"],
});

test("not installable: the packed @beachball/client installs offline outside the repo, type-checks a controller and runs it on Node against a scheduler", async () => {
  const packs = join(work, "packs");
  mkdirSync(packs);
  const pack = sh(["npm", "pack", "--pack-destination", packs], join(ROOT, "packages/client"));
  expect(pack.code, pack.err).toBe(0);
  const tarball = pack.out.trim().split("\n").pop()!;
  expect(tarball).toMatch(/^beachball-client-\d+\.\d+\.\d+\.tgz$/);
  const dep = sh(["npm", "pack", join(ROOT, "node_modules/@sinclair/typebox"), "--pack-destination", packs], work);
  expect(dep.code, dep.err).toBe(0);

  const app = join(work, "app");
  mkdirSync(app);
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "controller", private: true, type: "module" }));
  const inst = sh(
    [
      "npm",
      "install",
      "--offline",
      "--no-audit",
      "--no-fund",
      join(packs, tarball),
      join(packs, dep.out.trim().split("\n").pop()!),
    ],
    app,
  );
  expect(inst.code, inst.err).toBe(0);
  const manifest = JSON.parse(readFileSync(join(app, "node_modules/@beachball/client/package.json"), "utf8")) as {
    name: string;
    private?: boolean;
  };
  expect(manifest.name).toBe("@beachball/client");
  expect(manifest.private).toBeUndefined();
  const bundle = readFileSync(join(app, "node_modules/@beachball/client/dist/index.js"), "utf8");
  expect(bundle).not.toMatch(/\bBun\.|from\s+"bun/);

  writeFileSync(join(app, "tsconfig.json"), TSCONFIG);
  writeFileSync(join(app, "controller.ts"), CONTROLLER);
  const typed = sh([TSC, "-p", "tsconfig.json"], app);
  expect(typed.code, typed.out + typed.err).toBe(0);
  // A field the API does not have is a type error.
  writeFileSync(join(app, "controller.ts"), CONTROLLER.replace("workloadClass:", "workloadKlass:"));
  const misspelt = sh([TSC, "-p", "tsconfig.json"], app);
  expect(misspelt.code).not.toBe(0);
  expect(misspelt.out).toContain("workloadKlass");

  // Run the checked controller as plain JavaScript on Node (types stripped by tsc).
  writeFileSync(join(app, "controller.ts"), CONTROLLER);
  writeFileSync(join(app, "tsconfig.json"), TSCONFIG.replace('"noEmit":true', '"outDir":"out"'));
  const emitted = sh([TSC, "-p", "tsconfig.json"], app);
  expect(emitted.code, emitted.out + emitted.err).toBe(0);
  const run = Bun.spawn(["node", "out/controller.js"], {
    cwd: app,
    stdout: "pipe",
    stderr: "pipe",
    env: { PATH: process.env.PATH!, BB_SCHEDULER_URL: s.url, BB_TOKEN: s.tokens.token },
  });
  const [out, err, code] = await Promise.all([
    new Response(run.stdout).text(),
    new Response(run.stderr).text(),
    run.exited,
  ]);
  expect(code, err).toBe(0);
  const r = JSON.parse(out) as { created: boolean; id: string; listed: boolean; missing: string; state: string };
  expect(r).toMatchObject({ created: true, listed: true, missing: "NOT_FOUND" });
  expect(r.id).toMatch(/^alloc_[0-9a-f]{32}$/);
  expect(["releasing", "released"]).toContain(r.state);
}, 180_000);
