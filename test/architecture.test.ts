/**
 * Visible dependencies (STYLE.md habit 9): src/domain imports nothing but
 * src/domain, src/protocol and pure hashing; scheduler objects touch no Bun
 * API, HTTP or file system directly; native/ and src/netstack are role-free
 * libraries (ARCHITECTURE.md "Private networking") that import no role.
 */
import { describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((d) => (d.isDirectory() ? files(join(dir, d.name)) : d.name.endsWith(".ts") ? [join(dir, d.name)] : []));
}
const imports = (f: string) => [...readFileSync(f, "utf8").matchAll(/^import .* from "([^"]+)";$/gm)].map((m) => m[1]!);

describe("dependency rules", () => {
  test("src/domain depends only on domain, protocol and @noble/hashes", () => {
    for (const f of files("src/domain").filter((f) => !f.endsWith(".test.ts"))) {
      for (const i of imports(f)) expect(i.startsWith("./") || i.startsWith("../protocol/") || i.startsWith("@noble/hashes"), `${f} imports ${i}`).toBe(true);
      expect(readFileSync(f, "utf8")).not.toMatch(/\bBun\.|Date\.now\(|Math\.random\(/);
    }
  });
  test("scheduler objects never touch Bun, the clock, HTTP or the file system directly", () => {
    for (const f of files("src/scheduler/objects")) {
      const src = readFileSync(f, "utf8");
      expect(src, f).not.toMatch(/\bBun\.|Date\.now\(|Math\.random\(|\bfetch\(|node:fs/);
      for (const i of imports(f)) expect(i === "elysia", `${f} imports ${i}`).toBe(false);
    }
  });
  test("native/ imports only native/, node: and bun: modules", () => {
    for (const f of files("native")) {
      for (const i of imports(f)) expect(i.startsWith("./") || i.startsWith("../") || i.startsWith("node:") || i.startsWith("bun:"), `${f} imports ${i}`).toBe(true);
      for (const i of imports(f).filter((i) => i.startsWith("../"))) expect(join(f, "..", i).startsWith("native/"), `${f} imports ${i}`).toBe(true);
    }
  });
  test("src/netstack imports only itself, native/, node: and bun: (never a role)", () => {
    for (const f of existsSync("src/netstack") ? files("src/netstack") : []) {
      for (const i of imports(f)) {
        const inside = i.startsWith("./") || i.startsWith("../") ? join(f, "..", i) : null;
        const ok = inside ? inside.startsWith("src/netstack/") || inside.startsWith("native/") : i.startsWith("node:") || i.startsWith("bun:");
        expect(ok, `${f} imports ${i}`).toBe(true);
      }
    }
  });
});
