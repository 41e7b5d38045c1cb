/**
 * setSocketBuffers on a real Bun UDP socket: the sizes the kernel reports
 * afterwards grow to the request (as root through the *FORCE options; the
 * kernel doubles the value it stores), and bad input is refused, not thrown.
 */
import { expect, test } from "bun:test";
import { setSocketBuffers, udpSocketFd } from "./sockbuf.ts";

test("a Bun UDP socket gets the requested receive and send buffers", async () => {
  const s = await Bun.udpSocket({ hostname: "127.0.0.1", port: 0 });
  try {
    const want = 3 << 20;
    const r = setSocketBuffers(udpSocketFd(s), want);
    if (process.getuid?.() === 0) {
      expect(r).toEqual({ receiveBytes: 2 * want, sendBytes: 2 * want, forced: true, reason: null });
    } else {
      // Without CAP_NET_ADMIN the kernel caps at rmem_max/wmem_max and says nothing; we say why.
      expect(r.receiveBytes).toBeGreaterThan(0);
      expect(r.reason === null || r.reason.includes("capped")).toBe(true);
    }
  } finally {
    s.close();
  }
});

test("sizes outside 1 KiB..1 GiB and a closed descriptor are reported, not thrown", () => {
  expect(setSocketBuffers(0, 10).reason).toContain("outside");
  expect(udpSocketFd({})).toBe(-1);
  const r = setSocketBuffers(987_654, 1 << 20);
  expect(r.receiveBytes).toBe(-1);
  expect(r.reason).toContain("failed");
});
