/**
 * Child process of bench/relay.ts: the baseline, a raw WebSocket echo
 * server with the relay's own WebSocket settings (src/relay/wsServer.ts),
 * on plain ws:// and on wss:// with the given certificate.
 *
 *   bun bench/children/relayEcho.ts CERT_PATH KEY_PATH
 * Prints one JSON line {ws, wss} with the two URLs, then runs until stdin closes.
 */
import { readFileSync } from "node:fs";
import { RELAY_WS_SETTINGS } from "../../src/relay/wsServer.ts";

const [certPath, keyPath] = process.argv.slice(2);
const websocket = {
  ...RELAY_WS_SETTINGS,
  message(ws: Bun.ServerWebSocket<undefined>, m: string | Buffer) {
    ws.send(m);
  },
};
const fetch = (req: Request, srv: Bun.Server<undefined>) =>
  srv.upgrade(req, { data: undefined }) ? undefined : new Response("no", { status: 426 });
const plain = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch, websocket });
const tls = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  tls: { cert: readFileSync(certPath!, "utf8"), key: readFileSync(keyPath!, "utf8") },
  fetch,
  websocket,
});
console.log(JSON.stringify({ ws: `ws://127.0.0.1:${plain.port}/`, wss: `wss://127.0.0.1:${tls.port}/` }));
for await (const _ of console) {
  // runs until stdin closes
}
plain.stop(true);
tls.stop(true);
