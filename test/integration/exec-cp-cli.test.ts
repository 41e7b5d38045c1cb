/**
 * What `bb exec` and `bb cp` do once their control client is open
 * (src/proxy/execRun.ts, src/proxy/cpRun.ts), against the real control
 * service (guest/cmd/control-dev, Go) on loopback: stdin piped and the exit
 * code passed through, re-attaching from an offset with 0 bytes lost, a
 * PTY resized, files and trees both ways byte-exact, and the refusals'
 * stable codes (PATH_ESCAPE, EXEC_NOT_FOUND for a foreign tenant) with the
 * CLI's exit codes. The path through the tunnel and the scheduler is
 * test/e2e's (a QEMU guest); here the grant is signed locally.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash, randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { ControlClient } from "../../src/client/control.ts";
import { exitCodeFor } from "../../src/command/run.ts";
import type { GrantPayload } from "../../src/protocol/connection.ts";
import { connectionPublicKeyOf, signConnectionDocument } from "../../src/protocol/connectionSignature.ts";
import { GUEST_CONTROL_PORT } from "../../src/protocol/control.ts";
import { BeachballError } from "../../src/protocol/errors.ts";
import { copyIn, copyInTar, copyOut, copyOutTar, parseCpOperand } from "../../src/proxy/cpRun.ts";
import { exitCodeOf, followExec, runExec, type ExecIo } from "../../src/proxy/execRun.ts";

const GO_ENV = { GOPROXY: "off", GOFLAGS: "-mod=mod", GOTOOLCHAIN: "local", CGO_ENABLED: "0" };
const ALLOC = `alloc_${"d".repeat(32)}`;
const seed = randomBytes(32).toString("base64");
const dir = mkdtempSync(join(tmpdir(), "bb-execcp-"));
const root = join(dir, "root");
let proc: ReturnType<typeof Bun.spawn> | undefined;
let base = "";

function grant(tenant = "tenant-a") {
  const now = Date.now();
  const p: GrantPayload = {
    v: 1,
    grantId: `grt_${"a".repeat(32)}`,
    tenant,
    networkId: `net_${"b".repeat(32)}`,
    allocationId: ALLOC,
    generation: 1,
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
  return signConnectionDocument("grant", p, "k1", seed);
}
const client = (tenant?: string) => new ControlClient(base, grant(tenant));

/** An ExecIo that collects the output in memory. */
function memoryIo(stdin: Uint8Array[] | null) {
  const out: Uint8Array[] = [];
  const err: Uint8Array[] = [];
  const io: ExecIo = {
    stdin: stdin
      ? (async function* () {
          yield* stdin;
        })()
      : null,
    stdout: async (b) => void out.push(b),
    stderr: async (b) => void err.push(b),
  };
  return { io, out: () => Buffer.concat(out), err: () => Buffer.concat(err) };
}

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    if (e instanceof BeachballError) return e.code;
    throw e;
  }
  return "OK";
}

beforeAll(async () => {
  mkdirSync(root, { recursive: true });
  const bin = join(dir, "control-dev");
  const build = Bun.spawnSync(["go", "build", "-o", bin, "./cmd/control-dev"], {
    cwd: join(import.meta.dir, "../../guest"),
    env: { ...process.env, ...GO_ENV, GOCACHE: process.env["GOCACHE"] ?? join(tmpdir(), "bb-go-cache") },
  });
  if (build.exitCode !== 0) throw new Error(`go build failed: ${build.stderr.toString()}`);
  const keys = join(dir, "keys.json");
  writeFileSync(
    keys,
    JSON.stringify({ type: "control_config", verificationKeys: { k1: connectionPublicKeyOf(seed) } }),
  );
  proc = Bun.spawn(
    [
      bin,
      "-listen",
      "127.0.0.1:0",
      "-roots",
      root,
      "-run-dir",
      join(dir, "run"),
      "-keys",
      keys,
      "-allocation",
      ALLOC,
    ].concat(["-generation", "1", "-loopback-testing"]),
    { stdout: "pipe", stderr: "inherit" },
  );
  const reader = (proc.stdout as ReadableStream<Uint8Array>).getReader();
  let text = "";
  while (!text.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) throw new Error("control-dev exited before listening");
    text += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  base = `http://${text.trim().split(" ")[1]}`;
}, 180_000);

afterAll(() => {
  if (proc) process.kill(proc.pid, "SIGTERM");
  rmSync(dir, { recursive: true, force: true });
});

describe("bb exec", () => {
  test("stdin is piped, stdout and stderr come back apart, the exit code passes through", async () => {
    const m = memoryIo([Buffer.from("hello "), Buffer.from("world\n")]);
    const view = await runExec(client(), { argv: ["sh", "-c", "cat; echo oops >&2; exit 7"] }, m.io);
    expect(m.out().toString()).toBe("hello world\n");
    expect(m.err().toString()).toBe("oops\n");
    expect(exitCodeOf(view)).toBe(7);
  });

  test("a signal's exit code is 128 + its number, as the shell gives it", async () => {
    const view = await runExec(client(), { argv: ["sh", "-c", "kill -TERM $$"] }, memoryIo(null).io);
    expect(exitCodeOf(view)).toBe(128 + 15);
  });

  test("a re-attach from the offset already seen loses nothing (SHA-256 of the whole output)", async () => {
    const c = client();
    const started = await c.startExec({
      argv: ["sh", "-c", "i=0; while [ $i -lt 3000 ]; do echo line-$i; i=$((i+1)); done"],
    });
    // The first client takes some bytes and dies; a second follows from there.
    const first = await c.readOutput(started.execId, { stream: "stdout", offset: 0, waitMs: 5000, maxBytes: 1000 });
    const m = memoryIo(null);
    const done = await followExec(client(), await c.getExec(started.execId), m.io, { stdout: first.bytes.length });
    const whole = Buffer.concat([first.bytes, m.out()]);
    let want = "";
    for (let i = 0; i < 3000; i++) want += `line-${i}\n`;
    expect(createHash("sha256").update(whole).digest("hex")).toBe(createHash("sha256").update(want).digest("hex"));
    expect(exitCodeOf(done)).toBe(0);
  });

  test("a PTY follows the terminal's resize", async () => {
    let resize: (() => void) | null = null;
    let size = { cols: 80, rows: 24 };
    const m = memoryIo(null);
    const io: ExecIo = {
      ...m.io,
      size: () => size,
      onResize: (on) => {
        resize = on;
        return () => (resize = null);
      },
    };
    const c = client();
    const run = runExec(c, { argv: ["sh", "-c", "stty size; sleep 1; stty size"], pty: size }, io);
    for (let i = 0; i < 200 && !m.out().toString().includes("24 80"); i++) await Bun.sleep(10);
    size = { cols: 132, rows: 50 };
    (resize as unknown as () => void)();
    const view = await run;
    expect(m.out().toString()).toContain("24 80");
    expect(m.out().toString()).toContain("50 132");
    expect(exitCodeOf(view)).toBe(0);
  });

  test("another tenant's exec is EXEC_NOT_FOUND, as if it did not exist", async () => {
    const mine = await client().startExec({ argv: ["true"] });
    expect(await codeOf(followExec(client("tenant-b"), mine, memoryIo(null).io))).toBe("EXEC_NOT_FOUND");
    expect(await codeOf(client("tenant-b").getExec(mine.execId))).toBe("EXEC_NOT_FOUND");
  });

  test("a refused grant is exit 4 (credentials), like the scheduler's UNAUTHENTICATED", () => {
    expect(exitCodeFor(new BeachballError("CONTROL_UNAUTHORIZED", "x"))).toBe(4);
    expect(exitCodeFor(new BeachballError("PATH_ESCAPE", "x"))).toBe(1);
  });
});

describe("bb cp", () => {
  test("ALLOC:PATH is remote, anything else local", () => {
    expect(parseCpOperand(`${ALLOC}:/srv/x`)).toEqual({ kind: "remote", allocation: ALLOC, path: "/srv/x" });
    expect(parseCpOperand("alloc_12:/x")).toEqual({ kind: "remote", allocation: "alloc_12", path: "/x" });
    expect(parseCpOperand("./a:b")).toEqual({ kind: "local", path: "./a:b" });
    expect(parseCpOperand("/tmp/x")).toEqual({ kind: "local", path: "/tmp/x" });
    expect(parseCpOperand("-")).toEqual({ kind: "stream" });
    expect(parseCpOperand("./-")).toEqual({ kind: "local", path: "./-" });
  });

  test("- is a tar stream: one read from stdin goes in checked, the tree comes out as tar (docker cp's form)", async () => {
    const tree = join(dir, "streamtree");
    mkdirSync(join(tree, "a", "b"), { recursive: true });
    writeFileSync(join(tree, "a", "one.txt"), "one\n");
    writeFileSync(join(tree, "a", "b", "two.bin"), randomBytes(300_000));
    const tarIn = Bun.spawnSync(["tar", "-c", "-C", tree, "."], { stdout: "pipe" }).stdout;
    mkdirSync(join(root, "streamed"), { recursive: true });
    // Fed in small pieces, as a pipe would.
    async function* pieces() {
      for (let i = 0; i < tarIn.length; i += 4096) yield tarIn.subarray(i, i + 4096);
    }
    const put = await copyInTar(client(), pieces(), join(root, "streamed"));
    expect(put.entries).toBeGreaterThanOrEqual(4);
    expect(readFileSync(join(root, "streamed", "a", "one.txt"), "utf8")).toBe("one\n");
    expect(
      readFileSync(join(root, "streamed", "a", "b", "two.bin")).equals(readFileSync(join(tree, "a", "b", "two.bin"))),
    ).toBe(true);
    const chunks: Uint8Array[] = [];
    const sink = new Writable({
      write(c: Buffer, _e, cb) {
        chunks.push(c);
        cb();
      },
    });
    const out = await copyOutTar(client(), join(root, "streamed"), sink);
    const back = join(dir, "streamback");
    mkdirSync(back);
    const x = Bun.spawnSync(["tar", "-x", "-C", back], { stdin: Buffer.concat(chunks), stderr: "pipe" });
    expect(`${x.exitCode} ${x.stderr}`).toBe("0 ");
    expect(out.bytes).toBe(Buffer.concat(chunks).length);
    expect(readFileSync(join(back, "a", "b", "two.bin")).equals(readFileSync(join(tree, "a", "b", "two.bin")))).toBe(
      true,
    );
    // Not a tar: the guest refuses it with a stable code and makes nothing.
    async function* junk() {
      yield randomBytes(2048);
    }
    expect(await codeOf(copyInTar(client(), junk(), join(root, "streamed")))).toMatch(/^[A-Z_]+$/);
  });

  test("a file goes in and comes back byte-exact, into a directory under its own name", async () => {
    const local = join(dir, "big.bin");
    const bytes = randomBytes(20 * 1024 * 1024 + 3);
    writeFileSync(local, bytes, { mode: 0o640 });
    mkdirSync(join(root, "in"), { recursive: true });
    const put = await copyIn(client(), local, join(root, "in"));
    expect(put.path).toBe(join(root, "in", "big.bin"));
    expect(readFileSync(join(root, "in", "big.bin")).equals(bytes)).toBe(true);
    const back = join(dir, "back.bin");
    await copyOut(client(), join(root, "in", "big.bin"), back);
    expect(readFileSync(back).equals(bytes)).toBe(true);
    expect(statSync(back).mode & 0o777).toBe(0o640);
  });

  test("a tree of many files goes in and comes back byte-exact", async () => {
    const tree = join(dir, "tree");
    for (let d = 0; d < 10; d++) {
      mkdirSync(join(tree, `d${d}`, "sub"), { recursive: true });
      for (let f = 0; f < 50; f++) writeFileSync(join(tree, `d${d}`, f % 2 ? "sub" : "", `f${f}`), `${d}/${f}\n`);
    }
    const r = await copyIn(client(), tree, join(root, "treecopy"));
    expect(r.entries).toBe(10 * 50 + 20);
    const out = join(dir, "treeback");
    await copyOut(client(), join(root, "treecopy"), out);
    const list = (p: string): string[] =>
      readdirSync(p, { recursive: true, encoding: "utf8" })
        .sort()
        .map((n) => {
          const st = statSync(join(p, n));
          return st.isDirectory() ? `${n}/` : `${n}=${readFileSync(join(p, n), "utf8")}`;
        });
    expect(list(out)).toEqual(list(tree));
    expect(list(out).length).toBe(10 * 50 + 20);
  });

  test("a path outside the allowed roots is PATH_ESCAPE, both ways", async () => {
    const local = join(dir, "small.txt");
    writeFileSync(local, "x");
    expect(await codeOf(copyIn(client(), local, "/etc/bb-escape"))).toBe("PATH_ESCAPE");
    expect(await codeOf(copyIn(client(), local, `${root}/../escape`))).toBe("PATH_ESCAPE");
    expect(await codeOf(copyOut(client(), "/etc/passwd", join(dir, "passwd")))).toBe("PATH_ESCAPE");
  });
});
