/**
 * Visible dependencies (docs/architecture.md, "Layers" and "Roles"): which
 * part of the tree may import which. Static `import … from` lines and
 * dynamic `import("…")` calls both count.
 *
 * - The lower layer (src/protocol, src/domain, src/storage, src/command)
 *   belongs to no role. protocol imports nothing of ours; domain imports
 *   protocol only and touches no clock, randomness or Bun API; storage
 *   imports nothing of ours; command imports protocol only.
 * - Role-free libraries (src/image, src/wireguard, src/netstack, native/,
 *   src/relayclient) import only the lower layer (and, for the tunnel, each
 *   other); the relay client imports src/protocol only.
 * - Roles (ROLES: scheduler, agent, cli, proxy, relay, guest) never import
 *   each other, whatever ALLOWED says: what two roles share moves down a
 *   floor (the CLI and `bb proxy` share the client flags, config and
 *   ID-prefix lookup in src/command, the scheduler client in src/client).
 *   The public client library (src/client) imports only src/protocol; the
 *   guest imports only the lower layer; relay and proxy import only the
 *   lower layer and the libraries; the relay's clients (proxy, agent)
 *   reach it through src/relayclient, never src/relay.
 * - src/dev (the one-machine demo) and bin/bb.ts compose roles: the only
 *   places allowed to import more than one.
 */
import { describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "..");

function files(dir: string): string[] {
  const abs = join(ROOT, dir);
  if (!existsSync(abs)) return [];
  return readdirSync(abs, { withFileTypes: true }).flatMap((d) =>
    d.isDirectory() ? files(join(dir, d.name)) : /\.(ts|js|mjs)$/.test(d.name) ? [join(dir, d.name)] : [],
  );
}

/** Every module specifier a file imports, statically or dynamically. */
function specifiers(source: string): string[] {
  const out: string[] = [];
  for (const m of source.matchAll(/^\s*(?:import|export)\b[^;]*?\bfrom\s*["']([^"']+)["']/gm)) out.push(m[1]!);
  for (const m of source.matchAll(/\bimport\(\s*["']([^"']+)["']\s*\)/g)) out.push(m[1]!);
  for (const m of source.matchAll(/^\s*import\s*["']([^"']+)["']/gm)) out.push(m[1]!);
  return out;
}

/** The top-level area of a repository path: "src/agent", "native", "bin", … */
function areaOf(path: string): string {
  const parts = path.split("/");
  return parts[0] === "src" ? `src/${parts[1]}` : parts[0]!;
}

/** Areas each area may import (besides itself and packages from node_modules). */
const ALLOWED: Record<string, readonly string[]> = {
  "src/protocol": [],
  "src/domain": ["src/protocol"],
  "src/storage": [],
  "src/command": ["src/protocol"],
  "src/image": ["src/protocol", "src/domain", "src/storage", "src/command"],
  "src/wireguard": ["src/protocol", "src/domain", "native"],
  "src/netstack": ["src/protocol", "src/domain", "native"],
  "src/relayclient": ["src/protocol"],
  native: [],
  "src/agent": [
    "src/protocol",
    "src/domain",
    "src/storage",
    "src/command",
    "src/image",
    "src/wireguard",
    "src/netstack",
    "native",
    "src/relayclient",
  ],
  "src/scheduler": ["src/protocol", "src/domain", "src/storage", "src/command"],
  "src/client": ["src/protocol"],
  "src/cli": ["src/protocol", "src/domain", "src/command", "src/image", "src/client"],
  "src/relay": ["src/protocol", "src/domain", "src/command", "src/wireguard"],
  "src/proxy": [
    "src/protocol",
    "src/domain",
    "src/command",
    "src/client",
    "src/wireguard",
    "src/netstack",
    "native",
    "src/relayclient",
  ],
};

/** Areas that compose roles and may import anything in src/. */
const COMPOSERS = new Set(["src/dev", "bin"]);

/** The roles (docs/architecture.md, "Roles"): one process each; none imports another. */
const ROLES = new Set(["src/scheduler", "src/agent", "src/cli", "src/proxy", "src/relay"]);

/**
 * Role-to-role imports in one file's source, each with the rule it breaks:
 * "src/proxy/command.ts imports ../cli/config.ts: role src/proxy imports
 * role src/cli; roles never import each other (move what both need down a floor)".
 */
function roleViolations(file: string, source: string): string[] {
  const from = areaOf(file);
  if (!ROLES.has(from)) return [];
  const out: string[] = [];
  for (const spec of specifiers(source)) {
    if (!spec.startsWith(".")) continue;
    const to = areaOf(relative(ROOT, resolve(ROOT, dirname(file), spec)));
    if (to !== from && ROLES.has(to))
      out.push(
        `${file} imports ${spec}: role ${from} imports role ${to}; roles never import each other (docs/architecture.md, "Layers"): move what both need down a floor (src/command, src/client, a library)`,
      );
  }
  return out;
}

/** Import violations of the rules above for one file's source, as "file imports spec (area)". */
function violations(file: string, source: string): string[] {
  const from = areaOf(file);
  const out: string[] = [];
  for (const spec of specifiers(source)) {
    if (!spec.startsWith(".")) continue;
    const target = relative(ROOT, resolve(ROOT, dirname(file), spec));
    const to = areaOf(target);
    if (to === from || COMPOSERS.has(from)) continue;
    const allowed = ALLOWED[from];
    if (!allowed || !allowed.includes(to)) out.push(`${file} imports ${spec} (${to})`);
  }
  return out;
}

const SOURCES = [...files("src"), ...files("native"), ...files("bin")].filter((f) => !f.endsWith(".test.ts"));

describe("dependency rules", () => {
  test("every area under src/ has a rule", () => {
    const areas = new Set(SOURCES.filter((f) => f.startsWith("src/")).map(areaOf));
    for (const a of areas) expect(a in ALLOWED || COMPOSERS.has(a), `${a} has no dependency rule`).toBe(true);
  });

  test("no role imports another role (its sources and the unit tests beside them), and no rule allows it", () => {
    const found = files("src").flatMap((f) => roleViolations(f, readFileSync(join(ROOT, f), "utf8")));
    expect(found).toEqual([]);
    for (const [area, allowed] of Object.entries(ALLOWED))
      if (ROLES.has(area))
        expect(
          allowed.filter((a) => ROLES.has(a)),
          `ALLOWED lets role ${area} import a role`,
        ).toEqual([]);
  });

  test("the role rule catches a role importing another, statically or dynamically, and lets a composer do it", () => {
    expect(roleViolations("src/proxy/command.ts", 'import { clientArgs } from "../cli/common.ts";')).toEqual([
      'src/proxy/command.ts imports ../cli/common.ts: role src/proxy imports role src/cli; roles never import each other (docs/architecture.md, "Layers"): move what both need down a floor (src/command, src/client, a library)',
    ]);
    expect(roleViolations("src/cli/hostCommand.ts", 'const m = await import("../agent/daemon.ts");')).toHaveLength(1);
    expect(roleViolations("src/relay/hub.ts", 'import type { X } from "../proxy/command.ts";')).toHaveLength(1);
    expect(roleViolations("src/proxy/command.ts", 'import { clientArgs } from "../command/clientArgs.ts";')).toEqual(
      [],
    );
    expect(roleViolations("src/dev/demo.ts", 'import { AgentDaemon } from "../agent/daemon.ts";')).toEqual([]);
    expect(violations("src/proxy/command.ts", 'import { clientArgs } from "../cli/common.ts";')).toHaveLength(1);
  });

  test("roles and libraries import only what their layer allows", () => {
    const found = SOURCES.flatMap((f) => violations(f, readFileSync(join(ROOT, f), "utf8")));
    expect(found).toEqual([]);
  });

  test("the rule check catches a violation (an agent file importing the scheduler)", () => {
    expect(violations("src/agent/daemon.ts", 'import { x } from "../scheduler/worker.ts";')).toHaveLength(1);
    expect(violations("src/scheduler/worker.ts", 'const m = await import("../agent/daemon.ts");')).toHaveLength(1);
    expect(
      violations("src/cli/client.ts", 'import type { HostView } from "../scheduler/objects/hostObject.ts";'),
    ).toHaveLength(1);
    expect(violations("src/wireguard/device.ts", 'import { AgentDaemon } from "../agent/daemon.ts";')).toHaveLength(1);
    expect(violations("src/dev/demo.ts", 'import { AgentDaemon } from "../agent/daemon.ts";')).toHaveLength(0);
  });

  test("the tunnel libraries never import a role: src/wireguard and native/ import no agent, scheduler or CLI code", () => {
    for (const role of ["agent/daemon.ts", "scheduler/worker.ts", "cli/client.ts"]) {
      expect(violations("src/wireguard/device.ts", `import { x } from "../${role}";`), role).toHaveLength(1);
      expect(violations("native/sodium/sodium.ts", `import { x } from "../../src/${role}";`), role).toHaveLength(1);
    }
    const offenders = SOURCES.filter((f) => f.startsWith("src/wireguard/") || f.startsWith("native/")).flatMap((f) =>
      specifiers(readFileSync(join(ROOT, f), "utf8"))
        .filter((s) => s.startsWith("."))
        .map((s) => relative(ROOT, resolve(ROOT, dirname(f), s)))
        .filter((t) => /^src\/(agent|scheduler|cli)\//.test(t))
        .map((t) => `${f} imports ${t}`),
    );
    expect(offenders).toEqual([]);
  });

  test("the relay role and its client library stay apart: src/relayclient imports no role, and no other role imports src/relay", () => {
    expect(violations("src/relayclient/wsClient.ts", 'import { RelayHub } from "../relay/hub.ts";')).toHaveLength(1);
    expect(violations("src/proxy/main.ts", 'import { RelayHub } from "../relay/hub.ts";')).toHaveLength(1);
    expect(violations("src/agent/daemon.ts", 'import { connectRelay } from "../relayclient/index.ts";')).toHaveLength(
      0,
    );
    expect(violations("src/relay/hub.ts", 'import { connectRelay } from "../relayclient/index.ts";')).toHaveLength(1);
  });

  test("ID patterns are declared once (src/protocol/ids.ts): no other source spells one out", () => {
    // An ID's full shape (a prefix and 32 or 64 hex digits, or a DNS-label name); the log
    // redaction's looser patterns (src/command/log.ts) catch partial tokens on purpose.
    const copy = /[a-z]_\[0-9a-f\]\{(?:32|64)\}|\[a-z0-9\]\[a-z0-9-\]\{0,62\}/;
    expect(copy.test('grantId: Type.String({ pattern: "^grt_[0-9a-f]{32}$" })')).toBe(true);
    expect(copy.test("const HOST = /^[a-z0-9][a-z0-9-]{0,62}$/;")).toBe(true);
    const offenders = SOURCES.filter((f) => f !== "src/protocol/ids.ts").flatMap((f) =>
      readFileSync(join(ROOT, f), "utf8")
        .split("\n")
        .flatMap((line, i) =>
          copy.test(line) ? [`${f}:${i + 1}: ${line.trim()} (import it from src/protocol/ids.ts)`] : [],
        ),
    );
    expect(offenders).toEqual([]);
  });

  test("usage errors have one shape: no source builds its own error with exit code 2 (src/command/run.ts UsageError)", () => {
    const adHoc = /exitCode:\s*(?:2\b|EXIT\.usage\b)/;
    expect(adHoc.test('throw Object.assign(new Error("--out is required"), { exitCode: 2 });')).toBe(true);
    const offenders = SOURCES.filter(
      (f) => f !== "src/command/run.ts" && adHoc.test(readFileSync(join(ROOT, f), "utf8")),
    );
    expect(offenders).toEqual([]);
    // A source that loads no parser and exits 2 itself must still print the one text form.
    for (const f of SOURCES.filter((f) => /process\.exit\(2\)/.test(readFileSync(join(ROOT, f), "utf8"))))
      expect(readFileSync(join(ROOT, f), "utf8"), f).toContain("usageErrorText(");
  });

  test("one clock port: no source in src/ but src/protocol/clock.ts declares an interface named …Clock", () => {
    const declares = (source: string) => /\binterface\s+\w*Clock\b/.test(source);
    expect(declares("export interface WgClock {")).toBe(true);
    expect(declares("interface Clock extends X {")).toBe(true);
    expect(declares("export interface ClockSkew {")).toBe(false);
    const offenders = files("src").filter(
      (f) => f !== "src/protocol/clock.ts" && declares(readFileSync(join(ROOT, f), "utf8")),
    );
    expect(offenders, 'use Clock from src/protocol/clock.ts (docs/architecture.md, "Ports")').toEqual([]);
  });

  test("one clock port: no option, parameter or port member is a bare clock reading (take a Clock instead)", () => {
    // A property or parameter named like a clock reading and typed as a function, or an interface
    // member `now()`/`nowMs()`: the shapes issue 19 item 3 moved onto Clock. A `nowMs: number`
    // value (pure domain functions) and Clock's own wallMs/monoMs members are not readings passed in.
    const bare = (source: string) =>
      /\b(now|nowMs|wallMs|monoMs|time|clock)\??\s*:\s*\(\)\s*=>\s*(number|Date)\b/.test(source) ||
      /^\s*(readonly\s+)?(now|nowMs)\??\(\)\s*:\s*number\s*;/m.test(source);
    expect(bare("  nowMs: () => number,")).toBe(true);
    expect(bare("  now?: () => Date;")).toBe(true);
    expect(bare("  private readonly nowMs: () => number = () => performance.now(),")).toBe(true);
    expect(bare("  nowMs(): number;")).toBe(true);
    expect(bare("  nowMs: number,")).toBe(false);
    expect(bare("  clock: Clock;")).toBe(false);
    expect(bare("  private get now(): number {")).toBe(false);
    const offenders = SOURCES.filter((f) => f !== "src/protocol/clock.ts" && bare(readFileSync(join(ROOT, f), "utf8")));
    expect(offenders, 'take a Clock from src/protocol/clock.ts (docs/architecture.md, "Ports")').toEqual([]);
  });

  test("src/wireguard reads time and randomness only through its ports (ports.ts)", () => {
    for (const f of SOURCES.filter((f) => f.startsWith("src/wireguard/") && !f.endsWith("/ports.ts"))) {
      expect(readFileSync(join(ROOT, f), "utf8"), f).not.toMatch(
        /Date\.now\(|performance\.now\(|Math\.random\(|randomFillSync|randomBytes\(|getRandomValues/,
      );
    }
  });

  test("src/domain touches no clock, randomness or Bun API, and imports only protocol and @noble/hashes", () => {
    for (const f of files("src/domain").filter((f) => !f.endsWith(".test.ts"))) {
      const src = readFileSync(join(ROOT, f), "utf8");
      for (const i of specifiers(src))
        expect(
          i.startsWith("./") || i.startsWith("../protocol/") || i.startsWith("@noble/hashes"),
          `${f} imports ${i}`,
        ).toBe(true);
      expect(src, f).not.toMatch(/\bBun\.|Date\.now\(|Math\.random\(/);
    }
  });

  test("one typed way to store rows: scheduler objects write no SQL text (drizzle tables and prepared queries only)", () => {
    // A raw statement is `storage.sql.exec(...)` (or `sql.exec` on a local); drizzle's query builder is the one way.
    const raw = (source: string) => /\.sql\.exec\b|\bsql\.exec\(|\.exec<[^>]*>\(\s*"/.test(source);
    expect(raw('this.state.storage.sql.exec("DELETE FROM t")')).toBe(true);
    expect(raw('sql.exec("SELECT 1")')).toBe(true);
    expect(raw("db.select().from(t).where(eq(t.obj, obj)).prepare()")).toBe(false);
    const offenders = files("src/scheduler/objects").filter((f) => raw(readFileSync(join(ROOT, f), "utf8")));
    expect(offenders, "declare the table in an *Schema.ts and query it through drizzle").toEqual([]);
  });

  test("scheduler objects never touch Bun, the clock, HTTP or the file system directly", () => {
    for (const f of files("src/scheduler/objects")) {
      const src = readFileSync(join(ROOT, f), "utf8");
      expect(src, f).not.toMatch(/\bBun\.|Date\.now\(|Math\.random\(|\bfetch\(|node:fs/);
      for (const i of specifiers(src)) expect(i === "elysia", `${f} imports ${i}`).toBe(false);
    }
  });

  test("objects are typed: no message body is cast, no untyped service bag, no closure call between objects, no host-specific import", () => {
    const scheduler = files("src/scheduler").filter((f) => !f.endsWith(".test.ts"));
    for (const f of scheduler) {
      const src = readFileSync(join(ROOT, f), "utf8");
      // Message receivers (objects and the runtime); HTTP bodies are checked by the request guard's schemas.
      if (f.startsWith("src/scheduler/objects/") || f.startsWith("src/scheduler/runtime/"))
        expect(src, f).not.toMatch(/\bbody as\b/);
      expect(src, f).not.toMatch(/services\s*:\s*unknown/);
      expect(src, f).not.toMatch(/\bctx\.call\(|\bruntime\.call\(/);
    }
    for (const f of files("src/scheduler/objects")) {
      for (const i of specifiers(readFileSync(join(ROOT, f), "utf8")))
        expect(i.includes("/embedded/") || i === "bun:sqlite", `${f} imports ${i}`).toBe(false);
    }
  });

  test("the embedded migrations lists (scheduler, agent store) are drizzle-kit's journals, in order", () => {
    for (const dir of ["src/scheduler/migrations", "src/agent/migrations"]) {
      const journal = JSON.parse(readFileSync(join(ROOT, dir, "meta/_journal.json"), "utf8")) as {
        entries: { idx: number; tag: string }[];
      };
      const index = readFileSync(join(ROOT, dir, "index.ts"), "utf8");
      const listed = [...index.matchAll(/tag: "([^"]+)"/g)].map((m) => m[1]);
      expect(listed, dir).toEqual(journal.entries.sort((a, b) => a.idx - b.idx).map((e) => e.tag));
      for (const tag of listed) expect(index).toContain(`./${tag}.sql`);
    }
  });

  test("no comment in src/, native/ or bin/ names a file outside the repository", () => {
    const outside =
      /\.\.\/shared\/|shared\/design\/|shared\/spec\/|\b(?:ARCHITECTURE|STYLE|RUNTIME-NOTES|BUN-NOTES|NET-NOTES)\.md\b/;
    const offenders = SOURCES.filter((f) => outside.test(readFileSync(join(ROOT, f), "utf8")));
    expect(offenders).toEqual([]);
  });
});
