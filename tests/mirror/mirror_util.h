/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the mirror selftests share: the device calls of vamr_mirror_edu
 * (tests/mirror/vamr_mirror_edu.h), transfers of whole ranges page by page,
 * and the kernel log as these tests read it (DMAR faults, DMA-API debug
 * reports, warnings).
 */
#ifndef VAMR_MIRROR_UTIL_H
#define VAMR_MIRROR_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "pattern.h"
#include "vamr_mirror_edu.h"

#define EDU_DEV "/dev/vamr_mirror_edu"
#define EDU_SKIP_ZAP "/sys/module/vamr_mirror_edu/parameters/skip_zap"
#define PAGE 4096ul
/* VAMR_ACCESS_WRITE of <misc/vamr.h>. */
#define MIRROR_WRITE 2

/* ioctl() as 0 or -errno. */
static inline int edu_call(int fd, unsigned long cmd, void *arg)
{
	return ioctl(fd, cmd, arg) ? -errno : 0;
}

static inline int edu_mirror(int fd, const void *addr, size_t len, unsigned int access)
{
	struct vamr_mirror_edu_range r = {
		.addr = (uintptr_t)addr, .len = len, .access = access,
	};

	return edu_call(fd, VAMR_MIRROR_EDU_MIRROR, &r);
}

/* vamr_mirror_populate() through the driver: the pages populated, or -errno. */
static inline long edu_populate(int fd, const void *addr, size_t len)
{
	struct vamr_mirror_edu_range r = { .addr = (uintptr_t)addr, .len = len };
	int ret = edu_call(fd, VAMR_MIRROR_EDU_POPULATE, &r);

	return ret ? ret : r.result;
}

/* One transfer (at most VAMR_MIRROR_EDU_XFER_MAX bytes): the device writes @buf to @va. */
static inline int edu_write(int fd, void *va, size_t len, const void *buf)
{
	struct vamr_mirror_edu_xfer x = {
		.addr = (uintptr_t)va, .len = len, .buf = (uintptr_t)buf,
	};

	return edu_call(fd, VAMR_MIRROR_EDU_WRITE, &x);
}

/* One transfer: the device reads @va into @buf. */
static inline int edu_read(int fd, const void *va, size_t len, void *buf)
{
	struct vamr_mirror_edu_xfer x = {
		.addr = (uintptr_t)va, .len = len, .buf = (uintptr_t)buf,
	};

	return edu_call(fd, VAMR_MIRROR_EDU_READ, &x);
}

static inline int edu_stats(int fd, struct vamr_mirror_edu_stats *s)
{
	return edu_call(fd, VAMR_MIRROR_EDU_STATS, s);
}

static inline int edu_info(int fd, struct vamr_mirror_edu_info *i)
{
	return edu_call(fd, VAMR_MIRROR_EDU_INFO, i);
}

/*
 * The device writes pattern (@seed, offset from @va) into [@va, @va + @len),
 * one page-bounded transfer at a time: 0 or -errno.
 */
static inline int dev_fill(int fd, uint8_t *va, size_t len, uint64_t seed)
{
	uint8_t buf[PAGE];
	size_t done = 0;

	while (done < len) {
		size_t n = PAGE - ((uintptr_t)(va + done) % PAGE);
		int ret;

		if (n > len - done)
			n = len - done;
		pattern_fill(buf, n, seed, done);
		ret = edu_write(fd, va + done, n, buf);
		if (ret)
			return ret;
		done += n;
	}
	return 0;
}

/* The device reads [@va, @va + @len) into @out, page-bounded transfers: 0 or -errno. */
static inline int dev_read(int fd, const uint8_t *va, size_t len, uint8_t *out)
{
	size_t done = 0;

	while (done < len) {
		size_t n = PAGE - ((uintptr_t)(va + done) % PAGE);
		int ret;

		if (n > len - done)
			n = len - done;
		ret = edu_read(fd, va + done, n, out + done);
		if (ret)
			return ret;
		done += n;
	}
	return 0;
}

/* The first offset where @a and @b differ, or PATTERN_OK. */
static inline size_t first_diff(const uint8_t *a, const uint8_t *b, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (a[i] != b[i])
			return i;
	return PATTERN_OK;
}

/* The first offset of [@p, @p + @len) that is not zero, or PATTERN_OK. */
static inline size_t first_nonzero(const uint8_t *p, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (p[i])
			return i;
	return PATTERN_OK;
}

/* What the kernel log showed since kmsg_start(). */
struct kmsg_counts {
	int dmar;	/* DMAR (intel-iommu) fault lines: records and status */
	int dmar_records;	/* of which fault records ("DMAR: [DMA Read ...] ...") */
	int dma_api;	/* DMA-API debug reports */
	int problems;	/* warnings, BUGs, lockdep reports, stack dumps */
};

/* /dev/kmsg at its end: only records from now on are read; -1 when it cannot be opened. */
static inline int kmsg_start(void)
{
	int fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);

	if (fd >= 0)
		lseek(fd, 0, SEEK_END);
	return fd;
}

/*
 * Counts the records since kmsg_start() (a fault's report reaches the log from
 * the IOMMU's fault interrupt, so the caller waits a little first), printing
 * each counted one as a TAP comment. Leaves the descriptor at the end.
 */
static inline void kmsg_count(int fd, struct kmsg_counts *c)
{
	static const char *const bad[] = { "WARNING", "BUG", "Oops", "circular locking",
					   "lockdep", "Call Trace", "inconsistent lock",
					   "possible recursive", NULL };
	char rec[4096];
	int i;

	memset(c, 0, sizeof(*c));
	if (fd < 0)
		return;
	for (;;) {
		ssize_t r = read(fd, rec, sizeof(rec) - 1);
		char *msg;
		int hit = 0;

		if (r < 0) {
			if (errno == EPIPE || errno == EINTR)
				continue;
			break;
		}
		rec[r] = 0;
		msg = strchr(rec, ';');
		msg = msg ? msg + 1 : rec;
		if (strstr(msg, "DMAR: [") || strstr(msg, "DRHD: handling fault")) {
			c->dmar++;
			c->dmar_records += !!strstr(msg, "DMAR: [");
			hit = 1;
		} else if (strstr(msg, "DMA-API")) {
			c->dma_api++;
			hit = 1;
		} else {
			for (i = 0; bad[i]; i++)
				if (strstr(msg, bad[i]))
					break;
			if (bad[i]) {
				c->problems++;
				hit = 1;
			}
		}
		if (hit)
			printf("# kernel: %s", msg);
	}
}

#endif
