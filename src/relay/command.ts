/**
 * `bb relay run`: runs a packet relay (spec "Packet relays"; docs/relay.md).
 * Translates flags to startRelay and runs until SIGINT or SIGTERM.
 *
 * Owns: the relay's command line. Must never: read or write anything but
 * the config file and the TLS files it names, or print a token.
 */
import { resolve } from "node:path";
import { consola } from "consola";
import { command } from "../command/define.ts";
import { runCli } from "../command/run.ts";
import { createLogger } from "../command/log.ts";

const run = command({
  meta: { name: "run", description: "Run a packet relay (WebSocket over TLS, optional QUIC, health endpoint)" },
  args: {
    config: {
      type: "string",
      valueHint: "FILE",
      description: "Relay config file (docs/relay.md; example deploy/relay.example.json)",
      required: true,
    },
    "insecure-listen": {
      type: "string",
      valueHint: "HOST:PORT",
      description: "Serve plain ws:// on this loopback address instead of TLS (tests and benchmarks only)",
    },
    "quic-listen": {
      type: "string",
      valueHint: "HOST:PORT",
      description: "Also serve QUIC (Bun's experimental node:quic; one stream per session) here; overrides quicListen",
    },
    "health-listen": {
      type: "string",
      valueHint: "HOST:PORT",
      description: "Health endpoint address; overrides healthListen",
    },
  },
  examples: [
    "bb relay run --config /etc/beachball/relay.json",
    "bb relay run --config /etc/beachball/relay.json --quic-listen 0.0.0.0:443",
    "bb relay run --config relay.json --insecure-listen 127.0.0.1:8080 --health-listen 127.0.0.1:9444",
  ],
  run: ({ args }) =>
    runCli(async () => {
      const { loadRelayConfig, parseListenAddress } = await import("./config.ts");
      const { startRelay } = await import("./server.ts");
      const config = loadRelayConfig(resolve(args.config));
      const relay = await startRelay({
        config,
        ...(args["insecure-listen"]
          ? { insecureListen: [parseListenAddress(args["insecure-listen"], "--insecure-listen")] }
          : {}),
        ...(args["quic-listen"] ? { quicListen: parseListenAddress(args["quic-listen"], "--quic-listen") } : {}),
        ...(args["health-listen"] ? { health: parseListenAddress(args["health-listen"], "--health-listen") } : {}),
      });
      // One line, constant message, fields as key=value (src/command/log.ts's text format).
      const log = createLogger({ format: "text", sink: (line) => consola.info(line) }, { role: "relay" });
      log.info("relay listening", {
        relayId: config.relayId,
        urls: [...relay.urls, ...(relay.quic ? [`quic://${relay.quic}`] : [])].join(","),
        health: `${relay.healthUrl}/healthz`,
      });
      await new Promise<void>((done) => {
        const stop = () => void relay.stop().then(done);
        process.once("SIGINT", stop);
        process.once("SIGTERM", stop);
      });
    }),
});

/** The `bb relay` command group. */
export const relayCommand = command({
  meta: { name: "relay", description: "A packet relay for private networking" },
  examples: ["bb relay run --config /etc/beachball/relay.json"],
  subCommands: { run },
});
