/**
 * native/vsock on whatever machine runs the tests: the probe answers without
 * throwing; where vsock exists, connecting to this machine's own CID (no
 * packet leaves: without a loopback transport the kernel answers ENODEV, with
 * one nobody listens on port 1) fails with a stable code and leaves no
 * descriptor. No test sends anything to another CID: the host (CID 2) belongs
 * to whoever runs this machine.
 */
import { expect, test } from "bun:test";
import { readdirSync } from "node:fs";
import { connectVsock, probeVsock, VsockError } from "./vsock.ts";

test("probe answers; a bogus CID is unreachable or refused; arguments are checked", () => {
  const p = probeVsock();
  if (!p.available) {
    console.log(`vsock unavailable here: ${p.reason}`);
    expect(p.code).toBe("unavailable");
    return;
  }
  if (p.localCid !== null) {
    const fds = readdirSync("/proc/self/fd").length;
    let err: unknown;
    try {
      connectVsock(p.localCid, 1);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(VsockError);
    expect(["unreachable", "refused"]).toContain((err as VsockError).code);
    expect(readdirSync("/proc/self/fd").length).toBe(fds);
  } else console.log("vsock: no local CID (/dev/vsock absent); connect not exercised");
  expect(() => connectVsock(-1, 1)).toThrow(expect.objectContaining({ code: "invalid-argument" }));
  expect(() => connectVsock(3, 2 ** 32)).toThrow(expect.objectContaining({ code: "invalid-argument" }));
});
