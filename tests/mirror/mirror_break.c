// SPDX-License-Identifier: GPL-2.0
/*
 * mirror_break: the break check of the mirror tests. With the driver's
 * skip_zap on, its invalidate callback leaves the device table as it is
 * while vamr unmaps and unpins the pages under the invalidation, which is
 * what a driver that ignored the mirror API's contract would do. After a
 * remap the device then keeps DMAing to IOVAs that are no longer mapped: the
 * IOMMU must refuse them (DMAR faults in the kernel log) and the bytes the
 * device moves must be wrong (what the CPU sees is not what the device read,
 * and the device's writes do not reach what the CPU sees). A test here
 * passes when the breakage is caught; it fails when the device kept reaching
 * the right bytes, or nothing noticed.
 *
 * Only behind an IOMMU that translates (the driver's INFO): without one a
 * stale DMA address is a physical address and the device would write into
 * freed memory.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "kselftest_harness.h"
#include "mm_util.h"
#include "mirror_util.h"
#include "sys_guard.h"

#define NPAGES 4

FIXTURE(broken) {
	int fd;
	int kmsg;
};

FIXTURE_SETUP(broken)
{
	struct vamr_mirror_edu_info info;

	self->fd = open(EDU_DEV, O_RDWR | O_CLOEXEC);
	if (self->fd < 0)
		SKIP(return, "%s: %s (no vamr_mirror_edu, or no edu device)", EDU_DEV,
		     strerror(errno));
	ASSERT_EQ(0, edu_info(self->fd, &info));
	if (!info.iommu)
		SKIP(return, "no IOMMU translation for %s: a stale DMA address would reach "
			     "freed memory", info.name);
	ASSERT_EQ(0, sys_guard_set(EDU_SKIP_ZAP, "Y"));
	/*
	 * The IOMMU driver's fault reports are rate limited (10 lines per 5 s,
	 * the rest dropped): start each test in a fresh interval.
	 */
	sleep(6);
	self->kmsg = kmsg_start();
}

FIXTURE_TEARDOWN(broken)
{
	if (self->fd >= 0)
		close(self->fd);
	sys_guard_restore();
}

/* A way to remap part of the mirror: pages [first, first + n) change. */
struct remap {
	const char *what;
	int (*fn)(uint8_t *a);
	unsigned int first, n;
};

/*
 * The mirror populated over @a (CPU pattern 90), then @r changes some
 * pages, whose new contents the CPU writes (pattern 91): the device reads
 * the range and writes it (pattern 92). Reports what went wrong: DMAR fault
 * records, pages whose device read differs from the CPU's view, pages where
 * the CPU does not see the device's write; the pages @r left alone must stay
 * right.
 */
static void break_after(struct __test_metadata *_metadata, int fd, int kmsg, uint8_t *a,
			const struct remap *r)
{
	size_t len = NPAGES * PAGE, p;
	uint8_t got[NPAGES * PAGE];
	struct vamr_mirror_edu_stats s0, s;
	int read_wrong = 0, write_wrong = 0;
	struct kmsg_counts c;

	pattern_fill(a, len, 90, 0);
	ASSERT_EQ(0, edu_mirror(fd, a, len, MIRROR_WRITE));
	ASSERT_EQ(NPAGES, edu_populate(fd, a, len));
	ASSERT_EQ(0, edu_stats(fd, &s0));
	ASSERT_EQ(0, r->fn(a));
	pattern_fill(a + r->first * PAGE, r->n * PAGE, 91, 0);
	ASSERT_EQ(0, dev_read(fd, a, len, got));
	for (p = 0; p < NPAGES; p++)
		read_wrong += first_diff(got + p * PAGE, a + p * PAGE, PAGE) != PATTERN_OK;
	ASSERT_EQ(0, dev_fill(fd, a, len, 92));
	for (p = 0; p < NPAGES; p++)
		write_wrong += pattern_check(a + p * PAGE, PAGE, 92, p * PAGE) != PATTERN_OK;
	usleep(500 * 1000);
	kmsg_count(kmsg, &c);
	ASSERT_EQ(0, edu_stats(fd, &s));
	TH_LOG("break check (%s): %d DMAR fault record(s), device read wrong on %d of %d pages, "
	       "device write lost on %d, device faults %llu (the driver's table looked valid), "
	       "vamr unmapped %llu pages", r->what, c.dmar_records, read_wrong, NPAGES,
	       write_wrong, (unsigned long long)(s.device_faults - s0.device_faults),
	       (unsigned long long)s.pages_unmapped);
	/* The pages left alone are still right, both ways. */
	for (p = 0; p < NPAGES; p++) {
		if (p >= r->first && p < r->first + r->n)
			continue;
		EXPECT_EQ(PATTERN_OK, pattern_check(got + p * PAGE, PAGE, 90, p * PAGE));
		EXPECT_EQ(PATTERN_OK, pattern_check(a + p * PAGE, PAGE, 92, p * PAGE));
	}
	EXPECT_TRUE(c.dmar_records > 0 || read_wrong || write_wrong)
		TH_LOG("the stale entries went unnoticed: the break check did not break");
	EXPECT_LT(0, c.dmar_records) TH_LOG("no DMAR fault although the IOVAs are unmapped");
	EXPECT_EQ((int)r->n, read_wrong);
	EXPECT_EQ((int)r->n, write_wrong);
	EXPECT_EQ(0, c.dma_api);
	EXPECT_EQ(0, c.problems);
}

static int remap_munmap_mmap(uint8_t *a)
{
	if (munmap(a + PAGE, 2 * PAGE))
		return -1;
	return remap_fixed(a + PAGE, 2 * PAGE);
}

static int remap_dontneed(uint8_t *a)
{
	return madvise(a + PAGE, 2 * PAGE, MADV_DONTNEED);
}

static int remap_mremap(uint8_t *a)
{
	uint8_t *b = map_anon(2 * PAGE);

	if (!b)
		return -1;
	memset(b, 0x5a, 2 * PAGE);
	return mremap(b, 2 * PAGE, 2 * PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, a + PAGE) ==
	       a + PAGE ? 0 : -1;
}

/* fork write-protects the whole mapping: every page is invalidated. */
static int remap_fork(uint8_t *a)
{
	int status;
	pid_t pid = fork();

	(void)a;
	if (pid < 0)
		return -1;
	if (pid == 0)
		_exit(0);
	return waitpid(pid, &status, 0) == pid ? 0 : -1;
}

/* The memfd under the mapping of memfd_punch_without_zap. */
static int punch_fd = -1;

static int remap_punch(uint8_t *a)
{
	(void)a;
	return fallocate(punch_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, PAGE, 2 * PAGE);
}

TEST_F_TIMEOUT(broken, munmap_mmap_without_zap, 120)
{
	static const struct remap r = { "munmap+mmap", remap_munmap_mmap, 1, 2 };
	uint8_t *a = map_anon(NPAGES * PAGE);

	ASSERT_NE(NULL, a);
	break_after(_metadata, self->fd, self->kmsg, a, &r);
	munmap(a, NPAGES * PAGE);
}

TEST_F_TIMEOUT(broken, dontneed_without_zap, 120)
{
	static const struct remap r = { "MADV_DONTNEED", remap_dontneed, 1, 2 };
	uint8_t *a = map_anon(NPAGES * PAGE);

	ASSERT_NE(NULL, a);
	break_after(_metadata, self->fd, self->kmsg, a, &r);
	munmap(a, NPAGES * PAGE);
}

TEST_F_TIMEOUT(broken, mremap_without_zap, 120)
{
	static const struct remap r = { "mremap onto", remap_mremap, 1, 2 };
	uint8_t *a = map_anon(NPAGES * PAGE);

	ASSERT_NE(NULL, a);
	break_after(_metadata, self->fd, self->kmsg, a, &r);
	munmap(a, NPAGES * PAGE);
}

TEST_F_TIMEOUT(broken, fork_without_zap, 120)
{
	static const struct remap r = { "fork", remap_fork, 0, NPAGES };
	uint8_t *a = map_anon(NPAGES * PAGE);

	ASSERT_NE(NULL, a);
	break_after(_metadata, self->fd, self->kmsg, a, &r);
	munmap(a, NPAGES * PAGE);
}

TEST_F_TIMEOUT(broken, memfd_punch_without_zap, 120)
{
	static const struct remap r = { "memfd hole punch", remap_punch, 1, 2 };
	uint8_t *a;

	punch_fd = memfd_create("mirror_break", 0);
	ASSERT_LE(0, punch_fd);
	ASSERT_EQ(0, ftruncate(punch_fd, NPAGES * PAGE));
	a = mmap(NULL, NPAGES * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, punch_fd, 0);
	ASSERT_NE(MAP_FAILED, a);
	break_after(_metadata, self->fd, self->kmsg, a, &r);
	munmap(a, NPAGES * PAGE);
	close(punch_fd);
}

TEST_HARNESS_MAIN
