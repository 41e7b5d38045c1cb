/**
 * `bb scheduler serve`: runs the control plane. Translates flags to
 * serveScheduler; with no --manifest, writes (or reuses) a development
 * manifest with fresh random tokens in the data dir and prints where it is.
 */
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { defineCommand } from "citty";
import { consola } from "consola";
import { imageDigest, type ImageManifest } from "../protocol/image.ts";
import { runCli } from "../command/run.ts";

/** Splits `host:port` (IPv6 in brackets). Throws with exit code 2 when malformed. */
export function parseListen(addr: string): { hostname: string; port: number } {
  const m = /^(?:\[([0-9a-fA-F:]+)\]|([^:]+)):(\d{1,5})$/.exec(addr);
  const port = Number(m?.[3]);
  if (!m || port > 65535) throw Object.assign(new Error(`--listen must be HOST:PORT, got ${JSON.stringify(addr)}`), { exitCode: 2 });
  return { hostname: m[1] ?? m[2]!, port };
}

/** Digest of the dev image in `dir`. Throws with a fix when it is missing. */
export function devImageDigest(dir: string): string {
  const path = join(dir, "manifest.json");
  if (!existsSync(path)) throw new Error(`no image manifest at ${path}: run \`bb image dev-build\` first, or pass --manifest`);
  return imageDigest(JSON.parse(readFileSync(path, "utf8")) as ImageManifest);
}

const serve = defineCommand({
  meta: { name: "serve", description: "Run the scheduler (control plane)" },
  args: {
    "data-dir": { type: "string", description: "State directory", default: ".bb/scheduler" },
    manifest: { type: "string", description: "Deployment manifest (default: write a development manifest into the data dir)" },
    listen: { type: "string", description: "HOST:PORT", default: "127.0.0.1:7380" },
    "dev-image": { type: "string", description: "Dev image directory the development manifest's classes boot", default: ".bb/images/dev" },
    "client-config": { type: "string", description: "Where to copy the dev client config (URL + tokens, mode 0600)", default: ".bb/client.json" },
    "log-format": { type: "string", description: "Log lines as json or text (default: text on a terminal, else json; or BB_LOG_FORMAT). Level: BB_LOG_LEVEL 0 errors … 4 debug" },
  },
  run: ({ args }) =>
    runCli(async () => {
      const { ensureDevManifest, publishDevClientConfig } = await import("./manifest.ts");
      const { serveScheduler } = await import("./serve.ts");
      const { createLogger, parseLogFormat, parseLogLevel, routeConsola } = await import("../command/log.ts");
      const level = parseLogLevel(process.env["BB_LOG_LEVEL"]);
      const log = createLogger({ format: parseLogFormat(args["log-format"] ?? process.env["BB_LOG_FORMAT"], !!process.stderr.isTTY), level }, { role: "scheduler" });
      routeConsola(consola, log, level);
      const dataDir = resolve(args["data-dir"]);
      const { hostname, port } = parseListen(args.listen);
      let manifestPath = args.manifest ? resolve(args.manifest) : "";
      let dev: ReturnType<typeof ensureDevManifest> | null = null;
      if (!manifestPath) {
        dev = ensureDevManifest(dataDir, devImageDigest(resolve(args["dev-image"])));
        manifestPath = dev.manifestPath;
      }
      const s = serveScheduler({ dataDir, manifestPath, hostname, port, log });
      if (dev) {
        const clientConfig = resolve(args["client-config"]);
        publishDevClientConfig(dev, s.url, [clientConfig]);
        log.info("development manifest", { manifest: dev.manifestPath, clientConfig });
      }
      await new Promise<void>((done) => {
        const stop = () => void s.stop().then(done);
        process.once("SIGINT", stop);
        process.once("SIGTERM", stop);
      });
    }),
});

/** The `bb scheduler` command group. */
export const schedulerCommand = defineCommand({
  meta: { name: "scheduler", description: "The control plane" },
  subCommands: { serve },
});
