// SPDX-License-Identifier: GPL-2.0
/*
 * vamr_verify: invalidations keep what did not change and never fault in
 * what the process released (the invalidation issue's semantics table, over
 * /dev/vamr).
 *
 * An invalidation marks the pins it covers suspect; the mm's verify pass then
 * keeps a pin whose page is still mapped, replaces one whose page changed
 * (without faulting) and drops one whose page is gone. Each case asserts the
 * counters (kept / swapped / unpinned / on demand), the bytes the region and
 * the CPU see (position-dependent), and RSS where memory is released.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "mm_util.h"
#include "pattern.h"
#include "vamr_lib.h"

#define PAGE 4096ul
#define HUGE (2ul << 20)
#define RW (VAMR_ACCESS_READ | VAMR_ACCESS_WRITE)
#define CNT(f) offsetof(struct vamr_counters, f)

FIXTURE(verify)
{
	int fd;
	uint8_t *buf;
};

FIXTURE_SETUP(verify)
{
	self->fd = vamr_open();
	ASSERT_LE(0, self->fd);
	self->buf = map_anon(16 << 20);
	ASSERT_NE(NULL, self->buf);
}

FIXTURE_TEARDOWN(verify)
{
	close(self->fd);
}

/* len bytes aligned to 2 MiB (so splits hit a 2 MiB block), filled with pattern `seed`. */
static uint8_t *map_aligned(size_t len, uint64_t seed)
{
	uint8_t *a = map_aligned_2m(len);

	if (a)
		pattern_fill(a, len, seed, 0);
	return a;
}

static struct vamr_counters counters(int fd, uint32_t h)
{
	struct vamr_stats s;

	vamr_stats(fd, h, &s);
	return s.counters;
}

/*
 * Wait until the verify pass is done: pins_kept, pages_unpinned and
 * pins_swapped unchanged for 100 ms (at most 3 s). Returns the counters.
 */
static struct vamr_counters settled(int fd, uint32_t h)
{
	struct vamr_counters c = counters(fd, h), d;
	int quiet = 0, i;

	for (i = 0; i < 3000 && quiet < 100; i++) {
		usleep(1000);
		d = counters(fd, h);
		if (d.pins_kept == c.pins_kept && d.pages_unpinned == c.pages_unpinned &&
		    d.pins_swapped == c.pins_swapped)
			quiet++;
		else
			quiet = 0;
		c = d;
	}
	return c;
}

/*
 * One page munmapped inside a 16 MiB region: the VMA split invalidates the
 * whole 2 MiB block, yet only the unmapped page loses its pin; the other 511
 * are kept, nothing is re-pinned.
 */
TEST_F(verify, split_by_munmap_changes_no_pin)
{
	size_t len = 16 << 20, n = len / PAGE, hole = 4 * HUGE / PAGE + 77;
	uint8_t *a = map_aligned(len, 101);
	struct vamr_counters c;
	uint32_t h;

	ASSERT_NE(NULL, a);
	ASSERT_EQ(0, vamr_register(self->fd, a, len, RW, 1, &h));
	ASSERT_EQ(n, counters(self->fd, h).pages_pinned);
	ASSERT_EQ(0, munmap(a + hole * PAGE, PAGE));
	ASSERT_EQ(n - 1, vamr_wait_pinned(self->fd, h, n - 1, 2000));
	c = settled(self->fd, h);
	TH_LOG("invalidations: clear %llu unmap %llu; kept %llu, unpinned %llu",
	       (unsigned long long)c.invalidations[VAMR_EVENT_CLEAR],
	       (unsigned long long)c.invalidations[VAMR_EVENT_UNMAP],
	       (unsigned long long)c.pins_kept, (unsigned long long)c.pages_unpinned);
	EXPECT_EQ(1u, c.pages_unpinned);
	EXPECT_EQ(0u, c.pins_swapped);
	EXPECT_EQ(0u, c.ondemand_repins);
	/* The split invalidated the 2 MiB block (if it did): its other 511 pins were kept. */
	if (c.invalidations[VAMR_EVENT_CLEAR])
		EXPECT_LE(511u, c.pins_kept);
	/* The region still reads what the CPU sees around the hole, with no new pin. */
	ASSERT_EQ(0, vamr_read(self->fd, h, a + (hole - 3) * PAGE, self->buf, 3 * PAGE));
	EXPECT_EQ(PATTERN_OK, pattern_check(self->buf, 3 * PAGE, 101, (hole - 3) * PAGE));
	ASSERT_EQ(0, vamr_read(self->fd, h, a + (hole + 1) * PAGE, self->buf, 3 * PAGE));
	EXPECT_EQ(PATTERN_OK, pattern_check(self->buf, 3 * PAGE, 101, (hole + 1) * PAGE));
	EXPECT_EQ(-EFAULT, vamr_read(self->fd, h, a + hole * PAGE, self->buf, 8));
	EXPECT_EQ(0u, counters(self->fd, h).ondemand_repins);
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	munmap(a, len);
}

/*
 * mprotect(PROT_READ) of one page and back: every pin is kept; the protected
 * page refuses writes through the region while read-only (its pin lost write
 * permission) and accepts them again afterwards.
 */
TEST_F(verify, split_by_mprotect_keeps_pins)
{
	size_t len = 16 << 20, n = len / PAGE, p = 2 * HUGE / PAGE + 5;
	uint8_t *a = map_aligned(len, 102);
	struct vamr_counters c;
	uint32_t h;

	ASSERT_NE(NULL, a);
	ASSERT_EQ(0, vamr_register(self->fd, a, len, RW, 2, &h));
	ASSERT_EQ(0, mprotect(a + p * PAGE, PAGE, PROT_READ));
	c = counters(self->fd, h);
	ASSERT_LE(1u, c.invalidations[VAMR_EVENT_PROTECTION_VMA] + c.invalidations[VAMR_EVENT_CLEAR]);
	c = settled(self->fd, h);
	EXPECT_LE(1u, c.pins_kept);
	EXPECT_EQ(0u, c.pages_unpinned);
	pattern_fill(self->buf, 100, 103, 0);
	EXPECT_EQ(-EFAULT, vamr_write(self->fd, h, a + p * PAGE + 8, self->buf, 100));
	EXPECT_EQ(PATTERN_OK, pattern_check(a + p * PAGE, PAGE, 102, p * PAGE))
		TH_LOG("a write through the region reached a read-only page");
	ASSERT_EQ(0, vamr_read(self->fd, h, a + p * PAGE, self->buf, PAGE));
	EXPECT_EQ(PATTERN_OK, pattern_check(self->buf, PAGE, 102, p * PAGE));
	ASSERT_EQ(0, mprotect(a + p * PAGE, PAGE, PROT_READ | PROT_WRITE));
	pattern_fill(self->buf, 100, 104, 0);
	EXPECT_EQ(0, vamr_write(self->fd, h, a + p * PAGE + 8, self->buf, 100));
	EXPECT_EQ(PATTERN_OK, pattern_check(a + p * PAGE + 8, 100, 104, 0));
	c = counters(self->fd, h);
	EXPECT_EQ(0u, c.pages_unpinned);
	EXPECT_EQ(0u, c.pins_swapped);
	EXPECT_EQ(n, c.pages_pinned);
	/* Only the page whose write permission came back was pinned again. */
	EXPECT_GE(1u, c.ondemand_repins);
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	munmap(a, len);
}

/* A guard page installed in the middle: only that page's pin goes. */
TEST_F(verify, guard_page_drops_one_pin)
{
	size_t len = 4 << 20, n = len / PAGE, g = HUGE / PAGE + 9;
	uint8_t *a = map_aligned(len, 105);
	struct vamr_counters c;
	uint32_t h;

	ASSERT_NE(NULL, a);
	ASSERT_EQ(0, vamr_register(self->fd, a, len, RW, 3, &h));
	if (madvise(a + g * PAGE, PAGE, MADV_GUARD_INSTALL)) {
		ASSERT_EQ(EINVAL, errno);
		vamr_unregister(self->fd, h);
		SKIP(return, "MADV_GUARD_INSTALL not supported");
	}
	ASSERT_EQ(n - 1, vamr_wait_pinned(self->fd, h, n - 1, 2000));
	c = settled(self->fd, h);
	EXPECT_EQ(1u, c.pages_unpinned);
	EXPECT_EQ(0u, c.pins_swapped);
	EXPECT_EQ(-EFAULT, vamr_read(self->fd, h, a + g * PAGE, self->buf, 8));
	ASSERT_EQ(0, vamr_read(self->fd, h, a + (g + 1) * PAGE, self->buf, PAGE));
	EXPECT_EQ(PATTERN_OK, pattern_check(self->buf, PAGE, 105, (g + 1) * PAGE));
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	munmap(a, len);
}

/*
 * MADV_FREE then MADV_PAGEOUT: whatever the kernel does with the lazily freed
 * pages (a pin keeps them, as a normal MR's would), the region reads exactly
 * what the CPU reads, and nothing is faulted back in by vamr.
 */
TEST_F(verify, madv_free_pageout_region_sees_cpu)
{
	size_t len = 64 * PAGE;
	uint8_t *a = map_anon(len);
	struct vamr_counters c;
	uint32_t h;

	ASSERT_NE(NULL, a);
	pattern_fill(a, len, 106, 0);
	ASSERT_EQ(0, vamr_register(self->fd, a, len, RW, 4, &h));
	ASSERT_EQ(0, madvise(a, len, MADV_FREE));
	if (madvise(a, len, MADV_PAGEOUT))
		TH_LOG("MADV_PAGEOUT: %s", strerror(errno));
	usleep(100 * 1000);
	ASSERT_EQ(0, vamr_read(self->fd, h, a, self->buf, len));
	EXPECT_EQ(0, memcmp(self->buf, a, len)) TH_LOG("the region and the CPU disagree");
	c = counters(self->fd, h);
	TH_LOG("kept %llu, unpinned %llu, swapped %llu, on demand %llu",
	       (unsigned long long)c.pins_kept, (unsigned long long)c.pages_unpinned,
	       (unsigned long long)c.pins_swapped, (unsigned long long)c.ondemand_repins);
	EXPECT_EQ(0u, c.pins_swapped);
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	munmap(a, len);
}

/* A hole punched in a shared memfd: the pins go, the file's pages are freed, zeros after. */
TEST_F(verify, memfd_punch_releases_pages)
{
	size_t len = 32 * PAGE, i;
	int mfd = memfd_create("vamr_verify", MFD_CLOEXEC);
	uint8_t *a;
	uint32_t h;

	ASSERT_LE(0, mfd);
	ASSERT_EQ(0, ftruncate(mfd, len));
	a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	ASSERT_NE(MAP_FAILED, a);
	pattern_fill(a, len, 107, 0);
	ASSERT_EQ(0, vamr_register(self->fd, a, len, RW, 5, &h));
	ASSERT_EQ(0, fallocate(mfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 8 * PAGE,
			       8 * PAGE));
	ASSERT_EQ(24u, vamr_wait_pinned(self->fd, h, 24, 2000));
	EXPECT_EQ(8u, counters(self->fd, h).pages_unpinned);
	EXPECT_EQ(0u, counters(self->fd, h).ondemand_repins);
	ASSERT_EQ(0, vamr_read(self->fd, h, a + 7 * PAGE, self->buf, 10 * PAGE));
	EXPECT_EQ(PATTERN_OK, pattern_check(self->buf, PAGE, 107, 7 * PAGE));
	for (i = PAGE; i < 9 * PAGE; i++)
		if (self->buf[i])
			break;
	EXPECT_EQ(9 * PAGE, i) TH_LOG("byte %zu of the punched range not zero", i - PAGE);
	EXPECT_EQ(PATTERN_OK, pattern_check(self->buf + 9 * PAGE, PAGE, 107, 16 * PAGE));
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	munmap(a, len);
	close(mfd);
}

/*
 * 1000 small regions at a 32 KiB stride in one mapping: a one-page munmap in
 * the middle splits the VMA; one verify pass handles every region of the
 * block, and only the one unmapped page loses its pin.
 */
TEST_F(verify, many_regions_one_split)
{
	size_t stride = 32 << 10, rlen = 16 << 10, nreg = 1000, len = nreg * stride, i;
	uint8_t *a = map_aligned(len, 108);
	struct vamr_stats g0, g1;
	uint32_t h = 0;
	int ok = 0;

	ASSERT_NE(NULL, a);
	for (i = 0; i < nreg; i++)
		ASSERT_EQ(0, vamr_register(self->fd, a + i * stride, rlen, RW, i, &h));
	ASSERT_EQ(0, vamr_stats(self->fd, VAMR_STATS_GLOBAL, &g0));
	ASSERT_EQ(0, munmap(a + 500 * stride + PAGE, PAGE));
	(void)ok;
	settled(self->fd, VAMR_STATS_GLOBAL);
	ASSERT_EQ(0, vamr_stats(self->fd, VAMR_STATS_GLOBAL, &g1));
	TH_LOG("clear invalidations %llu, kept %llu, unpinned %llu",
	       (unsigned long long)(g1.counters.invalidations[VAMR_EVENT_CLEAR] -
				    g0.counters.invalidations[VAMR_EVENT_CLEAR]),
	       (unsigned long long)(g1.counters.pins_kept - g0.counters.pins_kept),
	       (unsigned long long)(g1.counters.pages_unpinned - g0.counters.pages_unpinned));
	EXPECT_EQ(g0.counters.pages_pinned - 1, g1.counters.pages_pinned);
	EXPECT_EQ(1u, g1.counters.pages_unpinned - g0.counters.pages_unpinned);
	EXPECT_EQ(0u, g1.counters.pins_swapped - g0.counters.pins_swapped);
	EXPECT_EQ(0u, g1.counters.ondemand_repins - g0.counters.ondemand_repins);
	/* The 2 MiB block around the hole holds 64 regions of 4 pages: all but one pin kept. */
	if (g1.counters.invalidations[VAMR_EVENT_CLEAR] > g0.counters.invalidations[VAMR_EVENT_CLEAR])
		EXPECT_LE(255u, g1.counters.pins_kept - g0.counters.pins_kept);
	/* Region 500 reads what the CPU sees on both sides of the hole. */
	ASSERT_EQ(0, vamr_read(self->fd, 500, a + 500 * stride, self->buf, PAGE));
	EXPECT_EQ(PATTERN_OK, pattern_check(self->buf, PAGE, 108, 500 * stride));
	ASSERT_EQ(0, vamr_read(self->fd, 500, a + 500 * stride + 2 * PAGE, self->buf, 2 * PAGE));
	EXPECT_EQ(PATTERN_OK, pattern_check(self->buf, 2 * PAGE, 108, 500 * stride + 2 * PAGE));
	munmap(a, len);
}

TEST_HARNESS_MAIN
