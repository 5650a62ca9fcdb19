// SPDX-License-Identifier: GPL-2.0
/*
 * Monitor mode under attack by an unprivileged user: the counter mapping
 * at every offset and length, moved by mremap, grown, inherited by fork,
 * kept after close; ranges that wrap, cover the whole address space or end
 * past TASK_SIZE; watch/unwatch/sync from many threads against
 * invalidations, with the counters read from the mapping never going down;
 * a ring resized while a reader blocks on it; and a watcher that exits
 * while another process holds its events file and its /dev/vamr file
 * (SCM_RIGHTS); and, as uid 65534, every mm call of the process on its own
 * counter mapping (madvise of each kind, mprotect, mremap, munmap of a part,
 * fork, close of the file): the mapping then reads the live counters and
 * follows them, or the call is refused with its errno. Every test checks
 * errnos, counter values and records.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "mm_util.h"
#include "sys_guard.h"
#include "rdma_pair.h"
#include "scm_util.h"
#include "unpriv_util.h"
#include "vamr_lib.h"

#define PAGE 4096ul
#define COOKIE 0xa77ac000u
#define MAP_PAGES (VAMR_WATCH_MAP_LEN / PAGE)
#define PER_PAGE (PAGE / 8)
#define NOBODY 65534

static uint8_t *anon(size_t len)
{
	uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	for (size_t i = 0; i < len; i += PAGE)
		p[i] = (uint8_t)(i / PAGE + 1);
	return p;
}

static sigjmp_buf segv_jmp;

static void on_segv(int sig __attribute__((unused)))
{
	siglongjmp(segv_jmp, 1);
}

/* 1 if reading *p faults (SIGSEGV or SIGBUS), 0 if it reads (the value in *val). */
static int faults(const volatile uint64_t *p, uint64_t *val)
{
	struct sigaction sa = { .sa_handler = on_segv }, old, oldbus;
	int ret = 0;

	sigaction(SIGSEGV, &sa, &old);
	sigaction(SIGBUS, &sa, &oldbus);
	if (sigsetjmp(segv_jmp, 1))
		ret = 1;
	else
		*val = *p;
	sigaction(SIGSEGV, &old, NULL);
	sigaction(SIGBUS, &oldbus, NULL);
	return ret;
}

FIXTURE(atk)
{
	int fd;
};

FIXTURE_SETUP(atk)
{
	self->fd = vamr_open();
	if (self->fd == -ENOENT)
		SKIP(return, "/dev/vamr not present");
	ASSERT_LE(0, self->fd);
}

FIXTURE_TEARDOWN(atk)
{
	if (self->fd >= 0)
		close(self->fd);
}

/*
 * Every offset and length inside the counters maps, and shows the same bytes
 * as the whole mapping at that offset; one page past them, a length that runs
 * past them, a writable shared mapping and a later mprotect(PROT_WRITE) (also
 * of a private mapping) are refused.
 */
TEST_F(atk, mmap_offsets_lengths_and_protections)
{
	const volatile uint64_t *all, *part;
	uint8_t *a = anon(PAGE);
	uint32_t slot;
	void *p;

	ASSERT_NE(NULL, a);
	ASSERT_EQ(8ul, MAP_PAGES);
	/* PER_PAGE + 1 watches: slot 512 is the first of the second page. */
	for (uint32_t i = 0; i <= PAGE / 8; i++) {
		ASSERT_EQ(0, vamr_watch(self->fd, a, PAGE, i, &slot, NULL));
		ASSERT_EQ(i, slot);
	}
	/* UNWATCH bumps the slot's counter once. */
	ASSERT_EQ(0, vamr_unwatch(self->fd, PAGE / 8));
	ASSERT_EQ(0, vamr_unwatch(self->fd, 3));
	all = mmap(NULL, VAMR_WATCH_MAP_LEN, PROT_READ, MAP_SHARED, self->fd, 0);
	ASSERT_NE(MAP_FAILED, all);
	EXPECT_EQ(1u, all[PAGE / 8]);
	EXPECT_EQ(1u, all[3]);
	EXPECT_EQ(0u, all[2]);
	for (unsigned long off = 0; off < MAP_PAGES; off++) {
		for (unsigned long len = 1; off + len <= MAP_PAGES; len++) {
			part = mmap(NULL, len * PAGE, PROT_READ, MAP_SHARED, self->fd, off * PAGE);
			ASSERT_NE(MAP_FAILED, part) TH_LOG("offset %lu pages %lu", off, len);
			for (unsigned long i = 0; i < len * PAGE / 8; i += 1)
				ASSERT_EQ(all[off * PAGE / 8 + i], part[i]);
			ASSERT_EQ(0, munmap((void *)part, len * PAGE));
		}
		/* Running one page past the counters. */
		p = mmap(NULL, (MAP_PAGES - off + 1) * PAGE, PROT_READ, MAP_SHARED, self->fd,
			 off * PAGE);
		EXPECT_EQ(MAP_FAILED, p);
		EXPECT_EQ(EINVAL, errno);
	}
	p = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, self->fd, MAP_PAGES * PAGE);
	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(EINVAL, errno);
	/* A huge offset (pgoff + pages would wrap). */
	p = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, self->fd, (off_t)0x7ffffffffffff000ll);
	EXPECT_EQ(MAP_FAILED, p);
	/* Writable, shared or private; and made writable later. */
	p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, self->fd, 0);
	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(EACCES, errno);
	p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE, self->fd, 0);
	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(EACCES, errno);
	p = mmap(NULL, PAGE, PROT_READ, MAP_PRIVATE, self->fd, 0);
	ASSERT_NE(MAP_FAILED, p);
	EXPECT_EQ(-1, mprotect(p, PAGE, PROT_READ | PROT_WRITE));
	EXPECT_EQ(EACCES, errno);
	EXPECT_EQ(0, munmap(p, PAGE));
	EXPECT_EQ(-1, mprotect((void *)all, PAGE, PROT_WRITE));
	EXPECT_EQ(EACCES, errno);
	/* Executable: refused at mmap and by a later mprotect. */
	p = mmap(NULL, PAGE, PROT_READ | PROT_EXEC, MAP_SHARED, self->fd, 0);
	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(EACCES, errno);
	EXPECT_EQ(-1, mprotect((void *)all, PAGE, PROT_READ | PROT_EXEC));
	EXPECT_EQ(EACCES, errno);
	/* The counters did not move through all of that. */
	EXPECT_EQ(1u, all[PAGE / 8]);
	EXPECT_EQ(0u, all[PAGE / 8 - 1]);
	munmap((void *)all, VAMR_WATCH_MAP_LEN);
	munmap(a, PAGE);
}

/*
 * mremap moves the counters (the old address faults, the new one follows the
 * counter); it cannot grow them, and a fork's child does not inherit them
 * (the address faults there) nor can it map them from the inherited file.
 */
TEST_F(atk, mremap_grow_and_fork_of_the_mapping)
{
	uint8_t *a = anon(2 * PAGE);
	const volatile uint64_t *g, *moved;
	uint64_t gen, v;
	uint32_t slot;
	void *hole;
	pid_t pid;
	int status;

	ASSERT_NE(NULL, a);
	ASSERT_EQ(0, vamr_watch(self->fd, a, 2 * PAGE, COOKIE, &slot, &gen));
	g = mmap(NULL, VAMR_WATCH_MAP_LEN, PROT_READ, MAP_SHARED, self->fd, 0);
	ASSERT_NE(MAP_FAILED, g);
	/* Growing: VM_DONTEXPAND. */
	EXPECT_EQ(MAP_FAILED, mremap((void *)g, VAMR_WATCH_MAP_LEN, 2 * VAMR_WATCH_MAP_LEN,
				     MREMAP_MAYMOVE));
	EXPECT_EQ(EFAULT, errno);
	hole = mmap(NULL, VAMR_WATCH_MAP_LEN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, hole);
	moved = mremap((void *)g, VAMR_WATCH_MAP_LEN, VAMR_WATCH_MAP_LEN,
		       MREMAP_MAYMOVE | MREMAP_FIXED, hole);
	ASSERT_EQ(hole, moved);
	EXPECT_EQ(1, faults(g, &v));
	EXPECT_EQ(0, faults(&moved[slot], &v));
	EXPECT_EQ(gen, v);
	ASSERT_EQ(0, madvise(a, PAGE, MADV_DONTNEED));
	EXPECT_EQ(gen + 1, moved[slot]);

	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		/* VM_DONTCOPY: no counters here, and the parent's file is not ours. */
		if (!faults(&moved[slot], &v))
			_exit(1);
		if (mmap(NULL, PAGE, PROT_READ, MAP_SHARED, self->fd, 0) != MAP_FAILED ||
		    errno != EPERM)
			_exit(2);
		/* The child's own invalidation of the range is not the parent's. */
		if (madvise(a, 2 * PAGE, MADV_DONTNEED))
			_exit(3);
		_exit(0);
	}
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	EXPECT_EQ(0, WEXITSTATUS(status));
	/* fork write-protected the parent's pages (not counted); the child's exit neither. */
	EXPECT_EQ(gen + 1, (uint64_t)vamr_watch_sync(self->fd, slot));
	EXPECT_EQ(gen + 1, moved[slot]);
	munmap((void *)moved, VAMR_WATCH_MAP_LEN);
	munmap(a, 2 * PAGE);
}

/*
 * The kernel's other ways into the counter pages: a write through
 * /proc/self/mem (FOLL_FORCE) is refused and changes nothing, and
 * MADV_DONTNEED of the mapping does not leave a zero page behind: the next
 * read maps the counter page again (the fault handler), shows the counter
 * and follows it; a new mapping shows the same.
 */
TEST_F(atk, proc_mem_write_and_dontneed_of_the_counters)
{
	const volatile uint64_t *g, *p;
	uint64_t gen, v = 0xdeadbeef;
	uint8_t *a = anon(PAGE);
	uint32_t slot;
	int mem;

	ASSERT_NE(NULL, a);
	ASSERT_EQ(0, vamr_watch(self->fd, a, PAGE, COOKIE, &slot, &gen));
	ASSERT_EQ(0, madvise(a, PAGE, MADV_DONTNEED));
	g = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, self->fd, 0);
	ASSERT_NE(MAP_FAILED, g);
	ASSERT_EQ(gen + 1, g[slot]);
	mem = open("/proc/self/mem", O_RDWR);
	ASSERT_LE(0, mem);
	EXPECT_EQ(-1, pwrite(mem, &v, sizeof(v), (off_t)(uintptr_t)&g[slot]));
	EXPECT_EQ(gen + 1, g[slot]);
	/* Reading through /proc/self/mem works and sees the counter. */
	EXPECT_EQ((ssize_t)sizeof(v), pread(mem, &v, sizeof(v), (off_t)(uintptr_t)&g[slot]));
	EXPECT_EQ(gen + 1, v);
	/*
	 * A private read-only mapping: a forced write would COW it into a
	 * private copy that no longer follows the counter.
	 */
	p = mmap(NULL, PAGE, PROT_READ, MAP_PRIVATE, self->fd, 0);
	ASSERT_NE(MAP_FAILED, p);
	v = 0xdeadbeef;
	EXPECT_EQ(-1, pwrite(mem, &v, sizeof(v), (off_t)(uintptr_t)&p[slot]));
	EXPECT_EQ(gen + 1, p[slot]);
	ASSERT_EQ(0, madvise(a, PAGE, MADV_DONTNEED));
	EXPECT_EQ(gen + 2, p[slot]);
	gen++;
	munmap((void *)p, PAGE);
	close(mem);
	ASSERT_EQ(0, madvise((void *)g, PAGE, MADV_DONTNEED));
	v = 12345;
	EXPECT_EQ(0, faults(&g[slot], &v)) TH_LOG("SIGBUS/SIGSEGV after MADV_DONTNEED");
	EXPECT_EQ(gen + 1, v);
	ASSERT_EQ(0, madvise(a, PAGE, MADV_DONTNEED));
	EXPECT_EQ(gen + 2, g[slot]);
	munmap((void *)g, PAGE);
	g = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, self->fd, 0);
	ASSERT_NE(MAP_FAILED, g);
	EXPECT_EQ(gen + 2, g[slot]);
	munmap((void *)g, PAGE);
	munmap(a, PAGE);
}

/*
 * The counters stay out of fork()'s children: MADV_DOFORK, which would clear
 * VM_DONTCOPY, is refused (VM_DONTEXPAND and VM_MIXEDMAP are VM_SPECIAL), so
 * a child still faults at the address and the parent's counter is intact.
 */
TEST_F(atk, madv_dofork_of_the_counters_is_refused)
{
	const volatile uint64_t *g;
	uint8_t *a = anon(PAGE);
	uint64_t gen, v;
	uint32_t slot;
	int status;
	pid_t pid;

	ASSERT_NE(NULL, a);
	ASSERT_EQ(0, vamr_watch(self->fd, a, PAGE, COOKIE, &slot, &gen));
	ASSERT_EQ(0, madvise(a, PAGE, MADV_DONTNEED));
	g = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, self->fd, 0);
	ASSERT_NE(MAP_FAILED, g);
	EXPECT_EQ(-1, madvise((void *)g, PAGE, MADV_DOFORK));
	EXPECT_EQ(EINVAL, errno);
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid)
		_exit(faults(&g[slot], &v) ? 0 : 1);
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	EXPECT_EQ(0, WEXITSTATUS(status));
	EXPECT_EQ(gen + 1, g[slot]);
	munmap((void *)g, PAGE);
	munmap(a, PAGE);
}

/*
 * The counter mapping holds the file: close() of the last descriptor keeps
 * the watches running (the mapping still shows the bumps, the events file
 * still gets the records); munmap of the counters then releases the file, the
 * watches end (no more records), and the events file reads what was queued.
 */
TEST_F(atk, mapping_and_events_file_outlive_the_descriptor)
{
	uint8_t *a = anon(4 * PAGE);
	const volatile uint64_t *g;
	struct vamr_event ev[8];
	uint64_t gen;
	uint32_t slot;
	int efd;

	ASSERT_NE(NULL, a);
	efd = vamr_events_open_ex(self->fd, VAMR_EVENTS_NONBLOCK, 0, NULL);
	ASSERT_LE(0, efd);
	ASSERT_EQ(0, vamr_watch(self->fd, a, 4 * PAGE, COOKIE, &slot, &gen));
	g = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, self->fd, 0);
	ASSERT_NE(MAP_FAILED, g);
	close(self->fd);
	self->fd = -1;
	ASSERT_EQ(0, madvise(a, PAGE, MADV_DONTNEED));
	EXPECT_EQ(gen + 1, g[slot]);
	ASSERT_EQ(0, munmap((void *)g, PAGE));
	/* The file is gone: its watches too. */
	ASSERT_EQ(0, munmap(a + 2 * PAGE, PAGE));
	ASSERT_EQ(1, vamr_drain_events(efd, ev, 8));
	EXPECT_EQ(VAMR_EVENT_WATCH | VAMR_EVENT_CLEAR, ev[0].kind);
	EXPECT_EQ((uintptr_t)a, ev[0].addr);
	EXPECT_EQ(PAGE, ev[0].len);
	EXPECT_EQ(COOKIE, ev[0].cookie);
	EXPECT_EQ(0, vamr_drain_events(efd, ev, 8));
	close(efd);
	munmap(a, 4 * PAGE);
}

/*
 * Ranges: wrapping and empty ranges are EINVAL, past TASK_SIZE is EFAULT; one
 * watch may cover the whole user address space, and then counts each munmap
 * of the process exactly once with the munmapped bytes as its range.
 */
TEST_F(atk, wrapping_huge_and_whole_address_space)
{
	/* x86_64 TASK_SIZE with 4-level, else 5-level, paging. */
	uint64_t task_size = 0x7ffffffff000ull;
	const volatile uint64_t *g;
	struct vamr_event ev[8];
	uint64_t gen;
	uint32_t slot;
	uint8_t *a;
	int efd;

	if (!vamr_watch(self->fd, (void *)task_size, 1, 0, &slot, NULL)) {
		ASSERT_EQ(0, vamr_unwatch(self->fd, slot));
		task_size = 0xfffffffffff000ull;
	}
	TH_LOG("TASK_SIZE %#llx", (unsigned long long)task_size);
	EXPECT_EQ(-EINVAL, vamr_watch(self->fd, (void *)~0ul, 2, 0, NULL, NULL));
	EXPECT_EQ(-EINVAL, vamr_watch(self->fd, (void *)PAGE, ~0ull, 0, NULL, NULL));
	EXPECT_EQ(-EINVAL, vamr_watch(self->fd, (void *)PAGE, 0, 0, NULL, NULL));
	EXPECT_EQ(-EFAULT, vamr_watch(self->fd, NULL, task_size + 1, 0, NULL, NULL));
	EXPECT_EQ(-EFAULT, vamr_watch(self->fd, (void *)(task_size - 1), 2, 0, NULL, NULL));
	EXPECT_EQ(-EFAULT, vamr_watch(self->fd, (void *)(1ull << 63), PAGE, 0, NULL, NULL));
	ASSERT_EQ(0, vamr_watch(self->fd, (void *)(task_size - 1), 1, 0, &slot, NULL));
	ASSERT_EQ(0, vamr_unwatch(self->fd, slot));

	efd = vamr_events_open_ex(self->fd, VAMR_EVENTS_NONBLOCK, 0, NULL);
	ASSERT_LE(0, efd);
	g = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, self->fd, 0);
	ASSERT_NE(MAP_FAILED, g);
	a = anon(3 * PAGE);
	ASSERT_NE(NULL, a);
	ASSERT_EQ(0, vamr_watch(self->fd, NULL, task_size, COOKIE, &slot, &gen));
	ASSERT_EQ(0, vamr_drain_events(efd, ev, 8));
	ASSERT_EQ(0, munmap(a + PAGE, 2 * PAGE));
	EXPECT_EQ(gen + 1, g[slot]);
	ASSERT_EQ(1, vamr_drain_events(efd, ev, 8));
	EXPECT_EQ(VAMR_EVENT_WATCH | VAMR_EVENT_UNMAP, ev[0].kind);
	EXPECT_EQ((uintptr_t)(a + PAGE), ev[0].addr);
	EXPECT_EQ(2 * PAGE, ev[0].len);
	EXPECT_EQ(slot, ev[0].handle);
	EXPECT_EQ(gen + 1, (uint64_t)vamr_watch_sync(self->fd, slot));
	ASSERT_EQ(0, vamr_unwatch(self->fd, slot));
	EXPECT_EQ(gen + 2, g[slot]);
	munmap(a, PAGE);
	munmap((void *)g, PAGE);
	close(efd);
}

/*
 * UNWATCH then WATCH in the same slot, a thousand times, with invalidations
 * in between: the slot's counter never goes down and a new watch never starts
 * at a value a previous watch of the slot returned.
 */
TEST_F(atk, slot_reuse_never_repeats_a_generation)
{
	const volatile uint64_t *g;
	uint8_t *a = anon(PAGE);
	uint64_t gen, last = 0;
	uint32_t slot;

	ASSERT_NE(NULL, a);
	g = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, self->fd, 0);
	ASSERT_NE(MAP_FAILED, g);
	for (int i = 0; i < 1000; i++) {
		ASSERT_EQ(0, vamr_watch(self->fd, a, PAGE, i, &slot, &gen));
		ASSERT_EQ(0u, slot);
		if (i)
			ASSERT_LT(last, gen);
		if (i % 3 == 0) {
			a[0] = 1;
			ASSERT_EQ(0, madvise(a, PAGE, MADV_DONTNEED));
			ASSERT_EQ(gen + 1, g[0]);
		}
		last = (uint64_t)vamr_watch_sync(self->fd, 0);
		ASSERT_EQ(0, vamr_unwatch(self->fd, 0));
		ASSERT_LT(last, g[0]);
	}
	/* 1000 unwatches and 334 invalidations. */
	EXPECT_EQ(1334u, g[0]);
	munmap((void *)g, PAGE);
	munmap(a, PAGE);
}

#define THREADS 4
#define RUN_MS 1500

struct race {
	int fd;
	uint8_t *a;
	const volatile uint64_t *g;
	atomic_int stop;
	atomic_long ops, bad_errno, went_down;
	atomic_int last_bad;
};

/* Errnos a racing thread may see: no such watch (another thread took it), full, closed. */
static void check_errno(struct race *r, int ret)
{
	if (ret && ret != -ENOENT && ret != -ENOSPC && ret != -EBADF) {
		atomic_fetch_add(&r->bad_errno, 1);
		atomic_store(&r->last_bad, ret);
	}
}

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *watcher(void *arg)
{
	struct race *r = arg;
	uint32_t slot;
	uint64_t gen;
	int64_t s;

	while (!atomic_load(&r->stop)) {
		int ret = vamr_watch(r->fd, r->a + (rand() % 8) * PAGE, PAGE * (1 + rand() % 4), 1, &slot,
				&gen);

		if (ret) {
			check_errno(r, ret);
			continue;
		}
		s = vamr_watch_sync(r->fd, slot);
		if (s < 0)
			check_errno(r, (int)s);
		if (s >= 0 && (uint64_t)s < gen)
			atomic_fetch_add(&r->went_down, 1);
		/* Another thread may have taken it already: ENOENT. */
		ret = vamr_unwatch(r->fd, (rand() & 1) ? slot : (uint32_t)(rand() % 64));
		check_errno(r, ret);
		atomic_fetch_add(&r->ops, 1);
	}
	return NULL;
}

static void *invalidator(void *arg)
{
	struct race *r = arg;

	while (!atomic_load(&r->stop)) {
		int p = rand() % 12;

		r->a[p * PAGE] = 1;
		madvise(r->a + p * PAGE, PAGE, MADV_DONTNEED);
	}
	return NULL;
}

static void *reader(void *arg)
{
	struct race *r = arg;
	uint64_t last[64] = { 0 };

	while (!atomic_load(&r->stop)) {
		for (int i = 0; i < 64; i++) {
			uint64_t v = r->g[i];

			if (v < last[i])
				atomic_fetch_add(&r->went_down, 1);
			last[i] = v;
		}
	}
	return NULL;
}

/*
 * Watchers, an invalidator and a counter reader race; then the file is closed
 * under them. Only the documented errnos come back, and no counter is ever
 * seen to go down. After the races a fresh file still works.
 */
TEST_F(atk, threads_race_watch_unwatch_sync_invalidate_and_close)
{
	struct race r = { .fd = self->fd };
	pthread_t t[THREADS + 2];
	uint64_t gen;
	uint32_t slot;
	long end;

	r.a = anon(12 * PAGE);
	ASSERT_NE(NULL, r.a);
	r.g = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, self->fd, 0);
	ASSERT_NE(MAP_FAILED, r.g);
	for (int i = 0; i < THREADS; i++)
		ASSERT_EQ(0, pthread_create(&t[i], NULL, watcher, &r));
	ASSERT_EQ(0, pthread_create(&t[THREADS], NULL, invalidator, &r));
	ASSERT_EQ(0, pthread_create(&t[THREADS + 1], NULL, reader, &r));
	end = now_ms() + RUN_MS;
	while (now_ms() < end)
		usleep(10000);
	/* Close the descriptor under the watchers (the mapping keeps the file). */
	close(self->fd);
	self->fd = -1;
	usleep(200000);
	atomic_store(&r.stop, 1);
	for (int i = 0; i < THREADS + 2; i++)
		pthread_join(t[i], NULL);
	TH_LOG("%ld watch/sync/unwatch rounds", (long)r.ops);
	EXPECT_LT(100, r.ops);
	EXPECT_EQ(0, r.bad_errno) TH_LOG("last errno %d", -r.last_bad);
	EXPECT_EQ(0, r.went_down);
	munmap((void *)r.g, PAGE);
	self->fd = vamr_open();
	ASSERT_LE(0, self->fd);
	ASSERT_EQ(0, vamr_watch(self->fd, r.a, PAGE, 0, &slot, &gen));
	EXPECT_EQ(0u, slot);
	EXPECT_EQ(0u, gen);
	munmap(r.a, 12 * PAGE);
}

struct blocked {
	int efd;
	ssize_t got;
	int err;
	struct vamr_event ev[4];
};

static void *blocking_reader(void *arg)
{
	struct blocked *b = arg;

	b->got = read(b->efd, b->ev, sizeof(b->ev));
	b->err = b->got < 0 ? errno : 0;
	return NULL;
}

/*
 * A reader blocks on an empty ring; the ring is shrunk to one record and
 * grown back under it; the next invalidation wakes it with exactly that
 * record. Resizing to a size below the queued records keeps the oldest and
 * reports the rest as lost.
 */
TEST_F(atk, ring_resize_under_a_blocked_reader)
{
	struct blocked b = { 0 };
	struct vamr_event ev[8];
	uint8_t *a = anon(4 * PAGE);
	uint32_t size = 0, slot;
	pthread_t t;
	int efd2;

	ASSERT_NE(NULL, a);
	b.efd = vamr_events_open_ex(self->fd, 0, 0, &size);
	ASSERT_LE(0, b.efd);
	EXPECT_EQ(VAMR_EVENTS_RING_DEFAULT + 0u, size);
	ASSERT_EQ(0, vamr_watch(self->fd, a, 4 * PAGE, COOKIE, &slot, NULL));
	ASSERT_EQ(0, pthread_create(&t, NULL, blocking_reader, &b));
	usleep(100000);
	efd2 = vamr_events_open_ex(self->fd, VAMR_EVENTS_NONBLOCK, 1, &size);
	ASSERT_LE(0, efd2);
	EXPECT_EQ(1u, size);
	close(efd2);
	efd2 = vamr_events_open_ex(self->fd, VAMR_EVENTS_NONBLOCK, 2, &size);
	ASSERT_LE(0, efd2);
	EXPECT_EQ(2u, size);
	usleep(100000);
	EXPECT_EQ(0, b.got); /* still blocked */
	ASSERT_EQ(0, madvise(a + PAGE, PAGE, MADV_DONTNEED));
	pthread_join(t, NULL);
	ASSERT_EQ((ssize_t)sizeof(ev[0]), b.got) TH_LOG("errno %d", b.err);
	EXPECT_EQ(VAMR_EVENT_WATCH | VAMR_EVENT_CLEAR, b.ev[0].kind);
	EXPECT_EQ((uintptr_t)(a + PAGE), b.ev[0].addr);
	EXPECT_EQ(COOKIE, b.ev[0].cookie);

	/* Three records into a ring of two, then shrink to one. */
	for (int i = 0; i < 3; i++)
		ASSERT_EQ(0, madvise(a + i * PAGE, PAGE, MADV_DONTNEED));
	close(efd2);
	efd2 = vamr_events_open_ex(self->fd, VAMR_EVENTS_NONBLOCK, 1, &size);
	ASSERT_LE(0, efd2);
	ASSERT_EQ(2, vamr_drain_events(efd2, ev, 8));
	EXPECT_EQ((uintptr_t)a, ev[0].addr);
	EXPECT_EQ(VAMR_EVENT_OVERFLOW, ev[1].kind);
	EXPECT_EQ(0, vamr_drain_events(efd2, ev, 8));
	close(efd2);
	close(b.efd);
	munmap(a, 4 * PAGE);
}

/*
 * A child opens /dev/vamr, watches a written range, passes its /dev/vamr and
 * events descriptors to the parent (SCM_RIGHTS) and exits. The parent reads
 * the exit's two records for the watch (RELEASE, then UNMAP), gets EPERM
 * from the child's file (another, dead, address space), cannot map its
 * counters, and closes it without harm; the events file then stays empty.
 */
TEST_F(atk, watcher_exits_while_another_process_holds_its_files)
{
	struct vamr_watch_sync sy = { .slot = 0 };
	struct vamr_event ev[8];
	int sv[2], cfd, cefd, status, ret;
	struct pollfd pfd;
	pid_t pid;

	ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		uint8_t *a = anon(8 * PAGE);
		int fd = vamr_open(), efd;
		uint32_t slot;

		if (!a || fd < 0)
			_exit(1);
		efd = vamr_events_open_ex(fd, VAMR_EVENTS_NONBLOCK, 0, NULL);
		if (efd < 0 || vamr_watch(fd, a + 100, 8 * PAGE - 200, COOKIE, &slot, NULL) || slot)
			_exit(2);
		if (send_fds(sv[1], fd, efd))
			_exit(3);
		_exit(0);
	}
	close(sv[1]);
	ASSERT_EQ(0, recv_fds(sv[0], &cfd, &cefd));
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_EQ(0, WEXITSTATUS(status));
	pfd = (struct pollfd){ .fd = cefd, .events = POLLIN };
	ASSERT_EQ(1, poll(&pfd, 1, 2000));
	ret = vamr_drain_events(cefd, ev, 8);
	for (int i = 0; i < ret; i++)
		TH_LOG("record %d: kind %#x addr %#llx len %llu slot %u cookie %#llx", i, ev[i].kind,
		       (unsigned long long)ev[i].addr, (unsigned long long)ev[i].len, ev[i].handle,
		       (unsigned long long)ev[i].cookie);
	/* exit_mmap(): mmu_notifier_release(), then the unmap of every VMA. */
	ASSERT_EQ(2, ret);
	EXPECT_EQ(VAMR_EVENT_WATCH | VAMR_EVENT_RELEASE, ev[0].kind);
	EXPECT_EQ(VAMR_EVENT_WATCH | VAMR_EVENT_UNMAP, ev[1].kind);
	for (int i = 0; i < 2; i++) {
		EXPECT_EQ(COOKIE, ev[i].cookie);
		EXPECT_EQ(0u, ev[i].handle);
		EXPECT_EQ(8 * PAGE - 200, ev[i].len);
		EXPECT_EQ(100u, ev[i].addr % PAGE);
	}
	EXPECT_EQ(-EPERM, vamr_ioctl(cfd, VAMR_IOC_WATCH_SYNC, &sy));
	EXPECT_EQ(-EPERM, vamr_watch(cfd, &sy, 8, 0, NULL, NULL));
	EXPECT_EQ(MAP_FAILED, mmap(NULL, PAGE, PROT_READ, MAP_SHARED, cfd, 0));
	EXPECT_EQ(EPERM, errno);
	EXPECT_EQ(-EPERM, vamr_events_open_ex(cfd, 0, 4, NULL));
	close(cfd);
	EXPECT_EQ(0, vamr_drain_events(cefd, ev, 8));
	close(cefd);
	close(sv[0]);
}

/*
 * The process's own mm calls on its own counter mapping, as uid 65534. Slot 0
 * (counter page 0) watches own->a, slot PER_PAGE (counter page 1) own->b, and
 * slots 1..PER_PAGE-1 own->c, which nothing changes; b starts 5 above a, so
 * the pages cannot be mistaken for each other. After each call a read of the
 * mapping shows both counters (no SIGBUS) and follows an invalidation of its
 * own page only, or the call is refused with its errno.
 */
FIXTURE(own)
{
	int fd;
	uint8_t *a, *b, *c;
	const volatile uint64_t *g;	/* all counters, MAP_SHARED */
	uint64_t ga, gb;		/* what slots 0 and PER_PAGE should show */
};

FIXTURE_SETUP(own)
{
	uint32_t slot;

	self->g = MAP_FAILED;
	self->fd = -1;
	if (geteuid() != 0 && geteuid() != NOBODY)
		SKIP(return, "needs root (to become uid %d) or uid %d", NOBODY, NOBODY);
	ASSERT_EQ(0, become_uid(NOBODY));
	/* Changing uid made the process non-dumpable: /proc/self/mem would be root's. */
	ASSERT_EQ(0, prctl(PR_SET_DUMPABLE, 1, 0, 0, 0));
	self->fd = vamr_open();
	if (self->fd == -ENOENT)
		SKIP(return, "/dev/vamr not present");
	ASSERT_LE(0, self->fd);
	self->a = anon(PAGE);
	self->b = anon(PAGE);
	self->c = anon(PAGE);
	ASSERT_TRUE(self->a && self->b && self->c);
	for (uint32_t i = 0; i <= PER_PAGE; i++) {
		uint8_t *r = i == 0 ? self->a : i == PER_PAGE ? self->b : self->c;

		ASSERT_EQ(0, vamr_watch(self->fd, r, PAGE, i, &slot, NULL));
		ASSERT_EQ(i, slot);
	}
	for (int i = 0; i < 5; i++)
		ASSERT_EQ(0, madvise(self->b, PAGE, MADV_DONTNEED));
	self->ga = vamr_watch_sync(self->fd, 0);
	self->gb = vamr_watch_sync(self->fd, PER_PAGE);
	ASSERT_EQ(self->ga + 5, self->gb);
	self->g = mmap(NULL, VAMR_WATCH_MAP_LEN, PROT_READ, MAP_SHARED, self->fd, 0);
	ASSERT_NE(MAP_FAILED, self->g);
}

FIXTURE_TEARDOWN(own)
{
	if (self->g != MAP_FAILED)
		munmap((void *)self->g, VAMR_WATCH_MAP_LEN);
	if (self->fd >= 0)
		close(self->fd);
}

/*
 * @p0 (slot 0's counter in some mapping, or NULL) and @p1 (slot PER_PAGE's)
 * read the expected values without a fault (WATCH_SYNC agrees while the file
 * is open), then each follows one invalidation of its own page and only that.
 */
static void follows(struct __test_metadata *_metadata, FIXTURE_DATA(own) *self,
		    const volatile uint64_t *p0, const volatile uint64_t *p1, const char *what)
{
	uint64_t v;

	if (self->fd >= 0) {
		ASSERT_EQ((int64_t)self->ga, vamr_watch_sync(self->fd, 0)) TH_LOG("%s", what);
		ASSERT_EQ((int64_t)self->gb, vamr_watch_sync(self->fd, PER_PAGE)) TH_LOG("%s", what);
	}
	for (int step = 0; step < 3; step++) {
		if (step == 1) {
			ASSERT_EQ(0, madvise(self->a, PAGE, MADV_DONTNEED));
			self->ga++;
		} else if (step == 2) {
			ASSERT_EQ(0, madvise(self->b, PAGE, MADV_DONTNEED));
			self->gb++;
		}
		if (p0) {
			ASSERT_EQ(0, faults(p0, &v)) TH_LOG("%s: slot 0 faults (step %d)", what, step);
			ASSERT_EQ(self->ga, v) TH_LOG("%s: slot 0 (step %d)", what, step);
		}
		if (p1) {
			ASSERT_EQ(0, faults(p1, &v)) TH_LOG("%s: slot %lu faults (step %d)", what,
							    PER_PAGE, step);
			ASSERT_EQ(self->gb, v) TH_LOG("%s: slot %lu (step %d)", what, PER_PAGE, step);
		}
	}
}

static const struct advice {
	int advice;
	int err;	/* 0: done, the mapping keeps working */
	const char *name;
} advices[] = {
	{ MADV_DONTNEED, 0, "MADV_DONTNEED" },
	{ MADV_DONTNEED_LOCKED, 0, "MADV_DONTNEED_LOCKED" },
	{ MADV_COLD, 0, "MADV_COLD" },
	{ MADV_PAGEOUT, 0, "MADV_PAGEOUT" },
	{ MADV_WILLNEED, 0, "MADV_WILLNEED" },
	{ MADV_POPULATE_READ, 0, "MADV_POPULATE_READ" },
	{ MADV_NORMAL, 0, "MADV_NORMAL" },
	{ MADV_RANDOM, 0, "MADV_RANDOM" },
	{ MADV_DONTDUMP, 0, "MADV_DONTDUMP" },
	{ MADV_DONTFORK, 0, "MADV_DONTFORK" },
	{ MADV_MERGEABLE, 0, "MADV_MERGEABLE" },
	/* Anonymous memory only, or a hole punch in a file we may not write. */
	{ MADV_FREE, EINVAL, "MADV_FREE" },
	{ MADV_REMOVE, EACCES, "MADV_REMOVE" },
	{ MADV_WIPEONFORK, EINVAL, "MADV_WIPEONFORK" },
	/* VM_SPECIAL (VM_MIXEDMAP | VM_DONTEXPAND): not for these. */
	{ MADV_DOFORK, EINVAL, "MADV_DOFORK" },
	{ MADV_DODUMP, EINVAL, "MADV_DODUMP" },
	{ MADV_GUARD_INSTALL, EINVAL, "MADV_GUARD_INSTALL" },
	{ MADV_COLLAPSE, EINVAL, "MADV_COLLAPSE" },
	/* Read-only for good. */
	{ MADV_POPULATE_WRITE, EINVAL, "MADV_POPULATE_WRITE" },
};

/*
 * Each madvise of the whole mapping, on present and on dropped pages: done
 * and the counters still read right and move, or refused with its errno.
 */
TEST_F(own, every_madvise_keeps_the_mapping_or_is_refused)
{
	const volatile uint64_t *p0 = &self->g[0], *p1 = &self->g[PER_PAGE];

	follows(_metadata, self, p0, p1, "mapped");
	for (size_t i = 0; i < sizeof(advices) / sizeof(advices[0]); i++) {
		const struct advice *ad = &advices[i];

		for (int dropped = 0; dropped < 2; dropped++) {
			if (dropped)
				ASSERT_EQ(0, madvise((void *)self->g, VAMR_WATCH_MAP_LEN,
						     MADV_DONTNEED));
			errno = 0;
			EXPECT_EQ(ad->err ? -1 : 0,
				  madvise((void *)self->g, VAMR_WATCH_MAP_LEN, ad->advice))
				TH_LOG("%s: errno %d", ad->name, errno);
			if (ad->err)
				EXPECT_EQ(ad->err, errno) TH_LOG("%s", ad->name);
			follows(_metadata, self, p0, p1, ad->name);
		}
	}
	/* A dropped page read through /proc/self/mem (GUP faults it in). */
	{
		uint64_t v = 0;
		int mem = open("/proc/self/mem", O_RDONLY);

		ASSERT_LE(0, mem);
		ASSERT_EQ(0, madvise((void *)self->g, VAMR_WATCH_MAP_LEN, MADV_DONTNEED));
		EXPECT_EQ((ssize_t)sizeof(v), pread(mem, &v, sizeof(v), (off_t)(uintptr_t)p1));
		EXPECT_EQ(self->gb, v);
		close(mem);
	}
	follows(_metadata, self, p0, p1, "/proc/self/mem");
}

/*
 * A private mapping of the counters: a dropped page comes back as the
 * counter page itself (not a zero page, not a private copy); both mappings
 * refuse PROT_WRITE and PROT_EXEC; PROT_NONE then PROT_READ (and mlock) keep
 * the mapping working.
 */
TEST_F(own, private_mapping_and_protections)
{
	const volatile uint64_t *p = mmap(NULL, VAMR_WATCH_MAP_LEN, PROT_READ, MAP_PRIVATE,
					  self->fd, 0);
	uint64_t v;

	ASSERT_NE(MAP_FAILED, p);
	follows(_metadata, self, &p[0], &p[PER_PAGE], "MAP_PRIVATE");
	ASSERT_EQ(0, madvise((void *)p, VAMR_WATCH_MAP_LEN, MADV_DONTNEED));
	follows(_metadata, self, &p[0], &p[PER_PAGE], "MAP_PRIVATE, MADV_DONTNEED");
	for (int shared = 0; shared < 2; shared++) {
		void *m = shared ? (void *)self->g : (void *)p;

		EXPECT_EQ(-1, mprotect(m, VAMR_WATCH_MAP_LEN, PROT_READ | PROT_WRITE));
		EXPECT_EQ(EACCES, errno);
		EXPECT_EQ(-1, mprotect(m, PAGE, PROT_WRITE));
		EXPECT_EQ(EACCES, errno);
		EXPECT_EQ(-1, mprotect(m, PAGE, PROT_READ | PROT_EXEC));
		EXPECT_EQ(EACCES, errno);
		ASSERT_EQ(0, mprotect(m, VAMR_WATCH_MAP_LEN, PROT_NONE));
		EXPECT_EQ(1, faults(m, &v));
		ASSERT_EQ(0, madvise(m, VAMR_WATCH_MAP_LEN, MADV_DONTNEED));
		ASSERT_EQ(0, mprotect(m, VAMR_WATCH_MAP_LEN, PROT_READ));
		follows(_metadata, self, m, (const volatile uint64_t *)m + PER_PAGE,
			shared ? "PROT_NONE, PROT_READ" : "private PROT_NONE, PROT_READ");
	}
	/* mlock: VM_SPECIAL mappings are left unlocked, so MADV_DONTNEED stays allowed. */
	EXPECT_EQ(0, mlock((void *)self->g, VAMR_WATCH_MAP_LEN));
	ASSERT_EQ(0, madvise((void *)self->g, VAMR_WATCH_MAP_LEN, MADV_DONTNEED));
	follows(_metadata, self, &self->g[0], &self->g[PER_PAGE], "mlock");
	EXPECT_EQ(0, munlock((void *)self->g, VAMR_WATCH_MAP_LEN));
	munmap((void *)p, VAMR_WATCH_MAP_LEN);
}

static void *hole(size_t len)
{
	void *h = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return h == MAP_FAILED ? NULL : h;
}

/*
 * mremap: growing (in place or moving) is EFAULT, MREMAP_DONTUNMAP EINVAL;
 * a move of the whole mapping, of one page of it, and a shrink keep every
 * page on its own counters, dropped or not; munmap of a part and a mapping
 * at an offset do too. The old addresses fault (nothing is mapped there).
 */
TEST_F(own, mremap_and_munmap_of_parts_keep_each_page_on_its_counters)
{
	const volatile uint64_t *m, *one, *g = self->g;
	void *h = hole(VAMR_WATCH_MAP_LEN), *h1 = hole(PAGE);
	uint64_t v;

	ASSERT_TRUE(h && h1);
	EXPECT_EQ(MAP_FAILED, mremap((void *)g, VAMR_WATCH_MAP_LEN, 2 * VAMR_WATCH_MAP_LEN, 0));
	EXPECT_EQ(EFAULT, errno);
	EXPECT_EQ(MAP_FAILED, mremap((void *)g, VAMR_WATCH_MAP_LEN, 2 * VAMR_WATCH_MAP_LEN,
				     MREMAP_MAYMOVE));
	EXPECT_EQ(EFAULT, errno);
	EXPECT_EQ(MAP_FAILED, mremap((void *)g, VAMR_WATCH_MAP_LEN, VAMR_WATCH_MAP_LEN,
				     MREMAP_MAYMOVE | MREMAP_DONTUNMAP));
	EXPECT_EQ(EINVAL, errno);
	follows(_metadata, self, &g[0], &g[PER_PAGE], "refused mremap");
	/* The whole mapping moves. */
	m = mremap((void *)g, VAMR_WATCH_MAP_LEN, VAMR_WATCH_MAP_LEN,
		   MREMAP_MAYMOVE | MREMAP_FIXED, h);
	ASSERT_EQ(h, m);
	self->g = m;
	EXPECT_EQ(1, faults(g, &v));
	follows(_metadata, self, &m[0], &m[PER_PAGE], "mremap");
	ASSERT_EQ(0, madvise((void *)m, VAMR_WATCH_MAP_LEN, MADV_DONTNEED));
	follows(_metadata, self, &m[0], &m[PER_PAGE], "mremap, MADV_DONTNEED");
	/* Page 1 alone moves away (a split, then a move): each part keeps its pages. */
	ASSERT_EQ(0, madvise((void *)m, VAMR_WATCH_MAP_LEN, MADV_DONTNEED));
	one = mremap((void *)&m[PER_PAGE], PAGE, PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, h1);
	ASSERT_EQ(h1, one);
	EXPECT_EQ(1, faults(&m[PER_PAGE], &v));
	follows(_metadata, self, &m[0], one, "mremap of page 1");
	ASSERT_EQ(0, madvise((void *)one, PAGE, MADV_DONTNEED));
	ASSERT_EQ(0, madvise((void *)m, PAGE, MADV_DONTNEED));
	follows(_metadata, self, &m[0], one, "mremap of page 1, MADV_DONTNEED");
	munmap((void *)one, PAGE);
	/* Pages 2.. (nothing watched there: zeros) shrink to one page, the rest unmaps. */
	ASSERT_EQ((void *)&m[2 * PER_PAGE], mremap((void *)&m[2 * PER_PAGE],
						   VAMR_WATCH_MAP_LEN - 2 * PAGE, PAGE, 0));
	ASSERT_EQ(0, madvise((void *)&m[2 * PER_PAGE], PAGE, MADV_DONTNEED));
	EXPECT_EQ(0, faults(&m[2 * PER_PAGE], &v));
	EXPECT_EQ(0u, v);
	EXPECT_EQ(1, faults(&m[3 * PER_PAGE], &v));
	munmap((void *)m, VAMR_WATCH_MAP_LEN);
	self->g = MAP_FAILED;

	/* munmap of page 0 of a new mapping: page 1 goes on. */
	m = mmap(NULL, 2 * PAGE, PROT_READ, MAP_SHARED, self->fd, 0);
	ASSERT_NE(MAP_FAILED, m);
	ASSERT_EQ(0, munmap((void *)m, PAGE));
	ASSERT_EQ(0, madvise((void *)&m[PER_PAGE], PAGE, MADV_DONTNEED));
	EXPECT_EQ(1, faults(m, &v));
	follows(_metadata, self, NULL, &m[PER_PAGE], "munmap of page 0");
	munmap((void *)&m[PER_PAGE], PAGE);
	/* A mapping at offset PAGE: its first page is counter page 1. */
	m = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, self->fd, PAGE);
	ASSERT_NE(MAP_FAILED, m);
	ASSERT_EQ(0, madvise((void *)m, PAGE, MADV_DONTNEED));
	follows(_metadata, self, NULL, m, "offset PAGE");
	munmap((void *)m, PAGE);
}

/*
 * fork: the child has no counter mapping (VM_DONTCOPY: the address faults)
 * and cannot map the parent's; the parent's mapping, dropped before and after
 * the fork, goes on. close of the last descriptor: the mapping holds the
 * file, so a dropped page still comes back with the live counters (the pages
 * outlive every part of the mapping); munmap then ends the file.
 */
TEST_F(own, fork_and_close_of_the_file_keep_the_mapping)
{
	const volatile uint64_t *g = self->g;
	int status;
	pid_t pid;

	for (int i = 0; i < 2; i++) {
		ASSERT_EQ(0, madvise((void *)g, VAMR_WATCH_MAP_LEN, MADV_DONTNEED));
		pid = fork();
		ASSERT_LE(0, pid);
		if (!pid) {
			uint64_t v;

			if (!faults(&g[0], &v) || !faults(&g[PER_PAGE], &v))
				_exit(1);
			if (mmap(NULL, PAGE, PROT_READ, MAP_SHARED, self->fd, 0) != MAP_FAILED ||
			    errno != EPERM)
				_exit(2);
			_exit(0);
		}
		ASSERT_EQ(pid, waitpid(pid, &status, 0));
		EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
			TH_LOG("child status %#x", status);
		ASSERT_EQ(0, madvise((void *)g, VAMR_WATCH_MAP_LEN, MADV_DONTNEED));
		follows(_metadata, self, &g[0], &g[PER_PAGE], "fork");
	}
	ASSERT_EQ(0, close(self->fd));
	self->fd = -1;
	for (int i = 0; i < 3; i++) {
		ASSERT_EQ(0, madvise((void *)g, VAMR_WATCH_MAP_LEN, MADV_DONTNEED));
		follows(_metadata, self, &g[0], &g[PER_PAGE], "close");
	}
	/* A part of the mapping, split off after the close, holds the file as well. */
	ASSERT_EQ(0, munmap((void *)g, PAGE));
	ASSERT_EQ(0, madvise((void *)&g[PER_PAGE], PAGE, MADV_DONTNEED));
	follows(_metadata, self, NULL, &g[PER_PAGE], "close, munmap of page 0");
	ASSERT_EQ(0, munmap((void *)&g[PER_PAGE], VAMR_WATCH_MAP_LEN - PAGE));
	self->g = MAP_FAILED;
}

struct dropper {
	const volatile uint64_t *g;
	uint8_t *a;
	atomic_int stop;
};

static void *drop_loop(void *arg)
{
	struct dropper *d = arg;

	for (unsigned long n = 0; !atomic_load(&d->stop); n++) {
		madvise((void *)d->g, VAMR_WATCH_MAP_LEN, MADV_DONTNEED);
		if (n % 4 == 0)
			madvise(d->a, PAGE, MADV_DONTNEED);
	}
	return NULL;
}

/*
 * Two threads drop the counter pages and invalidate the watched page in a
 * loop while this one reads: every read succeeds (a SIGBUS would kill the
 * test), and the counter never goes down.
 */
TEST_F(own, reads_race_drops_of_the_mapping)
{
	struct dropper d = { .g = self->g, .a = self->a };
	uint64_t last = 0, v;
	pthread_t t[2];
	struct timespec t0, now;

	for (int i = 0; i < 2; i++)
		ASSERT_EQ(0, pthread_create(&t[i], NULL, drop_loop, &d));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		for (int i = 0; i < 1000; i++) {
			v = self->g[0];
			ASSERT_LE(last, v);
			last = v;
			ASSERT_LE(self->gb, self->g[PER_PAGE]);
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while (now.tv_sec - t0.tv_sec < 2);
	atomic_store(&d.stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	self->ga = vamr_watch_sync(self->fd, 0);
	EXPECT_LT(0u, self->ga);
	EXPECT_EQ(self->ga, self->g[0]);
	TH_LOG("slot 0 moved to %llu while the mapping was dropped", (unsigned long long)last);
}

TEST_HARNESS_MAIN
