/*
 * lwIP options for Beachball's userspace TCP/IP (src/netstack): lwIP 2.1.3 in
 * NO_SYS mode, raw TCP API only, IPv4 + IPv6 over one point-to-point netif
 * (no link layer: packets come from TUN or WireGuard), compiled to wasm32.
 *
 * Sizes are the bounds documented in src/netstack/limits.ts; keep the two in
 * step. Memory: static pools (PBUF_POOL, segments, pcbs) plus a capped heap
 * (bbnet.c) for send data, so the module's memory has a fixed ceiling.
 */
#ifndef BB_LWIPOPTS_H
#define BB_LWIPOPTS_H

/* --- system: no OS, timers driven by the host through sys_check_timeouts() --- */
#define NO_SYS                          1
#define LWIP_TIMERS                     1
#define SYS_LIGHTWEIGHT_PROT            0
#define LWIP_SOCKET                     0
#define LWIP_NETCONN                    0
#define LWIP_ALTCP                      0
#define LWIP_SINGLE_NETIF               1
#define LWIP_NETIF_TX_SINGLE_PBUF       1
#define LWIP_STATS                      0
#define LWIP_DEBUG                      0

/* --- memory: heap through the capped allocator in bbnet.c, pools static --- */
#define MEM_LIBC_MALLOC                 1
#define mem_clib_malloc                 bb_heap_malloc
#define mem_clib_calloc                 bb_heap_calloc
#define mem_clib_free                   bb_heap_free
#define MEMP_MEM_MALLOC                 0
#define MEM_ALIGNMENT                   4
/* Incoming packets: one pool pbuf per packet of up to 1,536 bytes. */
#define PBUF_POOL_SIZE                  1024
#define PBUF_POOL_BUFSIZE               1536
#define MEMP_NUM_PBUF                   64
#define MEMP_NUM_TCP_PCB                512
#define MEMP_NUM_TCP_PCB_LISTEN         16
#define MEMP_NUM_TCP_SEG                8192
#define MEMP_NUM_REASSDATA              0
#define MEMP_NUM_FRAG_PBUF              0

/* --- IP: both families, no fragmentation (TCP segments fit the MTU), no forwarding --- */
#define LWIP_IPV4                       1
#define LWIP_IPV6                       1
#define IP_FORWARD                      0
#define IP_REASSEMBLY                   0
#define IP_FRAG                         0
#define LWIP_IPV6_FORWARD               0
#define LWIP_IPV6_REASS                 0
#define LWIP_IPV6_FRAG                  0
#define LWIP_IPV6_NUM_ADDRESSES         3
#define LWIP_IPV6_AUTOCONFIG            0
#define LWIP_IPV6_DUP_DETECT_ATTEMPTS   0
#define LWIP_IPV6_SEND_ROUTER_SOLICIT   0
#define LWIP_IPV6_MLD                   0
#define LWIP_IPV6_DHCP6                 0
#define LWIP_ICMP                       1
#define LWIP_ICMP6                      1
#define LWIP_ARP                        0
#define LWIP_ETHERNET                   0
#define LWIP_DHCP                       0
#define LWIP_AUTOIP                     0
#define LWIP_IGMP                       0
#define LWIP_DNS                        0
#define LWIP_RAW                        0
#define LWIP_UDP                        0
#define LWIP_CHKSUM_ALGORITHM           3

/* --- TCP --- */
#define LWIP_TCP                        1
/* A ceiling: segments follow the netif MTU (bb_set_mtu, TCP_CALCULATE_EFF_SEND_MSS); 1,420 - 40 - 20 (ADR 0103). */
#define TCP_MSS                         1360
#define LWIP_WND_SCALE                  1
#define TCP_RCV_SCALE                   3
/* Receive window per connection: the most unread data a connection holds. */
#define TCP_WND                         (256 * 1024)
/* Send buffer per connection (copied into the heap by tcp_write). */
#define TCP_SND_BUF                     (256 * 1024)
#define TCP_SND_QUEUELEN                (4 * TCP_SND_BUF / TCP_MSS)
#define TCP_SNDLOWAT                    (32 * 1024)
#define TCP_SNDQUEUELOWAT               (TCP_SND_QUEUELEN / 2)
#define TCP_QUEUE_OOSEQ                 1
#define TCP_OOSEQ_MAX_BYTES             (256 * 1024)
#define TCP_OOSEQ_MAX_PBUFS             192
#define LWIP_TCP_SACK_OUT               1
#define LWIP_TCP_MAX_SACK_NUM           4
#define TCP_LISTEN_BACKLOG              1
#define TCP_DEFAULT_LISTEN_BACKLOG      64
/* The TCP timer: 20 ms instead of 250 ms (250 ms gave 0.3-1.3 s retransmission stalls). */
#define TCP_TMR_INTERVAL                20
#define LWIP_TCP_TIMESTAMPS             0
#define LWIP_TCP_KEEPALIVE              0
#define LWIP_RANDOMIZE_INITIAL_LOCAL_PORTS 1
/* Initial sequence numbers from the host's randomness (RFC 6528 asks for unpredictable ISNs). */
#define LWIP_HOOK_TCP_ISN(local_ip, local_port, remote_ip, remote_port) bb_tcp_isn()

/* --- callbacks we do not use --- */
#define LWIP_NETIF_STATUS_CALLBACK      0
#define LWIP_NETIF_LINK_CALLBACK        0
#define LWIP_NETIF_HOSTNAME             0
#define LWIP_NETIF_API                  0
#define LWIP_NETIF_LOOPBACK             0
#define LWIP_HAVE_LOOPIF                0

#include <stddef.h>
#include <stdint.h>
uint32_t bb_tcp_isn(void);
void *bb_heap_malloc(size_t size);
void *bb_heap_calloc(size_t count, size_t size);
void bb_heap_free(void *p);

#endif /* BB_LWIPOPTS_H */
