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
#include <unistd.h>

#include "kselftest_harness.h"
#include "vamr_lib.h"

#define PAGE 4096ul
#define RW (VAMR_ACCESS_READ | VAMR_ACCESS_WRITE)

static int events_open(int fd, uint32_t flags)
{
	struct vamr_events_open o = { .flags = flags };
	int ret = vamr_ioctl(fd, VAMR_IOC_EVENTS_OPEN, &o);

	return ret ? ret : o.fd;
}

/* Read every queued record (non-blocking file). Returns the count. */
static int drain(int efd, struct vamr_event *ev, int max)
{
	int n = 0;

	for (;;) {
		ssize_t r = read(efd, ev + n, (max - n) * sizeof(*ev));

		if (r < 0)
			return errno == EAGAIN ? n : -errno;
		n += r / sizeof(*ev);
		if (n == max)
			return n;
	}
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
	ASSERT_EQ(1, drain(self->efd, ev, 8));
	EXPECT_EQ((uintptr_t)self->a + 2 * PAGE, ev[0].addr);
	EXPECT_EQ(2 * PAGE, ev[0].len);
	EXPECT_EQ(0xc0ffeeu, ev[0].cookie);
	EXPECT_EQ(self->h, ev[0].handle);
	EXPECT_EQ((uint32_t)VAMR_EVENT_CLEAR, ev[0].kind);
	EXPECT_EQ(1u, ev[0].generation);

	/* The tail of the region: the record starts at the page, ends at the region's end. */
	ASSERT_EQ(0, munmap(self->a + 6 * PAGE, 2 * PAGE));
	ASSERT_EQ(1, drain(self->efd, ev, 8));
	EXPECT_EQ((uintptr_t)self->a + 6 * PAGE, ev[0].addr);
	EXPECT_EQ(2 * PAGE - 100, ev[0].len);
	EXPECT_EQ((uint32_t)VAMR_EVENT_UNMAP, ev[0].kind);
	EXPECT_EQ(2u, ev[0].generation);

	/* An invalidation elsewhere queues nothing. */
	other[0] = 1;
	ASSERT_EQ(0, munmap(other, PAGE));
	EXPECT_EQ(0, drain(self->efd, ev, 8));
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
	n = drain(self->efd, ev, 8);
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
	n = drain(self->efd, ev, 1024);
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
	ASSERT_EQ(1, drain(self->efd, ev, 8));
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
	n = drain(self->efd, ev, 64);
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
	ASSERT_EQ(1, drain(efd2, ev, 4));
	EXPECT_EQ(7u, ev[0].cookie);
	ASSERT_EQ(0, close(efd2));
	/* Unknown flags are refused. */
	EXPECT_EQ(-EINVAL, events_open(self->fd, 1u << 5));
}

TEST_HARNESS_MAIN
