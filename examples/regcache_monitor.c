// SPDX-License-Identifier: GPL-2.0
/*
 * regcache_monitor: the loop of regcache.c (malloc 1 MiB above the mmap
 * threshold, cached registration, peer RDMA WRITE, check, free) with
 * *normal* MRs on any device, kept correct by vamr's monitor mode
 * (examples/mcache.h): each cached MR has a watch, and the cache compares the
 * watch's generation counter, one load from a read-only page, before reusing
 * the MR. free() unmaps the buffer, the next malloc() maps fresh pages at the
 * same address: the counter moved, so the cache registers again instead of
 * handing out an MR of the old pages. Side by side, the same cache with the
 * check off (a cache without a monitor) goes stale.
 *
 * usage: regcache_monitor [iterations]     (default 8)
 * Exit status: 0 when every transfer through the checking cache was correct.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

#include "mcache.h"
#include "../tests/selftests/pattern.h"
#include "../tests/selftests/rdma_pair.h"

#define BUF_LEN (1u << 20)
#define MAX_ITER 64
#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

/* One run; the number of correct transfers, or -1 on a setup failure. */
static int run(struct rdma_pair *p, int check, int iterations, char *verdict)
{
	struct ibv_mr *src_mr, *mr;
	uint8_t *src = malloc(BUF_LEN), *buf;
	struct mcache c;
	int i, ok = 0, ret;

	if (!src || rdma_pair_reg_mr(p, src, BUF_LEN, IBV_ACCESS_LOCAL_WRITE, &src_mr))
		return -1;
	ret = mcache_open(&c, p->pd, check);
	if (ret) {
		fprintf(stderr, "regcache_monitor: monitor mode unavailable: %s\n", strerror(-ret));
		return -1;
	}
	for (i = 0; i < iterations; i++) {
		uint64_t seed = 0x3a0000u + i;
		unsigned long hits = c.hits, rereg = c.reregistrations;

		buf = malloc(BUF_LEN);
		if (!buf)
			return -1;
		memset(buf, 0, BUF_LEN);
		mr = mcache_get(&c, buf, BUF_LEN, ACCESS);
		if (!mr) {
			fprintf(stderr, "regcache_monitor: registration failed: %s\n", strerror(errno));
			return -1;
		}
		pattern_fill(src, BUF_LEN, seed, 0);
		ret = rdma_pair_write_sync(p, 1, src, src_mr->lkey, (uintptr_t)buf, mr->rkey,
					   BUF_LEN, 0);
		verdict[i] = ret == IBV_WC_SUCCESS && pattern_check(buf, BUF_LEN, seed, 0) ==
			     PATTERN_OK ? (c.reregistrations > rereg ? 'R' : c.hits > hits ? 'H' : 'M')
					: 'S';
		ok += verdict[i] != 'S';
		free(buf);
	}
	mcache_close(&c);
	ibv_dereg_mr(src_mr);
	free(src);
	return ok;
}

static const char *say(char v)
{
	switch (v) {
	case 'M': return "miss, registered: correct";
	case 'H': return "hit: correct";
	case 'R': return "generation moved, re-registered: correct";
	default:  return "STALE: went to the old pages";
	}
}

int main(int argc, char **argv)
{
	int iterations = argc > 1 ? atoi(argv[1]) : 8;
	char checked[MAX_ITER], blind[MAX_ITER];
	int i, ok_c, ok_b, ret;
	struct rdma_pair p;

	if (iterations < 1 || iterations > MAX_ITER)
		iterations = 8;
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);
	ret = rdma_pair_open(&p, NULL);
	if (ret) {
		fprintf(stderr, "regcache_monitor: cannot open the RDMA device: %s\n",
			strerror(-ret));
		return 1;
	}
	ok_c = run(&p, 1, iterations, checked);
	ok_b = run(&p, 0, iterations, blind);
	rdma_pair_close(&p);
	if (ok_c < 0 || ok_b < 0)
		return 1;
	printf("regcache_monitor: %d x (malloc 1 MiB, cached normal MR, peer RDMA WRITE, check, free)\n",
	       iterations);
	printf("iter  cache with monitor mode                    cache without\n");
	for (i = 0; i < iterations; i++)
		printf("%4d  %-41s  %s\n", i, say(checked[i]), say(blind[i]));
	printf("with monitor mode: %d of %d correct; without: %d of %d correct\n", ok_c,
	       iterations, ok_b, iterations);
	return ok_c == iterations ? 0 : 1;
}
