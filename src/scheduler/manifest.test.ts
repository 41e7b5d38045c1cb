import { afterEach, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  ensureDevManifest,
  loadManifest,
  publishDevClientConfig,
  tokenDigest,
  type DeploymentManifest,
} from "./manifest.ts";

const IMAGE = `sha256:${"cd".repeat(32)}`;
const dirs: string[] = [];
const scratch = () => {
  const d = mkdtempSync(join(tmpdir(), "bb-manifest-"));
  dirs.push(d);
  return d;
};
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function manifest(principals: DeploymentManifest["principals"]): DeploymentManifest {
  return {
    version: 1,
    region: "local",
    principals,
    workloadClasses: { small: { cpuMillis: 1000, memoryMiB: 256, ephemeralDiskMiB: 1024, imageDigest: IMAGE } },
    limits: { maxConcurrentAllocationsPerController: 4, maxRegisteredHosts: 4 },
    hostEnrollment: { autoActivate: true },
  };
}

function errorOf(fn: () => unknown): string {
  try {
    fn();
    return "no error";
  } catch (e) {
    return (e as Error).message;
  }
}

describe("shadowed principals and unnamed manifest errors", () => {
  test("two principals with the same token digest are refused, naming the file and both principals", () => {
    const path = join(scratch(), "m.json");
    const d = tokenDigest("same-token");
    writeFileSync(
      path,
      JSON.stringify(
        manifest([
          { id: "controller:a", role: "controller", tokenSha256: d },
          { id: "operator:b", role: "operator", tokenSha256: d },
        ]),
      ),
    );
    const msg = errorOf(() => loadManifest(path));
    expect(msg).toContain(path);
    expect(msg).toContain("controller:a");
    expect(msg).toContain("operator:b");
  });

  test("a repeated principal id is refused", () => {
    const path = join(scratch(), "m.json");
    writeFileSync(
      path,
      JSON.stringify(
        manifest([
          { id: "c", role: "controller", tokenSha256: tokenDigest("a") },
          { id: "c", role: "operator", tokenSha256: tokenDigest("b") },
        ]),
      ),
    );
    expect(errorOf(() => loadManifest(path))).toContain("repeats the principal id c");
  });

  test("JSON syntax errors, unreadable files and schema errors all name the file", () => {
    const dir = scratch();
    const broken = join(dir, "broken.json");
    writeFileSync(broken, '{"version": 1,');
    expect(errorOf(() => loadManifest(broken))).toContain(`manifest ${broken} is not valid JSON`);
    expect(errorOf(() => loadManifest(join(dir, "missing.json")))).toContain(join(dir, "missing.json"));
    const badClass = join(dir, "class.json");
    writeFileSync(
      badClass,
      JSON.stringify({ ...manifest([]), workloadClasses: { "bad key!": manifest([]).workloadClasses["small"] } }),
    );
    expect(errorOf(() => loadManifest(badClass))).toContain(badClass);
  });
});

describe("templated workload classes (issue 21, ADR 0182)", () => {
  test("a class may start from a template, but not be template and suspendable at once", () => {
    const path = join(scratch(), "m.json");
    const small = manifest([]).workloadClasses["small"]!;
    writeFileSync(path, JSON.stringify({ ...manifest([]), workloadClasses: { warm: { ...small, template: true } } }));
    expect(loadManifest(path).workloadClasses["warm"]?.template).toBe(true);
    writeFileSync(
      path,
      JSON.stringify({ ...manifest([]), workloadClasses: { both: { ...small, template: true, suspendable: true } } }),
    );
    const msg = errorOf(() => loadManifest(path));
    expect(msg).toContain(path);
    expect(msg).toContain("/workloadClasses/both is both template and suspendable");
  });
});

/** A fresh dev manifest in its own directory, edited by hand (maxRegisteredHosts set to `hosts`). */
function editedDevManifest(hosts: number): { dir: string; manifestPath: string; clientConfigPath: string } {
  const dir = scratch();
  const p = ensureDevManifest(dir, IMAGE);
  const edited = JSON.parse(readFileSync(p.manifestPath, "utf8")) as DeploymentManifest;
  edited.limits.maxRegisteredHosts = hosts;
  writeFileSync(p.manifestPath, JSON.stringify(edited));
  return { dir, ...p };
}

describe("dev mode overwriting an edited manifest", () => {
  test("a manifest without its client.json is never replaced; the error says client.json is missing", () => {
    const first = editedDevManifest(7);
    const dir = first.dir;
    const before = readFileSync(first.manifestPath, "utf8");
    unlinkSync(first.clientConfigPath);
    const msg = errorOf(() => ensureDevManifest(dir, IMAGE));
    expect(msg).toContain(`${first.clientConfigPath} is missing`);
    expect(readFileSync(first.manifestPath, "utf8")).toBe(before);
    expect(existsSync(first.clientConfigPath)).toBe(false);
  });

  test("a client.json without its manifest is refused too, and an intact pair keeps every edit", () => {
    const p = editedDevManifest(9);
    const dir = p.dir;
    ensureDevManifest(dir, `sha256:${"ef".repeat(32)}`);
    const after = loadManifest(p.manifestPath);
    expect(after.limits.maxRegisteredHosts).toBe(9);
    expect(after.workloadClasses["ci-small"]!.imageDigest).toBe(`sha256:${"ef".repeat(32)}`);
    unlinkSync(p.manifestPath);
    expect(errorOf(() => ensureDevManifest(dir, IMAGE))).toContain(`${p.manifestPath} is missing`);
    expect(existsSync(p.manifestPath)).toBe(false);
  });
});

describe("dev client config", () => {
  test("carries the manifest's public connection verification keys (bb proxy needs them) and never the signing key", () => {
    const dir = scratch();
    const p = ensureDevManifest(dir, IMAGE);
    const copy = join(dir, "copy", "client.json");
    publishDevClientConfig(p, "http://127.0.0.1:1", [copy]);
    const keys = loadManifest(p.manifestPath).connections!.verificationKeys;
    expect(Object.keys(keys).length).toBeGreaterThan(0);
    for (const file of [p.clientConfigPath, copy]) {
      const cfg = JSON.parse(readFileSync(file, "utf8")) as Record<string, unknown>;
      expect(cfg["connectionKeys"]).toEqual(keys);
      expect(readFileSync(file, "utf8")).not.toContain("PRIVATE");
    }
  });
});
