// SPDX-License-Identifier: GPL-2.0
/*
 * vamr_bench: what every part uses: result cells (median and spread over
 * the rounds), progress and failure output, buffers, MRs of each kind,
 * RDMA streams and the memcpy and copy-loop ceilings.
 */
#define _GNU_SOURCE
#include "bench.h"

int rounds = 5;
int failures;
long odp_bad;
static struct rdma_pair pair;
struct rdma_pair *p = &pair;

void put(struct cell *c, double x)
{
	if (c->n < MAX_ROUNDS && !isnan(x))
		c->v[c->n++] = x;
}

double cmed(const struct cell *c)
{
	double t[MAX_ROUNDS];

	if (!c->n)
		return NAN;
	memcpy(t, c->v, c->n * sizeof(double));
	return median(t, c->n);
}

double cmin(const struct cell *c)
{
	double m = INFINITY;
	int i;

	for (i = 0; i < c->n; i++)
		m = c->v[i] < m ? c->v[i] : m;
	return c->n ? m : NAN;
}

double cmax(const struct cell *c)
{
	double m = -INFINITY;
	int i;

	for (i = 0; i < c->n; i++)
		m = c->v[i] > m ? c->v[i] : m;
	return c->n ? m : NAN;
}

void rep(struct reps *r, double x)
{
	if (r->n < MAX_REPS && !isnan(x))
		r->v[r->n++] = x;
}

/* The median of the repetitions into the cell, and start over. */
void put_reps(struct cell *c, struct reps *r)
{
	if (r->n)
		put(c, median(r->v, r->n));
	r->n = 0;
}

void progress(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "# ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
}

void fail(const char *fmt, ...)
{
	va_list ap;

	failures++;
	fprintf(stderr, "# FAIL: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
}

/* A transfer problem: fatal for normal and VA MRs, counted for ODP (known rxe bugs). */
void bad_transfer(enum kind k, const char *what)
{
	if (k == ODP) {
		odp_bad++;
		progress("odp: %s (known rxe ODP bug; not a failure)", what);
	} else {
		fail("%s: %s", kind_name[k], what);
	}
}

/* len bytes of anonymous memory, 2 MiB aligned, without THP; touched when asked. */
uint8_t *buf_alloc(size_t len, int touch)
{
	uint8_t *a = map_aligned_2m(len);

	if (!a) {
		fail("mmap of %zu bytes: %s", len, strerror(errno));
		return NULL;
	}
	if (touch)
		memset(a, 0x5a, len);
	return a;
}

struct ibv_mr *reg(void *a, size_t len, enum kind k)
{
	struct ibv_mr *mr;
	int ret = rdma_pair_reg_mr(p, a, len, ACC | kind_access[k], &mr);

	if (ret) {
		fail("%s: ibv_reg_mr of %zu bytes: %s", kind_name[k], len, strerror(-ret));
		return NULL;
	}
	return mr;
}

void dereg(struct ibv_mr *mr)
{
	int ret = ibv_dereg_mr(mr);

	if (ret)
		fail("ibv_dereg_mr: %s", strerror(ret));
}

/* ---------------------------------------------------------------- streams */

/*
 * Stream RDMA WRITEs (op IBV_WR_RDMA_WRITE: local lb -> remote rb) or READs
 * (remote rb -> local lb) of msg bytes, the i-th at offset (i * stride) %
 * buflen on both sides (stride 0: msg), DEPTH in flight, until total bytes
 * are done or (total == 0) until deadline_us. Error completions are counted in *nerr and the QPs
 * recovered. Returns the bytes completed successfully, or -1 when the stream
 * stalled (no completion for 15 s).
 *
 * After 50 empty polls the stream sleeps on the send CQ's completion channel
 * (armed, then polled once more so that a completion before the arming is not
 * missed; 20 ms at most per sleep, so a lost wake-up costs time, not the
 * stream). Not short timed sleeps: under TCG a cycle of timer wake-ups on
 * one vCPU slows the other, where rxe's responder runs, and inflates what
 * [3b] measures.
 */
long stream_strided(enum ibv_wr_opcode op, uint8_t *lb, uint32_t lkey, uint8_t *rb,
			   uint32_t rkey, size_t buflen, size_t msg, size_t stride, size_t total,
			   double deadline_us, long *nerr)
{
	size_t posted = 0, off = 0;
	int inflight = 0, idle = 0, armed = 0;
	double last = now_us();
	long good = 0;

	for (;;) {
		int more = total ? posted < total : now_us() < deadline_us;
		struct ibv_wc wc[DEPTH];
		int n, i, bad;

		while (more && inflight < DEPTH) {
			int ret = op == IBV_WR_RDMA_WRITE ?
				rdma_pair_post_write(p, 0, msg, lb + off, lkey, (uintptr_t)(rb + off), rkey, msg) :
				rdma_pair_post_read(p, 0, msg, lb + off, lkey, (uintptr_t)(rb + off), rkey, msg);

			if (ret) {
				fail("ibv_post_send: %s", strerror(-ret));
				return -1;
			}
			inflight++;
			posted += msg;
			off = (off + (stride ? stride : msg)) % buflen;
			more = total ? posted < total : now_us() < deadline_us;
		}
		if (!inflight)
			break;
		n = ibv_poll_cq(p->scq[0], DEPTH, wc);
		if (n < 0) {
			fail("ibv_poll_cq");
			return -1;
		}
		for (i = 0, bad = 0; i < n; i++) {
			if (wc[i].status == IBV_WC_SUCCESS) {
				good += wc[i].wr_id;
			} else {
				if (!*nerr)
					progress("error completion: %s (vendor error %u)",
						 ibv_wc_status_str(wc[i].status), wc[i].vendor_err);
				(*nerr)++;
				bad = 1;
			}
		}
		inflight -= n;
		if (n) {
			idle = 0;
			last = now_us();
			if (bad) {
				/* The QP went to the error state: everything in flight is lost. */
				if (rdma_pair_recover(p)) {
					fail("rdma_pair_recover");
					return -1;
				}
				inflight = 0;
			}
			continue;
		}
		if (now_us() - last > 15e6) {
			fail("stream of %zu-byte messages stalled", msg);
			rdma_pair_recover(p);
			return -1;
		}
		if (++idle > 50) {
			struct pollfd pfd = { .fd = p->schan[0]->fd, .events = POLLIN };
			struct ibv_cq *ecq;
			void *ectx;

			if (!armed) {
				/* Arm, then poll once more: a completion before the arming is seen there. */
				if (ibv_req_notify_cq(p->scq[0], 0))
					usleep(20);
				else
					armed = 1;
				continue;
			}
			armed = 0;
			if (poll(&pfd, 1, 20) > 0 && !ibv_get_cq_event(p->schan[0], &ecq, &ectx))
				ibv_ack_cq_events(ecq, 1);
		}
	}
	return good;
}

long stream(enum ibv_wr_opcode op, uint8_t *lb, uint32_t lkey, uint8_t *rb, uint32_t rkey,
		   size_t buflen, size_t msg, size_t total, double deadline_us, long *nerr)
{
	return stream_strided(op, lb, lkey, rb, rkey, buflen, msg, 0, total, deadline_us, nerr);
}

/* One WRITE of len bytes, waited for: 0, or the error (counted by the caller). */
int write_once(uint8_t *lb, uint32_t lkey, uint8_t *rb, uint32_t rkey, size_t len)
{
	int st = rdma_pair_write_sync(p, 0, lb, lkey, (uintptr_t)rb, rkey, len, 0);

	if (st)
		rdma_pair_recover(p);
	return st;
}

/* ------------------------------------------------------- results storage */

size_t big_size = GIB; /* reg_size[3], smaller when the guest lacks RAM */
struct cell reg_us[NKIND][NREG], dereg_us[NKIND][NREG];
/*
 * The same at 4K and 1M as the mean of the REG_REPS registrations of a round
 * instead of their median: one stall of the host during a round moves a mean
 * of 32 ~100 us calls by tens of percent, their median not; the mean shows a
 * real tail.
 */
struct cell reg_mean_us[NKIND][NREG], dereg_mean_us[NKIND][NREG];

struct cell first_pp[NKIND], steady_pp[NKIND], pin_pp[NKIND];
struct cell sfirst_pp[NKIND], ssteady_pp[NKIND], spin_pp[NKIND];
const char *first_data[NKIND];

struct cell wr_mbs[NKIND][NTPUT], rd_mbs[NKIND][NTPUT], memcpy_mbs[NTPUT], loop_mbs[NTPUT];
long wr_err[NKIND], rd_err[NKIND], wr_corrupt[NKIND], rd_corrupt[NKIND];

/* [6] unconfined ([0]) and on one CPU ([1]): MB/s, remaps/s, and stream us lost per remap. */
struct cell remap_mbs[2][NKIND], noremap_mbs[2][NKIND], remap_rate[2][NKIND];
struct cell remap_cost[2][NKIND], remap_memcpy, remap_loop;
const char *one_cpu_note;

/*
 * A plain 8-byte copy loop (not turned into a memcpy call): under TCG, glibc's
 * memcpy may pick "rep movsb", which QEMU emulates slowly and unevenly, so
 * the ceiling rows show both.
 */
__attribute__((noinline, optimize("no-tree-loop-distribute-patterns")))
static void copy_loop(void *dst, const void *src, size_t n)
{
	uint64_t *d = dst;
	const uint64_t *q = src;
	size_t i;

	for (i = 0; i < n / 8; i++)
		d[i] = q[i];
}

uint8_t *lbuf, *rbuf, *tbuf[NKIND];

/* MB/s of copying bytes in pieces of msg from lbuf to rbuf (offsets modulo TBUF). */
double copy_rate(size_t msg, size_t bytes, int loop)
{
	double t = now_us();
	size_t off;

	for (off = 0; off < bytes; off += msg) {
		if (loop)
			copy_loop(rbuf + off % TBUF, lbuf + off % TBUF, msg);
		else
			memcpy(rbuf + off % TBUF, lbuf + off % TBUF, msg);
	}
	return bytes / (now_us() - t);
}
long remap_err[NKIND];

struct cell inv_call[NKIND][NICOL], inv_write[NKIND][NICOL];

struct cell live_dereg[NKIND][NLIVE];

struct cell cpu_self[NKIND], cpu_incl[NKIND], cpu_copy[NKIND], cpu_samples[NKIND];
const char *perf_note;
