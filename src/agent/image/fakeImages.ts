/**
 * FakeImages: a test double of the image port (imagePort.ts) for unit tests
 * and the seeded simulation. Every digest resolves to one fixed manifest
 * (kernel, initrd, ext4 root) after a delay on the given timers, unless the
 * behaviour says the image fails verification; a root-disk clone creates an
 * empty file.
 * Must never: be wired into the daemon.
 */
import { SUPPORTED_ARCHITECTURE } from "../../protocol/platform.ts";
import { writeFileSync } from "node:fs";
import type { ImageManifest } from "../../protocol/image.ts";
import { imageError } from "../../image/errors.ts";
import type { Timers } from "../ports.ts";
import type { ImagePort, ResolvedImageDir } from "./imagePort.ts";

/** How fake images behave. */
export interface FakeImageBehaviour {
  /** Delay of one resolve, ms, or null to fail it with IMAGE_DIGEST_MISMATCH. */
  resolveMs(digest: string): number | null;
}

const artifact = (path: string) => ({ path, sizeBytes: 1024, sha256: "0".repeat(64) });

/** The manifest every fake image has. */
export const FAKE_MANIFEST: ImageManifest = {
  schemaVersion: 1,
  architecture: SUPPORTED_ARCHITECTURE,
  kernel: artifact("vmlinux"),
  rootfs: artifact("rootfs.ext4"),
  initrd: artifact("initrd.cpio"),
  kernelArgs: [],
  agentProtocolRange: "1",
  guestBootstrapVersion: "fake",
  createdAt: "2026-01-01T00:00:00.000Z",
  signature: "",
};

/** See the module header (a named test double). */
export class FakeImages implements ImagePort {
  /** Digests resolved successfully at least once. */
  readonly cached = new Set<string>();

  /** `dir`: the directory reported as the image's (nothing is read from it). */
  constructor(
    private readonly timers: Timers,
    private readonly dir: string,
    private readonly behaviour: FakeImageBehaviour = { resolveMs: () => 0 },
  ) {}

  async resolve(digest: string): Promise<ResolvedImageDir> {
    const ms = this.behaviour.resolveMs(digest);
    if (ms === null) throw imageError("IMAGE_DIGEST_MISMATCH", `fake image ${digest} failed verification`);
    if (ms > 0) await this.timers.sleep(ms);
    this.cached.add(digest);
    return { dir: this.dir, manifest: FAKE_MANIFEST };
  }

  async cachedDigests(): Promise<string[]> {
    return [...this.cached].sort();
  }

  async cloneRootDisk(_src: string, dst: string): Promise<void> {
    writeFileSync(dst, "", { mode: 0o600 });
  }

  async linkSharedRoot(_src: string, dst: string): Promise<void> {
    writeFileSync(dst, "", { mode: 0o444 });
  }

  async makeScratchDisk(path: string): Promise<void> {
    writeFileSync(path, "", { mode: 0o600 });
  }

  async maintain(): Promise<void> {}
}
