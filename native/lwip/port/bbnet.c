/*
 * bbnet: the WebAssembly boundary of Beachball's lwIP build.
 *
 * Owns one point-to-point netif (no link layer) and the raw-API TCP callbacks,
 * and exposes a small set of functions to the host (src/netstack/lwip/):
 * packet input/output, TCP connect/listen/write/recved/shutdown/close/abort,
 * timers, and a capped heap. Connections are named by a host-chosen u32 id
 * (the pcb's arg); the host passes pcb pointers back only while the pcb lives
 * (until the error callback, close or abort).
 *
 * Imports (module "env"): now_ms, random, output, connected, recv, sent,
 * error, accept, assert_failed. The host must not call back into this module
 * from inside an import; it queues work and runs it after the call returns.
 * Must never: allocate past the heap limit, block, or call the host with a
 * pointer that outlives the call (every buffer handed out is reused).
 */
#include <string.h>
#include <malloc.h>
#include "lwip/init.h"
#include "lwip/tcp.h"
#include "lwip/priv/tcp_priv.h"
#include "lwip/netif.h"
#include "lwip/ip.h"
#include "lwip/ip6_addr.h"
#include "lwip/timeouts.h"
#include "lwip/pbuf.h"

#define IMPORT(name) __attribute__((import_module("env"), import_name(#name)))
#define EXPORT(name) __attribute__((export_name(#name)))

IMPORT(now_ms) uint32_t host_now_ms(void);
IMPORT(random) uint32_t host_random(void);
IMPORT(output) void host_output(const uint8_t *packet, uint32_t len);
IMPORT(connected) void host_connected(uint32_t id, int32_t err);
/* Data (len > 0) or end of stream (len == 0). Returns 0 when taken, 1 to refuse (lwIP keeps it and retries). */
IMPORT(recv) int32_t host_recv(uint32_t id, const uint8_t *data, uint32_t len);
IMPORT(sent) void host_sent(uint32_t id, uint32_t len);
/* The pcb is already freed when this is called. */
IMPORT(error) void host_error(uint32_t id, int32_t err);
/* A new connection on listener `listener_id`; remote address in the address buffer. Returns its id, or 0 to refuse. */
IMPORT(accept) uint32_t host_accept(uint32_t listener_id, struct tcp_pcb *pcb);
IMPORT(assert_failed) void host_assert_failed(const char *message, const char *file, int32_t line);

/* Largest packet or data chunk passed across the boundary (tcp_write's u16 length). */
#define BB_IO_BYTES 65535

static uint8_t in_buf[BB_IO_BYTES];
static uint8_t tx_buf[BB_IO_BYTES];
static uint8_t rx_buf[BB_IO_BYTES];
static uint8_t out_buf[BB_IO_BYTES];
/* Address exchange: 16 bytes of address (IPv4 in the first 4), a u16 port (little-endian), the family (4 or 6);
 * a second such record at byte 20 (the local end, for accepted connections). */
static uint8_t addr_buf[40];
static err_t last_err;
static struct netif nif;

/* ---- platform hooks (arch/cc.h, lwipopts.h) ---- */

uint32_t sys_now(void) { return host_now_ms(); }
uint32_t bb_random(void) { return host_random(); }
uint32_t bb_tcp_isn(void) { return host_random(); }

void bb_assert_failed(const char *message, const char *file, int line) {
  host_assert_failed(message, file, line);
  __builtin_trap();
}

/* ---- capped heap: lwIP's mem_malloc (send data, small PBUF_RAM) goes here ---- */

static size_t heap_used, heap_peak, heap_limit;

void *bb_heap_malloc(size_t size) {
  if (heap_used + size > heap_limit) return NULL;
  void *p = malloc(size);
  if (p == NULL) return NULL;
  heap_used += malloc_usable_size(p);
  if (heap_used > heap_peak) heap_peak = heap_used;
  return p;
}

void *bb_heap_calloc(size_t count, size_t size) {
  if (size != 0 && count > SIZE_MAX / size) return NULL;
  void *p = bb_heap_malloc(count * size);
  if (p != NULL) memset(p, 0, count * size);
  return p;
}

void bb_heap_free(void *p) {
  if (p == NULL) return;
  heap_used -= malloc_usable_size(p);
  free(p);
}

/* ---- netif: every outgoing IP packet goes to the host ---- */

static err_t nif_output(struct netif *n, struct pbuf *p) {
  LWIP_UNUSED_ARG(n);
  if (p->next == NULL) {
    host_output((const uint8_t *)p->payload, p->len);
  } else {
    uint16_t len = pbuf_copy_partial(p, out_buf, p->tot_len, 0);
    host_output(out_buf, len);
  }
  return ERR_OK;
}

static err_t nif_output4(struct netif *n, struct pbuf *p, const ip4_addr_t *dst) {
  LWIP_UNUSED_ARG(dst);
  return nif_output(n, p);
}

static err_t nif_output6(struct netif *n, struct pbuf *p, const ip6_addr_t *dst) {
  LWIP_UNUSED_ARG(dst);
  return nif_output(n, p);
}

static err_t nif_init(struct netif *n) {
  n->name[0] = 'b';
  n->name[1] = 'b';
  n->mtu = 1420;
  n->mtu6 = 1420;
  n->output = nif_output4;
  n->output_ip6 = nif_output6;
  n->flags = 0;
  return ERR_OK;
}

/* ---- TCP callbacks: forward to the host by id ---- */

#define ID(arg) ((uint32_t)(uintptr_t)(arg))

static err_t on_recv(void *arg, struct tcp_pcb *pcb, struct pbuf *p, err_t err) {
  LWIP_UNUSED_ARG(pcb);
  LWIP_UNUSED_ARG(err);
  if (p == NULL) {
    host_recv(ID(arg), rx_buf, 0);
    return ERR_OK;
  }
  uint16_t len = pbuf_copy_partial(p, rx_buf, p->tot_len, 0);
  if (host_recv(ID(arg), rx_buf, len) != 0) return ERR_MEM; /* refused: lwIP keeps p as refused_data */
  pbuf_free(p);
  return ERR_OK;
}

static err_t on_sent(void *arg, struct tcp_pcb *pcb, u16_t len) {
  LWIP_UNUSED_ARG(pcb);
  host_sent(ID(arg), len);
  return ERR_OK;
}

static void on_error(void *arg, err_t err) {
  if (arg != NULL) host_error(ID(arg), err);
}

static err_t on_connected(void *arg, struct tcp_pcb *pcb, err_t err) {
  LWIP_UNUSED_ARG(pcb);
  host_connected(ID(arg), err);
  return ERR_OK;
}

static void attach(struct tcp_pcb *pcb, uint32_t id) {
  tcp_arg(pcb, (void *)(uintptr_t)id);
  tcp_recv(pcb, on_recv);
  tcp_sent(pcb, on_sent);
  tcp_err(pcb, on_error);
}

static void detach(struct tcp_pcb *pcb) {
  tcp_arg(pcb, NULL);
  tcp_recv(pcb, NULL);
  tcp_sent(pcb, NULL);
  tcp_err(pcb, NULL);
}

static void put_addr(uint8_t *at, const ip_addr_t *ip, uint16_t port) {
  memset(at, 0, 20);
  if (IP_IS_V6(ip)) memcpy(at, ip_2_ip6(ip)->addr, 16);
  else memcpy(at, &ip_2_ip4(ip)->addr, 4);
  at[16] = (uint8_t)(port & 0xff);
  at[17] = (uint8_t)(port >> 8);
  at[18] = IP_IS_V6(ip) ? 6 : 4;
}

static void get_addr(ip_addr_t *ip, int v6) {
  if (v6) {
    IP_SET_TYPE_VAL(*ip, IPADDR_TYPE_V6);
    memcpy(ip_2_ip6(ip)->addr, addr_buf, 16);
    ip6_addr_clear_zone(ip_2_ip6(ip));
  } else {
    IP_SET_TYPE_VAL(*ip, IPADDR_TYPE_V4);
    memcpy(&ip_2_ip4(ip)->addr, addr_buf, 4);
  }
}

static err_t on_accept(void *arg, struct tcp_pcb *pcb, err_t err) {
  if (err != ERR_OK || pcb == NULL) return ERR_VAL;
  put_addr(addr_buf, &pcb->remote_ip, pcb->remote_port);
  put_addr(addr_buf + 20, &pcb->local_ip, pcb->local_port);
  uint32_t id = host_accept(ID(arg), pcb);
  if (id == 0) {
    tcp_abort(pcb);
    return ERR_ABRT;
  }
  attach(pcb, id);
  return ERR_OK;
}

/* ---- exports ---- */

/* Initialises lwIP and the netif; `limit` caps the heap, bytes. */
EXPORT(bb_init) void bb_init(uint32_t limit) {
  heap_limit = limit;
  lwip_init();
  netif_add_noaddr(&nif, NULL, nif_init, ip_input);
  netif_set_default(&nif);
  netif_set_up(&nif);
  netif_set_link_up(&nif);
}

EXPORT(bb_in_buf) uint8_t *bb_in_buf(void) { return in_buf; }
EXPORT(bb_tx_buf) uint8_t *bb_tx_buf(void) { return tx_buf; }
EXPORT(bb_addr_buf) uint8_t *bb_addr_buf(void) { return addr_buf; }
EXPORT(bb_heap_used) uint32_t bb_heap_used(void) { return heap_used; }
EXPORT(bb_heap_peak) uint32_t bb_heap_peak(void) { return heap_peak; }

/* Sets the netif MTU, bytes. */
EXPORT(bb_set_mtu) void bb_set_mtu(uint32_t mtu) {
  nif.mtu = (u16_t)mtu;
  nif.mtu6 = (u16_t)mtu;
}

/* Sets the IPv4 address and netmask from the address buffer (address bytes 0-3, mask bytes 4-7). */
EXPORT(bb_set_ipv4) void bb_set_ipv4(void) {
  ip4_addr_t addr, mask, gw;
  memcpy(&addr.addr, addr_buf, 4);
  memcpy(&mask.addr, addr_buf + 4, 4);
  ip4_addr_set_zero(&gw);
  netif_set_addr(&nif, &addr, &mask, &gw);
}

/* Adds the IPv6 address in the address buffer, preferred at once (no DAD on a tunnel). Returns an err_t. */
EXPORT(bb_add_ipv6) int32_t bb_add_ipv6(void) {
  ip6_addr_t a;
  s8_t idx = -1;
  memcpy(a.addr, addr_buf, 16);
  ip6_addr_clear_zone(&a);
  err_t e = netif_add_ip6_address(&nif, &a, &idx);
  if (e != ERR_OK) return e;
  netif_ip6_addr_set_state(&nif, idx, IP6_ADDR_PREFERRED);
  return ERR_OK;
}

/* Takes one IP packet of `len` bytes from the input buffer. Returns ERR_OK, ERR_MEM (dropped: pool empty) or ERR_VAL. */
EXPORT(bb_input) int32_t bb_input(uint32_t len) {
  if (len == 0 || len > BB_IO_BYTES) return ERR_VAL;
  struct pbuf *p = pbuf_alloc(PBUF_RAW, (u16_t)len, PBUF_POOL);
  if (p == NULL) return ERR_MEM;
  pbuf_take(p, in_buf, (u16_t)len);
  if (nif.input(p, &nif) != ERR_OK) pbuf_free(p);
  return ERR_OK;
}

/* Milliseconds until the next lwIP timer is due (0xffffffff: none). */
EXPORT(bb_sleeptime) uint32_t bb_sleeptime(void) { return sys_timeouts_sleeptime(); }

/* Runs due lwIP timers; returns ms until the next one is due. */
EXPORT(bb_check_timeouts) uint32_t bb_check_timeouts(void) {
  sys_check_timeouts();
  return sys_timeouts_sleeptime();
}

/* A new TCP pcb for connection `id`; 0 when the pool is exhausted. */
EXPORT(bb_tcp_new) struct tcp_pcb *bb_tcp_new(uint32_t id, int32_t v6) {
  struct tcp_pcb *pcb = tcp_new_ip_type(v6 ? IPADDR_TYPE_V6 : IPADDR_TYPE_V4);
  if (pcb == NULL) return NULL;
  attach(pcb, id);
  return pcb;
}

/* Connects to the address and port in the address buffer. Returns an err_t. */
EXPORT(bb_tcp_connect) int32_t bb_tcp_connect(struct tcp_pcb *pcb, int32_t v6) {
  ip_addr_t ip;
  get_addr(&ip, v6);
  uint16_t port = (uint16_t)(addr_buf[16] | (addr_buf[17] << 8));
  return tcp_connect(pcb, &ip, port, on_connected);
}

/* The err_t of the last bb_tcp_listen that returned 0. */
EXPORT(bb_last_err) int32_t bb_last_err(void) { return last_err; }

/* Binds to the address and port in the address buffer and listens. Returns the listen pcb (the
 * given one is freed), or 0 with bb_last_err() set (the given pcb is freed too). */
EXPORT(bb_tcp_listen) struct tcp_pcb *bb_tcp_listen(struct tcp_pcb *pcb, int32_t v6, uint32_t backlog) {
  ip_addr_t ip;
  get_addr(&ip, v6);
  uint16_t port = (uint16_t)(addr_buf[16] | (addr_buf[17] << 8));
  last_err = tcp_bind(pcb, &ip, port);
  if (last_err != ERR_OK) {
    detach(pcb);
    tcp_close(pcb);
    return NULL;
  }
  struct tcp_pcb *lpcb = tcp_listen_with_backlog_and_err(pcb, (u8_t)(backlog > 255 ? 255 : backlog), &last_err);
  if (lpcb == NULL) {
    detach(pcb);
    tcp_close(pcb);
    return NULL;
  }
  tcp_accept(lpcb, on_accept);
  return lpcb;
}

/* Queues `len` (<= 65,535) bytes from the transmit buffer (copied). `more` sets PSH off. Returns an err_t. */
EXPORT(bb_tcp_write) int32_t bb_tcp_write(struct tcp_pcb *pcb, uint32_t len, int32_t more) {
  if (len > BB_IO_BYTES) return ERR_VAL;
  return tcp_write(pcb, tx_buf, (u16_t)len, TCP_WRITE_FLAG_COPY | (more ? TCP_WRITE_FLAG_MORE : 0));
}

EXPORT(bb_tcp_output) int32_t bb_tcp_output(struct tcp_pcb *pcb) { return tcp_output(pcb); }

/* Bytes tcp_write may take now (0 also when the segment queue is full). */
EXPORT(bb_tcp_sndbuf) uint32_t bb_tcp_sndbuf(struct tcp_pcb *pcb) {
  if (tcp_sndqueuelen(pcb) >= TCP_SND_QUEUELEN - 2) return 0;
  return tcp_sndbuf(pcb);
}

/* Bytes lwIP holds that the peer has not acknowledged (sent or not); tcp_sndbuf clamps to 65,535, this does not. */
EXPORT(bb_tcp_outstanding) uint32_t bb_tcp_outstanding(struct tcp_pcb *pcb) { return (uint32_t)(TCP_SND_BUF - pcb->snd_buf); }

/* Opens the receive window by `len` bytes the application has consumed. */
EXPORT(bb_tcp_recved) void bb_tcp_recved(struct tcp_pcb *pcb, uint32_t len) {
  while (len > 0) {
    uint16_t n = len > 0xffff ? 0xffff : (uint16_t)len;
    tcp_recved(pcb, n);
    len -= n;
  }
}

/* Half-close: stop receiving and/or sending (FIN). Returns an err_t. */
EXPORT(bb_tcp_shutdown) int32_t bb_tcp_shutdown(struct tcp_pcb *pcb, int32_t rx, int32_t tx) {
  return tcp_shutdown(pcb, rx, tx);
}

/* Closes gracefully and forgets the pcb (lwIP frees it later); falls back to abort when out of memory. */
EXPORT(bb_tcp_close) int32_t bb_tcp_close(struct tcp_pcb *pcb) {
  detach(pcb);
  err_t e = tcp_close(pcb);
  if (e != ERR_OK) {
    tcp_abort(pcb);
    return e;
  }
  return ERR_OK;
}

/* Resets the connection (RST) and frees the pcb without calling the error callback.
 *
 * Under a zero window lwIP's zero-window probe moves snd_nxt one past the byte
 * the peer has not accepted (tcp_zero_window_probe), and tcp_abort's RST
 * carries snd_nxt: a receiver with a zero window accepts a RST only at exactly
 * its rcv_nxt (RFC 9293 3.10.7.4, RFC 5961 3.2), so Linux drops it and its
 * socket stays ESTABLISHED (issue 18 item 4). While probing, nothing is in
 * flight (lwIP asserts unacked == NULL), so the peer's rcv_nxt is lastack
 * (our snd_una) unless it took the probe byte: a RST at lastack is sent
 * first, then tcp_abort's at snd_nxt covers the other case. A RST out of
 * the peer's window is dropped, so the spare one is harmless. */
EXPORT(bb_tcp_abort) void bb_tcp_abort(struct tcp_pcb *pcb) {
  detach(pcb);
  if (pcb->state >= ESTABLISHED && pcb->state != TIME_WAIT && pcb->snd_nxt != pcb->lastack && pcb->unacked == NULL) {
    tcp_rst(pcb, pcb->lastack, pcb->rcv_nxt, &pcb->local_ip, &pcb->remote_ip, pcb->local_port, pcb->remote_port);
  }
  tcp_abort(pcb);
}

/* Closes a listen pcb. */
EXPORT(bb_tcp_close_listener) void bb_tcp_close_listener(struct tcp_pcb *pcb) {
  tcp_arg(pcb, NULL);
  tcp_accept(pcb, NULL);
  tcp_close(pcb);
}

/* Sets the listener id passed to host_accept. */
EXPORT(bb_tcp_set_listener_id) void bb_tcp_set_listener_id(struct tcp_pcb *pcb, uint32_t id) {
  tcp_arg(pcb, (void *)(uintptr_t)id);
}

/* Writes the local address and port of `pcb` to the address buffer; returns 1 for IPv6. */
EXPORT(bb_tcp_local) int32_t bb_tcp_local(struct tcp_pcb *pcb) {
  put_addr(addr_buf, &pcb->local_ip, pcb->local_port);
  return IP_IS_V6(&pcb->local_ip) ? 1 : 0;
}

/* The TCP state (enum tcp_state: 0 CLOSED .. 10 TIME_WAIT). */
EXPORT(bb_tcp_state) int32_t bb_tcp_state(struct tcp_pcb *pcb) { return pcb->state; }

/* Disables Nagle (1) or enables it (0). */
EXPORT(bb_tcp_nodelay) void bb_tcp_nodelay(struct tcp_pcb *pcb, int32_t on) {
  if (on) tcp_nagle_disable(pcb);
  else tcp_nagle_enable(pcb);
}
