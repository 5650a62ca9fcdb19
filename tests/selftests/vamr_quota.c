// SPDX-License-Identifier: GPL-2.0
/*
 * The bounds on what a user creates in /dev/vamr (Documentation/vamr.rst,
 * "Security"), tried by uid 65534 with RLIMIT_MEMLOCK 0 (regions need a
 * little): the 4097th watch of a process is refused with ENOSPC, on its file
 * and on its other files; the 257th open of /dev/vamr; event-ring records
 * past max_event_records_per_mm; the per-user limits (watches, files, event
 * records, regions) across two processes of the same uid; every count comes
 * back on close and on exit (debugfs vamr/users, and doing it all again).
 * The cost of one invalidation under 4096 watches is printed and bounded:
 * one MADV_DONTNEED of one page under 4096 watches of one range (one
 * notifier) and of 4096 ranges (4096 notifiers), and root's migrate_pages()
 * of a process whose pages 4096 watches cover.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "sys_guard.h"
#include "vamr_lib.h"

#define PAGE 4096ul
#define NOBODY 65534
#define PARAMS "/sys/module/vamr/parameters/"
#define USERS "/sys/kernel/debug/vamr/users"
#define RW (VAMR_ACCESS_READ | VAMR_ACCESS_WRITE)
#define MAX_FILES 512
#define MAX_REGIONS 64

/* ---- the limits -------------------------------------------------------- */

/* The module parameter PARAMS/name, or -1. */
static long param(const char *name)
{
	char path[128], buf[32] = "";
	int fd, n;

	snprintf(path, sizeof(path), PARAMS "%s", name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	return n > 0 ? strtol(buf, NULL, 10) : -1;
}

/* Sets the module parameter (restored by sys_guard_restore()): 0, or -1. */
static int set_param(const char *name, long value)
{
	char path[128], val[32];

	snprintf(path, sizeof(path), PARAMS "%s", name);
	snprintf(val, sizeof(val), "%ld\n", value);
	return sys_guard_set(path, val);
}

/* One user's counts in debugfs vamr/users (the order of its columns). */
struct counts {
	long regions, files, watches, records;
	long fault_requests, device_waits, prefetches;	/* work in flight */
};

/*
 * The counts of uid: 1 if it has an entry, 0 if not (all counts 0: nothing
 * held), -1 if the file cannot be read.
 */
static int user_counts(uid_t uid, struct counts *c)
{
	FILE *f = fopen(USERS, "re");
	char line[256];
	int found = 0;

	memset(c, 0, sizeof(*c));
	if (!f)
		return -1;
	/* The header names the columns: uid and the per-user parameters, in order. */
	if (!fgets(line, sizeof(line), f) ||
	    strcmp(line, "uid max_regions_per_user max_files_per_user max_watches_per_user "
			 "max_event_records_per_user max_fault_requests_per_user "
			 "max_device_waits_per_user max_prefetches_per_user\n")) {
		fclose(f);
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		unsigned long u;

		if (sscanf(line, "%lu %ld %ld %ld %ld %ld %ld %ld", &u, &c->regions, &c->files,
			   &c->watches, &c->records, &c->fault_requests, &c->device_waits,
			   &c->prefetches) == 8 && u == uid) {
			found = 1;
			break;
		}
		memset(c, 0, sizeof(*c));
	}
	fclose(f);
	return found;
}

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* ---- a process of uid NOBODY, driven over two pipes ---------------------- */

enum op {
	OP_OPEN,	/* open n more /dev/vamr files */
	OP_CLOSE,	/* close the last n files */
	OP_WATCH,	/* n more watches on file m, over the process's one page */
	OP_RESIZE,	/* the event ring of file m to n records (0: its size) */
	OP_REGISTER,	/* n more regions of that page on file 0 */
	OP_UNREGISTER,	/* unregister the last n regions */
	OP_MAP,		/* map and touch n pages: the memory the next ops watch */
	OP_WATCH_MAP,	/* n watches of file m over the whole mapping (one range) */
	OP_WATCH_RANGES, /* n watches of file m over page 5 of it, ranges all different */
	OP_EVENTS,	/* open a non-blocking events file of file m */
	OP_DONTNEED,	/* MADV_DONTNEED of mapped page n: its time (us) */
	OP_DRAIN,	/* read the events file: see kid_drain() */
	OP_GEN,		/* the generation of slot n of file m (WATCH_SYNC) */
};

struct cmd {
	int op;
	long n, m;
};

/* What a command did: how many it made (or a value), the errno that stopped it, and more. */
struct reply {
	long done;
	long err;
	long extra;
};

struct kid {
	pid_t pid;
	int rd, wr;
};

/* What the process holds. */
struct kid_state {
	int fd[MAX_FILES];
	int nfd;
	uint32_t h[MAX_REGIONS];
	int nh;
	uint8_t *page;	/* one page, to watch and to register */
	uint8_t *map;	/* OP_MAP's pages */
	size_t pages;
	int efd;
	size_t last;	/* the page OP_DONTNEED dropped last */
};

static struct reply kid_watch(struct kid_state *s, int file, const void *a, size_t len,
			      size_t step, long n)
{
	struct reply r = { 0, 0, 0 };

	if (file >= s->nfd)
		return (struct reply){ 0, EBADF, 0 };
	for (; r.done < n; r.done++) {
		int ret = vamr_watch(s->fd[file], a, len + step * r.done, r.done, NULL, NULL);

		if (ret) {
			r.err = -ret;
			break;
		}
	}
	return r;
}

static struct reply kid_resize(struct kid_state *s, int file, long ring)
{
	uint32_t size = 0;
	int efd;

	if (file >= s->nfd)
		return (struct reply){ 0, EBADF, 0 };
	efd = vamr_events_open_ex(s->fd[file], VAMR_EVENTS_NONBLOCK, ring, &size);
	if (efd < 0)
		return (struct reply){ 0, -efd, 0 };
	/* The ring stays the file's; this events file is not needed. */
	close(efd);
	return (struct reply){ size, 0, 0 };
}

/*
 * Reads every queued record. done: the VAMR_EVENT_WATCH | CLEAR records over
 * exactly the page OP_DONTNEED dropped, in order, whose cookie and slot are
 * both their position (the order the watches were made); err: EBADMSG at the
 * first other record; extra: the records the overflow record says were lost.
 */
static struct reply kid_drain(struct kid_state *s)
{
	static struct vamr_event ev[VAMR_EVENTS_RING_DEFAULT + 1];
	struct reply r = { 0, 0, 0 };
	uint64_t addr = (uintptr_t)(s->map + s->last * PAGE);
	int n = vamr_drain_events(s->efd, ev, VAMR_EVENTS_RING_DEFAULT + 1);

	if (n < 0)
		return (struct reply){ 0, -n, 0 };
	for (int i = 0; i < n; i++) {
		if (ev[i].kind == VAMR_EVENT_OVERFLOW) {
			r.extra = ev[i].len;
		} else if (ev[i].kind == (VAMR_EVENT_WATCH | VAMR_EVENT_CLEAR) &&
			   ev[i].addr == addr && ev[i].len == PAGE && ev[i].cookie == (uint64_t)r.done &&
			   ev[i].handle == (uint64_t)r.done && !r.err) {
			r.done++;
		} else {
			r.err = EBADMSG;
		}
	}
	return r;
}

static struct reply kid_dontneed(struct kid_state *s, size_t page)
{
	uint8_t *p = s->map + page * PAGE;
	uint64_t t0;

	if (page >= s->pages)
		return (struct reply){ 0, EINVAL, 0 };
	p[0] = 2;
	s->last = page;
	t0 = now_us();
	if (madvise(p, PAGE, MADV_DONTNEED))
		return (struct reply){ 0, errno, 0 };
	return (struct reply){ (long)(now_us() - t0), 0, 0 };
}

static struct reply kid_map(struct kid_state *s, size_t pages)
{
	s->map = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		      -1, 0);
	if (s->map == MAP_FAILED)
		return (struct reply){ 0, errno, 0 };
	s->pages = pages;
	for (size_t i = 0; i < pages; i++)
		s->map[i * PAGE] = 1;
	return (struct reply){ (long)(uintptr_t)s->map, 0, 0 };
}

static struct reply kid_files(struct kid_state *s, int op, long n)
{
	struct reply r = { 0, 0, 0 };

	if (op == OP_CLOSE) {
		for (; r.done < n && s->nfd > 0; r.done++)
			close(s->fd[--s->nfd]);
		return r;
	}
	for (; r.done < n && s->nfd < MAX_FILES; r.done++) {
		int fd = vamr_open();

		if (fd < 0) {
			r.err = -fd;
			break;
		}
		s->fd[s->nfd++] = fd;
	}
	return r;
}

static struct reply kid_regions(struct kid_state *s, int op, long n)
{
	struct reply r = { 0, 0, 0 };

	if (op == OP_UNREGISTER) {
		for (; r.done < n && s->nh > 0; r.done++)
			vamr_unregister(s->fd[0], s->h[--s->nh]);
		return r;
	}
	for (; r.done < n && s->nh < MAX_REGIONS; r.done++) {
		int ret = s->nfd ? vamr_register(s->fd[0], s->page, PAGE, RW, 0, &s->h[s->nh])
				 : -EBADF;

		if (ret) {
			r.err = -ret;
			break;
		}
		s->nh++;
	}
	return r;
}

static struct reply kid_do(struct kid_state *s, const struct cmd *c)
{
	int64_t g;

	if (c->op != OP_OPEN && c->op != OP_CLOSE && c->op != OP_MAP && c->m >= s->nfd)
		return (struct reply){ 0, EBADF, 0 };
	switch (c->op) {
	case OP_OPEN:
	case OP_CLOSE:
		return kid_files(s, c->op, c->n);
	case OP_REGISTER:
	case OP_UNREGISTER:
		return kid_regions(s, c->op, c->n);
	case OP_WATCH:
		return kid_watch(s, c->m, s->page, PAGE, 0, c->n);
	case OP_WATCH_MAP:
		return kid_watch(s, c->m, s->map, s->pages * PAGE, 0, c->n);
	case OP_WATCH_RANGES:
		if (s->pages < 7)
			return (struct reply){ 0, EINVAL, 0 };
		/* [page 5, page 6 + i): each its own range, all over page 5 (4096 < PAGE). */
		return kid_watch(s, c->m, s->map + 5 * PAGE, PAGE, 1, c->n);
	case OP_RESIZE:
		return kid_resize(s, c->m, c->n);
	case OP_MAP:
		return kid_map(s, c->n);
	case OP_EVENTS:
		s->efd = vamr_events_open_ex(s->fd[c->m], VAMR_EVENTS_NONBLOCK, 0, NULL);
		return (struct reply){ s->efd >= 0, s->efd < 0 ? -s->efd : 0, 0 };
	case OP_DONTNEED:
		return kid_dontneed(s, c->n);
	case OP_DRAIN:
		return kid_drain(s);
	case OP_GEN:
		g = vamr_watch_sync(s->fd[c->m], c->n);
		return g < 0 ? (struct reply){ 0, -g, 0 } : (struct reply){ g, 0, 0 };
	}
	return (struct reply){ 0, EINVAL, 0 };
}

/* The process: commands until end of file, then it exits with everything still open. */
static int kid_main(int rd, int wr)
{
	static struct kid_state s;
	struct cmd c;

	s.efd = -1;
	s.page = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (s.page == MAP_FAILED)
		return 2;
	s.page[0] = 1;
	while (read(rd, &c, sizeof(c)) == sizeof(c)) {
		struct reply r = kid_do(&s, &c);

		if (write(wr, &r, sizeof(r)) != sizeof(r))
			return 3;
	}
	return 0;
}

/* Starts a process of uid NOBODY (no capabilities) with RLIMIT_MEMLOCK memlock bytes: 0, or -1. */
static int kid_start(struct kid *k, rlim_t memlock)
{
	int up[2], down[2];

	if (pipe2(up, O_CLOEXEC) || pipe2(down, O_CLOEXEC))
		return -1;
	k->pid = fork();
	if (k->pid < 0)
		return -1;
	if (k->pid == 0) {
		struct rlimit lim = { memlock, memlock };

		/*
		 * Its pipes as 0 and 1, nothing else inherited but stderr: another
		 * process's pipe end kept here would hold that process up at its end.
		 */
		if (dup2(down[0], 0) != 0 || dup2(up[1], 1) != 1 ||
		    syscall(SYS_close_range, 3, ~0u, 0))
			_exit(101);
		if (setrlimit(RLIMIT_MEMLOCK, &lim) || setgroups(0, NULL) ||
		    setresgid(NOBODY, NOBODY, NOBODY) || setresuid(NOBODY, NOBODY, NOBODY))
			_exit(100);
		_exit(kid_main(0, 1));
	}
	close(up[1]);
	close(down[0]);
	k->rd = up[0];
	k->wr = down[1];
	return 0;
}

/* Runs one command in the process: its reply (err EPIPE when the process is gone). */
static struct reply kid(struct kid *k, int op, long n, long m)
{
	struct cmd c = { op, n, m };
	struct reply r;

	if (k->pid <= 0 || write(k->wr, &c, sizeof(c)) != sizeof(c) ||
	    read(k->rd, &r, sizeof(r)) != sizeof(r))
		return (struct reply){ 0, EPIPE, 0 };
	return r;
}

/* Lets the process exit with whatever it holds still open: its exit status, or -1. */
static int kid_end(struct kid *k)
{
	int status;

	if (k->pid <= 0)
		return 0;
	close(k->wr);
	close(k->rd);
	status = waitpid(k->pid, &status, 0) == k->pid ? status : -1;
	k->pid = 0;
	return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Nothing of NOBODY is counted any more: 1 (its debugfs entry is gone), 0, or -1 (no debugfs). */
static int nobody_holds_nothing(void)
{
	struct counts c;
	int ret = user_counts(NOBODY, &c);

	if (ret < 0)
		return -1;
	return ret == 0;
}

/* ---- the tests --------------------------------------------------------- */

FIXTURE(quota)
{
	struct kid a, b;
};

FIXTURE_SETUP(quota)
{
	memset(&self->a, 0, sizeof(self->a));
	memset(&self->b, 0, sizeof(self->b));
	if (access("/dev/vamr", F_OK))
		SKIP(return, "no /dev/vamr (is vamr.ko loaded?)");
	ASSERT_EQ(0, (int)geteuid()) TH_LOG("runs as root (it sets module parameters)");
	/* The documented defaults, which the numbers below are derived from. */
	ASSERT_EQ(4096, param("max_watches_per_mm"));
	ASSERT_EQ(65536, param("max_watches_per_user"));
	ASSERT_EQ(256, param("max_files_per_mm"));
	ASSERT_EQ(1024, param("max_files_per_user"));
	ASSERT_EQ(262144, param("max_event_records_per_mm"));
	ASSERT_EQ(1048576, param("max_event_records_per_user"));
	ASSERT_EQ(8192, param("max_regions_per_mm"));
	ASSERT_EQ(65536, param("max_regions_per_user"));
	ASSERT_EQ(256, param("max_fault_requests_per_user"));
	ASSERT_EQ(1024, param("max_device_waits_per_user"));
	ASSERT_EQ(1024, param("max_prefetches_per_user"));
	ASSERT_EQ(4096, VAMR_WATCH_MAX);
	/* A process of NOBODY from an earlier test would hold counts. */
	ASSERT_NE(0, nobody_holds_nothing());
	ASSERT_EQ(0, kid_start(&self->a, 0));
}

FIXTURE_TEARDOWN(quota)
{
	if (self->a.pid > 0)
		kill(self->a.pid, SIGKILL);
	kid_end(&self->a);
	if (self->b.pid > 0)
		kill(self->b.pid, SIGKILL);
	kid_end(&self->b);
	sys_guard_restore();
}

/* The reply r made done_ and stopped with errno err_ (0: it was not stopped). */
#define EXPECT_REPLY(done_, err_, r)                                                  \
	do {                                                                         \
		struct reply r_ = (r);                                               \
		EXPECT_EQ((long)(done_), r_.done);                                   \
		EXPECT_EQ((long)(err_), r_.err)                                      \
		TH_LOG("errno %ld (%s)", r_.err, strerror((int)r_.err));             \
	} while (0)

/* 4096 watches per process: the 4097th fails on its file and on another file of the process. */
TEST_F_TIMEOUT(quota, watch_4097_is_refused_per_mm, 300)
{
	EXPECT_REPLY(2, 0, kid(&self->a, OP_OPEN, 2, 0));
	EXPECT_REPLY(4096, ENOSPC, kid(&self->a, OP_WATCH, 4097, 1));
	/* Not VAMR_WATCH_MAX of the file: max_watches_per_mm of the process. */
	EXPECT_REPLY(0, ENOSPC, kid(&self->a, OP_WATCH, 1, 0));
	/* Closing the file with the watches gives them back to the process. */
	EXPECT_REPLY(1, 0, kid(&self->a, OP_CLOSE, 1, 0));
	EXPECT_REPLY(4096, ENOSPC, kid(&self->a, OP_WATCH, 4097, 0));
	/* The process's exit gives everything back. */
	EXPECT_EQ(0, kid_end(&self->a));
	EXPECT_NE(0, nobody_holds_nothing());
}

/* 256 files per process: the 257th open fails; closing one makes room for one. */
TEST_F_TIMEOUT(quota, open_257_is_refused_per_mm, 300)
{
	long fit = (262144 - 256 * VAMR_EVENTS_RING_DEFAULT) /
		   (VAMR_EVENTS_RING_MAX - VAMR_EVENTS_RING_DEFAULT);

	EXPECT_REPLY(256, ENOSPC, kid(&self->a, OP_OPEN, 257, 0));
	EXPECT_REPLY(1, 0, kid(&self->a, OP_CLOSE, 1, 0));
	EXPECT_REPLY(1, ENOSPC, kid(&self->a, OP_OPEN, 2, 0));
	/*
	 * Event records: 256 rings of VAMR_EVENTS_RING_DEFAULT are counted;
	 * rings grow to VAMR_EVENTS_RING_MAX as often as the rest of
	 * max_event_records_per_mm allows (twice), then ENOSPC, and the refused
	 * ring keeps its size. Shrinking one gives its records back.
	 */
	EXPECT_EQ(2, fit);
	for (long i = 0; i < fit; i++)
		EXPECT_REPLY(VAMR_EVENTS_RING_MAX, 0,
			     kid(&self->a, OP_RESIZE, VAMR_EVENTS_RING_MAX, i));
	EXPECT_REPLY(0, ENOSPC, kid(&self->a, OP_RESIZE, VAMR_EVENTS_RING_MAX, 100));
	EXPECT_REPLY(VAMR_EVENTS_RING_DEFAULT, 0, kid(&self->a, OP_RESIZE, 0, 100));
	EXPECT_REPLY(16, 0, kid(&self->a, OP_RESIZE, 16, 0));
	EXPECT_REPLY(VAMR_EVENTS_RING_MAX, 0, kid(&self->a, OP_RESIZE, VAMR_EVENTS_RING_MAX, 100));
	/* Closing everything gives it all back: the same again. */
	EXPECT_REPLY(256, 0, kid(&self->a, OP_CLOSE, 256, 0));
	EXPECT_NE(0, nobody_holds_nothing());
	EXPECT_REPLY(256, ENOSPC, kid(&self->a, OP_OPEN, 257, 0));
	EXPECT_REPLY(VAMR_EVENTS_RING_MAX, 0, kid(&self->a, OP_RESIZE, VAMR_EVENTS_RING_MAX, 0));
}

/* The per-user limits hold across two processes of one uid, and each share comes back. */
TEST_F_TIMEOUT(quota, per_user_limits_span_processes, 300)
{
	struct kid *a = &self->a, *b = &self->b;

	ASSERT_EQ(0, kid_start(b, 0));
	ASSERT_EQ(0, set_param("max_files_per_user", 300));
	ASSERT_EQ(0, set_param("max_watches_per_user", 6000));
	/* Files: A opens its 256 (the bound per process), B the other 44 of the user's 300. */
	EXPECT_REPLY(256, 0, kid(a, OP_OPEN, 256, 0));
	EXPECT_REPLY(44, ENOSPC, kid(b, OP_OPEN, 100, 0));
	EXPECT_REPLY(0, ENOSPC, kid(a, OP_OPEN, 1, 0));
	/* Watches: A its 4096, B the other 1904 of the user's 6000, on any of its files. */
	EXPECT_REPLY(4096, 0, kid(a, OP_WATCH, 4096, 0));
	EXPECT_REPLY(1904, ENOSPC, kid(b, OP_WATCH, 4096, 0));
	EXPECT_REPLY(0, ENOSPC, kid(b, OP_WATCH, 1, 1));
	/* Event records: the 300 rings are counted, 2000 records more fit, for either. */
	ASSERT_EQ(0, set_param("max_event_records_per_user", 300 * VAMR_EVENTS_RING_DEFAULT + 2000));
	EXPECT_REPLY(VAMR_EVENTS_RING_DEFAULT + 1500, 0,
		     kid(b, OP_RESIZE, VAMR_EVENTS_RING_DEFAULT + 1500, 0));
	EXPECT_REPLY(0, ENOSPC, kid(a, OP_RESIZE, VAMR_EVENTS_RING_DEFAULT + 501, 0));
	EXPECT_REPLY(VAMR_EVENTS_RING_DEFAULT + 500, 0,
		     kid(a, OP_RESIZE, VAMR_EVENTS_RING_DEFAULT + 500, 0));
	EXPECT_REPLY(0, ENOSPC, kid(b, OP_RESIZE, VAMR_EVENTS_RING_DEFAULT + 1, 1));
	/* A closes 10 files (not the one with its watches): B can open 10, with their rings. */
	EXPECT_REPLY(10, 0, kid(a, OP_CLOSE, 10, 0));
	EXPECT_REPLY(10, ENOSPC, kid(b, OP_OPEN, 11, 0));
	/* A exits: B gets its process's 4096 watches, records, and files up to its 256. */
	EXPECT_EQ(0, kid_end(a));
	EXPECT_REPLY(4096 - 1904, ENOSPC, kid(b, OP_WATCH, 4096, 0));
	EXPECT_REPLY(VAMR_EVENTS_RING_DEFAULT + 2000, 0,
		     kid(b, OP_RESIZE, VAMR_EVENTS_RING_DEFAULT + 2000, 1));
	EXPECT_REPLY(256 - 54, ENOSPC, kid(b, OP_OPEN, 300, 0));
	EXPECT_EQ(0, kid_end(b));
	EXPECT_NE(0, nobody_holds_nothing());
}

/* Regions count per user too (with RLIMIT_MEMLOCK for 16 pages each), across two processes. */
TEST_F(quota, regions_per_user_span_processes)
{
	struct kid *a = &self->a, *b = &self->b;

	/* A's RLIMIT_MEMLOCK is 0: no region, whatever the limits. */
	EXPECT_REPLY(1, 0, kid(a, OP_OPEN, 1, 0));
	EXPECT_REPLY(0, ENOMEM, kid(a, OP_REGISTER, 1, 0));
	EXPECT_EQ(0, kid_end(a));
	ASSERT_EQ(0, kid_start(a, 16 * PAGE));
	ASSERT_EQ(0, kid_start(b, 16 * PAGE));
	ASSERT_EQ(0, set_param("max_regions_per_user", 10));
	EXPECT_REPLY(1, 0, kid(a, OP_OPEN, 1, 0));
	EXPECT_REPLY(1, 0, kid(b, OP_OPEN, 1, 0));
	EXPECT_REPLY(6, 0, kid(a, OP_REGISTER, 6, 0));
	EXPECT_REPLY(4, ENOSPC, kid(b, OP_REGISTER, 10, 0));
	EXPECT_REPLY(3, 0, kid(a, OP_UNREGISTER, 3, 0));
	EXPECT_REPLY(3, ENOSPC, kid(b, OP_REGISTER, 10, 0));
	/* A's exit gives its 3 back. */
	EXPECT_EQ(0, kid_end(a));
	EXPECT_REPLY(3, ENOSPC, kid(b, OP_REGISTER, 10, 0));
	EXPECT_EQ(0, kid_end(b));
	EXPECT_NE(0, nobody_holds_nothing());
}

/* What a process holds is counted exactly, and all of it comes back on close and on exit. */
TEST_F(quota, counts_come_back_on_close_and_exit)
{
	struct counts c;
	int round;

	if (nobody_holds_nothing() < 0)
		SKIP(return, "no " USERS " (debugfs not mounted?)");
	EXPECT_EQ(0, kid_end(&self->a));
	for (round = 0; round < 2; round++) {
		ASSERT_EQ(0, kid_start(&self->a, 16 * PAGE));
		EXPECT_REPLY(3, 0, kid(&self->a, OP_OPEN, 3, 0));
		EXPECT_REPLY(100, 0, kid(&self->a, OP_WATCH, 100, 0));
		EXPECT_REPLY(20, 0, kid(&self->a, OP_WATCH, 20, 2));
		EXPECT_REPLY(1024, 0, kid(&self->a, OP_RESIZE, 1024, 1));
		EXPECT_REPLY(5, 0, kid(&self->a, OP_REGISTER, 5, 0));
		ASSERT_EQ(1, user_counts(NOBODY, &c));
		EXPECT_EQ(5, c.regions);
		EXPECT_EQ(3, c.files);
		EXPECT_EQ(120, c.watches);
		EXPECT_EQ(2 * VAMR_EVENTS_RING_DEFAULT + 1024, c.records);
		/* No work in flight: nothing waits on user space here. */
		EXPECT_EQ(0, c.fault_requests);
		EXPECT_EQ(0, c.device_waits);
		EXPECT_EQ(0, c.prefetches);
		if (round == 0) {
			/* Unregister, then close: each gives its part back. */
			EXPECT_REPLY(5, 0, kid(&self->a, OP_UNREGISTER, 5, 0));
			ASSERT_EQ(1, user_counts(NOBODY, &c));
			EXPECT_EQ(0, c.regions);
			EXPECT_EQ(120, c.watches);
			EXPECT_REPLY(1, 0, kid(&self->a, OP_CLOSE, 1, 0));
			ASSERT_EQ(1, user_counts(NOBODY, &c));
			EXPECT_EQ(2, c.files);
			EXPECT_EQ(100, c.watches);
			EXPECT_EQ(VAMR_EVENTS_RING_DEFAULT + 1024, c.records);
			EXPECT_REPLY(2, 0, kid(&self->a, OP_CLOSE, 2, 0));
			EXPECT_EQ(1, nobody_holds_nothing());
		}
		/* Round 1: the process exits with everything open. */
		EXPECT_EQ(0, kid_end(&self->a));
		EXPECT_EQ(1, nobody_holds_nothing());
	}
}

/*
 * One invalidation of one page costs one callback per watch group over it:
 * 4096 watches of one range are one notifier (4096 counter bumps, records up
 * to the ring's room); 4096 different ranges are 4096 notifiers, which
 * max_watches_per_mm bounds. Both are timed against no watch at all.
 */
TEST_F_TIMEOUT(quota, one_invalidation_under_4096_watches_is_bounded, 300)
{
	struct reply base, same, spread, drain;
	long first, last;

	EXPECT_REPLY(1, 0, kid(&self->a, OP_OPEN, 1, 0));
	ASSERT_EQ(0, kid(&self->a, OP_MAP, 16, 0).err);
	/* The first one warms up; the second is the time without watches. */
	ASSERT_EQ(0, kid(&self->a, OP_DONTNEED, 3, 0).err);
	base = kid(&self->a, OP_DONTNEED, 3, 0);
	ASSERT_EQ(0, base.err);
	EXPECT_REPLY(4096, 0, kid(&self->a, OP_WATCH_MAP, 4096, 0));
	EXPECT_REPLY(1, 0, kid(&self->a, OP_EVENTS, 0, 0));
	first = kid(&self->a, OP_GEN, 0, 0).done;
	last = kid(&self->a, OP_GEN, 4095, 0).done;
	same = kid(&self->a, OP_DONTNEED, 3, 0);
	ASSERT_EQ(0, same.err);
	/* Every watch saw it: its counter, and its record while the ring had room. */
	EXPECT_EQ(first + 1, kid(&self->a, OP_GEN, 0, 0).done);
	EXPECT_EQ(last + 1, kid(&self->a, OP_GEN, 4095, 0).done);
	drain = kid(&self->a, OP_DRAIN, 0, 0);
	EXPECT_EQ(VAMR_EVENTS_RING_DEFAULT, drain.done);
	EXPECT_EQ(0, drain.err);
	EXPECT_EQ(4096 - VAMR_EVENTS_RING_DEFAULT, drain.extra);
	/* The same number of watches over 4096 different ranges of page 5. */
	EXPECT_REPLY(1, 0, kid(&self->a, OP_CLOSE, 1, 0));
	EXPECT_REPLY(1, 0, kid(&self->a, OP_OPEN, 1, 0));
	EXPECT_REPLY(4096, ENOSPC, kid(&self->a, OP_WATCH_RANGES, 4097, 0));
	spread = kid(&self->a, OP_DONTNEED, 5, 0);
	ASSERT_EQ(0, spread.err);
	ksft_print_msg("MADV_DONTNEED of one page: %.3f ms without watches, %.3f ms under 4096 "
		       "watches of one range, %.3f ms under 4096 watches of 4096 ranges\n",
		       base.done / 1000.0, same.done / 1000.0, spread.done / 1000.0);
	EXPECT_GT(200000, same.done);
	EXPECT_GT(200000, spread.done);
}

/* The nodes of the 16 pages at addr of process pid into status: 0, or -errno. */
static int page_nodes(pid_t pid, uintptr_t addr, int *status)
{
	void *pages[16];

	for (int i = 0; i < 16; i++)
		pages[i] = (void *)(addr + i * PAGE);
	return syscall(SYS_move_pages, pid, 16, pages, NULL, status, 0) ? -errno : 0;
}

/*
 * migrate_pages() of process pid from the node of its 16 pages at addr to the
 * other node, as root: its time (us), or -errno (also when a page did not
 * move).
 */
static long migrate_us(pid_t pid, uintptr_t addr)
{
	unsigned long from, to;
	int status[16];
	uint64_t t0;
	long ret;

	if (page_nodes(pid, addr, status))
		return -errno;
	if (status[0] < 0 || status[0] > 1)
		return -ENOENT;
	from = 1ul << status[0];
	to = 1ul << !status[0];
	t0 = now_us();
	/* maxnode counts one bit more than the masks hold (the syscall's convention). */
	ret = syscall(SYS_migrate_pages, pid, 8 * sizeof(unsigned long) + 1, &from, &to);
	t0 = now_us() - t0;
	if (ret < 0)
		return -errno;
	if (page_nodes(pid, addr, status))
		return -errno;
	for (int i = 0; i < 16; i++)
		if (1ul << status[i] != to)
			return -EAGAIN;
	return (long)t0;
}

/* The smaller of two times, or the error of either. */
static long min_ok(long t1, long t2)
{
	if (t1 < 0 || t2 < 0)
		return t1 < 0 ? t1 : t2;
	return t1 < t2 ? t1 : t2;
}

/*
 * Root moves a process whose 16 pages 4096 watches cover to the other NUMA
 * node: each page's migration is one invalidation, one callback of the
 * watches' one group. Timed against the same process without watches.
 */
TEST_F_TIMEOUT(quota, migrate_pages_of_a_watched_process_is_bounded, 300)
{
	struct kid *a = &self->a, *b = &self->b;
	struct reply ma, mb;
	long ta, tb, gen;

	if (access("/sys/devices/system/node/node1", F_OK))
		SKIP(return, "one NUMA node only (boot with numa=fake=2)");
	ASSERT_EQ(0, kid_start(b, 0));
	EXPECT_REPLY(1, 0, kid(a, OP_OPEN, 1, 0));
	ma = kid(a, OP_MAP, 16, 0);
	mb = kid(b, OP_MAP, 16, 0);
	ASSERT_EQ(0, ma.err);
	ASSERT_EQ(0, mb.err);
	EXPECT_REPLY(4096, 0, kid(a, OP_WATCH_MAP, 4096, 0));
	gen = kid(a, OP_GEN, 4095, 0).done;
	/* There and back for each; the faster of the two counts (the first one warms up). */
	tb = min_ok(migrate_us(b->pid, mb.done), migrate_us(b->pid, mb.done));
	ta = min_ok(migrate_us(a->pid, ma.done), migrate_us(a->pid, ma.done));
	ASSERT_LE(0, tb) TH_LOG("migrate_pages (no watch): %s", strerror(-tb));
	ASSERT_LE(0, ta) TH_LOG("migrate_pages (4096 watches): %s", strerror(-ta));
	/* Each of the 16 pages was invalidated on each way, and every watch saw it. */
	EXPECT_LE(gen + 32, kid(a, OP_GEN, 4095, 0).done);
	ksft_print_msg("migrate_pages of the process to the other node: %.3f ms without watches, "
		       "%.3f ms with 4096 watches over its 16 pages\n", tb / 1000.0, ta / 1000.0);
	EXPECT_GT(tb + 200000, ta);
}

TEST_HARNESS_MAIN
