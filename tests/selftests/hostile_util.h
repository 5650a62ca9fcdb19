/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the vamr_hostile_* programs share: the module-wide counters, reads
 * through a region checked against the pattern or the CPU, pipes between
 * processes, raw uverbs ioctls (an exec'd image has no libibverbs state) and
 * the checks an exec'd helper (argv[1] == HELPER_ARG) runs on a /dev/vamr
 * file of another mm. Include kselftest_harness.h first.
 */
#ifndef VAMR_SELFTEST_HOSTILE_UTIL_H
#define VAMR_SELFTEST_HOSTILE_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <linux/io_uring.h>
#include <rdma/ib_user_ioctl_cmds.h>
#include <rdma/ib_user_ioctl_verbs.h>
#include <rdma/rdma_user_ioctl_cmds.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mm_util.h"
#include "pattern.h"
#include "rdma_pair.h"
#include "vamr_lib.h"

#define PAGE 4096ul
#define ACC (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#define RW (VAMR_ACCESS_READ | VAMR_ACCESS_WRITE)
#define HELPER_ARG "--vamr-hostile-helper"

#ifndef MAP_DROPPABLE
#define MAP_DROPPABLE 0x08
#endif
#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef __NR_mseal
#define __NR_mseal 462
#endif
/* The ioctl path's REG_MR (kernel 6.17+), not yet in this rdma-core's headers. */
#define HOSTILE_METHOD_REG_MR 5
#define HOSTILE_ATTR_REG_MR_HANDLE 0
#define HOSTILE_ATTR_REG_MR_PD_HANDLE 1
#define HOSTILE_ATTR_REG_MR_IOVA 3
#define HOSTILE_ATTR_REG_MR_ADDR 4
#define HOSTILE_ATTR_REG_MR_LENGTH 5
#define HOSTILE_ATTR_REG_MR_ACCESS_FLAGS 6
#define HOSTILE_ATTR_REG_MR_RESP_LKEY 9
#define HOSTILE_ATTR_REG_MR_RESP_RKEY 10

/* ---------------------------------------------------------------------- */
/* Small helpers                                                          */
/* ---------------------------------------------------------------------- */

/* The module-wide counters (through a /dev/vamr file of the caller's mm). */
static inline int gcounters(int fd, struct vamr_counters *c)
{
	struct vamr_stats s;
	int ret = vamr_stats(fd, VAMR_STATS_GLOBAL, &s);

	if (!ret)
		*c = s.counters;
	return ret;
}

/*
 * The module-wide counters (through @_fd) back to *@_c0: as many pages
 * pinned and as many regions as when the test took *@_c0.
 */
#define EXPECT_GCOUNTERS_BACK(_fd, _c0) do {					\
		struct vamr_counters __c;					\
										\
		ASSERT_EQ(0, gcounters(_fd, &__c));				\
		EXPECT_EQ((_c0)->regions, __c.regions);				\
		EXPECT_EQ((_c0)->pages_pinned, __c.pages_pinned);		\
	} while (0)

/*
 * Reads [addr, addr + len) through the region and compares every byte with
 * the pattern (seed, base): PATTERN_OK, the first wrong offset, or
 * (size_t)-2 when the read itself failed (errno in *err).
 */
static inline size_t region_check(int fd, uint32_t h, const void *addr, size_t len, uint64_t seed,
			   size_t base, int *err)
{
	uint8_t *tmp = malloc(len);
	size_t r;

	*err = vamr_read(fd, h, addr, tmp, len);
	r = *err ? (size_t)-2 : pattern_check(tmp, len, seed, base);
	free(tmp);
	return r;
}

/* Reads through the region and compares with what the CPU sees at addr. */
static inline size_t region_matches_cpu(int fd, uint32_t h, const void *addr, size_t len, int *err)
{
	uint8_t *tmp = malloc(len);
	const uint8_t *cpu = addr;
	size_t i, r = PATTERN_OK;

	*err = vamr_read(fd, h, addr, tmp, len);
	if (*err)
		r = (size_t)-2;
	else
		for (i = 0; i < len; i++)
			if (tmp[i] != cpu[i]) {
				r = i;
				break;
			}
	free(tmp);
	return r;
}

/*
 * Writes one byte into each of n pages from p: fresh pages are mapped there
 * within microseconds (the verify pass, 2 ms after an invalidation, then
 * finds them present and must swap its pins for them).
 */
static inline void touch_pages(uint8_t *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		((volatile uint8_t *)p)[i * PAGE] = 1;
}

static inline int pidfd_open(pid_t pid)
{
	return syscall(__NR_pidfd_open, pid, 0);
}

static inline int wait_exit(pid_t pid)
{
	int st;

	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Connects qp[@side] of the pair to @remote_qpn (a QP of another process). */
static inline int xconnect(struct rdma_pair *p, int side, uint32_t remote_qpn, uint32_t my_psn,
		    uint32_t remote_psn)
{
	return rdma_pair_connect_qp(p, p->qp[side], remote_qpn, my_psn, remote_psn);
}

static inline int write_all(int fd, const void *b, size_t n)
{
	return write(fd, b, n) == (ssize_t)n ? 0 : -1;
}

static inline int read_all(int fd, void *b, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = read(fd, (char *)b + got, n - got);

		if (r <= 0)
			return -1;
		got += r;
	}
	return 0;
}

/* ---------------------------------------------------------------------- */
/* Raw uverbs ioctls (the exec'd helper has no libibverbs state)          */
/* ---------------------------------------------------------------------- */

struct uv_call {
	struct ib_uverbs_ioctl_hdr hdr;
	struct ib_uverbs_attr attrs[12];
};

static inline int uv_ioctl(int cmd_fd, uint16_t obj, uint16_t method, struct ib_uverbs_attr *a, int n)
{
	struct uv_call c;

	memset(&c, 0, sizeof(c));
	c.hdr.length = sizeof(c.hdr) + n * sizeof(a[0]);
	c.hdr.object_id = obj;
	c.hdr.method_id = method;
	c.hdr.num_attrs = n;
	c.hdr.driver_id = RDMA_DRIVER_RXE;
	memcpy(c.attrs, a, n * sizeof(a[0]));
	if (ioctl(cmd_fd, RDMA_VERBS_IOCTL, &c))
		return -errno;
	memcpy(a, c.attrs, n * sizeof(a[0]));
	return 0;
}

static inline struct ib_uverbs_attr uv_in(uint16_t id, uint64_t v)
{
	return (struct ib_uverbs_attr){ .attr_id = id, .len = 8,
					.flags = UVERBS_ATTR_F_MANDATORY, .data = v };
}

static inline struct ib_uverbs_attr uv_idr(uint16_t id, uint64_t handle)
{
	return (struct ib_uverbs_attr){ .attr_id = id, .flags = UVERBS_ATTR_F_MANDATORY,
					.data = handle };
}

static inline struct ib_uverbs_attr uv_ptr(uint16_t id, void *p, uint16_t len)
{
	return (struct ib_uverbs_attr){ .attr_id = id, .len = len,
					.flags = UVERBS_ATTR_F_MANDATORY, .data = (uintptr_t)p };
}

/* UVERBS_METHOD_REG_MR through the ioctl path: 0 and handle, lkey, rkey, or -errno. */
static inline int uv_reg_mr(int cmd_fd, uint32_t pd, void *addr, size_t len, uint32_t access,
		     uint32_t *handle, uint32_t *lkey, uint32_t *rkey)
{
	struct ib_uverbs_attr a[] = {
		uv_idr(HOSTILE_ATTR_REG_MR_HANDLE, 0),
		uv_idr(HOSTILE_ATTR_REG_MR_PD_HANDLE, pd),
		uv_in(HOSTILE_ATTR_REG_MR_IOVA, (uintptr_t)addr),
		uv_in(HOSTILE_ATTR_REG_MR_ADDR, (uintptr_t)addr),
		uv_in(HOSTILE_ATTR_REG_MR_LENGTH, len),
		uv_in(HOSTILE_ATTR_REG_MR_ACCESS_FLAGS, access),
		uv_ptr(HOSTILE_ATTR_REG_MR_RESP_LKEY, lkey, 4),
		uv_ptr(HOSTILE_ATTR_REG_MR_RESP_RKEY, rkey, 4),
	};
	int ret = uv_ioctl(cmd_fd, UVERBS_OBJECT_MR, HOSTILE_METHOD_REG_MR, a, 8);

	if (!ret)
		*handle = (uint32_t)a[0].data;
	return ret;
}

static inline int uv_dereg_mr(int cmd_fd, uint32_t handle)
{
	struct ib_uverbs_attr a[] = { uv_idr(UVERBS_ATTR_DESTROY_MR_HANDLE, handle) };

	return uv_ioctl(cmd_fd, UVERBS_OBJECT_MR, UVERBS_METHOD_MR_DESTROY, a, 1);
}

/* A synchronous ibv_advise_mr(PREFETCH_WRITE, FLUSH) of one SGE. */
static inline int uv_advise(int cmd_fd, uint32_t pd, void *addr, uint32_t len, uint32_t lkey)
{
	struct ib_uverbs_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ib_uverbs_attr a[] = {
		uv_idr(UVERBS_ATTR_ADVISE_MR_PD_HANDLE, pd),
		uv_in(UVERBS_ATTR_ADVISE_MR_ADVICE, IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE),
		uv_in(UVERBS_ATTR_ADVISE_MR_FLAGS, IB_UVERBS_ADVISE_MR_FLAG_FLUSH),
		uv_ptr(UVERBS_ATTR_ADVISE_MR_SGE_LIST, &sge, sizeof(sge)),
	};

	return uv_ioctl(cmd_fd, UVERBS_OBJECT_MR, UVERBS_METHOD_ADVISE_MR, a, 4);
}

/* ---------------------------------------------------------------------- */
/* The exec'd helper                                                      */
/* ---------------------------------------------------------------------- */

#define HCHECK(c)                                                                   \
	do {                                                                        \
		if (!(c)) {                                                         \
			fprintf(stderr, "# helper %s:%d: %s failed (errno %d)\n",    \
				__func__, __LINE__, #c, errno);                     \
			_exit(__LINE__ % 200 + 20);                                 \
		}                                                                   \
	} while (0)

static inline uint64_t harg(char **argv, int i)
{
	return strtoull(argv[i], NULL, 0);
}

/*
 * Every ioctl of a /dev/vamr file opened in another mm fails with EPERM
 * (QUERY and DEVICE, which carry nothing of a process, answer); handles
 * 0..3 are probed, so the helper needs not know them.
 */
static inline void helper_foreign_file(int fd, void *own, size_t len)
{
	struct vamr_query q = { 0 };
	struct vamr_events_open eo = { .flags = VAMR_EVENTS_NONBLOCK };
	struct vamr_counters c;
	uint64_t word = 0;
	uint32_t h;
	uint8_t b[64];

	HCHECK(vamr_ioctl(fd, VAMR_IOC_QUERY, &q) == 0 && q.abi_version == VAMR_ABI_VERSION);
	for (h = 0; h < 4; h++) {
		struct vamr_stats s;

		HCHECK(vamr_read(fd, h, own, b, sizeof(b)) == -EPERM);
		HCHECK(vamr_write(fd, h, own, b, sizeof(b)) == -EPERM);
		HCHECK(vamr_prefetch(fd, h, own, PAGE, NULL) == -EPERM);
		HCHECK(vamr_atomic(fd, h, own, VAMR_ATOMIC_FETCH_ADD, 1, 0, &word) == -EPERM);
		HCHECK(vamr_stats(fd, h, &s) == -EPERM);
		HCHECK(vamr_unregister(fd, h) == -EPERM);
	}
	HCHECK(gcounters(fd, &c) == -EPERM);
	HCHECK(vamr_register(fd, own, len, RW, 1, &h) == -EPERM);
	HCHECK(vamr_watch(fd, own, len, 1, NULL, NULL) == -EPERM);
	HCHECK(vamr_ioctl(fd, VAMR_IOC_EVENTS_OPEN, &eo) == -EPERM);
	HCHECK(mmap(NULL, PAGE, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED && errno == EPERM);
}

/* Fresh memory of len bytes at addr if that is free in this mm, else anywhere. */
static inline uint8_t *helper_map_at(void *addr, size_t len)
{
	void *p = mmap(addr, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

	if (p == MAP_FAILED)
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

#endif /* VAMR_SELFTEST_HOSTILE_UTIL_H */
