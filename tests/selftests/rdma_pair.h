/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rdma_pair: two RC QPs on one RDMA device (soft-RoCE in the vamr test
 * guest), connected to each other, plus small helpers to post work
 * requests and wait for their completions.
 *
 * Both QPs live in the same PD, so an MR registered with
 * rdma_pair_reg_mr() can be used as the local buffer of either side and as
 * the remote target (rkey) of either side.  Side 0 and side 1 are
 * symmetrical; tests usually post from side 0 ("requester") at an MR that
 * side 1's responder then accesses.
 *
 * Each QP has its own send CQ and its own receive CQ, so send and receive
 * completions never mix.
 *
 * Conventions: functions return 0 or a negative errno; the "wait" and
 * "_sync" helpers return an enum ibv_wc_status (>= 0, IBV_WC_SUCCESS == 0)
 * once a completion arrived, or a negative errno (-ETIMEDOUT, ...).
 * Nothing here calls exit() or prints unless asked.
 *
 * Environment: VAMR_IBDEV names the device (default "rxe0").
 *
 * On an iWARP device (siw) the QPs cannot be connected by hand (an iWARP
 * connection is a TCP stream): rdma_pair_open() then connects them through
 * the RDMA CM on RDMA_PAIR_IWARP_ADDR, qp[0] the active side, qp[1] the
 * accepted one, and rdma_pair_recover() connects two new QPs.
 */
#ifndef VAMR_SELFTEST_RDMA_PAIR_H
#define VAMR_SELFTEST_RDMA_PAIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include "../../include/uapi/misc/vamr.h"

#define RDMA_PAIR_DEFAULT_DEV		"rxe0"
#define RDMA_PAIR_ENV_DEV		"VAMR_IBDEV"
#define RDMA_PAIR_PORT			1
#define RDMA_PAIR_QUEUE_DEPTH		64
#define RDMA_PAIR_CQ_DEPTH		128
#define RDMA_PAIR_DEFAULT_TIMEOUT_MS	15000
/* Local ACK timeout of the QPs: 4.096 us * 2^14, about 67 ms. */
#define RDMA_PAIR_DEFAULT_ACK_TIMEOUT	14
/* Transport retries (IBV_QP_RETRY_CNT); rxe never gives up at 7. */
#define RDMA_PAIR_DEFAULT_RETRY_CNT	7
/* How long rdma_pair_open() waits for the port / the GID to show up. */
#define RDMA_PAIR_GID_WAIT_MS		3000
/*
 * The address the RDMA CM connects an iWARP pair on, both ends: the address
 * of siw0's netdev (scripts/guest/init gives it to the NIC run-guest.sh adds
 * for siw). Not a loopback address: for those the CM takes the first active
 * device (cma_bind_loopback(), drivers/infiniband/core/cma.c), and siw on lo
 * is never found, its GID being lo's zero hardware address.
 */
#define RDMA_PAIR_IWARP_ADDR		"10.233.0.2"

/* Access flags for the QPs (what the responder allows at all). */
#define RDMA_PAIR_QP_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
			     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

struct rdma_pair {
	char dev_name[64];
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *scq[2];		/* send CQ of qp[i] */
	struct ibv_cq *rcq[2];		/* receive CQ of qp[i] */
	/*
	 * Completion channels of scq[i] and rcq[i] (non-blocking fds): the
	 * waits below sleep on them instead of polling (see wait_cq()).
	 */
	struct ibv_comp_channel *schan[2], *rchan[2];
	struct ibv_qp *qp[2];
	uint8_t port;			/* RDMA_PAIR_PORT */
	int gid_index;			/* index of ::ffff:127.0.0.1 */
	union ibv_gid gid;		/* that GID (used as sgid and dgid) */
	enum ibv_mtu mtu;		/* IBV_MTU_1024 */
	uint32_t psn[2];		/* current initial send PSN of qp[i] */
	/*
	 * Local ACK timeout (IBV_QP_TIMEOUT) and transport retry count
	 * (IBV_QP_RETRY_CNT) used when the QPs are (re)connected; 0 means
	 * RDMA_PAIR_DEFAULT_ACK_TIMEOUT, RDMA_PAIR_DEFAULT_RETRY_CNT. Set them,
	 * then rdma_pair_recover().
	 */
	uint8_t timeout;
	uint8_t retry_cnt;
	/*
	 * iWARP: connected through the RDMA CM. ctx is then the CM's context
	 * of the device (not closed by rdma_pair_close()); cm_listen holds it.
	 */
	bool iwarp;
	struct rdma_event_channel *cm_ch;
	struct rdma_cm_id *cm_listen, *cm_id[2];
};

/* Whether @p's device is an iWARP one (siw): no atomics, no ODP. */
static inline bool rdma_pair_is_iwarp(const struct rdma_pair *p)
{
	return p->iwarp;
}

/*
 * The device name rdma_pair_open(p, NULL) uses: $VAMR_IBDEV, or "rxe0".
 */
const char *rdma_pair_default_dev(void);

/*
 * Open @dev_name (NULL: rdma_pair_default_dev()), allocate PD, CQs and two
 * RC QPs, find the IPv4-mapped RoCEv2 GID ::ffff:127.0.0.1 (waiting up to
 * RDMA_PAIR_GID_WAIT_MS for it and for the port to be ACTIVE) and connect
 * the QPs to each other (both in RTS).
 *
 * Returns 0, -ENODEV if the device does not exist (callers usually SKIP),
 * -ENETUNREACH if the port never became active or the GID never appeared,
 * or another -errno.  On failure everything is released and *p is zeroed.
 */
int rdma_pair_open(struct rdma_pair *p, const char *dev_name);

/*
 * Destroy QPs, CQs, PD and close the device.  MRs must have been
 * deregistered by the caller first (ibv_dealloc_pd fails with EBUSY
 * otherwise; that is reported as the return value).  Safe on a zeroed or
 * partially opened pair; safe to call twice.  Returns 0 or the first
 * -errno met.
 */
int rdma_pair_close(struct rdma_pair *p);

/*
 * Register [addr, addr + len) in the pair's PD with arbitrary @access
 * flags (including IBV_ACCESS_ON_DEMAND or bits in
 * IBV_ACCESS_OPTIONAL_RANGE, which are passed through as is; iova = addr).
 * Returns 0 and *mr, or -errno.  The caller deregisters with ibv_dereg_mr().
 */
int rdma_pair_reg_mr(struct rdma_pair *p, void *addr, size_t len,
		     unsigned int access, struct ibv_mr **mr);

/* --- posting (all WRs signaled; return 0 or -errno from ibv_post_*) --- */

/* RDMA WRITE @len bytes from local @laddr (@lkey) to @raddr (@rkey). */
int rdma_pair_post_write(struct rdma_pair *p, int side, uint64_t wr_id,
			 const void *laddr, uint32_t lkey,
			 uint64_t raddr, uint32_t rkey, uint32_t len);

/* RDMA READ @len bytes from @raddr (@rkey) into local @laddr (@lkey). */
int rdma_pair_post_read(struct rdma_pair *p, int side, uint64_t wr_id,
			void *laddr, uint32_t lkey,
			uint64_t raddr, uint32_t rkey, uint32_t len);

/* SEND @len bytes from local @laddr (@lkey) to the other side's RQ. */
int rdma_pair_post_send(struct rdma_pair *p, int side, uint64_t wr_id,
			const void *laddr, uint32_t lkey, uint32_t len);

/* Post a receive buffer of @len bytes at @laddr (@lkey) on @side's RQ. */
int rdma_pair_post_recv(struct rdma_pair *p, int side, uint64_t wr_id,
			void *laddr, uint32_t lkey, uint32_t len);

/*
 * 64-bit atomics on the 8-byte aligned @raddr (@rkey).  The original remote
 * value is written by the device to the 8-byte local @result (@lkey, needs
 * IBV_ACCESS_LOCAL_WRITE).  (On rxe all values are host-endian.)
 */
int rdma_pair_post_fetch_add(struct rdma_pair *p, int side, uint64_t wr_id,
			     uint64_t *result, uint32_t lkey,
			     uint64_t raddr, uint32_t rkey, uint64_t add);
int rdma_pair_post_cmp_swap(struct rdma_pair *p, int side, uint64_t wr_id,
			    uint64_t *result, uint32_t lkey,
			    uint64_t raddr, uint32_t rkey,
			    uint64_t compare, uint64_t swap);

/* --- completions --- */

/*
 * Wait up to @timeout_ms (<= 0: RDMA_PAIR_DEFAULT_TIMEOUT_MS) for the next
 * completion on @side's send CQ (resp. receive CQ).  Busy-polls with short
 * sleeps.  Returns the completion's status (>= 0; IBV_WC_SUCCESS == 0) and
 * copies it to *wc if @wc is not NULL, -ETIMEDOUT if none came, -EIO if
 * ibv_poll_cq failed, -EINVAL on a bad side.
 */
int rdma_pair_wait_send(struct rdma_pair *p, int side, int timeout_ms,
			struct ibv_wc *wc);
int rdma_pair_wait_recv(struct rdma_pair *p, int side, int timeout_ms,
			struct ibv_wc *wc);

/* Poll every CQ of the pair until empty; returns how many were discarded. */
int rdma_pair_drain(struct rdma_pair *p);

/*
 * Post one operation from @side and wait (@timeout_ms as above) for its
 * send completion (a WRITE: until it is placed, rdma_pair_write_placed()).
 * Return the completion status (>= 0) or -errno; a successful completion
 * with a wrong wr_id or opcode gives -EPROTO.
 */
int rdma_pair_write_sync(struct rdma_pair *p, int side,
			 const void *laddr, uint32_t lkey,
			 uint64_t raddr, uint32_t rkey, uint32_t len,
			 int timeout_ms);
/*
 * After a WRITE from @side to @raddr/@rkey completed: wait until it is
 * placed in the responder's memory. On InfiniBand and RoCE that is what the
 * WRITE's completion says already (IBV_WC_SUCCESS at once). On iWARP a
 * WRITE completes once the transport took it (RFC 5040 has no WRITE
 * acknowledgement): a zero-length RDMA READ on the same QP follows it, which
 * the responder answers only after it placed the WRITE (RFC 5040, 5.5:
 * RDMA READ requests are not passed by earlier WRITEs' placement). Returns
 * that READ's completion status, or -errno. rdma_pair_write_sync() calls
 * it; a test that posts WRITEs itself calls it before it looks at the
 * responder's bytes.
 */
int rdma_pair_write_placed(struct rdma_pair *p, int side, uint64_t raddr, uint32_t rkey,
			   int timeout_ms);
int rdma_pair_read_sync(struct rdma_pair *p, int side,
			void *laddr, uint32_t lkey,
			uint64_t raddr, uint32_t rkey, uint32_t len,
			int timeout_ms);
int rdma_pair_fetch_add_sync(struct rdma_pair *p, int side,
			     uint64_t *result, uint32_t lkey,
			     uint64_t raddr, uint32_t rkey, uint64_t add,
			     int timeout_ms);
int rdma_pair_cmp_swap_sync(struct rdma_pair *p, int side,
			    uint64_t *result, uint32_t lkey,
			    uint64_t raddr, uint32_t rkey,
			    uint64_t compare, uint64_t swap, int timeout_ms);

/*
 * Post a RECV of @rlen bytes at @raddr_local (@rlkey) on the other side,
 * then a SEND of @slen bytes from @saddr (@slkey) from @side; wait for
 * both completions.  Returns the send status if it is not IBV_WC_SUCCESS,
 * else the receive status, or -errno.  *recv_wc (if not NULL) gets the
 * receive completion (byte_len tells how much arrived).
 */
int rdma_pair_send_recv_sync(struct rdma_pair *p, int side,
			     const void *saddr, uint32_t slkey, uint32_t slen,
			     void *raddr_local, uint32_t rlkey, uint32_t rlen,
			     int timeout_ms, struct ibv_wc *recv_wc);

/* --- QP state --- */

/*
 * Moves @qp (of @p's PD and port, or another QP of @p's context) through
 * RESET, INIT, RTR and RTS towards the RC QP @dest_qpn on @p's GID (another
 * process's, or one created outside the pair), with @p's attributes: 0 or
 * -errno.
 */
int rdma_pair_connect_qp(struct rdma_pair *p, struct ibv_qp *qp, uint32_t dest_qpn,
			 uint32_t sq_psn, uint32_t rq_psn);

/* Current state of qp[@side] (enum ibv_qp_state, >= 0) or -errno. */
int rdma_pair_qp_state(struct rdma_pair *p, int side);

/*
 * Poll qp[@side]'s state until it is @state or @timeout_ms (<= 0: default)
 * passed.  Returns the last state seen (>= 0) or -errno.  Useful after an
 * error completion: rxe posts the error CQE before it moves the QP to ERR.
 */
int rdma_pair_wait_qp_state(struct rdma_pair *p, int side,
			    enum ibv_qp_state state, int timeout_ms);

/*
 * Bring both QPs back after an error (or to abandon stuck WRs): ERR, then
 * RESET both, discard everything left in the CQs, then INIT -> RTR -> RTS
 * connected to each other again, with fresh PSNs.  Posted-but-uncompleted
 * WRs are lost.  Retried up to 10 times, waiting longer each time, if a
 * late provider-side error transition races with it.  Returns 0 or -errno.
 */
int rdma_pair_recover(struct rdma_pair *p);

/*
 * The VAMR_IOC_MR_QUERY request for @mr: its lkey on its device, named by the
 * kernel's device index (ibv_get_device_index()).
 */
static inline struct vamr_mr_query vamr_mr_query_of(const struct ibv_mr *mr)
{
	return (struct vamr_mr_query){
		.key = mr->lkey,
		.ib_index = (uint32_t)ibv_get_device_index(mr->context->device),
	};
}

#endif /* VAMR_SELFTEST_RDMA_PAIR_H */
