/**
 * Loading native/lwip/lwip.wasm: one compiled WebAssembly.Module per process,
 * one instance per stack, with the typed exports of native/lwip/port/bbnet.c
 * and the host functions it imports.
 *
 * Owns only the boundary's shape (names, argument order, lwIP's err_t values);
 * behaviour lives in stack.ts and connection.ts.
 * Must never: be used outside src/netstack/lwip (lwIP details stay behind
 * src/netstack/types.ts).
 */
import { readFileSync } from "node:fs";
import lwipWasmPath from "../../../native/lwip/lwip.wasm" with { type: "file" };

/** lwIP's err_t values (lwip/err.h). */
export const Err = {
  OK: 0,
  MEM: -1,
  BUF: -2,
  TIMEOUT: -3,
  RTE: -4,
  INPROGRESS: -5,
  VAL: -6,
  WOULDBLOCK: -7,
  USE: -8,
  ALREADY: -9,
  ISCONN: -10,
  CONN: -11,
  IF: -12,
  ABRT: -13,
  RST: -14,
  CLSD: -15,
  ARG: -16,
} as const;

/** sys_timeouts_sleeptime() when no timer is pending. */
export const SLEEPTIME_INFINITE = 0xffffffff;
/** Bytes of one address record in the address buffer: 16 address bytes, u16 port, 2 spare. */
export const ADDR_RECORD_BYTES = 20;

/** The functions bbnet.c exports. Pointers are byte offsets into memory; pcb handles are opaque numbers. */
export interface LwipExports {
  memory: WebAssembly.Memory;
  bb_init(heapLimitBytes: number): void;
  bb_in_buf(): number;
  bb_tx_buf(): number;
  bb_addr_buf(): number;
  bb_heap_used(): number;
  bb_heap_peak(): number;
  bb_set_mtu(mtu: number): void;
  bb_set_ipv4(): void;
  bb_add_ipv6(): number;
  bb_input(len: number): number;
  bb_sleeptime(): number;
  bb_check_timeouts(): number;
  bb_tcp_new(id: number, v6: number): number;
  bb_tcp_connect(pcb: number, v6: number): number;
  bb_last_err(): number;
  bb_tcp_listen(pcb: number, v6: number, backlog: number): number;
  bb_tcp_write(pcb: number, len: number, more: number): number;
  bb_tcp_output(pcb: number): number;
  bb_tcp_sndbuf(pcb: number): number;
  bb_tcp_recved(pcb: number, len: number): void;
  bb_tcp_shutdown(pcb: number, rx: number, tx: number): number;
  bb_tcp_close(pcb: number): number;
  bb_tcp_outstanding(pcb: number): number;
  bb_tcp_abort(pcb: number): void;
  bb_tcp_close_listener(pcb: number): void;
  bb_tcp_local(pcb: number): number;
  bb_tcp_state(pcb: number): number;
  bb_tcp_nodelay(pcb: number, on: number): void;
}

/** What the module imports. None of these may call back into the instance. */
export interface LwipHostFunctions {
  now_ms(): number;
  random(): number;
  output(ptr: number, len: number): void;
  connected(id: number, err: number): void;
  /** Returns 0 when the data was taken, 1 to refuse it (lwIP retries later). */
  recv(id: number, ptr: number, len: number): number;
  sent(id: number, len: number): void;
  error(id: number, err: number): void;
  /** Returns the new connection's id, or 0 to refuse it. */
  accept(listenerId: number, pcb: number): number;
  assert_failed(messagePtr: number, filePtr: number, line: number): void;
}

let compiled: WebAssembly.Module | null = null;

/** The compiled module (compiled on first use, ≈ 82 KB). Throws if the file is missing or invalid. */
export function lwipModule(): WebAssembly.Module {
  compiled ??= new WebAssembly.Module(readFileSync(lwipWasmPath));
  return compiled;
}

/** A fresh lwIP instance (its own memory and state) wired to `host`. */
export function instantiateLwip(host: LwipHostFunctions): LwipExports {
  const instance = new WebAssembly.Instance(lwipModule(), { env: { ...host } });
  return instance.exports as unknown as LwipExports;
}

/** Reads a NUL-terminated string at `ptr` (for assertion messages). */
export function readCString(memory: WebAssembly.Memory, ptr: number, max = 512): string {
  const bytes = new Uint8Array(memory.buffer, ptr, Math.min(max, memory.buffer.byteLength - ptr));
  const end = bytes.indexOf(0);
  return new TextDecoder().decode(bytes.subarray(0, end < 0 ? bytes.length : end));
}
