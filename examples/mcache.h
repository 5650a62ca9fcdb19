/* SPDX-License-Identifier: GPL-2.0 */
/*
 * mcache: a registration cache of *normal* MRs (no VAMR_ACCESS_VA, any RDMA
 * device, the stock rdma_rxe included) kept correct by vamr's monitor mode.
 *
 * Each cached MR has a watch over its range (VAMR_IOC_WATCH: nothing pinned,
 * no memlock charge) whose generation counter the cache reads in the
 * read-only page it mapped from /dev/vamr. The protocol:
 *
 *   miss:  WATCH the range (returns slot and generation g, read once every
 *          invalidation of the range that had begun is complete), then
 *          ibv_reg_mr(); remember (slot, g, mr).
 *   hit:   one acquire load of counters[slot]; equal to g: the MR still
 *          pins the pages mapped at its addresses, use it. Different: the
 *          mapping changed (munmap, MADV_DONTNEED, mremap, mmap over it,
 *          COW, migration...): ibv_dereg_mr(), g = VAMR_IOC_WATCH_SYNC, then
 *          ibv_reg_mr() again (the generation is read *before* registering,
 *          so a change during the registration shows at the next check).
 *   after: a caller that needs certainty over a whole transfer reloads the
 *          counter when the completion arrives: still g means no change
 *          began before that load, so the device accessed the pages the CPU
 *          sees (mcache_still_valid()).
 *
 * No system call on a hit, no event reading needed: the counters are exact
 * even when the events ring overflowed, so they are all a cache needs. (The
 * events file is for caches that prefer to be told, e.g. to evict early.)
 *
 * The "check" switch exists for the tests: with check = 0 the cache trusts
 * address and length alone, as a cache without a monitor does, and its hits
 * go stale after a remap.
 */
#ifndef VAMR_EXAMPLES_MCACHE_H
#define VAMR_EXAMPLES_MCACHE_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#include "../include/uapi/misc/vamr.h"

#define MCACHE_ENTRIES 64

struct mcache_entry {
	void *addr;
	size_t len;
	unsigned int access;
	struct ibv_mr *mr;	/* NULL: free entry */
	uint32_t slot;		/* the watch */
	uint64_t gen;		/* counters[slot] when mr was registered */
};

struct mcache {
	int fd;				/* /dev/vamr */
	const uint64_t *counters;	/* VAMR_WATCH_MAP_LEN bytes, read-only */
	struct ibv_pd *pd;
	int check;			/* 1: check the generation on every hit */
	unsigned long hits, misses, reregistrations;
	struct mcache_entry e[MCACHE_ENTRIES];
};

/*
 * Opens the cache over @pd. Returns 0 or -errno (-EOPNOTSUPP: no monitor
 * mode; -ENOENT: no /dev/vamr). mcache_close() is safe after a failure.
 */
static inline int mcache_open(struct mcache *c, struct ibv_pd *pd, int check)
{
	struct vamr_query q = { 0 };
	void *p;

	memset(c, 0, sizeof(*c));
	c->fd = open("/dev/vamr", O_RDWR | O_CLOEXEC);
	if (c->fd < 0)
		return -errno;
	if (ioctl(c->fd, VAMR_IOC_QUERY, &q) || !(q.features & VAMR_FEATURE_WATCH)) {
		close(c->fd);
		c->fd = -1;
		return -EOPNOTSUPP;
	}
	p = mmap(NULL, VAMR_WATCH_MAP_LEN, PROT_READ, MAP_SHARED, c->fd, 0);
	if (p == MAP_FAILED) {
		int ret = -errno;

		close(c->fd);
		c->fd = -1;
		return ret;
	}
	c->counters = p;
	c->pd = pd;
	c->check = check;
	return 0;
}

/* The generation now: one load, no system call. */
static inline uint64_t mcache_counter(const struct mcache *c, uint32_t slot)
{
	return __atomic_load_n(&c->counters[slot], __ATOMIC_ACQUIRE);
}

static inline void mcache_drop(struct mcache *c, struct mcache_entry *e)
{
	struct vamr_handle_arg a = { .handle = e->slot };

	ibv_dereg_mr(e->mr);
	ioctl(c->fd, VAMR_IOC_UNWATCH, &a);
	memset(e, 0, sizeof(*e));
}

/*
 * The MR for [addr, addr + len) with @access, from the cache or registered
 * now. NULL with errno set on failure.
 */
static inline struct ibv_mr *mcache_get(struct mcache *c, void *addr, size_t len,
					unsigned int access)
{
	struct mcache_entry *e, *free_e = NULL;
	struct vamr_watch w = { .addr = (uintptr_t)addr, .len = len };
	struct vamr_watch_sync s;

	for (e = c->e; e < c->e + MCACHE_ENTRIES; e++) {
		if (!e->mr) {
			free_e = free_e ? free_e : e;
			continue;
		}
		if (e->addr != addr || e->len != len || e->access != access)
			continue;
		if (!c->check || mcache_counter(c, e->slot) == e->gen) {
			c->hits++;
			return e->mr;
		}
		/* The mapping changed: register again, under the same watch. */
		c->reregistrations++;
		ibv_dereg_mr(e->mr);
		e->mr = NULL;
		s = (struct vamr_watch_sync){ .slot = e->slot };
		if (ioctl(c->fd, VAMR_IOC_WATCH_SYNC, &s))
			goto fail;
		e->gen = s.generation;
		e->mr = ibv_reg_mr(c->pd, addr, len, access);
		if (!e->mr)
			goto fail;
		return e->mr;
	}
	c->misses++;
	if (!free_e) {		/* full: evict the first entry */
		free_e = c->e;
		mcache_drop(c, free_e);
	}
	e = free_e;
	if (ioctl(c->fd, VAMR_IOC_WATCH, &w))
		return NULL;
	e->slot = w.slot;
	e->gen = w.generation;
	e->mr = ibv_reg_mr(c->pd, addr, len, access);
	if (!e->mr)
		goto fail;
	e->addr = addr;
	e->len = len;
	e->access = access;
	return e->mr;
fail:
	{
		int err = errno;
		struct vamr_handle_arg a = { .handle = e->slot };

		ioctl(c->fd, VAMR_IOC_UNWATCH, &a);
		memset(e, 0, sizeof(*e));
		errno = err;
	}
	return NULL;
}

/*
 * After a transfer with @mr completed: 1 if no change of its mapping began
 * before now (the transfer used the pages the CPU sees), 0 otherwise.
 */
static inline int mcache_still_valid(const struct mcache *c, const struct ibv_mr *mr)
{
	const struct mcache_entry *e;

	for (e = c->e; e < c->e + MCACHE_ENTRIES; e++)
		if (e->mr == mr)
			return mcache_counter(c, e->slot) == e->gen;
	return 0;
}

/* Deregisters everything and closes the cache. */
static inline void mcache_close(struct mcache *c)
{
	struct mcache_entry *e;

	for (e = c->e; e < c->e + MCACHE_ENTRIES; e++)
		if (e->mr)
			mcache_drop(c, e);
	if (c->counters)
		munmap((void *)c->counters, VAMR_WATCH_MAP_LEN);
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->counters = NULL;
}

#endif /* VAMR_EXAMPLES_MCACHE_H */
