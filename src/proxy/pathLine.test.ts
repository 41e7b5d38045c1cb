/**
 * The proxy's `path:` line (docs/connect.md): a lost direct path is reported
 * as a new one is, with the path that carries the session now.
 */
import { expect, test } from "bun:test";
import type { PathState } from "../wireguard/index.ts";
import { describePath } from "./session.ts";

const base: PathState = {
  path: "none",
  direct: null,
  relay: null,
  lost: null,
  pins: 0,
  unpins: 0,
  probesSent: 0,
  acksReceived: 0,
  sentDirect: 0,
  sentMirrored: 0,
  sentRelay: 0,
};

test("black hole: a lost direct path is named on the path line, with the relay that carries the session now (or none yet)", () => {
  expect(describePath({ ...base, path: "direct", direct: "198.51.100.20:51820" })).toBe(
    "direct via 198.51.100.20:51820",
  );
  expect(describePath({ ...base, path: "relay", relay: "relay-1" })).toBe("relay relay-1");
  expect(describePath({ ...base, path: "relay", relay: "relay-1", lost: "198.51.100.20:51820" })).toBe(
    "relay relay-1 (direct via 198.51.100.20:51820 lost)",
  );
  expect(describePath({ ...base, lost: "198.51.100.20:51820" })).toBe("none (direct via 198.51.100.20:51820 lost)");
  expect(describePath(base)).toBe("no path yet");
});
