/**
 * TEST SUPPORT, not a product path: the relay role's server (src/relay's
 * startRelay, the code `bb relay run` runs) started from a relay config
 * file in a test's namespace, with the relay's frame hook (HubOptions
 * observeFrame) reporting what it forwards, for the check that a relay sees
 * only WireGuard messages and never a tunnel's plaintext.
 * Run: `bun relayCapture.ts CONFIG_PATH`; prints {"ev":"ready","urls"}.
 * stdin lines: {"op":"marker","text"} sets the plaintext to look for in
 * every later frame; {"op":"report"} → {"ev":"report", frames, byType,
 * notWireGuard, markerHits}. Exits (stopping the relay) when stdin closes.
 * Must never: keep a frame (only counts), or be imported by src/.
 */
import { loadRelayConfig } from "../../src/relay/config.ts";
import { startRelay } from "../../src/relay/server.ts";
import { isWireGuardMessage } from "./relay.ts";
import { stdinCommands } from "./stdinLines.ts";

const emit = (o: object) => process.stdout.write(JSON.stringify(o) + "\n");
let marker: Buffer | null = null;
const counts = { frames: 0, byType: {} as Record<string, number>, notWireGuard: 0, markerHits: 0 };
const relay = await startRelay({
  config: loadRelayConfig(process.argv[2]!),
  observeFrame: (f) => {
    counts.frames++;
    counts.byType[String(f[0])] = (counts.byType[String(f[0])] ?? 0) + 1;
    if (!isWireGuardMessage(f)) counts.notWireGuard++;
    if (marker && Buffer.from(f.buffer, f.byteOffset, f.length).indexOf(marker) !== -1) counts.markerHits++;
  },
});
emit({ ev: "ready", urls: relay.urls });
for await (const c of stdinCommands<{ op: string; text?: string }>()) {
  if (c.op === "marker") {
    marker = Buffer.from(c.text ?? "");
    emit({ ev: "marker" });
  } else if (c.op === "report") emit({ ev: "report", ...counts });
}
await relay.stop();
process.exit(0);
