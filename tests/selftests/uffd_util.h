/* SPDX-License-Identifier: GPL-2.0 */
/*
 * userfaultfd helpers shared by the selftests: a MISSING-mode userfaultfd over
 * a range, and a handler thread that fills each faulting page with a
 * position-dependent pattern after a delay.
 */
#ifndef VAMR_SELFTEST_UFFD_UTIL_H
#define VAMR_SELFTEST_UFFD_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pattern.h"

#ifndef PAGE
#define PAGE 4096ul
#endif

/* A userfaultfd over [addr, addr + len) in `mode` with `features`; the fd or -errno. */
static inline int uffd_open(void *addr, size_t len, uint64_t mode, uint64_t features)
{
	struct uffdio_api api = { .api = UFFD_API, .features = features };
	struct uffdio_register reg = {
		.range = { .start = (uintptr_t)addr, .len = len }, .mode = mode,
	};
	int fd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);

	if (fd < 0)
		return -errno;
	if (ioctl(fd, UFFDIO_API, &api) || ioctl(fd, UFFDIO_REGISTER, &reg)) {
		int e = -errno;

		close(fd);
		return e;
	}
	return fd;
}

/* A MISSING-mode handler that notes each fault at once and answers it after delay_ms. */
struct late_handler {
	int uffd;
	int delay_ms;
	int seen;		/* faults read from the uffd */
	int answered;		/* faults answered (UFFDIO_COPY issued) */
	int stop;
	uint64_t seed;
	uint8_t *base;
	pthread_t thread;
	uint8_t page[PAGE] __attribute__((aligned(4096)));
};

static inline void *late_handler_main(void *arg)
{
	struct late_handler *h = arg;
	struct pollfd pfd = { .fd = h->uffd, .events = POLLIN };
	struct uffd_msg msg;

	while (!__atomic_load_n(&h->stop, __ATOMIC_ACQUIRE)) {
		if (poll(&pfd, 1, 20) <= 0)
			continue;
		if (read(h->uffd, &msg, sizeof(msg)) != sizeof(msg))
			continue;
		if (msg.event != UFFD_EVENT_PAGEFAULT)
			continue;
		__atomic_add_fetch(&h->seen, 1, __ATOMIC_RELEASE);
		uint64_t addr = msg.arg.pagefault.address & ~(PAGE - 1);
		struct uffdio_copy c = { .dst = addr, .src = (uintptr_t)h->page, .len = PAGE };

		/* Sleep in small steps so that stop ends the thread promptly, unanswered. */
		for (int i = 0; i < h->delay_ms / 10 && !__atomic_load_n(&h->stop, __ATOMIC_ACQUIRE); i++)
			usleep(10 * 1000);
		if (__atomic_load_n(&h->stop, __ATOMIC_ACQUIRE))
			break;
		pattern_fill(h->page, PAGE, h->seed, addr - (uintptr_t)h->base);
		__atomic_add_fetch(&h->answered, 1, __ATOMIC_RELEASE);
		ioctl(h->uffd, UFFDIO_COPY, &c);
	}
	return NULL;
}

/* A MISSING-mode userfaultfd over [addr, addr + len); the fd or -errno. */
static inline int uffd_missing(void *addr, size_t len)
{
	return uffd_open(addr, len, UFFDIO_REGISTER_MODE_MISSING, 0);
}

/* Registered memory made a trap: MISSING userfaultfd, pages dropped, nobody answers. */
struct trap {
	int uffd;
	struct late_handler h;
};

static inline int trap_arm(struct trap *t, uint8_t *a, size_t len)
{
	t->uffd = uffd_missing(a, len);
	if (t->uffd < 0)
		return t->uffd;
	if (madvise(a, len, MADV_DONTNEED))
		return -errno;
	t->h.uffd = t->uffd;
	t->h.delay_ms = 1 << 30;
	t->h.base = a;
	return -pthread_create(&t->h.thread, NULL, late_handler_main, &t->h);
}

static inline void trap_release(struct trap *t)
{
	__atomic_store_n(&t->h.stop, 1, __ATOMIC_RELEASE);
	pthread_join(t->h.thread, NULL);
	close(t->uffd);
}

#endif /* VAMR_SELFTEST_UFFD_UTIL_H */
