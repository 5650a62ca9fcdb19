// SPDX-License-Identifier: GPL-2.0
/*
 * vamr's trace events (src/vamr_trace.h) in tracefs: a region's life seen
 * through events/vamr/ — registration, an invalidation with its kind and the
 * pins it marked, the verify pass dropping the released page, the on-demand
 * pin of the next access, and a failed access — with the values the test
 * caused. Needs root and a kernel with event tracing (the test kernel).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "vamr_lib.h"

#define PAGE 4096ul
#define TRACEFS "/sys/kernel/tracing"

static int write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = write(fd, text, strlen(text));
	close(fd);
	return n == (ssize_t)strlen(text) ? 0 : -EIO;
}

/* The whole trace buffer, NUL-terminated (malloc'ed), or NULL. */
static char *read_trace(void)
{
	size_t cap = 1 << 20, len = 0;
	char *buf = malloc(cap);
	int fd = open(TRACEFS "/trace", O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (!buf || fd < 0) {
		free(buf);
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	while (len + 1 < cap && (n = read(fd, buf + len, cap - 1 - len)) > 0)
		len += n;
	buf[len] = 0;
	close(fd);
	return buf;
}

/* The first line of @trace that contains every one of the NULL-terminated @words. */
static const char *find_line(const char *trace, const char *const *words)
{
	static char line[512];
	const char *p = trace;

	while (p && *p) {
		const char *e = strchr(p, '\n');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		int all = 1;

		if (n >= sizeof(line))
			n = sizeof(line) - 1;
		memcpy(line, p, n);
		line[n] = 0;
		for (const char *const *w = words; *w; w++)
			all &= strstr(line, *w) != NULL;
		if (all)
			return line;
		p = e ? e + 1 : NULL;
	}
	return NULL;
}

FIXTURE(tracing)
{
	int fd;
};

FIXTURE_SETUP(tracing)
{
	if (access(TRACEFS "/trace", F_OK) && mount("nodev", TRACEFS, "tracefs", 0, NULL) &&
	    errno != EBUSY)
		SKIP(return, "no tracefs: %s", strerror(errno));
	if (access(TRACEFS "/events/vamr", F_OK))
		SKIP(return, "no events/vamr in tracefs (kernel without event tracing?)");
	ASSERT_EQ(0, write_file(TRACEFS "/trace", ""));
	ASSERT_EQ(0, write_file(TRACEFS "/events/vamr/enable", "1"));
	ASSERT_EQ(0, write_file(TRACEFS "/tracing_on", "1"));
	self->fd = vamr_open();
	ASSERT_LE(0, self->fd);
}

FIXTURE_TEARDOWN(tracing)
{
	write_file(TRACEFS "/events/vamr/enable", "0");
	if (self->fd >= 0)
		close(self->fd);
}

TEST_F(tracing, region_life_in_events)
{
	size_t len = 8 * PAGE;
	uint8_t *a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char start[32], drop[64], *trace;
	const char *reg[] = { "vamr_register:", NULL, "npages=8 rw pinned=8 err=0", NULL };
	const char *inv[] = { "vamr_invalidate:", NULL, "event=CLEAR", "suspect=1 dropped=0", NULL };
	const char *ver[] = { "vamr_verify:", NULL, "kept=0 swapped=0 dropped=1", NULL };
	const char *rep[] = { "vamr_repin:", NULL, "pinned=1 read access", NULL };
	const char *rep_va[] = { "vamr_repin:", NULL, NULL };
	const char *unm[] = { "vamr_invalidate:", NULL, "event=UNMAP", "dropped=1", NULL };
	const char *err[] = { "vamr_access_error:", NULL, "len=64 read err=-14", NULL };
	const char *const *want[] = { reg, inv, ver, rep, rep_va, unm, err };
	uint8_t buf[64];
	uint32_t h;

	ASSERT_NE(MAP_FAILED, a);
	memset(a, 7, len);
	ASSERT_EQ(0, vamr_register(self->fd, a, len, VAMR_ACCESS_READ | VAMR_ACCESS_WRITE, 1, &h));
	snprintf(start, sizeof(start), "start=%p ", a);
	/* Release page 2: a CLEAR invalidation marks its pin; the verify pass drops it. */
	ASSERT_EQ(0, madvise(a + 2 * PAGE, PAGE, MADV_DONTNEED));
	ASSERT_LE(1u, vamr_wait_counter(self->fd, h, offsetof(struct vamr_counters, pages_unpinned),
					1, 5000));
	/* The next access pins what is mapped there now (zeros), on demand. */
	ASSERT_EQ(0, vamr_read(self->fd, h, a + 2 * PAGE, buf, sizeof(buf)));
	/* An access to a page with nothing mapped fails. */
	ASSERT_EQ(0, munmap(a + 5 * PAGE, PAGE));
	ASSERT_EQ(-EFAULT, vamr_read(self->fd, h, a + 5 * PAGE, buf, sizeof(buf)));
	ASSERT_EQ(0, vamr_unregister(self->fd, h));
	ASSERT_EQ(0, write_file(TRACEFS "/events/vamr/enable", "0"));

	trace = read_trace();
	ASSERT_NE(NULL, trace);
	snprintf(drop, sizeof(drop), "va=%p ", a + 2 * PAGE);
	reg[1] = inv[1] = ver[1] = rep[1] = unm[1] = err[1] = start;
	rep_va[1] = drop;
	for (size_t k = 0; k < sizeof(want) / sizeof(want[0]); k++) {
		const char *line = find_line(trace, want[k]);

		EXPECT_NE(NULL, line) TH_LOG("no \"%s\" event with %s in:\n%s", want[k][0],
					     want[k][2] ? want[k][2] : "", trace);
		if (line)
			printf("# %s\n", line);
	}
	free(trace);
	munmap(a, len);
}

TEST_HARNESS_MAIN
