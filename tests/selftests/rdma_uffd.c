// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_uffd: VA MRs over userfaultfd-managed memory. The peer's RDMA READ or
 * WRITE of a page that is missing (MISSING), in the page cache but unmapped
 * (MINOR, shmem) or write-protected (WP) must reach the process's handler
 * and then see or leave exactly the bytes the CPU sees, as normal and ODP
 * MRs do; a handler that answers late only delays the access; one that never
 * answers must not hang deregistration or process exit.
 *
 * Registration runs in the process and waits for the handler itself; an
 * access from rxe's tasks (which nothing could wake if the process never
 * answered) has the fault delivered from a vamr work item and waits for it,
 * cancellably (counter fault_requests).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "mm_util.h"
#include "pattern.h"
#include "rdma_pair.h"
#include "vamr_lib.h"
#include "uffd_util.h"

#define PAGE 4096ul
#define ACC (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

/* The handler thread: answers faults on one uffd after `delay_ms`, or never. */
struct handler {
	int uffd;
	int delay_ms;		/* < 0: never answer */
	uint64_t seed;		/* MISSING: the page is filled with pattern(seed, page offset) */
	uint8_t *base;		/* start of the registered range (pattern offsets) */
	int missing, minor, wp;	/* faults seen */
	int stop;
	pthread_t thread;
	uint8_t page[PAGE] __attribute__((aligned(4096)));
};

static void *handler_main(void *arg)
{
	struct handler *h = arg;
	struct uffd_msg msg;
	struct pollfd pfd = { .fd = h->uffd, .events = POLLIN };

	while (!__atomic_load_n(&h->stop, __ATOMIC_ACQUIRE)) {
		if (poll(&pfd, 1, 50) <= 0)
			continue;
		if (read(h->uffd, &msg, sizeof(msg)) != sizeof(msg))
			continue;
		if (msg.event != UFFD_EVENT_PAGEFAULT)
			continue;
		uint64_t addr = msg.arg.pagefault.address & ~(PAGE - 1);
		uint64_t flags = msg.arg.pagefault.flags;

		if (h->delay_ms < 0)
			continue;	/* never answered */
		usleep(h->delay_ms * 1000);
		if (flags & UFFD_PAGEFAULT_FLAG_WP) {
			struct uffdio_writeprotect wp = {
				.range = { .start = addr, .len = PAGE }, .mode = 0,
			};
			__atomic_add_fetch(&h->wp, 1, __ATOMIC_RELEASE);
			ioctl(h->uffd, UFFDIO_WRITEPROTECT, &wp);
		} else if (flags & UFFD_PAGEFAULT_FLAG_MINOR) {
			struct uffdio_continue c = { .range = { .start = addr, .len = PAGE } };

			__atomic_add_fetch(&h->minor, 1, __ATOMIC_RELEASE);
			ioctl(h->uffd, UFFDIO_CONTINUE, &c);
		} else {
			struct uffdio_copy c = {
				.dst = addr, .src = (uintptr_t)h->page, .len = PAGE,
			};

			pattern_fill(h->page, PAGE, h->seed, addr - (uintptr_t)h->base);
			__atomic_add_fetch(&h->missing, 1, __ATOMIC_RELEASE);
			ioctl(h->uffd, UFFDIO_COPY, &c);
		}
	}
	return NULL;
}

static void handler_start(struct handler *h, int uffd, uint8_t *base, uint64_t seed, int delay)
{
	h->uffd = uffd;
	h->base = base;
	h->seed = seed;
	h->delay_ms = delay;
	h->stop = 0;
	pthread_create(&h->thread, NULL, handler_main, h);
}

static void handler_stop(struct handler *h)
{
	__atomic_store_n(&h->stop, 1, __ATOMIC_RELEASE);
	pthread_join(h->thread, NULL);
}

FIXTURE(uffd)
{
	struct rdma_pair pair;
	bool open;
	uint8_t *buf;
	struct ibv_mr *buf_mr;
	struct handler h;
	int vfd;
};

FIXTURE_SETUP(uffd)
{
	const char *dev = rdma_pair_default_dev();
	int rc = rdma_pair_open(&self->pair, dev);

	if (rc == -ENODEV)
		SKIP(return, "RDMA device %s not present", dev);
	ASSERT_EQ(0, rc);
	self->open = true;
	self->buf = map_anon(4 * PAGE);
	ASSERT_NE(NULL, self->buf);
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, self->buf, 4 * PAGE, ACC, &self->buf_mr));
	self->vfd = vamr_open();
	ASSERT_LE(0, self->vfd);
}

FIXTURE_TEARDOWN(uffd)
{
	if (self->buf_mr)
		ibv_dereg_mr(self->buf_mr);
	if (self->open)
		rdma_pair_close(&self->pair);
	close(self->vfd);
}

static void log_mr(struct __test_metadata *_metadata, int vfd, struct ibv_mr *mr)
{
	struct vamr_mr_query q = { .key = mr->lkey };

	if (!vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q))
		TH_LOG("MR: pinned %llu, on demand %llu, fault requests %llu, access faults %llu, retries %llu",
		       (unsigned long long)q.counters.pages_pinned,
		       (unsigned long long)q.counters.ondemand_repins,
		       (unsigned long long)q.counters.fault_requests,
		       (unsigned long long)q.counters.access_faults,
		       (unsigned long long)q.counters.repin_retries);
}

static uint64_t fault_requests(int vfd, struct ibv_mr *mr)
{
	struct vamr_mr_query q = { .key = mr->lkey };

	return vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q) ? (uint64_t)-1 : q.counters.fault_requests;
}

/*
 * Registration over a missing page waits for the handler (in the process);
 * the peer's READ returns the handler's bytes.
 */
TEST_F(uffd, missing_at_registration)
{
	uint8_t *a = map_anon(PAGE);
	struct ibv_mr *mr;
	int uffd;

	ASSERT_NE(NULL, a);
	uffd = uffd_open(a, PAGE, UFFDIO_REGISTER_MODE_MISSING, 0);
	if (uffd == -EPERM || uffd == -ENOSYS)
		SKIP(return, "userfaultfd unavailable: %s", strerror(-uffd));
	ASSERT_LE(0, uffd);
	handler_start(&self->h, uffd, a, 201, 0);
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, a, PAGE, ACC | VAMR_ACCESS_VA, &mr));
	ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_read_sync(&self->pair, 0, self->buf, self->buf_mr->lkey,
						      (uintptr_t)a, mr->rkey, 64, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(self->buf, 64, 201, 0));
	EXPECT_EQ(1, self->h.missing);
	EXPECT_EQ(0, memcmp(self->buf, a, 64));
	ibv_dereg_mr(mr);
	handler_stop(&self->h);
	close(uffd);
	munmap(a, PAGE);
}

/*
 * The page is released after registration, then handed to userfaultfd: the
 * peer's READ (resp. WRITE) from rxe's task has the fault delivered by vamr,
 * and sees (leaves) exactly the bytes the CPU sees. `delay` makes the handler
 * answer late.
 */
static void data_path_case(struct __test_metadata *_metadata, FIXTURE_DATA(uffd) *self,
			   int write, int delay)
{
	uint8_t *a = map_anon(2 * PAGE);
	struct ibv_mr *mr;
	int uffd, st;

	ASSERT_NE(NULL, a);
	memset(a, 0x5a, 2 * PAGE);
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, a, 2 * PAGE, ACC | VAMR_ACCESS_VA, &mr));
	ASSERT_EQ(0, madvise(a, 2 * PAGE, MADV_DONTNEED));
	usleep(50 * 1000);	/* let the verify pass drop the released pins */
	uffd = uffd_open(a, 2 * PAGE, UFFDIO_REGISTER_MODE_MISSING, 0);
	if (uffd == -EPERM || uffd == -ENOSYS)
		SKIP(goto out, "userfaultfd unavailable: %s", strerror(-uffd));
	ASSERT_LE(0, uffd);
	handler_start(&self->h, uffd, a, 202 + write, delay);
	if (write) {
		pattern_fill(self->buf, 300, 210, 0);
		st = rdma_pair_write_sync(&self->pair, 0, self->buf, self->buf_mr->lkey,
					  (uintptr_t)a + PAGE + 100, mr->rkey, 300, 10000);
		ASSERT_EQ(IBV_WC_SUCCESS, st);
		/* The peer's bytes where it wrote, the handler's around them. */
		EXPECT_EQ(PATTERN_OK, pattern_check(a + PAGE + 100, 300, 210, 0));
		EXPECT_EQ(PATTERN_OK, pattern_check(a + PAGE, 100, 203, PAGE));
		EXPECT_EQ(PATTERN_OK, pattern_check(a + PAGE + 400, PAGE - 400, 203, PAGE + 400));
	} else {
		st = rdma_pair_read_sync(&self->pair, 0, self->buf, self->buf_mr->lkey,
					 (uintptr_t)a, mr->rkey, 64, 10000);
		log_mr(_metadata, self->vfd, mr);
		ASSERT_EQ(IBV_WC_SUCCESS, st);
		EXPECT_EQ(PATTERN_OK, pattern_check(self->buf, 64, 202, 0));
		EXPECT_EQ(0, memcmp(self->buf, a, 64));
	}
	EXPECT_EQ(1, self->h.missing);
	EXPECT_LE(1u, fault_requests(self->vfd, mr));
	handler_stop(&self->h);
	close(uffd);
out:
	ibv_dereg_mr(mr);
	munmap(a, 2 * PAGE);
}

TEST_F(uffd, missing_read_from_device_task)
{
	data_path_case(_metadata, self, 0, 0);
}

TEST_F(uffd, missing_write_from_device_task)
{
	data_path_case(_metadata, self, 1, 0);
}

TEST_F(uffd, missing_read_late_handler)
{
	data_path_case(_metadata, self, 0, 400);
}

/*
 * Write-protect mode: the page is write-protected under the MR; the peer's
 * WRITE reaches the handler (a WP fault), and lands once it unprotects.
 */
TEST_F(uffd, wp_write_from_device_task)
{
	uint8_t *a = map_anon(PAGE);
	struct uffdio_writeprotect wp;
	struct ibv_mr *mr;
	int uffd;

	ASSERT_NE(NULL, a);
	pattern_fill(a, PAGE, 220, 0);
	uffd = uffd_open(a, PAGE, UFFDIO_REGISTER_MODE_WP, UFFD_FEATURE_PAGEFAULT_FLAG_WP);
	if (uffd == -EPERM || uffd == -ENOSYS || uffd == -EINVAL)
		SKIP(return, "userfaultfd WP unavailable: %s", strerror(-uffd));
	ASSERT_LE(0, uffd);
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, a, PAGE, ACC | VAMR_ACCESS_VA, &mr));
	wp = (struct uffdio_writeprotect){
		.range = { .start = (uintptr_t)a, .len = PAGE }, .mode = UFFDIO_WRITEPROTECT_MODE_WP,
	};
	ASSERT_EQ(0, ioctl(uffd, UFFDIO_WRITEPROTECT, &wp));
	usleep(50 * 1000);
	handler_start(&self->h, uffd, a, 221, 0);
	pattern_fill(self->buf, 200, 222, 0);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_write_sync(&self->pair, 0, self->buf,
						       self->buf_mr->lkey, (uintptr_t)a + 64,
						       mr->rkey, 200, 10000));
	EXPECT_EQ(1, self->h.wp);
	EXPECT_EQ(PATTERN_OK, pattern_check(a + 64, 200, 222, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(a, 64, 220, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(a + 264, PAGE - 264, 220, 264));
	handler_stop(&self->h);
	ibv_dereg_mr(mr);
	close(uffd);
	munmap(a, PAGE);
}

/*
 * Minor mode (shmem): the page is in the page cache but not mapped; the
 * peer's READ reaches the handler, which maps it (UFFDIO_CONTINUE).
 */
TEST_F(uffd, minor_read_from_device_task)
{
	int mfd = memfd_create("vamr_uffd_minor", MFD_CLOEXEC), uffd;
	uint8_t *a, data[PAGE];
	struct ibv_mr *mr;

	ASSERT_LE(0, mfd);
	ASSERT_EQ(0, ftruncate(mfd, PAGE));
	pattern_fill(data, PAGE, 230, 0);
	ASSERT_EQ((ssize_t)PAGE, pwrite(mfd, data, PAGE, 0));
	a = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	ASSERT_NE(MAP_FAILED, a);
	/* Register over a hole first, then map the file there: nothing pinned, nothing mapped. */
	ASSERT_EQ(0, munmap(a, PAGE));
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, a, PAGE, ACC | VAMR_ACCESS_VA, &mr));
	ASSERT_EQ(a, mmap(a, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, mfd, 0));
	uffd = uffd_open(a, PAGE, UFFDIO_REGISTER_MODE_MINOR, UFFD_FEATURE_MINOR_SHMEM);
	if (uffd == -EPERM || uffd == -ENOSYS || uffd == -EINVAL) {
		ibv_dereg_mr(mr);
		SKIP(return, "userfaultfd MINOR on shmem unavailable: %s", strerror(-uffd));
	}
	ASSERT_LE(0, uffd);
	handler_start(&self->h, uffd, a, 231, 0);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_read_sync(&self->pair, 0, self->buf,
						      self->buf_mr->lkey, (uintptr_t)a + 128,
						      mr->rkey, 256, 10000));
	EXPECT_EQ(1, self->h.minor);
	EXPECT_EQ(PATTERN_OK, pattern_check(self->buf, 256, 230, 128));
	handler_stop(&self->h);
	ibv_dereg_mr(mr);
	close(uffd);
	munmap(a, PAGE);
	close(mfd);
}

/* /dev/vamr in the process: registration and ACCESS wait for the handler themselves. */
TEST_F(uffd, vamr_access_in_process)
{
	uint8_t *a = map_anon(2 * PAGE), out[100];
	uint32_t h;
	int uffd;

	ASSERT_NE(NULL, a);
	uffd = uffd_open(a, 2 * PAGE, UFFDIO_REGISTER_MODE_MISSING, 0);
	if (uffd == -EPERM || uffd == -ENOSYS)
		SKIP(return, "userfaultfd unavailable");
	ASSERT_LE(0, uffd);
	handler_start(&self->h, uffd, a, 250, 100);
	/* Registration faults both pages in through the handler (late by 100 ms). */
	ASSERT_EQ(0, vamr_register(self->vfd, a, 2 * PAGE, VAMR_ACCESS_READ | VAMR_ACCESS_WRITE,
				   1, &h));
	EXPECT_EQ(2, self->h.missing);
	ASSERT_EQ(0, vamr_read(self->vfd, h, a + PAGE + 7, out, sizeof(out)));
	EXPECT_EQ(PATTERN_OK, pattern_check(out, sizeof(out), 250, PAGE + 7));
	EXPECT_EQ(0u, vamr_stats(self->vfd, h, &(struct vamr_stats){ 0 }) ? 1u : 0u);
	handler_stop(&self->h);
	EXPECT_EQ(0, vamr_unregister(self->vfd, h));
	close(uffd);
	munmap(a, 2 * PAGE);
}

/*
 * A handler that never answers: the peer's READ waits in vamr; deregistration
 * cancels it and returns at once; nothing stays pinned.
 */
TEST_F(uffd, unanswered_then_dereg)
{
	uint8_t *a = map_anon(PAGE);
	struct vamr_stats g0, g1;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	double t0, took;
	int uffd, st;

	ASSERT_NE(NULL, a);
	ASSERT_EQ(0, vamr_stats(self->vfd, VAMR_STATS_GLOBAL, &g0));
	memset(a, 1, PAGE);
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, a, PAGE, ACC | VAMR_ACCESS_VA, &mr));
	ASSERT_EQ(0, madvise(a, PAGE, MADV_DONTNEED));
	usleep(50 * 1000);
	uffd = uffd_open(a, PAGE, UFFDIO_REGISTER_MODE_MISSING, 0);
	if (uffd == -EPERM || uffd == -ENOSYS) {
		ibv_dereg_mr(mr);
		SKIP(return, "userfaultfd unavailable");
	}
	ASSERT_LE(0, uffd);
	handler_start(&self->h, uffd, a, 240, -1);
	ASSERT_EQ(0, rdma_pair_post_read(&self->pair, 0, 1, self->buf, self->buf_mr->lkey,
					 (uintptr_t)a, mr->rkey, 64));
	usleep(300 * 1000);
	t0 = mono_s();
	ASSERT_EQ(0, ibv_dereg_mr(mr));
	took = mono_s() - t0;
	EXPECT_GT(1.0, took) TH_LOG("dereg with an unanswered userfault took %.3f s", took);
	st = rdma_pair_wait_send(&self->pair, 0, 10000, &wc);
	EXPECT_NE(IBV_WC_SUCCESS, st) TH_LOG("the READ of a deregistered MR succeeded");
	handler_stop(&self->h);
	close(uffd);	/* ends the fault request that still waits for the handler */
	ASSERT_EQ(0, rdma_pair_recover(&self->pair));
	ASSERT_EQ(0, vamr_stats(self->vfd, VAMR_STATS_GLOBAL, &g1));
	EXPECT_EQ(g0.counters.regions, g1.counters.regions);
	EXPECT_EQ(g0.counters.pages_pinned, g1.counters.pages_pinned);
	munmap(a, PAGE);
}

/* The same, but the process is killed with the access waiting: it exits at once. */
TEST_F(uffd, unanswered_then_sigkill)
{
	struct vamr_stats g0, g1;
	int status, i;
	double t0, took;
	pid_t pid;

	ASSERT_EQ(0, vamr_stats(self->vfd, VAMR_STATS_GLOBAL, &g0));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct rdma_pair p;
		struct ibv_mr *mr, *bmr;
		uint8_t *a = map_anon(PAGE), *b = map_anon(PAGE);
		int uffd;

		if (!a || !b || rdma_pair_open(&p, NULL))
			_exit(1);
		memset(a, 1, PAGE);
		if (rdma_pair_reg_mr(&p, a, PAGE, ACC | VAMR_ACCESS_VA, &mr) ||
		    rdma_pair_reg_mr(&p, b, PAGE, ACC, &bmr))
			_exit(2);
		madvise(a, PAGE, MADV_DONTNEED);
		usleep(50 * 1000);
		uffd = uffd_open(a, PAGE, UFFDIO_REGISTER_MODE_MISSING, 0);
		if (uffd < 0)
			_exit(3);
		rdma_pair_post_read(&p, 0, 1, b, bmr->lkey, (uintptr_t)a, mr->rkey, 64);
		pause();
		_exit(0);
	}
	usleep(800 * 1000);
	t0 = mono_s();
	ASSERT_EQ(0, kill(pid, SIGKILL));
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	took = mono_s() - t0;
	EXPECT_TRUE(WIFSIGNALED(status)) TH_LOG("child status %#x", status);
	EXPECT_GT(2.0, took) TH_LOG("the killed process took %.3f s to exit", took);
	for (i = 0; i < 300; i++) {
		ASSERT_EQ(0, vamr_stats(self->vfd, VAMR_STATS_GLOBAL, &g1));
		if (g1.counters.regions == g0.counters.regions &&
		    g1.counters.pages_pinned == g0.counters.pages_pinned)
			break;
		usleep(10 * 1000);
	}
	EXPECT_EQ(g0.counters.regions, g1.counters.regions);
	EXPECT_EQ(g0.counters.pages_pinned, g1.counters.pages_pinned);
}

TEST_HARNESS_MAIN
