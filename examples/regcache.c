// SPDX-License-Identifier: GPL-2.0
/*
 * regcache: the registration cache of an MPI library, in a few lines, and
 * why it goes wrong with normal MRs.
 *
 * Registration is expensive, so middleware caches MRs keyed by address:
 * a buffer it has seen before reuses its MR. The loop below allocates a
 * buffer with malloc() above the mmap threshold (so free() unmaps it and
 * the next malloc() maps fresh memory, usually at the same address), looks
 * it up in the cache, registers it on a miss, lets the peer RDMA WRITE a
 * position-dependent pattern into it, checks what the CPU sees, and frees
 * it. With a normal MR every cache hit is stale: the MR still points at the
 * pages of the first buffer, the peer's data lands there, and the new
 * buffer never sees it.
 *
 * usage: regcache [iterations]     (default 8)
 * Prints one line per iteration and a summary; exits 0 when the run
 * behaved as expected for the MR kind (normal: stale hits are reported,
 * not an error).
 */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/selftests/pattern.h"
#include "../tests/selftests/rdma_pair.h"

#define BUF_LEN (1u << 20)	/* 1 MiB: above the mmap threshold */
#define CACHE_SLOTS 16

struct cache_entry {
	void *addr;
	size_t len;
	struct ibv_mr *mr;
};

static struct cache_entry cache[CACHE_SLOTS];

/* The cache lookup of a registration cache: by (address, length) only. */
static struct ibv_mr *cache_get(struct rdma_pair *p, void *addr, size_t len,
				unsigned int access, int *hit)
{
	int i, free_slot = -1;

	for (i = 0; i < CACHE_SLOTS; i++) {
		if (cache[i].mr && cache[i].addr == addr && cache[i].len == len) {
			*hit = 1;
			return cache[i].mr;
		}
		if (!cache[i].mr && free_slot < 0)
			free_slot = i;
	}
	*hit = 0;
	if (free_slot < 0)
		return NULL;
	if (rdma_pair_reg_mr(p, addr, len, access, &cache[free_slot].mr))
		return NULL;
	cache[free_slot].addr = addr;
	cache[free_slot].len = len;
	return cache[free_slot].mr;
}

int main(int argc, char **argv)
{
	unsigned int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			      IBV_ACCESS_REMOTE_READ;
	int iterations = argc > 1 ? atoi(argv[1]) : 8;
	int hits = 0, stale = 0, correct = 0, i, ret;
	struct ibv_mr *src_mr;
	struct rdma_pair p;
	uint8_t *src;

	/* Keep glibc from adapting the threshold after the first free(). */
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);

	ret = rdma_pair_open(&p, NULL);
	if (ret) {
		fprintf(stderr, "regcache: cannot open the RDMA device: %s\n", strerror(-ret));
		return 1;
	}
	src = malloc(BUF_LEN);
	if (!src || rdma_pair_reg_mr(&p, src, BUF_LEN, access, &src_mr)) {
		fprintf(stderr, "regcache: cannot register the peer's source buffer\n");
		return 1;
	}

	printf("regcache: normal MR, %d iterations of malloc(1 MiB) / cached reg_mr / peer RDMA WRITE / check / free\n",
	       iterations);
	for (i = 0; i < iterations; i++) {
		uint64_t seed = 0x5eed0000u + i;
		struct ibv_mr *mr;
		size_t bad;
		int hit;
		uint8_t *buf = malloc(BUF_LEN);

		if (!buf)
			return 1;
		memset(buf, 0, BUF_LEN);
		mr = cache_get(&p, buf, BUF_LEN, access, &hit);
		if (!mr) {
			fprintf(stderr, "regcache: registration failed\n");
			return 1;
		}
		hits += hit;
		pattern_fill(src, BUF_LEN, seed, 0);
		ret = rdma_pair_write_sync(&p, 1, src, src_mr->lkey, (uintptr_t)buf,
					   mr->rkey, BUF_LEN, 0);
		if (ret != IBV_WC_SUCCESS) {
			printf("  iter %d: buffer %p cache %s: RDMA WRITE failed: %s\n", i,
			       (void *)buf, hit ? "hit " : "miss",
			       ret < 0 ? strerror(-ret) : ibv_wc_status_str(ret));
			return 1;
		}
		bad = pattern_check(buf, BUF_LEN, seed, 0);
		if (bad == (size_t)-1)
			correct++;
		else
			stale++;
		printf("  iter %d: buffer %p cache %s: %s\n", i, (void *)buf,
		       hit ? "hit " : "miss",
		       bad == (size_t)-1 ? "peer data correct" :
		       "STALE: the peer's data went to freed pages");
		free(buf);
	}
	printf("regcache: normal MR: %d iterations, %d cache hits, %d correct, %d stale\n",
	       iterations, hits, correct, stale);

	for (i = 0; i < CACHE_SLOTS; i++)
		if (cache[i].mr)
			ibv_dereg_mr(cache[i].mr);
	ibv_dereg_mr(src_mr);
	free(src);
	rdma_pair_close(&p);
	return 0;
}
