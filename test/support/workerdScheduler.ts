/**
 * Test support: the scheduler on workerd (the real binary from the
 * `workerd` npm package, the bundle from deploy/workerd/build.ts) on a
 * loopback port, with a fresh storage directory and the development
 * manifest. The process is ended by its PID in `stop()`, and the directory
 * removed.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { Subprocess } from "bun";
import { buildWorkerd } from "../../deploy/workerd/build.ts";
import { DEV_CONNECTION_KEY_FILE, ensureDevManifest } from "../../src/scheduler/manifest.ts";
import { FAKE_IMAGE_DIGEST } from "./scheduler.ts";

const WORKERD = resolve(import.meta.dir, "../../node_modules/.bin/workerd");

/** A running workerd scheduler. */
export interface WorkerdScheduler {
  url: string;
  port: number;
  /** The development manifest's directory (client.json with the tokens). */
  manifestDir: string;
  tokens: { token: string; operatorToken: string };
  stop(): Promise<void>;
}

/**
 * Builds the bundle, writes a development manifest (`edit` may change it,
 * e.g. add a principal) and starts workerd; answers once /healthz does.
 */
export async function startWorkerdScheduler(
  edit: (manifest: Record<string, unknown>) => void = () => {},
): Promise<WorkerdScheduler> {
  const dir = mkdtempSync(join(tmpdir(), "bb-workerd-"));
  mkdirSync(join(dir, "storage"));
  const config = await buildWorkerd(join(dir, "build"));
  const manifestDir = join(dir, "manifest");
  const manifest = JSON.parse(
    readFileSync(ensureDevManifest(manifestDir, FAKE_IMAGE_DIGEST).manifestPath, "utf8"),
  ) as Record<string, unknown>;
  edit(manifest);
  const signingSeed = readFileSync(join(manifestDir, DEV_CONNECTION_KEY_FILE), "utf8").trim();
  const tokens = JSON.parse(readFileSync(join(manifestDir, "client.json"), "utf8")) as {
    token: string;
    operatorToken: string;
  };
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = 21_000 + Math.floor(Math.random() * 20_000);
    const url = `http://127.0.0.1:${port}`;
    const proc: Subprocess = Bun.spawn(
      [
        WORKERD,
        "serve",
        config,
        "--directory-path",
        `storage=${join(dir, "storage")}`,
        "--socket-addr",
        `http=127.0.0.1:${port}`,
      ],
      {
        env: {
          ...process.env,
          BB_MANIFEST: JSON.stringify(manifest),
          BB_PUBLIC_URL: url,
          BB_CONNECTION_SIGNING_KEY: signingSeed,
        },
        stdout: "ignore",
        stderr: "inherit",
      },
    );
    for (let i = 0; i < 200 && proc.exitCode === null; i++) {
      if (
        await fetch(`${url}/healthz`)
          .then((r) => r.ok)
          .catch(() => false)
      ) {
        return {
          url,
          port,
          manifestDir,
          tokens,
          async stop() {
            proc.kill("SIGTERM");
            await proc.exited;
            rmSync(dir, { recursive: true, force: true });
          },
        };
      }
      await Bun.sleep(50);
    }
    proc.kill("SIGKILL");
    await proc.exited;
  }
  rmSync(dir, { recursive: true, force: true });
  throw new Error("workerd did not answer /healthz");
}
