// SPDX-License-Identifier: GPL-2.0
/*
 * VA semantics of vamr regions: after every kind of change to the mapping
 * under a registered range, what the region reads and writes through its pins
 * (VAMR_IOC_ACCESS, the path a device takes) is what the CPU sees at that VA.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "mm_util.h"
#include "pattern.h"
#include "uffd_util.h"
#include "vamr_lib.h"

#define PAGE 4096ul
#define RW (VAMR_ACCESS_READ | VAMR_ACCESS_WRITE)

FIXTURE(region)
{
	int fd;
	uint8_t *buf;	/* scratch for ACCESS, 4 MiB */
};

FIXTURE_SETUP(region)
{
	self->fd = vamr_open();
	if (self->fd == -ENOENT)
		SKIP(return, "/dev/vamr not present");
	ASSERT_LE(0, self->fd);
	self->buf = mmap(NULL, 4 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, self->buf);
}

FIXTURE_TEARDOWN(region)
{
	if (self->fd >= 0)
		close(self->fd);
	munmap(self->buf, 4 << 20);
}

/* Check len bytes of p against pattern (seed, base); report the first bad offset. */
#define ASSERT_PATTERN(p, len, seed, base)                                         \
	do {                                                                       \
		size_t __bad = pattern_check((p), (len), (seed), (base));          \
		ASSERT_EQ((size_t)-1, __bad) TH_LOG("mismatch at offset %zu", __bad); \
	} while (0)

/* Registration pins what is mapped; ACCESS reads and writes it at odd offsets across pages. */
TEST_F(region, read_write_odd_offsets)
{
	size_t len = 16 * PAGE;
	uint8_t *a = map_anon(len);
	uint32_t h;

	ASSERT_NE(NULL, a);
	pattern_fill(a, len, 1, 0);
	ASSERT_EQ(0, vamr_register(self->fd, a + 3, len - 5, RW, 7, &h));

	ASSERT_EQ(0, vamr_read(self->fd, h, a + 3, self->buf, len - 5));
	ASSERT_PATTERN(self->buf, len - 5, 1, 3);

	/* 1 byte, a page-straddling write at an odd offset, and 3 pages + 1 byte. */
	pattern_fill(self->buf, 1, 2, 0);
	ASSERT_EQ(0, vamr_write(self->fd, h, a + 5, self->buf, 1));
	ASSERT_EQ(pattern_byte(2, 0), a[5]);
	pattern_fill(self->buf, 77, 3, 0);
	ASSERT_EQ(0, vamr_write(self->fd, h, a + PAGE - 33, self->buf, 77));
	ASSERT_PATTERN(a + PAGE - 33, 77, 3, 0);
	ASSERT_PATTERN(a + PAGE + 44, PAGE, 1, PAGE + 44);
	pattern_fill(self->buf, 3 * PAGE + 1, 4, 0);
	ASSERT_EQ(0, vamr_write(self->fd, h, a + 5 * PAGE + 111, self->buf, 3 * PAGE + 1));
	ASSERT_PATTERN(a + 5 * PAGE + 111, 3 * PAGE + 1, 4, 0);
	/* Bytes around the written windows are untouched. */
	ASSERT_EQ(pattern_byte(1, 5 * PAGE + 110), a[5 * PAGE + 110]);
	ASSERT_EQ(pattern_byte(1, 8 * PAGE + 112), a[8 * PAGE + 112]);
	ASSERT_EQ(pattern_byte(1, 4), a[4]);
	ASSERT_EQ(pattern_byte(1, 6), a[6]);

	/* The CPU writes, the region reads it. */
	pattern_fill(a + 9 * PAGE, PAGE, 5, 0);
	ASSERT_EQ(0, vamr_read(self->fd, h, a + 9 * PAGE, self->buf, PAGE));
	ASSERT_PATTERN(self->buf, PAGE, 5, 0);
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	munmap(a, len);
}

/* munmap + mmap(MAP_FIXED) at the same VA: the region follows to the new pages. */
TEST_F(region, munmap_mmap_same_va)
{
	size_t len = 8 * PAGE;
	uint8_t *a = map_anon(len);
	struct vamr_stats st;
	uint32_t h;

	ASSERT_NE(NULL, a);
	pattern_fill(a, len, 10, 0);
	ASSERT_EQ(0, vamr_register(self->fd, a, len, RW, 0, &h));
	ASSERT_EQ(0, munmap(a, len));
	ASSERT_EQ(0, remap_fixed(a, len));
	pattern_fill(a, len, 11, 0);

	ASSERT_EQ(0, vamr_read(self->fd, h, a, self->buf, len));
	ASSERT_PATTERN(self->buf, len, 11, 0);
	pattern_fill(self->buf, len - 2, 12, 0);
	ASSERT_EQ(0, vamr_write(self->fd, h, a + 1, self->buf, len - 2));
	ASSERT_PATTERN(a + 1, len - 2, 12, 0);

	ASSERT_EQ(0, vamr_stats(self->fd, h, &st));
	EXPECT_LE(1u, st.counters.invalidations[VAMR_EVENT_UNMAP]);
	/* The read pinned 8 pages for reading, the write upgraded them to write pins. */
	EXPECT_EQ(16u, st.counters.ondemand_repins);
	EXPECT_EQ(8u, st.counters.pages_pinned);
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	munmap(a, len);
}

/*
 * Pages that one write of a byte (seed 20, position idx) at page idx of a pinned in region h
 * (pages_pinned after minus before); the CPU must then see the byte there.
 */
static uint64_t window_of_write(struct __test_metadata *_metadata, int fd, uint32_t h,
				uint8_t *a, size_t idx)
{
	uint8_t b = pattern_byte(20, idx);
	struct vamr_stats st0, st1;

	EXPECT_EQ(0, vamr_stats(fd, h, &st0));
	EXPECT_EQ(0, vamr_write(fd, h, a + idx * PAGE + 7, &b, 1));
	EXPECT_EQ(b, a[idx * PAGE + 7]) TH_LOG("page %zu", idx);
	EXPECT_EQ(0, vamr_stats(fd, h, &st1));
	return st1.counters.pages_pinned - st0.counters.pages_pinned;
}

/*
 * The on-demand window (AHEAD_PAGES, src/region/io.rs) is fixed: an access that finds its
 * page absent faults in 64 pages from it, whether the stream goes on, jumps or misses
 * inside the last window; a window stops at the first pin it meets. The pages pinned ahead
 * are the pages the CPU sees at their VAs.
 */
TEST_F(region, access_window_is_fixed)
{
	size_t n = 2048, len = n * PAGE;
	uint8_t *a = map_anon(len);
	uint32_t h;

	ASSERT_NE(NULL, a);
	pattern_fill(a, len, 19, 0);
	ASSERT_EQ(0, vamr_register(self->fd, a, len, RW, 0, &h));
	/* Fresh, untouched memory at the same VA: every slot absent. */
	ASSERT_EQ(0, remap_fixed(a, len));

	/* A stream: 64 each time. */
	EXPECT_EQ(64u, window_of_write(_metadata, self->fd, h, a, 0));
	EXPECT_EQ(64u, window_of_write(_metadata, self->fd, h, a, 64));
	/* A jump: 64. */
	EXPECT_EQ(64u, window_of_write(_metadata, self->fd, h, a, 1000));
	/* Cut at the first pin (page 1000). */
	EXPECT_EQ(40u, window_of_write(_metadata, self->fd, h, a, 960));
	/* Pages inside the last window replaced: cut at the first pin left (page 1026). */
	ASSERT_EQ(0, remap_fixed(a + 1010 * PAGE, 16 * PAGE));
	EXPECT_EQ(16u, window_of_write(_metadata, self->fd, h, a, 1010));
	/* A miss far from any pin after a remap: 64 again. */
	ASSERT_EQ(0, remap_fixed(a + 1100 * PAGE, 300 * PAGE));
	EXPECT_EQ(64u, window_of_write(_metadata, self->fd, h, a, 1100));

	/* What was pinned ahead is what the CPU sees: it writes, the region reads. */
	pattern_fill(a, 128 * PAGE, 21, 0);
	ASSERT_EQ(0, vamr_read(self->fd, h, a, self->buf, 128 * PAGE));
	ASSERT_PATTERN(self->buf, 128 * PAGE, 21, 0);
	pattern_fill(a + 960 * PAGE, 104 * PAGE, 21, 960 * PAGE);
	ASSERT_EQ(0, vamr_read(self->fd, h, a + 960 * PAGE, self->buf, 104 * PAGE));
	ASSERT_PATTERN(self->buf, 104 * PAGE, 21, 960 * PAGE);
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	munmap(a, len);
}

/*
 * @len bytes of anonymous memory without THP, filled with seed 19 and registered
 * read-write as *@h, then replaced by new memory at the same VA (MAP_FIXED, not
 * faulted in: every slot of the region absent). Returns the start.
 */
static uint8_t *replaced_region(struct __test_metadata *_metadata, int fd, size_t len,
				uint32_t *h)
{
	uint8_t *a = map_anon(len);

	ASSERT_NE(NULL, a);
	ASSERT_EQ(0, madvise(a, len, MADV_NOHUGEPAGE));
	pattern_fill(a, len, 19, 0);
	ASSERT_EQ(0, vamr_register(fd, a, len, RW, 0, h));
	ASSERT_EQ(0, remap_fixed(a, len));
	ASSERT_EQ(0, madvise(a, len, MADV_NOHUGEPAGE));
	return a;
}

/*
 * Pinning ahead takes what is present, up to 1024 pages, and faults in only
 * the window: an access that finds its page absent also pins the pages after
 * it that the page table already maps (up to 1024 from it, mlx5's 4 MiB, in
 * two batches; up to the first pin or the first page not present), in the
 * same slow path; pages not present are faulted in only as far as the window
 * reaches (nothing is allocated further, not even the first page of a batch
 * past the window). The pins are the pages the CPU sees.
 */
TEST_F(region, access_pins_present_pages_ahead)
{
	size_t n = 2560, len = n * PAGE, i;
	unsigned char vec[336];
	uint32_t h;
	uint8_t *a = replaced_region(_metadata, self->fd, len, &h);

	/* The CPU writes [0, 300), [700, 1212) and [1213, 2560) of the new memory. */
	pattern_fill(a, 300 * PAGE, 22, 0);
	pattern_fill(a + 700 * PAGE, 512 * PAGE, 23, 0);
	pattern_fill(a + 1213 * PAGE, 1347 * PAGE, 26, 0);

	/* Page 0: it and the present pages after it, to the first one not present. */
	EXPECT_EQ(300u, window_of_write(_metadata, self->fd, h, a, 0));
	/* Page 300, not present: the window (64 pages) is faulted in, and nothing after it. */
	EXPECT_EQ(64u, window_of_write(_metadata, self->fd, h, a, 300));
	ASSERT_EQ(0, mincore(a + 364 * PAGE, 336 * PAGE, vec));
	for (i = 0; i < 336; i++)
		EXPECT_EQ(0, vec[i] & 1) TH_LOG("page %zu faulted in ahead", 364 + i);
	/* Page 700: a batch of present pages; the second batch, past the window,
	 * starts at page 1212, not present: it stops there without faulting it in. */
	EXPECT_EQ(512u, window_of_write(_metadata, self->fd, h, a, 700));
	ASSERT_EQ(0, mincore(a + 1212 * PAGE, PAGE, vec));
	EXPECT_EQ(0, vec[0] & 1) TH_LOG("page 1212 faulted in by the second batch");
	/* Page 1213: present pages, two batches, up to 1024 of them. */
	EXPECT_EQ(1024u, window_of_write(_metadata, self->fd, h, a, 1213));

	/* What was pinned ahead is what the CPU sees: it writes, the region reads. */
	pattern_fill(a, 364 * PAGE, 24, 0);
	pattern_fill(a + 700 * PAGE, 512 * PAGE, 25, 0);
	pattern_fill(a + 1213 * PAGE, 1024 * PAGE, 27, 0);
	ASSERT_EQ(0, vamr_read(self->fd, h, a, self->buf, 364 * PAGE));
	ASSERT_PATTERN(self->buf, 364 * PAGE, 24, 0);
	ASSERT_EQ(0, vamr_read(self->fd, h, a + 700 * PAGE, self->buf, 512 * PAGE));
	ASSERT_PATTERN(self->buf, 512 * PAGE, 25, 0);
	ASSERT_EQ(0, vamr_read(self->fd, h, a + 1213 * PAGE, self->buf, 1024 * PAGE));
	ASSERT_PATTERN(self->buf, 1024 * PAGE, 27, 0);
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	munmap(a, len);
}

/*
 * The window is never faulted in through userfaultfd: an access in the owner's
 * context waits for the handler for its own pages only. Pages after them that
 * need a fault in a userfaultfd-registered VMA are left absent (no userfault
 * raised for a page nobody accesses, src/vamr_glue.c), whether the access's
 * page was present or needed a userfault itself.
 */
TEST_F(region, access_window_raises_no_userfault)
{
	size_t n = 128, len = n * PAGE;
	struct late_handler *uh;
	uint32_t h;
	uint8_t *a = replaced_region(_metadata, self->fd, len, &h);
	int uffd;

	/* The CPU writes [0, 4) of the new memory, then hands it to userfaultfd. */
	pattern_fill(a, 4 * PAGE, 28, 0);
	uffd = uffd_missing(a, len);
	if (uffd == -EPERM || uffd == -ENOSYS)
		SKIP(return, "userfaultfd unavailable: %s", strerror(-uffd));
	ASSERT_LE(0, uffd);
	uh = calloc(1, sizeof(*uh));
	ASSERT_NE(NULL, uh);
	uh->uffd = uffd;
	uh->base = a;
	uh->seed = 29;
	ASSERT_EQ(0, pthread_create(&uh->thread, NULL, late_handler_main, uh));

	/* Page 0, present: it and the present pages after it; no userfault for page 4 on. */
	EXPECT_EQ(4u, window_of_write(_metadata, self->fd, h, a, 0));
	EXPECT_EQ(0, __atomic_load_n(&uh->seen, __ATOMIC_ACQUIRE));
	/* Page 100, missing: one userfault, its own; nothing after it is faulted in. */
	EXPECT_EQ(1u, window_of_write(_metadata, self->fd, h, a, 100));
	EXPECT_EQ(1, __atomic_load_n(&uh->seen, __ATOMIC_ACQUIRE));

	/* The pins are the pages the CPU sees: the handler's page 100, the CPU's [0, 4). */
	ASSERT_EQ(0, vamr_read(self->fd, h, a + 100 * PAGE + 8, self->buf, PAGE - 8));
	ASSERT_PATTERN(self->buf, PAGE - 8, 29, 100 * PAGE + 8);
	pattern_fill(a, 4 * PAGE, 30, 0);
	ASSERT_EQ(0, vamr_read(self->fd, h, a, self->buf, 4 * PAGE));
	ASSERT_PATTERN(self->buf, 4 * PAGE, 30, 0);

	__atomic_store_n(&uh->stop, 1, __ATOMIC_RELEASE);
	pthread_join(uh->thread, NULL);
	EXPECT_EQ(1, uh->seen);
	free(uh);
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	close(uffd);
	munmap(a, len);
}

/* The same through raw syscalls, many times in a row. */
TEST_F(region, raw_syscall_remap_loop)
{
	size_t len = 4 * PAGE;
	uint8_t *a = map_anon(len);
	uint32_t h;
	int i;

	ASSERT_NE(NULL, a);
	ASSERT_EQ(0, vamr_register(self->fd, a, len, RW, 0, &h));
	for (i = 0; i < 50; i++) {
		ASSERT_EQ(0, syscall(SYS_munmap, a, len));
		ASSERT_EQ((long)a, syscall(SYS_mmap, a, len, PROT_READ | PROT_WRITE,
					   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
		pattern_fill(a, len, 100 + i, 0);
		ASSERT_EQ(0, vamr_read(self->fd, h, a, self->buf, len));
		ASSERT_PATTERN(self->buf, len, 100 + i, 0);
		pattern_fill(self->buf, 100, 200 + i, 0);
		ASSERT_EQ(0, vamr_write(self->fd, h, a + PAGE - 50, self->buf, 100));
		ASSERT_PATTERN(a + PAGE - 50, 100, 200 + i, 0);
	}
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	munmap(a, len);
}

/*
 * MADV_DONTNEED: the verify pass drops the released pages' pins and faults
 * nothing back in (RSS drops as without a region); the next access sees
 * zeros, then new CPU writes.
 */
TEST_F(region, madv_dontneed)
{
	size_t len = 8 * PAGE;
	uint8_t *a = map_anon(len);
	struct vamr_stats st;
	long rss0, rss1;
	uint32_t h;
	size_t i;

	ASSERT_NE(NULL, a);
	pattern_fill(a, len, 20, 0);
	ASSERT_EQ(0, vamr_register(self->fd, a, len, RW, 0, &h));
	rss0 = vamr_status_kb("RssAnon");
	ASSERT_EQ(0, madvise(a + 2 * PAGE, 4 * PAGE, MADV_DONTNEED));
	ASSERT_EQ(4u, vamr_wait_pinned(self->fd, h, 4, 2000));

	ASSERT_EQ(0, vamr_stats(self->fd, h, &st));
	EXPECT_LE(1u, st.counters.invalidations[VAMR_EVENT_CLEAR]);
	EXPECT_EQ(4u, st.counters.pages_unpinned);
	EXPECT_EQ(0u, st.counters.pins_swapped);
	EXPECT_EQ(0u, st.counters.ondemand_repins);
	EXPECT_EQ(0u, st.counters.access_faults);
	rss1 = vamr_status_kb("RssAnon");
	EXPECT_LE(rss1 + 16, rss0) TH_LOG("RssAnon %ld -> %ld kB: released memory came back", rss0, rss1);

	ASSERT_EQ(0, vamr_read(self->fd, h, a, self->buf, len));
	ASSERT_PATTERN(self->buf, 2 * PAGE, 20, 0);
	for (i = 2 * PAGE; i < 6 * PAGE; i++)
		if (self->buf[i])
			break;
	ASSERT_EQ(6 * PAGE, i) TH_LOG("byte %zu not zero after DONTNEED", i);
	ASSERT_PATTERN(self->buf + 6 * PAGE, 2 * PAGE, 20, 6 * PAGE);

	pattern_fill(a + 3 * PAGE, PAGE, 21, 0);
	ASSERT_EQ(0, vamr_read(self->fd, h, a + 3 * PAGE, self->buf, PAGE));
	ASSERT_PATTERN(self->buf, PAGE, 21, 0);
	pattern_fill(self->buf, 2 * PAGE, 22, 0);
	ASSERT_EQ(0, vamr_write(self->fd, h, a + 2 * PAGE, self->buf, 2 * PAGE));
	ASSERT_PATTERN(a + 2 * PAGE, 2 * PAGE, 22, 0);

	ASSERT_EQ(0, vamr_stats(self->fd, h, &st));
	/* The read pinned the 4 released pages (zero page, read pins), the write upgraded 2. */
	EXPECT_LE(4u, st.counters.ondemand_repins);
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	munmap(a, len);
}

/* mremap of another buffer into the range: the region sees the moved pages. */
TEST_F(region, mremap_into_range)
{
	size_t len = 4 * PAGE;
	uint8_t *a = map_anon(len), *b = map_anon(len);
	uint32_t h;

	ASSERT_NE(NULL, a);
	ASSERT_NE(NULL, b);
	pattern_fill(a, len, 30, 0);
	pattern_fill(b, len, 31, 0);
	ASSERT_EQ(0, vamr_register(self->fd, a, len, RW, 0, &h));
	ASSERT_EQ(a, mremap(b, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, a));
	ASSERT_EQ(0, vamr_read(self->fd, h, a, self->buf, len));
	ASSERT_PATTERN(self->buf, len, 31, 0);
	pattern_fill(self->buf, PAGE + 3, 32, 0);
	ASSERT_EQ(0, vamr_write(self->fd, h, a + PAGE, self->buf, PAGE + 3));
	ASSERT_PATTERN(a + PAGE, PAGE + 3, 32, 0);
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	munmap(a, len);
}

/* mremap of the range's pages elsewhere: the range is empty, the data moved away. */
TEST_F(region, mremap_out_of_range)
{
	size_t len = 4 * PAGE;
	uint8_t *a = map_anon(len), *dst = map_anon(len);
	uint32_t h;

	ASSERT_NE(NULL, a);
	ASSERT_NE(NULL, dst);
	pattern_fill(a, len, 40, 0);
	ASSERT_EQ(0, vamr_register(self->fd, a, len, RW, 0, &h));
	ASSERT_EQ(dst, mremap(a, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, dst));
	EXPECT_EQ(-EFAULT, vamr_read(self->fd, h, a, self->buf, len));
	ASSERT_PATTERN(dst, len, 40, 0);
	/* Map something new there: the region follows again. */
	ASSERT_EQ(0, remap_fixed(a, len));
	pattern_fill(a, len, 41, 0);
	ASSERT_EQ(0, vamr_read(self->fd, h, a, self->buf, len));
	ASSERT_PATTERN(self->buf, len, 41, 0);
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	munmap(a, len);
	munmap(dst, len);
}

/* A MAP_FIXED overlay of part of the range: only that part changes. */
TEST_F(region, map_fixed_partial_overlay)
{
	size_t len = 8 * PAGE;
	uint8_t *a = map_anon(len);
	uint32_t h;

	ASSERT_NE(NULL, a);
	pattern_fill(a, len, 50, 0);
	ASSERT_EQ(0, vamr_register(self->fd, a, len, RW, 0, &h));
	ASSERT_EQ(0, remap_fixed(a + 2 * PAGE, 3 * PAGE));
	pattern_fill(a + 2 * PAGE, 3 * PAGE, 51, 0);
	ASSERT_EQ(0, vamr_read(self->fd, h, a, self->buf, len));
	ASSERT_PATTERN(self->buf, 2 * PAGE, 50, 0);
	ASSERT_PATTERN(self->buf + 2 * PAGE, 3 * PAGE, 51, 0);
	ASSERT_PATTERN(self->buf + 5 * PAGE, 3 * PAGE, 50, 5 * PAGE);
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	munmap(a, len);
}

/* fork: the parent keeps its pages (copy-on-pin), the child's writes are not seen. */
TEST_F(region, fork_parent_keeps_pages)
{
	size_t len = 4 * PAGE;
	uint8_t *a = map_anon(len);
	int status;
	pid_t pid;
	uint32_t h;

	ASSERT_NE(NULL, a);
	pattern_fill(a, len, 60, 0);
	ASSERT_EQ(0, vamr_register(self->fd, a, len, RW, 0, &h));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		pattern_fill(a, len, 61, 0);
		_exit(0);
	}
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_EQ(0, status);
	ASSERT_EQ(0, vamr_read(self->fd, h, a, self->buf, len));
	ASSERT_PATTERN(self->buf, len, 60, 0);
	/* Parent writes by CPU and through the region still meet. */
	pattern_fill(a + PAGE, PAGE, 62, 0);
	ASSERT_EQ(0, vamr_read(self->fd, h, a + PAGE, self->buf, PAGE));
	ASSERT_PATTERN(self->buf, PAGE, 62, 0);
	pattern_fill(self->buf, PAGE, 63, 0);
	ASSERT_EQ(0, vamr_write(self->fd, h, a + 2 * PAGE, self->buf, PAGE));
	ASSERT_PATTERN(a + 2 * PAGE, PAGE, 63, 0);
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	munmap(a, len);
}

/*
 * fork invalidates the parent's range (MMU_NOTIFY_PROTECTION_PAGE); pinned
 * pages are copied for the child at once (copy-on-pin), so the parent keeps
 * its pages writable and the verify pass keeps every pin. The parent's CPU
 * and the region share the parent's pages; the child keeps the old data.
 */
TEST_F(region, fork_keeps_pins)
{
	size_t len = 4 * PAGE;
	uint8_t *a = map_anon(len);
	int pipefd[2], status;
	struct vamr_stats st;
	char c;
	pid_t pid;
	uint32_t h;

	ASSERT_NE(NULL, a);
	pattern_fill(a, len, 70, 0);
	ASSERT_EQ(0, vamr_register(self->fd, a, len, RW, 0, &h));
	ASSERT_EQ(0, pipe(pipefd));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		/* Keep the child's view alive until the parent is done writing. */
		close(pipefd[1]);
		if (read(pipefd[0], &c, 1) != 1)
			_exit(2);
		_exit(pattern_check(a, len, 70, 0) == (size_t)-1 ? 0 : 1);
	}
	close(pipefd[0]);
	ASSERT_EQ(4u, vamr_wait_counter(self->fd, h, offsetof(struct vamr_counters, pins_kept), 4,
					2000));
	ASSERT_EQ(0, vamr_stats(self->fd, h, &st));
	EXPECT_LE(1u, st.counters.invalidations[VAMR_EVENT_PROTECTION_PAGE]);
	EXPECT_EQ(4u, st.counters.pages_pinned);
	EXPECT_EQ(0u, st.counters.pages_unpinned);
	EXPECT_EQ(0u, st.counters.pins_swapped);
	EXPECT_EQ(0u, st.counters.ondemand_repins);
	EXPECT_EQ(0u, st.counters.access_faults);

	pattern_fill(a + PAGE, PAGE, 71, 0);
	ASSERT_EQ(0, vamr_read(self->fd, h, a, self->buf, len));
	ASSERT_PATTERN(self->buf, PAGE, 70, 0);
	ASSERT_PATTERN(self->buf + PAGE, PAGE, 71, 0);
	pattern_fill(self->buf, PAGE, 72, 0);
	ASSERT_EQ(0, vamr_write(self->fd, h, a + 2 * PAGE, self->buf, PAGE));
	ASSERT_PATTERN(a + 2 * PAGE, PAGE, 72, 0);
	ASSERT_EQ(0, vamr_stats(self->fd, h, &st));
	EXPECT_EQ(0u, st.counters.ondemand_repins);

	ASSERT_EQ(1, write(pipefd[1], "x", 1));
	close(pipefd[1]);
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_EQ(0, status) TH_LOG("the child saw the parent's writes");
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	munmap(a, len);
}

/* Registration over a hole; the hole is EFAULT until something is mapped there. */
TEST_F(region, hole_then_mapped)
{
	size_t len = 4 * PAGE;
	uint8_t *a = map_anon(len);
	struct vamr_stats st;
	uint32_t h;

	ASSERT_NE(NULL, a);
	pattern_fill(a, len, 80, 0);
	ASSERT_EQ(0, munmap(a + PAGE, 2 * PAGE));
	ASSERT_EQ(0, vamr_register(self->fd, a, len, RW, 0, &h));
	ASSERT_EQ(0, vamr_stats(self->fd, h, &st));
	EXPECT_EQ(2u, st.counters.pages_pinned);
	EXPECT_EQ(-EFAULT, vamr_read(self->fd, h, a + PAGE + 10, self->buf, 10));
	ASSERT_EQ(0, vamr_read(self->fd, h, a, self->buf, PAGE));
	ASSERT_PATTERN(self->buf, PAGE, 80, 0);
	ASSERT_EQ(0, remap_fixed(a + PAGE, 2 * PAGE));
	pattern_fill(a + PAGE, 2 * PAGE, 81, 0);
	ASSERT_EQ(0, vamr_read(self->fd, h, a, self->buf, len));
	ASSERT_PATTERN(self->buf, PAGE, 80, 0);
	ASSERT_PATTERN(self->buf + PAGE, 2 * PAGE, 81, 0);
	ASSERT_PATTERN(self->buf + 3 * PAGE, PAGE, 80, 3 * PAGE);
	ASSERT_EQ(0, vamr_stats(self->fd, h, &st));
	EXPECT_EQ(4u, st.counters.pages_pinned);
	EXPECT_LE(1u, st.counters.access_faults);
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	munmap(a, len);
}

/* THP: a huge page under the region, then split by a partial munmap. */
TEST_F(region, thp_and_split)
{
	size_t huge = 2ul << 20, len = huge;
	uint8_t *raw = map_anon(2 * huge), *a;
	uint32_t h;

	ASSERT_NE(NULL, raw);
	a = (uint8_t *)(((uintptr_t)raw + huge - 1) & ~(huge - 1));
	if (madvise(a, len, MADV_HUGEPAGE))
		SKIP(return, "MADV_HUGEPAGE: %s (no THP in this kernel)", strerror(errno));
	pattern_fill(a, len, 90, 0);
	if (anon_huge_kb(a) < 2048)
		SKIP(return, "no huge page under the range (AnonHugePages %ld kB)", anon_huge_kb(a));
	ASSERT_EQ(0, vamr_register(self->fd, a, len, RW, 0, &h));
	ASSERT_EQ(0, vamr_read(self->fd, h, a + 12345, self->buf, 1 << 20));
	ASSERT_PATTERN(self->buf, 1 << 20, 90, 12345);
	/* Split: unmap one 4 KiB page in the middle of the huge page. */
	ASSERT_EQ(0, munmap(a + 256 * PAGE, PAGE));
	EXPECT_EQ(-EFAULT, vamr_read(self->fd, h, a + 256 * PAGE, self->buf, 8));
	ASSERT_EQ(0, vamr_read(self->fd, h, a, self->buf, 256 * PAGE));
	ASSERT_PATTERN(self->buf, 256 * PAGE, 90, 0);
	ASSERT_EQ(0, vamr_read(self->fd, h, a + 257 * PAGE, self->buf, 255 * PAGE));
	ASSERT_PATTERN(self->buf, 255 * PAGE, 90, 257 * PAGE);
	pattern_fill(self->buf, 2 * PAGE, 91, 0);
	ASSERT_EQ(0, vamr_write(self->fd, h, a + 300 * PAGE + 7, self->buf, 2 * PAGE));
	ASSERT_PATTERN(a + 300 * PAGE + 7, 2 * PAGE, 91, 0);
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	munmap(raw, 2 * huge);
}

/* hugetlbfs: skipped when no huge pages are reserved. */
TEST_F(region, hugetlb)
{
	size_t len = 2ul << 20;
	uint8_t *a = mmap(NULL, len, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	uint32_t h;

	if (a == MAP_FAILED)
		SKIP(return, "no hugetlb pages reserved (errno %d)", errno);
	pattern_fill(a, len, 95, 0);
	ASSERT_EQ(0, vamr_register(self->fd, a, len, RW, 0, &h));
	ASSERT_EQ(0, vamr_read(self->fd, h, a + 4097, self->buf, len - 8193));
	ASSERT_PATTERN(self->buf, len - 8193, 95, 4097);
	ASSERT_EQ(0, munmap(a, len));
	ASSERT_EQ(-EFAULT, vamr_read(self->fd, h, a, self->buf, 8));
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
}

/* memfd MAP_SHARED: writes are seen through another mapping; PUNCH_HOLE zeroes and re-pins. */
TEST_F(region, memfd_shared_punch_hole)
{
	size_t len = 8 * PAGE;
	int mfd = memfd_create("vamr", 0);
	uint8_t *a, *b;
	uint32_t h;
	size_t i;

	ASSERT_LE(0, mfd);
	ASSERT_EQ(0, ftruncate(mfd, len));
	a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	b = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	ASSERT_NE(MAP_FAILED, a);
	ASSERT_NE(MAP_FAILED, b);
	pattern_fill(a, len, 110, 0);
	ASSERT_EQ(0, vamr_register(self->fd, a, len, RW, 0, &h));
	pattern_fill(self->buf, PAGE, 111, 0);
	ASSERT_EQ(0, vamr_write(self->fd, h, a + 3 * PAGE + 9, self->buf, PAGE));
	ASSERT_PATTERN(b + 3 * PAGE + 9, PAGE, 111, 0);

	ASSERT_EQ(0, fallocate(mfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 2 * PAGE, 3 * PAGE));
	ASSERT_EQ(0, vamr_read(self->fd, h, a + 2 * PAGE, self->buf, 3 * PAGE));
	for (i = 0; i < 3 * PAGE; i++)
		if (self->buf[i])
			break;
	ASSERT_EQ(3 * PAGE, i) TH_LOG("byte %zu not zero after the hole punch", i);
	pattern_fill(self->buf, 3 * PAGE, 112, 0);
	ASSERT_EQ(0, vamr_write(self->fd, h, a + 2 * PAGE, self->buf, 3 * PAGE));
	ASSERT_PATTERN(b + 2 * PAGE, 3 * PAGE, 112, 0);
	ASSERT_PATTERN(a + 2 * PAGE, 3 * PAGE, 112, 0);
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	munmap(a, len);
	munmap(b, len);
	close(mfd);
}

/* Two regions over the same VA see the same memory and both follow a remap. */
TEST_F(region, two_regions_same_va)
{
	size_t len = 4 * PAGE;
	uint8_t *a = map_anon(len);
	uint32_t h1, h2;

	ASSERT_NE(NULL, a);
	pattern_fill(a, len, 120, 0);
	ASSERT_EQ(0, vamr_register(self->fd, a, len, RW, 1, &h1));
	ASSERT_EQ(0, vamr_register(self->fd, a + PAGE, 2 * PAGE, RW, 2, &h2));
	pattern_fill(self->buf, 100, 121, 0);
	ASSERT_EQ(0, vamr_write(self->fd, h1, a + PAGE + 50, self->buf, 100));
	ASSERT_EQ(0, vamr_read(self->fd, h2, a + PAGE + 50, self->buf + PAGE, 100));
	ASSERT_PATTERN(self->buf + PAGE, 100, 121, 0);
	ASSERT_EQ(0, munmap(a, len));
	ASSERT_EQ(0, remap_fixed(a, len));
	pattern_fill(a, len, 122, 0);
	ASSERT_EQ(0, vamr_read(self->fd, h1, a, self->buf, len));
	ASSERT_PATTERN(self->buf, len, 122, 0);
	ASSERT_EQ(0, vamr_read(self->fd, h2, a + PAGE, self->buf, 2 * PAGE));
	ASSERT_PATTERN(self->buf, 2 * PAGE, 122, PAGE);
	ASSERT_EQ(0, vamr_unregister(self->fd, h2));
	ASSERT_EQ(0, vamr_unregister(self->fd, h1));
	munmap(a, len);
}

/* 8-byte atomics and atomic write act on the page the CPU sees. */
TEST_F(region, atomics)
{
	size_t len = 2 * PAGE;
	uint8_t *a = map_anon(len);
	uint64_t *w, old;
	uint32_t h;

	ASSERT_NE(NULL, a);
	w = (uint64_t *)(a + PAGE + 24);
	*w = 1000;
	ASSERT_EQ(0, vamr_register(self->fd, a, len, RW, 0, &h));
	ASSERT_EQ(0, vamr_atomic(self->fd, h, w, VAMR_ATOMIC_FETCH_ADD, 5, 0, &old));
	EXPECT_EQ(1000u, old);
	EXPECT_EQ(1005u, *w);
	ASSERT_EQ(0, vamr_atomic(self->fd, h, w, VAMR_ATOMIC_CMP_SWAP, 1, 7, &old));
	EXPECT_EQ(1005u, old);
	EXPECT_EQ(1005u, *w);
	ASSERT_EQ(0, vamr_atomic(self->fd, h, w, VAMR_ATOMIC_CMP_SWAP, 1005, 0x1122334455667788ull, &old));
	EXPECT_EQ(0x1122334455667788ull, *w);
	ASSERT_EQ(0, vamr_atomic(self->fd, h, w, VAMR_ATOMIC_WRITE, 0, 42, &old));
	EXPECT_EQ(0x1122334455667788ull, old);
	EXPECT_EQ(42u, *w);
	/* After a remap the atomic lands in the new page. */
	ASSERT_EQ(0, munmap(a, len));
	ASSERT_EQ(0, remap_fixed(a, len));
	*w = 9;
	ASSERT_EQ(0, vamr_atomic(self->fd, h, w, VAMR_ATOMIC_FETCH_ADD, 1, 0, &old));
	EXPECT_EQ(9u, old);
	EXPECT_EQ(10u, *w);
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	munmap(a, len);
}

/* Prefetch pins the pages of a remapped range before the first access. */
TEST_F(region, prefetch_after_remap)
{
	size_t len = 8 * PAGE;
	uint8_t *a = map_anon(len);
	struct vamr_stats st;
	uint32_t h, pages = 0;

	ASSERT_NE(NULL, a);
	ASSERT_EQ(0, vamr_register(self->fd, a, len, RW, 0, &h));
	ASSERT_EQ(0, munmap(a, len));
	ASSERT_EQ(0, remap_fixed(a, len));
	pattern_fill(a, len, 130, 0);
	ASSERT_EQ(0, vamr_stats(self->fd, h, &st));
	EXPECT_EQ(0u, st.counters.pages_pinned);
	ASSERT_EQ(0, vamr_prefetch(self->fd, h, a + 1, len - 1, &pages));
	EXPECT_EQ(8u, pages);
	ASSERT_EQ(0, vamr_stats(self->fd, h, &st));
	EXPECT_EQ(8u, st.counters.pages_pinned);
	ASSERT_EQ(0, vamr_read(self->fd, h, a, self->buf, len));
	ASSERT_PATTERN(self->buf, len, 130, 0);
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	munmap(a, len);
}

/*
 * A 2 GiB region that is a hole except for its last pages: registration is
 * quick (holes are skipped a VMA at a time, the pin table is not limited by
 * kmalloc), the mapped tail is pinned and accessible, the cover is charged.
 */
TEST_F(region, large_sparse_region)
{
	size_t len = 2ul << 30, tail = 4 * PAGE;
	long vmpin = vamr_vmpin_kb();
	struct vamr_stats st;
	uint8_t *a;
	uint32_t h;

	a = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	ASSERT_NE(MAP_FAILED, a);
	ASSERT_EQ(0, munmap(a, len - tail));
	ASSERT_EQ(0, mprotect(a + len - tail, tail, PROT_READ | PROT_WRITE));
	pattern_fill(a + len - tail, tail, 140, 0);
	ASSERT_EQ(0, vamr_register(self->fd, a, len, RW, 0, &h));
	EXPECT_EQ(vmpin + (long)(len >> 10), vamr_vmpin_kb());
	ASSERT_EQ(0, vamr_stats(self->fd, h, &st));
	EXPECT_EQ(4u, st.counters.pages_pinned);
	ASSERT_EQ(0, vamr_read(self->fd, h, a + len - tail + 1, self->buf, tail - 1));
	ASSERT_PATTERN(self->buf, tail - 1, 140, 1);
	EXPECT_EQ(-EFAULT, vamr_read(self->fd, h, a + (1ul << 30), self->buf, 8));
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	EXPECT_EQ(vmpin, vamr_vmpin_kb());
	munmap(a + len - tail, tail);
}

/*
 * FOLL_PIN references taken and not yet released, machine-wide (/proc/vmstat,
 * after vm.stat_refresh folds the per-CPU counts in), or -1 when they cannot
 * be read (not root).
 */
static long long pins_outstanding(void)
{
	long long acq = -1, rel = -1, v;
	char name[64];
	FILE *f;
	int fd;

	fd = open("/proc/sys/vm/stat_refresh", O_WRONLY);
	if (fd < 0)
		return -1;
	if (write(fd, "1\n", 2) != 2) {
		close(fd);
		return -1;
	}
	close(fd);
	f = fopen("/proc/vmstat", "r");
	if (!f)
		return -1;
	while (fscanf(f, "%63s %lld", name, &v) == 2) {
		if (!strcmp(name, "nr_foll_pin_acquired"))
			acq = v;
		else if (!strcmp(name, "nr_foll_pin_released"))
			rel = v;
	}
	fclose(f);
	return acq < 0 || rel < 0 ? -1 : acq - rel;
}

/*
 * PG_dirty of the page mapped at p (KPF_DIRTY of /proc/kpageflags, through the
 * PFN in /proc/self/pagemap; pm and kf are those files open): 0 or 1, or -1
 * when the page is not present or the PFN hidden (not root).
 */
static int page_dirty(int pm, int kf, const void *p)
{
	const uint64_t pfn_mask = (1ull << 55) - 1;
	uint64_t ent, flags;

	if (pread(pm, &ent, 8, (uintptr_t)p / PAGE * 8) != 8 || !(ent >> 63) || !(ent & pfn_mask))
		return -1;
	if (pread(kf, &flags, 8, (ent & pfn_mask) * 8) != 8)
		return -1;
	return (flags >> 4) & 1;
}

/* The PFN mapped at p (pagemap *pm), or 0. */
static uint64_t page_pfn(int pm, const void *p)
{
	uint64_t ent;

	if (pread(pm, &ent, 8, (uintptr_t)p / PAGE * 8) != 8 || !(ent >> 63))
		return 0;
	return ent & ((1ull << 55) - 1);
}

/*
 * Registers [a, a + len) (RW, through fd) into *h on the pages it has now:
 * 0; 1 when registering moved page a (pagemap pm), the region then
 * unregistered again (the caller skips); or a -errno of the registration
 * or of that unregistration. A long-term pin migrates a page out of
 * ZONE_MOVABLE or CMA first (a guest booted with movablecore=, see
 * rdma_movable.c), and migration moves the PTE's dirty bit to the new page's
 * PG_dirty (try_to_migrate_one()), so the page is dirty before teardown and
 * teardown's dirtying cannot be seen on it.
 */
static int register_unmoved(int fd, int pm, void *a, size_t len, uint32_t *h)
{
	uint64_t pfn0 = page_pfn(pm, a);
	int ret = vamr_register(fd, a, len, RW, 0, h);

	if (ret || page_pfn(pm, a) == pfn0)
		return ret;
	ret = vamr_unregister(fd, *h);
	return ret ? ret : 1;
}

/*
 * Opens pagemap and kpageflags into *pm and *kf and reads the machine's count
 * of FOLL_PIN references not yet released into *before: 0 when all of it is
 * usable (page a's dirty bit can be read), else -1 with both files closed
 * (not root, or no vm.stat_refresh: the caller skips).
 */
static int pin_probes_open(int *pm, int *kf, long long *before, const void *a)
{
	*pm = open("/proc/self/pagemap", O_RDONLY);
	*kf = open("/proc/kpageflags", O_RDONLY);
	*before = pins_outstanding();
	if (*before >= 0 && *pm >= 0 && *kf >= 0 && page_dirty(*pm, *kf, a) >= 0)
		return 0;
	if (*pm >= 0)
		close(*pm);
	if (*kf >= 0)
		close(*kf);
	return -1;
}

/*
 * Teardown releases every pin (the machine's count of FOLL_PIN references
 * not yet released is back where it was) and dirties exactly the pages
 * pinned for writing (PG_dirty, which a CPU-written anonymous page has clear
 * until something marks it): a writable region of 4200 pages, more than one
 * 4096-page unpin chunk, pinned for writing at registration but for a hole of
 * 100 pages across the chunk boundary, which is mapped afterwards and
 * prefetched, so pinned for reading (more than one 64-page batch of read pins).
 */
TEST_F(region, teardown_unpins_and_dirties)
{
	size_t n = 4200, h0 = 4050, nh = 100, len = n * PAGE, i;
	size_t dirty_w = 0, dirty_r = 0, dirty_before = 0;
	long long before, during, after;
	struct vamr_stats st;
	uint32_t h, pages = 0;
	uint8_t *a = map_aligned_2m(len), *hole;
	int pm, kf, d, ret;

	ASSERT_NE(NULL, a);
	hole = a + h0 * PAGE;
	pattern_fill(a, len, 31, 0);
	ASSERT_EQ(0, munmap(hole, nh * PAGE));
	if (pin_probes_open(&pm, &kf, &before, a)) {
		munmap(a, len);
		SKIP(return, "vm.stat_refresh, pagemap PFNs or kpageflags not usable (not root?)");
	}
	ret = register_unmoved(self->fd, pm, a, len, &h);
	ASSERT_LE(0, ret) TH_LOG("register (or unregister after the move): %d", ret);
	if (ret) {
		close(pm);
		close(kf);
		munmap(a, len);
		SKIP(return, "registration migrated the pages (movable zone), which dirtied them");
	}
	ASSERT_EQ(hole, mmap(hole, nh * PAGE, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
	ASSERT_EQ(0, madvise(hole, nh * PAGE, MADV_NOHUGEPAGE));
	pattern_fill(hole, nh * PAGE, 32, 0);
	ASSERT_EQ(0, vamr_prefetch(self->fd, h, hole, nh * PAGE, &pages));
	EXPECT_EQ(nh, pages);
	ASSERT_EQ(0, vamr_stats(self->fd, h, &st));
	EXPECT_EQ(n, st.counters.pages_pinned);
	during = pins_outstanding();
	EXPECT_EQ(before + (long long)n, during);
	/* The read pins hold what the CPU wrote; the write pins too. */
	ASSERT_EQ(0, vamr_read(self->fd, h, hole, self->buf, nh * PAGE));
	ASSERT_PATTERN(self->buf, nh * PAGE, 32, 0);
	ASSERT_EQ(0, vamr_read(self->fd, h, a + 4000 * PAGE, self->buf, 50 * PAGE));
	ASSERT_PATTERN(self->buf, 50 * PAGE, 31, 4000 * PAGE);
	for (i = 0; i < n; i++)
		dirty_before += page_dirty(pm, kf, a + i * PAGE) == 1;
	/* Otherwise the check after teardown would prove nothing. */
	ASSERT_EQ(0u, dirty_before) TH_LOG("pages already dirty before teardown");

	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	after = pins_outstanding();
	EXPECT_EQ(before, after) TH_LOG("%lld pins left after teardown", after - before);
	for (i = 0; i < n; i++) {
		d = page_dirty(pm, kf, a + i * PAGE);
		ASSERT_LE(0, d) TH_LOG("page %zu not present", i);
		if (i >= h0 && i < h0 + nh)
			dirty_r += d;
		else
			dirty_w += d;
	}
	EXPECT_EQ(n - nh, dirty_w);
	EXPECT_EQ(0u, dirty_r);
	close(pm);
	close(kf);
	munmap(a, len);
}

/*
 * The same for a pin table kept in the region itself (4 pages or fewer), with
 * the pins that change kind: pages 0-1 pinned for writing at registration,
 * then made read-only (mprotect: the verify pass keeps the pins but forbids
 * writes through them); page 2 a hole, mapped later, prefetched for reading and
 * then written through the region (the write pin replaces the read pin); page
 * 3 likewise, only read. Teardown releases all 4 pins and dirties pages 0-2
 * (pinned for writing, downgraded or not), not page 3. A read-only region of
 * 3 pages (read pins only) then releases its pins without dirtying any.
 */
TEST_F(region, teardown_small_table_dirties_write_pins)
{
	size_t n = 4, len = n * PAGE, i;
	long long before, during, after;
	struct vamr_stats st;
	uint32_t h, pages = 0;
	uint8_t *a = map_anon(len);
	int pm, kf, d, ret;

	ASSERT_NE(NULL, a);
	pattern_fill(a, len, 41, 0);
	ASSERT_EQ(0, munmap(a + 2 * PAGE, 2 * PAGE));
	if (pin_probes_open(&pm, &kf, &before, a)) {
		munmap(a, len);
		SKIP(return, "vm.stat_refresh, pagemap PFNs or kpageflags not usable (not root?)");
	}
	ret = register_unmoved(self->fd, pm, a, len, &h);
	ASSERT_LE(0, ret) TH_LOG("register (or unregister after the move): %d", ret);
	if (ret) {
		close(pm);
		close(kf);
		munmap(a, len);
		SKIP(return, "registration migrated the pages (movable zone), which dirtied them");
	}
	ASSERT_EQ(0, remap_fixed(a + 2 * PAGE, 2 * PAGE));
	pattern_fill(a + 2 * PAGE, 2 * PAGE, 42, 0);
	ASSERT_EQ(0, vamr_prefetch(self->fd, h, a + 2 * PAGE, 2 * PAGE, &pages));
	EXPECT_EQ(2u, pages);
	/* Page 2 through the region: a write pin in place of its read pin. */
	pattern_fill(self->buf, PAGE, 43, 0);
	ASSERT_EQ(0, vamr_write(self->fd, h, a + 2 * PAGE, self->buf, PAGE));
	ASSERT_PATTERN(a + 2 * PAGE, PAGE, 43, 0);
	ASSERT_EQ(0, mprotect(a, 2 * PAGE, PROT_READ));
	ASSERT_EQ(2u, vamr_wait_counter(self->fd, h, offsetof(struct vamr_counters, pins_kept), 2,
					2000));
	/* The downgraded pins no longer take writes. */
	EXPECT_NE(0, vamr_write(self->fd, h, a, self->buf, PAGE));
	ASSERT_EQ(0, vamr_stats(self->fd, h, &st));
	EXPECT_EQ(n, st.counters.pages_pinned);
	during = pins_outstanding();
	EXPECT_EQ(before + (long long)n, during);
	for (i = 0; i < n; i++)
		ASSERT_EQ(0, page_dirty(pm, kf, a + i * PAGE)) TH_LOG("page %zu dirty before teardown", i);

	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	after = pins_outstanding();
	EXPECT_EQ(before, after) TH_LOG("%lld pins left after teardown", after - before);
	for (i = 0; i < n; i++) {
		d = page_dirty(pm, kf, a + i * PAGE);
		EXPECT_EQ(i < 3 ? 1 : 0, d) TH_LOG("page %zu", i);
	}

	/* A read-only region: read pins only, none dirtied. */
	ASSERT_EQ(0, mprotect(a, 2 * PAGE, PROT_READ | PROT_WRITE));
	ASSERT_EQ(0, munmap(a, len));
	a = map_anon(3 * PAGE);
	ASSERT_NE(NULL, a);
	pattern_fill(a, 3 * PAGE, 44, 0);
	before = pins_outstanding();
	ASSERT_EQ(0, vamr_register(self->fd, a, 3 * PAGE, VAMR_ACCESS_READ, 0, &h));
	ASSERT_EQ(0, vamr_stats(self->fd, h, &st));
	EXPECT_EQ(3u, st.counters.pages_pinned);
	EXPECT_EQ(before + 3, pins_outstanding());
	ASSERT_EQ(0, vamr_read(self->fd, h, a, self->buf, 3 * PAGE));
	ASSERT_PATTERN(self->buf, 3 * PAGE, 44, 0);
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	EXPECT_EQ(before, pins_outstanding());
	for (i = 0; i < 3; i++)
		EXPECT_EQ(0, page_dirty(pm, kf, a + i * PAGE)) TH_LOG("read-only page %zu", i);
	close(pm);
	close(kf);
	munmap(a, 3 * PAGE);
}

/* Region page indexes of teardown_unpins_every_run_layout replaced by fresh pages. */
static const size_t layout_repl[] = { 100, 200, 215, 300, 317, 334, 400, 416, 4070 };
#define LAYOUT_OFF 32		/* the region starts this many pages into a huge page */
#define LAYOUT_R0 500		/* then LAYOUT_NR fresh pages in a row from here */
#define LAYOUT_NR 31

/*
 * Whether pages [from, from + count) of that region read through handle h
 * (into buf) hold what the CPU wrote: the huge pages' pattern (seed 60, offset
 * from the huge page's start), or the fresh pages' (seed 61).
 */
static int layout_pages_right(int fd, uint32_t h, uint8_t *a, uint8_t *buf, size_t from,
			      size_t count)
{
	size_t k, q;

	if (vamr_read(fd, h, a + from * PAGE, buf, count * PAGE))
		return 0;
	for (k = 0; k < count; k++) {
		size_t p = from + k;
		int fresh = p >= LAYOUT_R0 && p < LAYOUT_R0 + LAYOUT_NR;

		for (q = 0; q < sizeof(layout_repl) / sizeof(layout_repl[0]); q++)
			fresh |= layout_repl[q] == p;
		if (pattern_check(buf + k * PAGE, PAGE, fresh ? 61 : 60,
				  fresh ? p * PAGE : (p + LAYOUT_OFF) * PAGE) != PATTERN_OK)
			return 0;
	}
	return 1;
}

/*
 * Teardown releases each pin exactly once whatever runs of consecutive page
 * frames the pins form (unpin_table() in src/pin.rs releases a run of 16 or
 * more frames with one call and compacts the others): a region of 4160 pages
 * over THP-backed memory (runs of up to 512 frames) that starts 32 pages into
 * a huge page, so that the 4096-slot chunk boundary cuts a run of 25 frames,
 * with single pages replaced by fresh ones (new frames) so that runs of exactly
 * 15, 16 and 17 frames, a run of 14 whose slot 15 on still continues it (the
 * replaced page sits in between), 31 replaced pages in a row and a hole (an
 * absent slot) appear. The machine's count of FOLL_PIN references not yet
 * released is back where it was after teardown, and every page's bytes were
 * right through the region before it.
 */
TEST_F(region, teardown_unpins_every_run_layout)
{
	const size_t huge = 2ul << 20, n = 4160, hole = 600;
	/* Whole huge pages under the region: 9 of them, from base. */
	const size_t span = 9 * huge;
	size_t len = n * PAGE, maplen = span + huge, i, k, runs16 = 0, short_runs = 0, run;
	long long before, during, after;
	uint8_t *raw = map_anon(maplen), *base, *a;
	uint64_t *pfn;
	struct vamr_stats st;
	uint32_t h;
	int pm, kf, c201, c301, c4071;

	ASSERT_NE(NULL, raw);
	base = (uint8_t *)(((uintptr_t)raw + huge - 1) & ~(huge - 1));
	a = base + LAYOUT_OFF * PAGE;
	if (madvise(base, span, MADV_HUGEPAGE)) {
		munmap(raw, maplen);
		SKIP(return, "MADV_HUGEPAGE: %s (no THP in this kernel)", strerror(errno));
	}
	pattern_fill(base, span, 60, 0);
	if (anon_huge_kb(a) < 2048) {
		munmap(raw, maplen);
		SKIP(return, "no huge page under the range (AnonHugePages %ld kB)", anon_huge_kb(a));
	}
	for (k = 0; k < sizeof(layout_repl) / sizeof(layout_repl[0]); k++) {
		ASSERT_EQ(0, remap_fixed(a + layout_repl[k] * PAGE, PAGE));
		pattern_fill(a + layout_repl[k] * PAGE, PAGE, 61, layout_repl[k] * PAGE);
	}
	ASSERT_EQ(0, remap_fixed(a + LAYOUT_R0 * PAGE, LAYOUT_NR * PAGE));
	pattern_fill(a + LAYOUT_R0 * PAGE, LAYOUT_NR * PAGE, 61, LAYOUT_R0 * PAGE);
	ASSERT_EQ(0, munmap(a + hole * PAGE, PAGE));
	if (pin_probes_open(&pm, &kf, &before, a)) {
		munmap(raw, maplen);
		SKIP(return, "vm.stat_refresh, pagemap PFNs or kpageflags not usable (not root?)");
	}
	/* The runs the table will hold: PFN i continuing PFN i - 1, cut at each chunk. */
	pfn = calloc(n, sizeof(*pfn));
	ASSERT_NE(NULL, pfn);
	for (i = 0; i < n; i++)
		pfn[i] = page_pfn(pm, a + i * PAGE);
	for (i = 0; i < n; i += run) {
		for (run = 1; i + run < n && i + run != 4096 && pfn[i] &&
			      pfn[i + run] == pfn[i] + run; run++)
			;
		if (!pfn[i])
			continue;
		if (run >= 16)
			runs16++;
		else
			short_runs++;
	}
	c201 = pfn[201] + 15 == pfn[216];
	c301 = pfn[301] + 15 == pfn[316];
	c4071 = pfn[4071] + 25 == pfn[4096];
	free(pfn);
	if (!runs16 || !c201 || !c301 || !c4071) {
		close(pm);
		close(kf);
		munmap(raw, maplen);
		SKIP(return, "the huge pages are not where the layout needs them (%zu runs of 16+; "
			     "201-216 %d, 301-316 %d, 4071-4096 %d)", runs16, c201, c301, c4071);
	}
	TH_LOG("%zu runs of 16+ frames, %zu shorter", runs16, short_runs);

	ASSERT_EQ(0, vamr_register(self->fd, a, len, RW, 0, &h));
	ASSERT_EQ(0, vamr_stats(self->fd, h, &st));
	EXPECT_EQ(n - 1, st.counters.pages_pinned);
	during = pins_outstanding();
	EXPECT_EQ(before + (long long)(n - 1), during);
	/* Registration may have migrated pages (a movable zone); the bytes stay. */
	EXPECT_EQ(-EFAULT, vamr_read(self->fd, h, a + hole * PAGE, self->buf, 8));
	ASSERT_TRUE(layout_pages_right(self->fd, h, a, self->buf, 0, hole));
	for (i = hole + 1; i < n; i += k) {
		k = n - i < 512 ? n - i : 512;
		ASSERT_TRUE(layout_pages_right(self->fd, h, a, self->buf, i, k)) TH_LOG("pages %zu+", i);
	}

	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	after = pins_outstanding();
	EXPECT_EQ(before, after) TH_LOG("%lld pins left after teardown", after - before);
	close(pm);
	close(kf);
	munmap(raw, maplen);
}

/* Another mm (a forked child holding the fd) cannot use or remove the parent's regions. */
TEST_F(region, other_mm_gets_eperm)
{
	uint8_t *a = map_anon(PAGE);
	int status;
	pid_t pid;
	uint32_t h;

	ASSERT_NE(NULL, a);
	ASSERT_EQ(0, vamr_register(self->fd, a, PAGE, RW, 0, &h));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		uint8_t b[8];

		if (vamr_unregister(self->fd, h) != -EPERM)
			_exit(1);
		if (vamr_read(self->fd, h, a, b, 8) != -EPERM)
			_exit(2);
		if (vamr_register(self->fd, a, PAGE, RW, 0, NULL) != -EPERM)
			_exit(3);
		_exit(0);
	}
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_EQ(0, status) TH_LOG("child exit status %d", WEXITSTATUS(status));
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	munmap(a, PAGE);
}

TEST_HARNESS_MAIN
