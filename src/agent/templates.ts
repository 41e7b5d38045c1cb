/**
 * The host's templates (issue 21, "Templates (warm starts)"; ADR 0182): for
 * each image and VM size a workload class asks for, a snapshot of the image
 * booted to GuestReady with no payload, with the disk it booted on, kept in
 * `<dataDir>/templates/<key>/` beside the image cache. A create of a
 * templated class restores it (placementOps.ts startWarm) instead of
 * booting.
 *
 * Owns: the key (what a snapshot is tied to: the image digest, the driver,
 * vCPUs, MiB, the scratch size, the root format and the network the guest
 * booted with), publishing a finished build with an atomic rename, checking a
 * template's files against the sizes and SHA-256 digests recorded when it
 * was made (every file present must be recorded and every recorded file
 * present; hashed once per process and file version, as the image cache
 * checks an artifact; a file that changed is hashed again), discarding one
 * that fails or that a driver refused, eviction of the least recently used past a byte bound, and sweeping
 * builds an earlier agent process left half done.
 * Must never: hand out a template whose files were not checked against their
 * digests, publish a build that is not complete, or keep the nonce the
 * template's guest booted with (none of its files holds it but the memory).
 */
import { createHash, randomBytes } from "node:crypto";
import {
  chmodSync,
  createReadStream,
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import type { VmSnapshot } from "./vmm/driver.ts";
import { type Clock, systemClock } from "../protocol/clock.ts";

/** Name of a template's description file in its directory. */
export const TEMPLATE_FILE = "template.json";
/** Directory of the driver's snapshot files inside a template's directory. */
export const TEMPLATE_SNAPSHOT_DIR = "snapshot";
/** Prefix of a build's directory under the templates directory (swept at start). */
export const TEMPLATE_BUILD_PREFIX = ".b-";
/** Default bound on the bytes all templates of a host take on disk before the least recently used go (8 GiB). */
export const DEFAULT_TEMPLATE_CACHE_MAX_BYTES = 8 * 2 ** 30;

/**
 * What one template is made for: a restore fits only a VM for which every
 * field is the same. `networkArgs` are the network kernel arguments its guest
 * booted with (an uplink policy change makes a new template); `ipv6`:
 * whether it booted with a private IPv6 address.
 */
export interface TemplateKey {
  imageDigest: string;
  driver: string;
  vcpus: number;
  memoryMiB: number;
  ephemeralDiskMiB: number;
  rootfsFormat: "ext4" | "squashfs";
  networkArgs: string[];
  ipv6: boolean;
}

/** The key's hex name (SHA-256 of its fields in a fixed order): the template's directory name. Pure. */
export function templateKeyHex(k: TemplateKey): string {
  const fixed = [
    k.imageDigest,
    k.driver,
    k.vcpus,
    k.memoryMiB,
    k.ephemeralDiskMiB,
    k.rootfsFormat,
    k.networkArgs,
    k.ipv6,
  ];
  return createHash("sha256").update(JSON.stringify(fixed)).digest("hex");
}

/** template.json. */
interface TemplateRecord {
  key: TemplateKey;
  /** The driver's description of the snapshot (its dir is the template's `snapshot/`). */
  snapshot: Omit<VmSnapshot, "dir">;
  /** File name of the disk the template's guest booted on (its writable disk: `rootfs.ext4` or `scratch.ext4`). */
  disk: string;
  /** Every file but template.json, by path relative to the template's directory: size and SHA-256 (hex). */
  files: Record<string, { sizeBytes: number; sha256: string }>;
  createdAtMs: number;
}

/** A checked template, ready to restore from. */
export interface StoredTemplate {
  keyHex: string;
  dir: string;
  /** The snapshot (dir: the template's `snapshot/`). */
  snapshot: VmSnapshot;
  /** The disk the template's guest booted on; a restore clones it as its own. */
  diskPath: string;
  /** Its file name (the name a placement gives its clone). */
  diskName: string;
}

/** What find answers. */
export type TemplateLookup =
  | { kind: "found"; template: StoredTemplate }
  | { kind: "missing" }
  /** The stored template failed its check (and was discarded): `why` says what. */
  | { kind: "mismatch"; why: string };

/** A build under way: its private directory, published or abandoned exactly once. */
export interface TemplateBuild {
  key: TemplateKey;
  dir: string;
  /** Removes the build's directory and lets another build of the key begin. */
  abandon(): void;
}

async function sha256File(path: string): Promise<string> {
  const h = createHash("sha256");
  for await (const chunk of createReadStream(path)) h.update(chunk as Buffer);
  return h.digest("hex");
}

/**
 * What says a file is unchanged since it was hashed: device, inode, size and
 * mtime. Not ctime: every restore's hard link to the file changes it, and the
 * files are read-only in a directory only root reaches.
 */
function stamp(path: string): string {
  const s = statSync(path);
  return `${s.dev}:${s.ino}:${s.size}:${s.mtimeMs}`;
}

/** Every regular file under `dir`, as paths relative to it (one level of subdirectories). */
function filesUnder(dir: string, prefix = ""): string[] {
  const out: string[] = [];
  for (const name of readdirSync(join(dir, prefix))) {
    const rel = prefix ? `${prefix}/${name}` : name;
    const st = lstatSync(join(dir, rel));
    if (st.isDirectory() && !prefix) out.push(...filesUnder(dir, rel));
    else if (st.isFile()) out.push(rel);
  }
  return out;
}

/** See the module header. */
export class TemplateStore {
  /** Files hashed so far by this store (publish and find): what a check cost, for tests and logs. */
  filesHashed = 0;
  /** keyHex → the stamps of its files when they were last checked (this process). */
  private readonly checked = new Map<string, string>();
  /** keyHex → the name of its build directory, while one runs. */
  private readonly building = new Map<string, string>();

  /** `root`: `<dataDir>/templates` (made, mode 0700). `clock`: its wall time stamps creation and last use. */
  constructor(
    readonly root: string,
    private readonly clock: Clock = systemClock,
  ) {
    mkdirSync(root, { recursive: true, mode: 0o700 });
  }

  /**
   * Removes what earlier agent processes left: build directories (a build
   * never survives its process) and template directories without a
   * template.json. Returns the names removed.
   */
  sweep(): string[] {
    const gone: string[] = [];
    for (const name of readdirSync(this.root)) {
      const dir = join(this.root, name);
      if (
        ![...this.building.values()].includes(name) &&
        (name.startsWith(TEMPLATE_BUILD_PREFIX) || !existsSync(join(dir, TEMPLATE_FILE)))
      ) {
        rmSync(dir, { recursive: true, force: true });
        gone.push(name);
      }
    }
    return gone;
  }

  /**
   * The template for `key`, its files checked against their recorded sizes
   * and digests (each file once per process while it stays unchanged). A
   * template that fails is removed (so the next start makes a new one) and
   * answered as a mismatch. Touches its last use.
   */
  async find(key: TemplateKey): Promise<TemplateLookup> {
    const keyHex = templateKeyHex(key);
    const dir = join(this.root, keyHex);
    let rec: TemplateRecord;
    try {
      rec = JSON.parse(readFileSync(join(dir, TEMPLATE_FILE), "utf8")) as TemplateRecord;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return { kind: "missing" };
      return this.discard(keyHex, `unreadable ${TEMPLATE_FILE}: ${(e as Error).message}`);
    }
    if (templateKeyHex(rec.key) !== keyHex) return this.discard(keyHex, `${TEMPLATE_FILE} is for another key`);
    const names = Object.keys(rec.files).sort();
    if (!names.includes(rec.disk)) return this.discard(keyHex, `its disk ${rec.disk} is not among its files`);
    try {
      // Every file a restore links must have been hashed: none more, none fewer than the record lists.
      const present = filesUnder(dir)
        .filter((n) => n !== TEMPLATE_FILE)
        .sort();
      if (present.join("\0") !== names.join("\0"))
        return this.discard(
          keyHex,
          `its files (${present.join(", ")}) are not the recorded ones (${names.join(", ")})`,
        );
      const now = names.map((n) => stamp(join(dir, n))).join("|");
      if (this.checked.get(keyHex) !== now) {
        for (const n of names) {
          const want = rec.files[n]!;
          const path = join(dir, n);
          if (statSync(path).size !== want.sizeBytes)
            return this.discard(keyHex, `${n} is ${statSync(path).size} bytes, not ${want.sizeBytes}`);
          this.filesHashed++;
          if ((await sha256File(path)) !== want.sha256) return this.discard(keyHex, `${n} does not match its digest`);
        }
        this.checked.set(keyHex, now);
      }
      const t = this.clock.wallMs() / 1000;
      utimesSync(join(dir, TEMPLATE_FILE), t, t); // last use, for eviction
    } catch (e) {
      return this.discard(keyHex, `cannot check its files: ${(e as Error).message}`);
    }
    return {
      kind: "found",
      template: {
        keyHex,
        dir,
        snapshot: { ...rec.snapshot, dir: join(dir, TEMPLATE_SNAPSHOT_DIR) },
        diskPath: join(dir, rec.disk),
        diskName: rec.disk,
      },
    };
  }

  /** Starts a build of `key` in a fresh private directory; null while another build of the key runs in this process. */
  beginBuild(key: TemplateKey): TemplateBuild | null {
    const keyHex = templateKeyHex(key);
    if (this.building.has(keyHex)) return null;
    // Short: the build holds the VM's control socket, whose path a Unix socket bounds to 107 bytes.
    const name = `${TEMPLATE_BUILD_PREFIX}${randomBytes(6).toString("hex")}`;
    const dir = join(this.root, name);
    mkdirSync(dir, { mode: 0o700 });
    this.building.set(keyHex, name);
    let done = false;
    return {
      key,
      dir,
      abandon: () => {
        if (done) return;
        done = true;
        rmSync(dir, { recursive: true, force: true });
        if (this.building.get(keyHex) === name) this.building.delete(keyHex);
      },
    };
  }

  /**
   * Publishes `build`: keeps only its snapshot directory (the driver's
   * `snapshot`, which must be `<build>/snapshot`) and its disk `diskName`,
   * records their sizes and digests in template.json, makes them read-only
   * and renames the build into place, replacing any older template of the
   * key. Returns the template. Throws (the build abandoned) when a file step
   * fails.
   */
  async publish(build: TemplateBuild, snapshot: VmSnapshot, diskName: string): Promise<StoredTemplate> {
    const keyHex = templateKeyHex(build.key);
    try {
      if (snapshot.dir !== join(build.dir, TEMPLATE_SNAPSHOT_DIR))
        throw new Error(`the snapshot is in ${snapshot.dir}, not the build's ${TEMPLATE_SNAPSHOT_DIR}/`);
      for (const n of readdirSync(build.dir))
        if (n !== TEMPLATE_SNAPSHOT_DIR && n !== diskName) rmSync(join(build.dir, n), { recursive: true, force: true });
      const files: TemplateRecord["files"] = {};
      for (const rel of filesUnder(build.dir)) {
        const path = join(build.dir, rel);
        chmodSync(path, 0o444); // read-only; readable by a jailed VMM that reads its links (the directory is root's, 0700)
        this.filesHashed++;
        files[rel] = { sizeBytes: statSync(path).size, sha256: await sha256File(path) };
      }
      if (!files[diskName]) throw new Error(`the build has no disk ${diskName}`);
      const { dir: _, ...described } = snapshot;
      const rec: TemplateRecord = {
        key: build.key,
        snapshot: described,
        disk: diskName,
        files,
        createdAtMs: this.clock.wallMs(),
      };
      writeFileSync(join(build.dir, TEMPLATE_FILE), JSON.stringify(rec) + "\n", { mode: 0o600 });
      const dir = join(this.root, keyHex);
      rmSync(dir, { recursive: true, force: true });
      renameSync(build.dir, dir);
      this.building.delete(keyHex);
      this.checked.set(
        keyHex,
        Object.keys(files)
          .sort()
          .map((n) => stamp(join(dir, n)))
          .join("|"),
      );
      return {
        keyHex,
        dir,
        snapshot: { ...snapshot, dir: join(dir, TEMPLATE_SNAPSHOT_DIR) },
        diskPath: join(dir, diskName),
        diskName,
      };
    } catch (e) {
      build.abandon();
      throw e;
    }
  }

  /**
   * Removes the least recently used templates until all of them take at
   * most `maxBytes`. A placement restored from one holds hard links (or
   * copies) of its files, so removing a template never breaks a running VM.
   * Returns the key names removed and the bytes (allocated blocks) the rest take.
   */
  evict(maxBytes: number): { evicted: string[]; bytes: number } {
    const all = this.published().sort((a, b) => a.lastUseMs - b.lastUseMs);
    let total = all.reduce((n, t) => n + t.bytes, 0);
    const gone: string[] = [];
    for (const t of all) {
      if (total <= maxBytes) break;
      rmSync(join(this.root, t.keyHex), { recursive: true, force: true });
      this.checked.delete(t.keyHex);
      total -= t.bytes;
      gone.push(t.keyHex);
    }
    return { evicted: gone, bytes: total };
  }

  private published(): { keyHex: string; bytes: number; lastUseMs: number }[] {
    const out: { keyHex: string; bytes: number; lastUseMs: number }[] = [];
    for (const keyHex of readdirSync(this.root)) {
      const dir = join(this.root, keyHex);
      const rec = statSync(join(dir, TEMPLATE_FILE), { throwIfNoEntry: false });
      if (!/^[0-9a-f]{64}$/.test(keyHex) || !rec) continue;
      let bytes = 0;
      for (const rel of filesUnder(dir)) bytes += statSync(join(dir, rel)).blocks * 512;
      out.push({ keyHex, bytes, lastUseMs: rec.mtimeMs });
    }
    return out;
  }

  /**
   * Removes the template named `keyHex` (a driver refused it as incompatible:
   * a VMM upgrade, another CPU), so the next start makes a new one. A
   * placement restored from it keeps its links. No-op when it is gone.
   */
  remove(keyHex: string): void {
    if (!/^[0-9a-f]{64}$/.test(keyHex)) return;
    rmSync(join(this.root, keyHex), { recursive: true, force: true });
    this.checked.delete(keyHex);
  }

  private discard(keyHex: string, why: string): TemplateLookup {
    this.remove(keyHex);
    return { kind: "mismatch", why };
  }
}
