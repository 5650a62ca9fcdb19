/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Small wrappers around the /dev/vamr ioctls for the selftests. Each returns
 * 0 or -errno (never exits), so tests can assert exact errors.
 */
#ifndef VAMR_SELFTEST_LIB_H
#define VAMR_SELFTEST_LIB_H

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "../../include/uapi/misc/vamr.h"

static inline int vamr_open(void)
{
	int fd = open("/dev/vamr", O_RDWR | O_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

static inline int vamr_ioctl(int fd, unsigned long cmd, void *arg)
{
	return ioctl(fd, cmd, arg) ? -errno : 0;
}

/* Register [addr, addr + len); *handle gets the handle. */
static inline int vamr_register(int fd, const void *addr, uint64_t len, uint32_t access,
				uint64_t cookie, uint32_t *handle)
{
	struct vamr_register r = {
		.addr = (uintptr_t)addr, .len = len, .cookie = cookie, .access = access,
	};
	int ret = vamr_ioctl(fd, VAMR_IOC_REGISTER, &r);

	if (!ret && handle)
		*handle = r.handle;
	return ret;
}

static inline int vamr_unregister(int fd, uint32_t handle)
{
	struct vamr_handle_arg a = { .handle = handle };

	return vamr_ioctl(fd, VAMR_IOC_UNREGISTER, &a);
}

/* Copy len bytes at VA addr of the region into buf, through the region's pins. */
static inline int vamr_read(int fd, uint32_t handle, const void *addr, void *buf, uint64_t len)
{
	struct vamr_access a = {
		.addr = (uintptr_t)addr, .len = len, .buf = (uintptr_t)buf,
		.handle = handle, .op = VAMR_ACCESS_OP_READ,
	};

	return vamr_ioctl(fd, VAMR_IOC_ACCESS, &a);
}

/* Copy len bytes from buf into the region at VA addr, through the region's pins. */
static inline int vamr_write(int fd, uint32_t handle, void *addr, const void *buf, uint64_t len)
{
	struct vamr_access a = {
		.addr = (uintptr_t)addr, .len = len, .buf = (uintptr_t)buf,
		.handle = handle, .op = VAMR_ACCESS_OP_WRITE,
	};

	return vamr_ioctl(fd, VAMR_IOC_ACCESS, &a);
}

static inline int vamr_atomic(int fd, uint32_t handle, void *addr, uint32_t op,
			      uint64_t compare, uint64_t swap, uint64_t *result)
{
	struct vamr_atomic a = {
		.addr = (uintptr_t)addr, .compare = compare, .swap = swap,
		.handle = handle, .op = op,
	};
	int ret = vamr_ioctl(fd, VAMR_IOC_ATOMIC, &a);

	if (!ret && result)
		*result = a.result;
	return ret;
}

static inline int vamr_prefetch(int fd, uint32_t handle, void *addr, uint64_t len,
				uint32_t *pages)
{
	struct vamr_prefetch p = { .addr = (uintptr_t)addr, .len = len, .handle = handle };
	int ret = vamr_ioctl(fd, VAMR_IOC_PREFETCH, &p);

	if (!ret && pages)
		*pages = p.pages;
	return ret;
}

/* Counters of a region, or of the module with VAMR_STATS_GLOBAL. */
static inline int vamr_stats(int fd, uint32_t handle, struct vamr_stats *s)
{
	memset(s, 0, sizeof(*s));
	s->handle = handle;
	return vamr_ioctl(fd, VAMR_IOC_STATS, s);
}

/*
 * Wait (up to timeout_ms) until the region has `pages` pages pinned, i.e. the
 * eager re-pin work has run. Returns the last pages_pinned seen.
 */
static inline uint64_t vamr_wait_pinned(int fd, uint32_t handle, uint64_t pages, int timeout_ms)
{
	struct vamr_stats s;
	struct timespec ts = { 0, 1000000 };
	int i;

	for (i = 0; i <= timeout_ms; i++) {
		if (vamr_stats(fd, handle, &s))
			return (uint64_t)-1;
		if (s.counters.pages_pinned == pages)
			break;
		nanosleep(&ts, NULL);
	}
	return s.counters.pages_pinned;
}

/*
 * Wait (up to timeout_ms) until the counter at byte offset `off` of the
 * region's struct vamr_counters reaches `want` (e.g. the verify pass ran).
 * Returns the last value seen.
 */
static inline uint64_t vamr_wait_counter(int fd, uint32_t handle, size_t off, uint64_t want,
					 int timeout_ms)
{
	struct vamr_stats s;
	struct timespec ts = { 0, 1000000 };
	uint64_t v = (uint64_t)-1;
	int i;

	for (i = 0; i <= timeout_ms; i++) {
		if (vamr_stats(fd, handle, &s))
			return (uint64_t)-1;
		memcpy(&v, (char *)&s.counters + off, sizeof(v));
		if (v == want)
			break;
		nanosleep(&ts, NULL);
	}
	return v;
}

/* A field of /proc/self/status ("VmPin", "RssAnon", ...), in kB, or -1. */
static inline long vamr_status_kb(const char *field)
{
	char line[256], name[64];
	long kb = -1, v;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%63[^:]: %ld kB", name, &v) == 2 && !strcmp(name, field)) {
			kb = v;
			break;
		}
	fclose(f);
	return kb;
}

/* VmPin of /proc/self/status, in kB (mm->pinned_vm), or -1. */
static inline long vamr_vmpin_kb(void)
{
	char line[256];
	long kb = -1;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmPin: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

/* Monitor mode: VAMR_IOC_WATCH (slot and first generation out), UNWATCH, WATCH_SYNC (the
 * generation, or -errno), EVENTS_OPEN_EX (the events descriptor, or -errno; *size = ring). */
static inline int vamr_watch(int fd, const void *a, uint64_t len, uint64_t cookie, uint32_t *slot,
			     uint64_t *gen)
{
	struct vamr_watch w = { .addr = (uintptr_t)a, .len = len, .cookie = cookie };
	int ret = vamr_ioctl(fd, VAMR_IOC_WATCH, &w);

	if (!ret) {
		if (slot)
			*slot = w.slot;
		if (gen)
			*gen = w.generation;
	}
	return ret;
}

static inline int vamr_unwatch(int fd, uint32_t slot)
{
	struct vamr_handle_arg a = { .handle = slot };

	return vamr_ioctl(fd, VAMR_IOC_UNWATCH, &a);
}

static inline int64_t vamr_watch_sync(int fd, uint32_t slot)
{
	struct vamr_watch_sync s = { .slot = slot };
	int ret = vamr_ioctl(fd, VAMR_IOC_WATCH_SYNC, &s);

	return ret ? ret : (int64_t)s.generation;
}

static inline int vamr_events_open_ex(int fd, uint32_t flags, uint32_t ring, uint32_t *size)
{
	struct vamr_events_open_ex o = { .flags = flags | VAMR_EVENTS_CLOEXEC, .ring = ring };
	int ret = vamr_ioctl(fd, VAMR_IOC_EVENTS_OPEN_EX, &o);

	if (!ret && size)
		*size = o.ring;
	return ret ? ret : o.fd;
}

/*
 * Every queued record of a non-blocking events file, up to max; the count or
 * -errno. A read of 0 is the end (the /dev/vamr file or its process is gone).
 */
static inline int vamr_drain_events(int efd, struct vamr_event *ev, int max)
{
	int n = 0;

	while (n < max) {
		ssize_t r = read(efd, ev + n, (max - n) * sizeof(*ev));

		if (r < 0)
			return errno == EAGAIN ? n : -errno;
		if (r == 0)
			return n;
		n += r / sizeof(*ev);
	}
	return n;
}

#endif /* VAMR_SELFTEST_LIB_H */
