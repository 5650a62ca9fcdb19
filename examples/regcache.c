// SPDX-License-Identifier: GPL-2.0
/*
 * regcache: the registration cache of an MPI library, in a few lines, with
 * normal MRs and with VA MRs side by side.
 *
 * Registration is expensive, so middleware caches MRs keyed by address: a
 * buffer it has seen before reuses its MR. The loop allocates a buffer with
 * malloc() above the mmap threshold (so free() unmaps it and the next
 * malloc() maps fresh memory, usually at the same address), looks it up in
 * the cache, registers it on a miss, lets the peer RDMA WRITE a
 * position-dependent pattern into it, checks what the CPU sees, and frees it.
 *
 * With normal MRs every cache hit is stale: the MR still points at the pages
 * of the first buffer, the peer's data lands there, the new buffer never sees
 * it. With VA MRs (VAMR_ACCESS_VA, served by vamr through the patched
 * rdma_rxe) the MR follows the address and every transfer is right.
 *
 * usage: regcache [iterations]     (default 8)
 * Exit status: 0 when every VA-MR transfer was correct (and the VA MRs really
 * had VA semantics, checked with VAMR_IOC_MR_QUERY).
 */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "../include/uapi/misc/vamr.h"
#include "../tests/selftests/pattern.h"
#include "../tests/selftests/rdma_pair.h"

#define BUF_LEN (1u << 20)	/* 1 MiB: above the mmap threshold */
#define CACHE_SLOTS 16
#define MAX_ITER 64

struct cache_entry {
	void *addr;
	size_t len;
	struct ibv_mr *mr;
};

struct result {
	void *buf;
	int hit;
	int correct;
};

/* The cache lookup of a registration cache: by (address, length) only. */
static struct ibv_mr *cache_get(struct cache_entry *cache, struct rdma_pair *p, void *addr,
				size_t len, unsigned int access, int *hit)
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
	if (free_slot < 0 || rdma_pair_reg_mr(p, addr, len, access, &cache[free_slot].mr))
		return NULL;
	cache[free_slot].addr = addr;
	cache[free_slot].len = len;
	return cache[free_slot].mr;
}

/* Does this MR have VA semantics? (VAMR_IOC_MR_QUERY by device index and lkey) */
static int mr_is_va(const struct ibv_mr *mr)
{
	struct vamr_mr_query q = vamr_mr_query_of(mr);
	int fd = open("/dev/vamr", O_RDWR), ret;

	if (fd < 0)
		return 0;
	ret = ioctl(fd, VAMR_IOC_MR_QUERY, &q);
	close(fd);
	return ret == 0;
}

/* One run of the loop with MRs of the given access; 0 or -1 on a setup failure. */
static int run(struct rdma_pair *p, unsigned int access, int iterations, struct result *res,
	       int *va_confirmed)
{
	struct cache_entry cache[CACHE_SLOTS] = { 0 };
	struct ibv_mr *src_mr;
	uint8_t *src = malloc(BUF_LEN);
	int i, ret;

	if (!src || rdma_pair_reg_mr(p, src, BUF_LEN, IBV_ACCESS_LOCAL_WRITE, &src_mr))
		return -1;
	*va_confirmed = 1;
	for (i = 0; i < iterations; i++) {
		uint64_t seed = 0x5eed0000u + i;
		uint8_t *buf = malloc(BUF_LEN);
		struct ibv_mr *mr;

		if (!buf)
			return -1;
		memset(buf, 0, BUF_LEN);
		mr = cache_get(cache, p, buf, BUF_LEN, access, &res[i].hit);
		if (!mr) {
			fprintf(stderr, "regcache: ibv_reg_mr failed: %s\n", strerror(errno));
			return -1;
		}
		if ((access & VAMR_ACCESS_VA) && !mr_is_va(mr))
			*va_confirmed = 0;
		pattern_fill(src, BUF_LEN, seed, 0);
		ret = rdma_pair_write_sync(p, 1, src, src_mr->lkey, (uintptr_t)buf, mr->rkey,
					   BUF_LEN, 0);
		res[i].buf = buf;
		res[i].correct = ret == IBV_WC_SUCCESS &&
				 pattern_check(buf, BUF_LEN, seed, 0) == (size_t)-1;
		free(buf);
	}
	for (i = 0; i < CACHE_SLOTS; i++)
		if (cache[i].mr)
			ibv_dereg_mr(cache[i].mr);
	ibv_dereg_mr(src_mr);
	free(src);
	return 0;
}

int main(int argc, char **argv)
{
	unsigned int remote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			      IBV_ACCESS_REMOTE_READ;
	int iterations = argc > 1 ? atoi(argv[1]) : 8;
	struct result normal[MAX_ITER], va[MAX_ITER];
	int i, ret, n_ok = 0, v_ok = 0, va_confirmed, dummy;
	struct rdma_pair p;

	if (iterations < 1 || iterations > MAX_ITER)
		iterations = 8;
	/* Keep glibc from raising the threshold after the first free(). */
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);

	ret = rdma_pair_open(&p, NULL);
	if (ret) {
		fprintf(stderr, "regcache: cannot open the RDMA device: %s\n", strerror(-ret));
		return 1;
	}
	if (run(&p, remote, iterations, normal, &dummy) ||
	    run(&p, remote | VAMR_ACCESS_VA, iterations, va, &va_confirmed))
		return 1;
	rdma_pair_close(&p);

	printf("regcache: %d x (malloc 1 MiB, cached ibv_reg_mr, peer RDMA WRITE, check, free)\n",
	       iterations);
	printf("iter  cache  normal MR                     VA MR (VAMR_ACCESS_VA)\n");
	for (i = 0; i < iterations; i++) {
		n_ok += normal[i].correct;
		v_ok += va[i].correct;
		printf("%4d  %-5s  %-28s  %s\n", i, normal[i].hit ? "hit" : "miss",
		       normal[i].correct ? "correct" : "STALE: went to the old pages",
		       va[i].correct ? "correct" : "WRONG");
	}
	printf("normal MRs: %d of %d transfers correct; VA MRs: %d of %d correct%s\n",
	       n_ok, iterations, v_ok, iterations,
	       va_confirmed ? "" : " (but the MRs did NOT get VA semantics)");
	return v_ok == iterations && va_confirmed ? 0 : 1;
}
