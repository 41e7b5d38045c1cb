/**
 * The kernel package memo (kernelPackageMemo.ts): apt is asked once while
 * its state is unchanged, again after any state file changed, and a
 * missing or malformed memo only means asking again. The apt state here is
 * a temporary directory standing in for /var/lib/apt/lists and
 * /var/lib/dpkg/status; `resolve` stands in for `apt-cache depends`.
 */
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  APT_STATE_ITEMS,
  KERNEL_PACKAGE_MEMO_FILE,
  aptStateKey,
  aptStatePaths,
  memoizedKernelPackage,
} from "./kernelPackageMemo.ts";

let dir: string;
let state: string[];
let calls: number;
let answer: string;
const resolve = async () => {
  calls++;
  return answer;
};

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "bb-kernel-memo-"));
  mkdirSync(join(dir, "lists"));
  mkdirSync(join(dir, "memo"));
  writeFileSync(join(dir, "lists", "bookworm_Packages"), "Package: linux-image-amd64\n");
  writeFileSync(join(dir, "status"), "Package: base-files\n");
  state = [join(dir, "lists"), join(dir, "status"), join(dir, "absent")];
  calls = 0;
  answer = "linux-image-6.1.0-57-amd64";
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe("memoizedKernelPackage", () => {
  test("asks apt once while the apt state is unchanged", async () => {
    expect(await memoizedKernelPackage(join(dir, "memo"), resolve, state)).toBe("linux-image-6.1.0-57-amd64");
    expect(await memoizedKernelPackage(join(dir, "memo"), resolve, state)).toBe("linux-image-6.1.0-57-amd64");
    expect(calls).toBe(1);
  });

  test("stale memo after apt-get update: a changed package list is resolved again", async () => {
    await memoizedKernelPackage(join(dir, "memo"), resolve, state);
    answer = "linux-image-6.1.0-58-amd64";
    writeFileSync(join(dir, "lists", "bookworm_Packages"), "Package: linux-image-amd64\nVersion: 2\n");
    expect(await memoizedKernelPackage(join(dir, "memo"), resolve, state)).toBe("linux-image-6.1.0-58-amd64");
    expect(calls).toBe(2);
  });

  test("stale memo: a new list file, a touched status file or a path appearing each resolve again", async () => {
    await memoizedKernelPackage(join(dir, "memo"), resolve, state);
    writeFileSync(join(dir, "lists", "security_Packages"), "x");
    await memoizedKernelPackage(join(dir, "memo"), resolve, state);
    utimesSync(join(dir, "status"), new Date(1_000_000), new Date(1_000_000));
    await memoizedKernelPackage(join(dir, "memo"), resolve, state);
    writeFileSync(join(dir, "absent"), "");
    await memoizedKernelPackage(join(dir, "memo"), resolve, state);
    expect(calls).toBe(4);
  });

  test("a malformed, foreign or unwritable memo only means asking apt again", async () => {
    writeFileSync(join(dir, "memo", KERNEL_PACKAGE_MEMO_FILE), "{not json");
    expect(await memoizedKernelPackage(join(dir, "memo"), resolve, state)).toBe(answer);
    writeFileSync(
      join(dir, "memo", KERNEL_PACKAGE_MEMO_FILE),
      JSON.stringify({ aptState: await aptStateKey(state), package: 7 }),
    );
    expect(await memoizedKernelPackage(join(dir, "memo"), resolve, state)).toBe(answer);
    expect(await memoizedKernelPackage(join(dir, "no-such-dir"), resolve, state)).toBe(answer);
    expect(calls).toBe(3);
  });

  test("an error of apt passes through and nothing is remembered", async () => {
    const failing = async () => {
      calls++;
      throw new Error("apt-cache exited 100");
    };
    await expect(memoizedKernelPackage(join(dir, "memo"), failing, state)).rejects.toThrow("apt-cache exited 100");
    expect(await memoizedKernelPackage(join(dir, "memo"), resolve, state)).toBe(answer);
    expect(calls).toBe(2);
  });
});

describe("aptStatePaths (kind: a host path written into the binary instead of asked of apt)", () => {
  test("asks apt-config for every state item and gets one path each, without a trailing slash", async () => {
    const paths = await aptStatePaths();
    expect(paths).toHaveLength(APT_STATE_ITEMS.length);
    for (const p of paths) expect(p).toMatch(/^\/.*[^/]$/);
    expect(paths.some((p) => p.endsWith("/status"))).toBe(true);
  });
  test("no paths (apt-config missing or failing) means no memo: apt is asked every time", async () => {
    expect(await aptStateKey([])).toBe("");
    expect(await memoizedKernelPackage(join(dir, "memo"), resolve, [])).toBe(answer);
    expect(await memoizedKernelPackage(join(dir, "memo"), resolve, [])).toBe(answer);
    expect(calls).toBe(2);
  });
});
