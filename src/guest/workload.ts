/**
 * How the guest runs the one payload of a boot, by kind of image (spec
 * "Images"):
 * - dev image: the payload is a shell script run by /bin/sh from memory
 *   (it arrives on stdin; only `text/x-shellscript` is accepted);
 * - image converted from OCI: the image's own command from
 *   /etc/beachball/workload.json (Entrypoint + Cmd, Env, WorkingDir, User);
 * - systemd reference image: the program named by
 *   $BEACHBALL_WORKLOAD_ADAPTER.
 * In the last two the payload is stored at $BEACHBALL_BOOTSTRAP_PATH, a
 * 0400 file on the /run tmpfs owned by the workload's user, and its content
 * type is in $BEACHBALL_BOOTSTRAP_CONTENT_TYPE. Beachball never interprets
 * it. Output goes to the console between the JOB markers.
 * Must never: put the payload on a command line, in the environment or on
 * a disk, or run a second payload.
 */
import { chownSync, closeSync, existsSync, mkdirSync, openSync, readFileSync, writeFileSync, writeSync } from "node:fs";
import { constants } from "node:os";
import {
  BOOTSTRAP_CONTENT_TYPE_ENV,
  BOOTSTRAP_PATH_ENV,
  JOB_EXIT_MARKER,
  JOB_START_MARKER,
  WORKLOAD_ADAPTER_ENV,
  WORKLOAD_CONFIG_PATH,
  type WorkloadConfig,
  workloadConfigProblem,
} from "../protocol/guest.ts";

/** The one payload content type the dev image's shell runner accepts. */
export const SHELL_SCRIPT_CONTENT_TYPE = "text/x-shellscript";
/** Directory (tmpfs) and file that hold a stored payload. */
export const BOOTSTRAP_DIR = "/run/beachball";
export const BOOTSTRAP_FILE = `${BOOTSTRAP_DIR}/bootstrap`;
/** Runs the payload from memory: the script arrives on stdin, stdin is then detached from it. */
const SHELL_RUNNER = 'script=$(cat); exec </dev/null; eval "$script"';
const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/** What to run for a payload. */
export interface WorkloadPlan {
  /** `shell`, `oci` or `adapter`, for the console line. */
  kind: "shell" | "oci" | "adapter";
  /** Why `contentType` is refused, or null when it is accepted. */
  refuses(contentType: string): string | null;
  /** argv, environment, identity and working directory; `stdin` is the payload for the shell runner. */
  command: {
    argv: string[];
    env: Record<string, string>;
    uid: number;
    gid: number;
    cwd: string;
    storesPayload: boolean;
  };
}

/** Resolves a Docker/OCI `User` (`name`, `uid`, `name:group`, `uid:gid`) against /etc/passwd and /etc/group. Throws when a name is unknown. */
export function resolveUser(user: string, passwd: string, group: string): { uid: number; gid: number; home: string } {
  if (!user) return { uid: 0, gid: 0, home: "/root" };
  const [u, g] = user.split(":", 2) as [string, string | undefined];
  const pw = passwd
    .split("\n")
    .map((l) => l.split(":"))
    .filter((f) => f.length >= 7);
  const entry = /^\d+$/.test(u) ? pw.find((f) => f[2] === u) : pw.find((f) => f[0] === u);
  if (!entry && !/^\d+$/.test(u)) throw new Error(`user ${JSON.stringify(u)} is not in /etc/passwd`);
  const uid = Number(entry ? entry[2] : u);
  let gid = Number(entry?.[3] ?? 0);
  if (g !== undefined && g !== "") {
    if (/^\d+$/.test(g)) gid = Number(g);
    else {
      const gr = group
        .split("\n")
        .map((l) => l.split(":"))
        .find((f) => f[0] === g);
      if (!gr) throw new Error(`group ${JSON.stringify(g)} is not in /etc/group`);
      gid = Number(gr[2]);
    }
  }
  return { uid, gid, home: entry?.[5] || "/" };
}

function read(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return "";
  }
}

/** Picks the plan for this image from the files and environment of the current root. Throws when workload.json is malformed. */
export function workloadPlan(env: Record<string, string | undefined> = process.env): WorkloadPlan {
  if (existsSync(WORKLOAD_CONFIG_PATH)) {
    const w = JSON.parse(readFileSync(WORKLOAD_CONFIG_PATH, "utf8")) as WorkloadConfig;
    const problem = workloadConfigProblem(w);
    if (problem) throw new Error(`${WORKLOAD_CONFIG_PATH}: ${problem}`);
    const who = resolveUser(w.user, read("/etc/passwd"), read("/etc/group"));
    const vars: Record<string, string> = { PATH: DEFAULT_PATH, HOME: who.home };
    for (const e of w.env) vars[e.slice(0, e.indexOf("="))] = e.slice(e.indexOf("=") + 1);
    return {
      kind: "oci",
      refuses: () => null,
      command: {
        argv: [...w.entrypoint, ...w.cmd],
        env: vars,
        uid: who.uid,
        gid: who.gid,
        cwd: w.workingDir || "/",
        storesPayload: true,
      },
    };
  }
  const adapter = env[WORKLOAD_ADAPTER_ENV];
  if (adapter) {
    return {
      kind: "adapter",
      refuses: () => null,
      command: {
        argv: [adapter],
        env: { PATH: DEFAULT_PATH, HOME: "/root" },
        uid: 0,
        gid: 0,
        cwd: "/root",
        storesPayload: true,
      },
    };
  }
  return {
    kind: "shell",
    refuses: (t) => (t === SHELL_SCRIPT_CONTENT_TYPE ? null : `unsupported content type ${t}`),
    command: {
      argv: ["/bin/sh", "-c", SHELL_RUNNER],
      env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin", HOME: "/root" },
      uid: 0,
      gid: 0,
      cwd: "/root",
      storesPayload: false,
    },
  };
}

/** Writes the payload to BOOTSTRAP_FILE (tmpfs, mode 0400, owned by uid:gid). */
function storePayload(payload: Uint8Array, uid: number, gid: number): void {
  mkdirSync(BOOTSTRAP_DIR, { recursive: true, mode: 0o711 });
  writeFileSync(BOOTSTRAP_FILE, payload, { mode: 0o400, flag: "w" });
  chownSync(BOOTSTRAP_FILE, uid, gid);
}

/** A started workload. */
export interface RunningWorkload {
  pid: number;
  /** Resolves with the exit code (128 + signal number when killed). */
  exited: Promise<number>;
  kill(signal: NodeJS.Signals): void;
}

/**
 * Starts `plan` for `payload`: writes JOB_START to the console, runs the
 * command with stdout and stderr on the console, and (once it exits) writes
 * `JOB_EXIT <code>`. Throws when the command cannot be started (after
 * writing the markers with code 127).
 */
export function startWorkload(plan: WorkloadPlan, payload: Uint8Array, contentType: string): RunningWorkload {
  const consoleFd = openSync("/dev/console", "w");
  writeSync(consoleFd, `${JOB_START_MARKER}\n`);
  const c = plan.command;
  const env = { ...c.env };
  if (c.storesPayload) {
    storePayload(payload, c.uid, c.gid);
    env[BOOTSTRAP_PATH_ENV] = BOOTSTRAP_FILE;
    env[BOOTSTRAP_CONTENT_TYPE_ENV] = contentType;
  }
  let p: ReturnType<typeof Bun.spawn>;
  try {
    p = Bun.spawn(c.argv, {
      stdin: c.storesPayload ? "ignore" : payload,
      stdout: consoleFd,
      stderr: consoleFd,
      cwd: c.cwd,
      env,
      ...(c.uid !== 0 || c.gid !== 0 ? { uid: c.uid, gid: c.gid } : {}),
    });
  } catch (e) {
    writeSync(
      consoleFd,
      `beachball-guest: cannot start ${JSON.stringify(c.argv[0])}: ${(e as Error).message}\n${JOB_EXIT_MARKER} 127\n`,
    );
    closeSync(consoleFd);
    throw e;
  }
  const exited = p.exited.then((code) => {
    const sig = p.signalCode;
    const exitCode =
      sig === null || sig === undefined ? code : 128 + (typeof sig === "number" ? sig : (constants.signals[sig] ?? 0));
    writeSync(consoleFd, `${JOB_EXIT_MARKER} ${exitCode}\n`);
    closeSync(consoleFd);
    return exitCode;
  });
  return { pid: p.pid, exited, kill: (s) => p.kill(s) };
}
