/**
 * The contract between the Go guest (guest/, docs/adr/0170-static-go-guest.md)
 * and the one wire definition (src/protocol/guest.ts, src/protocol/control.ts):
 * the built `beachball-guest` runs off-VM in its test mode (a Unix socket
 * instead of the virtio port, a file instead of /proc/cmdline, exit instead
 * of reboot(2)), this test plays the host, and every message the guest sends
 * must match the GuestToHost schema. No VM, no root needed beyond `unshare`
 * for the PID 1 refusal.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { type Server, type Socket, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { Value } from "@sinclair/typebox/value";
import { compileGuest } from "../src/image/bbBinary.ts";
import {
  GUEST_CMDLINE_KEYS,
  GuestToHost,
  HostToGuest,
  JOB_EXIT_MARKER,
  JOB_START_MARKER,
  MAX_GUEST_LINE_BYTES,
  encodeGuestMessage,
} from "../src/protocol/guest.ts";

/** Longest wait for one expected message (a loaded 2-core machine); never asserted as a timing. */
const WAIT_MS = 30_000;

let guestBin: string;
const work = mkdtempSync(join(tmpdir(), "bb-guest-contract-"));
const identity = { allocationId: "alloc-c1", placementId: "plc-c1", generation: 4, nonce: "ab".repeat(32) };
const cmdline = `console=ttyS0 ${GUEST_CMDLINE_KEYS.allocationId}=${identity.allocationId} ${GUEST_CMDLINE_KEYS.placementId}=${identity.placementId} ${GUEST_CMDLINE_KEYS.generation}=${identity.generation} ${GUEST_CMDLINE_KEYS.nonce}=${identity.nonce}`;

beforeAll(async () => {
  guestBin = await compileGuest(resolve(".bb/test-build/contract/beachball-guest"));
  writeFileSync(join(work, "cmdline"), cmdline);
});
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** One guest process in test mode, with this test as its host. */
class GuestUnderTest {
  readonly messages: Record<string, unknown>[] = [];
  readonly invalid: string[] = [];
  stderr = "";
  private sock: Socket | undefined;
  private server: Server;
  private buf = "";
  readonly proc: ReturnType<typeof Bun.spawn>;
  readonly exited: Promise<number>;

  constructor(name: string) {
    const path = join(work, `${name}.sock`);
    this.server = createServer((s) => {
      this.sock = s;
      s.setEncoding("utf8");
      s.on("data", (d: string) => this.onData(d));
    });
    this.server.listen(path);
    const proc = Bun.spawn([guestBin], {
      env: {
        PATH: process.env.PATH ?? "/usr/bin:/bin",
        BEACHBALL_GUEST_TEST_SOCKET: path,
        BEACHBALL_GUEST_TEST_CMDLINE: join(work, "cmdline"),
      },
      stdout: "ignore",
      stderr: "pipe",
    });
    this.proc = proc;
    void (async () => {
      for await (const c of proc.stderr) this.stderr += new TextDecoder().decode(c);
    })();
    this.exited = proc.exited;
  }

  private onData(d: string): void {
    this.buf += d;
    for (let nl = this.buf.indexOf("\n"); nl >= 0; nl = this.buf.indexOf("\n")) {
      const line = this.buf.slice(0, nl);
      this.buf = this.buf.slice(nl + 1);
      const m = JSON.parse(line) as Record<string, unknown>;
      if (!Value.Check(GuestToHost, m)) this.invalid.push(line);
      this.messages.push(m);
    }
  }

  /** Sends a host message (checked against HostToGuest first) or raw text. */
  async send(m: HostToGuest | string): Promise<void> {
    if (typeof m !== "string") expect(Value.Check(HostToGuest, m)).toBe(true);
    await this.until(() => this.sock !== undefined, "the guest's connection");
    const text = typeof m === "string" ? m : encodeGuestMessage(m);
    await new Promise<void>((res, rej) => this.sock!.write(text, (e) => (e ? rej(e) : res())));
  }

  /** Waits for the `nth` (1-based) message of `type` and returns it. */
  async next(type: string, nth = 1): Promise<Record<string, unknown>> {
    let found: Record<string, unknown> | undefined;
    await this.until(() => (found = this.messages.filter((m) => m.type === type)[nth - 1]) !== undefined, type);
    return found!;
  }

  async until(cond: () => boolean, what: string): Promise<void> {
    const deadline = Date.now() + WAIT_MS;
    while (!cond()) {
      if (Date.now() > deadline)
        throw new Error(`no ${what}; got ${JSON.stringify(this.messages)}; stderr ${this.stderr}`);
      await Bun.sleep(10);
    }
  }

  async close(): Promise<void> {
    if (this.proc.exitCode === null) this.proc.kill("SIGKILL");
    await this.exited;
    this.server.close();
  }
}

const b64 = (s: string) => Buffer.from(s).toString("base64");
const digestOf = (s: string) => `sha256:${createHash("sha256").update(s).digest("hex")}`;

describe("beachball-guest against the wire schemas (test mode, no VM)", () => {
  test("handshake, ping, identify, one bootstrap per boot, control_config, bad lines, shutdown", async () => {
    const g = new GuestUnderTest("main");
    try {
      const ready = await g.next("guest_ready");
      expect(ready).toMatchObject({ ...identity, guestVersion: "0.1.0" });
      expect(ready.bootId).toMatch(/^[0-9a-f]{32}$/);
      await g.send({ type: "ready_ack" });
      await g.send({ type: "ping", id: "p1" });
      expect(await g.next("pong")).toEqual({ type: "pong", id: "p1" });
      await g.send({ type: "identify" });
      expect((await g.next("guest_ready", 2)).bootId).toBe(ready.bootId);

      // Malformed lines are skipped; an over-long line is dropped whole and the reader resyncs.
      await g.send('not json\n[1]\n{"type":"ping","id":5}\n');
      await g.send(`{"type":"ping","id":"${"x".repeat(MAX_GUEST_LINE_BYTES)}"}\n`);
      await g.send({ type: "ping", id: "p2" });
      expect((await g.next("pong", 2)).id).toBe("p2");
      expect(g.messages.filter((m) => m.type === "pong")).toHaveLength(2);

      // control_config: accepted (newest replaces), and a malformed one ignored.
      const key = Buffer.alloc(32, 7).toString("base64");
      await g.send({ type: "control_config", verificationKeys: { "conn-1": key } });
      await g.send('{"type":"control_config","verificationKeys":{"bad id":"AAAA"}}\n');
      await g.until(() => /control_config: 1 verification keys/.test(g.stderr), "the control_config console line");
      await g.until(() => /control_config ignored/.test(g.stderr), "the ignored control_config line");

      // The one payload of the boot: consumed before it runs, its exit code reported; a duplicate re-acked, another refused.
      const script = "echo contract-payload-ran; exit 7";
      await g.send({ type: "bootstrap", deliveryId: "d1", contentType: "text/x-shellscript", dataBase64: b64(script) });
      expect(await g.next("bootstrap_consumed")).toEqual({
        type: "bootstrap_consumed",
        deliveryId: "d1",
        digest: digestOf(script),
      });
      expect(await g.next("workload_exited")).toEqual({ type: "workload_exited", deliveryId: "d1", exitCode: 7 });
      const order = g.messages.map((m) => m.type).filter((t) => t !== "pong" && t !== "guest_ready");
      expect(order).toEqual(["bootstrap_consumed", "workload_started", "workload_exited"]);
      expect(g.stderr).toContain(`${JOB_START_MARKER}\ncontract-payload-ran\n${JOB_EXIT_MARKER} 7\n`);
      await g.send({ type: "bootstrap", deliveryId: "d1", contentType: "text/x-shellscript", dataBase64: b64(script) });
      expect((await g.next("bootstrap_consumed", 2)).digest).toBe(digestOf(script));
      await g.send({
        type: "bootstrap",
        deliveryId: "d2",
        contentType: "text/x-shellscript",
        dataBase64: b64("exit 0"),
      });
      expect(await g.next("bootstrap_rejected")).toMatchObject({
        deliveryId: "d2",
        reason: expect.stringMatching(/already consumed/),
      });

      await g.send({ type: "shutdown" });
      await g.next("shutting_down");
      expect(await g.exited).toBe(0);
      expect(g.invalid).toEqual([]);
      expect(g.stderr).toMatch(/guest_ready written at [0-9.]+s, \d+ ms after main; VmRSS \d+ kB/);
    } finally {
      await g.close();
    }
  }, 120_000);

  test("shutdown stops a running workload (SIGTERM: 128 + 15) before shutting_down; other content types refused", async () => {
    const g = new GuestUnderTest("term");
    try {
      await g.next("guest_ready");
      await g.send({ type: "bootstrap", deliveryId: "j", contentType: "application/json", dataBase64: b64("{}") });
      expect((await g.next("bootstrap_rejected")).reason).toMatch(/unsupported content type/);
      await g.send({
        type: "bootstrap",
        deliveryId: "d",
        contentType: "text/x-shellscript",
        dataBase64: b64("exec sleep 60"),
      });
      await g.next("workload_started");
      await g.send({ type: "shutdown" });
      await g.next("shutting_down");
      expect(await g.exited).toBe(0);
      const order = g.messages.map((m) => m.type);
      expect(order.slice(-2)).toEqual(["workload_exited", "shutting_down"]);
      expect((await g.next("workload_exited")).exitCode).toBe(128 + 15);
      expect(g.invalid).toEqual([]);
    } finally {
      await g.close();
    }
  }, 120_000);

  test("usage errors exit 2; test mode is refused as PID 1; a missing identity stops the guest", async () => {
    const bad = Bun.spawnSync([guestBin, "--bogus"], { stderr: "pipe" });
    expect(bad.exitCode).toBe(2);
    expect(bad.stderr.toString()).toBe('error: beachball-guest: unknown argument "--bogus"\n');
    const env = {
      PATH: "/usr/bin:/bin",
      BEACHBALL_GUEST_TEST_SOCKET: join(work, "none.sock"),
      BEACHBALL_GUEST_TEST_CMDLINE: join(work, "cmdline"),
    };
    const pid1 = Bun.spawnSync(["unshare", "--pid", "--fork", guestBin], { env, stderr: "pipe" });
    expect(pid1.exitCode).toBe(2);
    expect(pid1.stderr.toString()).toMatch(/refused as PID 1/);
    writeFileSync(join(work, "empty-cmdline"), "console=ttyS0");
    const noId = Bun.spawnSync([guestBin], {
      env: { ...env, BEACHBALL_GUEST_TEST_CMDLINE: join(work, "empty-cmdline") },
      stderr: "pipe",
    });
    expect(noId.exitCode).toBe(1);
    expect(noId.stderr.toString()).toMatch(/kernel command line lacks beachball\./);
  });
});
