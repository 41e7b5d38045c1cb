/**
 * One shape of usage error for every command (src/command/run.ts
 * UsageError, printed by src/command/usageText.ts): exit 2, stderr
 * `error: MESSAGE` and, for a fault in the command line, `Run \`PATH
 * --help\` for usage.`; where a command answers in JSON, the stable code
 * USAGE. The table covers both former paths: errors that were plain
 * Errors carrying exit code 2 (`bb image`, `bb proxy`, `bb dev demo`,
 * `bb scheduler serve --dev`), printed by each command without the help
 * pointer, and the parser's and the client commands' UsageError. Every
 * case is refused before anything is sent or started (the scheduler URL
 * is a closed loopback port).
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const BB = resolve(import.meta.dir, "../bin/bb.ts");
const work = mkdtempSync(join(tmpdir(), "bb-usage-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));
/** Per test: one `bb` process that loads a role's modules on a shared 2-core machine (a bound, not a timing). */
const SPAWN_TIMEOUT_MS = 60_000;
const ID = `alloc_${"ab".repeat(16)}`;

function bb(args: string[], env: Record<string, string> = {}): { code: number; out: string; err: string } {
  const r = Bun.spawnSync([process.execPath, BB, ...args], {
    cwd: work,
    env: {
      PATH: process.env["PATH"] ?? "",
      HOME: work,
      NO_COLOR: "1",
      BB_SCHEDULER_URL: "http://127.0.0.1:1",
      BB_TOKEN: "bbt_x",
      ...env,
    },
    stdout: "pipe",
    stderr: "pipe",
  });
  // Structured log lines (JSON objects, e.g. the scheduler's start-up warnings) are not the error's text.
  const err = r.stderr
    .toString()
    .split(/(?<=\n)/)
    .filter((l) => !l.startsWith("{"))
    .join("");
  return { code: r.exitCode ?? -1, out: r.stdout.toString(), err };
}

/** The one text form: the message, then the pointer to `path --help` when the command line is at fault. */
const usage = (message: string, path?: string) =>
  `error: ${message}\n${path ? `Run \`${path} --help\` for usage.\n` : ""}`;

describe("one shape of usage error", () => {
  const devData = join(work, "dev-data");
  mkdirSync(devData, { recursive: true });
  writeFileSync(join(devData, "manifest.json"), "{}");
  const cases: { name: string; args: string[]; env?: Record<string, string>; err: string }[] = [
    // Formerly a plain Error with exit code 2, printed by the command itself without the pointer to --help.
    {
      name: "bb image keygen without --out",
      args: ["image", "keygen"],
      err: usage("--out KEYFILE is required", "bb image keygen"),
    },
    {
      name: "bb image build without a source",
      args: ["image", "build"],
      err: usage("give exactly one of --oci-layout DIR or --docker-archive FILE", "bb image build"),
    },
    {
      name: "bb proxy with a port out of range",
      args: ["proxy", ID, "--local-port", "0", "--remote-port", "22", "--connection-key", `k=${"A".repeat(43)}=`],
      err: usage("--local-port must be a port number 1..65535", "bb proxy"),
    },
    {
      name: "bb proxy with a malformed BB_RELAY_CA (the environment at fault: no pointer)",
      args: ["proxy", ID, "--local-port", "2222", "--remote-port", "22", "--connection-key", `k=${"A".repeat(43)}=`],
      env: { BB_RELAY_CA: join(work, "no-such-ca.pem") },
      err: usage(
        `BB_RELAY_CA ${join(work, "no-such-ca.pem")}: ENOENT: no such file or directory, open '${join(work, "no-such-ca.pem")}'`,
      ),
    },
    {
      name: "bb dev demo with an unreadable --payload",
      args: ["dev", "demo", "--payload", join(work, "no-such.sh")],
      err: usage(`cannot read --payload ${join(work, "no-such.sh")}: ENOENT`, "bb dev demo"),
    },
    {
      name: "bb scheduler serve --dev over a data directory without its client config (the directory at fault: no pointer)",
      args: ["scheduler", "serve", "--dev", "--data-dir", devData, "--listen", "127.0.0.1:0"],
      err: usage(
        `${join(devData, "client.json")} is missing, and it holds the only copy of the development tokens of ${join(devData, "manifest.json")}; dev mode never replaces an existing manifest: restore ${join(devData, "client.json")}, or serve this manifest with --manifest and your own tokens, or move ${join(devData, "manifest.json")} aside to start a fresh development deployment`,
      ),
    },
    // Always a UsageError: the parser, a client command's own check, the client config.
    {
      name: "bb exec with an --env name that is not a shell identifier",
      args: ["exec", ID, "-e", "1A=x", "--", "true"],
      err: usage('--env "1A=x": the name must be a shell identifier of at most 256 characters (NAME=VALUE)', "bb exec"),
    },
    {
      name: "bb exec attach with --env",
      args: ["exec", "attach", ID, `exec_${"cd".repeat(16)}`, "--env", "A=1"],
      err: usage("--env is for starting a command, not bb exec attach", "bb exec"),
    },
    {
      name: "bb allocation get without its argument",
      args: ["allocation", "get"],
      err: usage("missing argument ID", "bb allocation get"),
    },
    {
      name: "bb allocation list with a malformed --cursor",
      args: ["allocation", "list", "--cursor", "zz"],
      err: usage('--cursor must be an allocation ID (got "zz")', "bb allocation list"),
    },
    {
      name: "bb host list with BB_CONFIG naming a missing file (the environment at fault: no pointer)",
      args: ["host", "list"],
      env: { BB_CONFIG: join(work, "no-such.json") },
      err: usage(`BB_CONFIG names ${join(work, "no-such.json")}, which does not exist`),
    },
  ];
  for (const c of cases)
    test(
      `${c.name}: exit 2, the one text form`,
      () => {
        const r = bb(c.args, c.env);
        expect({ code: r.code, err: r.err }).toEqual({ code: 2, err: c.err });
      },
      SPAWN_TIMEOUT_MS,
    );

  test(
    "a --json command's result line carries the stable code USAGE, and stderr the same text",
    () => {
      const r = bb(["image", "keygen", "--json"]);
      expect(r.code).toBe(2);
      expect(JSON.parse(r.out)).toEqual({ ok: false, code: "USAGE", message: "--out KEYFILE is required" });
      expect(r.err).toBe(usage("--out KEYFILE is required", "bb image keygen"));
    },
    SPAWN_TIMEOUT_MS,
  );
});
