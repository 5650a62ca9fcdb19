// SPDX-License-Identifier: GPL-2.0
/*
 * /dev/vamr used by an ordinary user (uid 65534, no capabilities), and kept
 * apart from other processes: each test forks a child that drops to that uid,
 * opens /dev/vamr itself (mode 0666, as udev/60-vamr.rules sets it), and
 * tries to reach what belongs to its parent: regions by handle, MRs by key
 * (VAMR_IOC_MR_QUERY), events and counters. Everything it does not own gets
 * the answer of something missing (ENOENT), or EPERM for a file opened by
 * another address space; what it owns works, within its RLIMIT_MEMLOCK.
 * Needs tests/kapi/vamr_api_test.ko for the MR tests (skipped without it).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "pattern.h"
#include "vamr_lib.h"
#include "../kapi/vamr_api_test.h"

#define PAGE 4096ul
#define RW (VAMR_ACCESS_READ | VAMR_ACCESS_WRITE)
#define NOBODY 65534

/* Drops to uid/gid NOBODY with no supplementary groups and no capabilities. */
static int become_nobody(void)
{
	if (setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY))
		return -errno;
	return geteuid() == NOBODY ? 0 : -EPERM;
}

/*
 * Runs @fn in a child as NOBODY and returns its exit status (0: all its checks
 * passed; otherwise the number of the first failed check).
 */
static int as_nobody(int (*fn)(void *), void *arg)
{
	pid_t pid = fork();
	int status;

	if (pid < 0)
		return -1;
	if (pid == 0) {
		if (become_nobody())
			_exit(100);
		_exit(fn(arg));
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
		return -1;
	return WEXITSTATUS(status);
}

/* Registers [a, a + len) for reading and writing: the handle, or -errno. */
static int reg(int fd, const void *a, size_t len, uint64_t cookie)
{
	uint32_t h;
	int ret = vamr_register(fd, a, len, RW, cookie, &h);

	return ret ? ret : (int)h;
}

/* The parent's region, as the child sees it. */
struct parent_region {
	uint32_t handle;
	uint8_t *addr;
	size_t len;
	int parent_fd;		/* inherited across fork: another address space's file */
	uint32_t key;		/* of the kapi MR, or 0 */
};

/* An unprivileged process uses /dev/vamr for its own memory. */
static int child_own_region(void *unused __attribute__((unused)))
{
	size_t len = 16 * PAGE;
	uint8_t *a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t buf[256];
	struct vamr_query q = { 0 };
	struct rlimit lim;
	int fd = vamr_open();
	int h;

	if (fd < 0)
		return 1;
	if (vamr_ioctl(fd, VAMR_IOC_QUERY, &q) || !(q.features & VAMR_FEATURE_REGIONS))
		return 2;
	pattern_fill(a, len, 5, 0);
	h = reg(fd, a, len, 7);
	if (h < 0)
		return 3;
	if (vamr_read(fd, h, a + 100, buf, sizeof(buf)) ||
	    pattern_check(buf, sizeof(buf), 5, 100) != PATTERN_OK)
		return 4;
	/* Follows a remap for an unprivileged owner too. */
	if (mmap(a, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != a)
		return 5;
	pattern_fill(a, len, 6, 0);
	if (vamr_read(fd, h, a + 100, buf, sizeof(buf)) ||
	    pattern_check(buf, sizeof(buf), 6, 100) != PATTERN_OK)
		return 6;
	if (vamr_unregister(fd, h))
		return 7;
	/* The memlock limit holds without CAP_IPC_LOCK: twice the limit is refused. */
	if (getrlimit(RLIMIT_MEMLOCK, &lim) || lim.rlim_cur == RLIM_INFINITY)
		return 0;
	{
		size_t big = 2 * lim.rlim_cur + PAGE;
		uint8_t *b = mmap(NULL, big, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
				  -1, 0);

		if (b == MAP_FAILED)
			return 8;
		if (reg(fd, b, big, 8) != -ENOMEM)
			return 9;
	}
	close(fd);
	return 0;
}

TEST(unprivileged_process_uses_its_own_memory)
{
	ASSERT_EQ(0, as_nobody(child_own_region, NULL));
}

/* Another process's regions, by handle on its own file and through an inherited one. */
static int child_reaches_parent_region(void *arg)
{
	struct parent_region *p = arg;
	struct vamr_stats s = { .handle = p->handle };
	struct vamr_events_open eo = { 0 };
	struct vamr_prefetch pf = { .addr = (uintptr_t)p->addr, .len = PAGE, .handle = p->handle };
	uint8_t buf[64];
	int fd = vamr_open();

	if (fd < 0)
		return 1;
	/* Its own file has no such handle: the answer for a missing handle. */
	if (vamr_read(fd, p->handle, p->addr, buf, sizeof(buf)) != -ENOENT)
		return 2;
	if (vamr_write(fd, p->handle, p->addr, buf, sizeof(buf)) != -ENOENT)
		return 3;
	if (vamr_ioctl(fd, VAMR_IOC_STATS, &s) != -ENOENT)
		return 4;
	if (vamr_unregister(fd, p->handle) != -ENOENT)
		return 5;
	if (vamr_ioctl(fd, VAMR_IOC_PREFETCH, &pf) != -ENOENT)
		return 6;
	/* The parent's file, inherited: bound to the parent's address space. */
	if (vamr_read(p->parent_fd, p->handle, p->addr, buf, sizeof(buf)) != -EPERM)
		return 7;
	if (vamr_write(p->parent_fd, p->handle, p->addr, buf, sizeof(buf)) != -EPERM)
		return 8;
	if (vamr_ioctl(p->parent_fd, VAMR_IOC_STATS, &s) != -EPERM)
		return 9;
	if (vamr_ioctl(p->parent_fd, VAMR_IOC_EVENTS_OPEN, &eo) != -EPERM)
		return 10;
	if (vamr_unregister(p->parent_fd, p->handle) != -EPERM)
		return 11;
	if (reg(p->parent_fd, p->addr, PAGE, 1) != -EPERM)
		return 12;
	close(fd);
	return 0;
}

TEST(unprivileged_process_cannot_reach_another_processes_regions)
{
	struct parent_region p = { .len = 4 * PAGE };
	struct vamr_stats s;
	uint8_t buf[64];
	int fd = vamr_open();
	int h;

	ASSERT_LE(0, fd);
	p.addr = mmap(NULL, p.len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, p.addr);
	pattern_fill(p.addr, p.len, 9, 0);
	h = reg(fd, p.addr, p.len, 1);
	ASSERT_LE(0, h);
	p.handle = h;
	p.parent_fd = fd;
	ASSERT_EQ(0, as_nobody(child_reaches_parent_region, &p));
	/* Nothing the child tried changed the region or its bytes. */
	ASSERT_EQ(0, vamr_read(fd, h, p.addr, buf, sizeof(buf)));
	EXPECT_EQ(PATTERN_OK, pattern_check(buf, sizeof(buf), 9, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(p.addr, p.len, 9, 0));
	memset(&s, 0, sizeof(s));
	s.handle = h;
	ASSERT_EQ(0, vamr_ioctl(fd, VAMR_IOC_STATS, &s));
	EXPECT_EQ(4u, s.counters.pages_pinned);
	EXPECT_EQ(0, vamr_unregister(fd, h));
	close(fd);
	munmap(p.addr, p.len);
}

/* Another process's MR, by device and key: the answer of a missing key. */
static int child_queries_parent_mr(void *arg)
{
	struct parent_region *p = arg;
	struct vamr_mr_query q = { .key = p->key, .ib_index = VAMR_API_TEST_IB_INDEX };
	struct vamr_mr_query missing = { .key = p->key + 1, .ib_index = VAMR_API_TEST_IB_INDEX };
	struct vamr_device_info d = { 0 };
	int fd = vamr_open();
	int found = 0;

	if (fd < 0)
		return 1;
	if (vamr_ioctl(fd, VAMR_IOC_MR_QUERY, &q) != -ENOENT)
		return 2;
	if (q.addr || q.len || q.counters.pages_pinned)
		return 3;
	if (vamr_ioctl(fd, VAMR_IOC_MR_QUERY, &missing) != -ENOENT)
		return 4;
	/* Discovery is open to everyone. */
	for (d.pos = 0; !vamr_ioctl(fd, VAMR_IOC_DEVICE, &d); d.pos++)
		found |= d.ib_index == VAMR_API_TEST_IB_INDEX;
	if (!found)
		return 5;
	close(fd);
	return 0;
}

TEST(unprivileged_process_cannot_query_another_processes_mr)
{
	struct parent_region p = { .len = 2 * PAGE, .key = 0x51a7e0 };
	struct vamr_api_test_arg x = { .len = 2 * PAGE, .access = RW, .compare = 0x51a7e0 };
	struct vamr_mr_query q = { .key = 0x51a7e0, .ib_index = VAMR_API_TEST_IB_INDEX };
	int kfd = open("/dev/vamr_api_test", O_RDWR | O_CLOEXEC);
	int vfd = vamr_open();

	if (kfd < 0 && errno == ENOENT)
		SKIP(return, "vamr_api_test.ko not loaded");
	ASSERT_LE(0, kfd);
	ASSERT_LE(0, vfd);
	p.addr = mmap(NULL, p.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, p.addr);
	x.addr = (uintptr_t)p.addr;
	ASSERT_EQ(0, ioctl(kfd, VAMR_API_TEST_CREATE, &x));
	/* Positive control: the owner finds it. */
	ASSERT_EQ(0, vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q));
	EXPECT_EQ((uintptr_t)p.addr, q.addr);
	ASSERT_EQ(0, as_nobody(child_queries_parent_mr, &p));
	ASSERT_EQ(0, ioctl(kfd, VAMR_API_TEST_DESTROY));
	close(kfd);
	close(vfd);
	munmap(p.addr, p.len);
}

/* Events of another process's region never reach the child's event file. */
static int child_events_stay_apart(void *arg)
{
	struct parent_region *p = arg;
	struct vamr_events_open eo = { .flags = VAMR_EVENTS_NONBLOCK };
	struct vamr_event ev;
	int fd = vamr_open(), efd;

	if (fd < 0)
		return 1;
	if (vamr_ioctl(fd, VAMR_IOC_EVENTS_OPEN, &eo))
		return 2;
	efd = eo.fd;
	/* Tell the parent to remap its region, then wait until it did. */
	if (write(p->parent_fd, "g", 1) != 1)
		return 3;
	if (read(p->handle, &ev, 1) != 1)	/* handle: the "done" pipe here */
		return 4;
	if (read(efd, &ev, sizeof(ev)) != -1 || errno != EAGAIN)
		return 5;
	close(efd);
	close(fd);
	return 0;
}

TEST(events_of_another_process_stay_apart)
{
	int go[2], done[2], fd = vamr_open(), h;
	struct parent_region p = { .len = 2 * PAGE };
	struct vamr_events_open eo = { .flags = VAMR_EVENTS_NONBLOCK };
	struct vamr_event ev;
	pid_t pid;
	int status;
	char c;

	ASSERT_LE(0, fd);
	ASSERT_EQ(0, pipe(go));
	ASSERT_EQ(0, pipe(done));
	p.addr = mmap(NULL, p.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, p.addr);
	memset(p.addr, 1, p.len);
	ASSERT_EQ(0, vamr_ioctl(fd, VAMR_IOC_EVENTS_OPEN, &eo));
	h = reg(fd, p.addr, p.len, 77);
	ASSERT_LE(0, h);
	p.parent_fd = go[1];
	p.handle = done[0];
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0)
		_exit(become_nobody() ? 100 : child_events_stay_apart(&p));
	ASSERT_EQ(1, read(go[0], &c, 1));
	ASSERT_EQ(0, madvise(p.addr, PAGE, MADV_DONTNEED));
	ASSERT_EQ(1, write(done[1], "d", 1));
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_EQ(0, WEXITSTATUS(status));
	/* Positive control: the owner got the record. */
	ASSERT_EQ((ssize_t)sizeof(ev), read(eo.fd, &ev, sizeof(ev)));
	EXPECT_EQ(77u, ev.cookie);
	EXPECT_EQ((uintptr_t)p.addr, ev.addr);
	EXPECT_EQ(0, vamr_unregister(fd, h));
	close(eo.fd);
	close(fd);
	munmap(p.addr, p.len);
}

TEST_HARNESS_MAIN
