// SPDX-License-Identifier: GPL-2.0
/*
 * vamr_bench: normal vs ODP vs VA MRs on the soft-RoCE device of the guest,
 * side by side in one run. Prints one table (column bands, each with the rows
 * normal / odp / va / va/normal / va/odp, plus a memcpy ceiling row where a
 * plain copy means something). Documentation/bench-results.rst explains every
 * row.
 *
 * Never a timed assertion: the numbers are printed, not judged. The exit
 * status is non-zero only when something failed: a verbs call, a transfer
 * with an error completion or wrong data on a normal or VA MR. ODP MRs on rxe
 * have known copy bugs: their wrong data and error completions are counted
 * and printed (CORRUPT / errors), not failures.
 *
 * Each cell is the median over ROUNDS rounds with the spread [min..max];
 * ratio rows divide medians. The kinds are interleaved inside each round.
 *
 * usage: vamr_bench [rounds]     (default $VAMR_BENCH_ROUNDS, else 5; at most 32)
 * Environment: VAMR_BENCH_PERF=path of perf (default "perf"; the CPU-share
 * band is skipped with a note when it does not run), VAMR_IBDEV as for the
 * selftests. Progress goes to stderr as "# ..." lines.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../include/uapi/misc/vamr.h"
#include "../selftests/mm_util.h"
#include "../selftests/pattern.h"
#include "../selftests/rdma_pair.h"
#include "../selftests/vamr_lib.h"
#include "bench_util.h"

#define KIB 1024ul
#define MIB (1ul << 20)
#define GIB (1ul << 30)
#define PAGE 4096ul
#define HUGE (2ul << 20)
#define ACC (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#define MAX_ROUNDS 32

/* Streams: the MR under test is TBUF bytes; DEPTH WRs in flight. */
#define TBUF (16 * MIB)
#define DEPTH 16
/* Bytes per throughput point: STREAM_MIN, and at least 4 messages. */
#define STREAM_MIN (16 * MIB)
#define STREAM_BYTES(msg) ((msg) * 4 > STREAM_MIN ? (msg) * 4 : STREAM_MIN)
/* First access after remap: REMAP_PAGES pages. */
#define REMAP_PAGES 1024ul
/* Periodic remaps: REMAP_CHUNK every REMAP_PERIOD_US while WRITEs of REMAP_MSG stream. */
#define REMAP_CHUNK (64 * KIB)
#define REMAP_PERIOD_US 1000
#define REMAP_MSG (64 * KIB)
#define REMAP_SECONDS 1.5	/* per condition and round, */
#define REMAP_SLICES 3		/* in slices alternating with and without remaps */
/* vamr's CPU share: a WRITE stream of PERF_MSG messages for PERF_SECONDS under perf. */
#define PERF_MSG (64 * KIB)
#define PERF_SECONDS 2.0
/* Invalidations. */
#define INV_LEN (16 * MIB)
#define INV_REPS 3	/* per round, for the 16 MiB MR columns */
#define NMR 1000
#define STRIDE (32 * KIB)
#define MRLEN (16 * KIB)
/* Deregistration with N live MRs. */
#define LIVE_MAX 4000
#define DEREG_SAMPLES 8

enum kind { NORMAL, ODP, VA, NKIND };
static const char *const kind_name[NKIND] = { "normal", "odp", "va" };
static const unsigned int kind_access[NKIND] = { 0, IBV_ACCESS_ON_DEMAND, VAMR_ACCESS_VA };

static int rounds = 5;
static int failures;
static long odp_bad;
static struct rdma_pair pair;
static struct rdma_pair *p = &pair;

struct cell {
	double v[MAX_ROUNDS];
	int n;
};

static void put(struct cell *c, double x)
{
	if (c->n < MAX_ROUNDS && !isnan(x))
		c->v[c->n++] = x;
}

static double cmed(const struct cell *c)
{
	double t[MAX_ROUNDS];

	if (!c->n)
		return NAN;
	memcpy(t, c->v, c->n * sizeof(double));
	return median(t, c->n);
}

static double cmin(const struct cell *c)
{
	double m = INFINITY;
	int i;

	for (i = 0; i < c->n; i++)
		m = c->v[i] < m ? c->v[i] : m;
	return c->n ? m : NAN;
}

static double cmax(const struct cell *c)
{
	double m = -INFINITY;
	int i;

	for (i = 0; i < c->n; i++)
		m = c->v[i] > m ? c->v[i] : m;
	return c->n ? m : NAN;
}

/* Repetitions inside a round: the round's value is their median. */
#define MAX_REPS 8
struct reps {
	double v[MAX_REPS];
	int n;
};

static void rep(struct reps *r, double x)
{
	if (r->n < MAX_REPS && !isnan(x))
		r->v[r->n++] = x;
}

/* The median of the repetitions into the cell, and start over. */
static void put_reps(struct cell *c, struct reps *r)
{
	if (r->n)
		put(c, median(r->v, r->n));
	r->n = 0;
}

static void progress(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "# ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
}

static void fail(const char *fmt, ...)
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
static void bad_transfer(enum kind k, const char *what)
{
	if (k == ODP) {
		odp_bad++;
		progress("odp: %s (known rxe ODP bug; not a failure)", what);
	} else {
		fail("%s: %s", kind_name[k], what);
	}
}

/* len bytes of anonymous memory, 2 MiB aligned, without THP; touched when asked. */
static uint8_t *buf_alloc(size_t len, int touch)
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

static struct ibv_mr *reg(void *a, size_t len, enum kind k)
{
	struct ibv_mr *mr;
	int ret = rdma_pair_reg_mr(p, a, len, ACC | kind_access[k], &mr);

	if (ret) {
		fail("%s: ibv_reg_mr of %zu bytes: %s", kind_name[k], len, strerror(-ret));
		return NULL;
	}
	return mr;
}

static void dereg(struct ibv_mr *mr)
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
static long stream_strided(enum ibv_wr_opcode op, uint8_t *lb, uint32_t lkey, uint8_t *rb,
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

static long stream(enum ibv_wr_opcode op, uint8_t *lb, uint32_t lkey, uint8_t *rb, uint32_t rkey,
		   size_t buflen, size_t msg, size_t total, double deadline_us, long *nerr)
{
	return stream_strided(op, lb, lkey, rb, rkey, buflen, msg, 0, total, deadline_us, nerr);
}

/* One WRITE of len bytes, waited for: 0, or the error (counted by the caller). */
static int write_once(uint8_t *lb, uint32_t lkey, uint8_t *rb, uint32_t rkey, size_t len)
{
	int st = rdma_pair_write_sync(p, 0, lb, lkey, (uintptr_t)rb, rkey, len, 0);

	if (st)
		rdma_pair_recover(p);
	return st;
}

/* ------------------------------------------------------- results storage */

static const size_t reg_size[] = { 4 * KIB, MIB, 64 * MIB, GIB };
#define NREG 4
static size_t big_size = GIB; /* reg_size[3], smaller when the guest lacks RAM */
static struct cell reg_us[NKIND][NREG], dereg_us[NKIND][NREG];
/*
 * The same at 4K and 1M as the mean of the REG_REPS registrations of a round
 * instead of their median: one stall of the host during a round moves a mean
 * of 32 ~100 us calls by tens of percent, their median not; the mean shows a
 * real tail.
 */
static struct cell reg_mean_us[NKIND][NREG], dereg_mean_us[NKIND][NREG];

static struct cell first_pp[NKIND], steady_pp[NKIND], pin_pp[NKIND];
static struct cell sfirst_pp[NKIND], ssteady_pp[NKIND], spin_pp[NKIND];
static const char *first_data[NKIND];

static const size_t tput_size[] = { 4 * KIB, 64 * KIB, MIB, 4 * MIB };
#define NTPUT 4
static struct cell wr_mbs[NKIND][NTPUT], rd_mbs[NKIND][NTPUT], memcpy_mbs[NTPUT], loop_mbs[NTPUT];
static long wr_err[NKIND], rd_err[NKIND], wr_corrupt[NKIND], rd_corrupt[NKIND];

/* [6] unconfined ([0]) and on one CPU ([1]): MB/s, remaps/s, and stream us lost per remap. */
static struct cell remap_mbs[2][NKIND], noremap_mbs[2][NKIND], remap_rate[2][NKIND];
static struct cell remap_cost[2][NKIND], remap_memcpy, remap_loop;
static const char *one_cpu_note;

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

static uint8_t *lbuf, *rbuf, *tbuf[NKIND];

/* MB/s of copying bytes in pieces of msg from lbuf to rbuf (offsets modulo TBUF). */
static double copy_rate(size_t msg, size_t bytes, int loop)
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
static long remap_err[NKIND];

enum icol { MUNMAP, MPROTECT, DONTNEED, MANY, NICOL };
static struct cell inv_call[NKIND][NICOL], inv_write[NKIND][NICOL];

static const int live_n[] = { 1, 1000, LIVE_MAX };
#define NLIVE 3
static struct cell live_dereg[NKIND][NLIVE];

static struct cell cpu_self[NKIND], cpu_incl[NKIND], cpu_copy[NKIND], cpu_samples[NKIND];
static const char *perf_note;

/* --------------------------------------------- registration / deregistration */

static size_t mem_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[128];
	size_t kb = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %zu kB", &kb) == 1)
			break;
	fclose(f);
	return kb * KIB;
}

/* Registrations per round at 4 KiB and 1 MiB (the round's value is their
 * median; their mean goes to reg_mean_us): one interrupt or RCU batch in a
 * 30 us deregistration moves a mean of 8 by tens of percent. */
#define REG_REPS 32
/* ... at 64M and in the last column (1G, or the largest power of two that
 * fits: REG_REPS_64M when that is 64M); the round's value is their median. */
#define REG_REPS_64M 7
#define REG_REPS_BIG 3
#define STR_(x) #x
#define STR(x) STR_(x)

static void bench_reg(void)
{
	int s, r, k, j;

	/* 1 GiB, all touched, when it fits with room to spare; else the largest power of two. */
	while (big_size > 64 * MIB && mem_available() < big_size + 384 * MIB)
		big_size /= 2;
	for (s = 0; s < NREG; s++) {
		size_t len = s == NREG - 1 ? big_size : reg_size[s];
		int reps = len <= MIB ? REG_REPS : len <= 64 * MIB ? REG_REPS_64M : REG_REPS_BIG;
		double t0 = now_us();
		uint8_t *a = buf_alloc(len, 1);

		if (!a)
			return;
		progress("reg/dereg %zu KiB: touched in %.1f s", len / KIB, (now_us() - t0) / 1e6);
		if (s == 0) {
			/* Untimed: the first registration of each kind sets things up. */
			for (k = 0; k < NKIND; k++) {
				struct ibv_mr *mr = reg(a, len, k);

				if (mr)
					dereg(mr);
			}
		}
		for (r = 0; r < rounds; r++) {
			double treg[NKIND][REG_REPS], tdereg[NKIND][REG_REPS];
			double sreg[NKIND] = { 0 }, sdereg[NKIND] = { 0 };

			/*
			 * The kinds take turns within a round, one registration each, so
			 * that whatever else the host does lands on all of them alike.
			 */
			for (j = 0; j < reps; j++) {
				for (k = 0; k < NKIND; k++) {
					struct ibv_mr *mr;
					double t = now_us();

					mr = reg(a, len, k);
					treg[k][j] = now_us() - t;
					if (!mr)
						goto out;
					t = now_us();
					dereg(mr);
					tdereg[k][j] = now_us() - t;
					sreg[k] += treg[k][j];
					sdereg[k] += tdereg[k][j];
				}
			}
			for (k = 0; k < NKIND; k++) {
				put(&reg_us[k][s], median(treg[k], reps));
				put(&dereg_us[k][s], median(tdereg[k], reps));
				put(&reg_mean_us[k][s], sreg[k] / reps);
				put(&dereg_mean_us[k][s], sdereg[k] / reps);
			}
		}
out:
		munmap(a, len);
	}
}

/* --------------------------------------------- first access after a remap */

/* munmap + mmap(MAP_FIXED) of [a, a + len), then the CPU touches every page. */
static int remap_touched(uint8_t *a, size_t len)
{
	if (munmap(a, len) || remap_fixed(a, len)) {
		fail("remap: %s", strerror(errno));
		return -1;
	}
	madvise(a, len, MADV_NOHUGEPAGE);
	memset(a, 0, len);
	return 0;
}

/* Repetitions per round of [3a]/[3b] (the round's value is their median). */
#define FIRST_REPS 5
/* FIRST_SMALL bytes at the start of each page: the per-page variant of [3]. */
#define FIRST_SMALL 64ul

/*
 * Whether the WRITE(s) after a remap landed where the CPU looks: 1 yes, 0 no.
 * small: only the first FIRST_SMALL bytes of each page were written.
 */
static int landed(const uint8_t *a, const uint8_t *src, size_t len, int small)
{
	size_t off;

	if (!small)
		return !memcmp(a, src, len);
	for (off = 0; off < len; off += PAGE)
		if (memcmp(a + off, src + off, FIRST_SMALL))
			return 0;
	return 1;
}

static void after_remap_check(enum kind k, int ok, const char *what)
{
	if (k == NORMAL) {
		/* Expected: a normal MR keeps writing to the old pages. */
		if (ok)
			first_data[k] = "?landed";
		return;
	}
	if (!ok) {
		bad_transfer(k, what);
		if (k == ODP)
			first_data[k] = "CORRUPT";
	}
}

#define WQ_CPUMASK "/sys/devices/virtual/workqueue/cpumask"

/* Reads (buf != NULL: into buf) or writes (val) the unbound workqueue cpumask. 0 or -1. */
static int wq_cpumask(char *buf, size_t size, const char *val)
{
	FILE *f = fopen(WQ_CPUMASK, buf ? "r" : "w");
	int bad;

	if (!f)
		return -1;
	if (buf)
		bad = !fgets(buf, size, f);
	else
		bad = fputs(val, f) < 0;
	return fclose(f) || bad ? -1 : 0;
}

/* The state one_cpu_begin() changed, for one_cpu_end(). */
struct one_cpu {
	char saved[256];	/* the unbound workqueue cpumask before */
	cpu_set_t old;		/* the thread's affinity before */
	int state;		/* 0 nothing changed, 1 affinity saved, 2 the cpumask changed too */
};

/*
 * Confines the calling thread (and the threads it creates from now on) and the
 * unbound workqueues (rdma_rxe's rxe_wq, vamr's own) to the CPU it runs on.
 * 0, or -1 (needs root; whatever was changed is undone by one_cpu_end()).
 */
static int one_cpu_begin(struct one_cpu *o)
{
	int cpu = sched_getcpu();
	char mask[32];
	cpu_set_t one;

	o->state = 0;
	if (cpu < 0 || cpu >= 32 || wq_cpumask(o->saved, sizeof(o->saved), NULL) ||
	    sched_getaffinity(0, sizeof(o->old), &o->old))
		return -1;
	o->state = 1;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	snprintf(mask, sizeof(mask), "%x", 1u << cpu);
	if (sched_setaffinity(0, sizeof(one), &one) || wq_cpumask(NULL, 0, mask))
		return -1;
	o->state = 2;
	return 0;
}

/* Restores what one_cpu_begin() changed; a cpumask that cannot be restored fails the run. */
static void one_cpu_end(struct one_cpu *o, const char *what)
{
	if (o->state == 2 && wq_cpumask(NULL, 0, o->saved))
		fail("%s: cannot restore %s to %s", what, WQ_CPUMASK, o->saved);
	if (o->state >= 1)
		sched_setaffinity(0, sizeof(o->old), &o->old);
	o->state = 0;
}

/*
 * [3a] one WRITE over REMAP_PAGES remapped pages, [3b] one FIRST_SMALL-byte
 * WRITE per remapped page (DEPTH in flight): each timed right after the remap
 * and on the same pages while they are mapped in the MR ("pinned").
 */
static void bench_first_access(void)
{
	const size_t len = REMAP_PAGES * PAGE;
	struct ibv_mr *src_mr;
	uint8_t *src = buf_alloc(len, 0);
	int r, k;

	if (!src || !(src_mr = reg(src, len, NORMAL)))
		return;
	pattern_fill(src, len, 11, 0);
	for (k = 0; k < NKIND; k++)
		first_data[k] = "ok";
	first_data[NORMAL] = "stale";
	for (r = 0; r < rounds; r++) {
		struct reps rf[NKIND] = {}, rs[NKIND] = {}, rp[NKIND] = {};
		struct reps rsf[NKIND] = {}, rss[NKIND] = {}, rsp[NKIND] = {};
		int j;

		/*
		 * The kinds alternate inside the repetitions: a slow spell of the host hits all.
		 * Before the first round's, one repetition that counts for nothing (j = -1): under
		 * TCG the first run of a code path pays its translation (the responder's on-demand
		 * round runs for the first time here), which is no cost of the path itself.
		 */
		for (j = r == 0 ? -1 : 0; j < FIRST_REPS; j++) {
		for (k = 0; k < NKIND; k++) {
			uint8_t *a = buf_alloc(len, 1);
			struct ibv_mr *mr;
			double t, steady, first, ssteady, sfirst;
			long e = 0, got;
			int st;

			if (!a)
				return;
			mr = reg(a, len, k);
			if (!mr) {
				munmap(a, len);
				return;
			}
			/* Warm (ODP maps its pages here), then the steady-state WRITEs. */
			if (write_once(src, src_mr->lkey, a, mr->rkey, len))
				bad_transfer(k, "WRITE before the remap failed");
			t = now_us();
			st = write_once(src, src_mr->lkey, a, mr->rkey, len);
			steady = now_us() - t;
			t = now_us();
			got = stream_strided(IBV_WR_RDMA_WRITE, src, src_mr->lkey, a, mr->rkey, len,
					     FIRST_SMALL, PAGE, REMAP_PAGES * FIRST_SMALL, 0, &e);
			ssteady = now_us() - t;
			if (st || got < 0 || e)
				bad_transfer(k, "WRITE before the remap failed");

			/* [3b] remap, then one small WRITE per page. */
			if (remap_touched(a, len))
				return;
			e = 0;
			t = now_us();
			got = stream_strided(IBV_WR_RDMA_WRITE, src, src_mr->lkey, a, mr->rkey, len,
					     FIRST_SMALL, PAGE, REMAP_PAGES * FIRST_SMALL, 0, &e);
			sfirst = now_us() - t;
			if (got < 0 || e) {
				bad_transfer(k, "per-page WRITEs after the remap failed");
				sfirst = NAN;
			} else {
				after_remap_check(k, landed(a, src, len, 1),
						  "per-page WRITEs after the remap: data not where the CPU looks");
			}

			/* [3a] remap again, then one WRITE over all pages. */
			if (remap_touched(a, len))
				return;
			t = now_us();
			st = write_once(src, src_mr->lkey, a, mr->rkey, len);
			first = now_us() - t;
			if (st) {
				bad_transfer(k, "WRITE after the remap failed");
				first = NAN;
			} else {
				after_remap_check(k, landed(a, src, len, 0),
						  "WRITE after the remap: data not where the CPU looks");
			}
			if (j < 0)
				goto next;
			rep(&rs[k], steady / REMAP_PAGES);
			rep(&rf[k], first / REMAP_PAGES);
			rep(&rp[k], (first - steady) / REMAP_PAGES);
			rep(&rss[k], ssteady / REMAP_PAGES);
			rep(&rsf[k], sfirst / REMAP_PAGES);
			rep(&rsp[k], (sfirst - ssteady) / REMAP_PAGES);
next:
			dereg(mr);
			munmap(a, len);
		}
		}
		for (k = 0; k < NKIND; k++) {
			put_reps(&steady_pp[k], &rs[k]);
			put_reps(&first_pp[k], &rf[k]);
			put_reps(&pin_pp[k], &rp[k]);
			put_reps(&ssteady_pp[k], &rss[k]);
			put_reps(&sfirst_pp[k], &rsf[k]);
			put_reps(&spin_pp[k], &rsp[k]);
		}
		progress("first access round %d done", r + 1);
	}
	dereg(src_mr);
	munmap(src, len);
}

/* ------------------------------------------------------------ throughput */

static struct ibv_mr *lmr, *rmr, *tmr[NKIND];

static int stream_setup(void)
{
	int k;
	long e = 0;

	lbuf = buf_alloc(TBUF, 0);
	rbuf = buf_alloc(TBUF, 1);
	if (!lbuf || !rbuf || !(lmr = reg(lbuf, TBUF, NORMAL)) || !(rmr = reg(rbuf, TBUF, NORMAL)))
		return -1;
	pattern_fill(lbuf, TBUF, 23, 0);
	for (k = 0; k < NKIND; k++) {
		tbuf[k] = buf_alloc(TBUF, 1);
		if (!tbuf[k] || !(tmr[k] = reg(tbuf[k], TBUF, k)))
			return -1;
		/* Warm: every page of the MR written once (ODP maps them). */
		if (stream(IBV_WR_RDMA_WRITE, lbuf, lmr->lkey, tbuf[k], tmr[k]->rkey, TBUF, MIB,
			   TBUF, 0, &e) < 0 || e)
			bad_transfer(k, "warm-up WRITE stream failed");
	}
	return 0;
}

static double mbs(long bytes, double us)
{
	return bytes > 0 && us > 0 ? bytes / us : NAN; /* bytes/us == MB/s */
}

static void bench_throughput(void)
{
	int r, s, k;

	for (r = 0; r < rounds; r++) {
		for (s = 0; s < NTPUT; s++) {
			size_t msg = tput_size[s], bytes = STREAM_BYTES(msg);
			size_t cmp = bytes < TBUF ? bytes : TBUF;
			double t;

			for (k = 0; k < NKIND; k++) {
				long e = 0, got;

				/* WRITE: local pattern -> MR under test, then compare. */
				memset(tbuf[k], 0, TBUF);
				t = now_us();
				got = stream(IBV_WR_RDMA_WRITE, lbuf, lmr->lkey, tbuf[k], tmr[k]->rkey, TBUF,
					     msg, bytes, 0, &e);
				put(&wr_mbs[k][s], e ? NAN : mbs(got, now_us() - t));
				wr_err[k] += e;
				if (got < 0 || e)
					bad_transfer(k, "WRITE stream: error completions");
				else if (memcmp(tbuf[k], lbuf, cmp)) {
					wr_corrupt[k]++;
					bad_transfer(k, "WRITE stream: wrong data");
				}
				/* READ: MR under test -> local buffer, then compare. */
				e = 0;
				memset(rbuf, 0, TBUF);
				t = now_us();
				got = stream(IBV_WR_RDMA_READ, rbuf, rmr->lkey, tbuf[k], tmr[k]->rkey, TBUF,
					     msg, bytes, 0, &e);
				put(&rd_mbs[k][s], e ? NAN : mbs(got, now_us() - t));
				rd_err[k] += e;
				if (got < 0 || e)
					bad_transfer(k, "READ stream: error completions");
				else if (memcmp(rbuf, tbuf[k], cmp)) {
					rd_corrupt[k]++;
					bad_transfer(k, "READ stream: wrong data");
				}
			}
			/* The ceiling: the guest CPU copying the same bytes in the same pieces. */
			put(&memcpy_mbs[s], copy_rate(msg, bytes, 0));
			put(&loop_mbs[s], copy_rate(msg, bytes, 1));
		}
		progress("throughput round %d done", r + 1);
	}
}

/* ------------------------------------------------------ periodic remaps */

struct remapper {
	uint8_t *base;
	volatile int stop;
	long n, errors;
};

/*
 * vamr's module-wide counters (VAMR_IOC_STATS, VAMR_STATS_GLOBAL) into *c; 0, or -1 when
 * /dev/vamr cannot answer (then the per-remap line says so).
 */
static int vamr_global_counters(struct vamr_counters *c)
{
	struct vamr_stats st = { .handle = VAMR_STATS_GLOBAL };
	int fd = open("/dev/vamr", O_RDWR | O_CLOEXEC), ret;

	if (fd < 0)
		return -1;
	ret = ioctl(fd, VAMR_IOC_STATS, &st);
	close(fd);
	if (ret)
		return -1;
	*c = st.counters;
	return 0;
}

/* What vamr did per remap in the VA slices with remaps (sums over all rounds). */
static double va_remaps;
static uint64_t va_repinned, va_unpinned, va_lost;
static int va_counters_ok = 1;

static void *remap_thread(void *arg)
{
	struct remapper *rm = arg;
	struct timespec next;
	size_t off = 0;

	clock_gettime(CLOCK_MONOTONIC, &next);
	while (!rm->stop) {
		next.tv_nsec += REMAP_PERIOD_US * 1000;
		if (next.tv_nsec >= 1000000000) {
			next.tv_nsec -= 1000000000;
			next.tv_sec++;
		}
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
		if (remap_fixed(rm->base + off, REMAP_CHUNK))
			rm->errors++;
		rm->n++;
		/* A stride that is not a multiple of the message size: remaps move across messages. */
		off = (off + 3 * REMAP_CHUNK) % TBUF;
		{
			struct timespec now;

			clock_gettime(CLOCK_MONOTONIC, &now);
			if (now.tv_sec > next.tv_sec + 1)
				next = now; /* far behind (TCG): do not try to catch up */
		}
	}
	return NULL;
}

/*
 * One round of [6] for kind k, unconfined (c 0) or with the benchmark, its
 * remap thread and the unbound workqueues on one CPU (c 1): REMAP_SLICES
 * alternations of a slice without and a slice with remaps.
 */
static void remap_round(int c, int k)
{
	double t_on = 0, t_off = 0, n_remaps = 0;
	long b_on = 0, b_off = 0;
	int j;

	for (j = 0; j < 2 * REMAP_SLICES; j++) {
		struct remapper rm = { .base = tbuf[k] };
		double slice = REMAP_SECONDS / REMAP_SLICES * 1e6, t;
		pthread_t th;
		long e = 0, got;
		int on = j & 1;

		struct vamr_counters c0, c1;
		int counted = on && k == VA && !vamr_global_counters(&c0);

		if (on && k == VA && !counted)
			va_counters_ok = 0;
		/* The thread inherits this thread's affinity (one CPU when c is 1). */
		if (on && pthread_create(&th, NULL, remap_thread, &rm)) {
			fail("pthread_create");
			return;
		}
		t = now_us();
		got = stream(IBV_WR_RDMA_WRITE, lbuf, lmr->lkey, tbuf[k], tmr[k]->rkey,
			     TBUF, REMAP_MSG, 0, t + slice, &e);
		if (on) {
			long more;

			rm.stop = 1;
			pthread_join(th, NULL);
			/*
			 * One more pass over the whole MR after the last remap: the
			 * slice pays for the faults of all its remaps, and the next
			 * slice without remaps starts with every page mapped.
			 */
			more = stream(IBV_WR_RDMA_WRITE, lbuf, lmr->lkey, tbuf[k], tmr[k]->rkey,
				      TBUF, REMAP_MSG, TBUF, 0, &e);
			got = got < 0 || more < 0 ? -1 : got + more;
		}
		t = now_us() - t;
		if (on) {
			if (rm.errors)
				fail("mmap(MAP_FIXED) failed %ld times", rm.errors);
			remap_err[k] += e;
			n_remaps += rm.n;
			if (counted && !vamr_global_counters(&c1)) {
				va_remaps += rm.n;
				va_repinned += c1.ondemand_repins - c0.ondemand_repins;
				va_unpinned += c1.pages_unpinned - c0.pages_unpinned;
				va_lost += c1.repin_retries - c0.repin_retries;
			} else if (counted) {
				va_counters_ok = 0;
			}
		}
		if (got < 0 || e)
			bad_transfer(k, on ? "WRITE stream under remaps: error completions" :
					     "WRITE stream without remaps: error completions");
		if (got > 0) {
			*(on ? &b_on : &b_off) += got;
			*(on ? &t_on : &t_off) += t;
		}
	}
	put(&noremap_mbs[c][k], mbs(b_off, t_off));
	put(&remap_mbs[c][k], mbs(b_on, t_on));
	put(&remap_rate[c][k], t_on > 0 ? n_remaps / (t_on / 1e6) : NAN);
	/* The stream's time beyond what the same bytes took without remaps, per remap. */
	if (b_on > 0 && b_off > 0 && t_off > 0 && n_remaps > 0)
		put(&remap_cost[c][k], (t_on - b_on * (t_off / b_off)) / n_remaps);
}

static void bench_remaps(void)
{
	int r, k, c;

	for (r = 0; r < rounds; r++) {
		for (c = 0; c < 2; c++) {
			struct one_cpu o;

			if (c == 1 && one_cpu_begin(&o)) {
				one_cpu_end(&o, "[6] on one CPU");
				one_cpu_note = "not measured: confining to one CPU needs root";
				break;
			}
			for (k = 0; k < NKIND; k++)
				remap_round(c, k);
			if (c == 1)
				one_cpu_end(&o, "[6] on one CPU");
		}
		{
			/* The ceiling: the same 64 KiB pieces copied by the CPU, 16 MiB of them. */
			put(&remap_memcpy, copy_rate(REMAP_MSG, TBUF, 0));
			put(&remap_loop, copy_rate(REMAP_MSG, TBUF, 1));
		}
		progress("periodic remaps round %d done", r + 1);
	}
}

/* ---------------------------------------------- vamr's share of rxe CPU */

/*
 * Symbols come from /proc/kallsyms, not from perf: perf looks module ELF files
 * up by name under /lib/modules and would take the stock rdma_rxe.ko in
 * kernel/ for the patched one (updates/) that is loaded. Each kernel text
 * symbol with the module it belongs to; an address belongs to the module of
 * the closest symbol at or below it.
 */
enum owner { OWN_KERNEL, OWN_VAMR, OWN_RXE, OWN_OTHER };

struct ksym {
	unsigned long long addr;
	char name[40];
	unsigned char owner;
};

static struct ksym *ksyms;
static size_t nksyms;

static int cmp_ksym(const void *a, const void *b)
{
	const struct ksym *x = a, *y = b;

	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static int load_kallsyms(void)
{
	FILE *f = fopen("/proc/kallsyms", "r");
	char line[512], name[256], mod[128], type;
	unsigned long long addr;
	size_t cap = 0;

	if (!f)
		return -1;
	nksyms = 0;
	while (fgets(line, sizeof(line), f)) {
		int n = sscanf(line, "%llx %c %255s [%127[^]]]", &addr, &type, name, mod);

		if (n < 3 || !addr || (type != 't' && type != 'T'))
			continue;
		if (nksyms == cap) {
			cap = cap ? 2 * cap : 65536;
			ksyms = realloc(ksyms, cap * sizeof(*ksyms));
			if (!ksyms) {
				fclose(f);
				return -1;
			}
		}
		ksyms[nksyms].addr = addr;
		snprintf(ksyms[nksyms].name, sizeof(ksyms[nksyms].name), "%.39s", name);
		ksyms[nksyms].owner = n < 4 ? OWN_KERNEL : !strcmp(mod, "vamr") ? OWN_VAMR :
				      !strcmp(mod, "rdma_rxe") ? OWN_RXE : OWN_OTHER;
		nksyms++;
	}
	fclose(f);
	qsort(ksyms, nksyms, sizeof(*ksyms), cmp_ksym);
	return nksyms ? 0 : -1;
}

/* The kernel symbol at or below ip, or NULL (user space, or zero addresses in kallsyms). */
static const struct ksym *ksym_of(unsigned long long ip)
{
	size_t lo = 0, hi = nksyms;

	if (ip < 0xffff800000000000ull || !nksyms || ip < ksyms[0].addr)
		return NULL;
	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;

		if (ksyms[mid].addr <= ip)
			lo = mid;
		else
			hi = mid;
	}
	return &ksyms[lo];
}

static int is_copy_sym(const char *s)
{
	static const char *const copy[] = { "memcpy", "__memcpy", "memcpy_orig", "__pi_memcpy",
					    "memmove", "__memmove", "rep_movs_alternative",
					    "copy_page", "memcpy_erms", "__memcpy_flushcache", NULL };
	int i;

	for (i = 0; copy[i]; i++)
		if (!strcmp(s, copy[i]))
			return 1;
	return 0;
}

static int perf_dump;

/*
 * Parse `perf script -F comm,ip` of a callchain recording: among the samples
 * with an rdma_rxe frame on the stack (rxe's work, in whatever task it ran),
 * the share whose leaf is in vamr.ko (self), whose stack has a vamr.ko frame
 * but whose leaf is not the data copy itself (incl), and whose leaf is a
 * memcpy-like copy (copy). Returns the rxe sample count or -1.
 */
static long perf_parse(FILE *f, double *self, double *incl, double *copy, long *nsamples)
{
	static const struct ksym *fr[128];
	static const char *const own[] = { "kernel", "vamr", "rdma_rxe", "module" };
	char line[512];
	long rxe = 0, nself = 0, nincl = 0, ncopy = 0;
	int nf = 0, eof = 0, user = 0;

	while (!eof) {
		eof = !fgets(line, sizeof(line), f);
		if (!eof && (line[0] == ' ' || line[0] == '\t')) {
			unsigned long long ip;

			if (sscanf(line, " %llx", &ip) < 1 || nf >= 128)
				continue;
			fr[nf] = ksym_of(ip);
			if (fr[nf])
				nf++;
			else if (!nf)
				user = 1; /* the leaf is in user space */
			continue;
		}
		/* A header line, a blank line or the end: close the sample read so far. */
		if (nf || user) {
			int i, has_rxe = 0, has_vamr = 0;

			(*nsamples)++;
			for (i = 0; i < nf; i++) {
				has_rxe |= fr[i]->owner == OWN_RXE;
				has_vamr |= fr[i]->owner == OWN_VAMR;
			}
			if (has_rxe && !user) {
				if (perf_dump > 0) {
					perf_dump--;
					fprintf(stderr, "#   sample:");
					for (i = 0; i < nf && i < 12; i++)
						fprintf(stderr, " %s[%s]", fr[i]->name, own[fr[i]->owner]);
					fprintf(stderr, "\n");
				}
				rxe++;
				if (fr[0]->owner == OWN_VAMR)
					nself++;
				if (is_copy_sym(fr[0]->name))
					ncopy++;
				else if (has_vamr)
					nincl++;
			}
		}
		nf = 0;
		user = 0;
	}
	if (!rxe)
		return -1;
	*self = 100.0 * nself / rxe;
	*incl = 100.0 * nincl / rxe;
	*copy = 100.0 * ncopy / rxe;
	return rxe;
}

/* The first lines of a file on stderr, as progress lines. */
static void dump_head(const char *path, int lines)
{
	FILE *f = fopen(path, "r");
	char line[256];

	if (!f)
		return;
	while (lines-- > 0 && fgets(line, sizeof(line), f))
		fprintf(stderr, "#   %s", line);
	fclose(f);
}

/*
 * Sends CMD ("enable\n" or "disable\n") to perf record's control descriptor
 * CTL and waits up to 60 s for its "ack" on ACK: 0, or -1 when perf did not
 * answer (gone, or too old for --control).
 */
static int perf_ctl(int ctl, int ack, const char *cmd)
{
	struct pollfd p = { .fd = ack, .events = POLLIN };
	char buf[16];
	ssize_t n;

	if (write(ctl, cmd, strlen(cmd)) != (ssize_t)strlen(cmd))
		return -1;
	if (poll(&p, 1, 60000) != 1)
		return -1;
	n = read(ack, buf, sizeof(buf) - 1);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	return strncmp(buf, "ack", 3) ? -1 : 0;
}

static void bench_cpu_share(void)
{
	const char *perf = getenv("VAMR_BENCH_PERF") ? getenv("VAMR_BENCH_PERF") : "perf";
	char data[64], cmd[256];
	int r, k;

	if (load_kallsyms()) {
		perf_note = "cannot read /proc/kallsyms";
		return;
	}
	/* A perf that died must not kill the benchmark through its control pipe. */
	signal(SIGPIPE, SIG_IGN);
	for (r = 0; r < rounds; r++) {
		for (k = 0; k < NKIND; k++) {
			double self, incl, copy, t;
			long e = 0, got, n, all;
			int status, ctl[2], ack[2];
			pid_t pid;
			FILE *f;

			snprintf(data, sizeof(data), "/tmp/vamr-bench-perf.data");
			unlink(data);
			/*
			 * perf starts with its events disabled (-D -1) and enables them
			 * when told on its control descriptor, acknowledging on another:
			 * the samples cover the stream exactly, however long perf itself
			 * takes to start (the host's perf, read over 9p).
			 */
			if (pipe(ctl) || pipe(ack)) {
				perf_note = "pipe failed";
				return;
			}
			pid = fork();
			if (pid == 0) {
				int fd = open("/dev/null", O_WRONLY);
				char arg[32];

				dup2(fd, 1);
				dup2(fd, 2);
				close(ctl[1]);
				close(ack[0]);
				snprintf(arg, sizeof(arg), "fd:%d,%d", ctl[0], ack[1]);
				execlp(perf, perf, "record", "-a", "-g", "-e", "cpu-clock", "-F", "1000",
				       "-N", "-q", "-D", "-1", "--control", arg, "-o", data, (char *)NULL);
				_exit(127);
			}
			close(ctl[0]);
			close(ack[1]);
			if (pid < 0) {
				perf_note = "fork failed";
				close(ctl[1]);
				close(ack[0]);
				return;
			}
			if (perf_ctl(ctl[1], ack[0], "enable\n")) {
				perf_note = "perf record did not start (no perf binary in the guest, or no --control)";
				kill(pid, SIGKILL);
				waitpid(pid, &status, 0);
				close(ctl[1]);
				close(ack[0]);
				return;
			}
			t = now_us();
			got = stream(IBV_WR_RDMA_WRITE, lbuf, lmr->lkey, tbuf[k], tmr[k]->rkey, TBUF,
				     PERF_MSG, 0, t + PERF_SECONDS * 1e6, &e);
			perf_ctl(ctl[1], ack[0], "disable\n");
			kill(pid, SIGINT);
			waitpid(pid, &status, 0);
			close(ctl[1]);
			close(ack[0]);
			if (got < 0 || e)
				bad_transfer(k, "WRITE stream under perf: error completions");
			snprintf(cmd, sizeof(cmd),
				 "%s script -i %s -F comm,ip >/tmp/vamr-bench-perf.txt 2>/tmp/vamr-bench-perf.err",
				 perf, data);
			if (system(cmd)) {
				perf_note = "perf script failed";
				dump_head("/tmp/vamr-bench-perf.err", 20);
				return;
			}
			f = fopen("/tmp/vamr-bench-perf.txt", "r");
			if (!f) {
				perf_note = "perf script wrote nothing";
				return;
			}
			if (r == 0 && getenv("VAMR_BENCH_PHASES") &&
			    strstr(getenv("VAMR_BENCH_PHASES"), "perfdump")) {
				progress("%s: samples with an rdma_rxe frame", kind_name[k]);
				perf_dump = 12;
			}
			all = 0;
			n = perf_parse(f, &self, &incl, &copy, &all);
			fclose(f);
			if (n < 0) {
				perf_note = "no sample had an rdma_rxe frame (perf could not resolve module symbols?)";
				progress("%ld samples, none with an rdma_rxe frame; the start of perf script:", all);
				dump_head("/tmp/vamr-bench-perf.txt", 40);
				dump_head("/tmp/vamr-bench-perf.err", 10);
				continue;
			}
			put(&cpu_self[k], self);
			put(&cpu_incl[k], incl);
			put(&cpu_copy[k], copy);
			put(&cpu_samples[k], n);
		}
		progress("cpu share round %d done", r + 1);
	}
	unlink(data);
	unlink("/tmp/vamr-bench-perf.txt");
}

/* ---------------------------------------------------------- invalidations */

static void bench_inval(void)
{
	static struct ibv_mr *mrs[NMR];
	struct ibv_mr *src_mr;
	uint8_t *src = buf_alloc(PAGE, 0);
	int r, k, c, i;

	if (!src || !(src_mr = reg(src, PAGE, NORMAL)))
		return;
	pattern_fill(src, PAGE, 1, 0);
	for (r = 0; r < rounds; r++) {
		for (k = 0; k < NKIND; k++) {
			struct reps rc[NICOL] = {}, rw[NICOL] = {};
			int j;

			for (j = 0; j < INV_REPS * MANY; j++) {
				uint8_t *a = buf_alloc(INV_LEN, 1), *pg;
				struct ibv_mr *mr;
				double t;
				int ret = 0;

				if (!a || !(mr = reg(a, INV_LEN, k)))
					return;
				pg = a + 3 * HUGE + 77 * PAGE;
				c = j % MANY;
				usleep(20 * 1000);
				t = now_us();
				if (c == MUNMAP)
					ret = munmap(pg, PAGE);
				else if (c == MPROTECT)
					ret = mprotect(pg, PAGE, PROT_READ) ||
					      mprotect(pg, PAGE, PROT_READ | PROT_WRITE);
				else
					ret = madvise(pg, PAGE, MADV_DONTNEED);
				rep(&rc[c], now_us() - t);
				if (ret)
					fail("munmap/mprotect/madvise: %s", strerror(errno));
				if (write_once(src, src_mr->lkey, pg + PAGE, mr->rkey, PAGE))
					bad_transfer(k, "WRITE after a one-page invalidation failed");
				else if (memcmp(pg + PAGE, src, PAGE) && k != NORMAL)
					bad_transfer(k, "WRITE after a one-page invalidation: wrong data");
				rep(&rw[c], now_us() - t);
				dereg(mr);
				munmap(a, INV_LEN);
			}
			for (c = 0; c < MANY; c++) {
				put_reps(&inv_call[k][c], &rc[c]);
				put_reps(&inv_write[k][c], &rw[c]);
			}
			{
				uint8_t *a = buf_alloc(NMR * STRIDE, 1), *pg;
				double t;

				if (!a)
					return;
				pg = a + 500 * STRIDE + PAGE;
				for (i = 0; i < NMR; i++) {
					mrs[i] = reg(a + i * STRIDE, MRLEN, k);
					if (!mrs[i]) {
						while (i--)
							dereg(mrs[i]);
						munmap(a, NMR * STRIDE);
						return;
					}
				}
				usleep(20 * 1000);
				t = now_us();
				if (munmap(pg, PAGE))
					fail("munmap: %s", strerror(errno));
				put(&inv_call[k][MANY], now_us() - t);
				if (write_once(src, src_mr->lkey, pg + PAGE, mrs[500]->rkey, PAGE))
					bad_transfer(k, "WRITE after a one-page munmap among 1000 MRs failed");
				put(&inv_write[k][MANY], now_us() - t);
				for (i = 0; i < NMR; i++)
					dereg(mrs[i]);
				munmap(a, NMR * STRIDE);
			}
		}
		progress("invalidation round %d done", r + 1);
	}
	dereg(src_mr);
	munmap(src, PAGE);
}

/* ----------------------------------------- deregistration, N MRs alive */

static void bench_live(void)
{
	static struct ibv_mr *mrs[LIVE_MAX];
	const size_t stride = 2 * PAGE;
	uint8_t *a = buf_alloc(LIVE_MAX * stride, 1);
	int r, k, s, i, j, live;

	if (!a)
		return;
	for (r = 0; r < rounds; r++) {
		for (k = 0; k < NKIND; k++) {
			live = 0;
			for (s = 0; s < NLIVE; s++) {
				double v[DEREG_SAMPLES];

				for (; live < live_n[s]; live++)
					if (!(mrs[live] = reg(a + live * stride, PAGE, k)))
						goto out;
				for (j = 0; j < DEREG_SAMPLES; j++) {
					/* The newest, the oldest and the middle ones in turn. */
					i = j % 3 == 0 ? live - 1 - j / 3 : j % 3 == 1 ? j / 3 : live / 2;
					if (i < 0 || i >= live)
						i = live - 1;
					double t = now_us();

					dereg(mrs[i]);
					v[j] = now_us() - t;
					if (!(mrs[i] = reg(a + i * stride, PAGE, k)))
						goto out;
				}
				put(&live_dereg[k][s], median(v, DEREG_SAMPLES));
			}
out:
			while (live--)
				if (mrs[live])
					dereg(mrs[live]);
		}
		progress("live-MR deregistration round %d done", r + 1);
	}
	munmap(a, LIVE_MAX * stride);
}

/* ------------------------------------------------------------------ table */

#define CW 21

static void fmt_num(char *b, size_t n, double v)
{
	if (isnan(v))
		snprintf(b, n, "-");
	else if (fabs(v) >= 100)
		snprintf(b, n, "%.0f", v);
	else if (fabs(v) >= 10)
		snprintf(b, n, "%.1f", v);
	else
		snprintf(b, n, "%.2f", v);
}

static void print_cell(const struct cell *c)
{
	char m[24], lo[24], hi[24], b[80];

	if (!c || !c->n) {
		printf(" %*s", CW, "-");
		return;
	}
	fmt_num(m, sizeof(m), cmed(c));
	fmt_num(lo, sizeof(lo), cmin(c));
	fmt_num(hi, sizeof(hi), cmax(c));
	snprintf(b, sizeof(b), "%s [%s..%s]", m, lo, hi);
	printf(" %*s", CW, b);
}

static void print_ratio(const struct cell *a, const struct cell *b)
{
	double x = a && b && a->n && b->n ? cmed(a) / cmed(b) : NAN;
	char s[32];

	/* A ratio of a negative or zero median (a difference lost in the noise) means nothing. */
	if (isnan(x) || isinf(x) || cmed(a) <= 0 || cmed(b) <= 0)
		snprintf(s, sizeof(s), "-");
	else
		snprintf(s, sizeof(s), "%.2fx", x);
	printf(" %*s", CW, s);
}

/* A band: title, column heads, and per kind a cell getter. */
typedef const struct cell *(*getter)(int kind, int col);

static void band(const char *title, const char *const *heads, int ncol, getter get,
		 const struct cell *(*ceiling)(int row, int col), int ratios)
{
	int k, c;

	printf("\n%s\n%-10s", title, "");
	for (c = 0; c < ncol; c++)
		printf(" %*s", CW, heads[c]);
	printf("\n");
	for (k = 0; k < NKIND; k++) {
		printf("%-10s", kind_name[k]);
		for (c = 0; c < ncol; c++)
			print_cell(get(k, c));
		printf("\n");
	}
	if (ratios) {
		printf("%-10s", "va/normal");
		for (c = 0; c < ncol; c++)
			print_ratio(get(VA, c), get(NORMAL, c));
		printf("\n%-10s", "va/odp");
		for (c = 0; c < ncol; c++)
			print_ratio(get(VA, c), get(ODP, c));
		printf("\n");
	}
	if (ceiling) {
		printf("%-10s", "memcpy");
		for (c = 0; c < ncol; c++)
			print_cell(ceiling(0, c));
		printf("\n%-10s", "u64 loop");
		for (c = 0; c < ncol; c++)
			print_cell(ceiling(1, c));
		printf("\n");
	}
}

static struct cell reg_pp[NKIND];
static const struct cell *g_reg(int k, int c) { return &reg_us[k][c]; }
static const struct cell *g_dereg(int k, int c) { return &dereg_us[k][c]; }
static const struct cell *g_first(int k, int c)
{
	return c == 0 ? &first_pp[k] : c == 1 ? &steady_pp[k] : c == 2 ? &pin_pp[k] : &reg_pp[k];
}
static const struct cell *g_sfirst(int k, int c)
{
	return c == 0 ? &sfirst_pp[k] : c == 1 ? &ssteady_pp[k] : c == 2 ? &spin_pp[k] : &reg_pp[k];
}
static const struct cell *g_wr(int k, int c) { return &wr_mbs[k][c]; }
static const struct cell *g_rd(int k, int c) { return &rd_mbs[k][c]; }
static const struct cell *g_tput_ceiling(int row, int c)
{
	return row ? &loop_mbs[c] : &memcpy_mbs[c];
}
static const struct cell *g_remap_c(int cpu1, int k, int c)
{
	return c == 0 ? &noremap_mbs[cpu1][k] : c == 1 ? &remap_mbs[cpu1][k] :
	       c == 2 ? &remap_rate[cpu1][k] : &remap_cost[cpu1][k];
}
static const struct cell *g_remap(int k, int c) { return g_remap_c(0, k, c); }
static const struct cell *g_remap1(int k, int c) { return g_remap_c(1, k, c); }
static const struct cell *g_remap_ceiling(int row, int c)
{
	return c ? NULL : row ? &remap_loop : &remap_memcpy;
}
static const struct cell *g_inv(int k, int c) { return &inv_call[k][c]; }
static const struct cell *g_invw(int k, int c) { return &inv_write[k][c]; }
static const struct cell *g_live(int k, int c) { return &live_dereg[k][c]; }
static const struct cell *g_cpu(int k, int c)
{
	return c == 0 ? &cpu_self[k] : c == 1 ? &cpu_incl[k] : c == 2 ? &cpu_copy[k] : &cpu_samples[k];
}

static void print_table(double wall_s)
{
	static const char *const hreg[] = { "4K", "1M", "64M", "1G" };
	static const char *const hfirst[] = { "after remap/page", "pinned/page",
					      "added/page", "reg/page (64M)" };
	static const char *const htput[] = { "4K", "64K", "1M", "4M" };
	static const char *const hremap[] = { "no remaps MB/s", "remapping MB/s", "remaps/s",
					      "us/remap" };
	static const char *const hinv[] = { "munmap", "mprotect", "dontneed", "munmap 1000 MRs" };
	static const char *const hlive[] = { "1 live", "1000 live", "4000 live" };
	static const char *const hcpu[] = { "vamr self %", "vamr incl. %", "data copy %",
					    "rxe samples" };
	char big[32], title[512];
	int k;

	for (k = 0; k < NKIND; k++) {
		int i;

		for (i = 0; i < reg_us[k][2].n; i++)
			put(&reg_pp[k], reg_us[k][2].v[i] / (64 * MIB / PAGE));
	}
	if (big_size != GIB)
		snprintf(big, sizeof(big), "%zuM", big_size / MIB);
	else
		snprintf(big, sizeof(big), "1G");
	printf("vamr_bench: %s, MTU %d, %d rounds, cells: median [min..max] over rounds, ratios of medians\n",
	       p->dev_name, 128 << p->mtu, rounds);
	printf("TCG guest: emulated time; compare rows within this run only. Buffers: anonymous, 2 MiB\n"
	       "aligned, MADV_NOHUGEPAGE, every page touched by the CPU (%s column: %s).\n"
	       "ODP on the stock rxe has copy bugs (fixed by patches/rxe 0008, 0009): wrong ODP data is marked CORRUPT, not a failure.\n",
	       big, big_size == GIB ? "1 GiB, all touched, not sparse" :
	       "the guest's free RAM did not fit 1 GiB; the largest power of two that did");
	{
		static const char *hr[4];

		hr[0] = "4K"; hr[1] = "1M"; hr[2] = "64M"; hr[3] = big;
		(void)hreg;
		band("[1] ibv_reg_mr, us (the median of " STR(REG_REPS) ", " STR(REG_REPS_64M) ", " STR(REG_REPS_BIG)
		     " calls per round at 4K and 1M, 64M, 1G)", hr, NREG, g_reg, NULL, 1);
		band("[2] ibv_dereg_mr, us", hr, NREG, g_dereg, NULL, 1);
		printf("%-10s 4K, 1M with the mean of the " STR(REG_REPS) " per round instead: reg %.2f, %.2f;"
		       " dereg %.2f, %.2f\n", "va/normal", cmed(&reg_mean_us[VA][0]) / cmed(&reg_mean_us[NORMAL][0]),
		       cmed(&reg_mean_us[VA][1]) / cmed(&reg_mean_us[NORMAL][1]),
		       cmed(&dereg_mean_us[VA][0]) / cmed(&dereg_mean_us[NORMAL][0]),
		       cmed(&dereg_mean_us[VA][1]) / cmed(&dereg_mean_us[NORMAL][1]));
	}
	snprintf(title, sizeof(title),
		 "[3a] first access after remap, us per page: munmap + mmap(MAP_FIXED) of %lu pages under the\n"
		 "     MR, CPU-touched, then one %lu KiB WRITE over them; 'pinned' = the same WRITE before\n"
		 "     the remap; added = what the first access adds per page; reg/page = [1] 64M / 16384",
		 REMAP_PAGES, REMAP_PAGES * PAGE / KIB);
	band(title, hfirst, 4, g_first, NULL, 1);
	snprintf(title, sizeof(title),
		 "[3b] the same with one %lu-byte WRITE per page (%d in flight) instead of one big WRITE:\n"
		 "     the per-page copy no longer buries what the first access adds",
		 FIRST_SMALL, DEPTH);
	band(title, hfirst, 4, g_sfirst, NULL, 1);
	printf("%-10s", "data");
	for (k = 0; k < NKIND; k++)
		printf(" %s=%s", kind_name[k], first_data[k] ? first_data[k] : "-");
	printf("   (normal: stale by design, it keeps the old pages)\n");
	printf("%-10s", "added/reg");
	for (k = 0; k < NKIND; k++) {
		double a = cmed(&pin_pp[k]) / cmed(&reg_pp[k]), b = cmed(&spin_pp[k]) / cmed(&reg_pp[k]);

		printf(" %s=", kind_name[k]);
		printf(a > 0 ? "%.1fx/" : "-/", a);
		printf(b > 0 ? "%.1fx" : "-", b);
	}
	printf("   ([3a]/[3b]: first-access cost per page / registration cost per page)\n");
	snprintf(title, sizeof(title),
		 "[4] RDMA WRITE throughput, MB/s, by message size (%d in flight, max(%lu MiB, 4 messages) per\n"
		 "    point, data checked); ceiling: the guest CPU copying the same bytes in the same pieces\n"
		 "    with glibc's memcpy and with a plain 8-byte loop",
		 DEPTH, STREAM_MIN / MIB);
	band(title, htput, NTPUT, g_wr, g_tput_ceiling, 1);
	snprintf(title, sizeof(title),
		 "[5] RDMA READ throughput, MB/s, by message size (as [4])");
	band(title, htput, NTPUT, g_rd, g_tput_ceiling, 1);
	printf("%-10s", "errors");
	for (k = 0; k < NKIND; k++)
		printf(" %s: %ld/%ld err, %ld/%ld CORRUPT", kind_name[k], wr_err[k], rd_err[k],
		       wr_corrupt[k], rd_corrupt[k]);
	printf("   (WRITE/READ)\n");
	snprintf(title, sizeof(title),
		 "[6] %lu KiB WRITEs streaming into a 16 MiB MR, %.1f s without and %.1f s with a thread\n"
		 "    remapping %lu KiB of it (mmap MAP_FIXED, untouched) every %d us, in %d alternating\n"
		 "    slices each; remaps/s as achieved",
		 REMAP_MSG / KIB, REMAP_SECONDS, REMAP_SECONDS, REMAP_CHUNK / KIB, REMAP_PERIOD_US,
		 REMAP_SLICES);
	band(title, hremap, 3, g_remap, g_remap_ceiling, 1);
	printf("%-10s", "remapping/");
	for (k = 0; k < NKIND; k++)
		printf(" %s=%.2f", kind_name[k], cmed(&remap_mbs[0][k]) / cmed(&noremap_mbs[0][k]));
	printf("   (no remaps)\n");
	band("[6b] the same with the benchmark, its remap thread and the unbound workqueues (rxe's\n"
	     "     responder) on one CPU: the stream's time is all the CPU's work, where it runs is fixed;\n"
	     "     us/remap: the stream's time beyond its time without remaps, per remap",
	     hremap, 4, g_remap1, NULL, 1);
	if (one_cpu_note)
		printf("%-10s %s\n", "", one_cpu_note);
	printf("%-10s", "remapping/");
	for (k = 0; k < NKIND; k++)
		printf(" %s=%.2f", kind_name[k], cmed(&remap_mbs[1][k]) / cmed(&noremap_mbs[1][k]));
	printf("   (no remaps; error completions under remaps in [6] and [6b]:");
	for (k = 0; k < NKIND; k++)
		printf(" %s %ld", kind_name[k], remap_err[k]);
	printf(")\n");
	if (va_counters_ok && va_remaps > 0)
		printf("va/remap   %.1f pages pinned on demand, %.1f unpinned, %.2f pin rounds lost to a race"
		       "   (vamr's counters; a remap replaces %lu pages)\n",
		       va_repinned / va_remaps, va_unpinned / va_remaps, va_lost / va_remaps,
		       REMAP_CHUNK / 4096);
	else if (!va_counters_ok)
		printf("va/remap   - (vamr's counters unavailable)\n");
	band("[7] one-page invalidation, us of the call alone: munmap / mprotect(RO and back) /\n"
	     "    MADV_DONTNEED of one page in a 16 MiB MR; munmap of one page among 1000 MRs of 16 KiB",
	     hinv, NICOL, g_inv, NULL, 1);
	band("[8] the same, us of the call + one 4 KiB WRITE next to the page (what the MR redoes)",
	     hinv, NICOL, g_invw, NULL, 1);
	snprintf(title, sizeof(title),
		 "[9] ibv_dereg_mr of one 4 KiB MR, us, with N MRs of the same kind live (median of %d per round)",
		 DEREG_SAMPLES);
	band(title, hlive, NLIVE, g_live, NULL, 1);
	snprintf(title, sizeof(title),
		 "[10] rxe CPU in a %lu KiB WRITE stream at MTU %d (perf record -a -g -e cpu-clock, %.0f s):\n"
		 "     %% of the samples with an rdma_rxe frame whose leaf is in vamr.ko (self), that have a\n"
		 "     vamr.ko frame but a leaf other than memcpy (incl.), whose leaf is memcpy (data copy)",
		 PERF_MSG / KIB, 128 << p->mtu, PERF_SECONDS);
	if (perf_note)
		printf("\n%s\n     not measured: %s\n", title, perf_note);
	else
		band(title, hcpu, 4, g_cpu, NULL, 0);
	printf("\nvamr_bench: %.0f s; %d failure(s); %ld ODP transfer problem(s) (known rxe ODP bugs)\n",
	       wall_s, failures, odp_bad);
}

int main(int argc, char **argv)
{
	double t0 = now_us(), t;
	const char *phases;
	int ret;

	if (argc > 1)
		rounds = atoi(argv[1]);
	else if (getenv("VAMR_BENCH_ROUNDS"))
		rounds = atoi(getenv("VAMR_BENCH_ROUNDS"));
	/* perf keeps its caches under $HOME; the guest's init has none. */
	setenv("HOME", "/tmp", 0);
	if (rounds < 1 || rounds > MAX_ROUNDS)
		rounds = 5;
	setvbuf(stdout, NULL, _IOLBF, 0);
	ret = rdma_pair_open(p, NULL);
	if (ret) {
		fprintf(stderr, "vamr_bench: cannot open the RDMA device: %s\n", strerror(-ret));
		return 1;
	}
	p->mtu = IBV_MTU_4096;
	if (rdma_pair_recover(p)) {
		fprintf(stderr, "vamr_bench: cannot reconnect the QPs at MTU 4096\n");
		return 1;
	}
	progress("%d rounds; MemAvailable %zu MiB", rounds, mem_available() / MIB);
	/* VAMR_BENCH_PHASES=reg,first,tput,remap,cpu,inval,live: only those (development). */
	phases = getenv("VAMR_BENCH_PHASES");
#define WANT(name) (!phases || strstr(phases, name))
#define PHASE(name, fn)                                                             \
	do {                                                                        \
		if (!WANT(name))                                                    \
			break;                                                      \
		t = now_us();                                                       \
		fn();                                                               \
		progress(#fn ": %.0f s", (now_us() - t) / 1e6);                     \
	} while (0)
	PHASE("reg", bench_reg);
	PHASE("first", bench_first_access);
	if ((WANT("tput") || WANT("remap") || WANT("cpu")) && stream_setup() == 0) {
		PHASE("tput", bench_throughput);
		PHASE("remap", bench_remaps);
		PHASE("cpu", bench_cpu_share);
	}
	PHASE("inval", bench_inval);
	PHASE("live", bench_live);
	print_table((now_us() - t0) / 1e6);
	return failures ? 1 : 0;
}
