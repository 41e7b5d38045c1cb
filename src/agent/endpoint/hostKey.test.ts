import { afterAll, expect, test } from "bun:test";
import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { systemRandom } from "../../wireguard/index.ts";
import { hostKeyPath, loadOrCreateHostKey } from "./hostKey.ts";

const dir = mkdtempSync(join(tmpdir(), "bb-hostkey-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

test("the host key is generated once, 0600 in a 0700 directory, and read back unchanged", () => {
  const a = loadOrCreateHostKey(dir, systemRandom);
  const path = hostKeyPath(dir);
  expect(path).toBe(join(dir, "wireguard", "host.key"));
  expect(statSync(path).mode & 0o777).toBe(0o600);
  expect(statSync(join(dir, "wireguard")).mode & 0o777).toBe(0o700);
  expect(readFileSync(path, "utf8")).toBe(Buffer.from(a.privateKey).toString("base64") + "\n");
  const b = loadOrCreateHostKey(dir, systemRandom);
  expect(Buffer.from(b.publicKey).equals(Buffer.from(a.publicKey))).toBe(true);
});

test("a key file others can read, or that holds no key, is refused without printing it", () => {
  const path = hostKeyPath(dir);
  const secret = readFileSync(path, "utf8").trim();
  chmodSync(path, 0o644);
  expect(() => loadOrCreateHostKey(dir, systemRandom)).toThrow(/mode 644; the WireGuard host key must be 0600/);
  try {
    loadOrCreateHostKey(dir, systemRandom);
  } catch (e) {
    expect((e as Error).message).not.toContain(secret);
  }
  writeFileSync(path, "not a key\n", { mode: 0o600 });
  chmodSync(path, 0o600);
  expect(() => loadOrCreateHostKey(dir, systemRandom)).toThrow(/does not hold a base64 32-byte key/);
});
