// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_uffd_wait: every wait on user space ends when the MR or region is
 * cancelled, and no user's blocked work holds up another's.
 *
 * The trap in each test: memory registered (a VA MR or a /dev/vamr region),
 * then handed to a MISSING-mode userfaultfd and dropped with MADV_DONTNEED,
 * with a handler that reads the faults and never answers. Each hostile side
 * runs as uid 65534 (with vm.unprivileged_userfaultfd=1, set for the test).
 *
 * sync_advise_dereg: thread A's synchronous ibv_advise_mr(PREFETCH_WRITE,
 * FLUSH) waits for the unanswered fault; thread B's ibv_dereg_mr() must end
 * that wait and return within 1 s, with no WARN or hung task in the log.
 * dev_prefetch_unregister: the same for /dev/vamr PREFETCH vs UNREGISTER.
 * fault_requests_per_mm: 20 threads advise 20 VA MRs of one process: 16
 * fault requests wait, the other 4 advices fail with EAGAIN at once, and
 * deregistration ends the 16 waits.
 * async_advise_flood: uid 65534 queues 4400 asynchronous advices on its
 * trapped MR; uid 65533's RDMA WRITEs on its own QPs keep their latency
 * while that advice is outstanding: none times out, and the median stays
 * within 2x of the slower of two quiet phases of the same run (before the
 * flood and after the attacker exited).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "kmsg_util.h"
#include "mm_util.h"
#include "pattern.h"
#include "rdma_pair.h"
#include "sys_guard.h"
#include "unpriv_util.h"
#include "uffd_util.h"
#include "vamr_lib.h"

#define ATTACKER 65534
#define VICTIM 65533
#define ACC (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#define TRAP_PAGES 4
#define FLOOD 4400
#define MRS 20
#define FAULT_REQUESTS_PER_MM 16	/* Documentation/vamr.rst, "Security" */
#define LAT_WRITES 200

/* Exported by libibverbs for providers (IBVERBS_PRIVATE_34): see rdma_va.c. */
int ibv_cmd_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
		      struct ibv_sge *sg_list, uint32_t num_sge);

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* What the children report, in shared memory. */
struct shared {
	int step;		/* first failed check of a child, 0 if none */
	char msg[256];
	double dereg_s;		/* the deregistration's time */
	int blocked_ret;	/* what the waiting call returned */
	int early;		/* calls that returned at once (fault_requests_per_mm) */
	int early_eagain;	/* ... of them with EAGAIN */
	int late;		/* calls that returned after deregistration */
	int flood_ok, flood_other;
	uint64_t fault_requests;
	double quiet_ms, loaded_ms, after_ms, max_ms;
	int timeouts;
	int quiet_done, flood_done, loaded_done, attacker_done;
};

#define CHILD_CHECK(_sh, _step, _cond, _fmt, ...) do {					\
	if (!(_cond)) {									\
		(_sh)->step = (_step);							\
		snprintf((_sh)->msg, sizeof((_sh)->msg), _fmt, ##__VA_ARGS__);		\
		_exit(_step);								\
	}										\
} while (0)

static struct shared *shared_new(void)
{
	void *p = mmap(NULL, sizeof(struct shared), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* Waits until *flag is set or @sec seconds passed; whether it was set. */
static bool wait_flag(int *flag, double sec)
{
	double t0 = now_s();

	while (!__atomic_load_n(flag, __ATOMIC_ACQUIRE)) {
		if (now_s() - t0 > sec)
			return false;
		usleep(10 * 1000);
	}
	return true;
}

/* The set-up every test needs: devices open to others, unprivileged userfaultfd. */
static int open_up(struct __test_metadata *_metadata)
{
	char uv[64];

	uverbs_path(uv, sizeof(uv));
	if (!uv[0])
		return -ENODEV;
	if (access("/dev/vamr", F_OK))
		return -ENODEV;
	ASSERT_EQ(0, dev_open_up(uv));
	ASSERT_EQ(0, dev_open_up("/dev/vamr"));
	ASSERT_EQ(0, root_open_up());
	ASSERT_EQ(0, sys_guard_set("/proc/sys/vm/unprivileged_userfaultfd", "1"));
	return 0;
}

/* Forks @fn(sh) as @uid; the pid. */
static pid_t spawn_as(uid_t uid, void (*fn)(struct shared *), struct shared *sh)
{
	pid_t pid = fork();

	if (pid == 0) {
		CHILD_CHECK(sh, 99, !become_uid(uid), "cannot become uid %d", uid);
		fn(sh);
		_exit(0);
	}
	return pid;
}

/* Waits up to @sec for @pid; its exit status, or -1 (killed) after the time. */
static int reap(pid_t pid, double sec)
{
	double t0 = now_s();
	int status;

	while (waitpid(pid, &status, WNOHANG) == 0) {
		if (now_s() - t0 > sec) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			return -1;
		}
		usleep(20 * 1000);
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Registered memory made a trap: MISSING userfaultfd, pages dropped, nobody answers. */
struct trap {
	int uffd;
	struct late_handler h;
};

static int trap_arm(struct trap *t, uint8_t *a, size_t len)
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

static void trap_release(struct trap *t)
{
	__atomic_store_n(&t->h.stop, 1, __ATOMIC_RELEASE);
	pthread_join(t->h.thread, NULL);
	close(t->uffd);
}

struct advise_call {
	struct ibv_pd *pd;
	struct ibv_sge sge;
	uint32_t flags;
	int ret;
	int done;
	double took;
};

static void *advise_thread(void *arg)
{
	struct advise_call *c = arg;
	double t0 = now_s();

	c->ret = ibv_cmd_advise_mr(c->pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, c->flags,
				   &c->sge, 1);
	c->took = now_s() - t0;
	__atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void sync_advise_child(struct shared *sh)
{
	size_t len = TRAP_PAGES * PAGE;
	uint8_t *a = map_anon(len);
	struct advise_call c = { .flags = IBV_ADVISE_MR_FLAG_FLUSH };
	struct rdma_pair p;
	struct ibv_mr *mr;
	struct trap *t = calloc(1, sizeof(*t));
	pthread_t th;
	double t0;
	int ret;

	CHILD_CHECK(sh, 1, a && t, "mmap");
	ret = rdma_pair_open(&p, NULL);
	CHILD_CHECK(sh, 2, !ret, "rdma_pair_open: %s", strerror(-ret));
	pattern_fill(a, len, 31, 0);
	ret = rdma_pair_reg_mr(&p, a, len, ACC | VAMR_ACCESS_VA, &mr);
	CHILD_CHECK(sh, 3, !ret, "VA MR: %s", strerror(-ret));
	ret = trap_arm(t, a, len);
	CHILD_CHECK(sh, 4, !ret, "userfaultfd: %s", strerror(-ret));
	c.pd = p.pd;
	c.sge = (struct ibv_sge){ .addr = (uintptr_t)a, .length = len, .lkey = mr->lkey };
	CHILD_CHECK(sh, 5, !pthread_create(&th, NULL, advise_thread, &c), "thread");
	CHILD_CHECK(sh, 6, wait_flag(&t->h.seen, 10), "the advice raised no userfault in 10 s");
	usleep(200 * 1000);
	CHILD_CHECK(sh, 7, !__atomic_load_n(&c.done, __ATOMIC_ACQUIRE),
		    "the advice returned %d before deregistration", c.ret);
	t0 = now_s();
	ret = ibv_dereg_mr(mr);
	sh->dereg_s = now_s() - t0;
	CHILD_CHECK(sh, 8, !ret, "dereg: %s", strerror(ret));
	CHILD_CHECK(sh, 9, wait_flag(&c.done, 5), "the advice still waits 5 s after dereg");
	pthread_join(th, NULL);
	sh->blocked_ret = c.ret;
	trap_release(t);
	CHILD_CHECK(sh, 10, !rdma_pair_close(&p), "close");
}

struct prefetch_call {
	int vfd;
	uint32_t handle;
	void *addr;
	size_t len;
	int ret;
	int done;
};

static void *prefetch_thread(void *arg)
{
	struct prefetch_call *c = arg;

	c->ret = vamr_prefetch(c->vfd, c->handle, c->addr, c->len, NULL);
	__atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void dev_prefetch_child(struct shared *sh)
{
	size_t len = TRAP_PAGES * PAGE;
	uint8_t *a = map_anon(len);
	struct trap *t = calloc(1, sizeof(*t));
	struct prefetch_call c = { .addr = a, .len = len };
	pthread_t th;
	double t0;
	int ret;

	CHILD_CHECK(sh, 1, a && t, "mmap");
	c.vfd = vamr_open();
	CHILD_CHECK(sh, 2, c.vfd >= 0, "open /dev/vamr: %s", strerror(-c.vfd));
	pattern_fill(a, len, 32, 0);
	ret = vamr_register(c.vfd, a, len, VAMR_ACCESS_READ | VAMR_ACCESS_WRITE, 0, &c.handle);
	CHILD_CHECK(sh, 3, !ret, "register: %s", strerror(-ret));
	ret = trap_arm(t, a, len);
	CHILD_CHECK(sh, 4, !ret, "userfaultfd: %s", strerror(-ret));
	CHILD_CHECK(sh, 5, !pthread_create(&th, NULL, prefetch_thread, &c), "thread");
	CHILD_CHECK(sh, 6, wait_flag(&t->h.seen, 10), "the prefetch raised no userfault in 10 s");
	usleep(200 * 1000);
	CHILD_CHECK(sh, 7, !__atomic_load_n(&c.done, __ATOMIC_ACQUIRE),
		    "the prefetch returned %d before UNREGISTER", c.ret);
	t0 = now_s();
	ret = vamr_unregister(c.vfd, c.handle);
	sh->dereg_s = now_s() - t0;
	CHILD_CHECK(sh, 8, !ret, "unregister: %s", strerror(-ret));
	CHILD_CHECK(sh, 9, wait_flag(&c.done, 5), "the prefetch still waits 5 s after UNREGISTER");
	pthread_join(th, NULL);
	sh->blocked_ret = c.ret;
	trap_release(t);
	close(c.vfd);
}

static void per_mm_child(struct shared *sh)
{
	uint8_t *a = map_anon(MRS * PAGE);
	struct advise_call *c = calloc(MRS, sizeof(*c));
	struct trap *t = calloc(1, sizeof(*t));
	struct ibv_mr *mr[MRS];
	pthread_t th[MRS];
	struct rdma_pair p;
	double t0;
	int i, ret;

	CHILD_CHECK(sh, 1, a && c && t, "mmap");
	ret = rdma_pair_open(&p, NULL);
	CHILD_CHECK(sh, 2, !ret, "rdma_pair_open: %s", strerror(-ret));
	pattern_fill(a, MRS * PAGE, 33, 0);
	for (i = 0; i < MRS; i++) {
		ret = rdma_pair_reg_mr(&p, a + i * PAGE, PAGE, ACC | VAMR_ACCESS_VA, &mr[i]);
		CHILD_CHECK(sh, 3, !ret, "VA MR %d: %s", i, strerror(-ret));
	}
	ret = trap_arm(t, a, MRS * PAGE);
	CHILD_CHECK(sh, 4, !ret, "userfaultfd: %s", strerror(-ret));
	for (i = 0; i < MRS; i++) {
		c[i] = (struct advise_call){ .pd = p.pd, .flags = IBV_ADVISE_MR_FLAG_FLUSH };
		c[i].sge = (struct ibv_sge){ (uintptr_t)(a + i * PAGE), PAGE, mr[i]->lkey };
		CHILD_CHECK(sh, 5, !pthread_create(&th[i], NULL, advise_thread, &c[i]), "thread");
	}
	usleep(2000 * 1000);
	for (i = 0; i < MRS; i++) {
		if (__atomic_load_n(&c[i].done, __ATOMIC_ACQUIRE)) {
			sh->early++;
			sh->early_eagain += c[i].ret == EAGAIN;
		}
	}
	t0 = now_s();
	for (i = 0; i < MRS; i++)
		CHILD_CHECK(sh, 6, !ibv_dereg_mr(mr[i]), "dereg %d", i);
	sh->dereg_s = now_s() - t0;
	for (i = 0; i < MRS; i++) {
		CHILD_CHECK(sh, 7, wait_flag(&c[i].done, 5), "advice %d waits after dereg", i);
		pthread_join(th[i], NULL);
	}
	for (i = 0; i < MRS; i++)
		sh->late += c[i].ret == ECANCELED;
	trap_release(t);
	CHILD_CHECK(sh, 8, !rdma_pair_close(&p), "close");
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Median latency (ms) of LAT_WRITES 4 KiB RDMA WRITEs; counts timeouts, keeps the maximum. */
static double write_latency(struct shared *sh, struct rdma_pair *p, uint8_t *src,
			    struct ibv_mr *smr, uint8_t *dst, struct ibv_mr *dmr)
{
	static double lat[LAT_WRITES];
	int i;

	for (i = 0; i < LAT_WRITES; i++) {
		double t0 = now_s();
		int ret;

		pattern_fill(src, PAGE, 40 + i, 0);
		ret = rdma_pair_write_sync(p, 0, src, smr->lkey, (uintptr_t)dst, dmr->rkey, PAGE,
					   2000);
		lat[i] = (now_s() - t0) * 1000;
		if (lat[i] > sh->max_ms)
			sh->max_ms = lat[i];
		if (ret) {
			sh->timeouts++;
			CHILD_CHECK(sh, 20, !rdma_pair_recover(p), "recover");
			continue;
		}
		CHILD_CHECK(sh, 21, pattern_check(dst, PAGE, 40 + i, 0) == PATTERN_OK,
			    "write %d: wrong bytes at the target", i);
	}
	qsort(lat, LAT_WRITES, sizeof(lat[0]), cmp_double);
	return lat[LAT_WRITES / 2];
}

static void victim_child(struct shared *sh)
{
	uint8_t *src = map_anon(PAGE), *dst = map_anon(PAGE);
	struct ibv_mr *smr, *dmr;
	struct rdma_pair p;
	int ret;

	CHILD_CHECK(sh, 11, src && dst, "mmap");
	ret = rdma_pair_open(&p, NULL);
	CHILD_CHECK(sh, 12, !ret, "rdma_pair_open: %s", strerror(-ret));
	CHILD_CHECK(sh, 13, !rdma_pair_reg_mr(&p, src, PAGE, ACC, &smr), "MR");
	CHILD_CHECK(sh, 14, !rdma_pair_reg_mr(&p, dst, PAGE, ACC, &dmr), "MR");
	sh->quiet_ms = write_latency(sh, &p, src, smr, dst, dmr);
	__atomic_store_n(&sh->quiet_done, 1, __ATOMIC_RELEASE);
	CHILD_CHECK(sh, 15, wait_flag(&sh->flood_done, 120), "the flood did not end");
	sh->loaded_ms = write_latency(sh, &p, src, smr, dst, dmr);
	__atomic_store_n(&sh->loaded_done, 1, __ATOMIC_RELEASE);
	/* Quiet again once the attacker is gone: the same run's second reference. */
	CHILD_CHECK(sh, 16, wait_flag(&sh->attacker_done, 120), "the attacker did not end");
	sh->after_ms = write_latency(sh, &p, src, smr, dst, dmr);
	ibv_dereg_mr(smr);
	ibv_dereg_mr(dmr);
	rdma_pair_close(&p);
}

static void flood_child(struct shared *sh)
{
	size_t len = TRAP_PAGES * PAGE;
	uint8_t *a = map_anon(len);
	struct trap *t = calloc(1, sizeof(*t));
	struct vamr_mr_query q;
	struct ibv_mr *mr;
	struct ibv_sge sge;
	struct rdma_pair p;
	double t0;
	int i, ret, vfd;

	CHILD_CHECK(sh, 1, a && t, "mmap");
	ret = rdma_pair_open(&p, NULL);
	CHILD_CHECK(sh, 2, !ret, "rdma_pair_open: %s", strerror(-ret));
	vfd = vamr_open();
	CHILD_CHECK(sh, 3, vfd >= 0, "open /dev/vamr");
	pattern_fill(a, len, 34, 0);
	ret = rdma_pair_reg_mr(&p, a, len, ACC | VAMR_ACCESS_VA, &mr);
	CHILD_CHECK(sh, 4, !ret, "VA MR: %s", strerror(-ret));
	ret = trap_arm(t, a, len);
	CHILD_CHECK(sh, 5, !ret, "userfaultfd: %s", strerror(-ret));
	sge = (struct ibv_sge){ .addr = (uintptr_t)a, .length = len, .lkey = mr->lkey };
	for (i = 0; i < FLOOD; i++) {
		ret = ibv_cmd_advise_mr(p.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &sge, 1);
		if (!ret)
			sh->flood_ok++;
		else
			sh->flood_other++;
	}
	usleep(500 * 1000);
	q = vamr_mr_query_of(mr);
	CHILD_CHECK(sh, 6, !vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q), "MR_QUERY");
	sh->fault_requests = q.counters.fault_requests;
	__atomic_store_n(&sh->flood_done, 1, __ATOMIC_RELEASE);
	/* The advice stays blocked while the victim measures. */
	CHILD_CHECK(sh, 7, wait_flag(&sh->loaded_done, 120), "the victim did not finish");
	t0 = now_s();
	ret = ibv_dereg_mr(mr);
	sh->dereg_s = now_s() - t0;
	CHILD_CHECK(sh, 8, !ret, "dereg: %s", strerror(ret));
	trap_release(t);
	close(vfd);
	CHILD_CHECK(sh, 9, !rdma_pair_close(&p), "close");
	__atomic_store_n(&sh->attacker_done, 1, __ATOMIC_RELEASE);
}

#define SETUP(sh, kmsg) do {								\
	int _r;										\
	sh = shared_new();								\
	ASSERT_NE(NULL, sh);								\
	_r = open_up(_metadata);							\
	if (_r == -ENODEV)								\
		SKIP(return, "no RDMA device %s or no /dev/vamr", rdma_pair_default_dev()); \
	kmsg = kmsg_open();								\
} while (0)

/* The tests run children and need no state of their own: a fixture only for TEST_F_TIMEOUT. */
FIXTURE(wait) {
	int unused;
};

FIXTURE_SETUP(wait)
{
}

FIXTURE_TEARDOWN(wait)
{
}

#define CHECK_CHILD(sh, status) do {							\
	EXPECT_EQ(0, status) TH_LOG("child: step %d: %s", (sh)->step, (sh)->msg);	\
} while (0)

TEST_F_TIMEOUT(wait, sync_advise_dereg, 120)
{
	struct shared *sh;
	int kmsg, st;

	SETUP(sh, kmsg);
	st = reap(spawn_as(ATTACKER, sync_advise_child, sh), 60);
	sys_guard_restore();
	CHECK_CHILD(sh, st);
	TH_LOG("dereg with a synchronous advice waiting on a userfault: %.3f s; advice: %s",
	       sh->dereg_s, strerror(sh->blocked_ret));
	EXPECT_GT(1.0, sh->dereg_s);
	EXPECT_EQ(ECANCELED, sh->blocked_ret);
	EXPECT_EQ(0, kmsg_problems(kmsg));
}

TEST_F_TIMEOUT(wait, dev_prefetch_unregister, 120)
{
	struct shared *sh;
	int kmsg, st;

	SETUP(sh, kmsg);
	st = reap(spawn_as(ATTACKER, dev_prefetch_child, sh), 60);
	sys_guard_restore();
	CHECK_CHILD(sh, st);
	TH_LOG("UNREGISTER with a PREFETCH waiting on a userfault: %.3f s; prefetch: %s",
	       sh->dereg_s, strerror(-sh->blocked_ret));
	EXPECT_GT(1.0, sh->dereg_s);
	EXPECT_EQ(-ECANCELED, sh->blocked_ret);
	EXPECT_EQ(0, kmsg_problems(kmsg));
}

TEST_F_TIMEOUT(wait, fault_requests_per_mm, 120)
{
	struct shared *sh;
	int kmsg, st;

	SETUP(sh, kmsg);
	st = reap(spawn_as(ATTACKER, per_mm_child, sh), 90);
	sys_guard_restore();
	CHECK_CHILD(sh, st);
	TH_LOG("%d advices: %d returned at once (%d with EAGAIN), %d ended by dereg "
	       "(ECANCELED); %d deregs took %.3f s", MRS, sh->early, sh->early_eagain, sh->late,
	       MRS, sh->dereg_s);
	EXPECT_EQ(MRS - FAULT_REQUESTS_PER_MM, sh->early);
	EXPECT_EQ(MRS - FAULT_REQUESTS_PER_MM, sh->early_eagain);
	EXPECT_EQ(FAULT_REQUESTS_PER_MM, sh->late);
	EXPECT_GT(2.0, sh->dereg_s);
	EXPECT_EQ(0, kmsg_problems(kmsg));
}

TEST_F_TIMEOUT(wait, async_advise_flood, 300)
{
	struct shared *sh;
	pid_t victim, attacker = -1;
	int kmsg, vs, as = -1;
	double quiet;

	SETUP(sh, kmsg);
	victim = spawn_as(VICTIM, victim_child, sh);
	ASSERT_LE(0, victim);
	if (wait_flag(&sh->quiet_done, 120))
		attacker = spawn_as(ATTACKER, flood_child, sh);
	vs = reap(victim, 240);
	if (attacker > 0)
		as = reap(attacker, 60);
	sys_guard_restore();
	CHECK_CHILD(sh, vs);
	CHECK_CHILD(sh, as);
	TH_LOG("flood of %d async advices as uid %d: %d accepted (queued or dropped past the "
	       "bounds), %d failed; fault requests %llu; dereg %.3f s", FLOOD, ATTACKER,
	       sh->flood_ok, sh->flood_other, (unsigned long long)sh->fault_requests,
	       sh->dereg_s);
	TH_LOG("uid %d's 4 KiB RDMA WRITE, median of %d: %.3f ms quiet, %.3f ms with the "
	       "attacker's advice outstanding, %.3f ms after it exited; max %.1f ms, %d timed out",
	       VICTIM, LAT_WRITES, sh->quiet_ms, sh->loaded_ms, sh->after_ms, sh->max_ms,
	       sh->timeouts);
	quiet = sh->quiet_ms > sh->after_ms ? sh->quiet_ms : sh->after_ms;
	TH_LOG("ratio to the slower quiet phase: %.2f", sh->loaded_ms / quiet);
	EXPECT_EQ(FLOOD, sh->flood_ok);
	EXPECT_EQ(1u, sh->fault_requests);
	EXPECT_EQ(0, sh->timeouts);
	/* Against the slower of the two quiet phases of this run: TCG's timing drifts. */
	EXPECT_GE(2.0 * quiet, sh->loaded_ms);
	EXPECT_GT(1.0, sh->dereg_s);
	EXPECT_EQ(0, kmsg_problems(kmsg));
}

TEST_HARNESS_MAIN
