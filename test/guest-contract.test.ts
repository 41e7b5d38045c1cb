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
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { type AddressInfo, type Server, type Socket, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { Value } from "@sinclair/typebox/value";
import { restoredMessage } from "../src/agent/guestRestored.ts";
import { systemRandom } from "../src/agent/ports.ts";
import { ControlClient } from "../src/client/control.ts";
import { compileGuest } from "../src/image/bbBinary.ts";
import { systemClock } from "../src/protocol/clock.ts";
import type { GrantPayload } from "../src/protocol/connection.ts";
import { connectionPublicKeyOf, signConnectionDocument } from "../src/protocol/connectionSignature.ts";
import { GUEST_CONTROL_PORT } from "../src/protocol/control.ts";
import { BeachballError } from "../src/protocol/errors.ts";
import {
  type ClockMessage,
  GUEST_CLOCK_STEP_MS,
  GUEST_CMDLINE_KEYS,
  GuestToHost,
  HostToGuest,
  JOB_EXIT_MARKER,
  JOB_START_MARKER,
  MAX_GUEST_LINE_BYTES,
  encodeGuestMessage,
} from "../src/protocol/guest.ts";
import {
  MAX_GUEST_ID_CHARS,
  MAX_RESTORE_ENTROPY_BYTES,
  MIN_RESTORE_ENTROPY_BYTES,
  RestoredMessage,
} from "../src/protocol/guestRestored.ts";

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

  /** `env`: more environment (BEACHBALL_GUEST_TEST_CONTROL); `cmdlineFile`: another identity's kernel command line. */
  constructor(name: string, opts: { env?: Record<string, string>; cmdlineFile?: string } = {}) {
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
        BEACHBALL_GUEST_TEST_CMDLINE: opts.cmdlineFile ?? join(work, "cmdline"),
        ...opts.env,
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
      expect(g.stderr).toMatch(
        /guest_ready written at [0-9.]+s, \d+ ms after main; VmRSS \d+ kB; ms per step: port \d+, /,
      );
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
    // Configuring the network is PID 1's (a guest started by hand on a host must never touch its interfaces).
    const net = Bun.spawnSync([guestBin, "--configure-network"], { stderr: "pipe" });
    expect(net.exitCode).toBe(2);
    expect(net.stderr.toString()).toBe("error: beachball-guest: --configure-network is for PID 1 only\n");
    // Started as beachball-init but not as PID 1, the guest does no system init (it fails on the identity instead).
    const asInit = join(work, "beachball-init");
    symlinkSync(guestBin, asInit);
    const notInit = Bun.spawnSync([asInit], { env: { PATH: "/usr/bin:/bin" }, stderr: "pipe" });
    expect(notInit.stderr.toString()).not.toMatch(/beachball-init:/);
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

/** The kernel command line of `id` (written to a file of the work directory, returned). */
function cmdlineFor(name: string, id: typeof identity): string {
  const f = join(work, `${name}-cmdline`);
  writeFileSync(
    f,
    `console=ttyS0 ${GUEST_CMDLINE_KEYS.allocationId}=${id.allocationId} ${GUEST_CMDLINE_KEYS.placementId}=${id.placementId} ${GUEST_CMDLINE_KEYS.generation}=${id.generation} ${GUEST_CMDLINE_KEYS.nonce}=${id.nonce}`,
  );
  return f;
}

/** A restored message for `id`'s allocation as `generation` (built by the agent's own helper). */
const restoredFor = (id: typeof identity, generation: number, opts: Parameters<typeof restoredMessage>[2] = {}) =>
  restoredMessage(
    { allocationId: id.allocationId, placementId: `${id.placementId}-r${generation}`, generation, spec: {} },
    { random: systemRandom, clock: systemClock },
    opts,
  );

/** Occurrences of `re` in `text`. */
const count = (text: string, re: RegExp) => (text.match(new RegExp(re.source, "g")) ?? []).length;

describe("beachball-guest after a restore (restored, src/protocol/guestRestored.ts)", () => {
  test("restored → entropy and clock recorded (test mode), the identity adopted, a fresh guest_ready; bad ones ignored", async () => {
    const g = new GuestUnderTest("restore");
    try {
      const first = await g.next("guest_ready");
      await g.send({ type: "ready_ack" });
      const good = restoredFor(identity, identity.generation + 1, {
        ipv4: { cidr: "10.0.0.2/30", gateway: "10.0.0.1" },
      }).message;
      // Each bad message breaks one rule; the TypeBox schema refuses it as the guest does.
      const b64 = (n: number) => Buffer.alloc(n, 1).toString("base64");
      const bad: Record<string, unknown>[] = [
        { ...good, entropyBase64: b64(MIN_RESTORE_ENTROPY_BYTES - 1) },
        { ...good, entropyBase64: b64(MAX_RESTORE_ENTROPY_BYTES + 1) },
        { ...good, generation: -1 },
        { ...good, generation: 2 ** 53 },
        { ...good, allocationId: "a".repeat(MAX_GUEST_ID_CHARS + 1) },
        { ...good, placementId: "" },
        { ...good, nonce: "ab" },
        { ...good, wallClockMs: 0 },
        { ...good, network: { ipv4Cidr: "10.0.0.02/30" } },
      ];
      for (const m of bad) expect(Value.Check(RestoredMessage, m)).toBe(false);
      // Schema-valid, refused by the guest's own rules: an older generation of the same allocation.
      const older = restoredFor(identity, identity.generation - 1).message;
      const undecodable = { ...good, generation: "5" };
      for (const m of [...bad, older, undecodable]) await g.send(JSON.stringify(m) + "\n");
      await g.send({ type: "ping", id: "after-bad" });
      expect((await g.next("pong")).id).toBe("after-bad");
      await g.until(
        () => count(g.stderr, /restored ignored: /) === bad.length + 1,
        "a console line per ignored message",
      );
      expect(g.messages.filter((m) => m.type === "guest_ready")).toHaveLength(1);

      await g.send(good);
      const ready = await g.next("guest_ready", 2);
      expect(ready).toEqual({
        type: "guest_ready",
        bootId: ready.bootId,
        guestVersion: "0.1.0",
        allocationId: good.allocationId,
        placementId: good.placementId,
        generation: good.generation,
        nonce: good.nonce,
      });
      expect(ready.bootId).toMatch(/^[0-9a-f]{32}$/);
      expect(ready.bootId).not.toBe(first.bootId);
      expect(g.stderr).toContain("restored: entropy: 64 bytes recorded (test mode: the kernel's pool is not touched)");
      expect(g.stderr).toContain(`restored: clock stepped to ${new Date(good.wallClockMs).toISOString().slice(0, 19)}`);
      expect(g.stderr).toContain("restored: network fields ignored: no network configurer in this guest");
      expect(g.stderr).not.toContain(good.nonce);
      // identify answers as the restored boot; a repeat of the message only repeats guest_ready.
      await g.send({ type: "identify" });
      expect(await g.next("guest_ready", 3)).toEqual(ready);
      await g.send(good);
      expect(await g.next("guest_ready", 4)).toEqual(ready);
      expect(count(g.stderr, /restored: entropy: /)).toBe(1);
      await g.send({ type: "shutdown" });
      await g.next("shutting_down");
      expect(await g.exited).toBe(0);
      expect(g.invalid).toEqual([]);
    } finally {
      await g.close();
    }
  }, 120_000);

  test("clock: a wall clock more than GUEST_CLOCK_STEP_MS away is stepped to (recorded in test mode), a near one is not; no answer; out-of-bounds ignored", async () => {
    const g = new GuestUnderTest("clock");
    try {
      await g.next("guest_ready");
      await g.send({ type: "ready_ack" });
      const near: ClockMessage = { type: "clock", wallClockMs: Date.now() + GUEST_CLOCK_STEP_MS / 4 };
      const far: ClockMessage = { type: "clock", wallClockMs: Date.now() + 45_000 };
      const outside = { type: "clock", wallClockMs: 0 };
      for (const m of [near, far]) expect(Value.Check(HostToGuest, m)).toBe(true);
      expect(Value.Check(HostToGuest, outside)).toBe(false);
      for (const m of [near, outside, far]) await g.send(JSON.stringify(m) + "\n");
      await g.send({ type: "ping", id: "after-clock" });
      expect((await g.next("pong")).id).toBe("after-clock");
      await g.until(() => /clock stepped by 4\d\.\d+s to the host's/.test(g.stderr), "the clock step's console line");
      expect(count(g.stderr, /clock stepped by/)).toBe(1);
      expect(g.messages.map((m) => m.type)).toEqual(["guest_ready", "pong"]);
      await g.send({ type: "shutdown" });
      await g.next("shutting_down");
      expect(await g.exited).toBe(0);
      expect(g.invalid).toEqual([]);
    } finally {
      await g.close();
    }
  }, 120_000);

  test("the one-payload rule across a restore: refused after a consumed payload unless payloadAllowed; a fresh guest accepts one", async () => {
    const used = new GuestUnderTest("restore-used");
    const fresh = new GuestUnderTest("restore-fresh");
    try {
      const shell = (deliveryId: string, script: string) =>
        ({ type: "bootstrap", deliveryId, contentType: "text/x-shellscript", dataBase64: b64(script) }) as const;
      await used.next("guest_ready");
      await used.send(shell("d1", "exit 0"));
      await used.next("workload_exited");
      await used.send(restoredFor(identity, 5).message);
      await used.next("guest_ready", 2);
      await used.send(shell("d2", "exit 0"));
      expect(await used.next("bootstrap_rejected")).toMatchObject({
        deliveryId: "d2",
        reason: expect.stringMatching(/already consumed/),
      });
      await used.send(restoredFor(identity, 6, { payloadAllowed: true }).message);
      expect((await used.next("guest_ready", 3)).generation).toBe(6);
      await used.send(shell("d3", "exit 3"));
      expect((await used.next("bootstrap_consumed", 2)).deliveryId).toBe("d3");
      expect(await used.next("workload_exited", 2)).toEqual({ type: "workload_exited", deliveryId: "d3", exitCode: 3 });

      await fresh.next("guest_ready");
      await fresh.send(restoredFor(identity, 5).message);
      await fresh.next("guest_ready", 2);
      await fresh.send(shell("f1", "exit 0"));
      expect((await fresh.next("bootstrap_consumed")).deliveryId).toBe("f1");
      expect(used.invalid).toEqual([]);
      expect(fresh.invalid).toEqual([]);
    } finally {
      await used.close();
      await fresh.close();
    }
  }, 120_000);

  test("the control service checks grants against the restored identity: the new generation accepted, the old refused", async () => {
    const id = {
      allocationId: `alloc_${"d".repeat(32)}`,
      placementId: "plc-ctl",
      generation: 4,
      nonce: "cd".repeat(32),
    };
    const port = await new Promise<number>((res) => {
      const probe = createServer().listen(0, "127.0.0.1", () => {
        const p = (probe.address() as AddressInfo).port;
        probe.close(() => res(p));
      });
    });
    const g = new GuestUnderTest("restore-control", {
      cmdlineFile: cmdlineFor("restore-control", id),
      env: { BEACHBALL_GUEST_TEST_CONTROL: `127.0.0.1:${port}`, TMPDIR: work },
    });
    const seed = Buffer.alloc(32, 9).toString("base64");
    const grant = (generation: number) => {
      const now = Date.now();
      const p: GrantPayload = {
        v: 1,
        grantId: `grt_${"a".repeat(32)}`,
        tenant: "tenant-a",
        networkId: `net_${"b".repeat(32)}`,
        allocationId: id.allocationId,
        generation,
        hostId: "host-1",
        clientPublicKey: `${"A".repeat(43)}=`,
        hostPublicKey: `${"B".repeat(43)}=`,
        clientAddress: "fd00::2",
        allocationAddress: "fd00::3",
        transport: "tcp",
        ports: [GUEST_CONTROL_PORT],
        policyRevision: 0,
        issuedAtMs: now - 1000,
        expiresAtMs: now + 600_000,
      };
      return new ControlClient(`http://127.0.0.1:${port}`, signConnectionDocument("grant", p, "k1", seed));
    };
    const codeOf = (p: Promise<unknown>) =>
      p.then(
        () => "OK",
        (e: unknown) => (e instanceof BeachballError ? e.code : String(e)),
      );
    try {
      await g.next("guest_ready");
      await g.send({ type: "control_config", verificationKeys: { k1: connectionPublicKeyOf(seed) } });
      await g.until(() => /control_config: 1 verification keys/.test(g.stderr), "the control_config line");
      expect(await codeOf(grant(4).listExecs())).toBe("OK");
      await g.send(restoredFor(id, 5).message);
      await g.next("guest_ready", 2);
      expect(await codeOf(grant(5).listExecs())).toBe("OK");
      expect(await codeOf(grant(4).listExecs())).toBe("CONTROL_UNAUTHORIZED");
      expect(g.invalid).toEqual([]);
    } finally {
      await g.close();
    }
  }, 120_000);
});
