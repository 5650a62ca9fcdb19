// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_pair: two RC QPs on one RDMA device connected to each other.
 * See rdma_pair.h for the API and its conventions.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rdma_pair.h"

/* Initial PSNs; rdma_pair_recover() moves them on so old packets can't match. */
#define PSN_BASE_0	0x001234
#define PSN_BASE_1	0x005678
#define PSN_STEP	0x010101
#define PSN_MASK	0xffffff

/* WR ids the _sync helpers use. */
#define SYNC_WR_ID	0x5a5a0000ULL

/* A verbs call that returns an errno value (or -1 and errno) -> -errno. */
static int verbs_err(int rc)
{
	if (rc > 0)
		return -rc;
	if (rc < 0)
		return errno ? -errno : -EIO;
	return 0;
}

/* A verbs call that returned NULL -> -errno. */
static int null_err(void)
{
	return errno ? -errno : -ENOMEM;
}

static bool side_ok(const struct rdma_pair *p, int side)
{
	return p && (side == 0 || side == 1) && p->qp[side];
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(long ns)
{
	struct timespec ts = { .tv_sec = ns / 1000000000L,
			       .tv_nsec = ns % 1000000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

const char *rdma_pair_default_dev(void)
{
	const char *s = getenv(RDMA_PAIR_ENV_DEV);

	return (s && *s) ? s : RDMA_PAIR_DEFAULT_DEV;
}

/* ::ffff:127.0.0.1, the IPv4-mapped GID of 127.0.0.1 on RoCEv2. */
static bool gid_is_v4_loopback(const union ibv_gid *gid)
{
	static const uint8_t want[16] = {
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1,
	};

	return memcmp(gid->raw, want, sizeof(want)) == 0;
}

/*
 * Look for ::ffff:127.0.0.1 in the port's GID table.  Returns its index or
 * -ENOENT.  Entries that ibv_query_gid_ex() reports as RoCE v1 are skipped
 * (rxe only has v2 ones; a device with both lists the address twice).
 */
static int find_gid(struct rdma_pair *p, int tbl_len)
{
	int i;

	for (i = 0; i < tbl_len; i++) {
		struct ibv_gid_entry ent;
		union ibv_gid gid;

		if (ibv_query_gid(p->ctx, p->port, i, &gid))
			continue;
		if (!gid_is_v4_loopback(&gid))
			continue;
		memset(&ent, 0, sizeof(ent));
		if (!ibv_query_gid_ex(p->ctx, p->port, i, &ent, 0) &&
		    ent.gid_type == IBV_GID_TYPE_ROCE_V1)
			continue;
		p->gid = gid;
		return i;
	}
	return -ENOENT;
}

/* Wait for the port to be ACTIVE and the GID to exist. */
static int wait_port_and_gid(struct rdma_pair *p)
{
	uint64_t deadline = now_ns() + (uint64_t)RDMA_PAIR_GID_WAIT_MS * 1000000ULL;

	for (;;) {
		struct ibv_port_attr pattr;
		int rc;

		memset(&pattr, 0, sizeof(pattr));
		rc = ibv_query_port(p->ctx, p->port, &pattr);
		if (rc)
			return verbs_err(rc);
		if (pattr.state == IBV_PORT_ACTIVE) {
			rc = find_gid(p, pattr.gid_tbl_len);
			if (rc >= 0) {
				p->gid_index = rc;
				return 0;
			}
		}
		if (now_ns() >= deadline)
			return -ENETUNREACH;
		sleep_ns(50 * 1000000L);
	}
}

static int open_device(struct rdma_pair *p)
{
	struct ibv_device **list;
	int i, n = 0, rc = -ENODEV;

	list = ibv_get_device_list(&n);
	if (!list)
		return -ENODEV;	/* no RDMA support at all */
	for (i = 0; i < n; i++) {
		if (strcmp(ibv_get_device_name(list[i]), p->dev_name))
			continue;
		p->ctx = ibv_open_device(list[i]);
		rc = p->ctx ? 0 : null_err();
		break;
	}
	ibv_free_device_list(list);
	return rc;
}

static int create_qp(struct rdma_pair *p, int side)
{
	struct ibv_qp_init_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.send_cq = p->scq[side];
	attr.recv_cq = p->rcq[side];
	attr.qp_type = IBV_QPT_RC;
	attr.sq_sig_all = 0;
	attr.cap.max_send_wr = RDMA_PAIR_QUEUE_DEPTH;
	attr.cap.max_recv_wr = RDMA_PAIR_QUEUE_DEPTH;
	attr.cap.max_send_sge = 1;
	attr.cap.max_recv_sge = 1;
	attr.cap.max_inline_data = 0;

	if (p->iwarp) {
		if (rdma_create_qp(p->cm_id[side], p->pd, &attr))
			return null_err();
		p->qp[side] = p->cm_id[side]->qp;
		return 0;
	}
	p->qp[side] = ibv_create_qp(p->pd, &attr);
	return p->qp[side] ? 0 : null_err();
}

/* --- iWARP: connecting through the RDMA CM --- */

/*
 * The next CM event, which must be @type (for @id when not NULL), within
 * @ms; *@out (if not NULL) gets the event's id. 0 or -errno (-EPROTO for
 * another event).
 */
static int cm_wait(struct rdma_pair *p, enum rdma_cm_event_type type,
		   struct rdma_cm_id *id, struct rdma_cm_id **out, int ms)
{
	struct pollfd pfd = { .fd = p->cm_ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;
	int rc;

	for (;;) {
		rc = poll(&pfd, 1, ms);
		if (rc < 0)
			return -errno;
		if (rc == 0)
			return -ETIMEDOUT;
		if (rdma_get_cm_event(p->cm_ch, &ev))
			return -errno;
		if (ev->event == type && (!id || ev->id == id))
			break;
		/* The end of an earlier connection (rdma_pair_recover()). */
		if (ev->event == RDMA_CM_EVENT_DISCONNECTED ||
		    ev->event == RDMA_CM_EVENT_TIMEWAIT_EXIT) {
			rdma_ack_cm_event(ev);
			continue;
		}
		fprintf(stderr, "rdma_pair: CM event %s (status %d), expected %s\n",
			rdma_event_str(ev->event), ev->status, rdma_event_str(type));
		rdma_ack_cm_event(ev);
		return -EPROTO;
	}
	if (out)
		*out = ev->id;
	rdma_ack_cm_event(ev);
	return 0;
}

static void cm_addr(struct sockaddr_in *sin, uint16_t port)
{
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_port = port;
	inet_pton(AF_INET, RDMA_PAIR_IWARP_ADDR, &sin->sin_addr);
}

/*
 * The CM channel and a listener on RDMA_PAIR_IWARP_ADDR, nonblocking (every
 * wait is cm_wait()'s bounded poll).
 */
static int cm_listen(struct rdma_pair *p)
{
	struct sockaddr_in sin;

	p->cm_ch = rdma_create_event_channel();
	if (!p->cm_ch)
		return null_err();
	if (fcntl(p->cm_ch->fd, F_SETFL, fcntl(p->cm_ch->fd, F_GETFL) | O_NONBLOCK) < 0)
		return -errno;
	if (rdma_create_id(p->cm_ch, &p->cm_listen, NULL, RDMA_PS_TCP))
		return null_err();
	cm_addr(&sin, 0);
	if (rdma_bind_addr(p->cm_listen, (struct sockaddr *)&sin))
		return null_err();
	if (rdma_listen(p->cm_listen, 2))
		return null_err();
	return 0;
}

/*
 * A new active id in cm_id[0], its address and route resolved towards the
 * listener; p->ctx becomes its device's context (the CM's), which must be
 * p->dev_name's: -ENODEV when the CM resolved the address to another device
 * (the address is not on siw0's netdev).
 */
static int cm_resolve(struct rdma_pair *p)
{
	struct sockaddr_in src, dst;
	const char *name;
	int rc;

	if (rdma_create_id(p->cm_ch, &p->cm_id[0], NULL, RDMA_PS_TCP))
		return null_err();
	cm_addr(&src, 0);
	cm_addr(&dst, rdma_get_src_port(p->cm_listen));
	if (rdma_resolve_addr(p->cm_id[0], (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000))
		return null_err();
	rc = cm_wait(p, RDMA_CM_EVENT_ADDR_RESOLVED, p->cm_id[0], NULL, 5000);
	if (rc)
		return rc;
	name = p->cm_id[0]->verbs ? ibv_get_device_name(p->cm_id[0]->verbs->device) : "(none)";
	if (strcmp(name, p->dev_name) || (p->ctx && p->ctx != p->cm_id[0]->verbs)) {
		fprintf(stderr, "rdma_pair: the RDMA CM connects %s on %s, not %s\n",
			RDMA_PAIR_IWARP_ADDR, name, p->dev_name);
		return -ENODEV;
	}
	p->ctx = p->cm_id[0]->verbs;
	if (rdma_resolve_route(p->cm_id[0], 2000))
		return null_err();
	return cm_wait(p, RDMA_CM_EVENT_ROUTE_RESOLVED, p->cm_id[0], NULL, 5000);
}

/* A new connection between two new QPs, cm_id[0] active, cm_id[1] accepted. */
static int cm_connect(struct rdma_pair *p)
{
	struct rdma_conn_param param = {
		.responder_resources = 4,
		.initiator_depth = 4,
		.retry_count = 7,
		.rnr_retry_count = 7,
	};
	int rc, i, established = 0;

	/* cm_id[0] resolved already (cm_resolve()). */
	rc = create_qp(p, 0);
	if (rc)
		return rc;
	if (rdma_connect(p->cm_id[0], &param))
		return null_err();
	rc = cm_wait(p, RDMA_CM_EVENT_CONNECT_REQUEST, NULL, &p->cm_id[1], 5000);
	if (rc)
		return rc;
	rc = create_qp(p, 1);
	if (rc)
		return rc;
	if (rdma_accept(p->cm_id[1], &param))
		return null_err();
	for (i = 0; i < 2; i++) {
		struct rdma_cm_id *id;

		rc = cm_wait(p, RDMA_CM_EVENT_ESTABLISHED, NULL, &id, 5000);
		if (rc)
			return rc;
		established |= id == p->cm_id[0] ? 1 : 2;
	}
	return established == 3 ? 0 : -EPROTO;
}

/* Destroys the QPs and CM ids of the connection (not the listener). */
static int cm_disconnect(struct rdma_pair *p)
{
	int i, rc = 0;

	for (i = 1; i >= 0; i--) {
		if (!p->cm_id[i])
			continue;
		if (p->qp[i])
			rdma_destroy_qp(p->cm_id[i]);
		p->qp[i] = NULL;
		if (rdma_destroy_id(p->cm_id[i]) && !rc)
			rc = -errno;
		p->cm_id[i] = NULL;
	}
	return rc;
}

static int qp_to_reset(struct ibv_qp *qp)
{
	struct ibv_qp_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RESET;
	return verbs_err(ibv_modify_qp(qp, &attr, IBV_QP_STATE));
}

static int qp_to_init(struct rdma_pair *p, struct ibv_qp *qp)
{
	struct ibv_qp_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_INIT;
	attr.pkey_index = 0;
	attr.port_num = p->port;
	attr.qp_access_flags = RDMA_PAIR_QP_ACCESS;
	return verbs_err(ibv_modify_qp(qp, &attr,
				       IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				       IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
}

static int qp_to_rtr(struct rdma_pair *p, struct ibv_qp *qp,
		     uint32_t dest_qpn, uint32_t rq_psn)
{
	struct ibv_qp_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTR;
	attr.path_mtu = p->mtu;
	attr.dest_qp_num = dest_qpn;
	attr.rq_psn = rq_psn & PSN_MASK;
	attr.max_dest_rd_atomic = 4;
	attr.min_rnr_timer = 12;
	attr.ah_attr.is_global = 1;
	attr.ah_attr.dlid = 0;
	attr.ah_attr.sl = 0;
	attr.ah_attr.src_path_bits = 0;
	attr.ah_attr.port_num = p->port;
	attr.ah_attr.grh.dgid = p->gid;
	attr.ah_attr.grh.sgid_index = (uint8_t)p->gid_index;
	attr.ah_attr.grh.hop_limit = 64;
	attr.ah_attr.grh.traffic_class = 0;
	attr.ah_attr.grh.flow_label = 0;
	return verbs_err(ibv_modify_qp(qp, &attr,
				       IBV_QP_STATE | IBV_QP_AV |
				       IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				       IBV_QP_RQ_PSN |
				       IBV_QP_MAX_DEST_RD_ATOMIC |
				       IBV_QP_MIN_RNR_TIMER));
}

static int qp_to_rts(struct rdma_pair *p, struct ibv_qp *qp, uint32_t sq_psn)
{
	struct ibv_qp_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTS;
	attr.timeout = p->timeout ? p->timeout : RDMA_PAIR_DEFAULT_ACK_TIMEOUT;
	attr.retry_cnt = p->retry_cnt ? p->retry_cnt : RDMA_PAIR_DEFAULT_RETRY_CNT;
	attr.rnr_retry = 7;
	attr.sq_psn = sq_psn & PSN_MASK;
	attr.max_rd_atomic = 4;
	return verbs_err(ibv_modify_qp(qp, &attr,
				       IBV_QP_STATE | IBV_QP_TIMEOUT |
				       IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				       IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC));
}

int rdma_pair_connect_qp(struct rdma_pair *p, struct ibv_qp *qp, uint32_t dest_qpn,
			 uint32_t sq_psn, uint32_t rq_psn)
{
	int rc;

	if (p->iwarp)
		return -EOPNOTSUPP;	/* an iWARP QP connects through the CM */
	rc = qp_to_reset(qp);
	if (!rc)
		rc = qp_to_init(p, qp);
	if (!rc)
		rc = qp_to_rtr(p, qp, dest_qpn, rq_psn);
	if (!rc)
		rc = qp_to_rts(p, qp, sq_psn);
	return rc;
}

/* Both QPs in RESET -> INIT -> RTR -> RTS, each pointing at the other. */
static int connect_pair(struct rdma_pair *p)
{
	int rc, i;

	for (i = 0; i < 2; i++) {
		rc = qp_to_init(p, p->qp[i]);
		if (rc)
			return rc;
	}
	for (i = 0; i < 2; i++) {
		/* qp[i] receives what qp[!i] sends, starting at qp[!i]'s sq_psn */
		rc = qp_to_rtr(p, p->qp[i], p->qp[!i]->qp_num, p->psn[!i]);
		if (rc)
			return rc;
	}
	for (i = 0; i < 2; i++) {
		rc = qp_to_rts(p, p->qp[i], p->psn[i]);
		if (rc)
			return rc;
	}
	return 0;
}

/*
 * Destroys a CQ of create_cq(), then its channel (a channel with a CQ on it
 * cannot go: EBUSY); either may be NULL. Returns the first error.
 */
static int destroy_cq(struct ibv_cq **cq, struct ibv_comp_channel **chan)
{
	int rc = 0, rc2;

	if (*cq) {
		rc = verbs_err(ibv_destroy_cq(*cq));
		*cq = NULL;
	}
	if (*chan) {
		rc2 = verbs_err(ibv_destroy_comp_channel(*chan));
		if (!rc)
			rc = rc2;
		*chan = NULL;
	}
	return rc;
}

int rdma_pair_close(struct rdma_pair *p)
{
	int i, rc, first = 0;

	if (!p)
		return 0;
	if (p->iwarp) {
		first = cm_disconnect(p);
		/* The CQs, the PD, then the listener that holds the context. */
	}
	for (i = 0; i < 2; i++) {
		if (p->qp[i]) {
			rc = verbs_err(ibv_destroy_qp(p->qp[i]));
			if (rc && !first)
				first = rc;
			p->qp[i] = NULL;
		}
	}
	for (i = 0; i < 2; i++) {
		rc = destroy_cq(&p->scq[i], &p->schan[i]);
		if (rc && !first)
			first = rc;
		rc = destroy_cq(&p->rcq[i], &p->rchan[i]);
		if (rc && !first)
			first = rc;
	}
	if (p->pd) {
		rc = verbs_err(ibv_dealloc_pd(p->pd));
		if (rc && !first)
			first = rc;
		p->pd = NULL;
	}
	if (p->iwarp) {
		if (p->cm_listen && rdma_destroy_id(p->cm_listen) && !first)
			first = -errno;
		p->cm_listen = NULL;
		if (p->cm_ch)
			rdma_destroy_event_channel(p->cm_ch);
		p->cm_ch = NULL;
		p->ctx = NULL;
	}
	if (p->ctx) {
		rc = verbs_err(ibv_close_device(p->ctx));
		if (rc && !first)
			first = rc;
		p->ctx = NULL;
	}
	return first;
}

/* A CQ with a completion channel of its own, whose fd does not block. */
static int create_cq(struct rdma_pair *p, struct ibv_cq **cq, struct ibv_comp_channel **chan)
{
	int flags;

	*chan = ibv_create_comp_channel(p->ctx);
	if (!*chan)
		return null_err();
	flags = fcntl((*chan)->fd, F_GETFL);
	if (flags < 0 || fcntl((*chan)->fd, F_SETFL, flags | O_NONBLOCK) < 0)
		return -errno;
	*cq = ibv_create_cq(p->ctx, RDMA_PAIR_CQ_DEPTH, NULL, *chan, 0);
	if (!*cq)
		return null_err();
	return 0;
}

int rdma_pair_open(struct rdma_pair *p, const char *dev_name)
{
	int rc, i;

	if (!p)
		return -EINVAL;
	memset(p, 0, sizeof(*p));
	if (!dev_name)
		dev_name = rdma_pair_default_dev();
	if (strlen(dev_name) >= sizeof(p->dev_name))
		return -ENAMETOOLONG;
	strcpy(p->dev_name, dev_name);
	p->port = RDMA_PAIR_PORT;
	p->mtu = IBV_MTU_1024;
	p->gid_index = -1;
	p->psn[0] = PSN_BASE_0;
	p->psn[1] = PSN_BASE_1;

	rc = open_device(p);
	if (rc)
		goto fail;

	if (p->ctx->device->transport_type == IBV_TRANSPORT_IWARP) {
		/* The CM's own context of the device, not ours. */
		ibv_close_device(p->ctx);
		p->ctx = NULL;
		p->iwarp = true;
		rc = cm_listen(p);
		if (!rc)
			rc = cm_resolve(p);
	} else {
		rc = wait_port_and_gid(p);
	}
	if (rc)
		goto fail;

	p->pd = ibv_alloc_pd(p->ctx);
	if (!p->pd) {
		rc = null_err();
		goto fail;
	}
	for (i = 0; i < 2; i++) {
		rc = create_cq(p, &p->scq[i], &p->schan[i]);
		if (rc)
			goto fail;
		rc = create_cq(p, &p->rcq[i], &p->rchan[i]);
		if (rc)
			goto fail;
	}
	if (p->iwarp) {
		rc = cm_connect(p);
		if (rc)
			goto fail;
		return 0;
	}
	for (i = 0; i < 2; i++) {
		rc = create_qp(p, i);
		if (rc)
			goto fail;
	}
	rc = connect_pair(p);
	if (rc)
		goto fail;
	return 0;

fail:
	rdma_pair_close(p);
	memset(p, 0, sizeof(*p));
	return rc;
}

int rdma_pair_reg_mr(struct rdma_pair *p, void *addr, size_t len,
		     unsigned int access, struct ibv_mr **mr)
{
	struct ibv_mr *m;

	if (!p || !p->pd || !mr)
		return -EINVAL;
	*mr = NULL;
	errno = 0;
	/*
	 * ibv_reg_mr_iova2 is what ibv_reg_mr() itself calls for a non-constant
	 * access value; calling it directly makes it plain that every bit,
	 * including IBV_ACCESS_OPTIONAL_RANGE ones, is handed on.
	 */
	m = ibv_reg_mr_iova2(p->pd, addr, len, (uintptr_t)addr, access);
	if (!m)
		return null_err();
	*mr = m;
	return 0;
}

/* --- posting --- */

static int post_send_wr(struct rdma_pair *p, int side, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad = NULL;

	if (!side_ok(p, side))
		return -EINVAL;
	wr->send_flags |= IBV_SEND_SIGNALED;
	errno = 0;
	return verbs_err(ibv_post_send(p->qp[side], wr, &bad));
}

static int post_rdma(struct rdma_pair *p, int side, uint64_t wr_id,
		     enum ibv_wr_opcode op, const void *laddr, uint32_t lkey,
		     uint64_t raddr, uint32_t rkey, uint32_t len)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)laddr,
		.length = len,
		.lkey = lkey,
	};
	struct ibv_send_wr wr;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.opcode = op;
	wr.sg_list = len ? &sge : NULL;
	wr.num_sge = len ? 1 : 0;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return post_send_wr(p, side, &wr);
}

int rdma_pair_post_write(struct rdma_pair *p, int side, uint64_t wr_id,
			 const void *laddr, uint32_t lkey,
			 uint64_t raddr, uint32_t rkey, uint32_t len)
{
	return post_rdma(p, side, wr_id, IBV_WR_RDMA_WRITE, laddr, lkey,
			 raddr, rkey, len);
}

int rdma_pair_post_read(struct rdma_pair *p, int side, uint64_t wr_id,
			void *laddr, uint32_t lkey,
			uint64_t raddr, uint32_t rkey, uint32_t len)
{
	return post_rdma(p, side, wr_id, IBV_WR_RDMA_READ, laddr, lkey,
			 raddr, rkey, len);
}

int rdma_pair_post_send(struct rdma_pair *p, int side, uint64_t wr_id,
			const void *laddr, uint32_t lkey, uint32_t len)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)laddr,
		.length = len,
		.lkey = lkey,
	};
	struct ibv_send_wr wr;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.opcode = IBV_WR_SEND;
	wr.sg_list = len ? &sge : NULL;
	wr.num_sge = len ? 1 : 0;
	return post_send_wr(p, side, &wr);
}

int rdma_pair_post_recv(struct rdma_pair *p, int side, uint64_t wr_id,
			void *laddr, uint32_t lkey, uint32_t len)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)laddr,
		.length = len,
		.lkey = lkey,
	};
	struct ibv_recv_wr wr, *bad = NULL;

	if (!side_ok(p, side))
		return -EINVAL;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = len ? &sge : NULL;
	wr.num_sge = len ? 1 : 0;
	errno = 0;
	return verbs_err(ibv_post_recv(p->qp[side], &wr, &bad));
}

static int post_atomic(struct rdma_pair *p, int side, uint64_t wr_id,
		       enum ibv_wr_opcode op, uint64_t *result, uint32_t lkey,
		       uint64_t raddr, uint32_t rkey,
		       uint64_t compare_add, uint64_t swap)
{
	struct ibv_sge sge = {
		.addr = (uintptr_t)result,
		.length = sizeof(uint64_t),
		.lkey = lkey,
	};
	struct ibv_send_wr wr;

	if (raddr & 7)
		return -EINVAL;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.opcode = op;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.wr.atomic.remote_addr = raddr;
	wr.wr.atomic.rkey = rkey;
	wr.wr.atomic.compare_add = compare_add;
	wr.wr.atomic.swap = swap;
	return post_send_wr(p, side, &wr);
}

int rdma_pair_post_fetch_add(struct rdma_pair *p, int side, uint64_t wr_id,
			     uint64_t *result, uint32_t lkey,
			     uint64_t raddr, uint32_t rkey, uint64_t add)
{
	return post_atomic(p, side, wr_id, IBV_WR_ATOMIC_FETCH_AND_ADD,
			   result, lkey, raddr, rkey, add, 0);
}

int rdma_pair_post_cmp_swap(struct rdma_pair *p, int side, uint64_t wr_id,
			    uint64_t *result, uint32_t lkey,
			    uint64_t raddr, uint32_t rkey,
			    uint64_t compare, uint64_t swap)
{
	return post_atomic(p, side, wr_id, IBV_WR_ATOMIC_CMP_AND_SWP,
			   result, lkey, raddr, rkey, compare, swap);
}

/* --- completions --- */

/*
 * Longest sleep on a completion channel before the CQ is polled again: bounds
 * what a lost wake-up costs (another thread, or a forked child sharing the
 * channel, may take the event this wait armed for).
 */
#define WAIT_CQ_SLICE_MS	20

/*
 * The first completion of @cq, waiting up to @timeout_ms for it: polls the
 * CQ, and when it is empty arms it (ibv_req_notify_cq), polls once more (a
 * completion that came before the arming raises no event) and sleeps on the
 * CQ's completion channel @chan. Sleeping instead of spinning matters under
 * TCG: a vCPU that polls in a loop takes host CPU from the one that runs
 * rxe's work, and the more the host is loaded, the longer it polls.
 */
static int wait_cq(struct ibv_cq *cq, struct ibv_comp_channel *chan, int timeout_ms,
		   struct ibv_wc *out)
{
	uint64_t deadline, now;
	struct ibv_wc wc;
	bool armed = false;

	if (timeout_ms <= 0)
		timeout_ms = RDMA_PAIR_DEFAULT_TIMEOUT_MS;
	deadline = now_ns() + (uint64_t)timeout_ms * 1000000ULL;

	for (;;) {
		struct pollfd pfd = { .fd = chan->fd, .events = POLLIN };
		struct ibv_cq *ev_cq;
		void *ev_ctx;
		long slice;
		int n;

		memset(&wc, 0, sizeof(wc));
		n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			return -EIO;
		if (n > 0) {
			if (out)
				*out = wc;
			return (int)wc.status;
		}
		now = now_ns();
		if (now >= deadline)
			return -ETIMEDOUT;
		if (!armed) {
			if (ibv_req_notify_cq(cq, 0))
				return -EIO;
			armed = true;
			continue;
		}
		slice = (long)((deadline - now) / 1000000ULL) + 1;
		if (slice > WAIT_CQ_SLICE_MS)
			slice = WAIT_CQ_SLICE_MS;
		n = poll(&pfd, 1, (int)slice);
		if (n < 0 && errno != EINTR)
			return -EIO;
		if (n <= 0)
			continue;
		/* Non-blocking: EAGAIN when someone else took the event first. */
		if (ibv_get_cq_event(chan, &ev_cq, &ev_ctx) == 0) {
			ibv_ack_cq_events(ev_cq, 1);
			armed = false;
		}
	}
}

int rdma_pair_wait_send(struct rdma_pair *p, int side, int timeout_ms,
			struct ibv_wc *wc)
{
	if (!side_ok(p, side))
		return -EINVAL;
	return wait_cq(p->scq[side], p->schan[side], timeout_ms, wc);
}

int rdma_pair_wait_recv(struct rdma_pair *p, int side, int timeout_ms,
			struct ibv_wc *wc)
{
	if (!side_ok(p, side))
		return -EINVAL;
	return wait_cq(p->rcq[side], p->rchan[side], timeout_ms, wc);
}

static int drain_cq(struct ibv_cq *cq)
{
	struct ibv_wc wc[16];
	int n, total = 0;

	if (!cq)
		return 0;
	while ((n = ibv_poll_cq(cq, 16, wc)) > 0)
		total += n;
	return total;
}

int rdma_pair_drain(struct rdma_pair *p)
{
	int i, total = 0;

	if (!p)
		return 0;
	for (i = 0; i < 2; i++) {
		total += drain_cq(p->scq[i]);
		total += drain_cq(p->rcq[i]);
	}
	return total;
}

/* Wait for the send completion of a _sync op and check it is ours. */
static int wait_sync(struct rdma_pair *p, int side, int timeout_ms,
		     enum ibv_wc_opcode op)
{
	struct ibv_wc wc;
	int rc;

	rc = rdma_pair_wait_send(p, side, timeout_ms, &wc);
	if (rc != IBV_WC_SUCCESS)
		return rc;	/* error status or -errno; opcode invalid then */
	if (wc.wr_id != SYNC_WR_ID || wc.opcode != op)
		return -EPROTO;
	return IBV_WC_SUCCESS;
}

int rdma_pair_write_sync(struct rdma_pair *p, int side,
			 const void *laddr, uint32_t lkey,
			 uint64_t raddr, uint32_t rkey, uint32_t len,
			 int timeout_ms)
{
	int rc = rdma_pair_post_write(p, side, SYNC_WR_ID, laddr, lkey,
				      raddr, rkey, len);

	if (!rc)
		rc = wait_sync(p, side, timeout_ms, IBV_WC_RDMA_WRITE);
	return rc ? rc : rdma_pair_write_placed(p, side, raddr, rkey, timeout_ms);
}

int rdma_pair_write_placed(struct rdma_pair *p, int side, uint64_t raddr, uint32_t rkey,
			   int timeout_ms)
{
	int rc;

	if (!p || !p->iwarp)
		return IBV_WC_SUCCESS;
	rc = rdma_pair_post_read(p, side, SYNC_WR_ID, NULL, 0, raddr, rkey, 0);
	return rc ? rc : wait_sync(p, side, timeout_ms, IBV_WC_RDMA_READ);
}

int rdma_pair_read_sync(struct rdma_pair *p, int side,
			void *laddr, uint32_t lkey,
			uint64_t raddr, uint32_t rkey, uint32_t len,
			int timeout_ms)
{
	int rc = rdma_pair_post_read(p, side, SYNC_WR_ID, laddr, lkey,
				     raddr, rkey, len);

	return rc ? rc : wait_sync(p, side, timeout_ms, IBV_WC_RDMA_READ);
}

int rdma_pair_fetch_add_sync(struct rdma_pair *p, int side,
			     uint64_t *result, uint32_t lkey,
			     uint64_t raddr, uint32_t rkey, uint64_t add,
			     int timeout_ms)
{
	int rc = rdma_pair_post_fetch_add(p, side, SYNC_WR_ID, result, lkey,
					  raddr, rkey, add);

	return rc ? rc : wait_sync(p, side, timeout_ms, IBV_WC_FETCH_ADD);
}

int rdma_pair_cmp_swap_sync(struct rdma_pair *p, int side,
			    uint64_t *result, uint32_t lkey,
			    uint64_t raddr, uint32_t rkey,
			    uint64_t compare, uint64_t swap, int timeout_ms)
{
	int rc = rdma_pair_post_cmp_swap(p, side, SYNC_WR_ID, result, lkey,
					 raddr, rkey, compare, swap);

	return rc ? rc : wait_sync(p, side, timeout_ms, IBV_WC_COMP_SWAP);
}

int rdma_pair_send_recv_sync(struct rdma_pair *p, int side,
			     const void *saddr, uint32_t slkey, uint32_t slen,
			     void *raddr_local, uint32_t rlkey, uint32_t rlen,
			     int timeout_ms, struct ibv_wc *recv_wc)
{
	struct ibv_wc wc;
	int rc, send_rc;

	if (!side_ok(p, side) || !side_ok(p, !side))
		return -EINVAL;
	rc = rdma_pair_post_recv(p, !side, SYNC_WR_ID, raddr_local, rlkey, rlen);
	if (rc)
		return rc;
	rc = rdma_pair_post_send(p, side, SYNC_WR_ID, saddr, slkey, slen);
	if (rc)
		return rc;
	send_rc = wait_sync(p, side, timeout_ms, IBV_WC_SEND);
	if (send_rc != IBV_WC_SUCCESS)
		return send_rc;
	/*
	 * On RC the send completes only after the responder acked, i.e. after
	 * the receive WQE was consumed; its completion is (about to be) there.
	 */
	rc = rdma_pair_wait_recv(p, !side, timeout_ms, &wc);
	if (rc < 0)
		return rc;
	if (recv_wc)
		*recv_wc = wc;
	if (rc != IBV_WC_SUCCESS)
		return rc;
	if (wc.wr_id != SYNC_WR_ID || wc.opcode != IBV_WC_RECV)
		return -EPROTO;
	return IBV_WC_SUCCESS;
}

/* --- QP state --- */

int rdma_pair_qp_state(struct rdma_pair *p, int side)
{
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	int rc;

	if (!side_ok(p, side))
		return -EINVAL;
	memset(&attr, 0, sizeof(attr));
	memset(&init, 0, sizeof(init));
	rc = ibv_query_qp(p->qp[side], &attr, IBV_QP_STATE, &init);
	if (rc)
		return verbs_err(rc);
	return (int)attr.qp_state;
}

int rdma_pair_wait_qp_state(struct rdma_pair *p, int side,
			    enum ibv_qp_state state, int timeout_ms)
{
	uint64_t deadline;
	int st;

	if (timeout_ms <= 0)
		timeout_ms = RDMA_PAIR_DEFAULT_TIMEOUT_MS;
	deadline = now_ns() + (uint64_t)timeout_ms * 1000000ULL;
	for (;;) {
		st = rdma_pair_qp_state(p, side);
		if (st < 0 || st == (int)state)
			return st;
		if (now_ns() >= deadline)
			return st;
		sleep_ns(1000000L);
	}
}

static int qp_to_err(struct ibv_qp *qp)
{
	struct ibv_qp_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_ERR;
	return verbs_err(ibv_modify_qp(qp, &attr, IBV_QP_STATE));
}

/* One attempt of rdma_pair_recover(). */
static int recover_once(struct rdma_pair *p, int attempt)
{
	int rc, i;

	if (p->iwarp) {
		/*
		 * An iWARP connection does not come back: two new QPs (the
		 * old ids go once the new one holds the device's context).
		 */
		struct rdma_cm_id *old[2] = { p->cm_id[0], p->cm_id[1] };
		struct ibv_qp *oldqp[2] = { p->qp[0], p->qp[1] };

		p->cm_id[0] = p->cm_id[1] = NULL;
		p->qp[0] = p->qp[1] = NULL;
		rc = cm_resolve(p);
		for (i = 1; i >= 0; i--) {
			if (oldqp[i])
				rdma_destroy_qp(old[i]);
			if (old[i])
				rdma_destroy_id(old[i]);
		}
		rdma_pair_drain(p);
		if (!rc)
			rc = cm_connect(p);
		if (rc)
			cm_disconnect(p);
		return rc;
	}

	/*
	 * ERR first: any error handling still running in the provider (rxe
	 * posts the error CQE before it moves the QP to ERR, from its own
	 * task) then finds the state it would set anyway.  Give it a moment.
	 */
	for (i = 0; i < 2; i++) {
		/*
		 * A QP that an earlier attempt left in RESET stays there
		 * (RESET -> ERR is not a valid transition).
		 */
		rc = rdma_pair_qp_state(p, i);
		if (rc < 0)
			return rc;
		if (rc == IBV_QPS_RESET)
			continue;
		rc = qp_to_err(p->qp[i]);
		if (rc)
			return rc;
	}
	/* Longer on every attempt: under load (TCG) rxe's task can lag behind. */
	sleep_ns((attempt + 1) * 10 * 1000000L);
	for (i = 0; i < 2; i++) {
		rc = qp_to_reset(p->qp[i]);
		if (rc)
			return rc;
	}
	/*
	 * Flush completions of the dead connection may sit in the CQs; a QP
	 * in RESET generates no new ones, so one drain is enough.
	 */
	rdma_pair_drain(p);
	/* A late error transition could have overridden RESET: check. */
	for (i = 0; i < 2; i++) {
		rc = rdma_pair_qp_state(p, i);
		if (rc < 0)
			return rc;
		if (rc != IBV_QPS_RESET)
			return -EAGAIN;
	}
	for (i = 0; i < 2; i++)
		p->psn[i] = (p->psn[i] + PSN_STEP) & PSN_MASK;
	return connect_pair(p);
}

int rdma_pair_recover(struct rdma_pair *p)
{
	int rc = -EINVAL, attempt;

	if (!p || (!p->iwarp && (!side_ok(p, 0) || !side_ok(p, 1))))
		return -EINVAL;
	for (attempt = 0; attempt < 10; attempt++) {
		rc = recover_once(p, attempt);
		if (!rc)
			break;
	}
	return rc;
}
