/**
 * `bb relay run`: runs a packet relay (spec "Packet relays"; docs/relay.md).
 * Translates flags to startRelay and runs until SIGINT or SIGTERM.
 *
 * Owns: the relay's command line. Must never: read or write anything but
 * the config file and the TLS files it names, or print a token.
 */
import { resolve } from "node:path";
import { defineCommand } from "citty";
import { consola } from "consola";
import { runCli } from "../command/run.ts";

const run = defineCommand({
  meta: { name: "run", description: "Run a packet relay (WebSocket over TLS, optional QUIC, health endpoint)" },
  args: {
    config: { type: "string", description: "Relay config file (see deploy/relay.example.json)", required: true },
    "insecure-listen": { type: "string", description: "Serve plain ws:// on this loopback HOST:PORT instead of TLS (tests only)" },
    "quic-listen": { type: "string", description: "Also serve QUIC (node:quic, experimental) on HOST:PORT; overrides quicListen" },
    "health-listen": { type: "string", description: "Health endpoint HOST:PORT; overrides healthListen" },
  },
  run: ({ args }) =>
    runCli(async () => {
      const { loadRelayConfig, parseListenAddress } = await import("./config.ts");
      const { startRelay } = await import("./server.ts");
      const config = loadRelayConfig(resolve(args.config));
      const relay = await startRelay({
        config,
        ...(args["insecure-listen"] ? { insecureListen: [parseListenAddress(args["insecure-listen"], "--insecure-listen")] } : {}),
        ...(args["quic-listen"] ? { quicListen: parseListenAddress(args["quic-listen"], "--quic-listen") } : {}),
        ...(args["health-listen"] ? { health: parseListenAddress(args["health-listen"], "--health-listen") } : {}),
      });
      consola.info(`relay ${config.relayId} listening: ${[...relay.urls, ...(relay.quic ? [`quic://${relay.quic}`] : [])].join(" ")} health ${relay.healthUrl}/healthz`);
      await new Promise<void>((done) => {
        const stop = () => void relay.stop().then(done);
        process.once("SIGINT", stop);
        process.once("SIGTERM", stop);
      });
    }),
});

/** The `bb relay` command group. */
export const relayCommand = defineCommand({
  meta: { name: "relay", description: "A packet relay for private networking" },
  subCommands: { run },
});
