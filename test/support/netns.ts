/**
 * Network namespaces for tests: create one with a unique name, run commands
 * in it, delete it by name. Every helper throws with the command's stderr on
 * failure. Tests name their namespaces with a prefix of their own and delete
 * them in afterAll, so nothing is left behind even when a test fails.
 */

/** Runs `cmd`, returns its exit code, stdout and stderr (never throws). */
export function sh(cmd: string[]): { code: number; out: string; err: string } {
  const r = Bun.spawnSync(cmd, { stdout: "pipe", stderr: "pipe" });
  return { code: r.exitCode ?? -1, out: r.stdout.toString(), err: r.stderr.toString() };
}

/** Runs `cmd` and returns stdout; throws with stderr when it exits non-zero. */
export function must(cmd: string[]): string {
  const r = sh(cmd);
  if (r.code !== 0) throw new Error(`${cmd.join(" ")} exited ${r.code}: ${r.err.trim()}`);
  return r.out;
}

/** Why namespace tests cannot run here (not root, no ip), or null. */
export function netnsSkipReason(): string | null {
  if (process.getuid?.() !== 0) return "needs root (network namespaces, TUN devices)";
  if (!Bun.which("ip")) return "iproute2 is not installed (apt-get install -y iproute2)";
  return null;
}

/** A network namespace made by a test; `delete()` removes it (idempotent). */
export class Netns {
  /** Creates namespace `name` with loopback up. Throws if it exists. */
  constructor(readonly name: string) {
    must(["ip", "netns", "add", name]);
    this.ip("link", "set", "lo", "up");
  }

  /** `ip -n NAME ARGS…`; throws on failure. */
  ip(...args: string[]): string {
    return must(["ip", "-n", this.name, ...args]);
  }

  /** The argv prefix that runs a command inside the namespace. */
  exec(cmd: string[]): string[] {
    return ["ip", "netns", "exec", this.name, ...cmd];
  }

  /** Deletes the namespace (its interfaces go with it). Never throws. */
  delete(): void {
    sh(["ip", "netns", "delete", this.name]);
  }
}
