// SPDX-License-Identifier: GPL-2.0
/*
 * vamr's in-kernel API (include/linux/vamr.h), driven through the test
 * consumer module tests/kapi/vamr_api_test.ko: a driver copying with kernel
 * buffers by user VA sees what the CPU sees, after remaps too.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "pattern.h"
#include "vamr_lib.h"
#include "../kapi/vamr_api_test.h"

#define PAGE 4096ul
#define RW (VAMR_ACCESS_READ | VAMR_ACCESS_WRITE)

static int api(int fd, unsigned long cmd, struct vamr_api_test_arg *a)
{
	return ioctl(fd, cmd, a) ? -errno : 0;
}

static int api_create(int fd, void *addr, uint64_t len, uint32_t access)
{
	struct vamr_api_test_arg a = { .addr = (uintptr_t)addr, .len = len, .access = access };

	return api(fd, VAMR_API_TEST_CREATE, &a);
}

static int api_copy(int fd, int write, void *addr, void *buf, uint64_t len)
{
	struct vamr_api_test_arg a = {
		.addr = (uintptr_t)addr, .len = len, .buf = (uintptr_t)buf,
	};

	return api(fd, write ? VAMR_API_TEST_WRITE : VAMR_API_TEST_READ, &a);
}

FIXTURE(api)
{
	int fd;
	uint8_t *buf;
};

FIXTURE_SETUP(api)
{
	self->fd = open("/dev/vamr_api_test", O_RDWR | O_CLOEXEC);
	if (self->fd < 0 && errno == ENOENT)
		SKIP(return, "vamr_api_test.ko not loaded");
	ASSERT_LE(0, self->fd);
	self->buf = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, self->buf);
}

FIXTURE_TEARDOWN(api)
{
	if (self->fd >= 0) {
		/* Announced again if a test stopped while the device was removed. */
		ioctl(self->fd, VAMR_API_TEST_DEVICE_ADD);
		close(self->fd);
	}
	munmap(self->buf, 1 << 20);
}

/* Kernel-buffer copies through a region follow munmap + mmap and DONTNEED. */
TEST_F(api, copy_follows_the_mapping)
{
	size_t len = 8 * PAGE;
	uint8_t *a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct vamr_counters c;
	long vmpin = vamr_vmpin_kb();

	ASSERT_NE(MAP_FAILED, a);
	pattern_fill(a, len, 1, 0);
	ASSERT_EQ(0, api_create(self->fd, a + 1, len - 1, RW));
	EXPECT_EQ(vmpin + 32, vamr_vmpin_kb());
	ASSERT_EQ(0, api_copy(self->fd, 0, a + 1, self->buf, len - 1));
	ASSERT_EQ((size_t)-1, pattern_check(self->buf, len - 1, 1, 1));

	ASSERT_EQ(0, munmap(a, len));
	ASSERT_EQ(a, mmap(a, len, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
	pattern_fill(a, len, 2, 0);
	ASSERT_EQ(0, api_copy(self->fd, 0, a + PAGE - 3, self->buf, 2 * PAGE));
	ASSERT_EQ((size_t)-1, pattern_check(self->buf, 2 * PAGE, 2, PAGE - 3));
	pattern_fill(self->buf, 3 * PAGE + 5, 3, 0);
	ASSERT_EQ(0, api_copy(self->fd, 1, a + 2 * PAGE + 11, self->buf, 3 * PAGE + 5));
	ASSERT_EQ((size_t)-1, pattern_check(a + 2 * PAGE + 11, 3 * PAGE + 5, 3, 0));
	EXPECT_EQ(pattern_byte(2, 2 * PAGE + 10), a[2 * PAGE + 10]);

	ASSERT_EQ(0, madvise(a, len, MADV_DONTNEED));
	ASSERT_EQ(0, api_copy(self->fd, 0, a + 1, self->buf, len - 1));
	for (size_t i = 0; i < len - 1; i++)
		if (self->buf[i])
			ASSERT_EQ(0, self->buf[i]);

	ASSERT_EQ(0, ioctl(self->fd, VAMR_API_TEST_STATS, &c));
	EXPECT_LE(1u, c.invalidations[VAMR_EVENT_UNMAP]);
	EXPECT_LE(1u, c.invalidations[VAMR_EVENT_CLEAR]);
	EXPECT_LE(8u, c.ondemand_repins + c.pins_swapped);
	ASSERT_EQ(0, ioctl(self->fd, VAMR_API_TEST_DESTROY));
	EXPECT_EQ(vmpin, vamr_vmpin_kb());
	munmap(a, len);
}

/* VAMR_IOC_MR_QUERY finds a driver region of this process by its key, until it is destroyed. */
TEST_F(api, mr_query_by_key)
{
	uint8_t *a = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct vamr_api_test_arg x = { .len = PAGE + 7, .access = RW, .compare = 0xabcd12 };
	struct vamr_mr_query q = { .key = 0xabcd12, .ib_index = VAMR_API_TEST_IB_INDEX };
	int vfd = vamr_open();

	ASSERT_NE(MAP_FAILED, a);
	ASSERT_LE(0, vfd);
	EXPECT_EQ(-ENOENT, vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q));
	x.addr = (uintptr_t)a + 3;
	ASSERT_EQ(0, api(self->fd, VAMR_API_TEST_CREATE, &x));
	ASSERT_EQ(0, vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q));
	EXPECT_EQ((uintptr_t)a + 3, q.addr);
	EXPECT_EQ(PAGE + 7, q.len);
	EXPECT_EQ(2u, q.counters.pages_pinned);
	/* Listed by the key's index part (0xabcd): another key byte or index is a missing MR. */
	q.key = 0xabcd13;
	EXPECT_EQ(-ENOENT, vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q));
	q.key = 0xabce12;
	EXPECT_EQ(-ENOENT, vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q));
	q.key = 0xabcd12;
	/* The same key on another device is another MR: the same answer as a missing key. */
	q.ib_index = VAMR_API_TEST_IB_INDEX + 1;
	EXPECT_EQ(-ENOENT, vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q));
	q.ib_index = VAMR_API_TEST_IB_INDEX;
	q.flags = 1;
	EXPECT_EQ(-EINVAL, vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q));
	q.flags = 0;
	q.reserved = 1;
	EXPECT_EQ(-EINVAL, vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q));
	q.reserved = 0;
	ASSERT_EQ(0, vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q));
	ASSERT_EQ(0, ioctl(self->fd, VAMR_API_TEST_DESTROY));
	EXPECT_EQ(-ENOENT, vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q));
	close(vfd);
	munmap(a, 2 * PAGE);
}

/* VAMR_IOC_MR_QUERY of the device with a region under @key: 0 or -errno. */
static int mr_query_key(int vfd, uint32_t key, struct vamr_mr_query *q)
{
	*q = (struct vamr_mr_query){ .key = key, .ib_index = VAMR_API_TEST_IB_INDEX };
	return vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, q);
}

/* Whether VAMR_IOC_DEVICE lists the module's device. */
static int api_device_listed(int vfd)
{
	struct vamr_device_info d;
	__u32 pos;

	for (pos = 0;; pos++) {
		d = (struct vamr_device_info){ .pos = pos };
		if (vamr_ioctl(vfd, VAMR_IOC_DEVICE, &d))
			return 0;
		if (d.ib_index == VAMR_API_TEST_IB_INDEX)
			return 1;
	}
}

/*
 * The driver's lookup (find_mr) finds regions by the key's index part; vamr
 * must still refuse, with ENOENT: the key of another process's region, a
 * destroyed region, an index reused with another key byte, and any key of a
 * removed device (whose regions stay usable).
 */
TEST_F(api, mr_query_hostile_keys)
{
	uint8_t *a = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct vamr_api_test_arg x = { .len = PAGE, .access = RW, .compare = 0x5a5a01 };
	struct vamr_api_test_arg y = { .len = PAGE, .access = RW, .compare = 0x777701 };
	struct vamr_mr_query q;
	int vfd = vamr_open(), status = -1, fd2;
	pid_t pid;

	ASSERT_NE(MAP_FAILED, a);
	ASSERT_LE(0, vfd);
	x.addr = (uintptr_t)a;
	ASSERT_EQ(0, api(self->fd, VAMR_API_TEST_CREATE, &x));
	ASSERT_EQ(0, mr_query_key(vfd, 0x5a5a01, &q));
	EXPECT_EQ((uintptr_t)a, q.addr);
	EXPECT_EQ(1u, q.counters.pages_pinned);

	/* Another process (a fork child: a copy of the mm, not the mm) asks for the key. */
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		int cfd = vamr_open();
		struct vamr_mr_query cq;

		_exit(cfd < 0 ? 10 : -mr_query_key(cfd, 0x5a5a01, &cq));
	}
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_EQ(ENOENT, WEXITSTATUS(status));
	/* The owner still finds it. */
	ASSERT_EQ(0, mr_query_key(vfd, 0x5a5a01, &q));

	/* Destroyed: gone. */
	ASSERT_EQ(0, ioctl(self->fd, VAMR_API_TEST_DESTROY));
	EXPECT_EQ(-ENOENT, mr_query_key(vfd, 0x5a5a01, &q));

	/* The index 0x5a5a again, with key byte 02: the old key is another MR. */
	x.compare = 0x5a5a02;
	x.addr = (uintptr_t)a + PAGE;
	ASSERT_EQ(0, api(self->fd, VAMR_API_TEST_CREATE, &x));
	EXPECT_EQ(-ENOENT, mr_query_key(vfd, 0x5a5a01, &q));
	ASSERT_EQ(0, mr_query_key(vfd, 0x5a5a02, &q));
	EXPECT_EQ((uintptr_t)a + PAGE, q.addr);

	/* The device removed: not listed, its regions not found, none created on it. */
	ASSERT_EQ(1, api_device_listed(vfd));
	ASSERT_EQ(0, ioctl(self->fd, VAMR_API_TEST_DEVICE_REMOVE));
	EXPECT_EQ(0, api_device_listed(vfd));
	EXPECT_EQ(-ENOENT, mr_query_key(vfd, 0x5a5a02, &q));
	fd2 = open("/dev/vamr_api_test", O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, fd2);
	y.addr = (uintptr_t)a;
	EXPECT_EQ(-ENODEV, api(fd2, VAMR_API_TEST_CREATE, &y));
	close(fd2);
	/* The region itself still works. */
	ASSERT_EQ(0, api_copy(self->fd, 0, a + PAGE, self->buf, 16));
	/* Announced again, the driver's table finds the region again. */
	ASSERT_EQ(0, ioctl(self->fd, VAMR_API_TEST_DEVICE_ADD));
	EXPECT_EQ(-1, ioctl(self->fd, VAMR_API_TEST_DEVICE_ADD));
	EXPECT_EQ(EEXIST, errno);
	ASSERT_EQ(0, mr_query_key(vfd, 0x5a5a02, &q));
	EXPECT_EQ((uintptr_t)a + PAGE, q.addr);
	ASSERT_EQ(0, ioctl(self->fd, VAMR_API_TEST_DESTROY));
	EXPECT_EQ(-ENOENT, mr_query_key(vfd, 0x5a5a02, &q));
	close(vfd);
	munmap(a, 2 * PAGE);
}

/* Removes and announces the module's device again and again. */
static void *device_flap(void *arg)
{
	int fd = *(int *)arg, i;

	for (i = 0; i < 400; i++) {
		ioctl(fd, VAMR_API_TEST_DEVICE_REMOVE);
		sched_yield();
		ioctl(fd, VAMR_API_TEST_DEVICE_ADD);
	}
	return NULL;
}

/*
 * VAMR_IOC_MR_QUERY racing with the device's removal (vamr_device_remove()
 * waits for the module's find_mr and stops calling it) and announcement: each
 * answer is the region or ENOENT, never anything else.
 */
TEST_F(api, mr_query_races_device_removal)
{
	uint8_t *a = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct vamr_api_test_arg x = { .len = PAGE, .access = RW, .compare = 0x6b6b01 };
	unsigned long found = 0, gone = 0, other = 0;
	struct vamr_mr_query q;
	int vfd = vamr_open(), fd2, ret;
	pthread_t t;

	ASSERT_NE(MAP_FAILED, a);
	ASSERT_LE(0, vfd);
	x.addr = (uintptr_t)a;
	ASSERT_EQ(0, api(self->fd, VAMR_API_TEST_CREATE, &x));
	fd2 = open("/dev/vamr_api_test", O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, pthread_create(&t, NULL, device_flap, &fd2));
	while (pthread_tryjoin_np(t, NULL)) {
		ret = mr_query_key(vfd, 0x6b6b01, &q);
		if (ret == 0 && q.addr == (uintptr_t)a)
			found++;
		else if (ret == -ENOENT)
			gone++;
		else
			other++;
	}
	TH_LOG("queries: %lu found, %lu ENOENT", found, gone);
	EXPECT_EQ(0ul, other);
	/* Announced again at the end: found again. */
	ASSERT_EQ(0, mr_query_key(vfd, 0x6b6b01, &q));
	close(fd2);
	ASSERT_EQ(0, ioctl(self->fd, VAMR_API_TEST_DESTROY));
	close(vfd);
	munmap(a, PAGE);
}

/* Atomics and prefetch through the API. */
TEST_F(api, atomics_and_prefetch)
{
	size_t len = 4 * PAGE;
	uint8_t *a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t *w = (uint64_t *)(a + 3 * PAGE + 8);
	struct vamr_api_test_arg x;

	ASSERT_NE(MAP_FAILED, a);
	*w = 40;
	ASSERT_EQ(0, api_create(self->fd, a, len, RW));
	x = (struct vamr_api_test_arg){ .addr = (uintptr_t)w, .op = VAMR_ATOMIC_FETCH_ADD, .compare = 2 };
	ASSERT_EQ(0, api(self->fd, VAMR_API_TEST_ATOMIC, &x));
	EXPECT_EQ(40u, x.result);
	EXPECT_EQ(42u, *w);
	x = (struct vamr_api_test_arg){ .addr = (uintptr_t)w, .op = VAMR_ATOMIC_CMP_SWAP,
					.compare = 42, .swap = 7 };
	ASSERT_EQ(0, api(self->fd, VAMR_API_TEST_ATOMIC, &x));
	EXPECT_EQ(7u, *w);
	x = (struct vamr_api_test_arg){ .addr = (uintptr_t)w + 1, .op = VAMR_ATOMIC_WRITE };
	EXPECT_EQ(-EINVAL, api(self->fd, VAMR_API_TEST_ATOMIC, &x));
	x = (struct vamr_api_test_arg){ .addr = (uintptr_t)w, .op = 9 };
	EXPECT_EQ(-EINVAL, api(self->fd, VAMR_API_TEST_ATOMIC, &x));

	ASSERT_EQ(0, munmap(a, len));
	ASSERT_EQ(a, mmap(a, len, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
	x = (struct vamr_api_test_arg){ .addr = (uintptr_t)a, .len = len };
	ASSERT_EQ(0, api(self->fd, VAMR_API_TEST_PREFETCH, &x));
	EXPECT_EQ(4u, x.result);
	ASSERT_EQ(0, ioctl(self->fd, VAMR_API_TEST_DESTROY));
	munmap(a, len);
}

/*
 * vamr_region_cancel(): every later access and prefetch fails with ECANCELED
 * and changes nothing; the region is still destroyed normally and releases
 * its pins.
 */
TEST_F(api, cancel_stops_every_access)
{
	size_t len = 4 * PAGE;
	uint8_t *a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	long vmpin = vamr_vmpin_kb();
	struct vamr_api_test_arg x;

	ASSERT_NE(MAP_FAILED, a);
	pattern_fill(a, len, 60, 0);
	ASSERT_EQ(0, api_create(self->fd, a, len, RW));
	ASSERT_EQ(0, api_copy(self->fd, 0, a + 10, self->buf, 100));
	EXPECT_EQ(PATTERN_OK, pattern_check(self->buf, 100, 60, 10));
	ASSERT_EQ(0, ioctl(self->fd, VAMR_API_TEST_CANCEL));
	EXPECT_EQ(-ECANCELED, api_copy(self->fd, 0, a + 10, self->buf, 100));
	pattern_fill(self->buf, 100, 61, 0);
	EXPECT_EQ(-ECANCELED, api_copy(self->fd, 1, a + 10, self->buf, 100));
	x = (struct vamr_api_test_arg){ .addr = (uintptr_t)a, .op = VAMR_ATOMIC_FETCH_ADD };
	EXPECT_EQ(-ECANCELED, api(self->fd, VAMR_API_TEST_ATOMIC, &x));
	x = (struct vamr_api_test_arg){ .addr = (uintptr_t)a, .len = len };
	EXPECT_EQ(-ECANCELED, api(self->fd, VAMR_API_TEST_PREFETCH, &x));
	EXPECT_EQ(PATTERN_OK, pattern_check(a, len, 60, 0));
	EXPECT_EQ(vmpin + 16, vamr_vmpin_kb());
	ASSERT_EQ(0, ioctl(self->fd, VAMR_API_TEST_DESTROY));
	EXPECT_EQ(vmpin, vamr_vmpin_kb());
	munmap(a, len);
}

/*
 * The data path under fire: copier threads on every CPU move bytes through
 * one region with kernel buffers (the read side an RDMA driver's tasks use)
 * while a remapper replaces the whole range with fresh pages (mmap MAP_FIXED,
 * an UNMAP invalidation) and DONTNEEDs it, over and over. `seq` is odd while
 * the remapper changes the range and even once the new pages hold the new
 * generation's bytes. A copy that began and ended within one even `seq`
 * must match what the CPU sees: writers write their own slice of the first
 * half and check it through the CPU mapping; readers read the second half,
 * which the remapper filled for that generation. A copy through a pin that
 * an invalidation had covered (old pages) fails this check.
 */
#define HAMMER_PAGES 64
#define HAMMER_SECONDS 3
#define HAMMER_MAX_THREADS 8

struct hammer {
	int fd;
	uint8_t *a;
	_Atomic unsigned long seq;
	_Atomic int stop;
	_Atomic unsigned long checked, raced, remaps, bad, errors;
	char why[160];
};

struct hammer_thread {
	struct hammer *h;
	int cpu, writer, slot, nslots;
	uint8_t *buf;
};

static void hammer_fail(struct hammer *h, const char *what, long a, long b)
{
	if (atomic_fetch_add(&h->bad, 1) == 0)
		snprintf(h->why, sizeof(h->why), "%s (%ld, %ld)", what, a, b);
}

static void *hammer_copier(void *arg)
{
	struct hammer_thread *t = arg;
	struct hammer *h = t->h;
	size_t half = HAMMER_PAGES / 2 * PAGE;
	size_t slice = half / t->nslots;
	uint8_t *mine = h->a + t->slot * slice;
	uint64_t tag = ((uint64_t)t->slot << 32) | 1;
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(t->cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
	while (!atomic_load(&h->stop)) {
		unsigned long s1 = atomic_load(&h->seq), s2;
		int ret;

		if (s1 & 1)
			continue;
		if (t->writer) {
			tag++;
			pattern_fill(t->buf, slice, tag, t->slot * slice);
			ret = api_copy(h->fd, 1, mine, t->buf, slice);
			s2 = atomic_load(&h->seq);
			if (s1 != s2) {
				atomic_fetch_add(&h->raced, 1);
				continue;
			}
			if (ret) {
				hammer_fail(h, "write failed with no remap", ret, s1);
				continue;
			}
			/* No remap since before the write: the CPU must see it. */
			if (pattern_check(mine, slice, tag, t->slot * slice) != PATTERN_OK ||
			    atomic_load(&h->seq) != s1) {
				if (atomic_load(&h->seq) != s1) {
					atomic_fetch_add(&h->raced, 1);
					continue;
				}
				hammer_fail(h, "written bytes not where the CPU looks", t->slot, s1);
				continue;
			}
		} else {
			ret = api_copy(h->fd, 0, h->a + half, t->buf, half);
			s2 = atomic_load(&h->seq);
			if (s1 != s2) {
				atomic_fetch_add(&h->raced, 1);
				continue;
			}
			if (ret) {
				hammer_fail(h, "read failed with no remap", ret, s1);
				continue;
			}
			if (pattern_check(t->buf, half, 1000 + s1 / 2, half) != PATTERN_OK) {
				hammer_fail(h, "read bytes differ from the generation's", s1,
					    (long)pattern_check(t->buf, half, 1000 + s1 / 2, half));
				continue;
			}
		}
		atomic_fetch_add(&h->checked, 1);
	}
	return NULL;
}

TEST_F(api, copies_on_all_cpus_race_remaps)
{
	size_t len = HAMMER_PAGES * PAGE, half = len / 2;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	struct hammer_thread th[HAMMER_MAX_THREADS];
	pthread_t tid[HAMMER_MAX_THREADS];
	struct hammer h = { .fd = self->fd };
	int n = 0, nwriters;
	time_t end;

	if (ncpu < 2)
		SKIP(return, "needs two CPUs");
	if (ncpu > HAMMER_MAX_THREADS / 2)
		ncpu = HAMMER_MAX_THREADS / 2;
	nwriters = ncpu;
	h.a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, h.a);
	pattern_fill(h.a + half, half, 1000, half);
	ASSERT_EQ(0, api_create(self->fd, h.a, len, RW));
	/* A writer and a reader per CPU. */
	for (int cpu = 0; cpu < ncpu; cpu++) {
		for (int w = 0; w < 2; w++) {
			th[n] = (struct hammer_thread){
				.h = &h, .cpu = cpu, .writer = w, .slot = cpu, .nslots = nwriters,
				.buf = self->buf + n * (len / 2),
			};
			ASSERT_EQ(0, pthread_create(&tid[n], NULL, hammer_copier, &th[n]));
			n++;
		}
	}
	/*
	 * At least HAMMER_SECONDS, and until enough copies were checked and enough remaps done
	 * (20 s more at most: a slow or loaded host gets the same amount of work, not less).
	 */
	end = time(NULL) + HAMMER_SECONDS;
	while (time(NULL) < end ||
	       ((atomic_load(&h.checked) < 10ul * n || atomic_load(&h.raced) < 1 ||
		 atomic_load(&h.remaps) < 10) &&
		time(NULL) < end + 20)) {
		unsigned long gen;

		atomic_fetch_add(&h.seq, 1);
		gen = (atomic_load(&h.seq) + 1) / 2;
		if (gen % 3 == 2) {
			/* Release the pages: the next copies must see zeros, then the fill. */
			ASSERT_EQ(0, madvise(h.a, len, MADV_DONTNEED));
		} else {
			ASSERT_EQ(h.a, mmap(h.a, len, PROT_READ | PROT_WRITE,
					    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
		}
		pattern_fill(h.a + half, half, 1000 + gen, half);
		atomic_fetch_add(&h.seq, 1);
		atomic_fetch_add(&h.remaps, 1);
		usleep(2000);
	}
	atomic_store(&h.stop, 1);
	for (int i = 0; i < n; i++)
		pthread_join(tid[i], NULL);
	unsigned long checked = atomic_load(&h.checked), raced = atomic_load(&h.raced);
	unsigned long remaps = atomic_load(&h.remaps), bad = atomic_load(&h.bad);

	TH_LOG("%lu copies checked, %lu raced a remap, %lu remaps, %d threads on %ld CPUs",
	       checked, raced, remaps, n, ncpu);
	EXPECT_EQ(0ul, bad) TH_LOG("first failure: %s", h.why);
	/* The copies really overlapped the remaps, and enough were checked. */
	EXPECT_LE(10ul, remaps);
	EXPECT_LE(1ul, raced);
	EXPECT_LE(10ul * n, checked);
	ASSERT_EQ(0, ioctl(self->fd, VAMR_API_TEST_DESTROY));
	munmap(h.a, len);
}

/* VAMR_IOC_DEVICE lists the devices drivers announced, this module's among them. */
TEST_F(api, device_listed_before_registration)
{
	struct vamr_device_info d = { 0 };
	int vfd = vamr_open(), found = -1;
	struct vamr_query q = { 0 };

	ASSERT_LE(0, vfd);
	ASSERT_EQ(0, vamr_ioctl(vfd, VAMR_IOC_QUERY, &q));
	ASSERT_NE(0ull, q.features & VAMR_FEATURE_DEVICES);
	for (d.pos = 0; d.pos < 64; d.pos++) {
		struct vamr_device_info e = { .pos = d.pos };
		int ret = vamr_ioctl(vfd, VAMR_IOC_DEVICE, &e);

		if (ret == -ENOENT)
			break;
		ASSERT_EQ(0, ret);
		EXPECT_EQ(d.pos, e.pos);
		EXPECT_EQ(0u, e.reserved);
		EXPECT_EQ(0, e.name[VAMR_DEVICE_NAME_MAX - 1]);
		if (e.ib_index == VAMR_API_TEST_IB_INDEX) {
			found = d.pos;
			EXPECT_STREQ("vamr_api_test", e.name);
			EXPECT_EQ(VAMR_API_TEST_ACCESS_VA, e.access_va);
		}
	}
	EXPECT_LE(0, found);
	/* Past the end, and bad flags. */
	d = (struct vamr_device_info){ .pos = 1000 };
	EXPECT_EQ(-ENOENT, vamr_ioctl(vfd, VAMR_IOC_DEVICE, &d));
	d = (struct vamr_device_info){ .pos = 0, .flags = 1 };
	EXPECT_EQ(-EINVAL, vamr_ioctl(vfd, VAMR_IOC_DEVICE, &d));
	close(vfd);
}

/* Bad input gets the documented errno; a region left at close is released. */
TEST_F(api, bad_input_and_close)
{
	uint8_t *a = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	long vmpin = vamr_vmpin_kb();
	int fd2;

	ASSERT_NE(MAP_FAILED, a);
	EXPECT_EQ(-EINVAL, api_create(self->fd, a, 0, RW));
	EXPECT_EQ(-EINVAL, api_create(self->fd, (void *)-4096l, 8192, RW));
	EXPECT_EQ(-EFAULT, api_create(self->fd, (void *)0xffff888000000000ul, PAGE, RW));
	EXPECT_EQ(-EINVAL, api_create(self->fd, a, PAGE, 1u << 9));
	ASSERT_EQ(0, api_create(self->fd, a, PAGE, VAMR_ACCESS_READ));
	EXPECT_EQ(-EACCES, api_copy(self->fd, 1, a, self->buf, 8));
	EXPECT_EQ(-EINVAL, api_copy(self->fd, 0, a + PAGE - 4, self->buf, 8));
	EXPECT_EQ(0, ioctl(self->fd, VAMR_API_TEST_DESTROY));

	fd2 = open("/dev/vamr_api_test", O_RDWR);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, api_create(fd2, a, PAGE, RW));
	EXPECT_EQ(vmpin + 4, vamr_vmpin_kb());
	ASSERT_EQ(0, close(fd2));
	EXPECT_EQ(vmpin, vamr_vmpin_kb());
	munmap(a, PAGE);
}

TEST_HARNESS_MAIN
