// SPDX-License-Identifier: GPL-2.0
/*
 * vamr_bench: the first RDMA access after a remap, per page, by MR kind
 * (also with the responder on the owner's CPU), and the module's own pin
 * clocks where it has them.
 */
#define _GNU_SOURCE
#include "bench.h"

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

/*
 * Confines the calling thread (and the threads it creates from now on) and the
 * unbound workqueues (rdma_rxe's rxe_wq, vamr's own) to the CPU it runs on.
 * 0, or -1 (needs root; whatever was changed is undone by one_cpu_end()).
 */
int one_cpu_begin(struct one_cpu *o)
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
void one_cpu_end(struct one_cpu *o, const char *what)
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
void bench_first_access(void)
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
