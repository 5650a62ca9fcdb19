// SPDX-License-Identifier: GPL-2.0
/*
 * mirror_attack: the mirror API (include/linux/vamr.h) against a hostile
 * owner of the memory and against the kernel's least friendly callers,
 * through the test driver vamr_mirror_edu (the security rules of issue 31:
 * no wait on user space that deregistration or exit cannot end, nothing
 * leaked on a failure path, the non-blockable invalidation exercised).
 *
 * - unmirror_ends_userfault_wait: a POPULATE waits for a userfault nobody
 *   answers (for 8 s); UNMIRROR from another thread (vamr_mirror_cancel(),
 *   then destroy) returns within 2 s and the POPULATE with -ECANCELED.
 * - kill_ends_fuse_wait: a POPULATE over a FUSE file whose server keeps the
 *   READ; SIGKILL ends the process within 3 s (a READ the server has read
 *   waits uninterruptibly, so GUP in the caller's context would not end).
 * - nonblocking_invalidation: process_mrelease() of a killed process (kept
 *   alive by a thread in such a FUSE READ) reaps its mm through the
 *   non-blockable invalidation: a driver that refuses it (-EAGAIN,
 *   refuse_nonblock=1) keeps its pages mapped and the reap fails with
 *   EAGAIN; one that accepts has them unmapped there; no DMA mapping leaks.
 * - wrapping_and_huge_ranges: ranges that wrap around or pass the limits are
 *   refused, and leave no pinned_vm charge behind.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <grp.h>

#include "kselftest_harness.h"
#include "mirror_util.h"
#include "mm_util.h"
#include "sys_guard.h"
#include "uffd_util.h"
#include "fuse_server.h"

#define NPAGES 4u
#define EDU_REFUSE "/sys/module/vamr_mirror_edu/parameters/refuse_nonblock"
#define DMA_DEBUG "/sys/kernel/debug/dma-api/"
/* How long the hostile side keeps a fault unanswered before it gives in. */
#define HOLD_S 8

#ifndef __NR_pidfd_open
#define __NR_pidfd_open 434
#endif
#ifndef __NR_process_mrelease
#define __NR_process_mrelease 448
#endif

/* A number from a file (debugfs, procfs), or -1. */
static long read_num(const char *path, const char *key)
{
	char line[256];
	long v = -1;
	FILE *f = fopen(path, "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (!key) {
			v = strtol(line, NULL, 10);
			break;
		}
		if (!strncmp(line, key, strlen(key))) {
			v = strtol(line + strlen(key), NULL, 10);
			break;
		}
	}
	fclose(f);
	return v;
}

/* This process's pinned_vm in kB (VmPin). */
static long vm_pin_kb(void)
{
	return read_num("/proc/self/status", "VmPin:");
}

FIXTURE(attack) {
	int fd;
	int kmsg;
	long dma_free;		/* DMA-API debug's free entries at the start, or -1 */
	long dma_errors;
};

FIXTURE_SETUP(attack)
{
	struct vamr_mirror_edu_info info;

	self->kmsg = kmsg_start();
	self->dma_free = read_num(DMA_DEBUG "num_free_entries", NULL);
	self->dma_errors = read_num(DMA_DEBUG "error_count", NULL);
	self->fd = open(EDU_DEV, O_RDWR | O_CLOEXEC);
	if (self->fd < 0)
		SKIP(return, "%s: %s", EDU_DEV, strerror(errno));
	ASSERT_EQ(0, edu_info(self->fd, &info));
	ASSERT_EQ(0u, info.skip_zap);
}

FIXTURE_TEARDOWN(attack)
{
	struct kmsg_counts c;

	if (self->fd < 0)
		return;
	close(self->fd);
	usleep(300 * 1000);
	kmsg_count(self->kmsg, &c);
	EXPECT_EQ(0, c.dmar);
	EXPECT_EQ(0, c.dma_api);
	EXPECT_EQ(0, c.problems);
	/* Every mapping of the test was unmapped: debug entries all back, no error. */
	if (self->dma_free >= 0) {
		EXPECT_EQ(self->dma_free, read_num(DMA_DEBUG "num_free_entries", NULL));
		EXPECT_EQ(self->dma_errors, read_num(DMA_DEBUG "error_count", NULL));
	}
	close(self->kmsg);
}

struct populate_call {
	int fd;
	uint8_t *a;
	size_t len;
	long ret;
	int done;
	double t_end;
};

static void *populate_main(void *arg)
{
	struct populate_call *p = arg;

	p->ret = edu_populate(p->fd, p->a, p->len);
	p->t_end = mono_s();
	__atomic_store_n(&p->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* Waits (at most @s seconds) until *@v >= @want; whether it got there. */
static int wait_for_count(int *v, int want, double s)
{
	double end = mono_s() + s;

	while (__atomic_load_n(v, __ATOMIC_ACQUIRE) < want) {
		if (mono_s() > end)
			return 0;
		usleep(10 * 1000);
	}
	return 1;
}

TEST_F_TIMEOUT(attack, unmirror_ends_userfault_wait, 60)
{
	size_t len = NPAGES * PAGE;
	uint8_t *a = map_anon(len);
	struct late_handler *h;
	struct populate_call p = { .fd = self->fd, .len = len };
	pthread_t t;
	double t0, took;
	int uffd;

	ASSERT_NE(NULL, a);
	uffd = uffd_missing(a, len);
	if (uffd < 0)
		SKIP(return, "userfaultfd: %s", strerror(-uffd));
	h = aligned_alloc(4096, sizeof(*h));
	ASSERT_NE(NULL, h);
	memset(h, 0, sizeof(*h));
	h->uffd = uffd;
	h->delay_ms = HOLD_S * 1000;
	h->base = a;
	ASSERT_EQ(0, pthread_create(&h->thread, NULL, late_handler_main, h));
	ASSERT_EQ(0, edu_mirror(self->fd, a, len, MIRROR_WRITE));
	p.a = a;
	ASSERT_EQ(0, pthread_create(&t, NULL, populate_main, &p));
	ASSERT_TRUE(wait_for_count(&h->seen, 1, 5)) TH_LOG("no userfault raised");
	usleep(200 * 1000);
	ASSERT_EQ(0, __atomic_load_n(&p.done, __ATOMIC_ACQUIRE));
	t0 = mono_s();
	EXPECT_EQ(0, edu_call(self->fd, VAMR_MIRROR_EDU_UNMIRROR, NULL));
	took = mono_s() - t0;
	pthread_join(t, NULL);
	TH_LOG("UNMIRROR took %.3f s, POPULATE returned %ld after %.3f s", took, p.ret,
	       p.t_end - t0);
	EXPECT_GT(2.0, took) TH_LOG("deregistration waited for the userfault handler");
	EXPECT_EQ(-ECANCELED, p.ret);
	EXPECT_EQ(0, __atomic_load_n(&h->answered, __ATOMIC_ACQUIRE));
	EXPECT_EQ(0, vm_pin_kb());
	/* The file takes a new mirror, and the range works once the handler answers. */
	__atomic_store_n(&h->stop, 1, __ATOMIC_RELEASE);
	pthread_join(h->thread, NULL);
	close(uffd);
	memset(a, 5, len);
	ASSERT_EQ(0, edu_mirror(self->fd, a, len, MIRROR_WRITE));
	EXPECT_EQ((long)NPAGES, edu_populate(self->fd, a, len));
	EXPECT_EQ(0, edu_call(self->fd, VAMR_MIRROR_EDU_UNMIRROR, NULL));
	EXPECT_EQ(-ENODEV, edu_call(self->fd, VAMR_MIRROR_EDU_UNMIRROR, NULL));
	EXPECT_EQ(0, vm_pin_kb());
	free(h);
	munmap(a, len);
}

static struct fuse_server *fuse_start(struct __test_metadata *_metadata, size_t len)
{
	struct fuse_server *s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE,
				     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int ret;

	if (s == MAP_FAILED)
		return NULL;
	memset(s, 0, sizeof(*s));
	ret = fuse_server_start(s, len, 41);
	if (ret) {
		munmap(s, sizeof(*s));
		TH_LOG("no FUSE server: %s", strerror(-ret));
		return NULL;
	}
	return s;
}

static void fuse_end(struct fuse_server *s)
{
	fuse_server_hang(s, 0);
	fuse_server_stop(s);
	munmap(s, sizeof(*s));
}

/* Reaps @pid, waiting at most @s seconds (then -1: still there). */
static int reap_within(pid_t pid, double s, int *status)
{
	double end = mono_s() + s;

	for (;;) {
		pid_t r = waitpid(pid, status, WNOHANG);

		if (r == pid)
			return 0;
		if (r < 0 || mono_s() > end)
			return -1;
		usleep(10 * 1000);
	}
}

TEST_F_TIMEOUT(attack, kill_ends_fuse_wait, 60)
{
	size_t len = NPAGES * PAGE;
	struct fuse_server *s = fuse_start(_metadata, len);
	int status, gone;
	double t0, took;
	pid_t pid;

	if (!s)
		SKIP(return, "no FUSE");
	fuse_server_hang(s, 1);
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		int ffd = open(s->path, O_RDONLY);
		uint8_t *a = ffd < 0 ? MAP_FAILED :
			mmap(NULL, len, PROT_READ, MAP_SHARED, ffd, 0);

		if (a == MAP_FAILED || edu_mirror(self->fd, a, len, 0))
			_exit(2);
		edu_populate(self->fd, a, len);
		_exit(3);
	}
	ASSERT_TRUE(wait_for_count(&s->held_n, 1, 10)) TH_LOG("no READ reached the server");
	usleep(300 * 1000);
	t0 = mono_s();
	kill(pid, SIGKILL);
	gone = reap_within(pid, HOLD_S, &status);
	took = mono_s() - t0;
	fuse_end(s);
	if (gone)
		waitpid(pid, &status, 0);
	TH_LOG("the killed process was reaped after %.3f s", took);
	EXPECT_EQ(0, gone) TH_LOG("SIGKILL did not end a POPULATE waiting for a FUSE READ");
	EXPECT_GT(3.0, took);
	EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

static void *fuse_reader_main(void *arg)
{
	struct fuse_server *s = arg;
	char b[PAGE];
	int ffd = open(s->path, O_RDONLY);

	if (ffd >= 0)
		pread(ffd, b, sizeof(b), 0);
	return NULL;
}

/*
 * A child that mirrors and populates NPAGES pages (through the test's file,
 * shared by fork), then blocks a thread in a FUSE READ the server keeps and
 * waits; the parent kills it and calls process_mrelease(): its mm is still
 * there (the reader waits uninterruptibly), so the reap runs the
 * non-blockable invalidation over the mirror.
 */
static void mrelease_child(struct fuse_server *s, int fd, size_t len)
{
	uint8_t *a = map_anon(len);
	pthread_t t;

	if (!a)
		_exit(2);
	memset(a, 9, len);
	if (edu_mirror(fd, a, len, MIRROR_WRITE) || edu_populate(fd, a, len) != (long)NPAGES)
		_exit(3);
	pthread_create(&t, NULL, fuse_reader_main, s);
	for (;;)
		pause();
}

TEST_F_TIMEOUT(attack, nonblocking_invalidation, 90)
{
	size_t len = NPAGES * PAGE;
	struct vamr_mirror_edu_stats st;
	int k, status;

	for (k = 0; k < 2; k++) {
		struct fuse_server *s = fuse_start(_metadata, len);
		int refuse = k == 0, pidfd, ret, fd;
		pid_t pid;

		if (!s)
			SKIP(return, "no FUSE");
		/* The child's mirror, on a file the parent keeps: its STATS outlive the child. */
		fd = open(EDU_DEV, O_RDWR | O_CLOEXEC);
		ASSERT_LE(0, fd);
		ASSERT_EQ(0, sys_guard_set(EDU_REFUSE, refuse ? "1" : "0"));
		fuse_server_hang(s, 1);
		pid = fork();
		ASSERT_LE(0, pid);
		if (pid == 0)
			mrelease_child(s, fd, len);
		ASSERT_TRUE(wait_for_count(&s->held_n, 1, 10)) TH_LOG("no READ held");
		memset(&st, 0, sizeof(st));
		ASSERT_EQ(0, edu_stats(fd, &st));
		ASSERT_EQ(NPAGES, st.pages_mapped);
		pidfd = syscall(__NR_pidfd_open, pid, 0);
		ASSERT_LE(0, pidfd);
		kill(pid, SIGKILL);
		usleep(200 * 1000);
		ret = syscall(__NR_process_mrelease, pidfd, 0) ? -errno : 0;
		ASSERT_EQ(0, edu_stats(fd, &st));
		TH_LOG("refuse_nonblock=%d: process_mrelease %d, refused %llu, unmapped %llu, "
		       "mapped %llu, zapped %llu", refuse, ret,
		       (unsigned long long)st.invalidations_refused,
		       (unsigned long long)st.pages_unmapped,
		       (unsigned long long)st.pages_mapped, (unsigned long long)st.zapped);
		if (refuse) {
			EXPECT_EQ(-EAGAIN, ret);
			EXPECT_LE(1u, st.invalidations_refused);
			EXPECT_EQ(NPAGES, st.pages_mapped) TH_LOG("pages went without the driver");
			EXPECT_EQ(0u, st.zapped);
		} else {
			EXPECT_EQ(0, ret);
			EXPECT_EQ(0u, st.invalidations_refused);
			EXPECT_EQ(NPAGES, st.pages_unmapped);
			EXPECT_EQ(0u, st.pages_mapped);
			EXPECT_EQ(NPAGES, st.zapped);
		}
		/* The READ answered, the killed child exits. */
		fuse_server_hang(s, 0);
		EXPECT_EQ(0, reap_within(pid, 10, &status)) TH_LOG("the killed child was not reaped");
		fuse_end(s);
		waitpid(pid, &status, 0);
		close(pidfd);
		/* Exit released the rest; the file takes a new mirror. */
		ASSERT_EQ(0, edu_stats(fd, &st));
		EXPECT_EQ(0u, st.pages_mapped);
		/* Only the owner may UNMIRROR; close destroys. */
		EXPECT_EQ(-EPERM, edu_call(fd, VAMR_MIRROR_EDU_UNMIRROR, NULL));
		close(fd);
		sys_guard_restore();
	}
}

TEST_F_TIMEOUT(attack, wrapping_and_huge_ranges, 60)
{
	size_t len = NPAGES * PAGE;
	uint8_t *a = map_anon(len);
	uint8_t buf[16];
	struct rlimit rl = { 0, 0 };
	struct vamr_mirror_edu_range r = { 0 };
	int fd2, status;

	ASSERT_NE(NULL, a);
	EXPECT_EQ(-EINVAL, edu_mirror(self->fd, a + 1, PAGE, MIRROR_WRITE));
	EXPECT_EQ(-EINVAL, edu_mirror(self->fd, a, PAGE + 1, MIRROR_WRITE));
	EXPECT_EQ(-EINVAL, edu_mirror(self->fd, a, 0, MIRROR_WRITE));
	EXPECT_EQ(-EINVAL, edu_mirror(self->fd, a, 1ul << 63, MIRROR_WRITE));
	/* Beyond TASK_SIZE, or wrapping around. */
	EXPECT_EQ(-EINVAL, edu_mirror(self->fd, (void *)(~0ul & ~(PAGE - 1)), PAGE, MIRROR_WRITE));
	EXPECT_EQ(-EFAULT, edu_mirror(self->fd, (void *)(1ul << 57), PAGE, 0));
	EXPECT_EQ(0, vm_pin_kb());
	ASSERT_EQ(0, edu_mirror(self->fd, a, len, MIRROR_WRITE));
	/* POPULATE whose end wraps past 2^64 back into the mirror. */
	r.addr = ~0ul & ~(PAGE - 1);
	r.len = (uintptr_t)a + 2 * PAGE - r.addr;
	EXPECT_EQ(-EINVAL, edu_call(self->fd, VAMR_MIRROR_EDU_POPULATE, &r));
	r.addr = (uintptr_t)a + PAGE;
	r.len = ~0ul & ~(PAGE - 1);
	EXPECT_EQ(-EINVAL, edu_call(self->fd, VAMR_MIRROR_EDU_POPULATE, &r));
	EXPECT_EQ(-EINVAL, edu_read(self->fd, a + len - 8, 16, buf));
	EXPECT_EQ(-EINVAL, edu_read(self->fd, (void *)~0ul, 16, buf));
	EXPECT_EQ((long)NPAGES, edu_populate(self->fd, a, len));
	EXPECT_EQ((long)(len / 1024), vm_pin_kb());
	EXPECT_EQ(0, edu_call(self->fd, VAMR_MIRROR_EDU_UNMIRROR, NULL));
	EXPECT_EQ(0, vm_pin_kb());
	/* An unprivileged owner: the whole range is charged to RLIMIT_MEMLOCK at once. */
	fd2 = open(EDU_DEV, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, fd2);
	pid_t pid = fork();

	ASSERT_LE(0, pid);
	if (pid == 0) {
		uint8_t *big;

		rl.rlim_cur = rl.rlim_max = 64 * 1024;
		if (setrlimit(RLIMIT_MEMLOCK, &rl) || setgroups(0, NULL) || setresgid(65534, 65534, 65534) ||
		    setresuid(65534, 65534, 65534))
			_exit(2);
		big = mmap(NULL, 1ul << 30, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (big == MAP_FAILED)
			_exit(3);
		if (edu_mirror(fd2, big, 1ul << 30, MIRROR_WRITE) != -ENOMEM)
			_exit(4);
		if (edu_mirror(fd2, big, 32 * PAGE, MIRROR_WRITE) != -ENOMEM)
			_exit(5);
		if (vm_pin_kb() != 0)
			_exit(6);
		if (edu_mirror(fd2, big, 16 * PAGE, MIRROR_WRITE))
			_exit(7);
		if (edu_populate(fd2, big, 16 * PAGE) != 16 || vm_pin_kb() != 64)
			_exit(8);
		_exit(0);
	}
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
		TH_LOG("the unprivileged owner's step %d failed", WEXITSTATUS(status));
	close(fd2);
	munmap(a, len);
}

TEST_HARNESS_MAIN
