// SPDX-License-Identifier: GPL-2.0
/*
 * Monitor mode: VAMR_IOC_WATCH watches a range without pinning it; each
 * change of the mapping under it (munmap, MADV_DONTNEED, mremap or mmap over
 * it) bumps the watch's generation counter in the read-only page the process
 * maps, and queues exactly one VAMR_EVENT_WATCH record (kind, address,
 * length, cookie and slot checked). Faulting memory in, protection changes
 * and fork raise nothing; VmPin and VmLck do not move; a small ring
 * overflows, reports it, and the counters still tell the truth; the counter
 * mapping cannot be made writable; bad input gets the documented errnos; and
 * another process (or uid) cannot reach the watches.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "vamr_lib.h"

#define PAGE 4096ul
#define NOBODY 65534
#define COOKIE 0xc0c0a000u

static int events_open_ex(int fd, uint32_t ring, uint32_t *size)
{
	return vamr_events_open_ex(fd, VAMR_EVENTS_NONBLOCK, ring, size);
}

static const volatile uint64_t *map_gens(int fd)
{
	void *p = mmap(NULL, VAMR_WATCH_MAP_LEN, PROT_READ, MAP_SHARED, fd, 0);

	return p == MAP_FAILED ? NULL : p;
}

static void touch(uint8_t *a, size_t len)
{
	for (size_t i = 0; i < len; i += PAGE)
		a[i] = (uint8_t)(i / PAGE + 1);
}

FIXTURE(mon)
{
	int fd, efd;
	const volatile uint64_t *gens;
	uint8_t *a;		/* 4 pages, written */
	uint8_t *w;		/* the watched range: a + PAGE + 100, 2 pages long */
	size_t wlen;
	uint32_t slot;
	uint64_t gen;
	struct vamr_event ev[64];
};

FIXTURE_SETUP(mon)
{
	self->fd = vamr_open();
	if (self->fd == -ENOENT)
		SKIP(return, "/dev/vamr not present");
	ASSERT_LE(0, self->fd);
	self->efd = events_open_ex(self->fd, 0, NULL);
	ASSERT_LE(0, self->efd);
	self->gens = map_gens(self->fd);
	ASSERT_NE(NULL, self->gens);
	self->a = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, self->a);
	touch(self->a, 4 * PAGE);
	self->w = self->a + PAGE + 100;
	self->wlen = 2 * PAGE;
	ASSERT_EQ(0, vamr_watch(self->fd, self->w, self->wlen, COOKIE, &self->slot, &self->gen));
	ASSERT_EQ(self->gen, self->gens[self->slot]);
	ASSERT_EQ(0, vamr_drain_events(self->efd, self->ev, 64));
}

FIXTURE_TEARDOWN(mon)
{
	if (self->fd < 0)
		return;
	munmap(self->a, 4 * PAGE);
	if (self->gens)
		munmap((void *)self->gens, VAMR_WATCH_MAP_LEN);
	close(self->efd);
	close(self->fd);
}

/*
 * Exactly one record, of kind VAMR_EVENT_WATCH | @kind, over [@addr, @addr +
 * @len), with the watch's cookie and slot; and the counter grew by one.
 */
static int one_record(struct __test_metadata *_metadata, FIXTURE_DATA(mon) *self,
		      uint32_t kind, const void *addr, uint64_t len)
{
	int n = vamr_drain_events(self->efd, self->ev, 64);

	EXPECT_EQ(1, n) {
		for (int i = 0; i < n; i++)
			TH_LOG("record %d: kind %#x addr %+ld len %llu slot %u", i,
			       self->ev[i].kind, (long)(self->ev[i].addr - (uintptr_t)addr),
			       (unsigned long long)self->ev[i].len, self->ev[i].handle);
	}
	if (n < 1)
		return -1;
	EXPECT_EQ(VAMR_EVENT_WATCH | kind, self->ev[0].kind);
	EXPECT_EQ((uintptr_t)addr, self->ev[0].addr);
	EXPECT_EQ(len, self->ev[0].len);
	EXPECT_EQ(COOKIE, self->ev[0].cookie);
	EXPECT_EQ(self->slot, self->ev[0].handle);
	EXPECT_EQ(self->gen + 1, self->gens[self->slot]);
	EXPECT_EQ(self->gen + 1, (uint64_t)vamr_watch_sync(self->fd, self->slot));
	self->gen = self->gens[self->slot];
	return 0;
}

TEST_F(mon, query_reports_monitor_mode)
{
	struct vamr_query q = { 0 };

	ASSERT_EQ(0, vamr_ioctl(self->fd, VAMR_IOC_QUERY, &q));
	EXPECT_EQ(4u, q.abi_version);
	EXPECT_EQ(VAMR_FEATURE_WATCH | VAMR_FEATURE_EVENTS_RING,
		  q.features & (VAMR_FEATURE_WATCH | VAMR_FEATURE_EVENTS_RING));
}

/* munmap: one UNMAP record over the watched range; the new mapping at the same address and
 * its first touch raise nothing more. */
TEST_F(mon, munmap_then_mmap_at_the_same_address)
{
	ASSERT_EQ(0, munmap(self->a, 4 * PAGE));
	ASSERT_EQ(0, one_record(_metadata, self, VAMR_EVENT_UNMAP, self->w, self->wlen));
	ASSERT_EQ(self->a, mmap(self->a, 4 * PAGE, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0));
	touch(self->a, 4 * PAGE);
	EXPECT_EQ(0, vamr_drain_events(self->efd, self->ev, 64));
	EXPECT_EQ(self->gen, self->gens[self->slot]);
}

/* MADV_DONTNEED of all four pages, then of the first page the watch covers only from byte
 * 100: one CLEAR record each, clipped to the watch. Outside the watch: nothing. */
TEST_F(mon, madv_dontneed)
{
	ASSERT_EQ(0, madvise(self->a, 4 * PAGE, MADV_DONTNEED));
	ASSERT_EQ(0, one_record(_metadata, self, VAMR_EVENT_CLEAR, self->w, self->wlen));
	touch(self->a, 4 * PAGE);
	ASSERT_EQ(0, madvise(self->a + PAGE, PAGE, MADV_DONTNEED));
	ASSERT_EQ(0, one_record(_metadata, self, VAMR_EVENT_CLEAR, self->w, PAGE - 100));
	ASSERT_EQ(0, madvise(self->a, PAGE, MADV_DONTNEED));
	EXPECT_EQ(0, vamr_drain_events(self->efd, self->ev, 64));
	EXPECT_EQ(self->gen, self->gens[self->slot]);
}

/* mremap of another buffer over the watched range: one UNMAP record. */
TEST_F(mon, mremap_over_it)
{
	uint8_t *b = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			  -1, 0);

	ASSERT_NE(MAP_FAILED, b);
	touch(b, 4 * PAGE);
	ASSERT_EQ(self->a, mremap(b, 4 * PAGE, 4 * PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, self->a));
	ASSERT_EQ(0, one_record(_metadata, self, VAMR_EVENT_UNMAP, self->w, self->wlen));
	/* Moving the watched mapping away is a change too: two invalidations of the source,
	 * when its page tables move and when its old VMA is unmapped; one record each. */
	b = mmap(NULL, 4 * PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, b);
	ASSERT_EQ(b, mremap(self->a, 4 * PAGE, 4 * PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, b));
	ASSERT_EQ(2, vamr_drain_events(self->efd, self->ev, 64));
	for (int i = 0; i < 2; i++) {
		EXPECT_EQ(VAMR_EVENT_WATCH | VAMR_EVENT_UNMAP, self->ev[i].kind);
		EXPECT_EQ((uintptr_t)self->w, self->ev[i].addr);
		EXPECT_EQ(self->wlen, self->ev[i].len);
		EXPECT_EQ(self->slot, self->ev[i].handle);
	}
	EXPECT_EQ(self->gen + 2, self->gens[self->slot]);
	munmap(b, 4 * PAGE);
	EXPECT_EQ(0, vamr_drain_events(self->efd, self->ev, 64));
}

/* mmap MAP_FIXED over the watched range: one UNMAP record. */
TEST_F(mon, mmap_fixed_over_it)
{
	ASSERT_EQ(self->a, mmap(self->a, 4 * PAGE, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
	ASSERT_EQ(0, one_record(_metadata, self, VAMR_EVENT_UNMAP, self->w, self->wlen));
}

/* Faulting memory in, mprotect and fork (its write protection) keep the pages: no record,
 * no bump. */
TEST_F(mon, faults_protection_and_fork_raise_nothing)
{
	size_t len = 64 * PAGE;
	uint8_t *b = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint32_t s;
	uint64_t g;
	pid_t pid;
	int status;

	ASSERT_NE(MAP_FAILED, b);
	ASSERT_EQ(0, vamr_watch(self->fd, b, len, 7, &s, &g));
	touch(b, len);				/* first touch: write faults */
	for (size_t i = 0; i < len; i += PAGE)	/* and read them back */
		ASSERT_EQ((uint8_t)(i / PAGE + 1), b[i]);
	ASSERT_EQ(0, mprotect(b, len, PROT_READ));
	ASSERT_EQ(0, mprotect(b, len, PROT_READ | PROT_WRITE));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		/* The child's own unmap is in its own mm. */
		munmap(b, len);
		_exit(0);
	}
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	/* (A write now may copy a page the fork made COW: a real change of the page at the
	 * address, counted, since nothing pins these pages. Pinned pages are copied for the
	 * child at fork instead, so an MR's pages never see that.) */
	usleep(100000);
	EXPECT_EQ(0, vamr_drain_events(self->efd, self->ev, 64))
		TH_LOG("kind %#x addr %#llx len %llu", self->ev[0].kind,
		       (unsigned long long)self->ev[0].addr, (unsigned long long)self->ev[0].len);
	EXPECT_EQ(g, self->gens[s]);
	EXPECT_EQ(self->gen, self->gens[self->slot]);
	munmap(b, len);
}

/* A watch pins nothing and charges nothing: VmPin and VmLck do not move, and it works with
 * RLIMIT_MEMLOCK 0. */
TEST_F(mon, no_pin_no_memlock)
{
	struct rlimit old, zero = { 0, 0 };
	size_t len = 256 * PAGE;
	uint8_t *b = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	long pin = vamr_status_kb("VmPin"), lck = vamr_status_kb("VmLck");
	long rss = vamr_status_kb("RssAnon");
	uint32_t s;

	ASSERT_NE(MAP_FAILED, b);
	ASSERT_EQ(0, getrlimit(RLIMIT_MEMLOCK, &old));
	ASSERT_EQ(0, setrlimit(RLIMIT_MEMLOCK, &zero));
	ASSERT_EQ(0, vamr_watch(self->fd, b, len, 1, &s, NULL));
	EXPECT_EQ(pin, vamr_status_kb("VmPin"));
	EXPECT_EQ(lck, vamr_status_kb("VmLck"));
	/* Nothing was faulted in by the watch. */
	EXPECT_GT(rss + 64, vamr_status_kb("RssAnon"));
	touch(b, len);
	EXPECT_EQ(pin, vamr_status_kb("VmPin"));
	EXPECT_EQ(lck, vamr_status_kb("VmLck"));
	/* Watching and touching 1 MiB raised nothing; DONTNEED'd memory is not kept resident
	 * by the watch, and the DONTNEED of the whole MiB is one record. */
	EXPECT_EQ(0, vamr_drain_events(self->efd, self->ev, 64));
	ASSERT_EQ(0, madvise(b, len, MADV_DONTNEED));
	EXPECT_GT(rss + 64, vamr_status_kb("RssAnon"));
	ASSERT_EQ(1, vamr_drain_events(self->efd, self->ev, 64));
	EXPECT_EQ(VAMR_EVENT_WATCH | VAMR_EVENT_CLEAR, self->ev[0].kind);
	EXPECT_EQ((uintptr_t)b, self->ev[0].addr);
	EXPECT_EQ(len, self->ev[0].len);
	ASSERT_EQ(0, vamr_unwatch(self->fd, s));
	setrlimit(RLIMIT_MEMLOCK, &old);
	munmap(b, len);
}

/* A ring of 4 records overflows after 4 changes: 4 records, then one OVERFLOW record for the
 * 6 lost; the counter still counts all 10, and the ring works again after the drain. */
TEST_F(mon, overflow_is_reported_and_counters_stay_exact)
{
	uint32_t size = 0;
	int efd = events_open_ex(self->fd, 4, &size);
	int i, n;

	ASSERT_LE(0, efd);
	EXPECT_EQ(4u, size);
	for (i = 0; i < 10; i++) {
		touch(self->a, 4 * PAGE);
		ASSERT_EQ(0, madvise(self->a + PAGE, 2 * PAGE, MADV_DONTNEED));
	}
	EXPECT_EQ(self->gen + 10, self->gens[self->slot]);
	EXPECT_EQ(self->gen + 10, (uint64_t)vamr_watch_sync(self->fd, self->slot));
	n = vamr_drain_events(efd, self->ev, 64);
	ASSERT_EQ(5, n);
	for (i = 0; i < 4; i++) {
		EXPECT_EQ(VAMR_EVENT_WATCH | VAMR_EVENT_CLEAR, self->ev[i].kind);
		EXPECT_EQ((uint64_t)i + 1, self->ev[i].generation - self->ev[0].generation + 1);
	}
	EXPECT_EQ(VAMR_EVENT_OVERFLOW, self->ev[4].kind);
	EXPECT_EQ(6u, self->ev[4].len);
	/* The other events file reads the same ring: nothing left. */
	EXPECT_EQ(0, vamr_drain_events(self->efd, self->ev, 64));
	/* Recovered: the next change is a record again. */
	self->gen += 10;
	ASSERT_EQ(0, munmap(self->a, 4 * PAGE));
	n = vamr_drain_events(efd, self->ev, 64);
	ASSERT_EQ(1, n);
	EXPECT_EQ(VAMR_EVENT_WATCH | VAMR_EVENT_UNMAP, self->ev[0].kind);
	EXPECT_EQ(self->gen + 1, self->gens[self->slot]);
	close(efd);
}

TEST_F(mon, ring_size_errnos)
{
	struct vamr_events_open_ex o = { .ring = VAMR_EVENTS_RING_MAX + 1 };
	uint32_t size = 0;
	int efd;

	EXPECT_EQ(-EINVAL, vamr_ioctl(self->fd, VAMR_IOC_EVENTS_OPEN_EX, &o));
	o = (struct vamr_events_open_ex){ .ring = 8, .reserved = 1 };
	EXPECT_EQ(-EINVAL, vamr_ioctl(self->fd, VAMR_IOC_EVENTS_OPEN_EX, &o));
	o = (struct vamr_events_open_ex){ .ring = 8, .flags = 1u << 5 };
	EXPECT_EQ(-EINVAL, vamr_ioctl(self->fd, VAMR_IOC_EVENTS_OPEN_EX, &o));
	efd = events_open_ex(self->fd, 0, &size);
	ASSERT_LE(0, efd);
	EXPECT_EQ((uint32_t)VAMR_EVENTS_RING_DEFAULT, size);
	close(efd);
	efd = events_open_ex(self->fd, VAMR_EVENTS_RING_MAX, &size);
	ASSERT_LE(0, efd);
	EXPECT_EQ((uint32_t)VAMR_EVENTS_RING_MAX, size);
	close(efd);
}

/* The counter mapping is read-only for good. */
TEST_F(mon, counter_mapping_is_read_only)
{
	void *p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, self->fd, 0);

	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(EACCES, errno);
	p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE, self->fd, 0);
	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(EACCES, errno);
	p = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, self->fd, 0);
	ASSERT_NE(MAP_FAILED, p);
	EXPECT_EQ(-1, mprotect(p, PAGE, PROT_READ | PROT_WRITE));
	EXPECT_EQ(EACCES, errno);
	munmap(p, PAGE);
	/* Past the counters. */
	p = mmap(NULL, VAMR_WATCH_MAP_LEN + PAGE, PROT_READ, MAP_SHARED, self->fd, 0);
	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(EINVAL, errno);
	p = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, self->fd, VAMR_WATCH_MAP_LEN);
	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(EINVAL, errno);
	/* A second page of the mapping is the next 512 slots. */
	p = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, self->fd, PAGE);
	ASSERT_NE(MAP_FAILED, p);
	munmap(p, PAGE);
}

/* UNWATCH stops the events and bumps the counter once; the slot, reused, never shows a
 * value seen before. */
TEST_F(mon, unwatch_and_slot_reuse)
{
	uint32_t s;
	uint64_t g;

	ASSERT_EQ(0, vamr_unwatch(self->fd, self->slot));
	EXPECT_EQ(self->gen + 1, self->gens[self->slot]);
	EXPECT_EQ(-ENOENT, vamr_unwatch(self->fd, self->slot));
	EXPECT_EQ(-ENOENT, vamr_watch_sync(self->fd, self->slot));
	ASSERT_EQ(0, munmap(self->a, 4 * PAGE));
	EXPECT_EQ(0, vamr_drain_events(self->efd, self->ev, 64));
	EXPECT_EQ(self->gen + 1, self->gens[self->slot]);
	ASSERT_EQ(self->a, mmap(self->a, 4 * PAGE, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0));
	ASSERT_EQ(0, vamr_watch(self->fd, self->w, self->wlen, COOKIE, &s, &g));
	EXPECT_EQ(self->slot, s);
	EXPECT_LT(self->gen, g);
	EXPECT_EQ(g, self->gens[s]);
}

TEST_F(mon, bad_input)
{
	struct vamr_watch w = { .addr = (uintptr_t)self->a, .len = PAGE, .flags = 1 };
	struct vamr_handle_arg h = { .handle = self->slot, .flags = 1 };
	struct vamr_watch_sync sy = { .slot = self->slot, .flags = 1 };
	uint32_t s;
	int mine;

	EXPECT_EQ(-EINVAL, vamr_ioctl(self->fd, VAMR_IOC_WATCH, &w));
	EXPECT_EQ(-EINVAL, vamr_ioctl(self->fd, VAMR_IOC_UNWATCH, &h));
	EXPECT_EQ(-EINVAL, vamr_ioctl(self->fd, VAMR_IOC_WATCH_SYNC, &sy));
	EXPECT_EQ(-EINVAL, vamr_watch(self->fd, self->a, 0, 0, NULL, NULL));
	EXPECT_EQ(-EINVAL, vamr_watch(self->fd, (void *)~0xfffUL, 2 * PAGE, 0, NULL, NULL));
	EXPECT_EQ(-EFAULT, vamr_watch(self->fd, (void *)(~0UL - 4 * PAGE), PAGE, 0, NULL, NULL));
	EXPECT_EQ(-EFAULT, ioctl(self->fd, VAMR_IOC_WATCH, (void *)8) ? -errno : 0);
	EXPECT_EQ(-ENOENT, vamr_unwatch(self->fd, VAMR_WATCH_MAX));
	EXPECT_EQ(-ENOENT, vamr_unwatch(self->fd, 0xffffffffu));
	EXPECT_EQ(-ENOENT, vamr_watch_sync(self->fd, 1234));
	/* Unaligned byte ranges are fine: 3 bytes straddling a page boundary. The DONTNEED of
	 * the page after the boundary reaches this watch and the fixture's (which ends 100
	 * bytes into that page): one record each, clipped to each watch. */
	ASSERT_EQ(0, vamr_watch(self->fd, self->a + 3 * PAGE - 1, 3, 5, &s, NULL));
	ASSERT_EQ(0, madvise(self->a + 3 * PAGE, PAGE, MADV_DONTNEED));
	ASSERT_EQ(2, vamr_drain_events(self->efd, self->ev, 64));
	mine = self->ev[0].handle == s ? 0 : 1;
	EXPECT_EQ((uintptr_t)self->a + 3 * PAGE, self->ev[mine].addr);
	EXPECT_EQ(2u, self->ev[mine].len);
	EXPECT_EQ(s, self->ev[mine].handle);
	EXPECT_EQ(5u, self->ev[mine].cookie);
	EXPECT_EQ((uintptr_t)self->a + 3 * PAGE, self->ev[!mine].addr);
	EXPECT_EQ(100u, self->ev[!mine].len);
	EXPECT_EQ(self->slot, self->ev[!mine].handle);
	EXPECT_EQ(1u, self->gens[s]);
	EXPECT_EQ(self->gen + 1, self->gens[self->slot]);
}

/* VAMR_WATCH_MAX watches per file, then ENOSPC; one freed slot can be taken again. */
TEST_F(mon, too_many_watches)
{
	uint32_t s, last = 0;
	int i, ret = 0;

	for (i = 1; i < VAMR_WATCH_MAX; i++) {
		ret = vamr_watch(self->fd, self->a + (i % 4) * PAGE, PAGE, i, &s, NULL);
		if (ret)
			break;
		last = s;
	}
	ASSERT_EQ(0, ret);
	EXPECT_EQ((uint32_t)VAMR_WATCH_MAX - 1, last);
	EXPECT_EQ(-ENOSPC, vamr_watch(self->fd, self->a, PAGE, 0, NULL, NULL));
	ASSERT_EQ(0, vamr_unwatch(self->fd, 77));
	ASSERT_EQ(0, vamr_watch(self->fd, self->a, PAGE, 0, &s, NULL));
	EXPECT_EQ(77u, s);
	/* One DONTNEED of page 1 reaches every watch on it: about a quarter of them. */
	ASSERT_EQ(0, madvise(self->a + PAGE, PAGE, MADV_DONTNEED));
	EXPECT_EQ(self->gen + 1, self->gens[self->slot]);
	EXPECT_EQ(1u, self->gens[1]);
	EXPECT_EQ(0u, self->gens[2]);
}

/* The watches die with the file (which its counter mapping keeps open): after both are gone,
 * changes raise nothing, although an events file still reads the ring. */
TEST_F(mon, watches_die_with_the_file)
{
	close(self->fd);
	ASSERT_EQ(0, madvise(self->a, 4 * PAGE, MADV_DONTNEED));
	/* Still mapped: the file and its watches live. */
	EXPECT_EQ(1, vamr_drain_events(self->efd, self->ev, 64));
	munmap((void *)self->gens, VAMR_WATCH_MAP_LEN);
	self->gens = NULL;
	self->fd = vamr_open();
	ASSERT_LE(0, self->fd);
	ASSERT_EQ(0, munmap(self->a, 4 * PAGE));
	EXPECT_EQ(0, vamr_drain_events(self->efd, self->ev, 64));
}

struct other {
	int parent_fd;
	uint32_t slot;
	void *addr;
};

/* Runs in a forked child (as NOBODY if @nobody). 0 when every check passed. */
static int child_checks(struct other *o, int nobody)
{
	struct vamr_watch_sync sy = { .slot = o->slot };
	struct vamr_handle_arg h = { .handle = o->slot };
	struct rlimit zero = { 0, 0 };
	const volatile uint64_t *g;
	uint32_t s;
	uint64_t gen;
	int fd;

	if (nobody && (setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY)))
		return 1;
	/* The parent's file: another address space. */
	if (vamr_ioctl(o->parent_fd, VAMR_IOC_WATCH_SYNC, &sy) != -EPERM)
		return 2;
	if (vamr_ioctl(o->parent_fd, VAMR_IOC_UNWATCH, &h) != -EPERM)
		return 3;
	if (vamr_watch(o->parent_fd, o->addr, PAGE, 0, NULL, NULL) != -EPERM)
		return 4;
	if (mmap(NULL, PAGE, PROT_READ, MAP_SHARED, o->parent_fd, 0) != MAP_FAILED ||
	    errno != EPERM)
		return 5;
	/* Its own file: its own slots, no charge needed. */
	if (setrlimit(RLIMIT_MEMLOCK, &zero))
		return 6;
	fd = vamr_open();
	if (fd < 0)
		return 7;
	if (vamr_ioctl(fd, VAMR_IOC_WATCH_SYNC, &sy) != -ENOENT)
		return 8;
	if (vamr_watch(fd, o->addr, PAGE, 0, &s, &gen) || s != 0)
		return 9;
	g = map_gens(fd);
	if (!g || g[0] != gen)
		return 10;
	if (madvise(o->addr, PAGE, MADV_DONTNEED) || g[0] != gen + 1)
		return 11;
	return 0;
}

TEST_F(mon, other_processes_cannot_reach_the_watches)
{
	struct other o = { .parent_fd = self->fd, .slot = self->slot, .addr = self->a + PAGE };

	for (int nobody = 0; nobody < 2; nobody++) {
		pid_t pid = fork();
		int status;

		ASSERT_LE(0, pid);
		if (pid == 0)
			_exit(child_checks(&o, nobody));
		ASSERT_EQ(pid, waitpid(pid, &status, 0));
		ASSERT_TRUE(WIFEXITED(status));
		EXPECT_EQ(0, WEXITSTATUS(status)) TH_LOG("nobody=%d", nobody);
	}
	/* The children's changes were in their own address spaces. */
	EXPECT_EQ(self->gen, self->gens[self->slot]);
	EXPECT_EQ(0, vamr_drain_events(self->efd, self->ev, 64));
}

TEST_HARNESS_MAIN
