// SPDX-License-Identifier: GPL-2.0
/*
 * vamr_hostile: regions and VA MRs under unusual or hostile use of the
 * address space, the classes of public bug reports against GUP, ODP and
 * userfaultfd users:
 *
 *  - exec with live regions: /dev/vamr, events and uverbs descriptors kept
 *    across execve() (no O_CLOEXEC), and vfork + exec. The old mm's regions
 *    are dead, nothing of the old mm is reachable from the new one, new
 *    registrations are of the caller's own mm or refused with EPERM, pinned_vm
 *    (VmPin) of both mms and the module's counters come back;
 *  - memfd_secret (secretmem): nothing is pinned, every access fails with
 *    EFAULT, and secret pages mapped over registered memory are never read
 *    through the region or the MR;
 *  - MAP_DROPPABLE memory, mseal()ed ranges, MADV_DONTNEED on droppable;
 *  - io_uring fixed buffers over the range of a region, then munmap + mmap:
 *    io_uring keeps its old pages, the region follows the new ones;
 *  - process_madvise(MADV_COLD / MADV_PAGEOUT) and process_vm_writev() from
 *    another process: the region then sees exactly what the owner's CPU sees.
 *
 * Data is position dependent (pattern.h) and checked byte by byte; VmPin and
 * the module-wide counters are checked where pins or charges are involved.
 *
 * The exec tests run this program again as a helper (argv[1] ==
 * HELPER_ARG), which checks what the new image can and cannot do with the
 * descriptors it inherited and exits 0, or with the line of its first failed
 * check.
 */
#define _GNU_SOURCE
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

#include "kselftest_harness.h"
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
#ifndef MADV_COLD
#define MADV_COLD 20
#endif
#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
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
static int gcounters(int fd, struct vamr_counters *c)
{
	struct vamr_stats s;
	int ret = vamr_stats(fd, VAMR_STATS_GLOBAL, &s);

	if (!ret)
		*c = s.counters;
	return ret;
}

/*
 * Reads [addr, addr + len) through the region and compares every byte with
 * the pattern (seed, base): PATTERN_OK, the first wrong offset, or
 * (size_t)-2 when the read itself failed (errno in *err).
 */
static size_t region_check(int fd, uint32_t h, const void *addr, size_t len, uint64_t seed,
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
static size_t region_matches_cpu(int fd, uint32_t h, const void *addr, size_t len, int *err)
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
static void touch_pages(uint8_t *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		((volatile uint8_t *)p)[i * PAGE] = 1;
}

static int pidfd_open(pid_t pid)
{
	return syscall(__NR_pidfd_open, pid, 0);
}

static int wait_exit(pid_t pid)
{
	int st;

	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Connects qp[@side] of the pair to @remote_qpn (a QP of another process). */
static int xconnect(struct rdma_pair *p, int side, uint32_t remote_qpn, uint32_t my_psn,
		    uint32_t remote_psn)
{
	return rdma_pair_connect_qp(p, p->qp[side], remote_qpn, my_psn, remote_psn);
}

static int write_all(int fd, const void *b, size_t n)
{
	return write(fd, b, n) == (ssize_t)n ? 0 : -1;
}

static int read_all(int fd, void *b, size_t n)
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

static int uv_ioctl(int cmd_fd, uint16_t obj, uint16_t method, struct ib_uverbs_attr *a, int n)
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

static struct ib_uverbs_attr uv_in(uint16_t id, uint64_t v)
{
	return (struct ib_uverbs_attr){ .attr_id = id, .len = 8,
					.flags = UVERBS_ATTR_F_MANDATORY, .data = v };
}

static struct ib_uverbs_attr uv_idr(uint16_t id, uint64_t handle)
{
	return (struct ib_uverbs_attr){ .attr_id = id, .flags = UVERBS_ATTR_F_MANDATORY,
					.data = handle };
}

static struct ib_uverbs_attr uv_ptr(uint16_t id, void *p, uint16_t len)
{
	return (struct ib_uverbs_attr){ .attr_id = id, .len = len,
					.flags = UVERBS_ATTR_F_MANDATORY, .data = (uintptr_t)p };
}

/* UVERBS_METHOD_REG_MR through the ioctl path: 0 and handle, lkey, rkey, or -errno. */
static int uv_reg_mr(int cmd_fd, uint32_t pd, void *addr, size_t len, uint32_t access,
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

static int uv_dereg_mr(int cmd_fd, uint32_t handle)
{
	struct ib_uverbs_attr a[] = { uv_idr(UVERBS_ATTR_DESTROY_MR_HANDLE, handle) };

	return uv_ioctl(cmd_fd, UVERBS_OBJECT_MR, UVERBS_METHOD_MR_DESTROY, a, 1);
}

/* A synchronous ibv_advise_mr(PREFETCH_WRITE, FLUSH) of one SGE. */
static int uv_advise(int cmd_fd, uint32_t pd, void *addr, uint32_t len, uint32_t lkey)
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

static uint64_t harg(char **argv, int i)
{
	return strtoull(argv[i], NULL, 0);
}

/*
 * Every ioctl of a /dev/vamr file opened in another mm fails with EPERM
 * (QUERY and DEVICE, which carry nothing of a process, answer); handles
 * 0..3 are probed, so the helper needs not know them.
 */
static void helper_foreign_file(int fd, void *own, size_t len)
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
static uint8_t *helper_map_at(void *addr, size_t len)
{
	void *p = mmap(addr, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

	if (p == MAP_FAILED)
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

/*
 * "dev": argv fd evfd addr len regions_before pinned_before (the module-wide
 * counts before the old image registered its two regions, with cookies 0x51
 * and 0x52).
 */
static int helper_dev(char **argv)
{
	int fd = harg(argv, 3), evfd = harg(argv, 4), fd2, err;
	uint8_t *old = (uint8_t *)(uintptr_t)harg(argv, 5);
	size_t len = harg(argv, 6), n;
	uint64_t regions0 = harg(argv, 7), pinned0 = harg(argv, 8);
	struct vamr_event ev[64];
	struct vamr_counters c;
	bool released[2] = { false, false };
	uint8_t *mine;
	uint32_t h;
	int i, nev;

	/* A new mm: nothing pinned, nothing charged. */
	HCHECK(vamr_vmpin_kb() == 0);
	mine = helper_map_at(old, len);
	HCHECK(mine);
	pattern_fill(mine, len, 0xe2, 0);
	helper_foreign_file(fd, mine, len);

	/* The old mm's exit released both regions: a RELEASE record for each. */
	nev = vamr_drain_events(evfd, ev, 64);
	HCHECK(nev > 0);
	for (i = 0; i < nev; i++)
		if (ev[i].kind == VAMR_EVENT_RELEASE && ev[i].cookie >= 0x51 && ev[i].cookie <= 0x52)
			released[ev[i].cookie - 0x51] = true;
	HCHECK(released[0] && released[1]);

	/*
	 * The old regions still exist (the inherited file holds them) but pin
	 * nothing: their pins went with the old mm.
	 */
	fd2 = vamr_open();
	HCHECK(fd2 >= 0);
	HCHECK(gcounters(fd2, &c) == 0);
	HCHECK(c.regions == regions0 + 2);
	HCHECK(c.pages_pinned == pinned0);

	/* The new image registers its own memory, at the old address if it could. */
	HCHECK(vamr_register(fd2, mine, len, RW, 7, &h) == 0);
	HCHECK(vamr_vmpin_kb() == (long)(len / 1024));
	n = region_check(fd2, h, mine, len, 0xe2, 0, &err);
	HCHECK(n == PATTERN_OK);
	HCHECK(gcounters(fd2, &c) == 0 && c.pages_pinned == pinned0 + len / PAGE);
	HCHECK(vamr_unregister(fd2, h) == 0);
	HCHECK(vamr_vmpin_kb() == 0);

	/* Closing the inherited file tears the old regions down (charges to the old mm). */
	HCHECK(close(fd) == 0);
	HCHECK(vamr_vmpin_kb() == 0);
	HCHECK(gcounters(fd2, &c) == 0);
	HCHECK(c.regions == regions0 && c.pages_pinned == pinned0);
	close(fd2);
	return 0;
}

/*
 * "vfork": argv fd ownfd holdfd addr len. Run by a vfork child after exec:
 * fd is the parent's file, ownfd one the child opened (in the parent's mm)
 * before exec. Both are another mm's now. Waits for holdfd to close.
 */
static int helper_vfork(char **argv)
{
	int fd = harg(argv, 3), own = harg(argv, 4), hold = harg(argv, 5);
	size_t len = harg(argv, 7);
	uint8_t *mine = helper_map_at((void *)(uintptr_t)harg(argv, 6), len), b;

	HCHECK(mine);
	HCHECK(vamr_vmpin_kb() == 0);
	helper_foreign_file(fd, mine, len);
	helper_foreign_file(own, mine, len);
	HCHECK(vamr_vmpin_kb() == 0);
	/* Hold the files until the parent has looked. */
	HCHECK(read(hold, &b, 1) == 0);
	return 0;
}

/*
 * "verbs": argv cmd_fd pd_handle mr_handle ib_index lkey addr len to_fd from_fd.
 * The old image's VA MR (mr_handle, lkey) over [addr, addr + len) lives on in
 * the inherited uverbs file; its region's mm is gone.
 */
static int helper_verbs(char **argv)
{
	int cmd = harg(argv, 3), to = harg(argv, 10), from = harg(argv, 11), vfd, err;
	uint32_t pd = harg(argv, 4), old_mr = harg(argv, 5), ib_index = harg(argv, 6);
	uint32_t old_lkey = harg(argv, 7), h, lkey, rkey;
	uint8_t *old = (uint8_t *)(uintptr_t)harg(argv, 8);
	size_t len = harg(argv, 9);
	struct vamr_mr_query q = { .key = old_lkey, .ib_index = ib_index };
	uint64_t msg[3];
	uint8_t *mine, b;
	size_t n;

	(void)err;
	HCHECK(vamr_vmpin_kb() == 0);
	vfd = vamr_open();
	HCHECK(vfd >= 0);
	/* The old MR is not this process's. */
	HCHECK(vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q) == -ENOENT);
	/* A prefetch of it has no mm to pin from. */
	HCHECK(uv_advise(cmd, pd, old, PAGE, old_lkey) < 0);

	mine = helper_map_at(old, len);
	HCHECK(mine);
	pattern_fill(mine, len, 0xe5, 0);
	HCHECK(uv_reg_mr(cmd, pd, mine, len, ACC | VAMR_ACCESS_VA, &h, &lkey, &rkey) == 0);
	/* The new MR is of this mm, charged to it, found by MR_QUERY. */
	HCHECK(vamr_vmpin_kb() == (long)(len / 1024));
	q = (struct vamr_mr_query){ .key = lkey, .ib_index = ib_index };
	HCHECK(vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q) == 0);
	HCHECK(q.addr == (uintptr_t)mine && q.len == len);
	HCHECK(uv_advise(cmd, pd, mine, len, lkey) == 0);

	/* The peer reads and writes both MRs, then says so. */
	msg[0] = rkey;
	msg[1] = (uintptr_t)mine;
	msg[2] = len;
	HCHECK(write_all(to, msg, sizeof(msg)) == 0);
	HCHECK(read_all(from, &b, 1) == 0);
	n = pattern_check(mine, len, 0xe6, 0);
	if (n != PATTERN_OK)
		fprintf(stderr, "# helper: byte %zu of the new MR is not the peer's\n", n);
	HCHECK(n == PATTERN_OK);

	HCHECK(uv_dereg_mr(cmd, h) == 0);
	HCHECK(vamr_vmpin_kb() == 0);
	/*
	 * Deregistering the old MR from here tears down a region of a gone mm:
	 * its charge goes back to that mm, not to this one.
	 */
	HCHECK(uv_dereg_mr(cmd, old_mr) == 0);
	HCHECK(vamr_vmpin_kb() == 0);
	HCHECK(vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q) == -ENOENT);
	close(vfd);
	return 0;
}

/*
 * "idle": argv cmd_fd mr_handle to_fd from_fd. Says it runs, waits for the
 * peer to stop its traffic, then deregisters the old image's VA MR.
 */
static int helper_idle(char **argv)
{
	int cmd = harg(argv, 3), to = harg(argv, 5), from = harg(argv, 6);
	uint8_t b = 1;

	HCHECK(vamr_vmpin_kb() == 0);
	HCHECK(write_all(to, &b, 1) == 0);
	HCHECK(read_all(from, &b, 1) == 0);
	HCHECK(uv_dereg_mr(cmd, harg(argv, 4)) == 0);
	HCHECK(vamr_vmpin_kb() == 0);
	return 0;
}

static int helper_main(int argc, char **argv)
{
	if (argc > 2 && !strcmp(argv[2], "idle") && argc == 7)
		return helper_idle(argv);
	if (argc > 2 && !strcmp(argv[2], "dev") && argc == 9)
		return helper_dev(argv);
	if (argc > 2 && !strcmp(argv[2], "vfork") && argc == 8)
		return helper_vfork(argv);
	if (argc > 2 && !strcmp(argv[2], "verbs") && argc == 12)
		return helper_verbs(argv);
	fprintf(stderr, "# helper: bad arguments\n");
	return 2;
}

/* ---------------------------------------------------------------------- */
/* 1. exec with live regions                                              */
/* ---------------------------------------------------------------------- */

/*
 * A process registers two regions through a /dev/vamr file without
 * O_CLOEXEC (and keeps its events file), then execs. The new image gets EPERM
 * for everything but QUERY on that file, sees a RELEASE record per region,
 * finds their pins gone while the regions themselves live on in the file,
 * registers its own memory through a file of its own (at the same address,
 * other bytes) with VmPin exact, and tears the old regions down by closing
 * the file. The module-wide counts come back to where they were.
 */
TEST(exec_with_live_regions)
{
	const size_t len = 8 * PAGE;
	struct vamr_counters c0, c;
	int fd, st;
	pid_t pid;

	fd = vamr_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, gcounters(fd, &c0));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct vamr_events_open eo = { .flags = VAMR_EVENTS_NONBLOCK };
		uint8_t *buf = map_anon(len);
		char a[6][32], self[64];
		uint32_t h1, h2;
		int vfd = open("/dev/vamr", O_RDWR), err;

		if (!buf || vfd < 0 || vamr_ioctl(vfd, VAMR_IOC_EVENTS_OPEN, &eo))
			_exit(3);
		pattern_fill(buf, len, 0xe1, 0);
		if (vamr_register(vfd, buf, len, RW, 0x51, &h1) ||
		    vamr_register(vfd, buf + PAGE, 3 * PAGE, VAMR_ACCESS_READ, 0x52, &h2))
			_exit(4);
		if (region_check(vfd, h1, buf, len, 0xe1, 0, &err) != PATTERN_OK ||
		    vamr_vmpin_kb() != (long)((len + 3 * PAGE) / 1024))
			_exit(5);
		snprintf(a[0], 32, "%d", vfd);
		snprintf(a[1], 32, "%d", eo.fd);
		snprintf(a[2], 32, "%#lx", (unsigned long)(uintptr_t)buf);
		snprintf(a[3], 32, "%zu", len);
		snprintf(a[4], 32, "%llu", (unsigned long long)c0.regions);
		snprintf(a[5], 32, "%llu", (unsigned long long)c0.pages_pinned);
		snprintf(self, sizeof(self), "/proc/self/exe");
		execl(self, "vamr_hostile", HELPER_ARG, "dev", a[0], a[1], a[2], a[3], a[4], a[5],
		      (char *)NULL);
		_exit(6);
	}
	st = wait_exit(pid);
	ASSERT_EQ(0, st);
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.regions, c.regions);
	EXPECT_EQ(c0.pages_pinned, c.pages_pinned);
	close(fd);
}

/*
 * The vfork child of vfork_exec: registers buf through the parent's file fd,
 * buf2 through a file it opens itself (as descriptor 200), then execs the
 * helper with the arguments a. Raw system calls only: the parent's stack is
 * borrowed until the exec. Returns the child's pid (or -1).
 */
static pid_t vfork_register_exec(int fd, uint8_t *buf, size_t len, uint8_t *buf2, size_t len2,
				 int hold[2], char a[5][32], volatile int *rc1,
				 volatile uint32_t *h1, volatile int *rc2)
{
	struct vamr_register r = { .addr = (uintptr_t)buf, .len = len, .cookie = 1,
				   .access = RW };
	struct vamr_register r2 = { .addr = (uintptr_t)buf2, .len = len2, .cookie = 2,
				    .access = RW };
	pid_t pid = vfork();
	int own;

	if (pid)
		return pid;
	*rc1 = ioctl(fd, VAMR_IOC_REGISTER, &r);
	*h1 = r.handle;
	own = open("/dev/vamr", O_RDWR);
	if (own >= 0 && dup2(own, 200) == 200)
		*rc2 = ioctl(200, VAMR_IOC_REGISTER, &r2);
	close(hold[1]);
	execl("/proc/self/exe", "vamr_hostile", HELPER_ARG, "vfork", a[0], a[1], a[2], a[3], a[4],
	      (char *)NULL);
	_exit(6);
}

/*
 * vfork + exec: the child shares the parent's mm until it execs, so its
 * registrations through the parent's file and through a file it opens
 * itself are regions of the parent's mm, charged to it. After the exec the
 * child gets EPERM on both files; the parent uses its region (the bytes it
 * sees, and follows a remap); the region in the child's file pins the
 * parent's memory, charged to the parent, until the child closes that file
 * (as a normal MR registered there would), and the parent's munmap drops
 * its pins meanwhile.
 */
TEST(vfork_exec)
{
	const size_t len = 8 * PAGE, len2 = 4 * PAGE;
	uint8_t *buf = map_anon(len), *buf2 = map_anon(len2);
	struct vamr_counters c0, c;
	volatile int rc1 = -1, rc2 = -1;
	volatile uint32_t h1 = ~0u;
	char a[5][32];
	int fd, hold[2], err, st;
	long pin0;
	pid_t pid;

	ASSERT_NE(NULL, buf);
	ASSERT_NE(NULL, buf2);
	pattern_fill(buf, len, 0xf1, 0);
	pattern_fill(buf2, len2, 0xf2, 0);
	fd = open("/dev/vamr", O_RDWR);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, pipe(hold));
	ASSERT_EQ(0, gcounters(fd, &c0));
	pin0 = vamr_vmpin_kb();
	snprintf(a[0], 32, "%d", fd);
	snprintf(a[1], 32, "%d", 200);
	snprintf(a[2], 32, "%d", hold[0]);
	snprintf(a[3], 32, "%#lx", (unsigned long)(uintptr_t)buf);
	snprintf(a[4], 32, "%zu", len);

	pid = vfork_register_exec(fd, buf, len, buf2, len2, hold, a, &rc1, &h1, &rc2);
	ASSERT_LE(0, pid);
	close(hold[0]);
	ASSERT_EQ(0, rc1);
	ASSERT_EQ(0, rc2);
	/* Both regions are of this mm and charged to it. */
	EXPECT_EQ(pin0 + (long)((len + len2) / 1024), vamr_vmpin_kb());
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.regions + 2, c.regions);
	EXPECT_EQ(c0.pages_pinned + (len + len2) / PAGE, c.pages_pinned);
	EXPECT_EQ(PATTERN_OK, region_check(fd, h1, buf, len, 0xf1, 0, &err));
	/* The region follows this mm: munmap + mmap, other bytes. */
	ASSERT_EQ(0, remap_fixed(buf + 2 * PAGE, 2 * PAGE));
	pattern_fill(buf + 2 * PAGE, 2 * PAGE, 0xf3, 0);
	EXPECT_EQ(PATTERN_OK, region_check(fd, h1, buf + 2 * PAGE, 2 * PAGE, 0xf3, 0, &err));
	EXPECT_EQ(PATTERN_OK, region_check(fd, h1, buf, 2 * PAGE, 0xf1, 0, &err));
	/* munmap of the range of the child's region drops its pins at once. */
	ASSERT_EQ(0, munmap(buf2, len2));
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.pages_pinned + len / PAGE, c.pages_pinned);
	/* Still charged until the child's file goes. */
	EXPECT_EQ(pin0 + (long)((len + len2) / 1024), vamr_vmpin_kb());
	close(hold[1]);
	st = wait_exit(pid);
	EXPECT_EQ(0, st);
	EXPECT_EQ(pin0 + (long)(len / 1024), vamr_vmpin_kb());
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.regions + 1, c.regions);
	EXPECT_EQ(0, vamr_unregister(fd, h1));
	EXPECT_EQ(pin0, vamr_vmpin_kb());
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.regions, c.regions);
	EXPECT_EQ(c0.pages_pinned, c.pages_pinned);
	close(fd);
}

/*
 * The child's side of the exec tests with a peer: a VA MR of @len bytes of
 * fresh memory filled with the pattern of @seed, two RC QPs connected to the
 * peer's (QP numbers over the pipes @to_peer and @from_peer, then the MR's
 * rkey and address), then it waits for the peer's go and clears FD_CLOEXEC
 * of the uverbs file so that it survives the exec. Exits (3-8) on failure.
 */
static void child_export_va_mr(struct rdma_pair *p, struct ibv_mr **mr, uint8_t **buf,
			       size_t len, uint64_t seed, int to_peer, int from_peer)
{
	uint32_t q[2], peer[2];
	uint64_t out[2];
	uint8_t go;
	int i;

	*buf = map_anon(len);
	if (!*buf || rdma_pair_open(p, NULL))
		_exit(3);
	pattern_fill(*buf, len, seed, 0);
	if (rdma_pair_reg_mr(p, *buf, len, ACC | VAMR_ACCESS_VA, mr))
		_exit(4);
	q[0] = p->qp[0]->qp_num;
	q[1] = p->qp[1]->qp_num;
	if (write_all(to_peer, q, sizeof(q)) || read_all(from_peer, peer, sizeof(peer)))
		_exit(5);
	for (i = 0; i < 2; i++)
		if (xconnect(p, i, peer[i], 0x2000 + i, 0x1000 + i))
			_exit(6);
	out[0] = (*mr)->rkey;
	out[1] = (uintptr_t)*buf;
	if (write_all(to_peer, out, sizeof(out)) || read_all(from_peer, &go, 1))
		_exit(7);
	/* Keep the uverbs file across exec. */
	if (fcntl(p->ctx->cmd_fd, F_SETFD, 0))
		_exit(8);
}

/*
 * The peer's side of child_export_va_mr(): connects @t's two QPs to the
 * child's and reads the child's MR (@info: rkey, address). 0, or -1 when a
 * pipe or a QP transition failed.
 */
static int connect_to_child(struct rdma_pair *t, int from_child, int to_child, uint64_t info[2])
{
	uint32_t mine[2], theirs[2];
	int i;

	if (read_all(from_child, theirs, sizeof(theirs)))
		return -1;
	mine[0] = t->qp[0]->qp_num;
	mine[1] = t->qp[1]->qp_num;
	for (i = 0; i < 2; i++)
		if (xconnect(t, i, theirs[i], 0x1000 + i, 0x2000 + i))
			return -1;
	if (write_all(to_child, mine, sizeof(mine)) ||
	    read_all(from_child, info, 2 * sizeof(info[0])))
		return -1;
	return 0;
}

/*
 * A VA MR across exec: the process keeps its uverbs file (FD_CLOEXEC
 * cleared) and execs. A peer in another process (this test) has RC QPs
 * connected to two QPs of that file. After the exec: the old MR answers
 * neither MR_QUERY nor a prefetch, a peer's RDMA READ of it completes in
 * error with nothing delivered, and so does a WRITE; the new image registers
 * a VA MR of its own memory at the same address through the inherited file
 * (the ioctl path: write() commands refuse a changed security context), which
 * the peer reads and writes with the new image's bytes; VmPin of the new mm
 * is exact, and the module-wide counts come back.
 */
TEST(exec_with_live_va_mr)
{
	const size_t len = 8 * PAGE;
	struct rdma_pair t = { 0 };
	struct vamr_counters c0, c;
	struct ibv_mr *land_mr = NULL;
	int p2t[2], t2p[2], h2t[2], t2h[2], vfd, rc, st, i;
	uint64_t info[2], msg[3];
	uint8_t *land, go = 1;
	pid_t pid;

	vfd = vamr_open();
	ASSERT_LE(0, vfd);
	ASSERT_EQ(0, gcounters(vfd, &c0));
	ASSERT_EQ(0, pipe(p2t));
	ASSERT_EQ(0, pipe(t2p));
	ASSERT_EQ(0, pipe(h2t));
	ASSERT_EQ(0, pipe(t2h));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct rdma_pair p = { 0 };
		struct ibv_mr *mr;
		uint8_t *buf;
		char a[9][32];

		child_export_va_mr(&p, &mr, &buf, len, 0xe4, p2t[1], t2p[0]);
		snprintf(a[0], 32, "%d", p.ctx->cmd_fd);
		snprintf(a[1], 32, "%u", p.pd->handle);
		snprintf(a[2], 32, "%u", mr->handle);
		snprintf(a[3], 32, "%d", ibv_get_device_index(p.ctx->device));
		snprintf(a[4], 32, "%u", mr->lkey);
		snprintf(a[5], 32, "%#lx", (unsigned long)(uintptr_t)buf);
		snprintf(a[6], 32, "%zu", len);
		snprintf(a[7], 32, "%d", h2t[1]);
		snprintf(a[8], 32, "%d", t2h[0]);
		execl("/proc/self/exe", "vamr_hostile", HELPER_ARG, "verbs", a[0], a[1], a[2], a[3],
		      a[4], a[5], a[6], a[7], a[8], (char *)NULL);
		_exit(9);
	}
	close(p2t[1]);
	close(t2p[0]);
	close(h2t[1]);
	close(t2h[0]);
	rc = rdma_pair_open(&t, NULL);
	if (rc == -ENODEV) {
		kill(pid, SIGKILL);
		wait_exit(pid);
		SKIP(return, "no RDMA device");
	}
	ASSERT_EQ(0, rc);
	land = map_anon(len);
	ASSERT_NE(NULL, land);
	ASSERT_EQ(0, rdma_pair_reg_mr(&t, land, len, ACC, &land_mr));
	ASSERT_EQ(0, connect_to_child(&t, p2t[0], t2p[1], info));

	/* Before the exec: the old MR gives the old image's bytes. */
	ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_read_sync(&t, 0, land, land_mr->lkey, info[1],
						      (uint32_t)info[0], len, 0));
	ASSERT_EQ(PATTERN_OK, pattern_check(land, len, 0xe4, 0));
	ASSERT_EQ(0, write_all(t2p[1], &go, 1));
	/* The helper registered its MR: the exec is done. */
	ASSERT_EQ(0, read_all(h2t[0], msg, sizeof(msg)));

	/* The old MR: an error completion, nothing delivered. */
	memset(land, 0xa5, len);
	rc = rdma_pair_read_sync(&t, 0, land, land_mr->lkey, info[1], (uint32_t)info[0], len, 0);
	EXPECT_NE(IBV_WC_SUCCESS, rc);
	for (i = 0; i < (int)len; i++)
		if (land[i] != 0xa5)
			break;
	EXPECT_EQ((int)len, i);
	/* The new MR, at the same address: the new image's bytes, and a write it sees. */
	ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_read_sync(&t, 1, land, land_mr->lkey, msg[1],
						      (uint32_t)msg[0], len, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(land, len, 0xe5, 0));
	pattern_fill(land, len, 0xe6, 0);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_write_sync(&t, 1, land, land_mr->lkey, msg[1],
						       (uint32_t)msg[0], len, 0));
	/* Last (the responder QP goes to error): a WRITE to the old MR. */
	rc = rdma_pair_write_sync(&t, 1, land, land_mr->lkey, info[1], (uint32_t)info[0], len, 0);
	EXPECT_NE(IBV_WC_SUCCESS, rc);
	ASSERT_EQ(0, write_all(t2h[1], &go, 1));
	st = wait_exit(pid);
	EXPECT_EQ(0, st);
	ibv_dereg_mr(land_mr);
	rdma_pair_close(&t);
	ASSERT_EQ(0, gcounters(vfd, &c));
	EXPECT_EQ(c0.regions, c.regions);
	EXPECT_EQ(c0.pages_pinned, c.pages_pinned);
	close(vfd);
}

/*
 * exec while a peer streams RDMA WRITEs (16 in flight) and READs at the
 * process's VA MR, without pausing for the exec: the old mm goes away under
 * the responder (which may be the one to drop the last reference to it). Every READ that completes
 * successfully carries the old image's bytes, never zeros or freed memory;
 * then both streams end in error completions; the old MR deregisters from
 * the new image; the module-wide counts come back.
 */
TEST(exec_during_rdma_traffic)
{
	const size_t len = 64 * PAGE, chunk = 16 * PAGE;
	struct rdma_pair t = { 0 };
	struct vamr_counters c0, c;
	struct ibv_mr *land_mr = NULL, *src_mr = NULL;
	int p2t[2], t2p[2], h2t[2], t2h[2], vfd, rc, st, inflight = 0;
	int reads_ok = 0, reads_after = 0, writes_ok = 0;
	bool rerr = false, werr = false, execd = false;
	uint8_t *land, *src, go = 1;
	uint64_t info[2], n = 0, nr = 0;
	double t_exec = 0;
	pid_t pid;

	vfd = vamr_open();
	ASSERT_LE(0, vfd);
	ASSERT_EQ(0, gcounters(vfd, &c0));
	ASSERT_EQ(0, pipe(p2t));
	ASSERT_EQ(0, pipe(t2p));
	ASSERT_EQ(0, pipe(h2t));
	ASSERT_EQ(0, pipe(t2h));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct rdma_pair p = { 0 };
		struct ibv_mr *mr;
		uint8_t *buf;
		char a[4][32];

		child_export_va_mr(&p, &mr, &buf, len, 0xd1, p2t[1], t2p[0]);
		snprintf(a[0], 32, "%d", p.ctx->cmd_fd);
		snprintf(a[1], 32, "%u", mr->handle);
		snprintf(a[2], 32, "%d", h2t[1]);
		snprintf(a[3], 32, "%d", t2h[0]);
		execl("/proc/self/exe", "vamr_hostile", HELPER_ARG, "idle", a[0], a[1], a[2], a[3],
		      (char *)NULL);
		_exit(9);
	}
	close(p2t[1]);
	close(t2p[0]);
	close(h2t[1]);
	close(t2h[0]);
	rc = rdma_pair_open(&t, NULL);
	if (rc == -ENODEV) {
		kill(pid, SIGKILL);
		wait_exit(pid);
		SKIP(return, "no RDMA device");
	}
	ASSERT_EQ(0, rc);
	land = map_anon(len);
	src = map_anon(chunk);
	ASSERT_NE(NULL, land);
	ASSERT_NE(NULL, src);
	pattern_fill(src, chunk, 0xd1, 0);
	ASSERT_EQ(0, rdma_pair_reg_mr(&t, land, len, ACC, &land_mr));
	ASSERT_EQ(0, rdma_pair_reg_mr(&t, src, chunk, ACC, &src_mr));
	ASSERT_EQ(0, connect_to_child(&t, p2t[0], t2p[1], info));

	/*
	 * WRITEs of the old image's own bytes (chunk-sized, at rotating offsets)
	 * and READs of a page, until both ended in error after the exec.
	 */
	while (!(rerr && werr)) {
		struct ibv_wc wc;
		size_t bad, x;

		while (!werr && inflight < 16) {
			ASSERT_EQ(0, rdma_pair_post_write(&t, 0, n, src, src_mr->lkey,
							  info[1] + (n % (len / chunk)) * chunk,
							  (uint32_t)info[0], chunk));
			n++;
			inflight++;
		}
		if (!rerr) {
			size_t off = (nr++ % (len / PAGE)) * PAGE;

			/* One page at a time: many READs around the exec. */
			memset(land + off, 0, PAGE);
			rc = rdma_pair_read_sync(&t, 1, land + off, land_mr->lkey, info[1] + off,
						 (uint32_t)info[0], PAGE, 10000);
			if (rc == IBV_WC_SUCCESS) {
				reads_ok++;
				reads_after += execd;
				/*
				 * Each byte: the old image's, or a WRITE's (pattern offset 0
				 * of its chunk; WRITEs and READs on two QPs interleave).
				 */
				for (bad = 0, x = off; x < off + PAGE; x++)
					bad += land[x] != pattern_byte(0xd1, x) &&
					       land[x] != pattern_byte(0xd1, x % chunk);
				EXPECT_EQ((size_t)0, bad);
			} else {
				rerr = true;
			}
		}
		while (inflight) {
			rc = rdma_pair_wait_send(&t, 0, 1, &wc);
			if (rc == -ETIMEDOUT)
				break;
			inflight--;
			if (rc == IBV_WC_SUCCESS)
				writes_ok++;
			else
				werr = true;
		}
		if (werr && inflight) {
			while (inflight && rdma_pair_wait_send(&t, 0, 2000, &wc) != -ETIMEDOUT)
				inflight--;
			inflight = 0;
		}
		if (!execd && reads_ok >= 32) {
			/* Exec now, and go on streaming while it happens. */
			ASSERT_EQ(0, write_all(t2p[1], &go, 1));
			execd = true;
			t_exec = mono_s();
		}
		/* Bounded: the streams must end within 20 s of the exec. */
		if (execd && mono_s() - t_exec > 20)
			break;
	}
	EXPECT_TRUE(execd);
	EXPECT_TRUE(rerr);
	EXPECT_TRUE(werr);
	/* The new image runs. */
	ASSERT_EQ(0, read_all(h2t[0], &go, 1));
	TH_LOG("reads ok %d (%d after the exec), writes ok %d", reads_ok, reads_after, writes_ok);
	ASSERT_EQ(0, write_all(t2h[1], &go, 1));
	st = wait_exit(pid);
	EXPECT_EQ(0, st);
	ibv_dereg_mr(land_mr);
	ibv_dereg_mr(src_mr);
	rdma_pair_close(&t);
	ASSERT_EQ(0, gcounters(vfd, &c));
	EXPECT_EQ(c0.regions, c.regions);
	EXPECT_EQ(c0.pages_pinned, c.pages_pinned);
	close(vfd);
}

/*
 * A forked child (its own mm) shares the parent's uverbs file. Its write()
 * commands are refused (another security context), but the ioctl path is
 * not: the child registers a VA MR of its own memory in the parent's PD
 * (charged to the child's mm, not the parent's; MR_QUERY finds it for the
 * child only; a peer's READ through the parent's QP gets the child's bytes,
 * and an error once the child is gone), and it deregisters the parent's VA
 * MR, whose charge then goes back to the parent's mm.
 */
TEST(forked_child_uses_parents_uverbs_file)
{
	const size_t len = 8 * PAGE;
	uint8_t *buf = map_anon(len), *land = map_anon(len);
	struct rdma_pair p = { 0 };
	struct ibv_mr *mr, *lmr;
	struct vamr_counters c0, c;
	struct vamr_mr_query q;
	int c2p[2], p2c[2], fd, rc, st, i;
	uint64_t msg[4];
	long pin0;
	pid_t pid;
	uint8_t b = 1;

	ASSERT_NE(NULL, buf);
	ASSERT_NE(NULL, land);
	rc = rdma_pair_open(&p, NULL);
	if (rc == -ENODEV)
		SKIP(return, "no RDMA device");
	ASSERT_EQ(0, rc);
	fd = vamr_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, gcounters(fd, &c0));
	pin0 = vamr_vmpin_kb();
	pattern_fill(buf, len, 0x31, 0);
	ASSERT_EQ(0, rdma_pair_reg_mr(&p, buf, len, ACC | VAMR_ACCESS_VA, &mr));
	ASSERT_EQ(0, rdma_pair_reg_mr(&p, land, len, ACC, &lmr));
	/* Both charged: the VA MR by vamr, the normal MR by ib_umem_get(). */
	ASSERT_EQ(pin0 + (long)(2 * len / 1024), vamr_vmpin_kb());
	ASSERT_EQ(0, pipe(c2p));
	ASSERT_EQ(0, pipe(p2c));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		uint8_t *mine = map_anon(len);
		uint32_t h, lkey, rkey;
		int cfd = vamr_open();

		if (!mine || cfd < 0 || vamr_vmpin_kb() != 0)
			_exit(3);
		pattern_fill(mine, len, 0x32, 0);
		if (uv_reg_mr(p.ctx->cmd_fd, p.pd->handle, mine, len, ACC | VAMR_ACCESS_VA, &h,
			      &lkey, &rkey))
			_exit(4);
		if (vamr_vmpin_kb() != (long)(len / 1024))
			_exit(5);
		q = (struct vamr_mr_query){ .key = lkey,
					    .ib_index = ibv_get_device_index(p.ctx->device) };
		if (vamr_ioctl(cfd, VAMR_IOC_MR_QUERY, &q) || q.addr != (uintptr_t)mine)
			_exit(6);
		/* The parent's VA MR is not this mm's: no answer; but it can be destroyed. */
		q = vamr_mr_query_of(mr);
		if (vamr_ioctl(cfd, VAMR_IOC_MR_QUERY, &q) != -ENOENT)
			_exit(7);
		if (uv_dereg_mr(p.ctx->cmd_fd, mr->handle))
			_exit(8);
		if (vamr_vmpin_kb() != (long)(len / 1024))
			_exit(9);
		msg[0] = h;
		msg[1] = lkey;
		msg[2] = rkey;
		msg[3] = (uintptr_t)mine;
		if (write_all(c2p[1], msg, sizeof(msg)) || read_all(p2c[0], &b, 1))
			_exit(10);
		_exit(0);
	}
	close(c2p[1]);
	close(p2c[0]);
	ASSERT_EQ(0, read_all(c2p[0], msg, sizeof(msg)));
	/* The parent's VA MR is gone, its charge back with the parent's mm. */
	EXPECT_EQ(pin0 + (long)(len / 1024), vamr_vmpin_kb());
	q = vamr_mr_query_of(mr);
	EXPECT_EQ(-ENOENT, vamr_ioctl(fd, VAMR_IOC_MR_QUERY, &q));
	/* The child's MR: not the parent's memory, no answer here, the child's bytes. */
	q = (struct vamr_mr_query){ .key = (uint32_t)msg[1],
				    .ib_index = ibv_get_device_index(p.ctx->device) };
	EXPECT_EQ(-ENOENT, vamr_ioctl(fd, VAMR_IOC_MR_QUERY, &q));
	ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_read_sync(&p, 0, land, lmr->lkey, msg[3],
						      (uint32_t)msg[2], len, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(land, len, 0x32, 0));
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.regions + 1, c.regions);
	EXPECT_EQ(c0.pages_pinned + len / PAGE, c.pages_pinned);
	/* The child goes: its MR's region is dead, a READ fails, nothing delivered. */
	ASSERT_EQ(0, write_all(p2c[1], &b, 1));
	st = wait_exit(pid);
	ASSERT_EQ(0, st);
	memset(land, 0xa5, len);
	rc = rdma_pair_read_sync(&p, 0, land, lmr->lkey, msg[3], (uint32_t)msg[2], len, 0);
	EXPECT_NE(IBV_WC_SUCCESS, rc);
	for (i = 0; i < (int)len; i++)
		if (land[i] != 0xa5)
			break;
	EXPECT_EQ((int)len, i);
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.pages_pinned, c.pages_pinned);
	/* The parent deregisters the child's MR: a region of a gone mm. */
	EXPECT_EQ(0, uv_dereg_mr(p.ctx->cmd_fd, (uint32_t)msg[0]));
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.regions, c.regions);
	EXPECT_EQ(pin0 + (long)(len / 1024), vamr_vmpin_kb());
	ibv_dereg_mr(lmr);
	EXPECT_EQ(pin0, vamr_vmpin_kb());
	/* mr was destroyed by the child: its libibverbs struct is left as it is. */
	rdma_pair_close(&p);
	close(fd);
}

/* ---------------------------------------------------------------------- */
/* 2. memfd_secret                                                        */
/* ---------------------------------------------------------------------- */

/* A secretmem mapping of len bytes (MAP_SHARED), its fd in *fdp; NULL and errno if none. */
static uint8_t *map_secret(size_t len, void *at, int *fdp)
{
	int fd = syscall(__NR_memfd_secret, 0);
	void *p;

	if (fd < 0)
		return NULL;
	if (ftruncate(fd, len)) {
		close(fd);
		return NULL;
	}
	p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_SHARED | (at ? MAP_FIXED : 0), fd, 0);
	if (p == MAP_FAILED) {
		close(fd);
		return NULL;
	}
	*fdp = fd;
	return p;
}

/*
 * A region over secretmem: GUP refuses the pages, so registration pins
 * nothing (the range is a hole to vamr, as PROT_NONE memory is) and every
 * access, prefetch and atomic fails with EFAULT; VmPin holds the cover's
 * charge while registered, then comes back; no pin is taken or leaked.
 */
TEST(secretmem_region)
{
	const size_t len = 4 * PAGE;
	struct vamr_counters c0, c;
	struct vamr_stats s;
	uint8_t *sec, tmp[PAGE];
	uint64_t word;
	uint32_t h, pages = 0;
	int fd, sfd, ret;
	long pin0;

	sec = map_secret(len, NULL, &sfd);
	if (!sec)
		SKIP(return, "memfd_secret: %s", strerror(errno));
	pattern_fill(sec, len, 0x5e, 0);
	fd = vamr_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, gcounters(fd, &c0));
	pin0 = vamr_vmpin_kb();
	ret = vamr_register(fd, sec, len, RW, 1, &h);
	if (ret) {
		/* A refusal is clean too: nothing charged, nothing pinned. */
		EXPECT_EQ(-EFAULT, ret);
		EXPECT_EQ(pin0, vamr_vmpin_kb());
	} else {
		ASSERT_EQ(0, vamr_stats(fd, h, &s));
		EXPECT_EQ(0ull, s.counters.pages_pinned);
		EXPECT_EQ(pin0 + (long)(len / 1024), vamr_vmpin_kb());
		memset(tmp, 0, sizeof(tmp));
		EXPECT_EQ(-EFAULT, vamr_read(fd, h, sec, tmp, PAGE));
		EXPECT_EQ(-EFAULT, vamr_read(fd, h, sec + 100, tmp, 200));
		EXPECT_EQ(-EFAULT, vamr_write(fd, h, sec, tmp, PAGE));
		EXPECT_EQ(-EFAULT, vamr_atomic(fd, h, sec, VAMR_ATOMIC_FETCH_ADD, 1, 0, &word));
		ret = vamr_prefetch(fd, h, sec, len, &pages);
		EXPECT_TRUE(ret == -EFAULT || (ret == 0 && pages == 0));
		/* Nothing was copied out of, or into, the secret pages. */
		EXPECT_EQ(PATTERN_OK, pattern_check(sec, len, 0x5e, 0));
		ASSERT_EQ(0, vamr_stats(fd, h, &s));
		EXPECT_EQ(0ull, s.counters.pages_pinned);
		EXPECT_EQ(0, vamr_unregister(fd, h));
	}
	EXPECT_EQ(pin0, vamr_vmpin_kb());
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.pages_pinned, c.pages_pinned);
	EXPECT_EQ(c0.regions, c.regions);
	munmap(sec, len);
	close(sfd);
	close(fd);
}

/*
 * Registered normal memory (a /dev/vamr region and a VA MR) replaced by a
 * secretmem mapping at the same address (mmap MAP_FIXED of the memfd_secret
 * file) over the middle pages: the secret bytes are never read through the
 * region or the MR (EFAULT, error completion, nothing delivered), the pages
 * around them still work, and once ordinary memory is mapped there again
 * both follow it.
 */
TEST(secretmem_replaces_registered_memory)
{
	const size_t len = 8 * PAGE;
	uint8_t *buf = map_anon(len), *land, *sec, tmp[PAGE], two[PAGE + 1];
	struct rdma_pair p = { 0 };
	struct ibv_mr *mr = NULL, *lmr = NULL;
	struct vamr_counters c0, c;
	int fd, sfd, err, rc;
	bool rdma;
	uint32_t h;
	size_t i;

	ASSERT_NE(NULL, buf);
	fd = vamr_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, gcounters(fd, &c0));
	rc = syscall(__NR_memfd_secret, 0);
	if (rc < 0)
		SKIP(return, "memfd_secret: %s", strerror(errno));
	close(rc);
	rdma = rdma_pair_open(&p, NULL) == 0;
	land = map_anon(len);
	ASSERT_NE(NULL, land);
	pattern_fill(buf, len, 0x61, 0);
	ASSERT_EQ(0, vamr_register(fd, buf, len, RW, 1, &h));
	if (rdma) {
		ASSERT_EQ(0, rdma_pair_reg_mr(&p, buf, len, ACC | VAMR_ACCESS_VA, &mr));
		ASSERT_EQ(0, rdma_pair_reg_mr(&p, land, len, ACC, &lmr));
		ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_read_sync(&p, 0, land, lmr->lkey,
							      (uintptr_t)buf, mr->rkey, len, 0));
		ASSERT_EQ(PATTERN_OK, pattern_check(land, len, 0x61, 0));
	}
	sec = map_secret(2 * PAGE, buf + 3 * PAGE, &sfd);
	ASSERT_EQ(buf + 3 * PAGE, sec);
	pattern_fill(sec, 2 * PAGE, 0x5f, 0);

	/* The secret pages: EFAULT, alone, at an offset, or in a longer read. */
	memset(tmp, 0, sizeof(tmp));
	EXPECT_EQ(-EFAULT, vamr_read(fd, h, sec, tmp, PAGE));
	EXPECT_EQ(-EFAULT, vamr_read(fd, h, sec + PAGE + 17, tmp, 300));
	for (i = 0; i < sizeof(tmp); i++)
		if (tmp[i])
			break;
	EXPECT_EQ(sizeof(tmp), i);
	/* A read from the page before: that page may be copied, no byte of the next. */
	memset(two, 0, sizeof(two));
	EXPECT_EQ(-EFAULT, vamr_read(fd, h, buf + 2 * PAGE, two, PAGE + 1));
	EXPECT_EQ(0, two[PAGE]);
	EXPECT_EQ(-EFAULT, vamr_write(fd, h, sec, tmp, 64));
	EXPECT_EQ(PATTERN_OK, pattern_check(sec, 2 * PAGE, 0x5f, 0));
	/* Around them the region works. */
	EXPECT_EQ(PATTERN_OK, region_check(fd, h, buf, 3 * PAGE, 0x61, 0, &err));
	EXPECT_EQ(PATTERN_OK, region_check(fd, h, buf + 5 * PAGE, 3 * PAGE, 0x61, 5 * PAGE, &err));
	if (rdma) {
		memset(land, 0xa5, len);
		rc = rdma_pair_read_sync(&p, 0, land, lmr->lkey, (uintptr_t)sec, mr->rkey,
					 2 * PAGE, 0);
		EXPECT_NE(IBV_WC_SUCCESS, rc);
		for (i = 0; i < len; i++)
			if (land[i] != 0xa5)
				break;
		EXPECT_EQ(len, i);
		ASSERT_EQ(0, rdma_pair_recover(&p));
		rc = rdma_pair_write_sync(&p, 0, land, lmr->lkey, (uintptr_t)sec + 8, mr->rkey,
					  64, 0);
		EXPECT_NE(IBV_WC_SUCCESS, rc);
		EXPECT_EQ(PATTERN_OK, pattern_check(sec, 2 * PAGE, 0x5f, 0));
		ASSERT_EQ(0, rdma_pair_recover(&p));
		ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_read_sync(&p, 0, land, lmr->lkey,
							      (uintptr_t)buf + 5 * PAGE, mr->rkey,
							      3 * PAGE, 0));
		EXPECT_EQ(PATTERN_OK, pattern_check(land, 3 * PAGE, 0x61, 5 * PAGE));
	}
	/* Ordinary memory again: both follow it. */
	ASSERT_EQ(0, remap_fixed(sec, 2 * PAGE));
	close(sfd);
	pattern_fill(buf + 3 * PAGE, 2 * PAGE, 0x62, 0);
	EXPECT_EQ(PATTERN_OK, region_check(fd, h, buf + 3 * PAGE, 2 * PAGE, 0x62, 0, &err));
	if (rdma) {
		ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_read_sync(&p, 0, land, lmr->lkey,
							      (uintptr_t)buf + 3 * PAGE, mr->rkey,
							      2 * PAGE, 0));
		EXPECT_EQ(PATTERN_OK, pattern_check(land, 2 * PAGE, 0x62, 0));
		ibv_dereg_mr(mr);
		ibv_dereg_mr(lmr);
		rdma_pair_close(&p);
	}
	EXPECT_EQ(0, vamr_unregister(fd, h));
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.pages_pinned, c.pages_pinned);
	EXPECT_EQ(c0.regions, c.regions);
	close(fd);
}

/* ---------------------------------------------------------------------- */
/* 3. MAP_DROPPABLE, mseal                                                */
/* ---------------------------------------------------------------------- */

/*
 * A region over MAP_DROPPABLE memory: accesses see the CPU's bytes, a write
 * through the region is seen by the CPU, MADV_DONTNEED (and MADV_PAGEOUT,
 * under which the kernel may drop droppable pages) leave the region seeing
 * what the CPU sees, and the pins and VmPin come back.
 */
TEST(droppable_region)
{
	const size_t len = 16 * PAGE;
	struct vamr_counters c0, c;
	uint8_t *buf, *tmp = malloc(len);
	int fd, err;
	uint32_t h;
	long pin0;

	buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_DROPPABLE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED)
		SKIP(return, "MAP_DROPPABLE: %s", strerror(errno));
	fd = vamr_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, gcounters(fd, &c0));
	pin0 = vamr_vmpin_kb();
	pattern_fill(buf, len, 0x71, 0);
	ASSERT_EQ(0, vamr_register(fd, buf, len, RW, 1, &h));
	EXPECT_EQ(pin0 + (long)(len / 1024), vamr_vmpin_kb());
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.pages_pinned + len / PAGE, c.pages_pinned);
	EXPECT_EQ(PATTERN_OK, region_check(fd, h, buf, len, 0x71, 0, &err));
	pattern_fill(tmp, 3 * PAGE, 0x72, 0);
	ASSERT_EQ(0, vamr_write(fd, h, buf + PAGE + 5, tmp, 3 * PAGE));
	EXPECT_EQ(PATTERN_OK, pattern_check(buf + PAGE + 5, 3 * PAGE, 0x72, 0));

	/*
	 * DONTNEED: zeros for the CPU and for the region (read at once); then the
	 * CPU's new bytes, read after the verify pass swapped the pins for them.
	 */
	ASSERT_EQ(0, madvise(buf + 4 * PAGE, 4 * PAGE, MADV_DONTNEED));
	EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, h, buf, len, &err));
	EXPECT_EQ(0, buf[4 * PAGE]);
	ASSERT_EQ(0, madvise(buf + 12 * PAGE, 4 * PAGE, MADV_DONTNEED));
	/* New pages at once, before the verify pass (2 ms later) looks. */
	touch_pages(buf + 12 * PAGE, 4);
	pattern_fill(buf + 4 * PAGE, 4 * PAGE, 0x73, 0);
	pattern_fill(buf + 12 * PAGE, 4 * PAGE, 0x75, 0);
	usleep(50000);
	EXPECT_EQ(PATTERN_OK, region_check(fd, h, buf + 12 * PAGE, 4 * PAGE, 0x75, 0, &err));
	EXPECT_EQ(PATTERN_OK, region_check(fd, h, buf + 4 * PAGE, 4 * PAGE, 0x73, 0, &err));
	/* PAGEOUT: droppable pages not pinned may go; the region agrees with the CPU. */
	madvise(buf, len, MADV_PAGEOUT);
	EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, h, buf, len, &err));
	pattern_fill(tmp, len, 0x74, 0);
	ASSERT_EQ(0, vamr_write(fd, h, buf, tmp, len));
	EXPECT_EQ(PATTERN_OK, pattern_check(buf, len, 0x74, 0));

	EXPECT_EQ(0, vamr_unregister(fd, h));
	EXPECT_EQ(pin0, vamr_vmpin_kb());
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.pages_pinned, c.pages_pinned);
	EXPECT_EQ(c0.regions, c.regions);
	munmap(buf, len);
	free(tmp);
	close(fd);
}

/*
 * mseal()ed memory cannot be unmapped, remapped or reprotected: a region
 * over it (registered before or after the seal) keeps working through every
 * refused attempt, follows MADV_DONTNEED where the kernel allows it on sealed
 * writable memory, and unregisters with VmPin back.
 */
TEST(mseal_region)
{
	const size_t len = 8 * PAGE;
	uint8_t *buf = map_anon(len), *tmp = malloc(len);
	struct vamr_counters c0, c;
	uint32_t h, h2;
	int fd, err, ret;
	long pin0;
	void *p;

	ASSERT_NE(NULL, buf);
	fd = vamr_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, gcounters(fd, &c0));
	pin0 = vamr_vmpin_kb();
	pattern_fill(buf, len, 0x81, 0);
	ASSERT_EQ(0, vamr_register(fd, buf, len, RW, 1, &h));
	ret = syscall(__NR_mseal, buf, len, 0);
	if (ret && (errno == ENOSYS || errno == EINVAL)) {
		vamr_unregister(fd, h);
		SKIP(return, "mseal: %s", strerror(errno));
	}
	ASSERT_EQ(0, ret);
	ASSERT_EQ(0, vamr_register(fd, buf + PAGE, 2 * PAGE, VAMR_ACCESS_READ, 2, &h2));
	EXPECT_EQ(pin0 + (long)(len / 1024 + 2 * PAGE / 1024), vamr_vmpin_kb());

	/* Every attempt to change the mapping is refused; the region does not notice. */
	EXPECT_EQ(-1, munmap(buf, len));
	EXPECT_EQ(EPERM, errno);
	p = mmap(buf, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(MAP_FAILED, mremap(buf, PAGE, 2 * PAGE, 0));
	EXPECT_EQ(-1, mprotect(buf, PAGE, PROT_READ));
	EXPECT_EQ(PATTERN_OK, region_check(fd, h, buf, len, 0x81, 0, &err));
	EXPECT_EQ(PATTERN_OK, region_check(fd, h2, buf + PAGE, 2 * PAGE, 0x81, PAGE, &err));
	pattern_fill(tmp, len, 0x82, 0);
	ASSERT_EQ(0, vamr_write(fd, h, buf, tmp, len));
	EXPECT_EQ(PATTERN_OK, pattern_check(buf, len, 0x82, 0));
	EXPECT_EQ(PATTERN_OK, region_check(fd, h2, buf + PAGE, 2 * PAGE, 0x82, PAGE, &err));

	/*
	 * DONTNEED of sealed writable anonymous memory: allowed or not, the
	 * region agrees with the CPU, read at once (zeros) and after the CPU
	 * wrote the released pages and the verify pass swapped the pins.
	 */
	ret = madvise(buf + 5 * PAGE, 2 * PAGE, MADV_DONTNEED);
	EXPECT_TRUE(ret == 0 || errno == EPERM);
	EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, h, buf, len, &err));
	ret = madvise(buf + 2 * PAGE, 2 * PAGE, MADV_DONTNEED);
	EXPECT_TRUE(ret == 0 || errno == EPERM);
	touch_pages(buf + 2 * PAGE, 2);
	pattern_fill(buf + 2 * PAGE, 2 * PAGE, 0x83, 0);
	usleep(50000);
	EXPECT_EQ(PATTERN_OK, region_check(fd, h, buf + 2 * PAGE, 2 * PAGE, 0x83, 0, &err));
	EXPECT_EQ(PATTERN_OK, region_check(fd, h2, buf + 2 * PAGE, PAGE, 0x83, 0, &err));
	EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, h, buf, len, &err));
	EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, h2, buf + PAGE, 2 * PAGE, &err));

	EXPECT_EQ(0, vamr_unregister(fd, h2));
	EXPECT_EQ(0, vamr_unregister(fd, h));
	EXPECT_EQ(pin0, vamr_vmpin_kb());
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.pages_pinned, c.pages_pinned);
	EXPECT_EQ(c0.regions, c.regions);
	free(tmp);
	close(fd);
}

/* ---------------------------------------------------------------------- */
/* 4. io_uring fixed buffers                                              */
/* ---------------------------------------------------------------------- */

struct uring {
	int fd;
	unsigned int *sq_tail, *sq_mask, *sq_array, *cq_head, *cq_tail, *cq_mask;
	struct io_uring_sqe *sqes;
	struct io_uring_cqe *cqes;
};

static int uring_open(struct uring *u)
{
	struct io_uring_params p;
	uint8_t *sq, *cq;

	memset(&p, 0, sizeof(p));
	u->fd = syscall(__NR_io_uring_setup, 4, &p);
	if (u->fd < 0)
		return -errno;
	sq = mmap(NULL, p.sq_off.array + p.sq_entries * sizeof(unsigned int),
		  PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, u->fd, IORING_OFF_SQ_RING);
	cq = mmap(NULL, p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe),
		  PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, u->fd, IORING_OFF_CQ_RING);
	u->sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_POPULATE, u->fd, IORING_OFF_SQES);
	if (sq == MAP_FAILED || cq == MAP_FAILED || u->sqes == MAP_FAILED)
		return -ENOMEM;
	u->sq_tail = (unsigned int *)(sq + p.sq_off.tail);
	u->sq_mask = (unsigned int *)(sq + p.sq_off.ring_mask);
	u->sq_array = (unsigned int *)(sq + p.sq_off.array);
	u->cq_head = (unsigned int *)(cq + p.cq_off.head);
	u->cq_tail = (unsigned int *)(cq + p.cq_off.tail);
	u->cq_mask = (unsigned int *)(cq + p.cq_off.ring_mask);
	u->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
	return 0;
}

/*
 * Gives up CAP_IPC_LOCK (after raising RLIMIT_MEMLOCK to 64 MiB), so that
 * io_uring charges its pins as it does for an ordinary user: to the mm's
 * pinned_vm (and the user's locked_vm). 0 or -errno.
 */
static int drop_cap_ipc_lock(void)
{
	struct __user_cap_header_struct hd = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2];
	struct rlimit rl = { 64ul << 20, 64ul << 20 };

	if (setrlimit(RLIMIT_MEMLOCK, &rl) || syscall(SYS_capget, &hd, d))
		return -errno;
	d[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
	d[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
	return syscall(SYS_capset, &hd, d) ? -errno : 0;
}

/* One fixed-buffer read or write (op) of len bytes at addr, buffer 0, file offset 0. */
static int uring_fixed(struct uring *u, int op, int fd, void *addr, unsigned int len)
{
	unsigned int tail = *u->sq_tail, head;
	struct io_uring_sqe *sqe = &u->sqes[tail & *u->sq_mask];
	int res;

	memset(sqe, 0, sizeof(*sqe));
	sqe->opcode = op;
	sqe->fd = fd;
	sqe->addr = (uintptr_t)addr;
	sqe->len = len;
	sqe->off = 0;
	sqe->buf_index = 0;
	u->sq_array[tail & *u->sq_mask] = tail & *u->sq_mask;
	__atomic_store_n(u->sq_tail, tail + 1, __ATOMIC_RELEASE);
	if (syscall(__NR_io_uring_enter, u->fd, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0)
		return -errno;
	head = *u->cq_head;
	if (head == __atomic_load_n(u->cq_tail, __ATOMIC_ACQUIRE))
		return -EAGAIN;
	res = u->cqes[head & *u->cq_mask].res;
	__atomic_store_n(u->cq_head, head + 1, __ATOMIC_RELEASE);
	return res;
}

/*
 * io_uring fixed buffers (IORING_REGISTER_BUFFERS, a long-term pin of their
 * own, charged to pinned_vm too for a user without CAP_IPC_LOCK, which the
 * test drops) over the range of a region, then munmap +
 * mmap of part of it: io_uring keeps its old pages (a WRITE_FIXED sends the
 * old bytes), the region follows the new ones (the CPU's bytes), a
 * READ_FIXED lands in the old pages, not in what the CPU or the region see;
 * VmPin is both charges, then comes back as each pinner lets go.
 */
TEST(io_uring_fixed_buffers)
{
	const size_t len = 16 * PAGE;
	uint8_t *buf = map_anon(len), *tmp = malloc(len);
	struct vamr_counters c0, c;
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct uring u;
	int fd, mfd, err, ret;
	uint32_t h;
	long pin0, pin1;

	ASSERT_NE(NULL, buf);
	fd = vamr_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, gcounters(fd, &c0));
	pin0 = vamr_vmpin_kb();
	pattern_fill(buf, len, 0x91, 0);
	ASSERT_EQ(0, drop_cap_ipc_lock());
	ret = uring_open(&u);
	if (ret == -ENOSYS || ret == -EPERM)
		SKIP(return, "io_uring disabled (%d)", ret);
	ASSERT_EQ(0, ret);
	ASSERT_EQ(0, vamr_register(fd, buf, len / 2, RW, 1, &h));
	ASSERT_EQ(0, syscall(__NR_io_uring_register, u.fd, IORING_REGISTER_BUFFERS, &iov, 1));
	pin1 = vamr_vmpin_kb();
	/* io_uring charges its 16 pages as well (the region 8). */
	EXPECT_EQ(pin0 + (long)(len / 1024 + len / 2 / 1024), pin1);
	ASSERT_EQ(0, vamr_unregister(fd, h));
	/* Now the whole range, registered over io_uring's pins. */
	ASSERT_EQ(0, vamr_register(fd, buf, len, RW, 1, &h));
	EXPECT_EQ(pin1 + (long)(len / 2 / 1024), vamr_vmpin_kb());
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.pages_pinned + len / PAGE, c.pages_pinned);
	EXPECT_EQ(PATTERN_OK, region_check(fd, h, buf, len, 0x91, 0, &err));

	/* munmap + mmap of pages 4..11, other bytes. */
	ASSERT_EQ(0, munmap(buf + 4 * PAGE, 8 * PAGE));
	ASSERT_EQ(0, remap_fixed(buf + 4 * PAGE, 8 * PAGE));
	pattern_fill(buf + 4 * PAGE, 8 * PAGE, 0x92, 4 * PAGE);
	/* The region: the new pages. */
	EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, h, buf, len, &err));
	EXPECT_EQ(PATTERN_OK, region_check(fd, h, buf + 4 * PAGE, 8 * PAGE, 0x92, 4 * PAGE, &err));
	/* io_uring: its old pages, whole. */
	mfd = memfd_create("vamr_hostile_uring", MFD_CLOEXEC);
	ASSERT_LE(0, mfd);
	ASSERT_EQ((int)len, uring_fixed(&u, IORING_OP_WRITE_FIXED, mfd, buf, len));
	ASSERT_EQ((ssize_t)len, pread(mfd, tmp, len, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(tmp, len, 0x91, 0));
	/* A READ_FIXED lands in io_uring's old pages: neither the CPU nor the region see it. */
	pattern_fill(tmp, len, 0x93, 0);
	ASSERT_EQ((ssize_t)len, pwrite(mfd, tmp, len, 0));
	ASSERT_EQ((int)len, uring_fixed(&u, IORING_OP_READ_FIXED, mfd, buf, len));
	EXPECT_EQ(PATTERN_OK, pattern_check(buf + 4 * PAGE, 8 * PAGE, 0x92, 4 * PAGE));
	EXPECT_EQ(PATTERN_OK, region_check(fd, h, buf + 4 * PAGE, 8 * PAGE, 0x92, 4 * PAGE, &err));
	/* Outside the remap both share the pages: the READ_FIXED's bytes, for both. */
	EXPECT_EQ(PATTERN_OK, pattern_check(buf, 4 * PAGE, 0x93, 0));
	EXPECT_EQ(PATTERN_OK, region_check(fd, h, buf, 4 * PAGE, 0x93, 0, &err));
	EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, h, buf, len, &err));

	/* Each lets go: VmPin back step by step (io_uring's charge is pin1 less the 8 pages). */
	EXPECT_EQ(0, vamr_unregister(fd, h));
	EXPECT_EQ(pin1 - (long)(len / 2 / 1024), vamr_vmpin_kb());
	ASSERT_EQ(0, syscall(__NR_io_uring_register, u.fd, IORING_UNREGISTER_BUFFERS, NULL, 0));
	EXPECT_EQ(pin0, vamr_vmpin_kb());
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.pages_pinned, c.pages_pinned);
	EXPECT_EQ(c0.regions, c.regions);
	close(u.fd);
	close(mfd);
	free(tmp);
	close(fd);
}

/* ---------------------------------------------------------------------- */
/* 5. Another process: process_madvise, process_vm_writev                 */
/* ---------------------------------------------------------------------- */

/*
 * Runs fn(arg) in a child process (another mm, another process) and
 * returns its exit status.
 */
static int in_other_process(int (*fn)(void *), void *arg)
{
	pid_t pid = fork();

	if (pid < 0)
		return -1;
	if (pid == 0)
		_exit(fn(arg));
	return wait_exit(pid);
}

struct remote_op {
	pid_t target;
	struct iovec iov[4];
	int n;
	int advice;
	uint64_t seed;
};

static int do_process_madvise(void *arg)
{
	struct remote_op *op = arg;
	int pfd = pidfd_open(op->target);

	if (pfd < 0)
		return 10;
	if (syscall(__NR_process_madvise, pfd, op->iov, op->n, op->advice, 0) < 0)
		return errno == EINVAL || errno == ENOSYS ? 11 : 12;
	return 0;
}

static int do_process_vm_writev(void *arg)
{
	struct remote_op *op = arg;
	struct iovec local[4];
	ssize_t want = 0;
	size_t off = 0;
	int i;

	/* Local buffers: pattern (seed, offset within the remote iovecs, summed). */
	for (i = 0; i < op->n; i++) {
		local[i].iov_base = malloc(op->iov[i].iov_len);
		local[i].iov_len = op->iov[i].iov_len;
		pattern_fill(local[i].iov_base, local[i].iov_len, op->seed, off);
		off += op->iov[i].iov_len;
		want += op->iov[i].iov_len;
	}
	return process_vm_writev(op->target, local, op->n, op->iov, op->n, 0) == want ? 0 : 13;
}

/*
 * process_madvise(MADV_COLD, then MADV_PAGEOUT) from another process over
 * the owner's registered memory: private anonymous memory (pinned, and part
 * of it released with MADV_DONTNEED and touched again, so not pinned: those
 * pages can really be swapped out), and shared memory (memfd, whose pinned
 * pages pageout can unmap). After each, reads through the region, and
 * through a VA MR by a peer, are exactly what the owner's CPU sees, and
 * writes through them are what the CPU reads.
 */
TEST(process_madvise_from_other_process)
{
	const size_t len = 32 * PAGE;
	uint8_t *anon = map_anon(len), *shm, *tmp = malloc(len), *land;
	struct rdma_pair p = { 0 };
	struct ibv_mr *mr = NULL, *lmr = NULL;
	struct vamr_counters c0, c;
	struct remote_op op;
	int fd, mfd, err, st, round;
	uint32_t ha, hs;
	bool rdma;

	ASSERT_NE(NULL, anon);
	fd = vamr_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, gcounters(fd, &c0));
	mfd = memfd_create("vamr_hostile_shm", MFD_CLOEXEC);
	ASSERT_LE(0, mfd);
	ASSERT_EQ(0, ftruncate(mfd, len));
	shm = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	ASSERT_NE(MAP_FAILED, shm);
	land = map_anon(len);
	ASSERT_NE(NULL, land);
	pattern_fill(anon, len, 0xa1, 0);
	pattern_fill(shm, len, 0xa2, 0);
	ASSERT_EQ(0, vamr_register(fd, anon, len, RW, 1, &ha));
	ASSERT_EQ(0, vamr_register(fd, shm, len, VAMR_ACCESS_READ, 2, &hs));
	rdma = rdma_pair_open(&p, NULL) == 0;
	if (rdma) {
		ASSERT_EQ(0, rdma_pair_reg_mr(&p, anon, len, ACC | VAMR_ACCESS_VA, &mr));
		ASSERT_EQ(0, rdma_pair_reg_mr(&p, land, len, ACC, &lmr));
	}
	/* Pages 8..15 of the anonymous memory: released, touched again, not pinned now. */
	ASSERT_EQ(0, madvise(anon + 8 * PAGE, 8 * PAGE, MADV_DONTNEED));
	usleep(20000);
	pattern_fill(anon + 8 * PAGE, 8 * PAGE, 0xa3, 0);

	for (round = 0; round < 2; round++) {
		op = (struct remote_op){ .target = getpid(), .n = 2,
					 .advice = round ? MADV_PAGEOUT : MADV_COLD };
		op.iov[0] = (struct iovec){ anon, len };
		op.iov[1] = (struct iovec){ shm, len };
		st = in_other_process(do_process_madvise, &op);
		if (st == 11)
			SKIP(return, "process_madvise unsupported");
		ASSERT_EQ(0, st);
		usleep(20000);
		EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, ha, anon, len, &err));
		EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, hs, shm, len, &err));
		EXPECT_EQ(PATTERN_OK, pattern_check(anon + 8 * PAGE, 8 * PAGE, 0xa3, 0));
		EXPECT_EQ(PATTERN_OK, pattern_check(shm, len, 0xa2, 0));
		if (rdma) {
			ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_read_sync(&p, 0, land, lmr->lkey,
								      (uintptr_t)anon, mr->rkey,
								      len, 0));
			EXPECT_EQ(0, memcmp(land, anon, len));
		}
		/* Writes: through the region, and through the shared file. */
		pattern_fill(tmp, len, 0xb0 + round, 0);
		ASSERT_EQ(0, vamr_write(fd, ha, anon, tmp, len));
		EXPECT_EQ(PATTERN_OK, pattern_check(anon, len, 0xb0 + round, 0));
		pattern_fill(tmp, len, 0xb2 + round, 0);
		ASSERT_EQ((ssize_t)len, pwrite(mfd, tmp, len, 0));
		EXPECT_EQ(PATTERN_OK, region_check(fd, hs, shm, len, 0xb2 + round, 0, &err));
		if (rdma) {
			pattern_fill(land, len, 0xb4 + round, 0);
			ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_write_sync(&p, 0, land, lmr->lkey,
								       (uintptr_t)anon, mr->rkey,
								       len, 0));
			EXPECT_EQ(PATTERN_OK, pattern_check(anon, len, 0xb4 + round, 0));
			EXPECT_EQ(PATTERN_OK, region_check(fd, ha, anon, len, 0xb4 + round, 0,
							   &err));
		}
		/* Unpinned again for the next round. */
		ASSERT_EQ(0, madvise(anon + 8 * PAGE, 8 * PAGE, MADV_DONTNEED));
		usleep(20000);
		pattern_fill(anon + 8 * PAGE, 8 * PAGE, 0xa3, 0);
		pattern_fill(shm, len, 0xa2, 0);
	}
	if (rdma) {
		ibv_dereg_mr(mr);
		ibv_dereg_mr(lmr);
		rdma_pair_close(&p);
	}
	EXPECT_EQ(0, vamr_unregister(fd, ha));
	EXPECT_EQ(0, vamr_unregister(fd, hs));
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.pages_pinned, c.pages_pinned);
	EXPECT_EQ(c0.regions, c.regions);
	munmap(shm, len);
	close(mfd);
	free(tmp);
	close(fd);
}

/*
 * process_vm_writev() from another process into the owner's registered
 * memory: written anonymous pages (pinned for writing), a read-only region
 * over memory never touched (the shared zero page: the write replaces it),
 * a read-only region over a private file mapping (a read pin of the page
 * cache page: the write makes a private copy), and pages released with
 * MADV_DONTNEED. The region, and a peer's RDMA READ of a VA MR, then return
 * exactly the bytes the owner's CPU sees, which are the writer's.
 */
TEST(process_vm_writev_from_other_process)
{
	const size_t len = 16 * PAGE;
	uint8_t *anon = map_anon(len), *zero = map_anon(len), *priv, *land, *tmp = malloc(len);
	struct rdma_pair p = { 0 };
	struct ibv_mr *mr = NULL, *zmr = NULL, *lmr = NULL;
	struct vamr_counters c0, c;
	struct remote_op op;
	int fd, mfd, err, st;
	uint32_t ha, hz, hp;
	bool rdma;

	ASSERT_NE(NULL, anon);
	ASSERT_NE(NULL, zero);
	fd = vamr_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, gcounters(fd, &c0));
	mfd = memfd_create("vamr_hostile_priv", MFD_CLOEXEC);
	ASSERT_LE(0, mfd);
	pattern_fill(tmp, len, 0xc0, 0);
	ASSERT_EQ((ssize_t)len, pwrite(mfd, tmp, len, 0));
	priv = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, mfd, 0);
	ASSERT_NE(MAP_FAILED, priv);
	/* Read-fault the private file pages in: the page cache's pages are mapped. */
	EXPECT_EQ(PATTERN_OK, pattern_check(priv, len, 0xc0, 0));
	land = map_anon(len);
	ASSERT_NE(NULL, land);
	pattern_fill(anon, len, 0xc1, 0);
	ASSERT_EQ(0, vamr_register(fd, anon, len, RW, 1, &ha));
	ASSERT_EQ(0, vamr_register(fd, zero, len, VAMR_ACCESS_READ, 2, &hz));
	ASSERT_EQ(0, vamr_register(fd, priv, len, VAMR_ACCESS_READ, 3, &hp));
	EXPECT_EQ(PATTERN_OK, region_check(fd, hp, priv, len, 0xc0, 0, &err));
	memset(tmp, 0xff, len);
	ASSERT_EQ(0, vamr_read(fd, hz, zero, tmp, len));
	EXPECT_EQ(0, tmp[0]);
	EXPECT_EQ(0, tmp[len - 1]);
	rdma = rdma_pair_open(&p, NULL) == 0;
	if (rdma) {
		ASSERT_EQ(0, rdma_pair_reg_mr(&p, anon, len, ACC | VAMR_ACCESS_VA, &mr));
		ASSERT_EQ(0, rdma_pair_reg_mr(&p, zero, len, IBV_ACCESS_REMOTE_READ |
						 VAMR_ACCESS_VA, &zmr));
		ASSERT_EQ(0, rdma_pair_reg_mr(&p, land, len, ACC, &lmr));
	}
	/* Part of the anonymous memory released. */
	ASSERT_EQ(0, madvise(anon + 12 * PAGE, 4 * PAGE, MADV_DONTNEED));

	/* The writer: odd ranges across pages, in all three. */
	op = (struct remote_op){ .target = getpid(), .n = 4, .seed = 0xc2 };
	op.iov[0] = (struct iovec){ anon + 100, 5 * PAGE };
	op.iov[1] = (struct iovec){ anon + 11 * PAGE + 7, 4 * PAGE + 9 };
	op.iov[2] = (struct iovec){ zero + PAGE - 3, 6 * PAGE };
	op.iov[3] = (struct iovec){ priv + 2 * PAGE + 1, 9 * PAGE };
	st = in_other_process(do_process_vm_writev, &op);
	ASSERT_EQ(0, st);
	/* The CPU sees the writer's bytes where it wrote. */
	EXPECT_EQ(PATTERN_OK, pattern_check(anon + 100, 5 * PAGE, 0xc2, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(anon + 11 * PAGE + 7, 4 * PAGE + 9, 0xc2, 5 * PAGE));
	EXPECT_EQ(PATTERN_OK, pattern_check(zero + PAGE - 3, 6 * PAGE, 0xc2, 9 * PAGE + 9));
	EXPECT_EQ(PATTERN_OK, pattern_check(priv + 2 * PAGE + 1, 9 * PAGE, 0xc2,
					    15 * PAGE + 9));
	/*
	 * The regions see exactly what the CPU sees: the anonymous one at once
	 * (an access meets the pins the writes made suspect and pins again),
	 * the others after the verify pass ran (it must swap the old pins for
	 * the new pages itself).
	 */
	EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, ha, anon, len, &err));
	usleep(50000);
	EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, hz, zero, len, &err));
	EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, hp, priv, len, &err));
	EXPECT_EQ(PATTERN_OK, region_check(fd, hz, zero + PAGE - 3, 6 * PAGE, 0xc2,
					   9 * PAGE + 9, &err));
	EXPECT_EQ(PATTERN_OK, region_check(fd, hp, priv + 2 * PAGE + 1, 9 * PAGE, 0xc2,
					   15 * PAGE + 9, &err));
	/* The file itself kept its bytes (the write went to private copies). */
	ASSERT_EQ((ssize_t)len, pread(mfd, tmp, len, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(tmp, len, 0xc0, 0));
	if (rdma) {
		ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_read_sync(&p, 0, land, lmr->lkey,
							      (uintptr_t)anon, mr->rkey, len, 0));
		EXPECT_EQ(0, memcmp(land, anon, len));
		ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_read_sync(&p, 0, land, lmr->lkey,
							      (uintptr_t)zero, zmr->rkey, len, 0));
		EXPECT_EQ(0, memcmp(land, zero, len));
		ibv_dereg_mr(mr);
		ibv_dereg_mr(zmr);
		ibv_dereg_mr(lmr);
		rdma_pair_close(&p);
	}
	EXPECT_EQ(0, vamr_unregister(fd, ha));
	EXPECT_EQ(0, vamr_unregister(fd, hz));
	EXPECT_EQ(0, vamr_unregister(fd, hp));
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.pages_pinned, c.pages_pinned);
	EXPECT_EQ(c0.regions, c.regions);
	munmap(priv, len);
	close(mfd);
	free(tmp);
	close(fd);
}

/*
 * process_madvise(MADV_COLLAPSE) from another process over 2 MiB of the
 * owner's registered memory that the region does not pin at that moment
 * (released with MADV_DONTNEED, written again by the CPU): the kernel may
 * replace the 512 pages by one huge page; the region then reads and writes
 * exactly what the CPU sees. Pinned, the range is not collapsed (pinned
 * pages refuse it) and nothing changes either.
 */
TEST(process_madvise_collapse_from_other_process)
{
	const size_t len = 2ul << 20;
	uint8_t *buf = map_aligned_2m(len), *tmp = malloc(len);
	struct vamr_counters c0, c;
	struct remote_op op;
	int fd, err, st, round;
	uint32_t h;

	ASSERT_NE(NULL, buf);
	ASSERT_EQ(0, madvise(buf, len, MADV_HUGEPAGE));
	fd = vamr_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, gcounters(fd, &c0));
	pattern_fill(buf, len, 0xe8, 0);
	ASSERT_EQ(0, vamr_register(fd, buf, len, RW, 1, &h));
	for (round = 0; round < 2; round++) {
		if (round == 1) {
			/* Not pinned now: released, then written again by the CPU. */
			ASSERT_EQ(0, madvise(buf, len, MADV_DONTNEED));
			ASSERT_EQ(0ull, vamr_wait_counter(fd, h, offsetof(struct vamr_counters,
									   pages_pinned),
							  0, 2000));
			pattern_fill(buf, len, 0xe9, 0);
		}
		op = (struct remote_op){ .target = getpid(), .n = 1, .advice = MADV_COLLAPSE };
		op.iov[0] = (struct iovec){ buf, len };
		st = in_other_process(do_process_madvise, &op);
		if (st == 11)
			SKIP(return, "process_madvise(MADV_COLLAPSE) unsupported");
		/* Collapsed (0) or refused (12: EAGAIN, EBUSY, ENOMEM...): the region agrees. */
		EXPECT_TRUE(st == 0 || st == 12);
		TH_LOG("round %d: collapse %s, AnonHugePages %ld kB", round,
		       st ? "refused" : "done", anon_huge_kb(buf));
		usleep(20000);
		EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, h, buf, len, &err));
		EXPECT_EQ(PATTERN_OK, pattern_check(buf, len, round ? 0xe9 : 0xe8, 0));
		pattern_fill(tmp, len, 0xea + round, 0);
		ASSERT_EQ(0, vamr_write(fd, h, buf, tmp, len));
		EXPECT_EQ(PATTERN_OK, pattern_check(buf, len, 0xea + round, 0));
		EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, h, buf, len, &err));
	}
	EXPECT_EQ(0, vamr_unregister(fd, h));
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.pages_pinned, c.pages_pinned);
	EXPECT_EQ(c0.regions, c.regions);
	munmap(buf, len);
	free(tmp);
	close(fd);
}

struct mem_write {
	pid_t target;
	uint8_t *addr;
	size_t len;
	uint64_t seed;
};

static int do_proc_mem_write(void *arg)
{
	struct mem_write *w = arg;
	uint8_t *b = malloc(w->len);
	char path[64];
	int fd;

	/* FOLL_FORCE through /proc/pid/mem needs the writer to be the tracer (PROC_MEM_FORCE_PTRACE). */
	if (ptrace(PTRACE_SEIZE, w->target, 0, 0))
		return 10;
	snprintf(path, sizeof(path), "/proc/%d/mem", w->target);
	fd = open(path, O_RDWR);
	if (fd < 0)
		return 10;
	pattern_fill(b, w->len, w->seed, 0);
	return pwrite(fd, b, w->len, (off_t)(uintptr_t)w->addr) == (ssize_t)w->len ? 0 : 11;
}

/*
 * A write through /proc/<pid>/mem (FOLL_FORCE, by a tracer) from another process into
 * read-only memory (mprotect(PROT_READ) after it was written) that a
 * read-only region and a read-only VA MR pin, and into read-only memory
 * never touched (the zero page): the region and a peer's READ then return
 * exactly the bytes the owner's CPU sees, which are the writer's.
 */
TEST(proc_mem_force_write_from_other_process)
{
	const size_t len = 8 * PAGE;
	uint8_t *ro = map_anon(len), *zero = map_anon(len), *land = map_anon(len);
	struct rdma_pair p = { 0 };
	struct ibv_mr *mr = NULL, *lmr = NULL;
	struct vamr_counters c0, c;
	struct mem_write w;
	int fd, err, st;
	uint32_t h, hz;
	bool rdma;

	ASSERT_NE(NULL, ro);
	ASSERT_NE(NULL, zero);
	ASSERT_NE(NULL, land);
	fd = vamr_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, gcounters(fd, &c0));
	pattern_fill(ro, len, 0xf5, 0);
	ASSERT_EQ(0, mprotect(ro, len, PROT_READ));
	ASSERT_EQ(0, mprotect(zero, len, PROT_READ));
	ASSERT_EQ(0, vamr_register(fd, ro, len, VAMR_ACCESS_READ, 1, &h));
	ASSERT_EQ(0, vamr_register(fd, zero, len, VAMR_ACCESS_READ, 2, &hz));
	rdma = rdma_pair_open(&p, NULL) == 0;
	if (rdma) {
		ASSERT_EQ(0, rdma_pair_reg_mr(&p, ro, len, IBV_ACCESS_REMOTE_READ | VAMR_ACCESS_VA,
					      &mr));
		ASSERT_EQ(0, rdma_pair_reg_mr(&p, land, len, ACC, &lmr));
	}
	w = (struct mem_write){ .target = getpid(), .addr = ro + 3 * PAGE + 11,
				.len = 2 * PAGE, .seed = 0xf6 };
	st = in_other_process(do_proc_mem_write, &w);
	if (st == 10)
		SKIP(return, "/proc/pid/mem not writable");
	ASSERT_EQ(0, st);
	w = (struct mem_write){ .target = getpid(), .addr = zero + PAGE - 5,
				.len = 3 * PAGE, .seed = 0xf7 };
	ASSERT_EQ(0, in_other_process(do_proc_mem_write, &w));
	EXPECT_EQ(PATTERN_OK, pattern_check(ro + 3 * PAGE + 11, 2 * PAGE, 0xf6, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(ro, 3 * PAGE + 11, 0xf5, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(zero + PAGE - 5, 3 * PAGE, 0xf7, 0));
	/* After the verify pass (it must swap the zero page's pins for the new pages). */
	usleep(50000);
	EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, h, ro, len, &err));
	EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, hz, zero, len, &err));
	EXPECT_EQ(PATTERN_OK, region_check(fd, hz, zero + PAGE - 5, 3 * PAGE, 0xf7, 0, &err));
	if (rdma) {
		ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_read_sync(&p, 0, land, lmr->lkey,
							      (uintptr_t)ro, mr->rkey, len, 0));
		EXPECT_EQ(0, memcmp(land, ro, len));
		ibv_dereg_mr(mr);
		ibv_dereg_mr(lmr);
		rdma_pair_close(&p);
	}
	EXPECT_EQ(0, vamr_unregister(fd, h));
	EXPECT_EQ(0, vamr_unregister(fd, hz));
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.pages_pinned, c.pages_pinned);
	EXPECT_EQ(c0.regions, c.regions);
	close(fd);
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], HELPER_ARG))
		return helper_main(argc, argv);
	return test_harness_run(argc, argv);
}
