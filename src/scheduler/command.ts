/**
 * `bb scheduler serve`: runs the control plane. Translates flags to
 * serveScheduler. With `--dev` (or no `--manifest`), writes (or reuses) a
 * development manifest with fresh random tokens in the data dir, and a
 * client config the CLI finds; it starts even before the dev image is
 * built (the classes then name a placeholder image until the next start
 * after `bb image dev-build`).
 */
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { consola } from "consola";
import { imageDigest, type ImageManifest } from "../protocol/image.ts";
import { command } from "../command/define.ts";
import { runCli, UsageError } from "../command/run.ts";

/** The image digest development classes name while no dev image is built: no host has it, so placements on it fail until the image exists. */
export const DEV_IMAGE_PLACEHOLDER = `sha256:${"0".repeat(64)}`;

/** Splits `host:port` (IPv6 in brackets). Throws UsageError naming `flag` when malformed. */
export function parseListen(addr: string, flag = "--listen"): { hostname: string; port: number } {
  const m = /^(?:\[([0-9a-fA-F:]+)\]|([^:]+)):(\d{1,5})$/.exec(addr);
  const port = Number(m?.[3]);
  if (!m || port > 65535) throw new UsageError(`${flag} must be HOST:PORT, got ${JSON.stringify(addr)}`);
  return { hostname: m[1] ?? m[2]!, port };
}

/** Digest of the dev image in `dir`, or null when it is not built. */
export function devImageDigest(dir: string): string | null {
  const path = join(dir, "manifest.json");
  if (!existsSync(path)) return null;
  return imageDigest(JSON.parse(readFileSync(path, "utf8")) as ImageManifest);
}

/**
 * The digest the development classes should name: the built dev image's,
 * else the one an existing development manifest already names, else
 * DEV_IMAGE_PLACEHOLDER. `built` says whether an image was found.
 */
export function devClassDigest(imageDir: string, dataDir: string): { digest: string; built: boolean } {
  const built = devImageDigest(imageDir);
  if (built) return { digest: built, built: true };
  const manifest = join(dataDir, "manifest.json");
  if (existsSync(manifest)) {
    const classes =
      (JSON.parse(readFileSync(manifest, "utf8")) as { workloadClasses?: Record<string, { imageDigest?: string }> })
        .workloadClasses ?? {};
    const named = Object.values(classes)[0]?.imageDigest;
    if (named) return { digest: named, built: false };
  }
  return { digest: DEV_IMAGE_PLACEHOLDER, built: false };
}

const serve = command({
  meta: { name: "serve", description: "Run the scheduler (control plane)" },
  args: {
    manifest: {
      type: "string",
      valueHint: "FILE",
      description: "Deployment manifest (docs/manifest.md); without it, --dev is implied",
    },
    dev: {
      type: "boolean",
      default: false,
      description: "Development mode: write a development manifest and tokens into the data dir, and the client config",
    },
    listen: {
      type: "string",
      valueHint: "HOST:PORT",
      description: "Address to listen on (port 0: any free port)",
      default: "127.0.0.1:7380",
    },
    "health-listen": {
      type: "string",
      valueHint: "HOST:PORT",
      description:
        "Also serve GET /healthz here, from a thread of its own: it answers while the main port is busy and says SCHEDULER_STALLED when the main loop stalls (default: off)",
    },
    "data-dir": { type: "string", valueHint: "DIR", description: "State directory", default: ".bb/scheduler" },
    "dev-image": {
      type: "string",
      valueHint: "DIR",
      description: "Dev image directory the development classes boot (--dev)",
      default: ".bb/images/dev",
    },
    "client-config": {
      type: "string",
      valueHint: "FILE",
      description: "Where --dev copies the client config (URL + tokens, mode 0600)",
      default: ".bb/client.json",
    },
    "log-format": {
      type: "string",
      valueHint: "FORMAT",
      description:
        "json or text: log lines as JSON objects or plain text (default: text on a terminal, else JSON; or BB_LOG_FORMAT). How much: BB_LOG_LEVEL 0 errors … 4 debug",
    },
  },
  examples: [
    "bb scheduler serve --dev",
    "bb scheduler serve --dev --listen 127.0.0.1:7380 --data-dir .bb/scheduler",
    "bb scheduler serve --dev --health-listen 127.0.0.1:7381",
    "bb scheduler serve --manifest /etc/beachball/manifest.json --listen 0.0.0.0:7380 --data-dir /var/lib/beachball-scheduler",
  ],
  run: ({ args }) =>
    runCli(async () => {
      if (args.dev && args.manifest) throw new UsageError("give --dev or --manifest, not both");
      const { hostname, port } = parseListen(args.listen);
      const healthListen = args["health-listen"] ? parseListen(args["health-listen"], "--health-listen") : undefined;
      const { ensureDevManifest, publishDevClientConfig } = await import("./manifest.ts");
      const { serveScheduler } = await import("./serve.ts");
      const { createLogger, routeConsola } = await import("../command/log.ts");
      const { parseLogFormat, parseLogLevel } = await import("../command/logOptions.ts");
      const level = parseLogLevel(process.env["BB_LOG_LEVEL"]);
      const log = createLogger(
        { format: parseLogFormat(args["log-format"] ?? process.env["BB_LOG_FORMAT"], !!process.stderr.isTTY), level },
        { role: "scheduler" },
      );
      routeConsola(consola, log, level);
      const dataDir = resolve(args["data-dir"]);
      let manifestPath = args.manifest ? resolve(args.manifest) : "";
      let dev: ReturnType<typeof ensureDevManifest> | null = null;
      if (!manifestPath) {
        const image = devClassDigest(resolve(args["dev-image"]), dataDir);
        if (!image.built)
          log.warn(
            "no dev image: the development classes name an image a host cannot boot until you run `bb image dev-build` and restart the scheduler",
            {
              devImageDir: resolve(args["dev-image"]),
              image: image.digest === DEV_IMAGE_PLACEHOLDER ? "placeholder" : image.digest,
            },
          );
        dev = ensureDevManifest(dataDir, image.digest);
        manifestPath = dev.manifestPath;
      }
      const s = serveScheduler({
        dataDir,
        manifestPath,
        hostname,
        port,
        log,
        ...(healthListen ? { healthListen } : {}),
      });
      if (s.health)
        await s.health.catch(async (e: Error) => {
          await s.stop();
          throw e;
        });
      if (dev) {
        const clientConfig = resolve(args["client-config"]);
        publishDevClientConfig(dev, s.url, [clientConfig]);
        log.info("development manifest written; client config with tokens (mode 0600) published", {
          manifest: dev.manifestPath,
          clientConfig,
        });
      }
      await new Promise<void>((done) => {
        const stop = () => void s.stop().then(done);
        process.once("SIGINT", stop);
        process.once("SIGTERM", stop);
      });
    }),
});

/** The `bb scheduler` command group. */
export const schedulerCommand = command({
  meta: { name: "scheduler", description: "The control plane" },
  examples: ["bb scheduler serve --dev"],
  subCommands: { serve },
});
