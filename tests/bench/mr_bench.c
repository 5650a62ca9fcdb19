// SPDX-License-Identifier: GPL-2.0
/*
 * mr_bench: what VA semantics cost and save, by MR kind (normal, ODP, VA),
 * on the soft-RoCE device of the test guest. Prints one table; never asserts.
 *
 * Columns (medians of ROUNDS runs; microseconds unless said otherwise):
 *   reg 1M / reg 64M  ibv_reg_mr() of 1 MiB / 64 MiB of touched memory
 *   dereg 64M         ibv_dereg_mr() of it
 *   write 1M          one 1 MiB RDMA WRITE into the MR, posted to completion
 *   MB/s              1 MiB / that time
 *   remap+write       munmap + mmap(MAP_FIXED) of 1 MiB under the MR, CPU
 *                     touch, then the same write (the page pinning it needs
 *                     happens on the data path for ODP and VA)
 *   right             whether that write landed where the CPU looks (y/n)
 *
 * usage: mr_bench [rounds]     (default 5)
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "../../include/uapi/misc/vamr.h"
#include "../selftests/mm_util.h"
#include "../selftests/pattern.h"
#include "../selftests/rdma_pair.h"
#include "bench_util.h"

#define MIB (1ul << 20)
#define ACC (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#define MAX_ROUNDS 32

struct row {
	const char *name;
	unsigned int access;
	double reg1, reg64, dereg64, write1, remap_write;
	int right;
	int failed;
};

static void measure(struct rdma_pair *p, struct row *r, int rounds, uint8_t *src,
		    struct ibv_mr *src_mr)
{
	double reg1[MAX_ROUNDS], reg64[MAX_ROUNDS], dereg64[MAX_ROUNDS];
	double w1[MAX_ROUNDS], rw[MAX_ROUNDS];
	int i;

	r->right = 1;
	for (i = 0; i < rounds; i++) {
		uint8_t *big = map_anon(64 * MIB), *a = map_anon(MIB);
		struct ibv_mr *mr;
		double t;

		if (!big || !a) {
			r->failed = 1;
			return;
		}
		memset(big, 1, 64 * MIB);
		memset(a, 1, MIB);

		t = now_us();
		mr = ibv_reg_mr(p->pd, a, MIB, ACC | r->access);
		reg1[i] = now_us() - t;
		if (!mr) {
			r->failed = 1;
			return;
		}
		pattern_fill(src, MIB, i, 0);
		t = now_us();
		if (rdma_pair_write_sync(p, 0, src, src_mr->lkey, (uintptr_t)a, mr->rkey, MIB, 0))
			r->failed = 1;
		w1[i] = now_us() - t;

		munmap(a, MIB);
		t = now_us();
		if (remap_fixed(a, MIB)) {
			r->failed = 1;
			return;
		}
		memset(a, 0, MIB);
		pattern_fill(src, MIB, 100 + i, 0);
		if (rdma_pair_write_sync(p, 0, src, src_mr->lkey, (uintptr_t)a, mr->rkey, MIB, 0))
			rdma_pair_recover(p);
		rw[i] = now_us() - t;
		if (pattern_check(a, MIB, 100 + i, 0) != (size_t)-1)
			r->right = 0;
		ibv_dereg_mr(mr);

		t = now_us();
		mr = ibv_reg_mr(p->pd, big, 64 * MIB, ACC | r->access);
		reg64[i] = now_us() - t;
		if (!mr) {
			r->failed = 1;
			return;
		}
		t = now_us();
		ibv_dereg_mr(mr);
		dereg64[i] = now_us() - t;
		munmap(big, 64 * MIB);
		munmap(a, MIB);
	}
	r->reg1 = median(reg1, rounds);
	r->reg64 = median(reg64, rounds);
	r->dereg64 = median(dereg64, rounds);
	r->write1 = median(w1, rounds);
	r->remap_write = median(rw, rounds);
}

int main(int argc, char **argv)
{
	struct row rows[] = {
		{ .name = "normal", .access = 0 },
		{ .name = "odp", .access = IBV_ACCESS_ON_DEMAND },
		{ .name = "va", .access = VAMR_ACCESS_VA },
	};
	int rounds = argc > 1 ? atoi(argv[1]) : 5, i, ret;
	struct ibv_mr *src_mr;
	struct rdma_pair p;
	uint8_t *src;

	if (rounds < 1 || rounds > MAX_ROUNDS)
		rounds = 5;
	ret = rdma_pair_open(&p, NULL);
	if (ret) {
		fprintf(stderr, "mr_bench: cannot open the RDMA device: %s\n", strerror(-ret));
		return 1;
	}
	src = map_anon(MIB);
	if (!src || rdma_pair_reg_mr(&p, src, MIB, IBV_ACCESS_LOCAL_WRITE, &src_mr))
		return 1;
	for (i = 0; i < 3; i++)
		measure(&p, &rows[i], rounds, src, src_mr);

	printf("mr_bench: %s, medians of %d rounds, microseconds\n", p.dev_name, rounds);
	printf("%-7s %9s %9s %10s %9s %7s %12s %6s\n", "MR", "reg 1M", "reg 64M", "dereg 64M",
	       "write 1M", "MB/s", "remap+write", "right");
	for (i = 0; i < 3; i++) {
		struct row *r = &rows[i];

		if (r->failed) {
			printf("%-7s (failed)\n", r->name);
			continue;
		}
		printf("%-7s %9.0f %9.0f %10.0f %9.0f %7.0f %12.0f %6s\n", r->name, r->reg1,
		       r->reg64, r->dereg64, r->write1, MIB / r->write1, r->remap_write,
		       r->right ? "y" : "n");
	}
	ibv_dereg_mr(src_mr);
	rdma_pair_close(&p);
	return 0;
}
