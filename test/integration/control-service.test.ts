/**
 * The guest's control service (guest/control, Go) driven by the typed client
 * (src/client/control.ts) on loopback: the grant contract (grants signed by
 * src/protocol/connectionSignature.ts with real Ed25519 keys, refused by the
 * Go side with the same reason checkSignedGrant gives), exec (stdin by
 * offset, exit code, re-attach from an offset with 0 bytes lost, PTY
 * resize, the output bound), files (64 MiB both ways, 10,000 files by tar
 * both ways), confinement (PATH_ESCAPE) and the bounds (TOO_LARGE).
 *
 * Builds guest/cmd/control-dev with `go build` (Go from Debian's golang-go,
 * no module downloads) and runs it with -loopback-testing (the peer-address
 * check is covered by the Go unit tests). One server process for the file.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash, randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ControlClient } from "../../src/client/control.ts";
import type { GrantPayload, SignedGrant } from "../../src/protocol/connection.ts";
import {
  checkSignedGrant,
  connectionPublicKeyOf,
  signConnectionDocument,
} from "../../src/protocol/connectionSignature.ts";
import {
  CONTROL_GRANT_HEADER,
  GUEST_CONTROL_PORT,
  MAX_EXEC_ARGS,
  MAX_EXEC_ENV,
  MAX_EXEC_OUTPUT_BYTES,
  MAX_CONTROL_JSON_BODY_BYTES,
  MAX_CONTROL_PATH_BYTES,
  MAX_EXEC_STDIN_WRITE_BYTES,
} from "../../src/protocol/control.ts";
import {
  ExecList,
  ExecView,
  FileList,
  FileStat,
  MAX_EXECS,
  TarExtractResult,
  UploadState,
} from "../../src/protocol/control.ts";
import { BeachballError } from "../../src/protocol/errors.ts";
import { Value } from "@sinclair/typebox/value";
import * as controlProtocol from "../../src/protocol/control.ts";
import * as connectionProtocol from "../../src/protocol/connection.ts";
import { CONNECTION_CLOCK_SKEW_MS } from "../../src/protocol/connectionSignature.ts";
import { ERROR_STATUS } from "../../src/protocol/errors.ts";

/** Fails with the first schema error when the guest's answer is not the shape src/protocol/control.ts defines. */
function conforms(schema: Parameters<typeof Value.Check>[0], v: unknown): void {
  const err = Value.Errors(schema, v).First();
  expect(err ? `${err.path} ${err.message}` : "conforms").toBe("conforms");
}

const GO_ENV = { GOPROXY: "off", GOFLAGS: "-mod=mod", GOTOOLCHAIN: "local", CGO_ENABLED: "0" };
const ALLOC = `alloc_${"c".repeat(32)}`;
const GENERATION = 3;
const seed = randomBytes(32).toString("base64");
const otherSeed = randomBytes(32).toString("base64");
const dir = mkdtempSync(join(tmpdir(), "bb-control-"));
const root = join(dir, "root");
const keysPath = join(dir, "keys.json");
let proc: ReturnType<typeof Bun.spawn> | undefined;
let base = "";

function payload(over: Partial<GrantPayload> = {}): GrantPayload {
  const now = Date.now();
  return {
    v: 1,
    grantId: `grt_${"a".repeat(32)}`,
    tenant: "tenant-a",
    networkId: `net_${"b".repeat(32)}`,
    allocationId: ALLOC,
    generation: GENERATION,
    hostId: "host-1",
    clientPublicKey: `${"A".repeat(43)}=`,
    hostPublicKey: `${"B".repeat(43)}=`,
    clientAddress: "fd00::2",
    allocationAddress: "fd00::3",
    transport: "tcp",
    ports: [22, GUEST_CONTROL_PORT],
    policyRevision: 0,
    issuedAtMs: now - 1000,
    expiresAtMs: now + 600_000,
    ...over,
  };
}
const sign = (p: GrantPayload, s = seed, keyId = "k1"): SignedGrant => signConnectionDocument("grant", p, keyId, s);
const client = (g: SignedGrant | string = sign(payload())) => new ControlClient(base, g);

async function code(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    if (e instanceof BeachballError) return e.code;
    throw e;
  }
  return "OK";
}

async function collect(it: AsyncIterable<Uint8Array>): Promise<Buffer> {
  const parts: Uint8Array[] = [];
  for await (const c of it) parts.push(c);
  return Buffer.concat(parts);
}

beforeAll(async () => {
  mkdirSync(root, { recursive: true });
  const bin = join(dir, "control-dev");
  const build = Bun.spawnSync(["go", "build", "-o", bin, "./cmd/control-dev"], {
    cwd: join(import.meta.dir, "../../guest"),
    env: { ...process.env, ...GO_ENV, GOCACHE: process.env["GOCACHE"] ?? join(tmpdir(), "bb-go-cache") },
  });
  if (build.exitCode !== 0) throw new Error(`go build failed: ${build.stderr.toString()}`);
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
      keysPath,
      "-allocation",
    ].concat([ALLOC, "-generation", String(GENERATION), "-loopback-testing"]),
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

describe("the Go side's numbers are src/protocol's", () => {
  const goDir = join(import.meta.dir, "../../guest/control");
  test("every code the Go service answers has the status ERROR_STATUS gives it", () => {
    const text = readFileSync(join(goDir, "problem.go"), "utf8");
    const pairs = [...text.matchAll(/^\t"([A-Z_]+)":\s+(\d+),$/gm)].map((m) => [m[1]!, Number(m[2])]);
    expect(pairs.length).toBeGreaterThan(10);
    for (const [c, status] of pairs)
      expect({ c, status }).toEqual({ c, status: ERROR_STATUS[c as keyof typeof ERROR_STATUS] });
  });
  test("every bound in bounds.go that names a TS constant has its value", () => {
    const text = readFileSync(join(goDir, "bounds.go"), "utf8");
    const ts: Record<string, unknown> = { ...connectionProtocol, ...controlProtocol, CONNECTION_CLOCK_SKEW_MS };
    const found = [...text.matchAll(/\(([A-Z_]+)\)\.\n\t(\w+)\s+=\s+(.+)\n/g)];
    expect(found.length).toBeGreaterThan(20);
    for (const [, tsName, goName, expr] of found) {
      let v: unknown = expr!.startsWith('"')
        ? JSON.parse(expr!)
        : Function(`return ${expr!.replaceAll("time.Second", "1000").replace(/(\d+) << (\d+)/g, "($1 * 2 ** $2)")}`)();
      if (tsName!.endsWith("_SECONDS") && expr!.includes("time.Second")) v = (v as number) / 1000;
      expect({ goName, tsName, v }).toEqual({ goName, tsName, v: ts[tsName!] });
    }
  });
});

describe("grant contract (Go verifies what connectionSignature.ts signs)", () => {
  test("no keys yet is GUEST_NOT_READY; a control_config file then SIGHUP makes the keys trusted", async () => {
    expect(await code(client().listExecs())).toBe("GUEST_NOT_READY");
    writeFileSync(
      keysPath,
      JSON.stringify({ type: "control_config", verificationKeys: { k1: connectionPublicKeyOf(seed) } }),
    );
    process.kill(proc!.pid, "SIGHUP");
    for (let i = 0; i < 200 && (await code(client().listExecs())) === "GUEST_NOT_READY"; i++) await Bun.sleep(25);
    expect(await code(client().listExecs())).toBe("OK");
  });

  test("a good grant is accepted, including unicode and HTML characters in its tenant", async () => {
    expect(await code(client(sign(payload({ tenant: 'tënant <&> \u2028 😀 "q" \\' }))).listExecs())).toBe("OK");
  });

  test("each kind of bad grant is CONTROL_UNAUTHORIZED with the reason checkSignedGrant gives", async () => {
    const keys = new Map([["k1", connectionPublicKeyOf(seed)]]);
    const expectTs = {
      allocationId: ALLOC,
      generation: GENERATION,
      transport: "tcp" as const,
      port: GUEST_CONTROL_PORT,
    };
    const tampered = sign(payload());
    tampered.payload.tenant = "tenant-b";
    const unicodeTampered = sign(payload({ tenant: "tënant" }));
    unicodeTampered.payload.tenant = "tenant";
    const cases: Record<string, SignedGrant> = {
      wrongKey: sign(payload(), otherSeed),
      unknownKeyId: sign(payload(), seed, "k2"),
      allocation: sign(payload({ allocationId: `alloc_${"d".repeat(32)}` })),
      generation: sign(payload({ generation: GENERATION + 1 })),
      port: sign(payload({ ports: [22] })),
      transport: sign(payload({ transport: "udp" })),
      expired: sign(payload({ issuedAtMs: Date.now() - 60_000, expiresAtMs: Date.now() - 1 })),
      notYetValid: sign(payload({ issuedAtMs: Date.now() + 120_000, expiresAtMs: Date.now() + 600_000 })),
      tampered,
      unicodeTampered,
    };
    for (const [name, g] of Object.entries(cases)) {
      const ts = checkSignedGrant(g, keys, expectTs, Date.now());
      expect(ts.ok).toBe(false);
      const res = await fetch(`${base}/v1/execs`, { headers: { [CONTROL_GRANT_HEADER]: client(g).grantHeader } });
      const body = (await res.json()) as { code: string; extra: { grantCode: string } };
      expect({ name, status: res.status, code: body.code, grantCode: body.extra.grantCode }).toEqual({
        name,
        status: 401,
        code: "CONTROL_UNAUTHORIZED",
        grantCode: ts.ok ? "" : ts.code,
      });
    }
    expect((await fetch(`${base}/v1/execs`)).status).toBe(401);
    expect(await code(client("not-a-grant").listExecs())).toBe("CONTROL_UNAUTHORIZED");
  });
});

describe("exec", () => {
  test("stdin piped by offset (a retried write is a no-op) and exit code 7", async () => {
    const c = client();
    const e = await c.startExec({ shell: "cat; exit 7", stdin: true });
    const hello = new TextEncoder().encode("hello ");
    expect(await c.writeStdin(e.execId, 0, hello)).toBe(6);
    expect(await c.writeStdin(e.execId, 0, hello)).toBe(6); // the retry adds nothing
    expect(await c.writeStdin(e.execId, 3, new TextEncoder().encode("lo world"))).toBe(11);
    expect(await code(c.writeStdin(e.execId, 20, hello))).toBe("OFFSET_MISMATCH");
    await c.closeStdin(e.execId, 11);
    const done = await c.wait(e.execId);
    expect(done.exitCode).toBe(7);
    expect(done.state).toBe("exited");
    conforms(ExecView, done);
    conforms(ExecList, { execs: await c.listExecs() });
    expect(Buffer.from((await c.readOutput(e.execId)).bytes).toString()).toBe("hello world");
  });

  test("a streaming command's client is dropped; another re-attaches from its offset with 0 bytes lost", async () => {
    const out = join(root, "stream.out");
    const a = client();
    const e = await a.startExec({
      shell: `awk 'BEGIN { srand(); for (i = 0; i < 200000; i++) printf "line %d %d\\n", i, int(rand() * 1e9) }' | tee ${out}`,
    });
    const seen: Uint8Array[] = [];
    let offset = 0;
    for await (const chunk of a.followOutput(e.execId)) {
      seen.push(chunk.bytes);
      offset = chunk.offset + chunk.bytes.length;
      if (offset > 4096) break; // the first client goes away mid-stream
    }
    expect((await client().getExec(e.execId)).signal).toBeNull(); // detaching signalled nothing
    for await (const chunk of client().followOutput(e.execId, { fromOffset: offset })) {
      expect(chunk.offset).toBe(offset);
      seen.push(chunk.bytes);
      offset += chunk.bytes.length;
    }
    const got = createHash("sha256").update(Buffer.concat(seen)).digest("hex");
    expect(got).toBe(createHash("sha256").update(readFileSync(out)).digest("hex"));
    expect((await client().getExec(e.execId)).exitCode).toBe(0);
  });

  test("WebSocket attach: stdin and output frames with offsets; a dropped session re-attaches from its offset with 0 bytes lost", async () => {
    const c = client();
    const out = join(root, "ws.out");
    const e = await c.startExec({
      shell: `read l; echo "got $l"; awk 'BEGIN { for (i = 0; i < 100000; i++) printf "row %d\\n", i }' | tee ${out}`,
      stdin: true,
    });
    const first = c.attach(e.execId);
    first.stdin(0, new TextEncoder().encode("hi\n"), true);
    const seen: Uint8Array[] = [];
    let offset = 0;
    for await (const o of first.output) {
      expect(o.offset).toBe(offset);
      seen.push(o.bytes);
      offset += o.bytes.length;
      if (offset > 10_000) break;
    }
    first.detach();
    const second = c.attach(e.execId, { stdout: offset });
    for await (const o of second.output) {
      if (o.stream !== "stdout") continue;
      expect(o.offset).toBe(offset);
      seen.push(o.bytes);
      offset += o.bytes.length;
    }
    expect((await second.exited).exitCode).toBe(0);
    const all = Buffer.concat(seen);
    expect(all.subarray(0, 7).toString()).toBe("got hi\n");
    expect(createHash("sha256").update(all.subarray(7)).digest("hex")).toBe(
      createHash("sha256").update(readFileSync(out)).digest("hex"),
    );
  });

  test("a PTY resize is seen by stty size", async () => {
    const c = client();
    const e = await c.startExec({ shell: "stty size; read x; stty size", pty: { cols: 80, rows: 24 } });
    let text = "";
    let offset = 0;
    const until = async (want: string) => {
      while (!text.includes(want)) {
        const r = await c.readOutput(e.execId, { offset, waitMs: 5000 });
        text += Buffer.from(r.bytes).toString();
        offset += r.bytes.length;
        if (r.state === "exited" && r.bytes.length === 0) break;
      }
    };
    await until("24 80");
    await c.resize(e.execId, { cols: 100, rows: 40 });
    await c.writeStdin(e.execId, 0, new TextEncoder().encode("\n"));
    await until("40 100");
    expect(text).toContain("40 100");
    expect((await c.wait(e.execId)).exitCode).toBe(0);
  });

  test("output past MAX_EXEC_OUTPUT_BYTES is discarded and says OUTPUT_TRUNCATED", async () => {
    const c = client();
    const e = await c.startExec({ shell: `head -c ${MAX_EXEC_OUTPUT_BYTES + 1_000_000} /dev/zero` });
    const done = await c.wait(e.execId);
    expect(done.exitCode).toBe(0);
    expect(done.outputTruncated).toBe(true);
    expect(done.outputBytes["stdout"]).toBe(MAX_EXEC_OUTPUT_BYTES);
    expect(await code(c.readOutput(e.execId, { offset: MAX_EXEC_OUTPUT_BYTES }))).toBe("OUTPUT_TRUNCATED");
    await c.removeExec(e.execId);
    expect(await code(c.getExec(e.execId))).toBe("EXEC_NOT_FOUND");
  }, 120_000);

  test("another tenant's exec ID is EXEC_NOT_FOUND, as an unknown one", async () => {
    const mine = await client().startExec({ argv: ["sleep", "30"] });
    const other = client(sign(payload({ tenant: "tenant-b" })));
    expect(await code(other.getExec(mine.execId))).toBe("EXEC_NOT_FOUND");
    expect(await code(other.signal(mine.execId, "KILL"))).toBe("EXEC_NOT_FOUND");
    expect((await other.listExecs()).map((x) => x.execId)).not.toContain(mine.execId);
    await client().signal(mine.execId, "KILL");
    expect((await client().wait(mine.execId)).signal).toBe("KILL");
  });

  test("a timeout kills the process group", async () => {
    const c = client();
    const e = await c.startExec({ shell: "sleep 60 & sleep 60", timeoutSeconds: 1 });
    const done = await c.wait(e.execId);
    expect(done.timedOut).toBe(true);
    expect(done.signal).toBe("KILL");
  });
});

describe("files", () => {
  test("a 64 MiB file both ways byte-exact, checked by SHA-256", async () => {
    const c = client();
    const data = randomBytes(64 * 1024 * 1024);
    const sum = createHash("sha256").update(data).digest("hex");
    const st = await c.writeFile(join(root, "big.bin"), data);
    expect(st).toMatchObject({ complete: true, receivedBytes: data.length, sha256: sum });
    conforms(UploadState, st);
    conforms(FileStat, await c.stat(join(root, "big.bin")));
    expect((await c.stat(join(root, "big.bin"))).sizeBytes).toBe(data.length);
    const back = await collect(c.readFile(join(root, "big.bin")));
    expect(createHash("sha256").update(back).digest("hex")).toBe(sum);
    const part = await collect(c.readFile(join(root, "big.bin"), { range: [1000, 5000] }));
    expect(Buffer.compare(part, data.subarray(1000, 5000))).toBe(0);
  }, 120_000);

  test("an interrupted upload resumes at its offset; a wrong SHA-256 is CHECKSUM_MISMATCH", async () => {
    const c = client();
    const path = join(root, "resumed.bin");
    const data = randomBytes(3 * 1024 * 1024);
    const first = await fetch(`${base}/v1/files/content?${new URLSearchParams({ path, offset: "0" })}`, {
      method: "PUT",
      headers: { [CONTROL_GRANT_HEADER]: c.grantHeader },
      body: data.subarray(0, 1_000_000),
    });
    expect(first.status).toBe(200);
    expect((await c.uploadState(path)).receivedBytes).toBe(1_000_000);
    expect((await c.writeFile(path, data, { resume: true })).complete).toBe(true);
    expect((await c.sha256(path)).sha256).toBe(createHash("sha256").update(data).digest("hex"));
    const bad = await fetch(
      `${base}/v1/files/content?${new URLSearchParams({ path, offset: "0", sha256: "0".repeat(64) })}`,
      {
        method: "PUT",
        headers: { [CONTROL_GRANT_HEADER]: c.grantHeader },
        body: data,
      },
    );
    expect(((await bad.json()) as { code: string }).code).toBe("CHECKSUM_MISMATCH");
  });

  test("a tree of 10,000 files both ways by tar", async () => {
    const c = client();
    const src = join(dir, "tree-src");
    for (let d = 0; d < 100; d++) {
      mkdirSync(join(src, `d${d}`), { recursive: true });
      for (let f = 0; f < 100; f++) writeFileSync(join(src, `d${d}`, `f${f}`), `${d}/${f} ${"x".repeat(f)}`);
    }
    const tarIn = Bun.spawnSync(["tar", "-C", src, "-cf", "-", "."]).stdout;
    const res = await c.writeTar(join(root, "tree"), tarIn, {
      sha256: createHash("sha256").update(tarIn).digest("hex"),
    });
    expect(res.entries).toBe(10_000 + 101);
    conforms(TarExtractResult, res);
    const back = await collect(c.readTar(join(root, "tree")));
    const out = join(dir, "tree-out");
    mkdirSync(out);
    expect(Bun.spawnSync(["tar", "-C", out, "-xf", "-"], { stdin: back }).exitCode).toBe(0);
    const digest = (t: string) => {
      const h = createHash("sha256");
      for (const d of readdirSync(t).sort())
        for (const f of readdirSync(join(t, d)).sort()) h.update(`${d}/${f}\0`).update(readFileSync(join(t, d, f)));
      return h.digest("hex");
    };
    expect(readdirSync(out).length).toBe(100);
    expect(digest(out)).toBe(digest(src));
    const listing = await c.list(join(root, "tree", "d7"));
    expect(listing.entries.length).toBe(100);
    conforms(FileList, listing);
  }, 120_000);

  test("mkdir, move, remove", async () => {
    const c = client();
    await c.mkdir(join(root, "m/a/b"), { parents: true });
    expect(await code(c.mkdir(join(root, "m/a")))).toBe("FILE_EXISTS");
    await c.writeFile(join(root, "m/a/b/f"), new TextEncoder().encode("x"));
    await c.move({ from: join(root, "m/a/b/f"), to: join(root, "m/g") });
    expect((await c.stat(join(root, "m/g"))).kind).toBe("file");
    expect(await code(c.remove(join(root, "m")))).toBe("FILE_EXISTS");
    await c.remove(join(root, "m"), { recursive: true });
    expect(await code(c.stat(join(root, "m")))).toBe("FILE_NOT_FOUND");
  });

  test("path escapes (../, an absolute symlink, a symlink in a tar, a path outside the roots) are PATH_ESCAPE", async () => {
    const c = client();
    symlinkSync("/etc", join(root, "etc-link"));
    symlinkSync("../../..", join(root, "up-link"));
    expect(await code(c.stat(`${root}/../${root.split("/").pop()}/x`))).toBe("PATH_ESCAPE");
    expect(await code(c.stat("/etc/passwd"))).toBe("PATH_ESCAPE");
    expect(await code(collect(c.readFile(join(root, "etc-link/passwd"))))).toBe("PATH_ESCAPE");
    expect(await code(collect(c.readFile(join(root, "up-link/etc/passwd"))))).toBe("PATH_ESCAPE");
    expect(await code(c.writeFile(join(root, "etc-link/evil"), new Uint8Array(1)))).toBe("PATH_ESCAPE");
    expect(await code(c.list(join(root, "etc-link")))).toBe("PATH_ESCAPE");
    expect(await code(collect(c.readTar(join(root, "etc-link/ssl"))))).toBe("PATH_ESCAPE");
    const linkOnly = await collect(c.readTar(join(root, "etc-link"))); // the link itself, never followed
    expect(Bun.spawnSync(["tar", "-tvf", "-"], { stdin: linkOnly }).stdout.toString()).toContain("etc-link -> /etc");
    const evil = join(dir, "evil-src");
    mkdirSync(evil);
    symlinkSync("/etc", join(evil, "link"));
    const tarLink = Bun.spawnSync(["tar", "-C", evil, "-cf", "-", "link"]).stdout;
    expect(await code(c.writeTar(join(root, "x1"), tarLink))).toBe("PATH_ESCAPE");
    writeFileSync(join(dir, "dotdot"), "x");
    const tarDotDot = Bun.spawnSync(["tar", "-C", evil, "-P", "-cf", "-", "../dotdot"]).stdout;
    expect(await code(c.writeTar(join(root, "x2"), tarDotDot))).toBe("PATH_ESCAPE");
    // Through a symlink an earlier tar made inside the tree, a later one cannot write out.
    expect(await code(c.writeTar(join(root, "etc-link"), tarLink))).toBe("PATH_ESCAPE");
  });
});

describe("bounds are TOO_LARGE", () => {
  test("argv, env, a stdin write, a JSON body, a path", async () => {
    const c = client();
    expect(await code(c.startExec({ argv: Array(MAX_EXEC_ARGS + 1).fill("x") }))).toBe("TOO_LARGE");
    const env = Object.fromEntries(Array.from({ length: MAX_EXEC_ENV + 1 }, (_, i) => [`V${i}`, "x"]));
    expect(await code(c.startExec({ argv: ["true"], env }))).toBe("TOO_LARGE");
    const e = await c.startExec({ argv: ["cat"], stdin: true });
    const big = await fetch(`${base}/v1/execs/${e.execId}/stdin?offset=0`, {
      method: "POST",
      headers: { [CONTROL_GRANT_HEADER]: c.grantHeader },
      body: new Uint8Array(MAX_EXEC_STDIN_WRITE_BYTES + 1),
    });
    expect(((await big.json()) as { code: string }).code).toBe("TOO_LARGE");
    await c.closeStdin(e.execId, (await c.getExec(e.execId)).stdinOffset);
    const body = await fetch(`${base}/v1/execs`, {
      method: "POST",
      headers: { [CONTROL_GRANT_HEADER]: c.grantHeader, "content-type": "application/json" },
      body: JSON.stringify({ shell: "true", env: { A: "x".repeat(MAX_CONTROL_JSON_BODY_BYTES) } }),
    });
    expect(((await body.json()) as { code: string }).code).toBe("TOO_LARGE");
    expect(await code(c.stat(`${root}/${"a".repeat(MAX_CONTROL_PATH_BYTES)}`))).toBe("TOO_LARGE");
  });

  test("requests in flight past MAX_CONTROL_CONCURRENT_REQUESTS are CONCURRENCY_LIMITED", async () => {
    const c = client();
    const e = await c.startExec({ argv: ["sleep", "60"] });
    const abort = new AbortController();
    const parked = Array.from({ length: controlProtocol.MAX_CONTROL_CONCURRENT_REQUESTS }, () =>
      fetch(`${base}/v1/execs/${e.execId}/output?offset=0&waitMs=20000`, {
        headers: { [CONTROL_GRANT_HEADER]: c.grantHeader },
        signal: abort.signal,
      }).catch(() => null),
    );
    let refused = "";
    for (let i = 0; i < 200 && refused !== "CONCURRENCY_LIMITED"; i++) {
      refused = await code(c.getExec(e.execId));
      if (refused === "OK") await Bun.sleep(10);
    }
    expect(refused).toBe("CONCURRENCY_LIMITED");
    abort.abort();
    await Promise.all(parked);
    // The aborts are the client's: the service frees its slots once it sees each connection close, a moment later.
    for (let i = 0; i < 200 && (await code(c.getExec(e.execId))) !== "OK"; i++) await Bun.sleep(10);
    await c.signal(e.execId, "KILL");
    expect((await c.wait(e.execId)).signal).toBe("KILL");
  });

  test("the count of kept execs (MAX_EXECS)", async () => {
    const c = client();
    const started: string[] = [];
    let refused = "";
    for (let i = 0; i <= MAX_EXECS && !refused; i++) {
      try {
        started.push((await c.startExec({ argv: ["true"] })).execId);
      } catch (e) {
        refused = e instanceof BeachballError ? e.code : String(e);
      }
    }
    expect(refused).toBe("TOO_LARGE");
    for (const id of started) {
      await c.wait(id);
      await c.removeExec(id);
    }
    expect(await code(c.startExec({ argv: ["true"] }))).toBe("OK");
  }, 120_000);
});
