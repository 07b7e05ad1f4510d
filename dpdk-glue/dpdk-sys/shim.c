/* shim.c: see shim.h. */
#include "shim.h"

uint16_t shim_rte_eth_rx_burst(uint16_t port_id, uint16_t queue_id,
			       struct rte_mbuf **rx_pkts, uint16_t nb_pkts)
{
	return rte_eth_rx_burst(port_id, queue_id, rx_pkts, nb_pkts);
}

uint16_t shim_rte_eth_tx_burst(uint16_t port_id, uint16_t queue_id,
			       struct rte_mbuf **tx_pkts, uint16_t nb_pkts)
{
	return rte_eth_tx_burst(port_id, queue_id, tx_pkts, nb_pkts);
}

struct rte_mbuf *shim_rte_pktmbuf_alloc(struct rte_mempool *mp)
{
	return rte_pktmbuf_alloc(mp);
}

int shim_rte_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs,
				unsigned int count)
{
	return rte_pktmbuf_alloc_bulk(mp, mbufs, count);
}

void shim_rte_pktmbuf_free(struct rte_mbuf *m)
{
	rte_pktmbuf_free(m);
}

void *shim_rte_pktmbuf_mtod(struct rte_mbuf *m)
{
	return rte_pktmbuf_mtod(m, void *);
}

char *shim_rte_pktmbuf_append(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_append(m, len);
}

char *shim_rte_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_prepend(m, len);
}

char *shim_rte_pktmbuf_adj(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_adj(m, len);
}

int shim_rte_pktmbuf_trim(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_trim(m, len);
}

uint16_t shim_rte_pktmbuf_data_len(const struct rte_mbuf *m)
{
	return rte_pktmbuf_data_len(m);
}

uint32_t shim_rte_pktmbuf_pkt_len(const struct rte_mbuf *m)
{
	return rte_pktmbuf_pkt_len(m);
}

void shim_rte_pktmbuf_set_len(struct rte_mbuf *m, uint16_t len)
{
	m->data_len = len;
	m->pkt_len = len;
}

uint16_t shim_rte_pktmbuf_headroom(const struct rte_mbuf *m)
{
	return rte_pktmbuf_headroom(m);
}

uint16_t shim_rte_pktmbuf_tailroom(const struct rte_mbuf *m)
{
	return rte_pktmbuf_tailroom(m);
}

uint16_t shim_rte_pktmbuf_data_room_size(struct rte_mempool *mp)
{
	return rte_pktmbuf_data_room_size(mp);
}

uint8_t *shim_mbuf_tx_room(struct rte_mbuf *m, uint32_t *room)
{
	if (m->nb_segs != 1 || !RTE_MBUF_DIRECT(m) ||
	    rte_mbuf_refcnt_read(m) != 1)
		return NULL;
	*room = (uint32_t)m->data_len + rte_pktmbuf_tailroom(m);
	return rte_pktmbuf_mtod(m, uint8_t *);
}

const uint8_t *shim_mbuf_rx_data(const struct rte_mbuf *m, uint32_t *len)
{
	if (m->nb_segs != 1)
		return NULL;
	*len = m->data_len;
	return rte_pktmbuf_mtod(m, const uint8_t *);
}

uint16_t shim_rte_pktmbuf_nb_segs(const struct rte_mbuf *m)
{
	return m->nb_segs;
}

struct rte_mbuf *shim_rte_pktmbuf_next(const struct rte_mbuf *m)
{
	return m->next;
}

int shim_rte_pktmbuf_chain(struct rte_mbuf *head, struct rte_mbuf *tail)
{
	return rte_pktmbuf_chain(head, tail);
}

int shim_rte_pktmbuf_is_contiguous(const struct rte_mbuf *m)
{
	return rte_pktmbuf_is_contiguous(m);
}

void shim_rte_pktmbuf_attach_extbuf(struct rte_mbuf *m, void *buf_addr,
				    rte_iova_t buf_iova, uint16_t buf_len,
				    struct rte_mbuf_ext_shared_info *shinfo)
{
	rte_pktmbuf_attach_extbuf(m, buf_addr, buf_iova, buf_len, shinfo);
}

struct rte_mbuf_ext_shared_info *
shim_rte_pktmbuf_ext_shinfo_init_helper(void *buf_addr, uint16_t *buf_len,
					rte_mbuf_extbuf_free_callback_t free_cb,
					void *fcb_opaque)
{
	return rte_pktmbuf_ext_shinfo_init_helper(buf_addr, buf_len, free_cb,
						  fcb_opaque);
}

void shim_rte_mbuf_ext_refcnt_set(struct rte_mbuf_ext_shared_info *shinfo,
				  uint16_t new_value)
{
	rte_mbuf_ext_refcnt_set(shinfo, new_value);
}

uint16_t shim_rte_mbuf_ext_refcnt_read(const struct rte_mbuf_ext_shared_info *shinfo)
{
	return rte_mbuf_ext_refcnt_read(shinfo);
}

int shim_rte_mbuf_has_extbuf(const struct rte_mbuf *m)
{
	return RTE_MBUF_HAS_EXTBUF(m) ? 1 : 0;
}

int shim_rte_mbuf_direct(const struct rte_mbuf *m)
{
	return RTE_MBUF_DIRECT(m) ? 1 : 0;
}

uint16_t shim_rte_mbuf_refcnt_read(const struct rte_mbuf *m)
{
	return rte_mbuf_refcnt_read(m);
}

void shim_rte_mbuf_refcnt_set(struct rte_mbuf *m, uint16_t new_value)
{
	rte_mbuf_refcnt_set(m, new_value);
}

uint16_t shim_rte_mbuf_refcnt_update(struct rte_mbuf *m, int16_t value)
{
	return rte_mbuf_refcnt_update(m, value);
}

int shim_rte_errno(void)
{
	return rte_errno;
}

void shim_rte_errno_set(int value)
{
	rte_errno = value;
}

unsigned int shim_rte_socket_id(void)
{
	return rte_socket_id();
}

unsigned int shim_rte_lcore_id(void)
{
	return rte_lcore_id();
}

/* Constants the Rust side hard-codes because bindgen cannot expand RTE_BIT64. */
_Static_assert(RTE_ETH_TX_OFFLOAD_MULTI_SEGS == (1ULL << 15),
	       "RTE_ETH_TX_OFFLOAD_MULTI_SEGS changed: update dpdk-sys/src/lib.rs");
_Static_assert(RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE == (1ULL << 16),
	       "RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE changed: update dpdk-sys/src/lib.rs");
