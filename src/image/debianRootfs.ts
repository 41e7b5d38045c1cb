/**
 * A Debian root file system as a tarball, made from Debian's packages with
 * `mmdebstrap --format=tar` and cached by recipe, so the reference image,
 * the OCI test images and the benchmarks share one build.
 *
 * Implements the "built from Debian's packages" part of spec "Images" (the
 * reference image). The cache key is the SHA-256 of the recipe (suite,
 * variant, packages), so a changed recipe builds anew; a finished tarball
 * appears by rename, never half-written. Must never: take files from
 * anywhere but Debian's archive (through the host's apt sources).
 */
import { mkdir, rename, rm, stat } from "node:fs/promises";
import { createHash } from "node:crypto";
import { join } from "node:path";
import { runChecked } from "./devKernel.ts";

/** What to build. */
export interface DebianRecipe {
  /** Debian suite, e.g. `bookworm`. */
  suite: string;
  /** mmdebstrap variant, e.g. `minbase`. */
  variant: string;
  /** Extra packages (`--include`). */
  packages: readonly string[];
}

/**
 * The recipe the reference image and the image tests use: Debian 12 minbase
 * with systemd as init, iproute2 for the network, and a C toolchain for the
 * CI-like job.
 */
export const REFERENCE_RECIPE: DebianRecipe = {
  suite: "bookworm",
  variant: "minbase",
  packages: ["systemd-sysv", "iproute2", "gcc", "libc6-dev"],
};

/**
 * The recipe of the private-networking end-to-end test's image: Debian 12
 * minbase with OpenSSH's server (and iproute2 to show the guest's
 * addresses). No init system: the image's entrypoint starts `sshd -D -e`.
 */
export const SSHD_RECIPE: DebianRecipe = {
  suite: "bookworm",
  variant: "minbase",
  packages: ["openssh-server", "iproute2"],
};

/** The cache file name of `recipe`: `debian-<suite>-<12 hex of its hash>.tar`. Pure. */
export function debianTarName(recipe: DebianRecipe): string {
  const h = createHash("sha256")
    .update(JSON.stringify([recipe.suite, recipe.variant, [...recipe.packages].sort()]))
    .digest("hex")
    .slice(0, 12);
  return `debian-${recipe.suite}-${h}.tar`;
}

/**
 * Returns the path of the recipe's rootfs tarball under `<cacheDir>/debian/`,
 * running mmdebstrap (network to the host's Debian mirror, a few minutes)
 * when it is not cached yet. Throws with mmdebstrap's output when it fails.
 */
export async function ensureDebianRootfsTar(
  cacheDir: string,
  recipe: DebianRecipe = REFERENCE_RECIPE,
  log: (m: string) => void = () => {},
): Promise<string> {
  const dir = join(cacheDir, "debian");
  const out = join(dir, debianTarName(recipe));
  if ((await stat(out).catch(() => null))?.isFile()) return out;
  await mkdir(dir, { recursive: true });
  const tmp = `${out}.building-${process.pid}`;
  await rm(tmp, { force: true });
  log(`mmdebstrap ${recipe.suite} (${recipe.variant} + ${recipe.packages.join(", ")})`);
  try {
    await runChecked([
      "mmdebstrap",
      "--quiet",
      `--variant=${recipe.variant}`,
      "--dpkgopt=force-unsafe-io",
      `--include=${recipe.packages.join(",")}`,
      "--format=tar",
      recipe.suite,
      tmp,
    ]);
    await rename(tmp, out);
  } catch (e) {
    await rm(tmp, { force: true });
    throw e;
  }
  return out;
}
