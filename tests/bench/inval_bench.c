// SPDX-License-Identifier: GPL-2.0
/*
 * inval_bench: what an invalidation that changes (almost) nothing costs under
 * each kind of MR (normal, ODP, VA) on the soft-RoCE device of the guest.
 * Prints one table with a VA/normal ratio row; never asserts.
 *
 * Columns (medians of ROUNDS runs, microseconds of the system call alone,
 * then of the call plus one 4 KiB RDMA WRITE next to the changed page, which
 * pays for whatever the MR must redo on the data path):
 *   munmap     munmap() of one page inside a 16 MiB MR (splits the VMA: the
 *              kernel invalidates the whole 2 MiB block)
 *   mprotect   mprotect(PROT_READ) of one page and back
 *   dontneed   madvise(MADV_DONTNEED) of one page
 *   1000 MRs   munmap() of one page of a mapping covered by 1000 MRs of
 *              16 KiB at a 32 KiB stride
 *
 * usage: inval_bench [rounds]     (default 5)
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../../include/uapi/misc/vamr.h"
#include "../selftests/mm_util.h"
#include "../selftests/pattern.h"
#include "../selftests/rdma_pair.h"
#include "bench_util.h"

#define PAGE 4096ul
#define HUGE (2ul << 20)
#define LEN (16ul << 20)
#define ACC (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#define MAX_ROUNDS 32
#define NMR 1000
#define STRIDE (32ul << 10)
#define MRLEN (16ul << 10)

enum col { MUNMAP, MPROTECT, DONTNEED, MANY, NCOLS };
static const char *const col_name[NCOLS] = { "munmap", "mprotect", "dontneed", "1000 MRs" };

struct row {
	const char *name;
	unsigned int access;
	double call[NCOLS], with_write[NCOLS];
	int failed;
};

/* len bytes of touched anonymous memory aligned to 2 MiB, without THP. */
static uint8_t *map_aligned(size_t len)
{
	uint8_t *a = map_aligned_2m(len);

	if (a)
		memset(a, 1, len);
	return a;
}

/* One 4 KiB WRITE into the MR at `to`: the data path after the change. */
static int write_near(struct rdma_pair *p, uint8_t *src, struct ibv_mr *src_mr,
		      struct ibv_mr *mr, uint8_t *to)
{
	int st = rdma_pair_write_sync(p, 0, src, src_mr->lkey, (uintptr_t)to, mr->rkey, PAGE, 0);

	if (st)
		rdma_pair_recover(p);
	return st;
}

static void measure(struct rdma_pair *p, struct row *r, int rounds, uint8_t *src,
		    struct ibv_mr *src_mr)
{
	double call[NCOLS][MAX_ROUNDS], ww[NCOLS][MAX_ROUNDS];
	static struct ibv_mr *mrs[NMR];
	int i, c, k;

	for (i = 0; i < rounds; i++) {
		for (c = 0; c < MANY; c++) {
			uint8_t *a = map_aligned(LEN), *pg = a + 3 * HUGE + 77 * PAGE;
			struct ibv_mr *mr;
			double t;
			int ret = 0;

			if (!a || !(mr = ibv_reg_mr(p->pd, a, LEN, ACC | r->access))) {
				r->failed = 1;
				return;
			}
			usleep(20 * 1000);
			t = now_us();
			if (c == MUNMAP)
				ret = munmap(pg, PAGE);
			else if (c == MPROTECT)
				ret = mprotect(pg, PAGE, PROT_READ) || mprotect(pg, PAGE, PROT_READ | PROT_WRITE);
			else
				ret = madvise(pg, PAGE, MADV_DONTNEED);
			call[c][i] = now_us() - t;
			if (ret)
				r->failed = 1;
			if (write_near(p, src, src_mr, mr, pg + PAGE))
				r->failed = 1;
			ww[c][i] = now_us() - t;
			ibv_dereg_mr(mr);
			munmap(a, LEN);
		}
		{
			uint8_t *a = map_aligned(NMR * STRIDE), *pg = a + 500 * STRIDE + PAGE;
			double t;

			if (!a) {
				r->failed = 1;
				return;
			}
			for (k = 0; k < NMR; k++) {
				mrs[k] = ibv_reg_mr(p->pd, a + k * STRIDE, MRLEN, ACC | r->access);
				if (!mrs[k]) {
					r->failed = 1;
					while (k--)
						ibv_dereg_mr(mrs[k]);
					munmap(a, NMR * STRIDE);
					return;
				}
			}
			usleep(20 * 1000);
			t = now_us();
			if (munmap(pg, PAGE))
				r->failed = 1;
			call[MANY][i] = now_us() - t;
			if (write_near(p, src, src_mr, mrs[500], pg + PAGE))
				r->failed = 1;
			ww[MANY][i] = now_us() - t;
			for (k = 0; k < NMR; k++)
				ibv_dereg_mr(mrs[k]);
			munmap(a, NMR * STRIDE);
		}
	}
	for (c = 0; c < NCOLS; c++) {
		r->call[c] = median(call[c], rounds);
		r->with_write[c] = median(ww[c], rounds);
	}
}

int main(int argc, char **argv)
{
	struct row rows[] = {
		{ .name = "normal", .access = 0 },
		{ .name = "odp", .access = IBV_ACCESS_ON_DEMAND },
		{ .name = "va", .access = VAMR_ACCESS_VA },
	};
	int rounds = argc > 1 ? atoi(argv[1]) : 5, i, c, ret;
	struct ibv_mr *src_mr;
	struct rdma_pair p;
	uint8_t *src;

	if (rounds < 1 || rounds > MAX_ROUNDS)
		rounds = 5;
	ret = rdma_pair_open(&p, NULL);
	if (ret) {
		fprintf(stderr, "inval_bench: cannot open the RDMA device: %s\n", strerror(-ret));
		return 1;
	}
	src = map_anon(PAGE);
	if (!src || rdma_pair_reg_mr(&p, src, PAGE, IBV_ACCESS_LOCAL_WRITE, &src_mr))
		return 1;
	pattern_fill(src, PAGE, 1, 0);
	for (i = 0; i < 3; i++)
		measure(&p, &rows[i], rounds, src, src_mr);

	printf("inval_bench: %s, medians of %d rounds, microseconds: the call / the call + a 4 KiB WRITE\n",
	       p.dev_name, rounds);
	printf("%-9s", "MR");
	for (c = 0; c < NCOLS; c++)
		printf(" %19s", col_name[c]);
	printf("\n");
	for (i = 0; i < 3; i++) {
		struct row *r = &rows[i];

		if (r->failed) {
			printf("%-9s (failed)\n", r->name);
			continue;
		}
		printf("%-9s", r->name);
		for (c = 0; c < NCOLS; c++)
			printf(" %9.0f /%8.0f", r->call[c], r->with_write[c]);
		printf("\n");
	}
	if (!rows[0].failed && !rows[2].failed) {
		printf("%-9s", "va/normal");
		for (c = 0; c < NCOLS; c++)
			printf(" %8.2fx /%7.2fx", rows[2].call[c] / rows[0].call[c],
			       rows[2].with_write[c] / rows[0].with_write[c]);
		printf("\n");
	}
	ibv_dereg_mr(src_mr);
	rdma_pair_close(&p);
	return 0;
}
