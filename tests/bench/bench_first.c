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

/*
 * [3a] one WRITE over REMAP_PAGES remapped pages, [3b] one FIRST_SMALL-byte
 * WRITE per remapped page (DEPTH in flight): each timed right after the remap
 * and on the same pages while they are mapped in the MR ("pinned").
 */
/*
 * vamr's own account of its pin rounds (debugfs vamr/access_pins), since
 * vamr.ko was loaded: the on-demand rounds of accesses (pages pinned, wall
 * and CPU nanoseconds) and registrations' rounds (the same three).
 */
struct kpins {
	double pages, ns, cpu_ns, reg_pages, reg_ns, reg_cpu_ns, rounds;
};

/* 0, or -1 when the file cannot be read. */
static int access_pins(struct kpins *p)
{
	FILE *f = fopen("/sys/kernel/debug/vamr/access_pins", "r");
	unsigned long long v[7];
	int n;

	if (!f)
		return -1;
	n = fscanf(f, "pages %llu ns %llu cpu_ns %llu reg_pages %llu reg_ns %llu reg_cpu_ns %llu "
		   "rounds %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6]);
	fclose(f);
	if (n != 7)
		return -1;
	*p = (struct kpins){ v[0], v[1], v[2], v[3], v[4], v[5], v[6] };
	return 0;
}

/*
 * [3b] VA, by vamr's clocks: us per page pinned by the on-demand rounds
 * (wall, CPU) and by the registrations of the same buffers (wall, CPU).
 */
struct cell kpin_pp, kpin_cpu_pp, kreg_pp, kreg_cpu_pp;
double kpin_pages, kpin_rounds;
int kpin_ok = 1;
/* The same in the owner's context, through /dev/vamr: CPU us per page. */
struct cell opin_cpu_pp, oreg_cpu_pp;
/*
 * The rxe line again with rxe's work items on the benchmark's CPU (see
 * same_cpu_first_access()): CPU us per page, on demand and at registration.
 */
struct cell spin_cpu_pp, sreg_cpu_pp;
int same_cpu_ok = 1;

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
 * [3b]'s in-kernel VA line once more, with the unbound workqueues (rxe's
 * rxe_wq among them) confined to the CPU the benchmark runs on, and the
 * benchmark pinned there: the responder's on-demand round then runs on the CPU
 * where the process has just faulted the new pages in, as registration does,
 * so the ratio is vamr's path alone, without the cost of touching those
 * pages' page tables and struct pages from another CPU (Documentation/
 * bench-results.rst, [3b]). The previous cpumask and affinity are restored.
 * The bytes are checked as in [3b]. 0, or -1 (not measured: no root, no such
 * file, or a failed transfer).
 */
static int same_cpu_first_access(uint8_t *src, uint32_t src_lkey)
{
	const size_t len = REMAP_PAGES * PAGE;
	struct one_cpu o;
	int j, ret = -1;
	struct kpins acc = {};

	if (one_cpu_begin(&o))
		goto out;
	for (j = -1; j < FIRST_REPS; j++) {
		uint8_t *a = buf_alloc(len, 1);
		struct kpins p0, p1, p2, p3;
		struct ibv_mr *mr;
		long e = 0, got;

		if (!a)
			goto out;
		if (access_pins(&p0) || !(mr = reg(a, len, VA))) {
			munmap(a, len);
			goto out;
		}
		got = access_pins(&p1) || write_once(src, src_lkey, a, mr->rkey, len) ? -1 : 0;
		if (!got && !remap_touched(a, len) && !access_pins(&p2)) {
			got = stream_strided(IBV_WR_RDMA_WRITE, src, src_lkey, a, mr->rkey, len,
					     FIRST_SMALL, PAGE, REMAP_PAGES * FIRST_SMALL, 0, &e);
			if (got < 0 || e || access_pins(&p3) || !landed(a, src, len, 1))
				got = -1;
		} else {
			got = -1;
		}
		dereg(mr);
		munmap(a, len);
		if (got < 0) {
			fail("same-CPU [3b]: per-page WRITEs after the remap failed or landed wrong");
			goto out;
		}
		if (j < 0)
			continue; /* warm-up, as in [3b] */
		acc.reg_cpu_ns += p1.reg_cpu_ns - p0.reg_cpu_ns;
		acc.reg_pages += p1.reg_pages - p0.reg_pages;
		acc.cpu_ns += p3.cpu_ns - p2.cpu_ns;
		acc.pages += p3.pages - p2.pages;
	}
	if (acc.pages > 0 && acc.reg_pages > 0) {
		put(&spin_cpu_pp, acc.cpu_ns / 1e3 / acc.pages);
		put(&sreg_cpu_pp, acc.reg_cpu_ns / 1e3 / acc.reg_pages);
		ret = 0;
	}
out:
	one_cpu_end(&o, "same-CPU [3b]");
	return ret;
}

/*
 * One round of the owner-context variant of [3b]: register REMAP_PAGES
 * CPU-written pages through /dev/vamr, replace them (munmap + mmap MAP_FIXED,
 * written by the CPU), then write one byte per page through VAMR_IOC_ACCESS,
 * FIRST_REPS times; vamr's CPU clock per page pinned, on demand and at
 * registration. The bytes are checked. 0, or -1 when /dev/vamr or the
 * debugfs file is missing.
 */
static int owner_first_access(void)
{
	const size_t len = REMAP_PAGES * PAGE;
	double reg_ns = 0, reg_pages = 0, od_ns = 0, od_pages = 0;
	int fd = vamr_open(), j;

	if (fd < 0)
		return -1;
	for (j = 0; j < FIRST_REPS; j++) {
		uint8_t *a = buf_alloc(len, 1), b = (uint8_t)(0x30 + j);
		struct kpins p0, p1, p2;
		uint32_t h;
		size_t i;

		if (!a || access_pins(&p0) || vamr_register(fd, a, len, VAMR_ACCESS_READ |
							     VAMR_ACCESS_WRITE, 0, &h)) {
			close(fd);
			return -1;
		}
		if (access_pins(&p1) || remap_touched(a, len))
			break;
		for (i = 0; i < REMAP_PAGES; i++)
			if (vamr_write(fd, h, a + i * PAGE, &b, 1) || a[i * PAGE] != b) {
				fail("owner [3b]: byte %zu not where the CPU looks", i);
				break;
			}
		if (access_pins(&p2))
			break;
		reg_ns += p1.reg_cpu_ns - p0.reg_cpu_ns;
		reg_pages += p1.reg_pages - p0.reg_pages;
		od_ns += p2.cpu_ns - p1.cpu_ns;
		od_pages += p2.pages - p1.pages;
		vamr_unregister(fd, h);
		munmap(a, len);
	}
	close(fd);
	if (reg_pages <= 0 || od_pages <= 0)
		return -1;
	put(&opin_cpu_pp, od_ns / 1e3 / od_pages);
	put(&oreg_cpu_pp, reg_ns / 1e3 / reg_pages);
	return 0;
}

/*
 * Turns vamr's pin-round clocks (debugfs vamr/pin_clocks) on or off: off at
 * module load, so that the other phases measure registrations without them;
 * [3] reads them. 0, or -1 when the file cannot be written.
 */
static int pin_clocks(int on)
{
	FILE *f = fopen("/sys/kernel/debug/vamr/pin_clocks", "w");
	int bad;

	if (!f)
		return -1;
	bad = fputs(on ? "1" : "0", f) < 0;
	return fclose(f) || bad ? -1 : 0;
}

static void bench_first_access_rounds(void);

/* [3] with vamr's pin-round clocks on, and only there. */
void bench_first_access(void)
{
	if (pin_clocks(1))
		kpin_ok = 0;
	bench_first_access_rounds();
	pin_clocks(0);
}

static void bench_first_access_rounds(void)
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
		struct kpins acc = {};
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
			{
				struct kpins p0, p1;
				int counted = k == VA && j >= 0 && !access_pins(&p0);

				mr = reg(a, len, k);
				if (counted && mr && !access_pins(&p1)) {
					acc.reg_pages += p1.reg_pages - p0.reg_pages;
					acc.reg_ns += p1.reg_ns - p0.reg_ns;
					acc.reg_cpu_ns += p1.reg_cpu_ns - p0.reg_cpu_ns;
				} else if (k == VA && j >= 0) {
					kpin_ok = 0;
				}
			}
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
			{
				struct kpins p0, p1;
				int counted = k == VA && j >= 0 && !access_pins(&p0);

				t = now_us();
				got = stream_strided(IBV_WR_RDMA_WRITE, src, src_mr->lkey, a, mr->rkey,
						     len, FIRST_SMALL, PAGE, REMAP_PAGES * FIRST_SMALL,
						     0, &e);
				sfirst = now_us() - t;
				if (counted && !access_pins(&p1)) {
					acc.pages += p1.pages - p0.pages;
					acc.rounds += p1.rounds - p0.rounds;
					acc.ns += p1.ns - p0.ns;
					acc.cpu_ns += p1.cpu_ns - p0.cpu_ns;
				} else if (k == VA && j >= 0) {
					kpin_ok = 0;
				}
			}
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
		if (acc.pages > 0 && acc.reg_pages > 0) {
			put(&kpin_pp, acc.ns / 1e3 / acc.pages);
			put(&kpin_cpu_pp, acc.cpu_ns / 1e3 / acc.pages);
			put(&kreg_pp, acc.reg_ns / 1e3 / acc.reg_pages);
			put(&kreg_cpu_pp, acc.reg_cpu_ns / 1e3 / acc.reg_pages);
			kpin_pages += acc.pages / FIRST_REPS;
			kpin_rounds += acc.rounds / FIRST_REPS;
		}
		if (owner_first_access())
			kpin_ok = 0;
		if (same_cpu_first_access(src, src_mr->lkey))
			same_cpu_ok = 0;
		progress("first access round %d done", r + 1);
	}
	dereg(src_mr);
	munmap(src, len);
}
