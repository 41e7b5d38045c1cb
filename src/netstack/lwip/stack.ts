/**
 * LwipStack: the Netstack interface (src/netstack/types.ts) over one lwIP
 * WebAssembly instance. Owns the instance, the connection table (id → LwipConnection),
 * listeners, the receive budget, the single re-armed timer (lwIP's
 * sys_timeouts_sleeptime, 20 ms TCP timer) and the rule that the module is
 * never re-entered: host functions only record state; writes, window updates,
 * closes and packets that arrive during a module call run right after it
 * returns (drain()).
 *
 * Must never: let an exception escape through the module (a throwing output
 * port drops the packet), keep a pcb handle after lwIP freed it, or grow a
 * queue past its bound (src/netstack/limits.ts).
 */
import { formatIp, ipv4Mask, parseIp } from "../address.ts";
import { NetstackError } from "../errors.ts";
import {
  CONNECT_TIMEOUT_MS,
  HEAP_LIMIT_BYTES,
  LISTEN_BACKLOG,
  MAX_CONNECTIONS,
  MAX_LISTENERS,
  MAX_PACKET_BYTES,
  RECEIVE_BUDGET_BYTES,
  REENTRANT_INPUT_QUEUE_PACKETS,
  TCP_TIMER_MS,
  TUNNEL_MTU,
} from "../limits.ts";
import { MIN_TUNNEL_MTU } from "../../protocol/tunnelMtu.ts";
import { realTimers, type TimerHandle, type TimerPort } from "../timers.ts";
import type { Netstack, NetstackOptions, NetstackStats, TcpConnection, TcpListener } from "../types.ts";
import { LwipConnection, type ConnectionHost } from "./connection.ts";
import {
  ADDR_RECORD_BYTES,
  Err,
  instantiateLwip,
  readCString,
  SLEEPTIME_INFINITE,
  type LwipExports,
} from "./module.ts";

interface Listener extends TcpListener {
  id: number;
  pcb: number;
  onConnection: (c: TcpConnection) => void;
}

/** Default randomness: 32 bits from crypto.getRandomValues. */
function cryptoRandom(): number {
  return crypto.getRandomValues(new Uint32Array(1))[0]!;
}

/** A TCP/IP stack on lwIP. Construct with createNetstack() (src/netstack/index.ts). */
export class LwipStack implements Netstack, ConnectionHost {
  readonly lwip: LwipExports;
  readonly txBuf: number;
  private readonly inBuf: number;
  private readonly addrBuf: number;
  private view: Uint8Array;
  private readonly timers: TimerPort;
  private readonly output: NetstackOptions["output"];
  private readonly connections = new Map<number, LwipConnection>();
  private readonly listeners = new Map<number, Listener>();
  private readonly dirty = new Set<LwipConnection>();
  private readonly blocked = new Set<LwipConnection>();
  private readonly deferred: Array<() => void> = [];
  private readonly inputQueue: Uint8Array[] = [];
  private nextId = 1;
  private depth = 0;
  private draining = false;
  private timer: TimerHandle | null = null;
  private timerAt = Infinity;
  private receiveBuffered = 0;
  private readonly receiveBudget: number;
  private failed: NetstackError | null = null;
  private hookError: unknown = null;
  private assertion = "";
  private readonly counters = { packetsIn: 0, packetsOut: 0, packetsDropped: 0 };

  /** Instantiates lwIP and configures its addresses. Throws NetstackError "invalid-argument" on bad options. */
  constructor(options: NetstackOptions) {
    if (!options.ipv4 && !options.ipv6?.length)
      throw new NetstackError("invalid-argument", "configure at least one of ipv4 and ipv6");
    if ((options.ipv6?.length ?? 0) > 3) throw new NetstackError("invalid-argument", "at most 3 IPv6 addresses");
    const mtu = options.mtu ?? TUNNEL_MTU;
    if (!Number.isInteger(mtu) || mtu < MIN_TUNNEL_MTU || mtu > MAX_PACKET_BYTES)
      throw new NetstackError("invalid-argument", `MTU ${mtu} is outside ${MIN_TUNNEL_MTU}..${MAX_PACKET_BYTES}`);
    this.receiveBudget = options.receiveBudgetBytes ?? RECEIVE_BUDGET_BYTES;
    if (
      !Number.isInteger(this.receiveBudget) ||
      this.receiveBudget < 65536 ||
      this.receiveBudget > RECEIVE_BUDGET_BYTES
    ) {
      throw new NetstackError(
        "invalid-argument",
        `receiveBudgetBytes ${this.receiveBudget} is outside 65536..${RECEIVE_BUDGET_BYTES}`,
      );
    }
    this.timers = options.timers ?? realTimers;
    this.output = options.output;
    const random = options.random ?? cryptoRandom;
    this.lwip = instantiateLwip({
      now_ms: () => Math.floor(this.timers.monoMs()) >>> 0,
      random: () => random() >>> 0,
      output: (ptr, len) => this.onOutput(ptr, len),
      connected: (id) => this.guard(() => this.connections.get(id)?.onConnected()),
      recv: (id, ptr, len) => this.guard(() => this.onRecv(id, ptr, len), 0),
      sent: (id) => this.guard(() => this.connections.get(id)?.onSent()),
      error: (id, err) => this.guard(() => this.connections.get(id)?.onError(err)),
      accept: (lid, pcb) => this.guard(() => this.onAccept(lid, pcb), 0),
      assert_failed: (msg, file, line) => {
        this.assertion = `${readCString(this.lwip.memory, msg)} (${readCString(this.lwip.memory, file)}:${line})`;
      },
    });
    this.view = new Uint8Array(this.lwip.memory.buffer);
    this.run(() => this.lwip.bb_init(HEAP_LIMIT_BYTES));
    this.txBuf = this.lwip.bb_tx_buf();
    this.inBuf = this.lwip.bb_in_buf();
    this.addrBuf = this.lwip.bb_addr_buf();
    this.run(() => {
      this.lwip.bb_set_mtu(mtu);
      if (options.ipv4) {
        const a = parseIp(options.ipv4.address);
        if (a.v6) throw new NetstackError("invalid-argument", `ipv4.address ${options.ipv4.address} is IPv6`);
        this.mem().set(a.bytes, this.addrBuf);
        this.mem().set(ipv4Mask(options.ipv4.prefixLength), this.addrBuf + 4);
        this.lwip.bb_set_ipv4();
      }
      for (const text of options.ipv6 ?? []) {
        const a = parseIp(text);
        if (!a.v6) throw new NetstackError("invalid-argument", `ipv6 address ${text} is IPv4`);
        this.mem().set(a.bytes, this.addrBuf);
        if (this.lwip.bb_add_ipv6() !== Err.OK)
          throw new NetstackError("invalid-argument", `cannot add IPv6 address ${text}`);
      }
    });
  }

  // ---- ConnectionHost ----

  mem(): Uint8Array {
    if (this.view.byteLength === 0) this.view = new Uint8Array(this.lwip.memory.buffer);
    return this.view;
  }

  markDirty(c: LwipConnection): void {
    this.dirty.add(c);
    if (this.depth === 0 && !this.draining) this.drain();
  }

  markBlocked(c: LwipConnection): void {
    this.blocked.add(c);
  }

  released(c: LwipConnection): void {
    this.connections.delete(c.id);
    this.dirty.delete(c);
    this.blocked.delete(c);
  }

  accountReceived(delta: number): void {
    this.receiveBuffered += delta;
  }

  monoMs(): number {
    return this.timers.monoMs();
  }

  after(ms: number, fn: () => void): TimerHandle {
    return this.timers.after(ms, fn);
  }

  call(fn: () => void): void {
    if (this.failed) return;
    if (this.depth > 0 || this.draining) this.deferred.push(fn);
    else this.run(fn);
  }

  // ---- Netstack ----

  input(packet: Uint8Array): boolean {
    if (this.failed || packet.length === 0 || packet.length > MAX_PACKET_BYTES) {
      this.counters.packetsDropped++;
      return false;
    }
    if (this.depth > 0 || this.draining) {
      if (this.inputQueue.length >= REENTRANT_INPUT_QUEUE_PACKETS) {
        this.counters.packetsDropped++;
        return false;
      }
      this.inputQueue.push(packet.slice());
      return true;
    }
    return this.run(() => this.inputNow(packet));
  }

  /** Hands several packets to the stack in one pass (one drain and timer check for all). Returns how many were taken. */
  inputBatch(packets: Uint8Array[]): number {
    if (this.failed) {
      this.counters.packetsDropped += packets.length;
      return 0;
    }
    if (this.depth > 0 || this.draining) return packets.filter((p) => this.input(p)).length;
    return this.run(() => {
      let n = 0;
      for (const p of packets)
        if (p.length > 0 && p.length <= MAX_PACKET_BYTES ? this.inputNow(p) : (this.counters.packetsDropped++, false))
          n++;
      return n;
    });
  }

  async connect(host: string, port: number, options: { timeoutMs?: number } = {}): Promise<TcpConnection> {
    if (this.failed) throw this.failed;
    const addr = parseIp(host);
    checkPort(port, false);
    if (this.connections.size >= MAX_CONNECTIONS)
      throw new NetstackError("too-many-connections", `${MAX_CONNECTIONS} connections are open`);
    const id = this.allocateId();
    const conn = this.run(() => {
      const pcb = this.lwip.bb_tcp_new(id, addr.v6 ? 1 : 0);
      if (pcb === 0) throw new NetstackError("no-memory", "no free TCP control block");
      const c = new LwipConnection(this, id, pcb, formatIp(addr.bytes), port);
      this.connections.set(id, c);
      this.writeAddr(this.addrBuf, addr.bytes, port);
      const err = this.lwip.bb_tcp_connect(pcb, addr.v6 ? 1 : 0);
      if (err !== Err.OK) {
        this.lwip.bb_tcp_abort(pcb);
        c.forget(new NetstackError("invalid-argument", `connect: lwIP err ${err}`));
        throw new NetstackError(
          err === Err.RTE ? "invalid-argument" : err === Err.MEM ? "no-memory" : "invalid-argument",
          err === Err.RTE
            ? `no route to ${host} (the stack has no address of that family)`
            : `connect to ${host}:${port} failed (lwIP err ${err})`,
        );
      }
      this.lwip.bb_tcp_local(pcb);
      const local = this.readAddr(this.addrBuf);
      c.localAddress = local.address;
      c.localPort = local.port;
      return c;
    });
    const timeoutMs = options.timeoutMs ?? CONNECT_TIMEOUT_MS;
    const connected = conn.waitConnected();
    const timer = this.timers.after(timeoutMs, () => {
      if (conn.pcb) conn.abortWithCode("timeout", `connect to ${host}:${port} timed out after ${timeoutMs} ms`);
    });
    try {
      return await connected;
    } finally {
      timer.cancel();
    }
  }

  listen(host: string, port: number, onConnection: (connection: TcpConnection) => void): TcpListener {
    if (this.failed) throw this.failed;
    const addr = parseIp(host);
    checkPort(port, false);
    if (this.listeners.size >= MAX_LISTENERS)
      throw new NetstackError("too-many-connections", `${MAX_LISTENERS} listeners are open`);
    const id = this.allocateId();
    const listener: Listener = {
      id,
      pcb: 0,
      address: formatIp(addr.bytes),
      port,
      onConnection,
      close: () => {
        if (!this.listeners.delete(id)) return;
        const pcb = listener.pcb;
        this.call(() => this.lwip.bb_tcp_close_listener(pcb));
      },
    };
    this.run(() => {
      const pcb = this.lwip.bb_tcp_new(id, addr.v6 ? 1 : 0);
      if (pcb === 0) throw new NetstackError("no-memory", "no free TCP control block");
      this.writeAddr(this.addrBuf, addr.bytes, port);
      const lpcb = this.lwip.bb_tcp_listen(pcb, addr.v6 ? 1 : 0, LISTEN_BACKLOG);
      if (lpcb === 0) {
        const err = this.lwip.bb_last_err();
        throw err === Err.USE
          ? new NetstackError("address-in-use", `${host}:${port} is already in use`)
          : new NetstackError("no-memory", `listen on ${host}:${port} failed (lwIP err ${err})`);
      }
      listener.pcb = lpcb;
    });
    this.listeners.set(id, listener);
    return listener;
  }

  stats(): NetstackStats {
    let writeQueued = 0;
    for (const c of this.connections.values()) writeQueued += c.writeQueuedBytes;
    const alive = !this.failed || this.failed.code !== "stack-failed";
    return {
      connections: this.connections.size,
      listeners: this.listeners.size,
      receiveBufferedBytes: this.receiveBuffered,
      writeQueuedBytes: writeQueued,
      heapBytes: alive ? this.lwip.bb_heap_used() : 0,
      heapPeakBytes: alive ? this.lwip.bb_heap_peak() : 0,
      memoryBytes: this.lwip.memory.buffer.byteLength,
      ...this.counters,
    };
  }

  close(): void {
    if (this.failed) return;
    for (const l of [...this.listeners.values()]) l.close();
    for (const c of [...this.connections.values()]) c.abort();
    this.failed = new NetstackError("aborted", "the stack is closed");
    this.timer?.cancel();
    this.timer = null;
  }

  // ---- module calls ----

  /**
   * Runs `fn` (which calls into the module). On the way out of the outermost
   * call: surfaces a hook's exception or an lwIP assertion as "stack-failed",
   * then drains deferred work and re-arms the timer.
   */
  private run<T>(fn: () => T): T {
    if (this.failed) throw this.failed;
    this.depth++;
    let result: T;
    try {
      result = fn();
    } catch (e) {
      this.depth--;
      if (e instanceof WebAssembly.RuntimeError) throw this.fail(`lwIP trapped: ${this.assertion || e.message}`);
      throw e;
    }
    this.depth--;
    if (this.hookError)
      throw this.fail(`a host function threw: ${(this.hookError as Error)?.message ?? this.hookError}`);
    if (this.depth === 0 && !this.draining) this.drain();
    return result;
  }

  /** Runs queued packets, deferred calls and connection flushes until none are left, then re-arms the timer. */
  private drain(): void {
    this.draining = true;
    try {
      while (this.inputQueue.length > 0 || this.dirty.size > 0 || this.deferred.length > 0) {
        if (this.failed) return;
        const packets = this.inputQueue.splice(0);
        for (const p of packets) this.run(() => this.inputNow(p));
        for (const fn of this.deferred.splice(0)) this.run(fn);
        for (const c of [...this.dirty]) {
          this.dirty.delete(c);
          this.run(() => c.flush());
        }
      }
      this.schedule();
    } catch {
      // run() recorded the failure (stack-failed) and told every connection; callers see it there
    } finally {
      this.draining = false;
    }
  }

  private inputNow(packet: Uint8Array): boolean {
    this.mem().set(packet, this.inBuf);
    this.counters.packetsIn++;
    if (this.lwip.bb_input(packet.length) === Err.OK) return true;
    this.counters.packetsDropped++;
    return false;
  }

  /** Arms the one timer for lwIP's next timeout (sooner while a writer waits for heap). */
  private schedule(): void {
    if (this.failed) return;
    const sleep = this.lwip.bb_sleeptime();
    let ms = sleep === SLEEPTIME_INFINITE ? Infinity : sleep;
    if (this.blocked.size > 0) ms = Math.min(ms, TCP_TIMER_MS);
    if (ms === Infinity) return;
    const at = this.timers.monoMs() + ms;
    if (this.timer && this.timerAt <= at) return;
    this.timer?.cancel();
    this.timerAt = at;
    this.timer = this.timers.after(ms, () => this.onTimer());
  }

  private onTimer(): void {
    this.timer = null;
    this.timerAt = Infinity;
    if (this.failed) return;
    for (const c of this.blocked) this.dirty.add(c);
    this.blocked.clear();
    try {
      this.run(() => this.lwip.bb_check_timeouts());
    } catch {
      // fail() already recorded the failure and told every connection
    }
  }

  // ---- host functions ----

  private guard<T>(fn: () => T, fallback?: T): T {
    try {
      return fn();
    } catch (e) {
      this.hookError ??= e;
      return fallback as T;
    }
  }

  private onOutput(ptr: number, len: number): void {
    this.counters.packetsOut++;
    try {
      this.output(new Uint8Array(this.lwip.memory.buffer, ptr, len));
    } catch {
      this.counters.packetsDropped++;
    }
  }

  private onRecv(id: number, ptr: number, len: number): number {
    const c = this.connections.get(id);
    if (!c) return 0; // released: lwIP frees the data
    if (len === 0) {
      c.onData(null);
      return 0;
    }
    if (this.receiveBuffered + len > this.receiveBudget) return 1; // lwIP keeps it and retries on its timer
    c.onData(this.mem().slice(ptr, ptr + len));
    return 0;
  }

  private onAccept(listenerId: number, pcb: number): number {
    const l = this.listeners.get(listenerId);
    if (!l || this.connections.size >= MAX_CONNECTIONS) return 0;
    const remote = this.readAddr(this.addrBuf);
    const local = this.readAddr(this.addrBuf + ADDR_RECORD_BYTES);
    const id = this.allocateId();
    const c = new LwipConnection(this, id, pcb, remote.address, remote.port);
    c.localAddress = local.address;
    c.localPort = local.port;
    this.connections.set(id, c);
    queueMicrotask(() => l.onConnection(c));
    return id;
  }

  // ---- helpers ----

  private fail(message: string): NetstackError {
    const e = new NetstackError("stack-failed", message);
    if (this.failed?.code === "stack-failed") return this.failed;
    this.failed = e;
    this.timer?.cancel();
    this.timer = null;
    for (const c of [...this.connections.values()]) c.forget(e);
    this.listeners.clear();
    return e;
  }

  private allocateId(): number {
    for (;;) {
      const id = this.nextId;
      this.nextId = this.nextId >= 0x7fffffff ? 1 : this.nextId + 1;
      if (!this.connections.has(id) && !this.listeners.has(id)) return id;
    }
  }

  private writeAddr(at: number, bytes: Uint8Array, port: number): void {
    const mem = this.mem();
    mem.fill(0, at, at + ADDR_RECORD_BYTES);
    mem.set(bytes, at);
    mem[at + 16] = port & 0xff;
    mem[at + 17] = port >> 8;
  }

  /** Reads an address record (bbnet.c put_addr: 16 address bytes, u16 port, family 4 or 6). */
  private readAddr(at: number): { address: string; port: number } {
    const mem = this.mem();
    const v6 = mem[at + 18] === 6;
    return { address: formatIp(mem.slice(at, at + (v6 ? 16 : 4))), port: mem[at + 16]! | (mem[at + 17]! << 8) };
  }
}

function checkPort(port: number, allowZero: boolean): void {
  if (!Number.isInteger(port) || port < (allowZero ? 0 : 1) || port > 65535)
    throw new NetstackError("invalid-argument", `port ${port} is outside ${allowZero ? 0 : 1}..65535`);
}
