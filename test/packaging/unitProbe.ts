/**
 * Sandbox probe for test/packaging/install.test.ts. The test runs it inside
 * the booted test container with the installed `bb` acting as Bun
 * (BUN_BE_BUN=1), once unconfined as a baseline and once in place of each
 * packaged unit's ExecStart (a runtime drop-in keeps every other setting of
 * the unit), and compares the two.
 *
 * It only reports what it could and could not do, as one JSON object on
 * stdout; it asserts nothing. Usage: `bb unitProbe.ts ROLE PREFIX` where
 * ROLE is baseline|scheduler|agent|relay and PREFIX names what it creates
 * (a network namespace, a cgroup, files), all of which it removes again
 * except the namespace, which the test looks for from outside and deletes.
 * Must never touch anything outside the container it runs in.
 */
import {
  closeSync,
  mkdirSync,
  openSync,
  readFileSync,
  readdirSync,
  rmdirSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";

const [role = "baseline", prefix = "bbpkg"] = process.argv.slice(2);

/** "ok" or the error code of `fn`. */
function attempt(fn: () => void): string {
  try {
    fn();
    return "ok";
  } catch (e) {
    return (e as NodeJS.ErrnoException).code ?? (e as Error).message;
  }
}

async function attemptAsync(fn: () => Promise<void>): Promise<string> {
  try {
    await fn();
    return "ok";
  } catch (e) {
    return (e as NodeJS.ErrnoException).code ?? (e as Error).message;
  }
}

function run(argv: string[]): string {
  const p = Bun.spawnSync(argv, { stdout: "pipe", stderr: "pipe" });
  return p.exitCode === 0 ? "ok" : `exit ${p.exitCode}: ${p.stderr.toString().trim().slice(0, 200)}`;
}

const status = readFileSync("/proc/self/status", "utf8");
const field = (name: string) => new RegExp(`^${name}:\\s*(\\S+)`, "m").exec(status)?.[1] ?? "";

const report: Record<string, unknown> = {
  role,
  uid: process.getuid?.(),
  capEff: field("CapEff"),
  noNewPrivs: field("NoNewPrivs"),
};

// What it can read.
const read: Record<string, string> = {};
for (const p of ["/var/lib/beachball/agent.json", "/var/lib/beachball/credential", "/etc/beachball/manifest.json"])
  read[p] = attempt(() => void readFileSync(p));
read["/var/lib"] = attempt(() => {
  if (!readdirSync("/var/lib").includes("dpkg")) throw Object.assign(new Error("empty"), { code: "HIDDEN" });
});
report.read = read;

// Where it can create a file.
const write: Record<string, string> = {};
for (const dir of [
  "/etc",
  "/usr/local",
  "/var/lib",
  "/var/lib/beachball",
  "/var/lib/beachball-scheduler",
  "/var/tmp",
]) {
  const f = join(dir, `${prefix}-${role}-probe`);
  write[dir] = attempt(() => {
    writeFileSync(f, "x");
    unlinkSync(f);
  });
}
report.write = write;

// Devices.
report.devices = {
  "/dev/net/tun": attempt(() => closeSync(openSync("/dev/net/tun", "r+"))),
  "/dev/kvm": attempt(() => closeSync(openSync("/dev/kvm", "r+"))),
};

// Ports: 443 (the relay's), 9443 (its health port), 8443 (nobody's).
const bind: Record<string, string> = {};
for (const port of [443, 9443, 8443])
  bind[`tcp:${port}`] = attempt(() => Bun.listen({ hostname: "127.0.0.1", port, socket: { data() {} } }).stop(true));
bind["udp:443"] = await attemptAsync(async () => (await Bun.udpSocket({ hostname: "127.0.0.1", port: 443 })).close());
report.bind = bind;

if (role === "agent" || role === "baseline") {
  // A device node the unit does not allow (loop0, block 7:0), made in the state directory.
  const node = `/var/lib/beachball/${prefix}-blk`;
  const made = run(["mknod", node, "b", "7", "0"]);
  report.blockDevice = made === "ok" ? attempt(() => closeSync(openSync(node, "r"))) : `mknod ${made}`;
  attempt(() => unlinkSync(node));

  // A network namespace the way `ip netns add` pins it (left for the test to find from outside).
  const ns = `${prefix}-${role}`;
  report.netnsAdd = run(["ip", "netns", "add", ns]);
  report.netnsSysctl = run(["ip", "netns", "exec", ns, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"]);
  report.netnsNft = run(["ip", "netns", "exec", ns, "nft", "add table inet bbpkg_probe"]);
  report.tap = run(["ip", "-n", ns, "tuntap", "add", "dev", "bbpkgtap0", "mode", "tap"]);

  // A child of its own cgroup in the unified hierarchy (the delegated subtree).
  const own = /^0::(\S+)$/m.exec(readFileSync("/proc/self/cgroup", "utf8"))?.[1] ?? "/";
  const mount = readFileSync("/proc/self/mountinfo", "utf8")
    .split("\n")
    .find((l) => l.split(" - ")[1]?.startsWith("cgroup2 "))
    ?.split(" ")[4];
  const child = mount ? join(mount, own, `${prefix}-cg`) : "";
  report.cgroupChild = mount ? attempt(() => mkdirSync(child)) : "no cgroup2 mount";
  if (report.cgroupChild === "ok") attempt(() => rmdirSync(child));
}

console.log(JSON.stringify(report));
