// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_attack: hostile-review reproducers for VA MRs on rxe.
 *
 * span_into_uffd_dereg: a device access whose on-demand pin round starts in
 * an ordinary VMA and runs on into a userfaultfd-registered VMA. vamr decides
 * on FOLL_NOWAIT by looking at the VMA of the round's first page only
 * (then: the C pin function in src/vamr_glue.c), so rxe's responder task itself
 * waits in handle_userfault() for the process's handler, no fault request is
 * made, vamr_region_cancel() cannot wake it, and ibv_dereg_mr() waits for the
 * handler (with a handler that never answers: rxe's 50 s cleanup timeout,
 * its WARN, and a process that cannot exit).
 *
 * fault_request_keeps_exited_mm: a fault request holds a user reference on
 * the mm (mmget) for as long as the userfault it delivers is not answered.
 * When the userfaultfd is also open in another process, the owner's exit
 * does not end it: the exited process's address space stays alive until
 * that process answers or closes the userfaultfd. This is the known limit
 * documented in Documentation/vamr.rst ("Pinning"); the test checks its
 * bound: the answer ends the request, and then nothing of the exited
 * process stays (no region, no pin, no fault request running).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <sys/syscall.h>
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

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

FIXTURE(attack)
{
	struct rdma_pair pair;
	bool open;
	uint8_t *buf;
	struct ibv_mr *buf_mr;
	int vfd;
};

FIXTURE_SETUP(attack)
{
	const char *dev = rdma_pair_default_dev();
	int rc = rdma_pair_open(&self->pair, dev);

	self->vfd = -1;
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

FIXTURE_TEARDOWN(attack)
{
	if (self->buf_mr)
		ibv_dereg_mr(self->buf_mr);
	if (self->open)
		rdma_pair_close(&self->pair);
	if (self->vfd >= 0)
		close(self->vfd);
}

static uint64_t mr_fault_requests(int vfd, struct ibv_mr *mr)
{
	struct vamr_mr_query q = vamr_mr_query_of(mr);

	return vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q) ? (uint64_t)-1 : q.counters.fault_requests;
}

/*
 * MR over [A | B]: both holes at registration (so both slots are absent),
 * then A is mapped and filled by the CPU (present, not pinned) and B is
 * mapped and handed to userfaultfd (missing). The peer's 64-byte WRITE at
 * A + PAGE - 32 needs both pages: rxe's responder pins A and B in one round
 * that starts in A's VMA, so no FOLL_NOWAIT, and the responder task waits in
 * B's userfault itself. Documented: a device task never waits on a userfault
 * (a fault request does, counted in fault_requests: exactly one, for B, the
 * page the access misses, not for A, which the round pinned before it met
 * B's fault) and deregistration ends the access's wait at once: it returns
 * before the handler answers. The handler would answer after 20 s (so that
 * a slow guest, a sanitizer kernel under load, cannot blur the two); it is
 * stopped unanswered once deregistration returned, and closing the
 * userfaultfd ends the fault request.
 */
TEST_F_TIMEOUT(attack, span_into_uffd_dereg, 60)
{
	struct late_handler *h;
	uint8_t *a;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	uint64_t fr;
	double t0, took;
	int uffd, st;

	h = calloc(1, sizeof(*h));
	ASSERT_NE(NULL, h);
	a = map_anon(2 * PAGE);
	ASSERT_NE(NULL, a);
	ASSERT_EQ(0, munmap(a, 2 * PAGE));
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, a, 2 * PAGE, ACC | VAMR_ACCESS_VA, &mr));
	ASSERT_EQ(0, remap_fixed(a, 2 * PAGE));
	pattern_fill(a, PAGE, 701, 0);		/* A present; B untouched */
	uffd = uffd_missing(a + PAGE, PAGE);
	if (uffd == -EPERM || uffd == -ENOSYS) {
		ibv_dereg_mr(mr);
		munmap(a, 2 * PAGE);
		free(h);
		SKIP(return, "userfaultfd unavailable: %s", strerror(-uffd));
	}
	ASSERT_LE(0, uffd);
	h->uffd = uffd;
	h->delay_ms = 20000;
	h->seed = 702;
	h->base = a;
	ASSERT_EQ(0, pthread_create(&h->thread, NULL, late_handler_main, h));

	pattern_fill(self->buf, 64, 703, 0);
	t0 = now_s();
	ASSERT_EQ(0, rdma_pair_post_write(&self->pair, 0, 1, self->buf, self->buf_mr->lkey,
					  (uintptr_t)a + PAGE - 32, mr->rkey, 64));
	/* The access needs B: its fault reaches the handler (within 10 s, however slow). */
	while (!__atomic_load_n(&h->seen, __ATOMIC_ACQUIRE) && now_s() - t0 < 10)
		usleep(20 * 1000);
	usleep(100 * 1000);	/* a second request, if any, would come now */
	fr = mr_fault_requests(self->vfd, mr);
	TH_LOG("after %.2f s: handler saw %d fault(s), MR fault_requests %llu", now_s() - t0,
	       __atomic_load_n(&h->seen, __ATOMIC_ACQUIRE), (unsigned long long)fr);
	EXPECT_EQ(1, __atomic_load_n(&h->seen, __ATOMIC_ACQUIRE));
	/* A device task must not wait on the userfault itself; one request, for B. */
	EXPECT_EQ(1u, fr) TH_LOG("rxe's task waits on the userfault itself (no fault request), "
				 "or asked for a page it had pinned");

	t0 = now_s();
	EXPECT_EQ(0, ibv_dereg_mr(mr));
	took = now_s() - t0;
	EXPECT_EQ(0, __atomic_load_n(&h->answered, __ATOMIC_ACQUIRE))
		TH_LOG("dereg returned only after the handler answered (%.3f s)", took);
	TH_LOG("dereg with the access waiting on a userfault took %.3f s", took);
	__atomic_store_n(&h->stop, 1, __ATOMIC_RELEASE);

	st = rdma_pair_wait_send(&self->pair, 0, 10000, &wc);
	TH_LOG("WRITE completion status %d", st);
	pthread_join(h->thread, NULL);
	close(uffd);
	EXPECT_EQ(0, rdma_pair_recover(&self->pair));
	munmap(a, 2 * PAGE);
	free(h);
}

/*
 * C (a child) registers a VA MR over a released page handed to userfaultfd,
 * forks G, which keeps C's userfaultfd open and never answers, and posts a
 * READ of the page from its own QP: rxe's task has the fault delivered by a
 * fault request. C exits once that request waits in the userfault (the
 * fault's message is pending on the userfaultfd), or, without the READ,
 * after 400 ms. Once C is reaped nothing should keep its mm:
 * G's UFFDIO_COPY into it must fail with ESRCH (mmget_not_zero() fails).
 */
static void exited_mm_case(struct __test_metadata *_metadata, int post)
{
	int go[2], res[2], status, err = -1;
	pid_t c, g = -1;
	char byte = 0;

	ASSERT_EQ(0, prctl(PR_SET_CHILD_SUBREAPER, 1));
	ASSERT_EQ(0, pipe(go));
	ASSERT_EQ(0, pipe(res));
	c = fork();
	ASSERT_LE(0, c);
	if (c == 0) {
		struct rdma_pair p;
		struct ibv_mr *mr, *bmr;
		uint8_t *a = map_anon(PAGE), *b = map_anon(PAGE);
		int uffd;
		pid_t gp;

		if (!a || !b)
			_exit(10);
		if (rdma_pair_open(&p, NULL))
			_exit(11);
		memset(a, 1, PAGE);
		if (rdma_pair_reg_mr(&p, a, PAGE, ACC | VAMR_ACCESS_VA, &mr) ||
		    rdma_pair_reg_mr(&p, b, PAGE, ACC, &bmr))
			_exit(12);
		madvise(a, PAGE, MADV_DONTNEED);
		usleep(50 * 1000);
		uffd = uffd_missing(a, PAGE);
		if (uffd < 0)
			_exit(13);
		gp = fork();
		if (gp < 0)
			_exit(14);
		if (gp == 0) {
			/* G: holds C's userfaultfd; on "go", tries to fill C's page. */
			static uint8_t page[PAGE] __attribute__((aligned(4096)));
			struct uffdio_copy cp = { .dst = (uintptr_t)a, .src = (uintptr_t)page, .len = PAGE };
			char x;
			int e;

			if (read(go[0], &x, 1) != 1)
				_exit(0);
			e = ioctl(uffd, UFFDIO_COPY, &cp) ? errno : 0;
			if (write(res[1], &e, sizeof(e)) != sizeof(e))
				_exit(1);
			_exit(0);
		}
		if (post) {
			/*
			 * Exit only once the fault request waits in the userfault (it
			 * holds the mm from then on): its message is pending on the
			 * userfaultfd, however slow the guest.
			 */
			struct pollfd pfd = { .fd = uffd, .events = POLLIN };

			rdma_pair_post_read(&p, 0, 1, b, bmr->lkey, (uintptr_t)a, mr->rkey, 64);
			if (poll(&pfd, 1, 10000) != 1)
				_exit(16);
		} else {
			usleep(400 * 1000);
		}
		if (write(res[1], &gp, sizeof(gp)) != sizeof(gp))
			_exit(15);
		_exit(0);	/* exit with the READ waiting: closes the uverbs file, deregisters */
	}
	/* C reports G's pid, then exits. */
	ASSERT_EQ((ssize_t)sizeof(g), read(res[0], &g, sizeof(g)));
	ASSERT_EQ(c, waitpid(c, &status, 0));
	ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) TH_LOG("C status %#x", status);
	usleep(300 * 1000);
	ASSERT_EQ(1, write(go[1], &byte, 1));
	ASSERT_EQ((ssize_t)sizeof(err), read(res[0], &err, sizeof(err)));
	ASSERT_EQ(g, waitpid(g, &status, 0));
	TH_LOG("UFFDIO_COPY into the exited process: %s", err ? strerror(err) : "succeeded");
	if (post) {
		/* The documented limit: the request held the mm; the answer ends it. */
		struct vamr_stats g1;
		int fd = vamr_open(), i;

		EXPECT_EQ(0, err) TH_LOG("the answer did not reach the waiting fault request");
		ASSERT_LE(0, fd);
		for (i = 0; i < 300; i++) {
			ASSERT_EQ(0, vamr_stats(fd, VAMR_STATS_GLOBAL, &g1));
			if (!g1.counters.regions && !g1.counters.pages_pinned)
				break;
			usleep(10 * 1000);
		}
		EXPECT_EQ(0u, g1.counters.regions);
		EXPECT_EQ(0u, g1.counters.pages_pinned);
		close(fd);
	} else {
		EXPECT_EQ(ESRCH, err) TH_LOG("the exited process's mm is still alive");
	}
	close(go[0]);
	close(go[1]);
	close(res[0]);
	close(res[1]);
}

TEST(fault_request_keeps_exited_mm)
{
	exited_mm_case(_metadata, 1);
}

/* The same without the READ: C's mm goes with C (shows the test can pass). */
TEST(exited_mm_without_fault_request)
{
	exited_mm_case(_metadata, 0);
}

TEST_HARNESS_MAIN
