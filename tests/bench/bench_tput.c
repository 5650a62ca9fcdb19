// SPDX-License-Identifier: GPL-2.0
/*
 * vamr_bench: RDMA WRITE and READ throughput by message size, and
 * throughput while another thread remaps the MR's pages periodically.
 */
#define _GNU_SOURCE
#include "bench.h"

/* ------------------------------------------------------------ throughput */

struct ibv_mr *lmr, *rmr, *tmr[NKIND];

int stream_setup(void)
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

void bench_throughput(void)
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
double va_remaps;
uint64_t va_repinned, va_unpinned, va_lost;
int va_counters_ok = 1;

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

void bench_remaps(void)
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
