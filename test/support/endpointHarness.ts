/**
 * TEST SUPPORT: the host endpoint (src/agent/endpoint) as a child process in
 * a test's "host" namespace, driven like the agent will drive it, but against
 * the test grant issuer (test/support/grantIssuerServer.ts) instead of the
 * scheduler: it polls GET /test/host/commands for configure_connection
 * commands, applies them in order, and posts its connectivity (public key,
 * candidates, applied and refused grants) to /test/host/connectivity after
 * every change. Placement links are the real ones (a TUN moved into each
 * placement namespace, routes, nftables).
 * CONFIG (argv[2], JSON): { hostId, dataDir, listen: {hostname, port},
 *   stunServers: [{address, port}], issuerUrl, verificationKeys: "KEYID=B64",
 *   placements: [{allocationId, generation, netns, table, tap}], relayCa?: PEM path }
 *   (relay sessions through src/relayclient, trusting the system's CAs plus relayCa).
 * stdin lines: {"op":"stats"} → {"ev":"stats",...}; {"op":"connectivity"} →
 * {"ev":"connectivity",...}; {"op":"generation","allocationId","generation"}
 * changes a placement's generation (a replacement on this host) and prunes
 * the grants of the old one, as the agent does.
 * stdout: {"ev":"ready","publicKey","port"}, {"ev":"applied"|"refused",grantId,code?}.
 * Exits (closing the endpoint, which removes every TUN and rule) when stdin closes.
 * Must never: be imported by src/.
 */
import { networkInterfaces } from "node:os";
import { HostEndpoint } from "../../src/agent/endpoint/endpoint.ts";
import type { PlacementTarget } from "../../src/agent/endpoint/grantCheck.ts";
import { loadOrCreateHostKey } from "../../src/agent/endpoint/hostKey.ts";
import { kernelPlacementLinks } from "../../src/agent/endpoint/placementLink.ts";
import type { ConfigureConnection } from "../../src/protocol/agent.ts";
import { parseVerificationKeys } from "../../src/protocol/connectionSignature.ts";
import { relayConnector } from "../../src/relayclient/index.ts";
import { stdinCommands } from "./stdinLines.ts";
import { readFileSync } from "node:fs";
import { selectAead, systemSuspendAwareClock, systemRandom } from "../../src/wireguard/index.ts";

interface Config {
  hostId: string;
  dataDir: string;
  listen: { hostname: string; port: number };
  stunServers: Array<{ address: string; port: number }>;
  issuerUrl: string;
  verificationKeys: string;
  placements: PlacementTarget[];
  relayCa?: string;
}

const cfg = JSON.parse(process.argv[2]!) as Config;
const emit = (o: object) => process.stdout.write(JSON.stringify(o) + "\n");
const placements = new Map(cfg.placements.map((p) => [p.allocationId, { ...p }]));
const { aead } = await selectAead();
let posting = Promise.resolve();
let endpoint: HostEndpoint | null = null;
const postConnectivity = () => {
  posting = posting.then(async () => {
    if (!endpoint) return;
    const body = { hostId: cfg.hostId, ...endpoint.connectivity() };
    await fetch(`${cfg.issuerUrl}/test/host/connectivity`, {
      method: "POST",
      body: JSON.stringify(body),
      headers: { "content-type": "application/json" },
    }).catch(() => {});
  });
};
endpoint = await HostEndpoint.start({
  hostId: cfg.hostId,
  keyPair: loadOrCreateHostKey(cfg.dataDir, systemRandom),
  verificationKeys: parseVerificationKeys(cfg.verificationKeys),
  listen: cfg.listen,
  stunServers: cfg.stunServers,
  clock: systemSuspendAwareClock,
  random: systemRandom,
  aead,
  placements: { byAllocation: (id) => placements.get(id) ?? null },
  links: kernelPlacementLinks,
  interfaces: networkInterfaces,
  relayConnector: relayConnector(cfg.relayCa ? { ca: readFileSync(cfg.relayCa, "utf8") } : {}),
  onChange: postConnectivity,
});
const ep = endpoint;
postConnectivity();

let after = 0;
let stopped = false;
const poll = async () => {
  while (!stopped) {
    try {
      const r = (await (await fetch(`${cfg.issuerUrl}/test/host/commands?after=${after}`)).json()) as {
        commands: Array<{ seq: number; command: ConfigureConnection }>;
      };
      for (const c of r.commands) {
        after = c.seq;
        const res = await ep.configure(c.command);
        emit(
          res.ok
            ? { ev: "applied", grantId: c.command.grantId, action: c.command.action }
            : { ev: "refused", grantId: c.command.grantId, code: res.code, reason: res.reason },
        );
        postConnectivity();
      }
    } catch {
      // The issuer is not up yet or went away: retry.
    }
    await Bun.sleep(100);
  }
};
void poll();
emit({ ev: "ready", publicKey: ep.publicKey, port: ep.port });

for await (const c of stdinCommands<{ op: string; allocationId?: string; generation?: number }>()) {
  if (c.op === "stats") emit({ ev: "stats", ...ep.stats() });
  else if (c.op === "connectivity") emit({ ev: "connectivity", ...ep.connectivity() });
  else if (c.op === "generation") {
    const p = placements.get(c.allocationId!);
    if (p) p.generation = c.generation!;
    // As the agent does when a placement changes: grants for another generation go.
    await ep.prune();
    emit({ ev: "generation", ok: !!p });
  }
}
stopped = true;
await ep.close();
process.exit(0);
