/*
 * shim.h: out-of-line wrappers for DPDK's static-inline API, so that Rust can
 * call them. Every wrapper is `shim_<original name>` and does nothing but call
 * the original (or read/write the one field named).
 */
#ifndef DPDK_SYS_SHIM_H
#define DPDK_SYS_SHIM_H

#include <stdint.h>
#include <rte_config.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

/* ethdev fast path */
uint16_t shim_rte_eth_rx_burst(uint16_t port_id, uint16_t queue_id,
			       struct rte_mbuf **rx_pkts, uint16_t nb_pkts);
uint16_t shim_rte_eth_tx_burst(uint16_t port_id, uint16_t queue_id,
			       struct rte_mbuf **tx_pkts, uint16_t nb_pkts);

/* mbuf allocation */
struct rte_mbuf *shim_rte_pktmbuf_alloc(struct rte_mempool *mp);
int shim_rte_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs,
				unsigned int count);
void shim_rte_pktmbuf_free(struct rte_mbuf *m);

/* mbuf data */
void *shim_rte_pktmbuf_mtod(struct rte_mbuf *m);
char *shim_rte_pktmbuf_append(struct rte_mbuf *m, uint16_t len);
char *shim_rte_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len);
char *shim_rte_pktmbuf_adj(struct rte_mbuf *m, uint16_t len);
int shim_rte_pktmbuf_trim(struct rte_mbuf *m, uint16_t len);
uint16_t shim_rte_pktmbuf_data_len(const struct rte_mbuf *m);
uint32_t shim_rte_pktmbuf_pkt_len(const struct rte_mbuf *m);
/* Set data_len and pkt_len of a single-segment mbuf (no bounds check). */
void shim_rte_pktmbuf_set_len(struct rte_mbuf *m, uint16_t len);
uint16_t shim_rte_pktmbuf_headroom(const struct rte_mbuf *m);
uint16_t shim_rte_pktmbuf_tailroom(const struct rte_mbuf *m);
uint16_t shim_rte_pktmbuf_data_room_size(struct rte_mempool *mp);
uint16_t shim_rte_pktmbuf_nb_segs(const struct rte_mbuf *m);
struct rte_mbuf *shim_rte_pktmbuf_next(const struct rte_mbuf *m);
int shim_rte_pktmbuf_chain(struct rte_mbuf *head, struct rte_mbuf *tail);
int shim_rte_pktmbuf_is_contiguous(const struct rte_mbuf *m);
/* Per-frame fast paths (one call instead of five or six):
 * the data pointer and data_len + tailroom of a single-segment, direct mbuf
 * with reference count 1 (NULL otherwise, *room untouched); and the data
 * pointer and data_len of a single-segment mbuf (NULL for a chain). */
uint8_t *shim_mbuf_tx_room(struct rte_mbuf *m, uint32_t *room);
const uint8_t *shim_mbuf_rx_data(const struct rte_mbuf *m, uint32_t *len);

/* external buffers */
void shim_rte_pktmbuf_attach_extbuf(struct rte_mbuf *m, void *buf_addr,
				    rte_iova_t buf_iova, uint16_t buf_len,
				    struct rte_mbuf_ext_shared_info *shinfo);
struct rte_mbuf_ext_shared_info *
shim_rte_pktmbuf_ext_shinfo_init_helper(void *buf_addr, uint16_t *buf_len,
					rte_mbuf_extbuf_free_callback_t free_cb,
					void *fcb_opaque);
void shim_rte_mbuf_ext_refcnt_set(struct rte_mbuf_ext_shared_info *shinfo,
				  uint16_t new_value);
uint16_t shim_rte_mbuf_ext_refcnt_read(const struct rte_mbuf_ext_shared_info *shinfo);
int shim_rte_mbuf_has_extbuf(const struct rte_mbuf *m);
/* RTE_MBUF_DIRECT: neither indirect nor attached to an external buffer. */
int shim_rte_mbuf_direct(const struct rte_mbuf *m);

/* reference counts */
uint16_t shim_rte_mbuf_refcnt_read(const struct rte_mbuf *m);
void shim_rte_mbuf_refcnt_set(struct rte_mbuf *m, uint16_t new_value);
uint16_t shim_rte_mbuf_refcnt_update(struct rte_mbuf *m, int16_t value);

/* per-lcore state */
int shim_rte_errno(void);
void shim_rte_errno_set(int value);
unsigned int shim_rte_socket_id(void);
unsigned int shim_rte_lcore_id(void);

#endif /* DPDK_SYS_SHIM_H */
