/**
 * Exec and file throughput through the control service (issue 20,
 * "Benchmarks"), against the same over `ssh` through `bb proxy` to the same
 * VM, in one run. The world is test/support/execWorld.ts (the NAT
 * topology, a real scheduler, agent and QEMU VM of the Debian sshd image,
 * its payload Debian's sshd with a key pair made here):
 *
 * - ours: bench/children/execClient.ts in the laptop namespace, one
 *   control channel (grant, in-process tunnel), ROUNDS round trips of
 *   `true` (start, output to its end, the exit status) and a MIB MiB file
 *   up and down (ControlClient.writeFile / readFile, SHA-256 checked);
 * - ssh: `bb proxy` to port 22 in the same namespace, one ssh master
 *   connection (ControlMaster), ROUNDS `ssh true` over it (each a new ssh
 *   client process multiplexed on the open connection) and `scp` of the
 *   same size both ways over it.
 *
 * Prints the median round trip and MiB/s each way, and the ratios
 * ours / ssh. Ends on its own (RUN_SECONDS, bench/support/runLimit.ts). Needs root,
 * QEMU, squashfs-tools, nft, ssh/scp/ssh-keygen; prints why and exits 0
 * otherwise. Run under `flock /tmp/bb-heavy.lock`.
 *
 *   bun bench/exec.ts [--rounds 20] [--mib 32]
 */
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { sshdPayload } from "../test/support/debianOci.ts";
import { startExecWorld, vmTestSkipReason, type ExecWorld } from "../test/support/execWorld.ts";
import { must } from "../test/support/netns.ts";
import { tail, waitUntil } from "../test/support/processes.ts";
import { limitRunTime } from "./support/runLimit.ts";

/** Longest the whole benchmark may take, seconds. */
const RUN_SECONDS = 1200;
limitRunTime("bench/exec.ts", RUN_SECONDS);

const { values } = parseArgs({
  options: { rounds: { type: "string", default: "20" }, mib: { type: "string", default: "32" } },
});
const ROUNDS = Number(values.rounds);
const MIB = Number(values.mib);
const BUN = resolve("node_modules/.bin/bun");

const skip = vmTestSkipReason() ?? (!Bun.which("ssh") || !Bun.which("scp") ? "openssh-client missing" : null);
if (skip) {
  console.log(`bench/exec.ts: skipped (${skip})`);
  process.exit(0);
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const mibps = (ms: number) => MIB / (ms / 1000);

let world: ExecWorld | undefined;
let proxy: ReturnType<typeof Bun.spawn> | undefined;
const keyDir = mkdtempSync("/tmp/bb-bench-exec-keys-");
try {
  const key = join(keyDir, "id_ed25519");
  must(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bench", "-f", key]);
  must(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "vm", "-f", join(keyDir, "host_key")]);
  world = await startExecWorld({
    name: "bench-exec",
    payload: sshdPayload(readFileSync(`${key}.pub`, "utf8"), readFileSync(join(keyDir, "host_key"), "utf8")),
    log: (m) => console.log(`bench/exec.ts: ${m}`),
  });
  const w = world;
  await waitUntil(
    "sshd listening in the VM",
    async () => /Server listening on \S+ port 22/.test((await w.controller.logs(w.allocationId, 0)).text),
    120_000,
    [w.agentLog],
  );

  // Ours.
  const child = Bun.spawn(
    w.laptop.exec([BUN, resolve("bench/children/execClient.ts"), w.allocationId, String(ROUNDS), String(MIB)]),
    {
      stdout: "pipe",
      stderr: "pipe",
      env: w.bbEnv(w.ownerToken),
    },
  );
  const [cout, cerr, ccode] = await Promise.all([
    new Response(child.stdout).text(),
    new Response(child.stderr).text(),
    child.exited,
  ]);
  if (ccode !== 0) throw new Error(`execClient exited ${ccode}: ${cerr.slice(-2000)}`);
  const ours = JSON.parse(cout.trim().split("\n").pop()!) as { execMs: number[]; upMs: number; downMs: number };

  // ssh through bb proxy, one master connection.
  const log = join(w.work, "proxy.log");
  const fd = openSync(log, "a");
  proxy = Bun.spawn(
    w.laptop.exec([BUN, resolve("bin/bb.ts"), "proxy", w.allocationId, "--local-port", "2222", "--remote-port", "22"]),
    {
      stdout: fd,
      stderr: fd,
      stdin: "ignore",
      env: w.bbEnv(w.ownerToken),
    },
  );
  closeSync(fd);
  await waitUntil("bb proxy listening", async () => /listening on 127\.0\.0\.1:2222/.test(tail(log)), 60_000, [log]);
  const hostKey = readFileSync(join(keyDir, "host_key.pub"), "utf8").trim().split(" ").slice(0, 2).join(" ");
  const knownHosts = join(keyDir, "known_hosts");
  writeFileSync(knownHosts, `[127.0.0.1]:2222 ${hostKey}\n`);
  const sock = join(keyDir, "mux");
  const sshOpts = ["-F", "/dev/null", "-i", key, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"].concat([
    "-o",
    `UserKnownHostsFile=${knownHosts}`,
    "-o",
    "StrictHostKeyChecking=yes",
    "-o",
    "LogLevel=ERROR",
    "-o",
    `ControlPath=${sock}`,
  ]);
  const run = (argv: string[]) => {
    const r = Bun.spawnSync(w.laptop.exec(argv), { stdout: "pipe", stderr: "pipe" });
    if (r.exitCode !== 0) throw new Error(`${argv[0]} exited ${r.exitCode}: ${r.stderr.toString()}`);
  };
  run([
    "ssh",
    ...sshOpts,
    "-p",
    "2222",
    "-o",
    "ControlMaster=yes",
    "-o",
    "ControlPersist=600",
    "-fN",
    "root@127.0.0.1",
  ]);
  run(["ssh", ...sshOpts, "-p", "2222", "root@127.0.0.1", "true"]); // warm-up
  const sshMs: number[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    const t = performance.now();
    run(["ssh", ...sshOpts, "-p", "2222", "root@127.0.0.1", "true"]);
    sshMs.push(performance.now() - t);
  }
  const file = join(keyDir, "bench.bin");
  must(["dd", "if=/dev/urandom", `of=${file}`, "bs=1M", `count=${MIB}`, "status=none"]);
  let t = performance.now();
  run(["scp", ...sshOpts, "-P", "2222", file, "root@127.0.0.1:/root/bench-ssh.bin"]);
  const sshUp = performance.now() - t;
  t = performance.now();
  run(["scp", ...sshOpts, "-P", "2222", "root@127.0.0.1:/root/bench-ssh.bin", `${file}.back`]);
  const sshDown = performance.now() - t;
  run(["ssh", ...sshOpts, "-p", "2222", "-O", "exit", "root@127.0.0.1"]);

  const o = median(ours.execMs);
  const s = median(sshMs);
  console.log(
    `bench/exec.ts: ${ROUNDS} rounds, ${MIB} MiB, one VM under ${process.env["BB_KVM"] ? "KVM" : "QEMU (TCG here)"}`,
  );
  console.log(
    `exec true round trip (median): ours ${o.toFixed(1)} ms, ssh ${s.toFixed(1)} ms, ours/ssh ${(o / s).toFixed(2)}`,
  );
  console.log(
    `upload: ours ${mibps(ours.upMs).toFixed(2)} MiB/s, scp ${mibps(sshUp).toFixed(2)} MiB/s, ours/scp ${(mibps(ours.upMs) / mibps(sshUp)).toFixed(2)}`,
  );
  console.log(
    `download: ours ${mibps(ours.downMs).toFixed(2)} MiB/s, scp ${mibps(sshDown).toFixed(2)} MiB/s, ours/scp ${(mibps(ours.downMs) / mibps(sshDown)).toFixed(2)}`,
  );
} finally {
  if (proxy && proxy.exitCode === null) {
    proxy.kill("SIGTERM");
    await proxy.exited;
  }
  await world?.stop();
  rmSync(keyDir, { recursive: true, force: true });
}
