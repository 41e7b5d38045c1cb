/**
 * `bb proxy ALLOCATION_ID --local-port 2222 --remote-port 22` (spec "Data
 * path"): flags to a ProxyOptions, the signals that end a run, and the exit
 * code (src/command/run.ts: 0 after Ctrl-C or SIGTERM once the grant is
 * revoked; 1 with the stable code printed when the session cannot go on;
 * 2 for bad flags; 4 when the scheduler refuses the credentials).
 *
 * Trusted grant-signing keys come from `--connection-key`, else
 * BB_CONNECTION_KEYS, else `connectionKeys` in the client config file; the
 * proxy refuses to start without one. Relay certificates are verified
 * against the system's trust store plus the PEM file of `--relay-ca` (else
 * BB_RELAY_CA), for a deployment whose relays use a private CA.
 * STUN servers need no flag: the grant response lists the deployment's
 * (the manifest's connections.stunServers), and the session asks them from
 * its tunnel socket (src/proxy/candidateRefresh.ts).
 * The allocation may be given by a unique ID prefix, as for `bb allocation`
 * (src/command/allocationId.ts).
 * Must never: need root, touch the routing table, or print a token or key.
 */
import { readFileSync } from "node:fs";
import { consola } from "consola";
import { SchedulerClient } from "../client/index.ts";
import { clientArgs } from "../command/clientArgs.ts";
import { resolveClientConfig } from "../command/clientConfig.ts";
import { command } from "../command/define.ts";
import { runCli, UsageError } from "../command/run.ts";
import { resolveAllocationId } from "../command/allocationId.ts";
import { relayConnector } from "../relayclient/index.ts";
import { parseVerificationKeys } from "../protocol/connectionSignature.ts";
import { selectAead, systemSuspendAwareClock, systemRandom } from "../wireguard/index.ts";
import { probeLocalPort } from "./forwarder.ts";
import { runProxy } from "./session.ts";

/** A usage error (exit 2); `flagAtFault` false for a fault in the environment or the config file (no pointer to --help). */
function usage(message: string, flagAtFault = true): UsageError {
  return new UsageError(message, { helpHint: flagAtFault });
}

function port(text: string | undefined, flag: string): number {
  const n = Number(text);
  if (!text || !/^\d{1,5}$/.test(text) || n < 1 || n > 65535) throw usage(`--${flag} must be a port number 1..65535`);
  return n;
}

/** The verification keys from the flag, the environment or the config file. Throws a usage error when none is configured or one is malformed. */
export function connectionKeysFrom(
  flag: string | undefined,
  fromFile: Record<string, string> | undefined,
): Map<string, string> {
  const text = flag ?? process.env["BB_CONNECTION_KEYS"];
  let keys: Map<string, string>;
  try {
    keys = text
      ? parseVerificationKeys(text)
      : parseVerificationKeys(
          Object.entries(fromFile ?? {})
            .map(([k, v]) => `${k}=${v}`)
            .join(","),
        );
  } catch (e) {
    throw usage((e as Error).message, flag !== undefined);
  }
  if (keys.size === 0)
    throw usage(
      "no connection verification key: pass --connection-key KEYID=BASE64, set BB_CONNECTION_KEYS, or add connectionKeys to the client config",
    );
  return keys;
}

/** The extra relay CA (PEM text) from the flag or BB_RELAY_CA, or undefined. Throws a usage error naming where the path came from (the flag or BB_RELAY_CA) when the file cannot be read or holds no certificate. */
export function relayCaFrom(flag: string | undefined): string | undefined {
  const path = flag ?? process.env["BB_RELAY_CA"];
  if (!path) return undefined;
  const source = flag !== undefined ? "--relay-ca" : "BB_RELAY_CA";
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw usage(`${source} ${path}: ${(e as Error).message}`, flag !== undefined);
  }
  if (!text.includes("-----BEGIN CERTIFICATE-----"))
    throw usage(`${source} ${path}: no PEM certificate in the file`, flag !== undefined);
  return text;
}

/** The shared client flags without --json: the proxy prints progress lines, never a JSON result. */
const { json: _json, ...proxyClientArgs } = clientArgs;

/** The `bb proxy` command. */
export const proxyCommand = command({
  meta: { name: "proxy", description: "Forward 127.0.0.1:LOCAL to a port inside a private allocation (no root)" },
  args: {
    ...proxyClientArgs,
    allocation: {
      type: "positional",
      required: true,
      valueHint: "ALLOCATION_ID",
      description: "Allocation ID, or a unique prefix of one",
    },
    "local-port": { type: "string", required: true, description: "Port to listen on at 127.0.0.1" },
    "remote-port": { type: "string", required: true, description: "Port inside the allocation" },
    ttl: { type: "string", description: "Grant lifetime in seconds (30..3600; default: the scheduler's)" },
    "connection-key": {
      type: "string",
      description: "Trusted grant-signing keys, KEYID=BASE64[,…] (or BB_CONNECTION_KEYS)",
    },
    "relay-ca": {
      type: "string",
      valueHint: "FILE",
      description: "PEM CA certificates to trust for relays, besides the system's (or BB_RELAY_CA)",
    },
  },
  examples: [
    "bb proxy alloc_0123456789abcdef0123456789abcdef --local-port 2222 --remote-port 22",
    "bb proxy alloc_0123456789abcdef0123456789abcdef --local-port 8080 --remote-port 80 --ttl 600",
  ],
  run: ({ args }) =>
    runCli(async () => {
      const localPort = port(args["local-port"], "local-port");
      const remotePort = port(args["remote-port"], "remote-port");
      const ttl = args.ttl === undefined ? undefined : /^\d{1,4}$/.test(args.ttl) ? Number(args.ttl) : NaN;
      if (ttl !== undefined && (!Number.isInteger(ttl) || ttl < 30 || ttl > 3600))
        throw usage("--ttl must be 30..3600 seconds (decimal digits)");
      const cfg = resolveClientConfig(args);
      const keys = connectionKeysFrom(args["connection-key"], cfg.connectionKeys);
      const ca = relayCaFrom(args["relay-ca"]);
      await probeLocalPort(localPort).catch((e: NodeJS.ErrnoException) => {
        throw usage(
          `--local-port ${localPort}: cannot listen on 127.0.0.1:${localPort} (${e.code ?? e.message}); pick another port`,
        );
      });
      const client = new SchedulerClient(cfg.schedulerUrl, cfg.token, { origin: cfg.urlOrigin });
      const allocationId = await resolveAllocationId(client, args.allocation);
      const { aead } = await selectAead();
      const stop = new AbortController();
      const onSignal = () => stop.abort();
      process.on("SIGINT", onSignal);
      process.on("SIGTERM", onSignal);
      try {
        await runProxy(
          {
            client,
            allocationId,
            localPort,
            remotePort,
            keys,
            clock: systemSuspendAwareClock,
            random: systemRandom,
            aead,
            relayConnector: relayConnector(ca ? { ca } : {}),
            ...(ttl !== undefined ? { ttlSeconds: ttl } : {}),
            log: (line) => consola.info(line),
          },
          stop.signal,
        );
      } finally {
        process.off("SIGINT", onSignal);
        process.off("SIGTERM", onSignal);
      }
    }),
});
