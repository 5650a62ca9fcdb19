// SPDX-License-Identifier: GPL-2.0
/*
 * vamr_attack: hostile-review reproducers for vamr's in-kernel API, driven
 * through tests/kapi/vamr_api_test.ko from a context that is not the region's
 * owner (a child after fork, the way a driver calls from another process).
 *
 * nonowner_wait_is_killable: an access that has a userfault delivered by a
 *   fault request waits for it in TASK_UNINTERRUPTIBLE (Region::wait_for_fault,
 *   src/region.rs), so a caller in process context cannot be killed while the
 *   owner's handler does not answer.
 * nonowner_prefetch_errno: vamr_region_prefetch() of a userfaultfd page from
 *   a non-owner returns -EBUSY, an errno include/linux/vamr.h does not list
 *   (the FOLL_NOWAIT "would wait" of the GUP call (src/pin.rs, GupPlan) leaks out of fill()).
 * fault_requests_starve_verify: fault requests run on vamr's one global
 *   workqueue and stay there for as long as the userfaultfd handler does not
 *   answer (cancelling the access does not end them); once max_active of them
 *   wait, no other work item of the module runs, so the verify pass of every
 *   other process stops: the pages it released stay pinned. (The accesses
 *   come from threads of two child processes: a non-owner is a caller in
 *   another mm, and a thread costs far less than a process, whose fork copies
 *   the table of the 1120 open files.)
 * access_errno_when_unregistered: VAMR_IOC_ACCESS racing with
 *   VAMR_IOC_UNREGISTER of its region (another thread) fails with ECANCELED
 *   (copy_bounced's cancellation check), or one of the other errnos struct
 *   vamr_access lists; nothing else.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
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
#include "vamr_lib.h"
#include "uffd_util.h"
#include "../kapi/vamr_api_test.h"

#define PAGE 4096ul
#define RW (VAMR_ACCESS_READ | VAMR_ACCESS_WRITE)

static int api(int fd, unsigned long cmd, struct vamr_api_test_arg *a)
{
	return ioctl(fd, cmd, a) ? -errno : 0;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

FIXTURE(nonowner)
{
	int fd;			/* /dev/vamr_api_test, one region */
	int uffd;
	uint8_t *a;		/* the region: one page, released, handed to userfaultfd */
	struct late_handler *h;
};

FIXTURE_SETUP(nonowner)
{
	struct vamr_api_test_arg arg = { 0 };

	self->uffd = -1;
	self->h = NULL;
	self->fd = open("/dev/vamr_api_test", O_RDWR | O_CLOEXEC);
	if (self->fd < 0 && errno == ENOENT)
		SKIP(return, "vamr_api_test.ko not loaded");
	ASSERT_LE(0, self->fd);
	self->a = map_anon(PAGE);
	ASSERT_NE(NULL, self->a);
	memset(self->a, 0x11, PAGE);
	arg.addr = (uintptr_t)self->a;
	arg.len = PAGE;
	arg.access = RW;
	ASSERT_EQ(0, api(self->fd, VAMR_API_TEST_CREATE, &arg));
	/* Release the page (the verify pass drops the pin), then give it to userfaultfd. */
	ASSERT_EQ(0, madvise(self->a, PAGE, MADV_DONTNEED));
	usleep(50 * 1000);
	self->uffd = uffd_missing(self->a, PAGE);
	if (self->uffd == -EPERM || self->uffd == -ENOSYS)
		SKIP(return, "userfaultfd unavailable: %s", strerror(-self->uffd));
	ASSERT_LE(0, self->uffd);
	self->h = calloc(1, sizeof(*self->h));
	ASSERT_NE(NULL, self->h);
	self->h->uffd = self->uffd;
	self->h->base = self->a;
	self->h->seed = 801;
}

FIXTURE_TEARDOWN(nonowner)
{
	if (self->h) {
		if (self->h->thread) {
			__atomic_store_n(&self->h->stop, 1, __ATOMIC_RELEASE);
			pthread_join(self->h->thread, NULL);
		}
		free(self->h);
	}
	if (self->uffd >= 0)
		close(self->uffd);
	if (self->fd >= 0)
		close(self->fd);
	if (self->a)
		munmap(self->a, PAGE);
}

/*
 * A child (another mm, so not the owner) reads the region through the API:
 * the page needs a userfault, which vamr delivers with a fault request and
 * waits for. The child is killed while it waits: it must die promptly (the
 * header promises fatal-signal checks, the documentation that every long
 * operation is cancellable). The handler answers after 4 s, so the test ends
 * either way.
 */
TEST_F(nonowner, nonowner_wait_is_killable)
{
	double t0, took = -1;
	int status = 0;
	pid_t pid, r;

	self->h->delay_ms = 4000;
	ASSERT_EQ(0, pthread_create(&self->h->thread, NULL, late_handler_main, self->h));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		static uint8_t out[64];
		struct vamr_api_test_arg arg = {
			.addr = (uintptr_t)self->a, .len = sizeof(out), .buf = (uintptr_t)out,
		};

		_exit(api(self->fd, VAMR_API_TEST_READ, &arg) ? 2 : 0);
	}
	usleep(400 * 1000);
	EXPECT_EQ(1, __atomic_load_n(&self->h->seen, __ATOMIC_ACQUIRE))
		TH_LOG("the fault did not reach the handler");
	t0 = now_s();
	ASSERT_EQ(0, kill(pid, SIGKILL));
	do {
		r = waitpid(pid, &status, WNOHANG);
		if (r == pid) {
			took = now_s() - t0;
			break;
		}
		usleep(10 * 1000);
	} while (now_s() - t0 < 2.0);
	if (took < 0) {
		/* Still there: reap it once the handler answered. */
		ASSERT_EQ(pid, waitpid(pid, &status, 0));
		took = now_s() - t0;
	}
	EXPECT_GT(1.5, took) TH_LOG("the killed non-owner caller took %.3f s to die", took);
	EXPECT_TRUE(WIFSIGNALED(status)) TH_LOG("child status %#x", status);
}

/*
 * A child prefetches the userfaultfd page through the API (flags 0: pin for
 * reading, faulting in). Whatever vamr decides to do about the userfault, the
 * result must be one of the header's: pages pinned, -EFAULT, -ECANCELED,
 * -EINTR, -ENOMEM (-EINVAL, -EACCES do not apply here).
 */
TEST_F(nonowner, nonowner_prefetch_errno)
{
	int status = 0;
	pid_t pid;

	self->h->delay_ms = 0;
	ASSERT_EQ(0, pthread_create(&self->h->thread, NULL, late_handler_main, self->h));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct vamr_api_test_arg arg = {
			.addr = (uintptr_t)self->a, .len = PAGE, .op = 0,
		};
		int rc = api(self->fd, VAMR_API_TEST_PREFETCH, &arg);

		_exit(rc < 0 ? -rc : 0);
	}
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status));
	int err = WEXITSTATUS(status);

	TH_LOG("non-owner prefetch: %s", err ? strerror(err) : "ok");
	EXPECT_TRUE(err == 0 || err == EFAULT || err == ECANCELED || err == EINTR ||
		    err == ENOMEM) TH_LOG("undocumented errno %d (%s)", err, strerror(err));
}

struct access_thread {
	int fd;
	uint32_t handle;
	uint8_t *region, *buf;
	size_t len;
	int rc;
};

static void *access_main(void *arg)
{
	struct access_thread *t = arg;

	t->rc = vamr_read(t->fd, t->handle, t->region, t->buf, t->len);
	return NULL;
}

/*
 * An ACCESS racing with UNREGISTER ends with a documented errno. With
 * on_demand, the region's memory is replaced (and written by the CPU) after
 * registration, so the copy pins on demand, one round per batch, and the
 * teardown finds it in the slow path too (which must then see an empty pin
 * table and a dead region, not crash).
 */
static void access_races_unregister(struct __test_metadata *_metadata, int on_demand)
{
	/* On demand: 8 MiB and 12 tries keep it within the harness's 30 s under TCG. */
	const size_t len = on_demand ? 8ul << 20 : 32ul << 20;
	const int tries = on_demand ? 12 : 24;
	struct access_thread t = { 0 };
	int try, fd = vamr_open(), failed = 0, cut = 0;
	pthread_t th;

	ASSERT_LE(0, fd);
	t.fd = fd;
	t.len = len;
	t.region = map_anon(len);
	t.buf = map_anon(len);
	ASSERT_NE(NULL, t.region);
	ASSERT_NE(NULL, t.buf);
	memset(t.region, 0x66, len);
	memset(t.buf, 0, len);
	/*
	 * The copy stops with ECANCELED or EFAULT depending on where the
	 * teardown finds it: try (bounded) until an undocumented errno shows.
	 */
	for (try = 0; try < tries && !failed; try++) {
		ASSERT_EQ(0, vamr_register(fd, t.region, len, RW, 7, &t.handle));
		if (on_demand) {
			ASSERT_EQ(0, remap_fixed(t.region, len));
			memset(t.region, 0x67, len);
		}
		t.rc = 1;
		ASSERT_EQ(0, pthread_create(&th, NULL, access_main, &t));
		usleep(10 * 1000 + (try % 8) * 10 * 1000);
		ASSERT_EQ(0, vamr_unregister(fd, t.handle));
		pthread_join(th, NULL);
		if (t.rc) {
			cut++;
			/*
			 * struct vamr_access: ENOENT, EINVAL, EACCES, EFAULT, EPERM, EAGAIN,
			 * ECANCELED, ENOMEM, EINTR.
			 */
			if (!(t.rc == -ENOENT || t.rc == -EFAULT || t.rc == -EAGAIN ||
			      t.rc == -ECANCELED || t.rc == -EINTR || t.rc == -ENOMEM)) {
				failed = 1;
				TH_LOG("try %d: ACCESS racing with UNREGISTER: %s", try, strerror(-t.rc));
			}
		} else {
			/* Not cut short: every byte is what the CPU wrote last. */
			EXPECT_EQ(0, memcmp(t.buf, t.region, len));
		}
	}
	TH_LOG("%d tries, %d accesses cut short", try, cut);
	EXPECT_EQ(0, failed) TH_LOG("undocumented errno from VAMR_IOC_ACCESS");
	munmap(t.region, len);
	munmap(t.buf, len);
	close(fd);
}

TEST(access_errno_when_unregistered)
{
	access_races_unregister(_metadata, 0);
}

TEST(access_pinning_on_demand_when_unregistered)
{
	access_races_unregister(_metadata, 1);
}

/*
 * Enough waiting fault requests to fill vamr's workqueue (unbound, default
 * max_active 1024, split over the guest's two NUMA nodes): one per CPU over
 * what a node takes, from non-owners (threads of two child processes, one
 * on each CPU) reading one region each over a page whose userfault is not
 * answered yet. Then another region of this process is released with
 * MADV_DONTNEED: the verify pass must drop its pin (as it does in well under
 * a second otherwise). The fault is answered at the end, which ends every
 * request.
 */
#define SAT_CHILDREN 1120	/* readers: one region and one thread each */
#define SAT_PROCS 2		/* child processes, one per CPU, SAT_CHILDREN / 2 threads each */

FIXTURE(sat)
{
	int fds[SAT_CHILDREN];
	pid_t pids[SAT_PROCS];
	int nfds, npids, uffd, vfd;
	uint8_t *u, *p;
};

struct sat_reader {
	int fd;
	uint8_t *u;
};

/* One non-owner read of the userfaultfd page through the API; waits for its fault request. */
static void *sat_reader_main(void *arg)
{
	struct sat_reader *r = arg;
	static __thread uint8_t out[64];
	struct vamr_api_test_arg a = {
		.addr = (uintptr_t)r->u, .len = sizeof(out), .buf = (uintptr_t)out,
	};

	api(r->fd, VAMR_API_TEST_READ, &a);
	return NULL;
}

/*
 * Child `c` of the sat test: on CPU c, one thread per region fds[i] with
 * i % SAT_PROCS == c, each reading the page; exits once all have returned
 * (the fault is answered at the end of the test). Exit status 2 when a thread
 * could not be started.
 */
static void sat_child(int c, const int *fds, uint8_t *u)
{
	static struct sat_reader rd[SAT_CHILDREN];
	static pthread_t th[SAT_CHILDREN];
	pthread_attr_t attr;
	cpu_set_t set;
	int i, n = 0, failed = 0;

	CPU_ZERO(&set);
	CPU_SET(c, &set);
	sched_setaffinity(0, sizeof(set), &set);
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 << 10);
	for (i = c; i < SAT_CHILDREN; i += SAT_PROCS) {
		rd[n] = (struct sat_reader){ .fd = fds[i], .u = u };
		if (pthread_create(&th[n], &attr, sat_reader_main, &rd[n])) {
			failed = 1;
			break;
		}
		n++;
	}
	for (i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	_exit(failed ? 2 : 0);
}

FIXTURE_SETUP(sat)
{
	self->nfds = self->npids = 0;
	self->uffd = self->vfd = -1;
	self->u = self->p = NULL;
}

FIXTURE_TEARDOWN(sat)
{
	static uint8_t page[PAGE] __attribute__((aligned(4096)));
	int i;

	if (self->uffd >= 0) {
		struct uffdio_copy c = { .dst = (uintptr_t)self->u, .src = (uintptr_t)page, .len = PAGE };

		ioctl(self->uffd, UFFDIO_COPY, &c);	/* ends every waiting fault request */
	}
	for (i = 0; i < self->npids; i++)
		waitpid(self->pids[i], NULL, 0);
	for (i = 0; i < self->nfds; i++)
		close(self->fds[i]);
	if (self->uffd >= 0)
		close(self->uffd);
	if (self->vfd >= 0)
		close(self->vfd);
	if (self->u)
		munmap(self->u, PAGE);
	if (self->p)
		munmap(self->p, 2 * PAGE);
}

TEST_F_TIMEOUT(sat, fault_requests_starve_verify, 240)
{
	struct rlimit rl = { .rlim_cur = 4096, .rlim_max = 4096 };
	struct vamr_api_test_arg arg = { 0 };
	struct pollfd pfd;
	struct uffd_msg msg;
	int i, seen = 0, fd, last_growth;
	uint64_t pinned;
	uint32_t h;
	double t0;

	fd = open("/dev/vamr_api_test", O_RDWR | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		SKIP(return, "vamr_api_test.ko not loaded");
	ASSERT_LE(0, fd);
	close(fd);
	ASSERT_EQ(0, setrlimit(RLIMIT_NOFILE, &rl));
	self->u = map_anon(PAGE);
	ASSERT_NE(NULL, self->u);
	memset(self->u, 0x22, PAGE);
	for (i = 0; i < SAT_CHILDREN; i++) {
		fd = open("/dev/vamr_api_test", O_RDWR | O_CLOEXEC);
		ASSERT_LE(0, fd);
		self->fds[self->nfds++] = fd;
		arg.addr = (uintptr_t)self->u;
		arg.len = PAGE;
		arg.access = RW;
		ASSERT_EQ(0, api(fd, VAMR_API_TEST_CREATE, &arg));
	}
	/* Release the page (the verify pass drops every pin), then hand it to userfaultfd. */
	ASSERT_EQ(0, madvise(self->u, PAGE, MADV_DONTNEED));
	usleep(1000 * 1000);
	self->uffd = uffd_missing(self->u, PAGE);
	if (self->uffd == -EPERM || self->uffd == -ENOSYS)
		SKIP(return, "userfaultfd unavailable: %s", strerror(-self->uffd));
	ASSERT_LE(0, self->uffd);

	for (i = 0; i < SAT_PROCS; i++) {
		pid_t pid = fork();

		ASSERT_LE(0, pid);
		if (pid == 0)
			sat_child(i, self->fds, self->u);
		self->pids[self->npids++] = pid;
	}
	/* Count the faults that reach the handler until no more come for 3 s. */
	pfd = (struct pollfd){ .fd = self->uffd, .events = POLLIN };
	t0 = now_s();
	last_growth = 0;
	while (now_s() - t0 < 60 && (int)((now_s() - t0) * 10) - last_growth < 30) {
		if (poll(&pfd, 1, 100) > 0 && read(self->uffd, &msg, sizeof(msg)) == sizeof(msg) &&
		    msg.event == UFFD_EVENT_PAGEFAULT) {
			seen++;
			last_growth = (int)((now_s() - t0) * 10);
		}
	}
	TH_LOG("%d of %d fault requests reached the handler", seen, SAT_CHILDREN);

	/* Another region of this process, released: its pin must go. */
	self->vfd = vamr_open();
	ASSERT_LE(0, self->vfd);
	self->p = map_anon(2 * PAGE);
	ASSERT_NE(NULL, self->p);
	memset(self->p, 0x33, 2 * PAGE);
	ASSERT_EQ(0, vamr_register(self->vfd, self->p, 2 * PAGE, RW, 1, &h));
	ASSERT_EQ(2u, vamr_wait_pinned(self->vfd, h, 2, 1000));
	ASSERT_EQ(0, madvise(self->p, 2 * PAGE, MADV_DONTNEED));
	pinned = vamr_wait_pinned(self->vfd, h, 0, 3000);
	EXPECT_EQ(0u, pinned) TH_LOG("the verify pass did not run within 3 s: %llu pages still pinned",
				     (unsigned long long)pinned);
	/* Answer the fault: every request ends, and the verify pass runs. */
	{
		static uint8_t page[PAGE] __attribute__((aligned(4096)));
		struct uffdio_copy c = { .dst = (uintptr_t)self->u, .src = (uintptr_t)page, .len = PAGE };

		EXPECT_EQ(0, ioctl(self->uffd, UFFDIO_COPY, &c));
	}
	for (i = 0; i < self->npids; i++)
		waitpid(self->pids[i], NULL, 0);
	self->npids = 0;
	pinned = vamr_wait_pinned(self->vfd, h, 0, 5000);
	TH_LOG("after the handler answered: %llu pages pinned", (unsigned long long)pinned);
	EXPECT_EQ(0, vamr_unregister(self->vfd, h));
}

TEST_HARNESS_MAIN
