/**
 * The operator and client CLI against a real scheduler, as subprocesses:
 * host admin states (activate, drain, disable = fence), alerts, metrics,
 * replacement authorization; the exit codes (0 ok, 1 error, 2 usage, 3 not
 * placed, 4 auth); every silent-acceptance case of issue 13 item 5 (each
 * refused now, naming the flag, file or URL at fault); and the conventions
 * of item 7 (tables with headers, "no allocations", messages on stderr, no
 * colour in pipes, help with the full path, ID prefixes, `--wait
 * --timeout`, `serve --dev` without an image, `agent setup`).
 *
 * Subprocesses run without NO_COLOR in an empty directory with an empty
 * HOME, so no developer config is read and colour would show if it leaked;
 * a few run on a pseudo-terminal (util-linux `script`, in every Debian) to
 * see colour and the spinner where they belong.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { tmpdir } from "node:os";
import { allocationIdFor } from "../../src/domain/identifiers.ts";
import { ensureDevManifest } from "../../src/scheduler/manifest.ts";
import { startTestScheduler, rawPost, type TestScheduler } from "../support/scheduler.ts";
import { ScriptedAgent } from "../support/scriptedAgent.ts";

// Each test runs several `bb` subprocesses (≈ 0.3 s each, seconds on a loaded machine): 60 s each, also under a bare `bun test`.
setDefaultTimeout(60_000);

let s: TestScheduler;
let work: string;
const BUN = resolve("node_modules/.bin/bun");
const BB = resolve("bin/bb.ts");

interface Run {
  code: number;
  out: string;
  err: string;
}

/** Runs `bb ARGS` in the empty work directory; `env` adds to (or, with undefined, removes from) the base environment. */
async function bb(
  args: string[],
  opts: { token?: string; env?: Record<string, string | undefined>; cwd?: string } = {},
): Promise<Run> {
  const env: Record<string, string | undefined> = {
    ...process.env,
    HOME: join(work, "home"),
    BB_SCHEDULER_URL: s.url,
    ...opts.env,
  };
  for (const k of ["NO_COLOR", "BB_TOKEN", "BB_CONFIG", "FORCE_COLOR"]) if (!(opts.env && k in opts.env)) delete env[k];
  for (const [k, v] of Object.entries(env)) if (v === undefined) delete env[k];
  const p = Bun.spawn([BUN, BB, ...args, ...(opts.token ? ["--token", opts.token] : [])], {
    stdout: "pipe",
    stderr: "pipe",
    env: env as Record<string, string>,
    cwd: opts.cwd ?? work,
  });
  const timer = setTimeout(() => p.kill("SIGKILL"), 30_000);
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  clearTimeout(timer);
  return { code, out, err };
}

/** Runs `bb ARGS` on a pseudo-terminal of 120 columns (util-linux `script`), stdout and stderr both to it; returns what the terminal showed. */
async function bbOnTty(args: string[], env: Record<string, string> = {}): Promise<Run> {
  const quote = (w: string) => `'${w.replace(/'/g, `'\\''`)}'`;
  const base: Record<string, string | undefined> = {
    ...process.env,
    HOME: join(work, "home"),
    BB_SCHEDULER_URL: s.url,
    TERM: "xterm-256color",
    ...env,
  };
  for (const k of ["NO_COLOR", "BB_TOKEN", "BB_CONFIG", "FORCE_COLOR"]) if (!(k in env)) delete base[k];
  const p = Bun.spawn(
    ["script", "-qec", `stty cols 120 rows 40; exec ${[BUN, BB, ...args].map(quote).join(" ")}`, "/dev/null"],
    { stdin: "ignore", stdout: "pipe", stderr: "pipe", env: base as Record<string, string>, cwd: work },
  );
  const timer = setTimeout(() => p.kill("SIGKILL"), 30_000);
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  clearTimeout(timer);
  return { code, out, err };
}

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), "bb-cli-"));
  mkdirSync(join(work, "home"));
  s = await startTestScheduler();
  const t = await s.operator.enrollmentToken("cli-host");
  const r = await rawPost(
    `${s.url}/v1/agents/enroll`,
    null,
    JSON.stringify({
      token: t.token,
      capacity: { cpuMillis: 2000, memoryMiB: 1024, ephemeralDiskMiB: 4096, maxPlacements: 2 },
      region: "local",
      architecture: "x86_64",
      agentProtocolVersion: "1.0",
      vmmDriver: "qemu-microvm",
    }),
  );
  expect(r.status).toBe(201);
});
afterAll(async () => {
  await s.stop();
  rmSync(work, { recursive: true, force: true });
});

const NO_ESCAPES = /\x1b\[/;

describe("conventions (issue 13 item 7)", () => {
  test("an empty list says so on stderr and prints nothing on stdout", async () => {
    const r = await bb(["allocation", "list"], { token: s.tokens.token });
    expect(r).toMatchObject({ code: 0, out: "" });
    expect(r.err).toBe("no allocations\n");
  });

  test("create prints the result on stdout and the info line on stderr; -q prints the ID alone; list has a header", async () => {
    const r = await bb(["allocation", "create", "--class", "ci-small", "--ttl", "600"], { token: s.tokens.token });
    expect(r.code).toBe(0);
    const id = /^ID:\s+(alloc_[0-9a-f]{32})$/m.exec(r.out)?.[1];
    expect(id).toBeDefined();
    expect(r.err).toBe(`allocation ${id} (pending)\n`);
    const q = await bb(["allocation", "create", "--class", "ci-small", "-q"], { token: s.tokens.token });
    expect(q).toMatchObject({ code: 0, err: "" });
    expect(q.out).toMatch(/^alloc_[0-9a-f]{32}\n$/);
    const list = await bb(["allocation", "list"], { token: s.tokens.token });
    const lines = list.out.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^ID\s+STATE\s+CLASS\s+HOST\s+GEN\s+EXIT\s+REASON\s+CREATED$/);
    expect(lines.slice(1).some((l) => l.startsWith(`${id}  pending  ci-small`))).toBe(true);
    for (const x of [r, q, list]) expect(x.out + x.err).not.toMatch(NO_ESCAPES);
  });

  test("on a terminal: coloured messages and a spinner while waiting; NO_COLOR removes the colour; in a pipe neither", async () => {
    const tty = await bbOnTty(["allocation", "get", "ffff", "--token", s.tokens.token]);
    expect(tty.out).toContain("\x1b[31merror: \x1b[39mNOT_FOUND: no allocation of yours starts with ffff");
    const plain = await bbOnTty(["allocation", "get", "ffff", "--token", s.tokens.token], { NO_COLOR: "1" });
    expect(plain.out).toContain("error: NOT_FOUND: no allocation of yours starts with ffff");
    expect(plain.out).not.toMatch(NO_ESCAPES);
    const waiting = await bbOnTty(
      ["allocation", "create", "--class", "ci-medium", "--wait", "--timeout", "1", "--token", s.tokens.token],
      { NO_COLOR: "1" },
    );
    const id = /ID:\s+(alloc_[0-9a-f]{32})/.exec(waiting.out)![1]!;
    expect(waiting.out).toMatch(new RegExp(`[◒◐◓◑]  ${id}: pending`));
    expect(waiting.out).toContain("was not placed within 1 s");
    expect(waiting.out).not.toMatch(/\x1b\[[0-9;]*m/);
    const piped = await bb(["allocation", "create", "--class", "ci-medium", "--wait", "--timeout", "1"], {
      token: s.tokens.token,
    });
    expect(piped.code).toBe(3);
    expect(piped.out + piped.err).not.toMatch(/[◒◐◓◑]/);
    expect(piped.out + piped.err).not.toMatch(NO_ESCAPES);
    for (const r of [waiting, piped]) await s.controller.release(/ID:\s+(alloc_[0-9a-f]{32})/.exec(r.out)![1]!);
  });

  test("events: one line each; none says so on stderr", async () => {
    const { view } = await s.controller.create({ clientRequestId: "events-1", workloadClass: "ci-small" });
    const all = await bb(["allocation", "events", view.allocationId], { token: s.tokens.token });
    expect(all.code).toBe(0);
    expect(all.out).toMatch(/^\S+  #1 allocation\.\S+/);
    const none = await bb(["allocation", "events", view.allocationId, "--after", "1000"], { token: s.tokens.token });
    expect(none).toMatchObject({ code: 0, out: "", err: "no events after #1000\n" });
    await s.controller.release(view.allocationId);
  });

  test("help goes to stdout with the full path and examples, without colour in a pipe; a bare group prints it on stderr, exit 2", async () => {
    const h = await bb(["allocation", "create", "--help"]);
    expect(h.code).toBe(0);
    expect(h.out).toContain("Usage: bb allocation create --class CLASS [options]");
    expect(h.out).toContain("Examples:\n  bb allocation create --class ci-small\n");
    expect(h.out).not.toMatch(NO_ESCAPES);
    const g = await bb(["allocation"]);
    expect(g.code).toBe(2);
    expect(g.err).toContain("Usage: bb allocation <command>");
    expect((await bb(["--version"])).out).toBe("0.1.0\n");
  });

  test("bb completion bash prints a script; an unknown shell is a usage error", async () => {
    const c = await bb(["completion", "bash"]);
    expect(c.code).toBe(0);
    expect(c.out).toContain("complete -F _bb_complete bb");
    const bad = await bb(["completion", "tcsh"]);
    expect(bad.code).toBe(2);
    expect(bad.err).toContain('unknown shell "tcsh"');
  });

  test("an allocation ID may be a unique prefix; an ambiguous one is refused naming the matches; an unknown one is NOT_FOUND", async () => {
    const seen = new Map<string, string>();
    let pair: [string, string] | null = null;
    for (let i = 0; !pair; i++) {
      const crid = `prefix-${i}`;
      const p2 = allocationIdFor("controller:dev", crid).slice(6, 8);
      const other = seen.get(p2);
      if (other) pair = [other, crid];
      else seen.set(p2, crid);
    }
    const ids = [];
    for (const crid of pair)
      ids.push((await s.controller.create({ clientRequestId: crid, workloadClass: "ci-small" })).view.allocationId);
    const unique = await bb(["allocation", "get", ids[0]!.slice(0, 16), "--json"], { token: s.tokens.token });
    expect(unique.code).toBe(0);
    expect(JSON.parse(unique.out).allocationId).toBe(ids[0]);
    const bare = await bb(["allocation", "get", ids[1]!.slice(6, 18)], { token: s.tokens.token });
    expect(bare.out).toContain(`ID:          ${ids[1]}`);
    const ambiguous = await bb(["allocation", "get", ids[0]!.slice(0, 8)], { token: s.tokens.token });
    expect(ambiguous.code).toBe(2);
    expect(ambiguous.err).toContain(`${ids[0]!.slice(0, 8)} matches`);
    for (const id of ids) expect(ambiguous.err).toContain(id!);
    const none = await bb(["allocation", "release", "alloc_ffffffffffff"], { token: s.tokens.token });
    expect(none.code).toBe(1);
    expect(none.err).toContain("NOT_FOUND: no allocation of yours starts with alloc_ffffffffffff");
    for (const id of ids) await s.controller.release(id!);
  });

  test("create --wait honours --timeout when no host takes the allocation: exit 3 and why", async () => {
    const started = Date.now();
    const r = await bb(["allocation", "create", "--class", "ci-medium", "--wait", "--timeout", "2"], {
      token: s.tokens.token,
    });
    expect(Date.now() - started).toBeLessThan(20_000);
    expect(r.code).toBe(3);
    expect(r.out).toContain("Why pending:");
    expect(r.err).toMatch(/error: allocation alloc_[0-9a-f]{32} was not placed within 2 s \(pending[^)]*\): /);
    expect(r.err).toMatch(/no eligible host|no host is registered|refused/);
    await s.controller.release(/^ID:\s+(\S+)$/m.exec(r.out)![1]!);
  });

  test("bb scheduler serve --dev starts without a built dev image and writes a client config that works", async () => {
    const dir = join(work, "dev-serve");
    mkdirSync(dir);
    const env = { ...process.env, HOME: join(work, "home") } as Record<string, string>;
    delete env["BB_CONFIG"];
    const p = Bun.spawn(
      [
        BUN,
        BB,
        "scheduler",
        "serve",
        "--dev",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        "sched",
        "--client-config",
        "client.json",
      ],
      { cwd: dir, stdout: "pipe", stderr: "pipe", env },
    );
    try {
      const reader = p.stderr.getReader();
      let text = "";
      const deadline = Date.now() + 20_000;
      while (!text.includes("client config") && Date.now() < deadline) {
        const c = await reader.read();
        if (c.done) break;
        text += new TextDecoder().decode(c.value);
      }
      reader.releaseLock();
      // Off a terminal the scheduler logs JSON lines (src/command/log.ts); the warning is one of them.
      expect(text).toMatch(/"level":"warn","msg":"no dev image: [^"]*","role":"scheduler","devImageDir":"/);
      expect(text).toMatch(/"msg":"scheduler listening","role":"scheduler","url":"http:\/\/127\.0\.0\.1:/);
      const r = await bb(["allocation", "list"], {
        cwd: dir,
        env: { BB_SCHEDULER_URL: undefined, BB_CONFIG: join(dir, "client.json") },
      });
      expect(r).toMatchObject({ code: 0, out: "", err: "no allocations\n" });
      const both = await bb(["scheduler", "serve", "--dev", "--manifest", "m.json"], { cwd: dir });
      expect(both.code).toBe(2);
      expect(both.err).toContain("give --dev or --manifest, not both");
    } finally {
      p.kill("SIGTERM");
      await p.exited;
    }
  });

  test("bb agent setup on a terminal asks for what the flags leave out, masks the token, and joins", async () => {
    const tok = await s.operator.enrollmentToken("setup-tty");
    const dir = join(work, "agent-tty");
    const quote = (w: string) => `'${w.replace(/'/g, `'\\''`)}'`;
    const env = { ...process.env, HOME: join(work, "home"), TERM: "xterm-256color", NO_COLOR: "1" } as Record<
      string,
      string
    >;
    const p = Bun.spawn(
      [
        "script",
        "-qec",
        `stty cols 160 rows 40; exec ${[BUN, BB, "agent", "setup", "--data-dir", dir, "--image-dir", "/img"].map(quote).join(" ")}`,
        "/dev/null",
      ],
      { stdin: "pipe", stdout: "pipe", stderr: "pipe", env, cwd: work },
    );
    const timer = setTimeout(() => p.kill("SIGKILL"), 45_000);
    let screen = "";
    const reading = (async () => {
      for await (const chunk of p.stdout) screen += new TextDecoder().decode(chunk);
    })();
    let from = 0;
    // Answers each prompt once it is on the screen (keys typed before a prompt is ready could be read by the previous one).
    for (const [prompt, keys] of [
      ["Scheduler URL", `${s.url}\r`],
      ["Enrollment token", `${tok.token}\r`],
      ["Image source", "\r"],
      ["Most VMs at once", "3\r"],
      ["Enroll this host now?", "\r"],
    ] as const) {
      const deadline = Date.now() + 20_000;
      while (screen.indexOf(prompt, from) < 0 && Date.now() < deadline) await Bun.sleep(50);
      const at = screen.indexOf(prompt, from);
      expect(at, `prompt "${prompt}" did not appear; screen: ${screen}`).toBeGreaterThanOrEqual(0);
      from = at + prompt.length;
      p.stdin.write(keys);
      await p.stdin.flush();
    }
    p.stdin.end();
    const code = await p.exited;
    clearTimeout(timer);
    await reading;
    expect(code).toBe(0);
    expect(screen).toContain("enrolled as host setup-tty");
    expect(screen).not.toContain(tok.token);
    expect(screen).not.toContain("Local image directories");
    expect(JSON.parse(readFileSync(join(dir, "agent.json"), "utf8")).capacity.maxPlacements).toBe(3);
    expect(existsSync(join(dir, "join.json"))).toBe(false);
    await s.operator.setHostState("setup-tty", "disable");
  });

  test("bb agent setup: non-interactive with flags, writes join.json (0600) for bb agent join, or joins at once", async () => {
    const later = await s.operator.enrollmentToken("setup-later");
    const d1 = join(work, "agent-1");
    const w = await bb([
      "agent",
      "setup",
      "--no-input",
      "--scheduler",
      s.url,
      "--token",
      later.token,
      "--data-dir",
      d1,
      "--max-placements",
      "3",
      "--no-join",
    ]);
    expect(w.code).toBe(0);
    expect(w.err).toContain(`wrote ${join(d1, "join.json")} (mode 0600); enroll with: bb agent join --data-dir ${d1}`);
    expect(statSync(join(d1, "join.json")).mode & 0o777).toBe(0o600);
    expect(JSON.parse(readFileSync(join(d1, "join.json"), "utf8"))).toMatchObject({
      schedulerUrl: s.url,
      token: later.token,
      maxPlacements: 3,
    });
    expect(w.out + w.err).not.toContain(later.token);
    const j = await bb(["agent", "join", "--data-dir", d1]);
    expect(j.code).toBe(0);
    expect(j.err).toContain("enrolled as host setup-later");
    expect(existsSync(join(d1, "join.json"))).toBe(false);
    expect(JSON.parse(readFileSync(join(d1, "agent.json"), "utf8")).capacity.maxPlacements).toBe(3);

    const now = await s.operator.enrollmentToken("setup-now");
    const d2 = join(work, "agent-2");
    const n = await bb(["agent", "setup", "--no-input", "--scheduler", s.url, "--token", now.token, "--data-dir", d2]);
    expect(n.code).toBe(0);
    expect(n.err).toContain("enrolled as host setup-now");
    expect(existsSync(join(d2, "credential"))).toBe(true);
    expect(existsSync(join(d2, "join.json"))).toBe(false);

    const missing = await bb(["agent", "setup", "--no-input", "--data-dir", join(work, "agent-3")]);
    expect(missing.code).toBe(2);
    expect(missing.err).toContain("missing --scheduler");
    await s.operator.setHostState("setup-later", "disable");
    await s.operator.setHostState("setup-now", "disable");
  });
});

describe("bad input is refused, not accepted silently (issue 13 item 5)", () => {
  test("--lisen is an unknown flag: exit 2 naming it and suggesting --listen; nothing starts", async () => {
    const dir = join(work, "lisen");
    const dev = ensureDevManifest(dir, `sha256:${"ab".repeat(32)}`);
    const r = await bb([
      "scheduler",
      "serve",
      "--manifest",
      dev.manifestPath,
      "--data-dir",
      join(dir, "data"),
      "--lisen",
      "127.0.0.1:0",
    ]);
    expect(r.code).toBe(2);
    expect(r.err).toContain("error: unknown flag --lisen (did you mean --listen?)");
    expect(existsSync(join(dir, "data"))).toBe(false);
  });

  test("--ttl abc is refused before anything is created", async () => {
    const before = (await s.controller.list(undefined, 200)).items.length;
    const r = await bb(["allocation", "create", "--class", "ci-small", "--ttl", "abc"], { token: s.tokens.token });
    expect(r.code).toBe(2);
    expect(r.err).toContain('--ttl must be a whole number of seconds from 10 to 604800 (got "abc")');
    expect((await s.controller.list(undefined, 200)).items.length).toBe(before);
  });

  test("list --bogus --output json is refused, printing no list", async () => {
    const r = await bb(["allocation", "list", "--bogus", "--output", "json"], { token: s.tokens.token });
    expect(r).toMatchObject({ code: 2, out: "" });
    expect(r.err).toContain("unknown flag --bogus");
  });

  test("a BB_CONFIG naming a missing file is an error naming it", async () => {
    const r = await bb(["allocation", "list"], {
      token: s.tokens.token,
      env: { BB_CONFIG: join(work, "no-such.json") },
    });
    expect(r.code).toBe(2);
    expect(r.err).toContain(`BB_CONFIG names ${join(work, "no-such.json")}, which does not exist`);
  });

  test("a malformed config file is an error naming its path", async () => {
    const bad = join(work, "bad.json");
    writeFileSync(bad, '{"schedulerUrl": ');
    const r = await bb(["allocation", "list"], { env: { BB_CONFIG: bad } });
    expect(r.code).toBe(2);
    expect(r.err).toContain(`config file ${bad} is not valid JSON`);
    const cwd = join(work, "with-local-config");
    mkdirSync(join(cwd, ".bb"), { recursive: true });
    writeFileSync(join(cwd, ".bb", "client.json"), JSON.stringify({ schedulerUrl: s.url, tokne: "x" }));
    const local = await bb(["allocation", "list"], { cwd });
    expect(local.code).toBe(2);
    expect(local.err).toContain(`config file ${join(cwd, ".bb", "client.json")}: /tokne`);
  });

  test("usage errors exit 2 (a missing argument, an unknown command, a missing required flag)", async () => {
    const get = await bb(["allocation", "get"], { token: s.tokens.token });
    expect([get.code, get.err]).toEqual([2, "error: missing argument ID\nRun `bb allocation get --help` for usage.\n"]);
    const cmd = await bb(["allocation", "crate"], { token: s.tokens.token });
    expect(cmd.code).toBe(2);
    expect(cmd.err).toContain('unknown command "crate" for `bb allocation` (did you mean `bb allocation create`?)');
    expect((await bb(["allocation", "create"], { token: s.tokens.token })).code).toBe(2);
  });

  test("--ttl 5 is reported as the flag, not /ttlSeconds", async () => {
    const r = await bb(["allocation", "create", "--class", "ci-small", "--ttl", "5"], { token: s.tokens.token });
    expect(r.code).toBe(2);
    expect(r.err).toContain("--ttl must be a whole number of seconds from 10 to 604800 (got 5)");
    expect(r.err).not.toContain("ttlSeconds");
  });

  test("a dead or malformed scheduler URL is reported with the URL and where it came from", async () => {
    const dead = await bb(["allocation", "list"], {
      token: s.tokens.token,
      env: { BB_SCHEDULER_URL: "http://127.0.0.1:1" },
    });
    expect(dead.code).toBe(1);
    expect(dead.err).toContain("cannot reach the scheduler at http://127.0.0.1:1 (from BB_SCHEDULER_URL)");
    const flag = await bb(["allocation", "list", "--scheduler", "not a url"], { token: s.tokens.token });
    expect(flag.code).toBe(2);
    expect(flag.err).toContain('scheduler URL "not a url" (from --scheduler) is not an http:// or https:// URL');
    const file = join(work, "dead.json");
    writeFileSync(file, JSON.stringify({ schedulerUrl: "http://127.0.0.1:1/", token: "t" }));
    const fromFile = await bb(["allocation", "list"], { env: { BB_CONFIG: file, BB_SCHEDULER_URL: undefined } });
    expect(fromFile.err).toContain(`cannot reach the scheduler at http://127.0.0.1:1 (from schedulerUrl in ${file})`);
  });

  test("UNKNOWN_WORKLOAD_CLASS lists the known classes", async () => {
    const r = await bb(["allocation", "create", "--class", "ci-huge"], { token: s.tokens.token });
    expect(r.code).toBe(1);
    expect(r.err).toContain(
      'UNKNOWN_WORKLOAD_CLASS: unknown workload class "ci-huge"; known classes: ci-small, ci-medium',
    );
  });
});

describe("operator commands and exit codes", () => {
  test("host drain, activate and disable (fence) change the admin state", async () => {
    const op = s.tokens.operatorToken;
    expect((await bb(["host", "drain", "cli-host", "--json"], { token: op })).out).toContain('"adminState":"draining"');
    expect((await bb(["host", "activate", "cli-host", "--json"], { token: op })).out).toContain(
      '"adminState":"active"',
    );
    const fenced = await bb(["host", "disable", "cli-host", "--json"], { token: op });
    expect(fenced.code).toBe(0);
    expect(fenced.out).toContain('"adminState":"disabled"');
    expect(fenced.out).toContain('"credentialVersion":2');
    const hosts = await bb(["host", "list"], { token: op });
    expect(hosts.out.split("\n")[0]).toMatch(/^HOST\s+STATE\s+HEALTH\s+FREE CPU/);
    expect(hosts.out).toMatch(/^cli-host\s+disabled\s/m);
    const alerts = await bb(["host", "alerts"], { token: op });
    expect(alerts.out.split("\n")[0]).toMatch(/^SEQ\s+AT\s+TYPE\s+SUBJECT\s+REASON\s+RUNBOOK$/);
    expect(alerts.out).toMatch(/host\.disabled\s+cli-host\s+HOST_FENCED/);
    const metrics = await bb(["host", "metrics"], { token: op });
    expect(metrics.out).toContain('bb_host_admin_changes_total{host="cli-host",state="disabled"} 1');
    expect((await bb(["host", "disable", "no-such-host"], { token: op })).code).toBe(1);
    const ttl = await bb(["host", "enrollment-token", "create", "h-9", "--ttl", "30"], { token: op });
    expect(ttl.code).toBe(2);
    expect(ttl.err).toContain("--ttl must be a whole number of seconds from 60 to 3600 (got 30)");
  });

  test("exit codes: 4 for a refused token or role, 2 for a missing token, 1 for a stable error", async () => {
    expect((await bb(["host", "list"], { token: "wrong-token" })).code).toBe(4);
    expect((await bb(["host", "list"], { token: s.tokens.token })).code).toBe(4);
    expect((await bb(["allocation", "list"])).code).toBe(2);
    const missing = await bb(
      ["allocation", "authorize-replacement", "alloc_00000000000000000000000000000000", "--generation", "1"],
      { token: s.tokens.token },
    );
    expect(missing.code).toBe(1);
    expect(missing.err).toContain("NOT_FOUND");
    const { view } = await s.controller.create({ clientRequestId: "cli-1", workloadClass: "ci-small" });
    const notBlocked = await bb(["allocation", "authorize-replacement", view.allocationId, "--generation", "1"], {
      token: s.tokens.token,
    });
    expect(notBlocked.code).toBe(1);
    expect(notBlocked.err).toContain("REPLACEMENT_NOT_BLOCKED");
    const badGen = await bb(["allocation", "authorize-replacement", view.allocationId, "--generation", "one"], {
      token: s.tokens.token,
    });
    expect(badGen.code).toBe(2);
    expect(badGen.err).toContain("--generation must be a whole number");
    await s.controller.release(view.allocationId);
  });
});

describe("--wait with a host that takes the allocation (a scripted agent: the real protocol, no VM)", () => {
  test("wrong exit code: a payload that exits 7 makes create --wait exit 7 (the default), and 1 with --no-workload-exit-code, naming the code; a wait that times out once placed exits 1 with the state", async () => {
    // Earlier tests leave allocations pending; release them so this host takes only this test's.
    for (const v of (await s.controller.list(undefined, 200)).items)
      if (!["released", "releasing", "failed"].includes(v.state)) await s.controller.release(v.allocationId);
    const t = await s.operator.enrollmentToken("cli-agent");
    const e = await rawPost(
      `${s.url}/v1/agents/enroll`,
      null,
      JSON.stringify({
        token: t.token,
        capacity: { cpuMillis: 1500, memoryMiB: 1024, ephemeralDiskMiB: 4096, maxPlacements: 2 },
        region: "local",
        architecture: "x86_64",
        agentProtocolVersion: "1.0",
        vmmDriver: "qemu-microvm",
      }),
    );
    expect(e.status).toBe(201);
    const agent = new ScriptedAgent(s.url, "cli-agent", String(e.body["credential"]));
    await agent.poll();
    // The agent leaves this allocation provisioning: it never reports its placement prepared.
    const held = allocationIdFor("controller:dev", "cli-held");
    let stop = false;
    const drive = (async () => {
      while (!stop) {
        await agent.poll(200);
        for (const c of agent.commands.splice(0)) {
          if (c.allocationId === held && c.type !== "ensure_absent") continue;
          if (c.type === "ensure_present")
            for (const st of ["preparing", "prepared"] as const) await agent.report(c, st);
          else if (c.type === "ensure_running")
            for (const st of ["starting", "running"] as const) await agent.report(c, st);
          else await agent.report(c, "absent");
        }
        for (const d of agent.deliveries.splice(0)) {
          const digest = `sha256:${createHash("sha256").update(Buffer.from(d.payloadBase64, "base64")).digest("hex")}`;
          await agent.send({
            deliveryAcks: [
              {
                deliveryId: d.deliveryId,
                placementId: d.placementId,
                generation: d.generation,
                result: "consumed",
                digest,
              },
            ],
          });
          // The scripted guest "runs" the payload: its exit code is the `exit N` it ends with.
          const code = Number(/exit (\d+)/.exec(Buffer.from(d.payloadBase64, "base64").toString())?.[1] ?? 0);
          await agent.report(d, "running", { workloadExitCode: code });
        }
      }
    })();
    try {
      writeFileSync(join(work, "job.sh"), "echo hi; exit 7\n");
      for (const [flags, want] of [
        [[], 7],
        [["--no-workload-exit-code"], 1],
      ] as const) {
        const r = await bb(
          ["allocation", "create", "--class", "ci-small", "--payload", "job.sh", "--wait", "--timeout", "60", ...flags],
          { token: s.tokens.token },
        );
        expect(r.code).toBe(want);
        expect(r.out).toMatch(/^State:\s+ready$/m);
        expect(r.out).toMatch(/^Exit code:\s+7$/m);
        expect(r.err).toMatch(/payload consumed \(sha256:[0-9a-f]{64}\)/);
        expect(r.err).toMatch(/workload\.exited exitCode=7/);
        expect(r.err).toEndWith("error: the payload exited with code 7\n");
        // The host fits one ci-small at a time: release this one (its placement absent) before the next.
        const rel = await bb(
          ["allocation", "release", /ID:\s+(alloc_[0-9a-f]{32})/.exec(r.out)![1]!, "--wait", "--timeout", "30"],
          { token: s.tokens.token },
        );
        expect(rel.code).toBe(0);
        expect(rel.out).toMatch(/^State:\s+released$/m);
      }

      const h = await bb(
        ["allocation", "create", "--class", "ci-small", "--client-request-id", "cli-held", "--wait", "--timeout", "2"],
        { token: s.tokens.token },
      );
      expect(h.code).toBe(1);
      expect(h.out).toMatch(/^Host:\s+cli-agent$/m);
      expect(h.err).toContain(`error: gave up after 2 s: allocation ${held} is provisioning on cli-agent`);
      await s.controller.release(held);
    } finally {
      stop = true;
      await drive;
      await s.operator.setHostState("cli-agent", "disable");
    }
  });
});
