/**
 * The repository's documentation stays true: the example manifest under
 * deploy/ loads with the scheduler's own loader, the example relay config
 * with the relay's, and every relative link in
 * docs/ and README.md points at a file that exists.
 */
import { describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { loadRelayConfig } from "../src/relay/config.ts";
import { loadManifest } from "../src/scheduler/manifest.ts";

const ROOT = resolve(import.meta.dir, "..");

function markdownFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((d) =>
    d.isDirectory() ? markdownFiles(join(dir, d.name)) : d.name.endsWith(".md") ? [join(dir, d.name)] : [],
  );
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
      for (const m of readFileSync(join(ROOT, f), "utf8").replace(/`[^`\n]*`/g, "").matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)) {
        const target = m[1]!;
        if (/^[a-z]+:/.test(target)) continue;
        if (!existsSync(resolve(ROOT, dirname(f), target))) broken.push(`${f} -> ${target}`);
      }
    }
    expect(broken).toEqual([]);
  });

  test("the ADR index lists every record", () => {
    const index = readFileSync(join(ROOT, "docs/adr/README.md"), "utf8");
    const records = readdirSync(join(ROOT, "docs/adr")).filter((n) => /^\d{4}-.*\.md$/.test(n));
    for (const r of records) expect(index, `docs/adr/README.md does not list ${r}`).toContain(`(${r})`);
  });
});
