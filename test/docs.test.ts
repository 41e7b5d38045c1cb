/**
 * The repository's documentation stays true: the example manifest under
 * deploy/ loads with the scheduler's own loader, the example relay config
 * with the relay's, every relative link in docs/ and README.md points at a
 * file that exists, every `bb …` command line they show names commands and
 * flags that exist (test/support/docCommands.ts), and every metric the
 * scheduler and the relay register, every alert they raise and every
 * reason a host is unschedulable is in docs/operate.md.
 */
import { describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { loadRelayConfig } from "../src/relay/config.ts";
import { loadManifest } from "../src/scheduler/manifest.ts";
import { bbCommand } from "../bin/root.ts";
import { checkCommandLine, docCommandLines } from "./support/docCommands.ts";
import { walkCommands } from "../src/command/define.ts";
import { newRelayCounters, prometheusText } from "../src/relay/counters.ts";
import { processMetricsText } from "../src/scheduler/processMetrics.ts";

const ROOT = resolve(import.meta.dir, "..");

function markdownFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((d) =>
    d.isDirectory() ? markdownFiles(join(dir, d.name)) : d.name.endsWith(".md") ? [join(dir, d.name)] : [],
  );
}

/** The documents whose command lines are checked: README.md, docs/ (ADRs included) and deploy/README.md. */
function documents(): string[] {
  return ["README.md", "deploy/README.md", ...markdownFiles("docs")];
}

const NPM_SCRIPTS = (
  JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { scripts: Record<string, string> }
).scripts;

/** Every stale command line of `files` (an unknown subcommand or flag), as `file:line: bb …: problem`. */
async function staleCommandLines(files: { name: string; text: string }[]): Promise<string[]> {
  const out: string[] = [];
  for (const f of files) {
    for (const line of docCommandLines(f.name, f.text, NPM_SCRIPTS)) {
      for (const p of await checkCommandLine(bbCommand, line.words, line.commentFlags))
        out.push(`${line.where}: bb ${line.words.join(" ")}: ${p}`);
    }
  }
  return out;
}

/** Non-test TypeScript files under `dir`. */
function sourceFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((d) =>
    d.isDirectory()
      ? sourceFiles(join(dir, d.name))
      : d.name.endsWith(".ts") && !d.name.endsWith(".test.ts")
        ? [join(dir, d.name)]
        : [],
  );
}

/**
 * The metric names the code registers: every whole `bb_…` string literal
 * in a source file under src/ that speaks of metrics (the scheduler's
 * `metrics.inc`/`observe` and gauges; a name may sit in a variable first),
 * the relay's exposition (`bb_relay_…`, built from a prefix), and the
 * process metrics prom-client renders. nftables names (`bb_conn`) live in
 * files that never mention metrics.
 */
async function registeredMetrics(): Promise<Set<string>> {
  const names = new Set<string>();
  for (const f of sourceFiles("src")) {
    const text = readFileSync(join(ROOT, f), "utf8");
    if (!/metric/i.test(text)) continue;
    for (const m of text.matchAll(/(["'`])(bb_[a-z0-9_]+)\1/g)) names.add(m[2]!);
  }
  const relay = newRelayCounters();
  relay.closes = { RELAY_BUSY: 1 };
  const exposition = `${prometheusText(relay)}\n${await processMetricsText()}`;
  for (const m of exposition.matchAll(/^# TYPE (\S+) /gm)) names.add(m[1]!);
  return names;
}

/** The metric names docs/operate.md lists in its metric tables (first column; `process_*` stands for a family). */
function documentedMetrics(): string[] {
  const out: string[] = [];
  let inTable = false;
  for (const line of readFileSync(join(ROOT, "docs/operate.md"), "utf8").split("\n")) {
    if (/^\|\s*metric\s*\|/.test(line)) inTable = true;
    else if (!line.startsWith("|")) inTable = false;
    else if (inTable) for (const m of (line.split("|")[1] ?? "").matchAll(/`([a-z_*]+)`/g)) out.push(m[1]!);
  }
  return out;
}

describe("documentation", () => {
  test("deploy/manifest.example.json is a valid manifest", () => {
    const m = loadManifest(join(ROOT, "deploy/manifest.example.json"));
    expect(Object.keys(m.workloadClasses).length).toBeGreaterThan(0);
    expect(m.principals.map((p) => p.role).sort()).toEqual(["controller", "operator"]);
  });

  test("deploy/relay.example.json is a valid relay config that serves TLS on 443 and health on 9443", () => {
    const c = loadRelayConfig(join(ROOT, "deploy/relay.example.json"));
    expect(c.listen.map((l) => l.port)).toEqual([443]);
    expect(c.health.port).toBe(9443);
    expect(c.tls).not.toBeNull();
    expect(c.trustedKeys.size).toBe(1);
  });

  test("every relative link in docs/ and README.md resolves", () => {
    const broken: string[] = [];
    for (const f of ["README.md", ...markdownFiles("docs")]) {
      // Inline code is not a link (an API pattern such as `[a-z](?:…)` only looks like one).
      for (const m of readFileSync(join(ROOT, f), "utf8")
        .replace(/`[^`\n]*`/g, "")
        .matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)) {
        const target = m[1]!;
        if (/^[a-z]+:/.test(target)) continue;
        if (!existsSync(resolve(ROOT, dirname(f), target))) broken.push(`${f} -> ${target}`);
      }
    }
    expect(broken).toEqual([]);
  });

  test("every anchor a link in docs/ and README.md names is a heading of its target (GitHub's slugs)", () => {
    const slugs = (file: string) => {
      const out = new Set<string>();
      const text = readFileSync(join(ROOT, file), "utf8").replace(/^```[\s\S]*?^```/gm, "");
      for (const m of text.matchAll(/^#{1,6}\s+(.+?)\s*#*$/gm))
        out.add(
          m[1]!
            .replace(/`/g, "")
            .toLowerCase()
            .replace(/[^\p{L}\p{N}\s_-]/gu, "")
            .replace(/\s/g, "-"),
        );
      for (const m of text.matchAll(/<a (?:id|name)="([^"]+)"/g)) out.add(m[1]!);
      return out;
    };
    const broken: string[] = [];
    for (const f of ["README.md", ...markdownFiles("docs")]) {
      for (const m of readFileSync(join(ROOT, f), "utf8")
        .replace(/`[^`\n]*`/g, "")
        .matchAll(/\]\(([^)#\s]*)#([^)\s]+)\)/g)) {
        const target = m[1] ? join(dirname(f), m[1]) : f;
        if (/^[a-z]+:/.test(m[1]!) || !target.endsWith(".md")) continue;
        if (!slugs(target).has(m[2]!)) broken.push(`${f} -> ${m[1]}#${m[2]}`);
      }
    }
    expect(broken).toEqual([]);
  });

  test("the docs the packages ship link only to docs they ship (packaging/build.sh installs them flat in /usr/share/doc/beachball)", () => {
    const line = readFileSync(join(ROOT, "packaging/build.sh"), "utf8")
      .split("\n")
      .find((l) => /install -m 0644 docs\/\S+\.md/.test(l))!;
    const shipped = [...line.matchAll(/docs\/(\S+\.md)/g)].map((m) => m[1]!);
    expect(shipped).toContain("install.md");
    const outside: string[] = [];
    for (const f of shipped) {
      for (const m of readFileSync(join(ROOT, "docs", f), "utf8")
        .replace(/`[^`\n]*`/g, "")
        .matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)) {
        if (/^[a-z]+:/.test(m[1]!)) continue;
        if (!shipped.includes(m[1]!)) outside.push(`docs/${f} -> ${m[1]}`);
      }
    }
    expect(outside).toEqual([]);
  });

  test("the README's Layout names every directory of src/ and every top-level directory", () => {
    const readme = readFileSync(join(ROOT, "README.md"), "utf8");
    const layout = /^## Layout\n+```\n([\s\S]*?)```/m.exec(readme)![1]!;
    const named = new Set([...layout.matchAll(/^(\S+)\//gm)].map((m) => m[1]!));
    // Tracked directories only: a checkout's own .bb/, dist/ or node_modules/ are not the layout.
    const tracked = Bun.spawnSync(["git", "ls-files"], { cwd: ROOT }).stdout.toString().split("\n");
    const dirs = new Set(
      tracked.flatMap((f) => {
        const parts = f.split("/");
        if (parts.length < 2 || parts[0]!.startsWith(".")) return [];
        return parts[0] === "src" ? (parts.length > 2 ? [`src/${parts[1]}`] : []) : [parts[0]!];
      }),
    );
    expect(dirs.size).toBeGreaterThan(10);
    const missing = [...dirs].filter((d) => d !== "src" && !named.has(d)).sort();
    expect(missing).toEqual([]);
  });

  test("the ADR index lists every record", () => {
    const index = readFileSync(join(ROOT, "docs/adr/README.md"), "utf8");
    const records = readdirSync(join(ROOT, "docs/adr")).filter((n) => /^\d{4}-.*\.md$/.test(n));
    for (const r of records) expect(index, `docs/adr/README.md does not list ${r}`).toContain(`(${r})`);
  });

  test("every bb command line in README.md, docs/ and deploy/README.md names a command and flags that exist", async () => {
    const files = documents().map((name) => ({ name, text: readFileSync(join(ROOT, name), "utf8") }));
    const lines = files.flatMap((f) => docCommandLines(f.name, f.text, NPM_SCRIPTS));
    expect(lines.length).toBeGreaterThan(100);
    expect(await staleCommandLines(files)).toEqual([]);
  });

  test("every ExecStart of the systemd units under deploy/systemd runs a bb command and flags that exist", async () => {
    const units = readdirSync(join(ROOT, "deploy/systemd")).filter((f) => f.endsWith(".service"));
    const files = units.map((u) => {
      const execs = readFileSync(join(ROOT, "deploy/systemd", u), "utf8")
        .split("\n")
        .filter((l) => l.startsWith("ExecStart=/usr/bin/bb "));
      return {
        name: `deploy/systemd/${u}`,
        text: ["```", ...execs.map((l) => l.replace("ExecStart=/usr/bin/bb ", "bb ")), "```"].join("\n"),
      };
    });
    expect(files.filter((f) => f.text.includes("bb ")).length).toBe(3);
    expect(await staleCommandLines(files)).toEqual([]);
  });

  test("the man page (packaging/bb.1) lists every command, and every command it lists exists", async () => {
    const lines = readFileSync(join(ROOT, "packaging/bb.1"), "utf8")
      .split("\n")
      .filter((l) => l.startsWith(".B bb "))
      .map((l) =>
        l
          .slice(3)
          .replace(/\\f[IRB]/g, "")
          .replace(/\\-/g, "-")
          .replace(/\s*\|\s*/g, "|")
          .trim(),
      );
    expect(await staleCommandLines([{ name: "packaging/bb.1", text: ["```", ...lines, "```"].join("\n") }])).toEqual(
      [],
    );
    const leaves = (await walkCommands(bbCommand)).filter(
      (n) => n.path.length > 1 && n.subCommandNames.length === 0 && !n.meta.hidden,
    );
    const unlisted = leaves
      .map((n) => n.path)
      .filter((path) => {
        const rest = path.slice(2).join(" ");
        return !lines.some(
          (l) =>
            (l === `bb ${path[1]}` || l.startsWith(`bb ${path[1]} `)) &&
            (rest === "" || new RegExp(`(?:^bb ${path[1]} |\\|)${rest}(?:$|\\|)`).test(l)),
        );
      })
      .map((p) => p.join(" "));
    expect(unlisted).toEqual([]);
  });

  test("the command line check catches a stale subcommand, flag and comment flag (planted)", async () => {
    const planted = [
      "```sh",
      "bb host list --json            # fine",
      "bb host lsit",
      "bb allocation create --class ci-small --wiat",
      "bb agent join --scheduler URL \\",
      "  --token T --image-directory /srv   # --max-placements N",
      "bb allocation events ID --follow   # --resume N continues",
      "```",
      "Run `bb agent join|runn` or `ip netns exec x bb agent run --data-dirr D`.",
    ].join("\n");
    expect(await staleCommandLines([{ name: "planted.md", text: planted }])).toEqual([
      'planted.md:3: bb host lsit: `bb host` has no subcommand "lsit"',
      "planted.md:4: bb allocation create --class ci-small --wiat: `bb allocation create` has no flag --wiat",
      "planted.md:5: bb agent join --scheduler URL --token T --image-directory /srv: `bb agent join` has no flag --image-directory",
      "planted.md:7: bb allocation events ID --follow: `bb allocation events` has no flag --resume (named in the comment)",
      'planted.md:9: bb agent join|runn: `bb agent` has no subcommand "runn"',
      "planted.md:9: bb agent run --data-dirr D: `bb agent run` has no flag --data-dirr",
    ]);
  });

  test("every metric the scheduler and the relay register is in docs/operate.md, and every bb_ metric there is registered", async () => {
    const registered = await registeredMetrics();
    expect(registered.has("bb_connection_paths_total")).toBe(true);
    expect(registered.has("bb_relay_sessions")).toBe(true);
    const documented = documentedMetrics();
    const covers = (name: string) =>
      documented.some((d) => (d.endsWith("*") ? name.startsWith(d.slice(0, -1)) : d === name));
    expect([...registered].filter((n) => !covers(n)).sort()).toEqual([]);
    expect(documented.filter((d) => d.startsWith("bb_") && !registered.has(d))).toEqual([]);
  });

  test("every alert the code raises and every unschedulable reason is in docs/operate.md's tables", () => {
    const operate = readFileSync(join(ROOT, "docs/operate.md"), "utf8");
    const rows = operate.split("\n").filter((l) => l.startsWith("| `"));
    const alerts = new Set<string>();
    for (const f of sourceFiles("src")) {
      const text = readFileSync(join(ROOT, f), "utf8");
      // An alert is posted as `{ kind: "alert", …, type, …, reason }` or returned in a reconcile pass's `alerts: [{ type, reason }]`.
      for (const m of text.matchAll(/kind: "alert"|alerts: (?:first \? )?\[/g)) {
        const near = text.slice(m.index!, m.index! + 300);
        const type = /type: "([a-z_]+\.[a-z_]+)"/.exec(near)?.[1];
        const reason = /reason: "([A-Z_]+)"/.exec(near)?.[1];
        if (type && reason) alerts.add(`${type} ${reason}`);
      }
    }
    expect(alerts.has("host.disabled HOST_FENCED")).toBe(true);
    expect(alerts.has("allocation.no_eligible_host NO_CAPACITY")).toBe(true);
    const undocumented = [...alerts].filter((a) => {
      const [type, reason] = a.split(" ");
      return !rows.some((r) => r.startsWith(`| \`${type}\` | \`${reason}\` |`));
    });
    expect(undocumented).toEqual([]);
    const union = /export type UnschedulableReason =([^;]+);/.exec(
      readFileSync(join(ROOT, "src/domain/hostConditions.ts"), "utf8"),
    )![1]!;
    const reasons = [...union.matchAll(/"([A-Z_]+)"/g)].map((m) => m[1]!);
    expect(reasons.length).toBeGreaterThanOrEqual(8);
    expect(reasons.filter((r) => !rows.some((row) => row.startsWith(`| \`${r}\` |`)))).toEqual([]);
  });
});
