/**
 * Hybrid vsock (reference vsock.md) against a small fake of Firecracker's
 * vsock Unix socket: host-initiated `CONNECT <port>\n` / `OK <hostport>\n`,
 * retry while no guest listens, refusal of a bad reply, guest-initiated
 * connections on `<uds>_<port>`, and adoption through FirecrackerDriver's
 * connectControl. Leaves no socket or listener behind.
 */
import { afterAll, afterEach, expect, test } from "bun:test";
import type { Socket, UnixSocketListener } from "bun";
import { existsSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FirecrackerDriver } from "../../src/agent/vmm/firecracker/driver.ts";
import {
  connectHybridVsock,
  GUEST_CONTROL_PORT,
  listenHybridVsock,
  parseConnectAck,
} from "../../src/agent/vmm/firecracker/vsock.ts";

const work = mkdtempSync(join(tmpdir(), "bb-fc-vsock-"));
const listeners: UnixSocketListener<undefined>[] = [];
let n = 0;
afterEach(() => {
  for (const l of listeners.splice(0)) l.stop(true);
});
afterAll(() => rmSync(work, { recursive: true, force: true }));

/**
 * A fake vsock UDS: records what each connection sends first; `refuse`
 * connections are closed without a reply (no guest listener), then it
 * answers `reply` and echoes everything after the CONNECT line prefixed "guest:".
 */
function fakeVsock(reply: string, refuse = 0): { path: string; received: string[] } {
  const path = join(work, `v${++n}.sock`);
  const received: string[] = [];
  let refused = 0;
  const state = new Map<Socket<undefined>, { connected: boolean; buf: string }>();
  listeners.push(
    Bun.listen<undefined>({
      unix: path,
      socket: {
        open: (s) => void state.set(s, { connected: false, buf: "" }),
        data: (s, d) => {
          const st = state.get(s)!;
          if (st.connected) return void s.write(`guest:${d.toString()}`);
          st.buf += d.toString();
          const nl = st.buf.indexOf("\n");
          if (nl < 0) return;
          received.push(st.buf.slice(0, nl + 1));
          if (refused++ < refuse) return void s.end();
          st.connected = true;
          s.write(reply);
        },
      },
    }),
  );
  return { path, received };
}

test("parseConnectAck accepts exactly `OK <n>`", () => {
  expect(parseConnectAck("OK 1073741824")).toBe(1073741824);
  expect(parseConnectAck("OK")).toBeNull();
  expect(parseConnectAck("OK 12 extra")).toBeNull();
  expect(parseConnectAck("ERR 1")).toBeNull();
});

test("host-initiated: writes `CONNECT 1024\\n`, parses `OK 1073741824\\n`, then carries data both ways (bytes after the OK line included)", async () => {
  const fake = fakeVsock("OK 1073741824\nhello\n");
  const { channel, hostPort } = await connectHybridVsock(fake.path, GUEST_CONTROL_PORT, 2_000);
  expect(fake.received).toEqual(["CONNECT 1024\n"]);
  expect(hostPort).toBe(1073741824);
  const chunks: string[] = [];
  channel.onData((c) => chunks.push(c));
  expect(chunks.join("")).toBe("hello\n");
  channel.send("ping\n");
  for (let i = 0; i < 100 && !chunks.join("").includes("guest:"); i++) await Bun.sleep(10);
  expect(chunks.join("")).toBe("hello\nguest:ping\n");
  channel.close();
});

test("host-initiated: retries while Firecracker closes the connection (no guest listener yet)", async () => {
  const fake = fakeVsock("OK 1073741825\n", 2);
  const { hostPort, channel } = await connectHybridVsock(fake.path, 52, 2_000);
  expect(fake.received).toEqual(["CONNECT 52\n", "CONNECT 52\n", "CONNECT 52\n"]);
  expect(hostPort).toBe(1073741825);
  channel.close();
});

test("host-initiated: a reply other than `OK <n>` fails at once with VMM_START_FAILED; a silent socket times out", async () => {
  const bad = fakeVsock("NOPE\n");
  const err = await connectHybridVsock(bad.path, 1024, 2_000).catch((e) => e);
  expect(err).toMatchObject({ code: "VMM_START_FAILED" });
  expect((err as Error).message).toContain("unexpected reply");
  expect(bad.received).toHaveLength(1);
  const t0 = performance.now();
  const gone = await connectHybridVsock(join(work, "absent.sock"), 1024, 200).catch((e) => e);
  expect(gone).toMatchObject({ code: "VMM_START_FAILED" });
  expect(performance.now() - t0).toBeGreaterThanOrEqual(200);
});

test("guest-initiated: the host listens on `<uds>_1025`, accepts one connection, refuses a second, removes the socket on close", async () => {
  const uds = join(work, "g.sock");
  const l = listenHybridVsock(uds, 1025);
  expect(l.path).toBe(`${uds}_1025`);
  const first = await Bun.connect({ unix: l.path, socket: { data: () => {} } });
  first.write("ready\n");
  const ch = await l.accept(1_000);
  expect(await new Promise<string>((r) => ch.onData(r))).toBe("ready\n");
  let secondClosed = false;
  await Bun.connect({ unix: l.path, socket: { data: () => {}, close: () => void (secondClosed = true) } });
  for (let i = 0; i < 100 && !secondClosed; i++) await Bun.sleep(10);
  expect(secondClosed).toBe(true);
  l.close();
  expect(existsSync(l.path)).toBe(false);
  first.end();
  ch.close();
  const idle = listenHybridVsock(join(work, "idle.sock"), 1025);
  await expect(idle.accept(50)).rejects.toMatchObject({ code: "VMM_START_FAILED" });
  idle.close();
});

test("adoption: a driver that did not start the VM dials guest port 1024 through the control-socket symlink", async () => {
  const fake = fakeVsock("OK 1073741826\n");
  const control = join(work, "control.sock");
  symlinkSync(fake.path, control);
  const ch = await new FirecrackerDriver({ chrootBase: join(work, "jails") }).connectControl(
    { controlSocketPath: control },
    2_000,
  );
  expect(fake.received).toEqual(["CONNECT 1024\n"]);
  ch.close();
});
