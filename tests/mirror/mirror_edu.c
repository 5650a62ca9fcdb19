// SPDX-License-Identifier: GPL-2.0
/*
 * mirror_edu: vamr's mirror API proven by a DMA device, QEMU's edu behind an
 * emulated IOMMU (intel-iommu, strict), through the test driver
 * vamr_mirror_edu (tests/mirror/vamr_mirror_edu.c), as
 * tools/testing/selftests/mm/hmm-tests.c proves HMM through lib/test_hmm.c.
 *
 * Each remap test mirrors a range, has the device read it (device faults
 * populate the device table), remaps part of it the way a process does
 * (munmap + mmap, MADV_DONTNEED, mremap, fork, a THP split, a memfd hole
 * punch), then has the device read the range again and compares that with
 * what the CPU sees there (position-dependent bytes), has the device write a
 * new pattern and checks it with the CPU, and counts the device faults: one
 * per remapped page touched, none for the pages left alone. Every test ends
 * with no DMAR fault, no DMA-API debug report and no warning in the kernel
 * log (checked in the fixture's teardown, after the mirror is destroyed).
 *
 * The break check (the driver's invalidate callback not zapping its table)
 * is mirror_break.c.
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

/* Pages of the mirrors of the remap tests. */
#define NPAGES 4

FIXTURE(mirror) {
	int fd;
	int kmsg;
	struct vamr_mirror_edu_info info;
};

FIXTURE_SETUP(mirror)
{
	self->fd = -1;
	self->kmsg = kmsg_start();
	self->fd = open(EDU_DEV, O_RDWR | O_CLOEXEC);
	if (self->fd < 0)
		SKIP(return, "%s: %s (no vamr_mirror_edu, or no edu device)", EDU_DEV,
		     strerror(errno));
	ASSERT_EQ(0, edu_info(self->fd, &self->info));
	ASSERT_EQ(0u, self->info.skip_zap) TH_LOG("the break check (skip_zap) is on");
}

FIXTURE_TEARDOWN(mirror)
{
	struct kmsg_counts c;

	if (self->fd < 0)
		return;
	/* Destroys the mirror: the driver's last invalidation, then every page unmapped. */
	close(self->fd);
	/* A DMAR fault reaches the log from the IOMMU's fault interrupt. */
	usleep(300 * 1000);
	kmsg_count(self->kmsg, &c);
	EXPECT_EQ(0, c.dmar);
	EXPECT_EQ(0, c.dma_api);
	EXPECT_EQ(0, c.problems);
	close(self->kmsg);
}

static struct vamr_mirror_edu_stats stats_of(int fd)
{
	struct vamr_mirror_edu_stats s = {};

	edu_stats(fd, &s);
	return s;
}

/* The device reads [a, a + len) and gets what the CPU sees there. */
static void device_reads_cpu_view(struct __test_metadata *_metadata, int fd, uint8_t *a,
				  size_t len)
{
	uint8_t *got = malloc(len);
	size_t off;
	int ret;

	ASSERT_NE(NULL, got);
	ret = dev_read(fd, a, len, got);
	off = ret ? 0 : first_diff(got, a, len);
	free(got);
	ASSERT_EQ(0, ret);
	ASSERT_EQ(PATTERN_OK, off) TH_LOG("the device read differs from the CPU's view at "
					  "offset %zu (page %zu)", off, off / PAGE);
}

/* The device writes pattern @seed over [a, a + len) and the CPU sees it. */
static void device_writes_cpu_sees(struct __test_metadata *_metadata, int fd, uint8_t *a,
				   size_t len, uint64_t seed)
{
	size_t off;

	ASSERT_EQ(0, dev_fill(fd, a, len, seed));
	off = pattern_check(a, len, seed, 0);
	ASSERT_EQ(PATTERN_OK, off) TH_LOG("the CPU does not see the device's write at offset "
					  "%zu (page %zu)", off, off / PAGE);
}

/*
 * A mirror over @a (filled by the CPU with pattern @seed), read once by the
 * device: every page faulted in once; returns the device faults so far.
 */
static uint64_t mirror_and_touch(struct __test_metadata *_metadata, int fd, uint8_t *a,
				 size_t len, uint64_t seed)
{
	struct vamr_mirror_edu_stats s;

	pattern_fill(a, len, seed, 0);
	EXPECT_EQ(0, edu_mirror(fd, a, len, MIRROR_WRITE));
	device_reads_cpu_view(_metadata, fd, a, len);
	s = stats_of(fd);
	EXPECT_EQ(len / PAGE, s.device_faults);
	EXPECT_EQ(len / PAGE, s.entries);
	/* Valid entries: no fault for a second pass. */
	device_writes_cpu_sees(_metadata, fd, a, len, seed + 1);
	EXPECT_EQ(len / PAGE, stats_of(fd).device_faults);
	return stats_of(fd).device_faults;
}

/*
 * After a remap of @remapped pages of the mirror: the device sees what the
 * CPU sees, with one device fault per remapped page and none else, and its
 * writes reach what the CPU sees.
 */
static void after_remap(struct __test_metadata *_metadata, int fd, uint8_t *a, size_t len,
			uint64_t faults_before, unsigned int remapped, uint64_t seed)
{
	struct vamr_mirror_edu_stats s;

	s = stats_of(fd);
	EXPECT_LE(1u, s.invalidations);
	EXPECT_LE(remapped, s.zapped);
	device_reads_cpu_view(_metadata, fd, a, len);
	s = stats_of(fd);
	EXPECT_EQ(faults_before + remapped, s.device_faults)
		TH_LOG("device faults %llu before, %llu after; %u pages remapped",
		       (unsigned long long)faults_before, (unsigned long long)s.device_faults,
		       remapped);
	device_writes_cpu_sees(_metadata, fd, a, len, seed);
	EXPECT_EQ(faults_before + remapped, stats_of(fd).device_faults);
	s = stats_of(fd);
	TH_LOG("device faults %llu, invalidations %llu, zapped %llu, DMA %llu; vamr: mapped %llu, "
	       "unmapped %llu, invalidations %llu, retries %llu",
	       (unsigned long long)s.device_faults, (unsigned long long)s.invalidations,
	       (unsigned long long)s.zapped, (unsigned long long)s.dmas,
	       (unsigned long long)s.pages_mapped, (unsigned long long)s.pages_unmapped,
	       (unsigned long long)s.mirror_invalidations, (unsigned long long)s.retries);
}

TEST_F(mirror, device_info)
{
	TH_LOG("%s: DMA mask %u bits, %s", self->info.name, self->info.dma_bits,
	       self->info.iommu ? "IOMMU translation" : "no IOMMU (identity or none)");
	if (getenv("VAMR_MIRROR_NEED_IOMMU"))
		ASSERT_EQ(1u, self->info.iommu) TH_LOG("the guest has no IOMMU in front of the device");
}

/* populate fills the table up front: no device fault afterwards. */
TEST_F_TIMEOUT(mirror, populate_then_no_faults, 120)
{
	size_t len = NPAGES * PAGE;
	uint8_t *a = map_anon(len);

	ASSERT_NE(NULL, a);
	pattern_fill(a, len, 10, 0);
	ASSERT_EQ(0, edu_mirror(self->fd, a, len, MIRROR_WRITE));
	ASSERT_EQ(NPAGES, edu_populate(self->fd, a, len));
	device_reads_cpu_view(_metadata, self->fd, a, len);
	device_writes_cpu_sees(_metadata, self->fd, a, len, 11);
	EXPECT_EQ(0u, stats_of(self->fd).device_faults);
	EXPECT_EQ((unsigned)NPAGES, stats_of(self->fd).pages_mapped);
	/* Unaligned transfers crossing a page. */
	pattern_fill(a, len, 12, 0);
	ASSERT_EQ(0, edu_write(self->fd, a + PAGE - 100, 300, a + 2 * PAGE + 7));
	EXPECT_EQ(PATTERN_OK, pattern_check(a + PAGE - 100, 300, 12, 2 * PAGE + 7));
	munmap(a, len);
}

/* A hole is not populated; a device access to it fails; bad ranges are refused. */
TEST_F_TIMEOUT(mirror, holes_and_bad_ranges, 120)
{
	size_t len = NPAGES * PAGE;
	uint8_t *a = map_anon(len), buf[64];

	ASSERT_NE(NULL, a);
	memset(a, 1, len);
	ASSERT_EQ(0, munmap(a + PAGE, PAGE));
	EXPECT_EQ(-EINVAL, edu_mirror(self->fd, a + 1, len, MIRROR_WRITE));
	ASSERT_EQ(0, edu_mirror(self->fd, a, len, MIRROR_WRITE));
	EXPECT_EQ(-EBUSY, edu_mirror(self->fd, a, len, MIRROR_WRITE));
	EXPECT_EQ(NPAGES - 1, edu_populate(self->fd, a, len));
	EXPECT_EQ(-EFAULT, edu_read(self->fd, a + PAGE + 10, sizeof(buf), buf));
	EXPECT_EQ(1u, stats_of(self->fd).device_faults);
	EXPECT_EQ(-EINVAL, edu_read(self->fd, a + len - 10, sizeof(buf), buf));
	EXPECT_EQ(-EINVAL, edu_read(self->fd, a - 10, sizeof(buf), buf));
	EXPECT_EQ(0, edu_read(self->fd, a + 3 * PAGE, sizeof(buf), buf));
	EXPECT_EQ(PATTERN_OK, first_diff(buf, a + 3 * PAGE, sizeof(buf)));
	munmap(a, len);
}

/* munmap + mmap over the middle of the mirror, new contents written by the CPU. */
TEST_F_TIMEOUT(mirror, munmap_mmap, 120)
{
	size_t len = NPAGES * PAGE;
	uint8_t *a = map_anon(len);
	uint64_t faults;

	ASSERT_NE(NULL, a);
	faults = mirror_and_touch(_metadata, self->fd, a, len, 20);
	ASSERT_EQ(0, munmap(a + PAGE, 2 * PAGE));
	ASSERT_EQ(0, remap_fixed(a + PAGE, 2 * PAGE));
	pattern_fill(a + PAGE, 2 * PAGE, 22, 0);
	after_remap(_metadata, self->fd, a, len, faults, 2, 23);
	munmap(a, len);
}

/* MADV_DONTNEED: zeros where the pages were released. */
TEST_F_TIMEOUT(mirror, dontneed, 120)
{
	size_t len = NPAGES * PAGE;
	uint8_t *a = map_anon(len);
	uint64_t faults;

	ASSERT_NE(NULL, a);
	faults = mirror_and_touch(_metadata, self->fd, a, len, 30);
	ASSERT_EQ(0, madvise(a + PAGE, 2 * PAGE, MADV_DONTNEED));
	ASSERT_EQ(PATTERN_OK, first_nonzero(a + PAGE, 2 * PAGE));
	after_remap(_metadata, self->fd, a, len, faults, 2, 33);
	munmap(a, len);
}

/* mremap of another mapping onto the middle of the mirror: its bytes appear there. */
TEST_F_TIMEOUT(mirror, mremap_onto, 120)
{
	size_t len = NPAGES * PAGE;
	uint8_t *a = map_anon(len), *b = map_anon(2 * PAGE), *m;
	uint64_t faults;

	ASSERT_NE(NULL, a);
	ASSERT_NE(NULL, b);
	faults = mirror_and_touch(_metadata, self->fd, a, len, 40);
	pattern_fill(b, 2 * PAGE, 42, 0);
	m = mremap(b, 2 * PAGE, 2 * PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, a + PAGE);
	ASSERT_EQ(a + PAGE, m);
	ASSERT_EQ(PATTERN_OK, pattern_check(a + PAGE, 2 * PAGE, 42, 0));
	after_remap(_metadata, self->fd, a, len, faults, 2, 43);
	munmap(a, len);
}

/*
 * fork: the parent's pages become COW-shared with the child; the device's
 * faults break COW in the parent, so its writes reach the parent only and
 * the child keeps what it had at fork.
 */
TEST_F_TIMEOUT(mirror, fork_cow, 120)
{
	size_t len = NPAGES * PAGE;
	uint8_t *a = map_anon(len);
	int go[2], status;
	uint64_t faults;
	pid_t pid;
	char c;

	ASSERT_NE(NULL, a);
	faults = mirror_and_touch(_metadata, self->fd, a, len, 50);
	/* What the device wrote last (mirror_and_touch): seed 51. */
	ASSERT_EQ(0, pipe(go));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		close(go[1]);
		if (read(go[0], &c, 1) != 1)
			_exit(2);
		/* The parent's device writes after fork are not the child's. */
		_exit(pattern_check(a, len, 51, 0) == PATTERN_OK ? 0 : 1);
	}
	close(go[0]);
	/* The whole mirror was invalidated by fork (write protection). */
	after_remap(_metadata, self->fd, a, len, faults, NPAGES, 53);
	ASSERT_EQ(1, write(go[1], "x", 1));
	close(go[1]);
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
		TH_LOG("the child sees the parent's device writes (status %#x)", status);
	munmap(a, len);
}

/*
 * A THP under the mirror, its PMD split (mprotect of one 4 KiB page and
 * back) and one page of it released: the device keeps reaching the right
 * bytes of the split huge page. Sampled pages only (every transfer takes
 * 100 ms of device time).
 */
TEST_F_TIMEOUT(mirror, thp_split, 180)
{
	static const unsigned int sample[] = { 0, 1, 255, 256, 257, 511 };
	size_t huge = 2ul << 20, i;
	uint8_t *raw = map_anon(2 * huge), *a;
	struct vamr_mirror_edu_stats s;
	uint64_t faults;

	ASSERT_NE(NULL, raw);
	a = (uint8_t *)(((uintptr_t)raw + huge - 1) & ~(huge - 1));
	if (madvise(a, huge, MADV_HUGEPAGE))
		SKIP(return, "MADV_HUGEPAGE: %s (no THP in this kernel)", strerror(errno));
	pattern_fill(a, huge, 60, 0);
	if (anon_huge_kb(a) < 2048)
		SKIP(return, "no huge page under the range (AnonHugePages %ld kB)", anon_huge_kb(a));
	ASSERT_EQ(0, edu_mirror(self->fd, a, huge, MIRROR_WRITE));
	for (i = 0; i < ARRAY_SIZE(sample); i++)
		device_reads_cpu_view(_metadata, self->fd, a + sample[i] * PAGE, PAGE);
	faults = stats_of(self->fd).device_faults;
	EXPECT_EQ(ARRAY_SIZE(sample), faults);
	/* Split the PMD, keep the pages; then release page 256. */
	ASSERT_EQ(0, mprotect(a + 300 * PAGE, PAGE, PROT_READ));
	ASSERT_EQ(0, mprotect(a + 300 * PAGE, PAGE, PROT_READ | PROT_WRITE));
	EXPECT_EQ(0, anon_huge_kb(a)) TH_LOG("the huge page was not split");
	ASSERT_EQ(0, madvise(a + 256 * PAGE, PAGE, MADV_DONTNEED));
	EXPECT_EQ(PATTERN_OK, pattern_check(a + 255 * PAGE, PAGE, 60, 255 * PAGE));
	EXPECT_EQ(PATTERN_OK, first_nonzero(a + 256 * PAGE, PAGE));
	for (i = 0; i < ARRAY_SIZE(sample); i++)
		device_reads_cpu_view(_metadata, self->fd, a + sample[i] * PAGE, PAGE);
	s = stats_of(self->fd);
	EXPECT_EQ(faults + ARRAY_SIZE(sample), s.device_faults)
		TH_LOG("the split invalidates the whole huge page: one fault per sampled page");
	for (i = 0; i < ARRAY_SIZE(sample); i++)
		device_writes_cpu_sees(_metadata, self->fd, a + sample[i] * PAGE, PAGE, 61 + i);
	EXPECT_EQ(faults + ARRAY_SIZE(sample), stats_of(self->fd).device_faults);
	TH_LOG("device faults %llu, invalidations %llu, zapped %llu",
	       (unsigned long long)s.device_faults, (unsigned long long)s.invalidations,
	       (unsigned long long)s.zapped);
	munmap(raw, 2 * huge);
}

/* memfd MAP_SHARED with a hole punched: zeros there, and device writes reach the file. */
TEST_F_TIMEOUT(mirror, memfd_punch_hole, 120)
{
	size_t len = NPAGES * PAGE;
	int mfd = memfd_create("mirror_edu", 0);
	uint8_t *a, back[2 * PAGE];
	uint64_t faults;

	ASSERT_LE(0, mfd);
	ASSERT_EQ(0, ftruncate(mfd, len));
	a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	ASSERT_NE(MAP_FAILED, a);
	faults = mirror_and_touch(_metadata, self->fd, a, len, 70);
	ASSERT_EQ(0, fallocate(mfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, PAGE, 2 * PAGE));
	ASSERT_EQ(PATTERN_OK, first_nonzero(a + PAGE, 2 * PAGE));
	after_remap(_metadata, self->fd, a, len, faults, 2, 73);
	/* The device's bytes are the file's. */
	ASSERT_EQ((ssize_t)sizeof(back), pread(mfd, back, sizeof(back), PAGE));
	EXPECT_EQ(PATTERN_OK, pattern_check(back, sizeof(back), 73, PAGE));
	munmap(a, len);
	close(mfd);
}

/* A mirror counts as a region of its process and its user (src/limits.rs). */
TEST_F_TIMEOUT(mirror, mirrors_count_as_regions, 120)
{
	static const char *const param[] = {
		"/sys/module/vamr/parameters/max_regions_per_mm",
		"/sys/module/vamr/parameters/max_regions_per_user",
	};
	uint8_t *a = map_anon(PAGE);
	int fds[3], i, k;

	ASSERT_NE(NULL, a);
	for (k = 0; k < 2; k++) {
		/* Two: the fixture's file has no mirror yet. */
		ASSERT_EQ(0, sys_guard_set(param[k], "2"));
		for (i = 0; i < 3; i++) {
			fds[i] = open(EDU_DEV, O_RDWR | O_CLOEXEC);
			ASSERT_LE(0, fds[i]);
		}
		EXPECT_EQ(0, edu_mirror(fds[0], a, PAGE, MIRROR_WRITE));
		EXPECT_EQ(0, edu_mirror(fds[1], a, PAGE, MIRROR_WRITE));
		EXPECT_EQ(-ENOSPC, edu_mirror(fds[2], a, PAGE, MIRROR_WRITE)) TH_LOG("%s", param[k]);
		close(fds[0]);
		/* Given back when the mirror goes. */
		EXPECT_EQ(0, edu_mirror(fds[2], a, PAGE, MIRROR_WRITE));
		close(fds[1]);
		close(fds[2]);
		sys_guard_restore();
	}
	munmap(a, PAGE);
}

/* Process exit with the mirror populated: vamr releases it (MMU_NOTIFY_RELEASE, close). */
TEST_F_TIMEOUT(mirror, exit_with_pages_mapped, 120)
{
	int status;
	pid_t pid = fork();

	ASSERT_LE(0, pid);
	if (pid == 0) {
		size_t len = NPAGES * PAGE;
		uint8_t *a = map_anon(len);
		int fd = open(EDU_DEV, O_RDWR);

		if (!a || fd < 0)
			_exit(2);
		memset(a, 3, len);
		if (edu_mirror(fd, a, len, MIRROR_WRITE) || edu_populate(fd, a, len) != NPAGES)
			_exit(3);
		_exit(0);
	}
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_HARNESS_MAIN
