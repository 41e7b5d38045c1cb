/**
 * The `bb_conn` chain text (connectionRules.ts): with flows, TCP SYNs either
 * way between `bbconn0` and the TAP are clamped to the tunnel's MSS first (ADR
 * 0103), as a rule without a verdict; without flows the chain is only
 * flushed; an impossible MSS is refused. (nft(8) loading the text is covered
 * by test/integration/proxy-netns.test.ts.)
 */
import { describe, expect, test } from "bun:test";
import { TUNNEL_TCP_MSS_BYTES } from "../../protocol/tunnelMtu.ts";
import { connectionChainText } from "./connectionRules.ts";

const FLOW = {
  clientAddress: "fd00:bb:ffff::5",
  allocationAddress: "fd00:bb:1:2::2",
  transport: "tcp" as const,
  ports: [22],
};

describe("bb_conn chain", () => {
  test("with a flow, SYNs from bbconn0 and from the TAP are clamped to the tunnel MSS (1,220) before any accept", () => {
    const lines = connectionChainText("bb_t1", "bbtap0", [FLOW]).trim().split("\n");
    expect(TUNNEL_TCP_MSS_BYTES).toBe(1220);
    expect(lines[1]).toBe(
      'add rule inet bb_t1 bb_conn iifname { "bbconn0", "bbtap0" } tcp flags & syn == syn tcp option maxseg size > 1220 tcp option maxseg size set 1220',
    );
    expect(lines[1]).not.toMatch(/accept|drop/);
    expect(lines.slice(2).every((l) => l.endsWith("accept"))).toBe(true);
  });

  test("the clamp follows the link's MSS when one is given", () => {
    expect(connectionChainText("bb_t1", "bbtap0", [FLOW], 1360)).toContain(
      "maxseg size > 1360 tcp option maxseg size set 1360",
    );
  });

  test("without flows the chain is flushed and nothing else, and an impossible MSS is NETWORK_SETUP_FAILED", () => {
    expect(connectionChainText("bb_t1", "bbtap0", [])).toBe("flush chain inet bb_t1 bb_conn\n");
    for (const bad of [0, 535, 1220.5, 70000])
      expect(() => connectionChainText("bb_t1", "bbtap0", [FLOW], bad)).toThrow(
        expect.objectContaining({ code: "NETWORK_SETUP_FAILED" }),
      );
  });
});
