// SPDX-License-Identifier: GPL-2.0
/*
 * vamr_bounded: every long operation on a region is bounded, interruptible
 * and cancelled by teardown; prefetch honours the advice flags; the
 * per-process region limit holds (the reliability issue's reproducers, over
 * /dev/vamr).
 *
 * - VMAs whose protection refuses the access are skipped a VMA at a time (a
 *   1 GiB PROT_NONE region registers and prefetches at once, where a
 *   page-by-page crawl takes seconds).
 * - A pin crawl over pages that fail one by one (a shmem mapping past EOF)
 *   ends at once when another thread unregisters the region (ECANCELED) and
 *   when the process is killed.
 * - VAMR_PREFETCH_NO_FAULT pins present pages only and faults nothing in;
 *   a read prefetch pins read-only pages that a write prefetch refuses; a
 *   write through a read pin upgrades it and reaches the page the CPU sees.
 * - max_regions_per_mm (module parameter) caps the regions of a process
 *   (ENOSPC), counts across files, and handles are reused lowest-first.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "mm_util.h"
#include "pattern.h"
#include "sys_guard.h"
#include "vamr_lib.h"

#define PAGE 4096ul
#define RW (VAMR_ACCESS_READ | VAMR_ACCESS_WRITE)
#define GIB (1ul << 30)
#define LIMIT_PARAM "/sys/module/vamr/parameters/max_regions_per_mm"

static int prefetch_flags(int fd, uint32_t h, void *addr, uint64_t len, uint32_t flags,
			  uint32_t *pages)
{
	struct vamr_prefetch p = {
		.addr = (uintptr_t)addr, .len = len, .handle = h, .flags = flags,
	};
	int ret = vamr_ioctl(fd, VAMR_IOC_PREFETCH, &p);

	if (!ret && pages)
		*pages = p.pages;
	return ret;
}

static uint64_t pinned(int fd, uint32_t h)
{
	struct vamr_stats s;

	return vamr_stats(fd, h, &s) ? (uint64_t)-1 : s.counters.pages_pinned;
}

/* A MAP_SHARED mapping of len bytes of a memfd truncated to 0: every page SIGBUSes. */
static uint8_t *map_past_eof(size_t len)
{
	int mfd = memfd_create("vamr_past_eof", MFD_CLOEXEC);
	void *p;

	if (mfd < 0)
		return NULL;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	close(mfd);
	return p == MAP_FAILED ? NULL : p;
}

FIXTURE(bounded)
{
	int fd;
	long vmpin0;
};

FIXTURE_SETUP(bounded)
{
	self->fd = vamr_open();
	ASSERT_LE(0, self->fd) TH_LOG("open /dev/vamr: %s", strerror(-self->fd));
	self->vmpin0 = vamr_vmpin_kb();
}

FIXTURE_TEARDOWN(bounded)
{
	/* The region limit, if a test changed it (also restored when a test is killed). */
	sys_guard_restore();
	close(self->fd);
	/* Closing the file tears every region down: nothing stays pinned. */
	EXPECT_EQ(self->vmpin0, vamr_vmpin_kb());
}

/* 1 GiB of PROT_NONE: registration and prefetch skip the VMA in one step. */
TEST_F(bounded, prot_none_vma_skipped_whole)
{
	uint8_t *a = mmap(NULL, GIB + PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
			  -1, 0);
	uint32_t h, pages = 0;
	double t0, t_reg, t_pf;
	uint8_t buf[64];

	ASSERT_NE(MAP_FAILED, a);
	/* One readable page after the PROT_NONE VMA, with position-dependent data. */
	ASSERT_EQ(0, mprotect(a + GIB, PAGE, PROT_READ | PROT_WRITE));
	pattern_fill(a + GIB, PAGE, 71, 0);
	t0 = mono_s();
	ASSERT_EQ(0, vamr_register(self->fd, a, GIB + PAGE, RW, 1, &h));
	t_reg = mono_s() - t0;
	EXPECT_EQ(1u, pinned(self->fd, h));
	t0 = mono_s();
	EXPECT_EQ(0, prefetch_flags(self->fd, h, a, GIB + PAGE, 0, &pages));
	t_pf = mono_s() - t0;
	EXPECT_EQ(0u, pages);	/* the readable page was pinned already */
	EXPECT_EQ(-EFAULT, prefetch_flags(self->fd, h, a, GIB, 0, NULL));
	/* 262144 refused pages crawled one by one take seconds; a VMA skip takes microseconds. */
	EXPECT_GT(1.0, t_reg) TH_LOG("registration took %.3f s", t_reg);
	EXPECT_GT(1.0, t_pf) TH_LOG("prefetch took %.3f s", t_pf);
	EXPECT_EQ(-EFAULT, vamr_read(self->fd, h, a + 5 * PAGE, buf, sizeof(buf)));
	EXPECT_EQ(0, vamr_read(self->fd, h, a + GIB + 100, buf, sizeof(buf)));
	EXPECT_EQ(PATTERN_OK, pattern_check(buf, sizeof(buf), 71, 100));
	EXPECT_EQ(0, vamr_unregister(self->fd, h));
	munmap(a, GIB + PAGE);
}

struct crawl {
	int fd;
	uint32_t h;
	uint8_t *a;
	size_t len;
	int ret;
	double took;
};

static void *crawl_prefetch(void *arg)
{
	struct crawl *c = arg;
	double t0 = mono_s();

	c->ret = prefetch_flags(c->fd, c->h, c->a, c->len, 0, NULL);
	c->took = mono_s() - t0;
	return NULL;
}

/*
 * A prefetch crawling pages that fail one at a time (past EOF) is cancelled
 * by UNREGISTER from another thread: both return at once.
 */
TEST_F(bounded, unregister_cancels_a_crawl)
{
	struct crawl c = { .fd = self->fd, .len = GIB };
	struct vamr_stats g;
	pthread_t t;
	double t0, t_unreg;

	int mfd = memfd_create("vamr_past_eof", MFD_CLOEXEC);

	ASSERT_LE(0, mfd);
	/* Register over a hole (skipped in one step), then map the empty file there. */
	c.a = map_anon(c.len);
	ASSERT_NE(NULL, c.a);
	ASSERT_EQ(0, munmap(c.a, c.len));
	ASSERT_EQ(0, vamr_register(self->fd, c.a, c.len, VAMR_ACCESS_READ, 2, &c.h));
	ASSERT_EQ(c.a, mmap(c.a, c.len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, mfd, 0));
	close(mfd);
	/* Every page past EOF fails on its own: the prefetch crawls them one by one. */
	ASSERT_EQ(0, pthread_create(&t, NULL, crawl_prefetch, &c));
	usleep(200 * 1000);
	t0 = mono_s();
	EXPECT_EQ(0, vamr_unregister(self->fd, c.h));
	t_unreg = mono_s() - t0;
	ASSERT_EQ(0, pthread_join(t, NULL));
	/* Either the crawl was still running (cancelled) or it had ended with EFAULT. */
	EXPECT_TRUE(c.ret == -ECANCELED || c.ret == -EFAULT) TH_LOG("prefetch: %d", c.ret);
	if (c.ret == -EFAULT)
		TH_LOG("the crawl ended before the unregister (%.3f s)", c.took);
	EXPECT_GT(1.0, t_unreg) TH_LOG("unregister took %.3f s", t_unreg);
	ASSERT_EQ(0, vamr_stats(self->fd, VAMR_STATS_GLOBAL, &g));
	munmap(c.a, c.len);
}

/* A process killed while its registration crawls dies at once. */
TEST_F(bounded, sigkill_ends_a_crawl)
{
	int status;
	double t0, took;
	pid_t pid = fork();

	ASSERT_LE(0, pid);
	if (pid == 0) {
		int fd = vamr_open();
		uint8_t *a = map_past_eof(4 * GIB);
		uint32_t h;

		if (fd < 0 || !a)
			_exit(1);
		/* Crawls 1M pages past EOF: many seconds if nothing stops it. */
		vamr_register(fd, a, 4 * GIB, VAMR_ACCESS_READ, 3, &h);
		_exit(2);
	}
	usleep(300 * 1000);
	t0 = mono_s();
	ASSERT_EQ(0, kill(pid, SIGKILL));
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	took = mono_s() - t0;
	EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
		TH_LOG("child status %#x (registration finished before the kill?)", status);
	EXPECT_GT(1.0, took) TH_LOG("the killed child took %.3f s to die", took);
}

/* NO_FAULT pins what is present, faults nothing in; bad flag combinations fail. */
TEST_F(bounded, prefetch_no_fault)
{
	size_t n = 64, len = n * PAGE;
	uint8_t *a = map_anon(len);
	uint32_t h, pages = 99;

	ASSERT_NE(NULL, a);
	memset(a, 1, len);
	ASSERT_EQ(0, vamr_register(self->fd, a, len, RW, 4, &h));
	/* Release the pages: a fresh mapping at the same VA, nothing present. */
	ASSERT_EQ(0, munmap(a, len));
	ASSERT_EQ(0, remap_fixed(a, len));
	EXPECT_EQ(0, resident_pages(a, len));
	EXPECT_EQ(0u, pinned(self->fd, h));
	EXPECT_EQ(0, prefetch_flags(self->fd, h, a, len, VAMR_PREFETCH_NO_FAULT, &pages));
	EXPECT_EQ(0u, pages);
	EXPECT_EQ(0, resident_pages(a, len)) TH_LOG("NO_FAULT faulted pages in");
	EXPECT_EQ(0u, pinned(self->fd, h));
	/* Three pages touched by the CPU: exactly those are pinned. */
	a[0] = 1;
	a[10 * PAGE] = 2;
	a[63 * PAGE + 5] = 3;
	EXPECT_EQ(0, prefetch_flags(self->fd, h, a, len, VAMR_PREFETCH_NO_FAULT, &pages));
	EXPECT_EQ(3u, pages);
	EXPECT_EQ(3, resident_pages(a, len));
	EXPECT_EQ(3u, pinned(self->fd, h));
	/* Flag checks. */
	EXPECT_EQ(-EINVAL, prefetch_flags(self->fd, h, a, len, 1u << 7, NULL));
	EXPECT_EQ(-EINVAL, prefetch_flags(self->fd, h, a, len,
					  VAMR_PREFETCH_WRITE | VAMR_PREFETCH_NO_FAULT, NULL));
	EXPECT_EQ(0, vamr_unregister(self->fd, h));
	ASSERT_EQ(0, vamr_register(self->fd, a, len, VAMR_ACCESS_READ, 5, &h));
	EXPECT_EQ(-EACCES, prefetch_flags(self->fd, h, a, len, VAMR_PREFETCH_WRITE, NULL));
	EXPECT_EQ(0, vamr_unregister(self->fd, h));
	munmap(a, len);
}

/*
 * A writable region over a read-only mapping: a read prefetch pins (read
 * pins), a write prefetch refuses, reads see the CPU's bytes; after
 * mprotect(RW) a write through the former read pin reaches the page the CPU
 * sees (the pin is upgraded, never written through a read-only pin).
 */
TEST_F(bounded, read_prefetch_and_write_upgrade)
{
	size_t n = 16, len = n * PAGE, i;
	uint8_t *a = map_anon(len);
	uint8_t buf[300];
	uint32_t h, pages = 0;

	ASSERT_NE(NULL, a);
	pattern_fill(a, len, 72, 0);
	ASSERT_EQ(0, mprotect(a, len, PROT_READ));
	ASSERT_EQ(0, vamr_register(self->fd, a, len, RW, 6, &h));
	EXPECT_EQ(0u, pinned(self->fd, h)) TH_LOG("write pins over a read-only VMA");
	EXPECT_EQ(-EFAULT, prefetch_flags(self->fd, h, a, len, VAMR_PREFETCH_WRITE, NULL));
	EXPECT_EQ(0, prefetch_flags(self->fd, h, a, len, 0, &pages));
	EXPECT_EQ(n, pages);
	EXPECT_EQ(0, vamr_read(self->fd, h, a + 3 * PAGE - 100, buf, sizeof(buf)));
	EXPECT_EQ(PATTERN_OK, pattern_check(buf, sizeof(buf), 72, 3 * PAGE - 100));
	pattern_fill(buf, sizeof(buf), 73, 0);
	EXPECT_EQ(-EFAULT, vamr_write(self->fd, h, a + 5 * PAGE, buf, sizeof(buf)));
	EXPECT_EQ(PATTERN_OK, pattern_check(a, len, 72, 0)) TH_LOG("a refused write changed bytes");
	/* Writable again (the mapping survives: an invalidation, then write pins). */
	ASSERT_EQ(0, mprotect(a, len, PROT_READ | PROT_WRITE));
	EXPECT_EQ(0, vamr_write(self->fd, h, a + 5 * PAGE - 150, buf, sizeof(buf)));
	EXPECT_EQ(PATTERN_OK, pattern_check(a + 5 * PAGE - 150, sizeof(buf), 73, 0));
	for (i = 0; i < len; i++)
		if (i < 5 * PAGE - 150 || i >= 5 * PAGE - 150 + sizeof(buf))
			if (a[i] != pattern_byte(72, i))
				break;
	EXPECT_EQ(len, i) TH_LOG("byte %zu outside the write changed", i);
	EXPECT_EQ(0, vamr_unregister(self->fd, h));
	munmap(a, len);
}

/* A read pin upgraded by a write: the write lands in the page the CPU sees (shared memfd). */
TEST_F(bounded, write_upgrades_read_pin_shared)
{
	size_t len = 4 * PAGE;
	int mfd = memfd_create("vamr_upgrade", MFD_CLOEXEC);
	uint8_t *a, buf[200], back[200];
	uint32_t h, pages = 0;

	volatile uint8_t sink;
	size_t i;

	ASSERT_LE(0, mfd);
	ASSERT_EQ(0, ftruncate(mfd, len));
	/* Register over a hole, then map the file there: no invalidation, no eager pin. */
	a = map_anon(len);
	ASSERT_NE(NULL, a);
	ASSERT_EQ(0, munmap(a, len));
	ASSERT_EQ(0, vamr_register(self->fd, a, len, RW, 7, &h));
	EXPECT_EQ(0u, pinned(self->fd, h));
	ASSERT_EQ(a, mmap(a, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, mfd, 0));
	pattern_fill(back, sizeof(back), 74, 0);
	for (i = 0; i < len; i += sizeof(back))
		ASSERT_EQ((ssize_t)sizeof(back), pwrite(mfd, back, sizeof(back), i));
	/* The CPU reads every page (read-only PTEs), then NO_FAULT takes read pins only. */
	for (i = 0; i < len; i += PAGE)
		sink = a[i];
	(void)sink;
	EXPECT_EQ(0, prefetch_flags(self->fd, h, a, len, VAMR_PREFETCH_NO_FAULT, &pages));
	EXPECT_EQ(4u, pages);
	EXPECT_EQ(4u, pinned(self->fd, h));
	pattern_fill(buf, sizeof(buf), 75, 0);
	EXPECT_EQ(0, vamr_write(self->fd, h, a + PAGE + 17, buf, sizeof(buf)));
	EXPECT_EQ(PATTERN_OK, pattern_check(a + PAGE + 17, sizeof(buf), 75, 0));
	ASSERT_EQ((ssize_t)sizeof(back), pread(mfd, back, sizeof(back), PAGE + 17));
	EXPECT_EQ(0, memcmp(back, buf, sizeof(buf)));
	EXPECT_EQ(0, vamr_unregister(self->fd, h));
	munmap(a, len);
	close(mfd);
}

static int read_limit(void)
{
	char s[32] = "";
	int f = open(LIMIT_PARAM, O_RDONLY), n;

	if (f < 0)
		return -1;
	n = read(f, s, sizeof(s) - 1);
	close(f);
	return n > 0 ? atoi(s) : -1;
}

/* The per-process limit: ENOSPC past it, across files; handles reused lowest-first. */
TEST_F(bounded, region_limit_per_process)
{
	int old = read_limit(), fd2, i;
	uint8_t *a = map_anon(PAGE);
	uint32_t h[40] = { 0 }, hx = 0;

	ASSERT_NE(NULL, a);
	ASSERT_EQ(8192, old) TH_LOG("documented default of max_regions_per_mm");
	ASSERT_EQ(0, sys_guard_set(LIMIT_PARAM, "32\n"));
	fd2 = vamr_open();
	ASSERT_LE(0, fd2);
	for (i = 0; i < 24; i++)
		ASSERT_EQ(0, vamr_register(self->fd, a, PAGE, RW, i, &h[i]));
	for (; i < 32; i++)
		ASSERT_EQ(0, vamr_register(fd2, a, PAGE, RW, i, &h[i]));
	EXPECT_EQ(-ENOSPC, vamr_register(self->fd, a, PAGE, RW, 99, &hx));
	EXPECT_EQ(-ENOSPC, vamr_register(fd2, a, PAGE, RW, 99, &hx));
	/* Handles are the lowest free ones. */
	for (i = 0; i < 24; i++)
		EXPECT_EQ((uint32_t)i, h[i]);
	EXPECT_EQ(0, vamr_unregister(self->fd, h[7]));
	EXPECT_EQ(0, vamr_register(self->fd, a, PAGE, RW, 7, &hx));
	EXPECT_EQ(7u, hx);
	/* A child is another process: its own count. */
	if (fork() == 0) {
		int cfd = vamr_open();

		_exit(cfd >= 0 && !vamr_register(cfd, a, PAGE, RW, 1, &hx) ? 0 : 1);
	}
	wait(&i);
	EXPECT_EQ(0, i);
	close(fd2);	/* gives back 8 */
	for (i = 0; i < 8; i++)
		EXPECT_EQ(0, vamr_register(self->fd, a, PAGE, RW, 50 + i, &hx));
	EXPECT_EQ(-ENOSPC, vamr_register(self->fd, a, PAGE, RW, 99, &hx));
}

/*
 * Many regions on one page (the default limit's worth): registration does not
 * scan handles, and one MADV_DONTNEED over the page reaches every region.
 */
TEST_F(bounded, many_regions_one_page)
{
	int limit = read_limit(), i;
	uint8_t *a = map_anon(PAGE);
	struct vamr_stats s0, s1;
	uint32_t h = 0;

	ASSERT_NE(NULL, a);
	ASSERT_LT(0, limit);
	memset(a, 5, PAGE);
	ASSERT_EQ(0, vamr_stats(self->fd, VAMR_STATS_GLOBAL, &s0));
	for (i = 0; i < limit; i++)
		ASSERT_EQ(0, vamr_register(self->fd, a, PAGE, RW, i, &h)) TH_LOG("region %d", i);
	EXPECT_EQ((uint32_t)limit - 1, h);
	EXPECT_EQ(-ENOSPC, vamr_register(self->fd, a, PAGE, RW, 0, &h));
	ASSERT_EQ(0, madvise(a, PAGE, MADV_DONTNEED));
	ASSERT_EQ(0, vamr_stats(self->fd, VAMR_STATS_GLOBAL, &s1));
	EXPECT_LE(s0.counters.invalidations[VAMR_EVENT_CLEAR] + limit,
		  s1.counters.invalidations[VAMR_EVENT_CLEAR]);
	close(self->fd);
	self->fd = vamr_open();
	ASSERT_EQ(0, vamr_stats(self->fd, VAMR_STATS_GLOBAL, &s1));
	EXPECT_EQ(s0.counters.regions, s1.counters.regions);
	munmap(a, PAGE);
}

TEST_HARNESS_MAIN
