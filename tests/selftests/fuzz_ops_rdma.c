// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_fuzz: the rdma threads' operations: VA and normal MRs, rereg, advise,
 * batches of WRITE/READ/SEND/atomics, dereg with work in flight, and a
 * private VA MR whose data is checked.
 */
#define _GNU_SOURCE
#include "rdma_fuzz.h"

/* ---- rdma ------------------------------------------------------------ */

int ibv_cmd_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
		      struct ibv_sge *sg_list, uint32_t num_sge);

/* ibv_advise_mr(), or the uverbs command itself where the provider lacks it. */
int advise_mr(struct ibv_pd *pd, int advice, uint32_t flags, struct ibv_sge *sge,
		     uint32_t n)
{
	int ret = ibv_advise_mr(pd, advice, flags, sge, n);

	if (ret == EOPNOTSUPP)
		ret = ibv_cmd_advise_mr(pd, advice, flags, sge, n);
	return ret;
}

/*
 * The uverbs REREG_MR command, as a provider issues it (exported for
 * providers, IBVERBS_PRIVATE_34): rdma-core 44's rxe provider has no
 * rereg_mr, so ibv_rereg_mr() fails in user space without asking the
 * kernel. The command struct is libibverbs' struct ibv_rereg_mr: the
 * header, then the kernel's payload; the MR is a struct verbs_mr, whose
 * first member is the struct ibv_mr.
 */
struct fz_rereg_cmd {
	struct ib_uverbs_cmd_hdr hdr;
	struct ib_uverbs_rereg_mr core;
};

int ibv_cmd_rereg_mr(void *vmr, uint32_t flags, void *addr, size_t length, uint64_t hca_va,
		     int access, struct ibv_pd *pd, void *cmd, size_t cmd_sz,
		     struct ib_uverbs_rereg_mr_resp *resp, size_t resp_sz);

/* Returns 0 or an errno value. */
static int rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t len,
		    int access)
{
	struct ib_uverbs_rereg_mr_resp resp;
	struct fz_rereg_cmd cmd;
	int ret;

	memset(&cmd, 0, sizeof(cmd));
	memset(&resp, 0, sizeof(resp));
	errno = 0;
	ret = ibv_cmd_rereg_mr(mr, (uint32_t)flags, addr, len, (uintptr_t)addr, access, pd, &cmd,
			       sizeof(cmd), &resp, sizeof(resp));
	if (ret)
		return ret > 0 ? ret : errno ? errno : EIO;
	if (flags & IBV_REREG_MR_CHANGE_PD)
		mr->pd = pd;
	return 0;
}

static struct ibv_pd *pd_of(struct rstate *s, int pdi)
{
	return pdi ? s->pd2 : s->p.pd;
}

static unsigned int random_access(struct rng *r)
{
	unsigned int acc = 0;

	if (chance(r, 85))
		acc |= IBV_ACCESS_LOCAL_WRITE;
	if ((acc & IBV_ACCESS_LOCAL_WRITE) && chance(r, 75))
		acc |= IBV_ACCESS_REMOTE_WRITE;
	if ((acc & IBV_ACCESS_LOCAL_WRITE) && chance(r, 50))
		acc |= IBV_ACCESS_REMOTE_ATOMIC;
	if (chance(r, 75))
		acc |= IBV_ACCESS_REMOTE_READ;
	return acc;
}

static bool access_valid(unsigned int acc)
{
	return (acc & IBV_ACCESS_LOCAL_WRITE) ||
	       !(acc & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC));
}

int mr_query_key(uint32_t key, struct vamr_mr_query *q)
{
	memset(q, 0, sizeof(*q));
	q->key = key;
	q->ib_index = G.ib_index;
	return vamr_ioctl(G.vfd[0], VAMR_IOC_MR_QUERY, q);
}

static void drop_mr(struct rstate *s, int i)
{
	s->m[i] = s->m[--s->n];
}

void dereg_at(struct thr *t, int i, enum kind k)
{
	struct rstate *s = t->rs;
	int ret = ibv_dereg_mr(s->m[i].mr);

	op_result(K_mr_dereg, ret);
	if (ret)
		violation(k, "ibv_dereg_mr of a %s MR: %s", s->m[i].va ? "VA" : "normal",
			  ename(ret));
	drop_mr(s, i);
}

void op_reg(struct thr *t, bool va)
{
	struct rng *r = &t->rng;
	struct rstate *s = t->rs;
	enum kind k = va ? K_mr_reg_va : K_mr_reg_normal;
	struct range g = pick_range(r, 0);
	unsigned int acc = random_access(r);
	uint64_t iova;
	struct ibv_mr *mr;
	struct vamr_mr_query q;
	bool gap = false;
	int ret;

	if (s->n == MAX_MRS)
		dereg_at(t, (int)below(r, s->n), k);
	if (chance(r, 30))
		unalign(r, &g);
	if (chance(r, 10)) {
		into_gap(r, &g);
		gap = true;
	}
	if (chance(r, 3))
		acc = IBV_ACCESS_REMOTE_WRITE;		/* needs LOCAL_WRITE: EINVAL */
	iova = (uintptr_t)g.addr;
	if (va && chance(r, 15))
		iova = ((1 + below(r, 1 << 20)) << 24) | ((uintptr_t)g.addr & (PAGE - 1));
	mr = ibv_reg_mr_iova2(pd_of(s, 0), g.addr, g.len, iova, acc | (va ? VAMR_ACCESS_VA : 0));
	ret = mr ? 0 : errno;
	op_result(k, ret);
	if (!mr) {
		/* A VA MR takes any user range: holes and PROT_NONE stay absent. */
		if (va && G.va_supported && access_valid(acc) && !in_set(ret, ERR_PIN))
			violation(k, "VA MR over %p+%zu (access %#x%s) failed: %s", g.addr, g.len,
				  acc, gap ? ", into a gap" : "", ename(ret));
		return;
	}
	if (!access_valid(acc))
		violation(k, "MR with access %#x (REMOTE_WRITE without LOCAL_WRITE) registered",
			  acc);
	s->m[s->n++] = (struct mrent){ mr, g.addr, g.len, iova, acc, va, 0 };
	publish_key(mr->lkey);
	ret = mr_query_key(mr->lkey, &q);
	if (va && G.va_supported) {
		if (ret)
			violation(k, "MR_QUERY of a fresh VA MR: %s", ename(-ret));
		else if (q.addr != (uintptr_t)g.addr || q.len != g.len)
			violation(k, "MR_QUERY of VA MR %p+%zu says %#llx+%llu", g.addr, g.len,
				  (unsigned long long)q.addr, (unsigned long long)q.len);
	} else if (!va && ret != -ENOENT) {
		violation(k, "MR_QUERY of a normal MR: %s, expected ENOENT", ename(-ret));
	}
}

/* The documented refusals stay refusals. */
void op_reg_refused(struct thr *t)
{
	struct rng *r = &t->rng;
	struct range g = pick_range(r, 16 * PAGE);
	bool odp = chance(r, 50);
	unsigned int acc = ACC_ALL | VAMR_ACCESS_VA |
			   (odp ? IBV_ACCESS_ON_DEMAND : FUZZ_ACCESS_FLUSH_PERSISTENT);
	int want = odp ? EINVAL : EOPNOTSUPP;
	struct ibv_mr *mr = ibv_reg_mr(pd_of(t->rs, 0), g.addr, g.len, acc);
	int ret = mr ? 0 : errno;

	op_result(K_mr_reg_refused, ret);
	if (!G.va_supported)
		goto out;
	if (mr)
		violation(K_mr_reg_refused, "VA MR with %s registered",
			  odp ? "IBV_ACCESS_ON_DEMAND" : "FLUSH_PERSISTENT");
	else if (ret != want)
		violation(K_mr_reg_refused, "VA MR with %s: %s, expected %s",
			  odp ? "IBV_ACCESS_ON_DEMAND" : "FLUSH_PERSISTENT", ename(ret),
			  ename(want));
out:
	if (mr)
		ibv_dereg_mr(mr);
}

void op_dereg(struct thr *t)
{
	if (t->rs->n)
		dereg_at(t, (int)below(&t->rng, t->rs->n), K_mr_dereg);
}

void op_rereg(struct thr *t)
{
	struct rng *r = &t->rng;
	struct rstate *s = t->rs;
	struct mrent *m;
	int flags = 0, ret, pdi;
	unsigned int acc;
	struct range g = pick_range(r, 0);
	struct vamr_mr_query q;
	bool must_fail;

	if (!s->n)
		return;
	m = &s->m[below(r, s->n)];
	if (chance(r, 50))
		flags |= IBV_REREG_MR_CHANGE_PD;
	if (chance(r, 50))
		flags |= IBV_REREG_MR_CHANGE_ACCESS;
	if (chance(r, 20))
		flags |= IBV_REREG_MR_CHANGE_TRANSLATION;
	if (!flags)
		flags = IBV_REREG_MR_CHANGE_PD;
	pdi = flags & IBV_REREG_MR_CHANGE_PD ? !m->pdi : m->pdi;
	acc = random_access(r);
	if (chance(r, 40))
		acc |= VAMR_ACCESS_VA;
	must_fail = (m->va && (flags & ~IBV_REREG_MR_CHANGE_PD)) ||
		    (!m->va && (flags & IBV_REREG_MR_CHANGE_ACCESS) && (acc & VAMR_ACCESS_VA));
	ret = rereg_mr(m->mr, flags, pd_of(s, pdi),
		       flags & IBV_REREG_MR_CHANGE_TRANSLATION ? g.addr : NULL,
		       flags & IBV_REREG_MR_CHANGE_TRANSLATION ? g.len : 0,
		       flags & IBV_REREG_MR_CHANGE_ACCESS ? (int)acc : 0);
	op_result(K_mr_rereg, ret);
	if (!ret && must_fail && G.va_supported)
		violation(K_mr_rereg, "rereg (flags %#x, access %#x) of a %s MR succeeded", flags,
			  acc, m->va ? "VA" : "normal");
	if (ret)
		return;
	if (flags & IBV_REREG_MR_CHANGE_PD)
		m->pdi = pdi;
	if (flags & IBV_REREG_MR_CHANGE_ACCESS)
		m->access = acc;
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		m->addr = g.addr;
		m->len = g.len;
		m->iova = (uintptr_t)g.addr;
	}
	publish_key(m->mr->lkey);
	if (m->va && G.va_supported) {
		ret = mr_query_key(m->mr->lkey, &q);
		if (ret || q.addr != (uintptr_t)m->addr || q.len != m->len)
			violation(K_mr_rereg, "after a PD rereg, MR_QUERY of the VA MR: %s %#llx+%llu",
				  ename(-ret), (unsigned long long)q.addr,
				  (unsigned long long)q.len);
	}
}

void op_advise(struct thr *t, enum kind k)
{
	struct rng *r = &t->rng;
	struct rstate *s = t->rs;
	struct ibv_sge sge[MAX_SGES];
	int idx[MAX_MRS], nidx = 0, i, n, ret, advice;
	uint32_t flags;

	for (i = 0; i < s->n; i++)
		if (s->m[i].va || k == K_advise_normal)
			idx[nidx++] = i;
	if (!nidx && k != K_advise_normal)
		return;
	n = chance(r, 70) ? 1 + (int)below(r, 4) : 1 + (int)below(r, MAX_SGES);
	for (i = 0; i < n; i++) {
		struct mrent *m = nidx ? &s->m[idx[below(r, nidx)]] : NULL;
		uint64_t off;

		if (k == K_advise_normal && (!m || chance(r, 30))) {
			/* the private normal MR, or an unrelated key */
			sge[i].addr = (uintptr_t)s->lbuf + below(r, LBUF_LEN / 2);
			sge[i].length = (uint32_t)(1 + below(r, LBUF_LEN / 2));
			sge[i].lkey = s->lmr->lkey;
			continue;
		}
		if (!m)
			m = &s->m[idx[0]];
		off = below(r, m->len);
		sge[i].addr = m->iova + off;
		sge[i].length = (uint32_t)(1 + below(r, m->len - off));
		sge[i].lkey = m->mr->lkey;
		if (chance(r, 5))
			sge[i].length += (uint32_t)below(r, 4 * PAGE);	/* past the end */
		if (chance(r, 3))
			sge[i].length = 0;
		if (chance(r, 3))
			sge[i].lkey = (uint32_t)rnd(r);
	}
	advice = (int)below(r, 3);	/* PREFETCH, PREFETCH_WRITE, PREFETCH_NO_FAULT */
	if (chance(r, 3))
		advice = 3 + (int)below(r, 10);
	if (k == K_advise_sync)
		flags = IBV_ADVISE_MR_FLAG_FLUSH;
	else if (k == K_advise_async)
		flags = 0;
	else
		flags = below(r, 2) ? IBV_ADVISE_MR_FLAG_FLUSH : 0;
	if (chance(r, 3))
		flags |= 2u << below(r, 30);
	ret = advise_mr(pd_of(s, 0), advice, flags, sge, (uint32_t)n);
	op_result(k, ret);
}

/* ibv_post_send of one WR with one SGE. */
static int post_one(struct rstate *s, int side, enum ibv_wr_opcode op, uint64_t laddr,
		    uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey,
		    uint64_t cmp, uint64_t swp, uint64_t wr_id)
{
	struct ibv_sge sge = { .addr = laddr, .length = len, .lkey = lkey };
	struct ibv_send_wr wr, *bad = NULL;
	int ret;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.opcode = op;
	wr.sg_list = len ? &sge : NULL;
	wr.num_sge = len ? 1 : 0;
	wr.send_flags = IBV_SEND_SIGNALED;
	if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = cmp;
		wr.wr.atomic.swap = swp;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	errno = 0;
	ret = ibv_post_send(s->p.qp[side], &wr, &bad);
	return ret ? (ret > 0 ? ret : errno ? errno : EIO) : 0;
}

static void count_wc(int st)
{
	if (st >= 0 && st < 32)
		__atomic_add_fetch(&G.wc_hist[st], 1, __ATOMIC_RELAXED);
}

static void recover_pair(struct thr *t)
{
	struct rstate *s = t->rs;
	int ret = rdma_pair_recover(&s->p);

	op_result(K_qp_recover, -ret);
	if (!ret) {
		s->recover_fail_streak = 0;
		return;
	}
	{
		static int shown;

		if (__atomic_add_fetch(&shown, 1, __ATOMIC_RELAXED) <= 3)
			diag("%s: QP recovery failed: %s (QP states %d %d)", t->name, ename(-ret),
			     rdma_pair_qp_state(&s->p, 0), rdma_pair_qp_state(&s->p, 1));
	}
	if (++s->recover_fail_streak == 3)
		violation(K_qp_recover, "the QP pair did not recover 3 times in a row: %s (QP states %d %d)",
			  ename(-ret), rdma_pair_qp_state(&s->p, 0), rdma_pair_qp_state(&s->p, 1));
}

/*
 * Wait for @posted send completions on @side (one deadline for all).
 * Returns 0 when all succeeded, the first bad status + 1000, or ETIMEDOUT.
 */
static int wait_batch(struct thr *t, int side, int posted)
{
	uint64_t deadline = now_ms() + WC_WAIT_MS;
	struct ibv_wc wc;
	int i, first = 0;

	for (i = 0; i < posted; i++) {
		uint64_t now = now_ms();
		int st;

		if (now >= deadline)
			return first ? first : ETIMEDOUT;
		st = rdma_pair_wait_send(&t->rs->p, side, (int)(deadline - now), &wc);
		if (st < 0)
			return first ? first : ETIMEDOUT;
		count_wc(st);
		if (st != IBV_WC_SUCCESS && !first) {
			first = 1000 + st;
			break;	/* the rest is flushed; recovery discards it */
		}
	}
	return first;
}

/* A target MR for RDMA: a table MR, or the private VA MR. */
static void pick_target(struct thr *t, uint64_t *iova, size_t *len, uint32_t *rkey,
			uint32_t *lkey, int *which)
{
	struct rstate *s = t->rs;

	if (s->n && chance(&t->rng, 90)) {
		int i = (int)below(&t->rng, s->n);

		*iova = s->m[i].iova;
		*len = s->m[i].len;
		*rkey = s->m[i].mr->rkey;
		*lkey = s->m[i].mr->lkey;
		*which = i;
	} else if (G.excluded[K_mr_reg_va]) {	/* no VA MR wanted: the private normal MR */
		*iova = (uintptr_t)s->lbuf;
		*len = LBUF_RANDOM;
		*rkey = s->lmr->rkey;
		*lkey = s->lmr->lkey;
		*which = -1;
	} else {
		*iova = (uintptr_t)s->vbuf;
		*len = VBUF_LEN / 2;	/* the first half: never checked */
		*rkey = s->vmr->rkey;
		*lkey = s->vmr->lkey;
		*which = -1;
	}
}

void op_rdma_batch(struct thr *t, bool dereg_inflight)
{
	struct rng *r = &t->rng;
	struct rstate *s = t->rs;
	enum kind k = dereg_inflight ? K_rdma_dereg_inflight : K_rdma_batch;
	int side = (int)below(r, 2), n = 1 + (int)below(r, 8), posted = 0, i, ret = 0;
	int victim = -1;

	if (dereg_inflight) {
		if (!s->n)
			return;
		victim = (int)below(r, s->n);
	}
	for (i = 0; i < n; i++) {
		uint64_t riova, raddr, laddr, off;
		size_t rlen;
		uint32_t rkey, lkey, len, tkey, tl;
		unsigned int c = (unsigned int)below(r, 100);
		enum ibv_wr_opcode op;
		int which;

		pick_target(t, &riova, &rlen, &rkey, &tkey, &which);
		if (victim >= 0) {
			riova = s->m[victim].iova;
			rlen = s->m[victim].len;
			rkey = s->m[victim].mr->rkey;
			c = (unsigned int)below(r, 70);
		}
		off = below(r, rlen);
		len = (uint32_t)(1 + below(r, rlen - off < 65536 ? rlen - off : 65536));
		if (chance(r, 8))
			len += (uint32_t)below(r, 8192);	/* past the end */
		if (chance(r, 3))
			rkey = (uint32_t)rnd(r);
		raddr = riova + off;
		/* local: the private normal MR mostly, a table MR sometimes */
		laddr = (uintptr_t)s->lbuf + below(r, LBUF_RANDOM - 65536 - 8192);
		lkey = s->lmr->lkey;
		if (chance(r, 25) && s->n) {
			int j = (int)below(r, s->n);

			tl = s->m[j].len;
			off = below(r, tl);
			laddr = s->m[j].iova + off;
			if (len > tl - off)
				len = (uint32_t)(tl - off);
			lkey = s->m[j].mr->lkey;
		}
		if (c < 35) {
			op = IBV_WR_RDMA_WRITE;
		} else if (c < 65) {
			op = IBV_WR_RDMA_READ;
		} else if (c < 85) {
			op = c < 75 ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP;
			if (chance(r, 90))
				raddr &= ~7ull;
			len = 8;
			laddr = ((uintptr_t)s->lbuf + below(r, LBUF_RANDOM - 16)) & ~7ull;
			lkey = s->lmr->lkey;
		} else {
			/* SEND into a receive buffer of the other side: a table MR or lbuf */
			uint64_t rb = (uintptr_t)s->lbuf + below(r, LBUF_RANDOM - 65536 - 8192);
			uint32_t rbk = s->lmr->lkey, rbl = len;

			if (chance(r, 60)) {
				rb = raddr;
				rbk = tkey;
			}
			if (rdma_pair_post_recv(&s->p, !side, 0x7700 + i, (void *)(uintptr_t)rb,
						rbk, rbl))
				break;
			op = IBV_WR_SEND;
		}
		ret = post_one(s, side, op, laddr, len, lkey, raddr, rkey, rnd(r), rnd(r), i);
		if (ret)
			break;
		posted++;
	}
	if (victim >= 0)
		dereg_at(t, victim, k);
	if (posted)
		ret = wait_batch(t, side, posted);
	op_result(k, ret >= 1000 ? EIO : ret);
	if (ret)
		recover_pair(t);
	else
		rdma_pair_drain(&s->p);
}

/*
 * The private VA MR: remap it, then the peer WRITEs a pattern into it (the
 * CPU must see it), READs what the CPU wrote, does a FETCH_ADD; and a READ
 * with the VA MR as the local buffer.
 */
void op_rdma_integrity(struct thr *t)
{
	struct rng *r = &t->rng;
	struct rstate *s = t->rs;
	uint8_t *v = s->vbuf + VBUF_LEN / 2, *l = s->lbuf + LBUF_RANDOM;
	uint64_t viova = (uintptr_t)v, seed = rnd(r), old, add = rnd(r), *w, *res;
	size_t half = VBUF_LEN / 2, off, len, bad;
	int side = (int)below(r, 2), st, fails = 0;

	switch (below(r, 4)) {
	case 0:
		madvise(v, half, MADV_DONTNEED);
		break;
	case 1:
		mmap(v, half, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
		     -1, 0);
		break;
	case 2:
		mprotect(v, half, PROT_READ);
		mprotect(v, half, PROT_READ | PROT_WRITE);
		break;
	}
	if (rdma_pair_qp_state(&s->p, 0) != IBV_QPS_RTS ||
	    rdma_pair_qp_state(&s->p, 1) != IBV_QPS_RTS)
		recover_pair(t);

	off = below(r, half);
	len = 1 + below(r, half - off);
	pattern_fill(l, len, seed, 0);
	st = rdma_pair_write_sync(&s->p, side, l, s->lmr->lkey, viova + off, s->vmr->rkey,
				  (uint32_t)len, CHECK_WAIT_MS);
	count_wc(st);
	if (st) {
		violation(K_rdma_integrity, "WRITE into the private VA MR: %s (QP states %d %d)",
			  st > 0 ? ibv_wc_status_str(st) : ename(-st),
			  rdma_pair_qp_state(&s->p, 0), rdma_pair_qp_state(&s->p, 1));
		fails++;
	} else if (data_bad(v + off, len, seed, &bad)) {
		violation(K_rdma_integrity, "WRITE of %zu bytes at +%zu: the CPU sees byte %zu wrong",
			  len, off, bad);
		fails++;
	}

	off = below(r, half);
	len = 1 + below(r, half - off);
	pattern_fill(v + off, len, seed + 1, 0);
	memset(l, 0, len);
	st = fails ? -EAGAIN : rdma_pair_read_sync(&s->p, side, l, s->lmr->lkey, viova + off,
						   s->vmr->rkey, (uint32_t)len, CHECK_WAIT_MS);
	count_wc(st);
	if (!fails && st) {
		violation(K_rdma_integrity, "READ from the private VA MR: %s (QP states %d %d)",
			  st > 0 ? ibv_wc_status_str(st) : ename(-st),
			  rdma_pair_qp_state(&s->p, 0), rdma_pair_qp_state(&s->p, 1));
		fails++;
	} else if (!fails && data_bad(l, len, seed + 1, &bad)) {
		violation(K_rdma_integrity, "READ of %zu bytes at +%zu: byte %zu is not what the CPU wrote",
			  len, off, bad);
		fails++;
	}

	w = (uint64_t *)(v + (below(r, half) & ~7ull));
	res = (uint64_t *)(l + 4096);
	old = *w;
	*res = ~old;
	st = fails ? -EAGAIN : rdma_pair_fetch_add_sync(&s->p, side, res, s->lmr->lkey,
							(uintptr_t)w, s->vmr->rkey, add,
							CHECK_WAIT_MS);
	count_wc(st);
	if (!fails && st) {
		violation(K_rdma_integrity, "FETCH_ADD on the private VA MR: %s (QP states %d %d)",
			  st > 0 ? ibv_wc_status_str(st) : ename(-st),
			  rdma_pair_qp_state(&s->p, 0), rdma_pair_qp_state(&s->p, 1));
		fails++;
	} else if (!fails && (*res != old || *w != old + add)) {
		violation(K_rdma_integrity, "FETCH_ADD: old %#llx result %#llx now %#llx",
			  (unsigned long long)old, (unsigned long long)*res,
			  (unsigned long long)*w);
		fails++;
	}

	/* The VA MR as the local buffer: READ from lbuf into it. */
	off = below(r, half);
	len = 1 + below(r, half - off);
	pattern_fill(l, len, seed + 2, 0);
	st = fails ? -EAGAIN : rdma_pair_read_sync(&s->p, side, v + off, s->vmr->lkey,
						   (uintptr_t)l, s->lmr->rkey, (uint32_t)len,
						   CHECK_WAIT_MS);
	count_wc(st);
	if (!fails && st) {
		violation(K_rdma_integrity, "READ into the private VA MR (local): %s (QP states %d %d)",
			  st > 0 ? ibv_wc_status_str(st) : ename(-st),
			  rdma_pair_qp_state(&s->p, 0), rdma_pair_qp_state(&s->p, 1));
		fails++;
	} else if (!fails && data_bad(v + off, len, seed + 2, &bad)) {
		violation(K_rdma_integrity, "READ into the VA MR at +%zu: the CPU sees byte %zu of %zu wrong",
			  off, bad, len);
		fails++;
	}
	op_result(K_rdma_integrity, fails ? EIO : 0);
	if (fails)
		recover_pair(t);
}
