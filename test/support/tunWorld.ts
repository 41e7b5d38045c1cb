/**
 * A userspace stack (src/netstack) behind a TUN device whose kernel side sits
 * in a namespace of the test's own, with the kernel TCP server
 * test/support/tcpPeer.ts listening there:
 *
 *   Bun: createNetstack (10.N.0.2, fd00:N::2) ⇄ TUN fd ─── namespace NAME:
 *        device DEV 10.N.0.1/24, fd00:N::1/64, tcpPeer on PORT
 *
 * Nothing is routed in the root namespace. `close()` stops everything it
 * started (server by PID, TUN, namespace). Optional impairment of the path,
 * by `tc netem` on the device when the kernel has it, else in userspace.
 */
import { resolve } from "node:path";
import { openTun, type TunDevice } from "../../native/tun/tun.ts";
import { TUNNEL_MTU } from "../../src/protocol/tunnelMtu.ts";
import { createNetstack, type Netstack } from "../../src/netstack/index.ts";
import { Impairment, type ImpairmentOptions } from "./impairment.ts";
import { netemQdiscArgs } from "./netem.ts";
import { Netns, sh } from "./netns.ts";

const peerScript = resolve(import.meta.dir, "tcpPeer.ts");

/** A running world; see the module comment. */
export interface TunWorld {
  ns: Netns;
  tun: TunDevice;
  stack: Netstack;
  /** Kernel-side addresses of the server. */
  kernel4: string;
  kernel6: string;
  port: number;
  /** Lines the server printed after "ready". */
  serverLines: string[];
  /** How the impairment was applied ("none", "netem", "userspace"). */
  impairedBy: string;
  impairments: Impairment[];
  close(): Promise<void>;
}

/**
 * Builds the world. `octet` picks the subnets (10.octet.0.0/24, fd00:octet::/64);
 * `name` prefixes the namespace and device (unique per test file).
 */
export async function startTunWorld(
  name: string,
  octet: number,
  opts: { impair?: ImpairmentOptions; port?: number } = {},
): Promise<TunWorld> {
  const port = opts.port ?? 7000;
  const devName = `${name}${process.pid % 10000}`.slice(0, 15);
  const nsName = `${name}-${process.pid}`;
  const tun = openTun({ name: devName, mtu: TUNNEL_MTU });
  let ns: Netns | null = null;
  let server: ReturnType<typeof Bun.spawn> | null = null;
  const impairments: Impairment[] = [];
  try {
    ns = new Netns(nsName);
    sh(["ip", "link", "set", tun.name, "netns", nsName]);
    const kernel4 = `10.${octet}.0.1`;
    const kernel6 = `fd00:${octet}::1`;
    ns.ip("addr", "add", `${kernel4}/24`, "dev", tun.name);
    ns.ip("-6", "addr", "add", `${kernel6}/64`, "dev", tun.name, "nodad");
    ns.ip("link", "set", tun.name, "txqueuelen", "4096");
    ns.ip("link", "set", tun.name, "up");

    let impairedBy = "none";
    let toKernel: (p: Uint8Array) => void = (p) => void tun.write(p);
    let toStack: (p: Uint8Array) => void;
    const stack = createNetstack({
      ipv4: { address: `10.${octet}.0.2`, prefixLength: 24 },
      ipv6: [`fd00:${octet}::2`],
      output: (p) => toKernel(p),
    });
    toStack = (p) => void stack.input(p);
    if (opts.impair) {
      const i = opts.impair;
      const netem = sh(ns.exec(netemQdiscArgs(tun.name, i)));
      const toKernelLoss = new Impairment(
        { ...i, delayMs: 0, reorderPercent: 0, seed: i.seed + 1 },
        (p) => void tun.write(p),
      );
      impairments.push(toKernelLoss);
      toKernel = (p) => toKernelLoss.send(p);
      if (netem.code === 0) impairedBy = "netem";
      else {
        const toStackImp = new Impairment(i, (p) => void stack.input(p));
        impairments.push(toStackImp);
        toStack = (p) => toStackImp.send(p);
        impairedBy = "userspace";
      }
    }
    tun.start(
      opts.impair
        ? (packets) => {
            for (const p of packets) toStack(p);
          }
        : (packets) => {
            stack.inputBatch(packets);
          },
    );

    const proc = Bun.spawn(ns.exec([process.execPath, peerScript, String(port), kernel4, kernel6]), {
      stdout: "pipe",
      stderr: "inherit",
    });
    server = proc;
    const serverLines: string[] = [];
    const reader = proc.stdout.getReader();
    let buf = "";
    let readyResolve!: () => void;
    const ready = new Promise<void>((r) => (readyResolve = r));
    void (async () => {
      for (;;) {
        const r = await reader.read();
        if (r.done) break;
        buf += new TextDecoder().decode(r.value);
        let nl: number;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          if (line === "ready") readyResolve();
          else serverLines.push(line);
        }
      }
      readyResolve();
    })();
    await ready;
    if (server.exitCode !== null) throw new Error(`tcpPeer exited with ${server.exitCode}`);
    const srv = server;
    const nsRef = ns;
    return {
      ns,
      tun,
      stack,
      kernel4,
      kernel6,
      port,
      serverLines,
      impairedBy,
      impairments,
      async close() {
        stack.close();
        for (const i of impairments) i.stop();
        srv.kill("SIGKILL");
        await srv.exited;
        await tun.close();
        nsRef.delete();
      },
    };
  } catch (e) {
    for (const i of impairments) i.stop();
    server?.kill("SIGKILL");
    await server?.exited;
    await tun.close();
    ns?.delete();
    throw e;
  }
}
