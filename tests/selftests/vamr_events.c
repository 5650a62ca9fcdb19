// SPDX-License-Identifier: GPL-2.0
/*
 * The events channel: one record per invalidation that overlaps a region,
 * read()/poll() on the file from VAMR_IOC_EVENTS_OPEN, and overflow reports.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "scm_util.h"
#include "vamr_lib.h"

#define PAGE 4096ul
#define RW (VAMR_ACCESS_READ | VAMR_ACCESS_WRITE)
#define REC sizeof(struct vamr_event)

static int events_open(int fd, uint32_t flags)
{
	struct vamr_events_open o = { .flags = flags };
	int ret = vamr_ioctl(fd, VAMR_IOC_EVENTS_OPEN, &o);

	return ret ? ret : o.fd;
}

FIXTURE(events)
{
	int fd, efd;
	uint8_t *a;
	size_t len;
	uint32_t h;
};

FIXTURE_SETUP(events)
{
	self->fd = vamr_open();
	if (self->fd == -ENOENT)
		SKIP(return, "/dev/vamr not present");
	ASSERT_LE(0, self->fd);
	self->len = 8 * PAGE;
	self->a = mmap(NULL, self->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, self->a);
	memset(self->a, 0x5a, self->len);
	ASSERT_EQ(0, vamr_register(self->fd, self->a + 100, self->len - 200, RW, 0xc0ffee, &self->h));
	self->efd = events_open(self->fd, VAMR_EVENTS_NONBLOCK | VAMR_EVENTS_CLOEXEC);
	ASSERT_LE(0, self->efd);
}

FIXTURE_TEARDOWN(events)
{
	if (self->fd >= 0) {
		close(self->efd);
		close(self->fd);
		munmap(self->a, self->len);
	}
}

/* Nothing happened: nothing to read, and poll() says so. */
TEST_F(events, empty_queue)
{
	struct vamr_event ev;
	struct pollfd p = { .fd = self->efd, .events = POLLIN };

	EXPECT_EQ(-1, read(self->efd, &ev, sizeof(ev)));
	EXPECT_EQ(EAGAIN, errno);
	EXPECT_EQ(0, poll(&p, 1, 0));
	/* A buffer smaller than one record is refused. */
	EXPECT_EQ(-1, read(self->efd, &ev, sizeof(ev) - 1));
	EXPECT_EQ(EINVAL, errno);
}

/* DONTNEED and munmap of parts of the region: one record each, clipped to the region. */
TEST_F(events, one_record_per_invalidation)
{
	struct vamr_event ev[8];
	struct pollfd p = { .fd = self->efd, .events = POLLIN };
	uint8_t *other;

	/* Mapped now, before the region's tail is unmapped, so that it cannot land there. */
	other = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, other);
	ASSERT_EQ(0, madvise(self->a + 2 * PAGE, 2 * PAGE, MADV_DONTNEED));
	ASSERT_EQ(1, poll(&p, 1, 0));
	ASSERT_EQ(1, vamr_drain_events(self->efd, ev, 8));
	EXPECT_EQ((uintptr_t)self->a + 2 * PAGE, ev[0].addr);
	EXPECT_EQ(2 * PAGE, ev[0].len);
	EXPECT_EQ(0xc0ffeeu, ev[0].cookie);
	EXPECT_EQ(self->h, ev[0].handle);
	EXPECT_EQ((uint32_t)VAMR_EVENT_CLEAR, ev[0].kind);
	EXPECT_EQ(1u, ev[0].generation);

	/* The tail of the region: the record starts at the page, ends at the region's end. */
	ASSERT_EQ(0, munmap(self->a + 6 * PAGE, 2 * PAGE));
	ASSERT_EQ(1, vamr_drain_events(self->efd, ev, 8));
	EXPECT_EQ((uintptr_t)self->a + 6 * PAGE, ev[0].addr);
	EXPECT_EQ(2 * PAGE - 100, ev[0].len);
	EXPECT_EQ((uint32_t)VAMR_EVENT_UNMAP, ev[0].kind);
	EXPECT_EQ(2u, ev[0].generation);

	/* An invalidation elsewhere queues nothing. */
	other[0] = 1;
	ASSERT_EQ(0, munmap(other, PAGE));
	EXPECT_EQ(0, vamr_drain_events(self->efd, ev, 8));
	EXPECT_EQ(0, poll(&p, 1, 0));
}

/* Two regions over the same bytes: one record each, with their own cookie. */
TEST_F(events, overlapping_regions)
{
	struct vamr_event ev[8];
	uint32_t h2;
	int n;

	ASSERT_EQ(0, vamr_register(self->fd, self->a + 3 * PAGE, PAGE, RW, 0xbeef, &h2));
	ASSERT_EQ(0, madvise(self->a + 3 * PAGE, PAGE, MADV_DONTNEED));
	n = vamr_drain_events(self->efd, ev, 8);
	ASSERT_EQ(2, n);
	EXPECT_NE(ev[0].cookie, ev[1].cookie);
	EXPECT_TRUE((ev[0].cookie == 0xc0ffee && ev[1].cookie == 0xbeef) ||
		    (ev[0].cookie == 0xbeef && ev[1].cookie == 0xc0ffee));
	for (int i = 0; i < 2; i++) {
		EXPECT_EQ((uintptr_t)self->a + 3 * PAGE, ev[i].addr);
		EXPECT_EQ(PAGE, ev[i].len);
		EXPECT_EQ((uint32_t)VAMR_EVENT_CLEAR, ev[i].kind);
		EXPECT_EQ(ev[i].cookie == 0xbeef ? h2 : self->h, ev[i].handle);
		EXPECT_EQ((uint64_t)i + 1, ev[i].generation);
	}
	ASSERT_EQ(0, vamr_unregister(self->fd, h2));
}

struct trigger_arg {
	uint8_t *addr;
	int fired;	/* atomic: set right before the invalidation */
	int ret;
};

/* Wait a little (so that the reader is asleep in read()), then invalidate. */
static void *delayed_invalidation(void *p)
{
	struct trigger_arg *t = p;

	usleep(200000);
	__atomic_store_n(&t->fired, 1, __ATOMIC_RELEASE);
	t->ret = madvise(t->addr, PAGE, MADV_DONTNEED);
	return NULL;
}

/*
 * A blocking read() sleeps until an invalidation queues a record: it may
 * return only after the other thread started that invalidation (a read()
 * that returned at once would see `fired` still 0), with that record.
 */
TEST_F(events, blocking_read_wakes)
{
	struct trigger_arg t = { .addr = self->a + 4 * PAGE };
	struct vamr_event ev;
	pthread_t thr;
	ssize_t ret;
	int efd, fired;

	efd = events_open(self->fd, 0);
	ASSERT_LE(0, efd);
	ASSERT_EQ(0, pthread_create(&thr, NULL, delayed_invalidation, &t));
	ret = read(efd, &ev, sizeof(ev));
	fired = __atomic_load_n(&t.fired, __ATOMIC_ACQUIRE);
	ASSERT_EQ(0, pthread_join(thr, NULL));
	ASSERT_EQ(0, t.ret);
	ASSERT_EQ((ssize_t)sizeof(ev), ret) TH_LOG("read: %s", ret < 0 ? strerror(errno) : "short");
	EXPECT_EQ(1, fired) TH_LOG("read() returned before the invalidation: it did not block");
	EXPECT_EQ((uintptr_t)self->a + 4 * PAGE, ev.addr);
	EXPECT_EQ(PAGE, ev.len);
	EXPECT_EQ((uint32_t)VAMR_EVENT_CLEAR, ev.kind);
	EXPECT_EQ(1u, ev.generation);
	close(efd);
}

/*
 * More invalidations than the queue holds: the documented 512 records
 * (Documentation/vamr.rst), then one OVERFLOW record counting the rest.
 */
#define QUEUE_RECORDS 512

TEST_F(events, overflow_is_reported)
{
	static struct vamr_event ev[1024];
	int i, n, total = 700;

	for (i = 0; i < total; i++)
		ASSERT_EQ(0, madvise(self->a + PAGE, PAGE, MADV_DONTNEED));
	n = vamr_drain_events(self->efd, ev, 1024);
	ASSERT_EQ(QUEUE_RECORDS + 1, n);
	for (i = 0; i < QUEUE_RECORDS; i++) {
		EXPECT_EQ((uint64_t)i + 1, ev[i].generation);
		EXPECT_EQ((uint32_t)VAMR_EVENT_CLEAR, ev[i].kind);
		EXPECT_EQ((uintptr_t)self->a + PAGE, ev[i].addr);
	}
	EXPECT_EQ(VAMR_EVENT_OVERFLOW, ev[QUEUE_RECORDS].kind);
	EXPECT_EQ((uint64_t)total - QUEUE_RECORDS, ev[QUEUE_RECORDS].len);
	EXPECT_EQ((uint64_t)total, ev[QUEUE_RECORDS].generation);
	EXPECT_EQ(0u, ev[QUEUE_RECORDS].handle);
	EXPECT_EQ(0u, ev[QUEUE_RECORDS].cookie);
	/* The queue is empty again and records flow. */
	ASSERT_EQ(0, madvise(self->a + PAGE, PAGE, MADV_DONTNEED));
	ASSERT_EQ(1, vamr_drain_events(self->efd, ev, 8));
	EXPECT_EQ((uint64_t)total + 1, ev[0].generation);
}

/*
 * Invalidations during registration (the FOLL_WRITE pin breaks COW of the
 * shared zero page under read-only-touched memory) carry the new handle.
 */
TEST_F(events, registration_events_carry_the_handle)
{
	struct vamr_event ev[64];
	volatile uint8_t sink = 0;
	uint8_t *b = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint32_t h2;
	int i, n;

	ASSERT_NE(MAP_FAILED, b);
	for (i = 0; i < 4; i++)
		sink += b[i * PAGE];	/* maps the zero page */
	(void)sink;
	ASSERT_EQ(0, vamr_register(self->fd, b, 4 * PAGE, RW, 0x5151, &h2));
	ASSERT_NE(self->h, h2);
	n = vamr_drain_events(self->efd, ev, 64);
	ASSERT_LE(1, n) TH_LOG("no invalidation during the COW-breaking registration");
	for (i = 0; i < n; i++) {
		EXPECT_EQ(h2, ev[i].handle);
		EXPECT_EQ(0x5151u, ev[i].cookie);
	}
	ASSERT_EQ(0, vamr_unregister(self->fd, h2));
	munmap(b, 4 * PAGE);
}

/* The events file outlives the /dev/vamr file and vice versa. */
TEST_F(events, lifetimes)
{
	struct vamr_event ev[4];
	int fd2 = vamr_open(), efd2;
	uint32_t h;

	ASSERT_LE(0, fd2);
	efd2 = events_open(fd2, VAMR_EVENTS_NONBLOCK);
	ASSERT_LE(0, efd2);
	ASSERT_EQ(0, vamr_register(fd2, self->a, PAGE, RW, 7, &h));
	ASSERT_EQ(0, madvise(self->a, PAGE, MADV_DONTNEED));
	ASSERT_EQ(0, close(fd2));
	/* The region is gone with its file, the queued record is still there. */
	ASSERT_EQ(1, vamr_drain_events(efd2, ev, 4));
	EXPECT_EQ(7u, ev[0].cookie);
	ASSERT_EQ(0, close(efd2));
	/* Unknown flags are refused. */
	EXPECT_EQ(-EINVAL, events_open(self->fd, 1u << 5));
}

/*
 * Short reads. A second region of 12 pages, b, gets one DONTNEED per page,
 * i = 0..n-1: record i (0-based) has address b + i * PAGE, length PAGE, the
 * region's cookie and handle, and generation gen0 + i.
 */
FIXTURE(shortread)
{
	int fd, efd;
	uint8_t *b;
	uint32_t h;
	uint8_t *buf;		/* two pages, the second PROT_NONE */
	uint8_t *guard;		/* = buf + PAGE */
};

#define SR_PAGES 12
#define SR_COOKIE 0x5eadull

FIXTURE_SETUP(shortread)
{
	self->fd = vamr_open();
	if (self->fd == -ENOENT)
		SKIP(return, "/dev/vamr not present");
	ASSERT_LE(0, self->fd);
	self->b = mmap(NULL, SR_PAGES * PAGE, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, self->b);
	memset(self->b, 0x33, SR_PAGES * PAGE);
	ASSERT_EQ(0, vamr_register(self->fd, self->b, SR_PAGES * PAGE, RW, SR_COOKIE, &self->h));
	self->efd = events_open(self->fd, VAMR_EVENTS_NONBLOCK | VAMR_EVENTS_CLOEXEC);
	ASSERT_LE(0, self->efd);
	self->buf = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			 -1, 0);
	ASSERT_NE(MAP_FAILED, self->buf);
	self->guard = self->buf + PAGE;
	ASSERT_EQ(0, mprotect(self->guard, PAGE, PROT_NONE));
}

FIXTURE_TEARDOWN(shortread)
{
	if (self->fd >= 0) {
		close(self->efd);
		close(self->fd);
		munmap(self->b, SR_PAGES * PAGE);
		munmap(self->buf, 2 * PAGE);
	}
}

/* n DONTNEEDs of pages 0..n-1 of b. */
static int invalidate_pages(uint8_t *b, int n)
{
	for (int i = 0; i < n; i++)
		if (madvise(b + i * PAGE, PAGE, MADV_DONTNEED))
			return -errno;
	return 0;
}

/* Whether ev is record i (0-based, generation gen0 + i) of invalidate_pages(). */
static int is_record(const struct vamr_event *ev, const uint8_t *b, uint32_t h, int i,
		     uint64_t gen0)
{
	if (ev->addr == (uintptr_t)(b + i * PAGE) && ev->len == PAGE && ev->cookie == SR_COOKIE &&
	    ev->handle == h && ev->kind == VAMR_EVENT_CLEAR && ev->generation == gen0 + i)
		return 1;
	fprintf(stderr, "# record %d: addr +%#llx len %llu cookie %#llx handle %u kind %#x gen %llu\n",
		i, (unsigned long long)(ev->addr - (uintptr_t)b), (unsigned long long)ev->len,
		(unsigned long long)ev->cookie, ev->handle, ev->kind,
		(unsigned long long)ev->generation);
	return 0;
}

/*
 * The case: room for 3 records before a PROT_NONE page, 10 queued,
 * a read of 10: 120 bytes; nothing lost, no OVERFLOW: the next read gives
 * records 4..10 in order.
 */
TEST_F(shortread, prot_none_after_three_records)
{
	struct vamr_event *at = (struct vamr_event *)(self->guard - 3 * REC), ev[16];
	struct pollfd p = { .fd = self->efd, .events = POLLIN };

	ASSERT_EQ(0, invalidate_pages(self->b, 10));
	ASSERT_EQ((ssize_t)(3 * REC), read(self->efd, at, 10 * REC));
	for (int i = 0; i < 3; i++)
		EXPECT_TRUE(is_record(&at[i], self->b, self->h, i, 1));
	ASSERT_EQ(1, poll(&p, 1, 0));
	EXPECT_EQ(POLLIN, p.revents);
	ASSERT_EQ(7, vamr_drain_events(self->efd, ev, 16));
	for (int i = 0; i < 7; i++) {
		EXPECT_TRUE(is_record(&ev[i], self->b, self->h, 3 + i, 1)) TH_LOG("at %d", i);
	}
	EXPECT_EQ(0, poll(&p, 1, 0));
}

/*
 * A fault inside a record (2.5 records of room) returns the 2 whole ones;
 * a fault at the first byte is EFAULT and removes nothing.
 */
TEST_F(shortread, fault_inside_a_record_and_at_the_start)
{
	struct vamr_event *at = (struct vamr_event *)(self->guard - 2 * REC - REC / 2), ev[16];

	ASSERT_EQ(0, invalidate_pages(self->b, 6));
	/* Nothing fits: EFAULT, twice, the queue untouched. */
	EXPECT_EQ(-1, read(self->efd, self->guard, 4 * REC));
	EXPECT_EQ(EFAULT, errno);
	EXPECT_EQ(-1, read(self->efd, self->guard - REC / 2, 4 * REC));
	EXPECT_EQ(EFAULT, errno);
	ASSERT_EQ((ssize_t)(2 * REC), read(self->efd, at, 6 * REC));
	EXPECT_TRUE(is_record(&at[0], self->b, self->h, 0, 1));
	EXPECT_TRUE(is_record(&at[1], self->b, self->h, 1, 1));
	/* One record of room exactly. */
	at = (struct vamr_event *)(self->guard - REC);
	ASSERT_EQ((ssize_t)REC, read(self->efd, at, 6 * REC));
	EXPECT_TRUE(is_record(at, self->b, self->h, 2, 1));
	ASSERT_EQ(3, vamr_drain_events(self->efd, ev, 16));
	for (int i = 0; i < 3; i++) {
		EXPECT_TRUE(is_record(&ev[i], self->b, self->h, 3 + i, 1)) TH_LOG("at %d", i);
	}
}

/*
 * Buffer sizes: below one record EINVAL (nothing removed); one record; one
 * and a part (the part stays unused); exactly the queued count; more than
 * queued (only what is queued).
 */
TEST_F(shortread, sizes)
{
	struct vamr_event ev[16];
	uint8_t raw[3 * REC];

	ASSERT_EQ(0, invalidate_pages(self->b, 8));
	EXPECT_EQ(-1, read(self->efd, ev, 1));
	EXPECT_EQ(EINVAL, errno);
	EXPECT_EQ(-1, read(self->efd, ev, REC - 1));
	EXPECT_EQ(EINVAL, errno);
	ASSERT_EQ((ssize_t)REC, read(self->efd, ev, REC));
	EXPECT_TRUE(is_record(&ev[0], self->b, self->h, 0, 1));
	memset(raw, 0xee, sizeof(raw));
	ASSERT_EQ((ssize_t)REC, read(self->efd, raw, 2 * REC - 1));
	memcpy(ev, raw, REC);
	EXPECT_TRUE(is_record(&ev[0], self->b, self->h, 1, 1));
	for (size_t i = REC; i < sizeof(raw); i++) {
		ASSERT_EQ(0xee, raw[i]) TH_LOG("byte %zu written past the record", i);
	}
	ASSERT_EQ((ssize_t)(2 * REC), read(self->efd, ev, 2 * REC + REC / 2));
	EXPECT_TRUE(is_record(&ev[0], self->b, self->h, 2, 1));
	EXPECT_TRUE(is_record(&ev[1], self->b, self->h, 3, 1));
	/* Four left: exactly four, then a larger buffer gets nothing more. */
	ASSERT_EQ((ssize_t)(4 * REC), read(self->efd, ev, 4 * REC));
	for (int i = 0; i < 4; i++)
		EXPECT_TRUE(is_record(&ev[i], self->b, self->h, 4 + i, 1));
	EXPECT_EQ(-1, read(self->efd, ev, 16 * REC));
	EXPECT_EQ(EAGAIN, errno);
	ASSERT_EQ(0, invalidate_pages(self->b, 2));
	ASSERT_EQ((ssize_t)(2 * REC), read(self->efd, ev, 16 * REC));
	EXPECT_TRUE(is_record(&ev[0], self->b, self->h, 0, 9));
	EXPECT_TRUE(is_record(&ev[1], self->b, self->h, 1, 9));
}

/*
 * A ring of 4, 7 invalidations: 3 lost. Short reads, and a fault where the
 * OVERFLOW record would go, deliver every record once and the loss count
 * exactly, after the records; losses while records are still queued add up.
 */
TEST_F(shortread, overflow_counts)
{
	struct vamr_event ev[16], *at;
	uint32_t size = 0;
	int efd;

	efd = vamr_events_open_ex(self->fd, VAMR_EVENTS_NONBLOCK, 4, &size);
	ASSERT_LE(0, efd);
	ASSERT_EQ(4u, size);
	ASSERT_EQ(0, invalidate_pages(self->b, 7));
	ASSERT_EQ((ssize_t)(2 * REC), read(efd, ev, 2 * REC));
	EXPECT_TRUE(is_record(&ev[0], self->b, self->h, 0, 1));
	EXPECT_TRUE(is_record(&ev[1], self->b, self->h, 1, 1));
	/* Room for the two records left but not the OVERFLOW behind them. */
	at = (struct vamr_event *)(self->guard - 2 * REC);
	ASSERT_EQ((ssize_t)(2 * REC), read(efd, at, 8 * REC));
	EXPECT_TRUE(is_record(&at[0], self->b, self->h, 2, 1));
	EXPECT_TRUE(is_record(&at[1], self->b, self->h, 3, 1));
	/* The report is still there, and faults leave it there. */
	EXPECT_EQ(-1, read(efd, self->guard, REC));
	EXPECT_EQ(EFAULT, errno);
	ASSERT_EQ(1, vamr_drain_events(efd, ev, 16));
	EXPECT_EQ(VAMR_EVENT_OVERFLOW, ev[0].kind);
	EXPECT_EQ(3u, ev[0].len);
	EXPECT_EQ(7u, ev[0].generation);
	EXPECT_EQ(0u, ev[0].handle);
	EXPECT_EQ(0u, ev[0].cookie);

	/* 6 more: 4 queued, 2 lost; read 1; 3 more: 1 queued, 2 lost: 4 lost in all. */
	ASSERT_EQ(0, invalidate_pages(self->b, 6));
	ASSERT_EQ((ssize_t)REC, read(efd, ev, REC));
	EXPECT_TRUE(is_record(&ev[0], self->b, self->h, 0, 8));
	ASSERT_EQ(0, invalidate_pages(self->b + 6 * PAGE, 3));
	ASSERT_EQ(5, vamr_drain_events(efd, ev, 16));
	for (int i = 0; i < 3; i++)
		EXPECT_TRUE(is_record(&ev[i], self->b, self->h, 1 + i, 8));
	EXPECT_TRUE(is_record(&ev[3], self->b, self->h, 6, 8));
	EXPECT_EQ(VAMR_EVENT_OVERFLOW, ev[4].kind);
	EXPECT_EQ(4u, ev[4].len);
	EXPECT_EQ(16u, ev[4].generation);
	EXPECT_EQ(0, vamr_drain_events(efd, ev, 16));
	close(efd);
}

/*
 * Readers racing on one events file, with short and faulting reads, while
 * 3000 invalidations come: every generation is delivered exactly once, in
 * increasing order per reader, and nothing is reported lost (the ring is
 * larger than the count). Closing the /dev/vamr file then ends every
 * blocked reader with 0.
 */
#define RACE_N 3000
#define RACE_READERS 4

struct race {
	int efd;
	uint8_t *b;
	uint8_t seen[RACE_N + 1];	/* atomic */
	int overflow, bad, order;	/* atomic */
	long got;			/* atomic */
};

struct racer {
	struct race *r;
	uint8_t *buf;			/* two pages, the second PROT_NONE */
	int id;
	ssize_t last;
	int err;
};

static void *race_reader(void *arg)
{
	struct racer *me = arg;
	struct race *r = me->r;
	struct vamr_event own[8], *ev;
	uint64_t prev = 0;
	unsigned int k = me->id;

	for (;;) {
		size_t cnt = 1 + (k = k * 1103515245 + 12345) % 7;
		ssize_t n;

		/* One read in four: room for 2 records before the PROT_NONE page. */
		ev = k % 4 ? own : (struct vamr_event *)(me->buf + PAGE - 2 * REC);
		n = read(r->efd, ev, cnt * REC);
		if (n <= 0) {
			/* 0 at the end; an error (EFAULT: the first record always fits) fails. */
			me->last = n;
			me->err = n < 0 ? errno : 0;
			return NULL;
		}
		if (n % REC) {
			__atomic_add_fetch(&r->bad, 1, __ATOMIC_RELAXED);
			continue;
		}
		for (ssize_t i = 0; i < n / (ssize_t)REC; i++) {
			uint64_t g = ev[i].generation;

			if (ev[i].kind == VAMR_EVENT_OVERFLOW) {
				__atomic_add_fetch(&r->overflow, 1, __ATOMIC_RELAXED);
				continue;
			}
			if (g <= prev)
				__atomic_add_fetch(&r->order, 1, __ATOMIC_RELAXED);
			prev = g;
			if (g < 1 || g > RACE_N || ev[i].kind != VAMR_EVENT_CLEAR)
				__atomic_add_fetch(&r->bad, 1, __ATOMIC_RELAXED);
			else
				__atomic_add_fetch(&r->seen[g], 1, __ATOMIC_RELAXED);
			__atomic_add_fetch(&r->got, 1, __ATOMIC_RELAXED);
		}
	}
}

TEST(racing_readers_deliver_each_record_once)
{
	static struct race r;
	struct racer me[RACE_READERS];
	pthread_t t[RACE_READERS];
	uint32_t size = 0, h;
	int fd = vamr_open(), twice = 0, missing = 0;

	if (fd == -ENOENT)
		SKIP(return, "/dev/vamr not present");
	ASSERT_LE(0, fd);
	r.b = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, r.b);
	memset(r.b, 1, 4 * PAGE);
	ASSERT_EQ(0, vamr_register(fd, r.b, 4 * PAGE, RW, 1, &h));
	r.efd = vamr_events_open_ex(fd, 0, 4096, &size);
	ASSERT_LE(0, r.efd);
	ASSERT_EQ(4096u, size);
	for (int i = 0; i < RACE_READERS; i++) {
		me[i] = (struct racer){ .r = &r, .id = i + 1 };
		me[i].buf = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		ASSERT_NE(MAP_FAILED, me[i].buf);
		ASSERT_EQ(0, mprotect(me[i].buf + PAGE, PAGE, PROT_NONE));
		ASSERT_EQ(0, pthread_create(&t[i], NULL, race_reader, &me[i]));
	}
	for (int i = 0; i < RACE_N; i++)
		ASSERT_EQ(0, madvise(r.b + (i % 4) * PAGE, PAGE, MADV_DONTNEED));
	/* Let the readers drain, then end them: close the /dev/vamr file. */
	for (int i = 0; i < 500 && __atomic_load_n(&r.got, __ATOMIC_RELAXED) < RACE_N; i++)
		usleep(10000);
	ASSERT_EQ(0, close(fd));
	for (int i = 0; i < RACE_READERS; i++) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 10;
		ASSERT_EQ(0, pthread_timedjoin_np(t[i], NULL, &ts)) TH_LOG("reader %d still blocked", i);
		EXPECT_EQ(0, me[i].last) TH_LOG("reader %d: errno %d", i, me[i].err);
		munmap(me[i].buf, 2 * PAGE);
	}
	for (int g = 1; g <= RACE_N; g++) {
		twice += r.seen[g] > 1;
		missing += r.seen[g] == 0;
	}
	TH_LOG("%ld records read by %d readers", r.got, RACE_READERS);
	EXPECT_EQ(RACE_N, r.got);
	EXPECT_EQ(0, twice);
	EXPECT_EQ(0, missing);
	EXPECT_EQ(0, r.overflow);
	EXPECT_EQ(0, r.bad);
	EXPECT_EQ(0, r.order);
	close(r.efd);
	munmap(r.b, 4 * PAGE);
}

/* ---- hang-up: the /dev/vamr file released, or its process gone ---- */

struct hup_reader {
	int efd;
	ssize_t got;
	int err;
	int done;		/* atomic */
	struct vamr_event ev[4];
};

static void *hup_read(void *arg)
{
	struct hup_reader *b = arg;

	b->got = read(b->efd, b->ev, sizeof(b->ev));
	b->err = b->got < 0 ? errno : 0;
	__atomic_store_n(&b->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

struct hup_poller {
	int efd;
	int ret;
	short revents;
	int done;		/* atomic */
};

static void *hup_poll(void *arg)
{
	struct hup_poller *p = arg;
	struct pollfd pfd = { .fd = p->efd, .events = POLLIN };

	p->ret = poll(&pfd, 1, -1);
	p->revents = pfd.revents;
	__atomic_store_n(&p->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static int join_within(pthread_t t, int seconds)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += seconds;
	return pthread_timedjoin_np(t, NULL, &ts);
}

/*
 * Closing the /dev/vamr file: poll() reports POLLHUP (with POLLIN while
 * records are queued), the queued records are still read, then read()
 * returns 0, blocking or not.
 */
TEST_F(events, pollhup_after_close)
{
	struct pollfd p = { .fd = self->efd, .events = POLLIN };
	struct vamr_event ev[4];
	int bfd = events_open(self->fd, 0);

	ASSERT_LE(0, bfd);
	EXPECT_EQ(0, poll(&p, 1, 0));
	ASSERT_EQ(0, madvise(self->a + PAGE, PAGE, MADV_DONTNEED));
	ASSERT_EQ(0, close(self->fd));
	self->fd = vamr_open();	/* for the teardown */
	ASSERT_EQ(1, poll(&p, 1, 0));
	EXPECT_EQ(POLLIN | POLLHUP, p.revents);
	ASSERT_EQ((ssize_t)sizeof(ev[0]), read(self->efd, ev, sizeof(ev)));
	EXPECT_EQ((uintptr_t)self->a + PAGE, ev[0].addr);
	EXPECT_EQ(1u, ev[0].generation);
	ASSERT_EQ(1, poll(&p, 1, 0));
	EXPECT_EQ(POLLHUP, p.revents);
	EXPECT_EQ(0, read(self->efd, ev, sizeof(ev)));
	EXPECT_EQ(0, read(bfd, ev, sizeof(ev)));
	/* Still a short buffer first. */
	EXPECT_EQ(-1, read(bfd, ev, 3));
	EXPECT_EQ(EINVAL, errno);
	close(bfd);
}

/*
 * A reader blocked in read() and a poller blocked in poll() on an empty
 * queue are both woken when the /dev/vamr file is closed: 0 and POLLHUP.
 */
TEST_F(events, close_wakes_blocked_reader_and_poller)
{
	struct hup_reader b = { .got = -2 };
	struct hup_poller q = { .ret = -2 };
	pthread_t tr, tp;

	b.efd = events_open(self->fd, 0);
	ASSERT_LE(0, b.efd);
	q.efd = b.efd;
	ASSERT_EQ(0, pthread_create(&tr, NULL, hup_read, &b));
	ASSERT_EQ(0, pthread_create(&tp, NULL, hup_poll, &q));
	usleep(300000);
	EXPECT_EQ(0, __atomic_load_n(&b.done, __ATOMIC_ACQUIRE)) TH_LOG("read() did not block");
	EXPECT_EQ(0, __atomic_load_n(&q.done, __ATOMIC_ACQUIRE)) TH_LOG("poll() did not block");
	ASSERT_EQ(0, close(self->fd));
	self->fd = vamr_open();	/* for the teardown */
	ASSERT_EQ(0, join_within(tr, 10)) TH_LOG("reader not woken by the close");
	ASSERT_EQ(0, join_within(tp, 10)) TH_LOG("poller not woken by the close");
	EXPECT_EQ(0, b.got) TH_LOG("read: %zd, errno %d", b.got, b.err);
	EXPECT_EQ(1, q.ret);
	EXPECT_EQ(POLLHUP, q.revents);
	close(b.efd);
}

/*
 * The owner exits while another process holds both its /dev/vamr file and
 * an events file: a reader blocked in that events file gets the region's
 * RELEASE record, then 0; poll() reports POLLHUP although the /dev/vamr file
 * is still open. A child without regions: POLLHUP and 0 at once after its
 * exit.
 */
TEST(owner_exit_hangs_up)
{
	int sv[2], go[2], cfd = -1, cefd = -1, status;
	struct hup_reader b = { .got = -2 };
	struct pollfd p = { .events = POLLIN };
	struct vamr_event ev[4];
	pthread_t tr;
	pid_t pid;

	if (access("/dev/vamr", F_OK))
		SKIP(return, "/dev/vamr not present");
	for (int regions = 1; regions >= 0; regions--) {
		ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
		ASSERT_EQ(0, pipe(go));
		pid = fork();
		ASSERT_LE(0, pid);
		if (!pid) {
			uint8_t *a = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE,
					  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			int fd = vamr_open(), efd;
			char c;
			uint32_t h;

			if (a == MAP_FAILED || fd < 0)
				_exit(1);
			memset(a, 7, 4 * PAGE);
			if (regions && vamr_register(fd, a + 100, 2 * PAGE, RW, 0xe1, &h))
				_exit(2);
			efd = events_open(fd, 0);
			if (efd < 0 || send_fds(sv[1], fd, efd))
				_exit(3);
			if (read(go[0], &c, 1) != 1)
				_exit(4);
			_exit(0);
		}
		close(sv[1]);
		close(go[0]);
		ASSERT_EQ(0, recv_fds(sv[0], &cfd, &cefd));
		p.fd = cefd;
		EXPECT_EQ(0, poll(&p, 1, 0)) TH_LOG("regions %d: revents %#x", regions, p.revents);
		b = (struct hup_reader){ .efd = cefd, .got = -2 };
		if (regions) {
			ASSERT_EQ(0, pthread_create(&tr, NULL, hup_read, &b));
			usleep(200000);
			EXPECT_EQ(0, __atomic_load_n(&b.done, __ATOMIC_ACQUIRE));
		}
		ASSERT_EQ(1, write(go[1], "x", 1));
		ASSERT_EQ(pid, waitpid(pid, &status, 0));
		ASSERT_EQ(0, WEXITSTATUS(status)) TH_LOG("regions %d", regions);
		if (regions) {
			ssize_t n;

			ASSERT_EQ(0, join_within(tr, 10)) TH_LOG("reader not woken by the exit");
			ASSERT_LE((ssize_t)REC, b.got) TH_LOG("errno %d", b.err);
			EXPECT_EQ((uint32_t)VAMR_EVENT_RELEASE, b.ev[0].kind);
			EXPECT_EQ(0xe1u, b.ev[0].cookie);
			EXPECT_EQ(2 * PAGE, b.ev[0].len);
			/* Then only what exit_mmap() did after the release (unmaps), then 0. */
			for (ssize_t i = 1; i < b.got / (ssize_t)REC; i++)
				EXPECT_EQ((uint32_t)VAMR_EVENT_UNMAP, b.ev[i].kind);
			for (int i = 0; i < 4 && (n = read(cefd, ev, sizeof(ev))) > 0; i++)
				for (ssize_t j = 0; j < n / (ssize_t)REC; j++)
					EXPECT_EQ((uint32_t)VAMR_EVENT_UNMAP, ev[j].kind);
		}
		ASSERT_EQ(1, poll(&p, 1, 0));
		EXPECT_EQ(POLLHUP, p.revents) TH_LOG("regions %d", regions);
		EXPECT_EQ(0, read(cefd, ev, sizeof(ev))) TH_LOG("regions %d", regions);
		close(cfd);
		close(cefd);
		close(sv[0]);
		close(go[1]);
	}
}

TEST_HARNESS_MAIN
