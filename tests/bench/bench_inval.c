// SPDX-License-Identifier: GPL-2.0
/*
 * vamr_bench: the cost of invalidations (munmap, mprotect, MADV_DONTNEED,
 * many MRs) and of deregistration with N MRs alive.
 */
#define _GNU_SOURCE
#include "bench.h"

/* ---------------------------------------------------------- invalidations */

void bench_inval(void)
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

void bench_live(void)
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
