/**
 * The host's template store (templates.ts; issue 21, ADR 0182) on real
 * files: a publish keeps only the snapshot and the disk, read-only, under
 * the key's name; find checks them against their digests and discards a
 * template whose file changed (size or content); one build per key at a
 * time; sweep removes what an earlier process left; eviction goes least
 * recently used first; a restore's hard link does not cost a new hash, and
 * a file the record does not list is refused.
 */
import { afterAll, expect, test } from "bun:test";
import {
  chmodSync,
  linkSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TEMPLATE_FILE, TEMPLATE_SNAPSHOT_DIR, type TemplateKey, TemplateStore, templateKeyHex } from "./templates.ts";

const work = mkdtempSync(join(tmpdir(), "bb-templates-test-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const key = (memoryMiB = 256): TemplateKey => ({
  imageDigest: `sha256:${"c".repeat(64)}`,
  driver: "qemu-microvm",
  vcpus: 1,
  memoryMiB,
  ephemeralDiskMiB: 1024,
  rootfsFormat: "squashfs",
  networkArgs: ["beachball.ipv4=10.0.0.2/30"],
  ipv6: true,
});

/** A build as the agent leaves it after the suspend: the snapshot, the disk and the files publish drops. */
async function built(store: TemplateStore, k: TemplateKey, ram = "RAM".repeat(1000)) {
  const b = store.beginBuild(k)!;
  mkdirSync(join(b.dir, TEMPLATE_SNAPSHOT_DIR));
  writeFileSync(join(b.dir, TEMPLATE_SNAPSHOT_DIR, "guest.ram"), ram);
  writeFileSync(join(b.dir, TEMPLATE_SNAPSHOT_DIR, "device.state"), "state");
  writeFileSync(join(b.dir, "scratch.ext4"), "disk");
  writeFileSync(join(b.dir, "ctl.sock"), "");
  mkdirSync(join(b.dir, "logs"));
  writeFileSync(join(b.dir, "logs", "console.log"), "boot");
  const snapshot = {
    dir: join(b.dir, TEMPLATE_SNAPSHOT_DIR),
    driver: k.driver,
    compat: { memory_mib: k.memoryMiB },
    bytes: 1,
  };
  return store.publish(b, snapshot, "scratch.ext4");
}

test("a published template holds only its snapshot and disk, read-only, and is found under its key", async () => {
  const store = new TemplateStore(join(work, "a"));
  const t = await built(store, key());
  expect(t.keyHex).toBe(templateKeyHex(key()));
  expect(readdirSync(store.root)).toEqual([t.keyHex]);
  expect(readdirSync(t.dir).sort()).toEqual(["scratch.ext4", TEMPLATE_FILE, TEMPLATE_SNAPSHOT_DIR].sort());
  expect(statSync(join(t.dir, "scratch.ext4")).mode & 0o777).toBe(0o444);
  const found = await store.find(key());
  expect(found.kind).toBe("found");
  if (found.kind !== "found") return;
  expect(found.template.snapshot).toMatchObject({
    dir: join(t.dir, TEMPLATE_SNAPSHOT_DIR),
    compat: { memory_mib: 256 },
  });
  expect(found.template.diskPath).toBe(join(t.dir, "scratch.ext4"));
  expect((await store.find(key(512))).kind).toBe("missing");
  // A fresh process (a new store over the same files) checks the digests again and finds it whole.
  expect((await new TemplateStore(store.root).find(key())).kind).toBe("found");
});

test("a template whose file changed in size or content is discarded as a mismatch", async () => {
  for (const change of ["RAM!", "RAM".repeat(999) + "MAR"]) {
    const store = new TemplateStore(join(work, `b-${change.length}`));
    const t = await built(store, key());
    const ram = join(t.dir, TEMPLATE_SNAPSHOT_DIR, "guest.ram");
    chmodSync(ram, 0o600);
    writeFileSync(ram, change);
    const found = await store.find(key());
    expect(found).toMatchObject({ kind: "mismatch" });
    if (found.kind === "mismatch") expect(found.why).toContain("guest.ram");
    expect(readdirSync(store.root)).toEqual([]);
    expect((await store.find(key())).kind).toBe("missing");
  }
});

test("one build per key at a time; sweep removes unfinished builds and templates without a description", async () => {
  const store = new TemplateStore(join(work, "c"));
  const b = store.beginBuild(key())!;
  expect(store.beginBuild(key())).toBeNull();
  expect(store.beginBuild(key(512))).not.toBeNull();
  expect(store.sweep()).toEqual([]); // this process's builds stay
  b.abandon();
  expect(store.beginBuild(key())).not.toBeNull();
  mkdirSync(join(store.root, "f".repeat(64)));
  const later = new TemplateStore(store.root); // the next agent process
  const left = readdirSync(store.root).sort();
  expect(left).toHaveLength(3); // two builds and a directory without template.json
  expect(later.sweep().sort()).toEqual(left);
  expect(readdirSync(store.root)).toEqual([]);
});

test("eviction removes the least recently used templates until the rest fit the bound", async () => {
  const store = new TemplateStore(join(work, "d"));
  const big = "x".repeat(64 * 1024);
  const old = await built(store, key(256), big);
  const used = await built(store, key(512), big);
  const t0 = Date.now() / 1000;
  utimesSync(join(old.dir, TEMPLATE_FILE), t0 - 100, t0 - 100);
  utimesSync(join(used.dir, TEMPLATE_FILE), t0, t0);
  const total = store.evict(Number.POSITIVE_INFINITY).bytes;
  expect(total).toBeGreaterThan(2 * big.length);
  expect(store.evict(total).evicted).toEqual([]);
  const left = store.evict(total - 1);
  expect(left.evicted).toEqual([old.keyHex]);
  expect(left.bytes).toBeLessThan(total);
  expect(readdirSync(store.root)).toEqual([used.keyHex]);
  expect(store.evict(0)).toEqual({ evicted: [used.keyHex], bytes: 0 });
});

test("a restore's hard link to a template's file does not make the next find hash it again; a file the record does not list is a mismatch", async () => {
  const store = new TemplateStore(join(work, "e"));
  const t = await built(store, key());
  const later = new TemplateStore(store.root); // a new process hashes once
  expect((await later.find(key())).kind).toBe("found");
  const hashed = later.filesHashed;
  expect(hashed).toBe(3);
  linkSync(join(t.dir, TEMPLATE_SNAPSHOT_DIR, "guest.ram"), join(work, "e-link")); // what a restore does
  expect((await later.find(key())).kind).toBe("found");
  expect(later.filesHashed).toBe(hashed);
  // A file nobody hashed would be linked into every restore: refused.
  chmodSync(join(t.dir, TEMPLATE_SNAPSHOT_DIR), 0o700);
  writeFileSync(join(t.dir, TEMPLATE_SNAPSHOT_DIR, "extra.state"), "unverified");
  const found = await later.find(key());
  expect(found).toMatchObject({ kind: "mismatch" });
  if (found.kind === "mismatch") expect(found.why).toContain("extra.state");
  expect(readdirSync(store.root)).toEqual([]);
});
