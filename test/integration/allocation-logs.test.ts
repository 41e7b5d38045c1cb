/**
 * Workload output from afar (issue 13): a scheduler and an agent as separate
 * `bb` processes, a real guest booted by QEMU (TCG here), and
 * `bb allocation logs --follow` run as a second process before the payload
 * is delivered. It prints the payload's lines as the job runs and exits by
 * itself once the allocation is released; the payload's own lines (the
 * workload dumps its script and traces itself with `set -x`), the secret it
 * echoes and the placement's nonce never reach it. Another controller and the operator are
 * refused with NOT_FOUND, a read past the end is LOG_OFFSET_PAST_END, and a
 * read resumed at an offset prints the rest.
 * Also the spec's rule that no component writes the payload to disk: while a
 * job runs and after release, no file below the test's directory (scheduler
 * and agent data, SQLite files and WAL, both roles' debug logs) holds the
 * payload, a bearer token, the enrollment token or the nonce (outside the
 * nonce's own runtime.json and the client config the test asked for).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { randomBytes, randomUUID } from "node:crypto";
import { SchedulerClient } from "../../src/client/index.ts";
import { compileGuest } from "../../src/image/bbBinary.ts";
import { buildDevImage } from "../../src/image/devBuild.ts";
import { ensureDevManifest } from "../../src/scheduler/manifest.ts";
import { tokenDigest } from "../../src/scheduler/manifestSchema.ts";
import { placementDirName } from "../../src/agent/resourceNames.ts";
import {
  cleanUpPlacements,
  freePort,
  publishImageSource,
  runRole,
  runRoleExit,
  startRole,
  stopRole,
  vmTestSkipReason,
  waitUntil,
  walkFiles,
  type Role,
} from "../support/processes.ts";

const skip = vmTestSkipReason();
if (skip) console.log(`SKIP test/integration/allocation-logs.test.ts: ${skip}`);
const d = skip ? describe.skip : describe;

const BUN = resolve("node_modules/.bin/bun");
const BB = resolve("bin/bb.ts");
const SECRET = `bb-logs-secret-${randomBytes(12).toString("hex")}`;
// The workload prints its own script, echoes its secret and traces itself: Beachball must still never show the payload's lines or the secret.
const PAYLOAD = [
  `SECRET_VALUE=${SECRET}`,
  "printf '%s\\n' \"$script\"",
  'echo "value is $SECRET_VALUE."',
  "set -x",
  'for i in 1 2 3 4 5; do echo "logs-line-$i"; sleep 1; done',
  "",
].join("\n");

let work: string;
let port: number;
let scheduler: Role;
let agent: Role;
let controller: SchedulerClient;
let url: string;
let tokens: { controller: string; other: string; operator: string };
let enrollmentToken: string;
const agentDir = () => join(work, "agent");

const allocationsDir = () => join(agentDir(), "allocations");

function waitFor<T>(what: string, fn: () => Promise<T | null | undefined | false>, ms = 240_000): Promise<T> {
  return waitUntil(
    what,
    fn,
    ms,
    [agent?.log, scheduler?.log].filter((l): l is string => !!l),
  );
}

/** `bb allocation logs ARGS` as a separate process, its stdout read as it comes. */
function startLogs(args: string[], token: string) {
  const p = Bun.spawn([BUN, BB, "allocation", "logs", ...args], {
    stdout: "pipe",
    stderr: "pipe",
    env: { ...process.env, NO_COLOR: "1", BB_SCHEDULER_URL: url, BB_TOKEN: token, BB_CONFIG: join(work, "none.json") },
  });
  let out = "";
  const reading = (async () => {
    for await (const c of p.stdout) out += new TextDecoder().decode(c);
  })();
  const err = new Response(p.stderr).text();
  return {
    proc: p,
    output: () => out,
    done: async () => ({ code: await p.exited, out: (await reading, out), err: await err }),
  };
}

d("bb allocation logs (real agent, QEMU guest)", () => {
  beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), "bb-alloc-logs-"));
    // The CLI runs below take URL and token from the environment; an empty config file keeps them from reading any other.
    writeFileSync(join(work, "none.json"), "{}\n");
    const imageDir = resolve(".bb/images/dev");
    const img = await buildDevImage({
      outDir: imageDir,
      cacheDir: resolve(".bb/cache"),
      bbBinaryPath: await compileGuest(),
    });
    // The development manifest, plus a second controller: it must not read the first one's output.
    const dev = ensureDevManifest(join(work, "scheduler"), img.digest);
    const other = `bbt_${randomBytes(24).toString("hex")}`;
    const m = JSON.parse(readFileSync(dev.manifestPath, "utf8")) as {
      principals: { id: string; role: string; tokenSha256: string }[];
    };
    m.principals.push({ id: "controller:other", role: "controller", tokenSha256: tokenDigest(other) });
    writeFileSync(dev.manifestPath, JSON.stringify(m, null, 2), { mode: 0o600 });
    port = await freePort();
    url = `http://127.0.0.1:${port}`;
    // Debug logging on both roles: the secret check below then covers the chattiest logs.
    scheduler = startRole(
      [
        "scheduler",
        "serve",
        "--data-dir",
        join(work, "scheduler"),
        "--listen",
        `127.0.0.1:${port}`,
        "--dev-image",
        imageDir,
        "--client-config",
        join(work, "client.json"),
      ],
      join(work, "scheduler.log"),
      { BB_LOG_LEVEL: "4" },
    );
    await waitFor("scheduler start", () => fetch(`${url}/healthz`).then((r) => r.ok), 30_000);
    const cfg = JSON.parse(readFileSync(join(work, "client.json"), "utf8")) as { token: string; operatorToken: string };
    tokens = { controller: cfg.token, other, operator: cfg.operatorToken };
    controller = new SchedulerClient(url, cfg.token);
    const operator = new SchedulerClient(url, cfg.operatorToken);
    publishImageSource(imageDir, img.digest, join(work, "source"));
    const t = await operator.enrollmentToken("logs-host");
    enrollmentToken = t.token;
    await runRole([
      "agent",
      "join",
      "--scheduler",
      url,
      "--token",
      t.token,
      "--data-dir",
      agentDir(),
      "--image-dir",
      imageDir,
      "--image-source",
      join(work, "source"),
      "--max-placements",
      "1",
    ]);
    agent = startRole(["agent", "run", "--data-dir", agentDir()], join(work, "agent.log"), { BB_LOG_LEVEL: "4" });
    await waitFor(
      "a healthy host",
      async () => (await operator.hosts()).some((h) => h.hostId === "logs-host" && h.health === "healthy"),
      60_000,
    );
  }, 600_000);

  afterAll(async () => {
    if (agent) await stopRole(agent);
    if (scheduler) await stopRole(scheduler);
    if (!work) return;
    await cleanUpPlacements(allocationsDir());
    rmSync(work, { recursive: true, force: true });
  }, 60_000);

  test("a second process follows the job's output live, redacted, and ends when the allocation is released; others are refused", async () => {
    const { view } = await controller.create({ clientRequestId: `logs-${randomUUID()}`, workloadClass: "ci-small" });
    const id = view.allocationId;
    await waitFor("ready", async () => (await controller.get(id)).state === "ready");
    const v = await controller.get(id);
    const nonce = (
      JSON.parse(
        readFileSync(
          join(allocationsDir(), placementDirName("logs-host", id, v.placementId!, v.generation), "runtime.json"),
          "utf8",
        ),
      ) as { nonce: string }
    ).nonce;

    // The follower starts before the payload exists: it waits (long-polls) for output.
    const follower = startLogs([id, "--follow"], tokens.controller);
    await controller.deliverWhenReady(id, new TextEncoder().encode(PAYLOAD), `dlv-${randomUUID()}`, 240_000);
    await waitFor("the first line at the follower", async () => follower.output().includes("logs-line-1"), 120_000);
    // Logs lag the exit: once the workload.exited event is there, one plain read already holds the job's last line.
    await waitFor(
      "workload.exited",
      async () => (await controller.events(id, 0, 100)).some((e) => e.type === "workload.exited"),
      120_000,
    );
    const atExit = await controller.logs(id, 0);
    expect(atExit.text).toContain("logs-line-5\n");
    await waitFor("the last line at the follower", async () => follower.output().includes("logs-line-5"), 120_000);
    expect(follower.proc.exitCode).toBeNull(); // still following: the allocation runs on
    await controller.release(id);
    const f = await follower.done();
    expect(f.code, f.err).toBe(0);
    const lines = f.out.split("\n");
    const at = (s: string) => lines.indexOf(s);
    for (let i = 1; i <= 5; i++) expect(at(`logs-line-${i}`)).toBeGreaterThan(i === 1 ? -1 : at(`logs-line-${i - 1}`));
    // Internals in logs: the job's own lines only, no markers or kernel lines.
    expect(f.out).not.toContain("BEACHBALL_JOB");
    expect(lines.some((l) => /^\[\s*\d+\.\d+\]\s/.test(l))).toBe(false);
    // The dumped script and the trace of its lines are redacted; no byte of the secret or the nonce is shown.
    expect(lines.filter((l) => l === "[redacted]").length).toBeGreaterThanOrEqual(3);
    expect(lines).toContain("value is [redacted].");
    expect(f.out).not.toContain(SECRET);
    expect(f.out).not.toContain(nonce);
    expect(f.out).not.toContain("printf '%s");
    expect(f.out).not.toContain("Linux version"); // only workload output: the boot console stays on the host

    // Not the owner: another controller and the operator get NOT_FOUND, from the CLI and the API alike.
    for (const token of [tokens.other, tokens.operator]) {
      const r = await runRoleExit(["allocation", "logs", id], {
        BB_SCHEDULER_URL: url,
        BB_TOKEN: token,
        BB_CONFIG: join(work, "none.json"),
      });
      expect(r.code).toBe(1);
      expect(r.out).toContain("NOT_FOUND");
      expect(r.out).not.toContain("logs-line");
      await expect(new SchedulerClient(url, token).logs(id, 0, true)).rejects.toMatchObject({
        code: "NOT_FOUND",
        status: 404,
      });
    }
    await expect(new SchedulerClient(url, "bbt_wrong").logs(id)).rejects.toMatchObject({ code: "UNAUTHENTICATED" });

    // Resumable by byte offset: the rest from where line 3 starts; past the end is a stable error.
    const all = await controller.logs(id, 0);
    expect(all.complete).toBe(true);
    const from = Buffer.byteLength(all.text.slice(0, all.text.indexOf("logs-line-3")));
    const rest = await runRoleExit(["allocation", "logs", id, "--offset", String(all.offset + from)], {
      BB_SCHEDULER_URL: url,
      BB_TOKEN: tokens.controller,
      BB_CONFIG: join(work, "none.json"),
    });
    expect(rest.code).toBe(0);
    expect(rest.stdout.startsWith("logs-line-3\n")).toBe(true);
    expect(rest.stdout).not.toContain("logs-line-2");
    await expect(controller.logs(id, all.nextOffset + 1)).rejects.toMatchObject({
      code: "LOG_OFFSET_PAST_END",
      status: 416,
    });
    const bad = await runRoleExit(["allocation", "logs", id, "--offset", "abc"], {
      BB_SCHEDULER_URL: url,
      BB_TOKEN: tokens.controller,
      BB_CONFIG: join(work, "none.json"),
    });
    expect(bad.code).toBe(2);
  }, 600_000);
  test("no component writes the payload or a bearer token to disk, while the job runs or after (spec: the payload is never written)", async () => {
    const marker = `bb-planted-${randomBytes(16).toString("hex")}`;
    // A payload that never prints itself: any copy of it on the host was written by Beachball.
    const payload = `#!/bin/sh\n: ${marker}\nsleep 4\necho payload-done\n`;
    const { view } = await controller.create({ clientRequestId: `logs-${randomUUID()}`, workloadClass: "ci-small" });
    const id = view.allocationId;
    await controller.deliverWhenReady(id, new TextEncoder().encode(payload), `dlv-${randomUUID()}`, 240_000);
    const v = await controller.get(id);
    const runtime = join(
      allocationsDir(),
      placementDirName("logs-host", id, v.placementId!, v.generation),
      "runtime.json",
    );
    const nonce = (JSON.parse(readFileSync(runtime, "utf8")) as { nonce: string }).nonce;
    const secrets: Record<string, string> = {
      payload: marker,
      payloadBase64: Buffer.from(payload).toString("base64").slice(0, 40),
      controllerToken: tokens.controller,
      otherToken: tokens.other,
      operatorToken: tokens.operator,
      enrollmentToken,
    };
    // Where a secret rests by design: the development client configs (tokens for the developer, 0600), and the nonce in the
    // placement's runtime.json (spec "Prepare"; removed with the placement). The private initramfs QEMU booted from is gone once the guest is ready.
    const allowed = (name: string, file: string) =>
      (name.endsWith("Token") &&
        name !== "enrollmentToken" &&
        [join(work, "client.json"), join(work, "scheduler", "client.json")].includes(file)) ||
      (name === "nonce" && file === runtime);
    const scan = () => {
      const found: string[] = [];
      for (const file of walkFiles(work)) {
        let bytes: Buffer;
        try {
          bytes = readFileSync(file);
        } catch {
          continue; // removed while walking (a finished placement, a WAL checkpoint)
        }
        for (const [name, secret] of Object.entries({ ...secrets, nonce }))
          if (!allowed(name, file) && bytes.includes(secret)) found.push(`${name} in ${file.slice(work.length + 1)}`);
      }
      return found;
    };
    let whileRunning: string[];
    try {
      // While the job runs (the payload is in the guest's memory): nothing on the host, SQLite files and role logs included.
      whileRunning = scan();
      await waitFor("the job's end", async () => (await controller.get(id)).workloadExitCode === 0, 120_000);
    } finally {
      await controller.release(id);
    }
    expect(whileRunning).toEqual([]);
    await waitFor("release", async () => (await controller.get(id)).state === "released", 120_000);
    expect(scan()).toEqual([]);
  }, 600_000);
});
