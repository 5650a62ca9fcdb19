// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_remote_wait: a remote access to a VA MR whose page faults into a
 * userfaultfd nobody answers waits in the *device's* context (rxe's
 * responder task; siw's receive work item for a WRITE, its transmit thread
 * for a READ response), not in the owner's. Such a wait must end at
 * deregistration and at the owner's SIGKILL within bounded time, and must
 * not hold up other QPs of the device. Runs on rxe0 and, with
 * VAMR_IBDEV=siw0, on siw.
 *
 * write_dereg / read_dereg: the peer QP WRITEs into (READs from) the
 * trapped MR; once the fault reached the handler, ibv_dereg_mr() returns
 * within 1 s and rdma_pair_close() within 10 s.
 * write_kill / read_kill: the same, then the owner is SIGKILLed: it is gone
 * within 10 s. read_kill_mr_first / write_kill_mr_first: the same with the
 * QPs created after the MRs (on iWARP, rdma_pair_recover() connects new
 * ones), so that exit destroys the QPs before it deregisters the MR.
 * read_others_progress: while a READ response waits on the trapped MR,
 * 3 other QP pairs of the device (normal MRs) complete READs within 2 s.
 * Every test ends with no WARN, BUG or hung task in the kernel log, and
 * vamr's region count back where it was within 3 s of the owner's exit.
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
#include "uffd_util.h"
#include "vamr_lib.h"
#include "child_util.h"

#define ACC (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#define LEN (4 * PAGE)
#define VICTIMS 3
#define VICTIM_OPS 4

struct shared {
	int step;
	char msg[256];
	int ready;
	int seen;
	double dereg_s;
	double close_s;
	double victim_max_s;
	int victim_fail;
};

/* Other QP pairs of the device: each does VICTIM_OPS READs of 4 KiB. */
static void victims(struct shared *sh)
{
	struct rdma_pair vp[VICTIMS];
	struct ibv_mr *vmr[VICTIMS];
	uint8_t *vb[VICTIMS];
	int v, i, ret;

	for (v = 0; v < VICTIMS; v++) {
		vb[v] = map_anon(2 * PAGE);
		CHILD_CHECK(sh, 20, vb[v], "mmap");
		ret = rdma_pair_open(&vp[v], NULL);
		CHILD_CHECK(sh, 21, !ret, "victim open: %s", strerror(-ret));
		ret = rdma_pair_reg_mr(&vp[v], vb[v], 2 * PAGE, ACC, &vmr[v]);
		CHILD_CHECK(sh, 22, !ret, "victim MR: %s", strerror(-ret));
	}
	for (i = 0; i < VICTIM_OPS; i++) {
		for (v = 0; v < VICTIMS; v++) {
			double t0 = mono_s(), d;

			ret = rdma_pair_read_sync(&vp[v], i & 1, vb[v], vmr[v]->lkey,
						  (uintptr_t)(vb[v] + PAGE), vmr[v]->rkey, PAGE,
						  2000);
			d = mono_s() - t0;
			if (ret != IBV_WC_SUCCESS)
				sh->victim_fail++;
			if (d > sh->victim_max_s)
				sh->victim_max_s = d;
		}
	}
	for (v = 0; v < VICTIMS; v++) {
		ibv_dereg_mr(vmr[v]);
		rdma_pair_close(&vp[v]);
	}
}

/* The owner: a trapped VA MR, one remote access into it from side 0. */
static void owner(struct shared *sh, bool read, bool others, bool wait_kill, bool mr_first)
{
	uint8_t *a = map_anon(LEN), *l = map_anon(LEN);
	struct trap *t = calloc(1, sizeof(*t));
	struct ibv_mr *mr, *lmr;
	struct rdma_pair p;
	struct ibv_wc wc;
	double t0;
	int ret;

	CHILD_CHECK(sh, 1, a && l && t, "mmap");
	ret = rdma_pair_open(&p, NULL);
	CHILD_CHECK(sh, 2, !ret, "rdma_pair_open: %s", strerror(-ret));
	pattern_fill(a, LEN, 41, 0);
	pattern_fill(l, LEN, 42, 0);
	ret = rdma_pair_reg_mr(&p, a, LEN, ACC | VAMR_ACCESS_VA, &mr);
	CHILD_CHECK(sh, 3, !ret, "VA MR: %s", strerror(-ret));
	ret = rdma_pair_reg_mr(&p, l, LEN, ACC, &lmr);
	CHILD_CHECK(sh, 4, !ret, "MR: %s", strerror(-ret));
	/* On iWARP: two new QPs, younger than the MRs (torn down first at exit). */
	if (mr_first) {
		ret = rdma_pair_recover(&p);
		CHILD_CHECK(sh, 10, !ret, "recover: %s", strerror(-ret));
	}
	ret = trap_arm(t, a, LEN);
	CHILD_CHECK(sh, 5, !ret, "userfaultfd: %s", strerror(-ret));
	if (read)
		ret = rdma_pair_post_read(&p, 0, 7, l, lmr->lkey, (uintptr_t)a, mr->rkey, PAGE);
	else
		ret = rdma_pair_post_write(&p, 0, 7, l, lmr->lkey, (uintptr_t)a, mr->rkey, PAGE);
	CHILD_CHECK(sh, 6, !ret, "post: %s", strerror(-ret));
	t0 = mono_s();
	while (!__atomic_load_n(&t->h.seen, __ATOMIC_ACQUIRE) && mono_s() - t0 < 10)
		usleep(10 * 1000);
	sh->seen = __atomic_load_n(&t->h.seen, __ATOMIC_ACQUIRE);
	CHILD_CHECK(sh, 7, sh->seen, "the fault never reached the handler");
	if (others)
		victims(sh);
	__atomic_store_n(&sh->ready, 1, __ATOMIC_RELEASE);
	if (wait_kill)
		for (;;)
			pause();
	t0 = mono_s();
	ret = ibv_dereg_mr(mr);
	sh->dereg_s = mono_s() - t0;
	CHILD_CHECK(sh, 8, !ret, "dereg: %s", strerror(ret));
	/* The access ends somehow (an error completion, or none: flushed at close). */
	rdma_pair_wait_send(&p, 0, 2000, &wc);
	t0 = mono_s();
	ibv_dereg_mr(lmr);
	ret = rdma_pair_close(&p);
	sh->close_s = mono_s() - t0;
	CHILD_CHECK(sh, 9, !ret, "close: %s", strerror(-ret));
	trap_release(t);
}

FIXTURE(rw)
{
	struct shared *sh;
	int kmsg;
	int vfd;
};

/*
 * No device is opened here: librdmacm (iWARP) keeps the verbs contexts it
 * opened for the process, and a forked owner using its parent's uverbs file
 * is refused (EACCES, ib_safe_file_access()). So each owner opens its own.
 */
FIXTURE_SETUP(rw)
{
	self->sh = child_shared_new(sizeof(*self->sh));
	ASSERT_NE(NULL, self->sh);
	self->kmsg = kmsg_open();
	self->vfd = vamr_open();
	ASSERT_LE(0, self->vfd);
}

FIXTURE_TEARDOWN(rw)
{
	if (self->kmsg >= 0) {
		EXPECT_EQ(0, kmsg_problems(self->kmsg));
		close(self->kmsg);
	}
	if (self->vfd >= 0)
		close(self->vfd);
}

/* Seconds until vamr's global region count is back at @regions (-1 after 60 s). */
static double regions_back(int vfd, uint64_t regions)
{
	double t0 = mono_s();
	struct vamr_stats g;

	while (mono_s() - t0 < 60) {
		if (!vamr_stats(vfd, VAMR_STATS_GLOBAL, &g) && g.counters.regions == regions)
			return mono_s() - t0;
		usleep(10 * 1000);
	}
	return -1;
}

static void run(struct __test_metadata *_metadata, int vfd, struct shared *sh, bool read,
		bool others, bool kill_it, bool mr_first)
{
	struct vamr_stats g0;
	double back;
	pid_t pid;
	int st;

	ASSERT_EQ(0, vamr_stats(vfd, VAMR_STATS_GLOBAL, &g0));
	pid = fork();

	if (pid == 0) {
		owner(sh, read, others, kill_it, mr_first);
		_exit(0);
	}
	ASSERT_GT(pid, 0);
	if (kill_it) {
		if (!child_wait_flag(&sh->ready, 60)) {
			st = child_reap(pid, 1, true);
			ASSERT_TRUE(false) TH_LOG("owner not ready: rc %d step %d %s", st, sh->step,
						  sh->msg);
		}
		kill(pid, SIGKILL);
		st = child_reap(pid, 10, true);
		ASSERT_EQ(128 + SIGKILL, st) TH_LOG("owner not gone 10 s after SIGKILL");
		back = regions_back(vfd, g0.counters.regions);
		TH_LOG("regions back to %llu %.3f s after the owner's exit",
		       (unsigned long long)g0.counters.regions, back);
		EXPECT_LE(0, back);
		EXPECT_GT(3.0, back);
		return;
	}
	st = child_reap(pid, 90, true);
	ASSERT_EQ(0, st) TH_LOG("owner: step %d: %s", sh->step, sh->msg);
	TH_LOG("dereg %.3f s, close %.3f s, victims max %.3f s fail %d", sh->dereg_s, sh->close_s,
	       sh->victim_max_s, sh->victim_fail);
	EXPECT_LT(sh->dereg_s, 1.0);
	EXPECT_LT(sh->close_s, 10.0);
	back = regions_back(vfd, g0.counters.regions);
	TH_LOG("regions back %.3f s after the owner's exit", back);
	EXPECT_LE(0, back);
	EXPECT_GT(3.0, back);
	if (others) {
		EXPECT_EQ(0, sh->victim_fail);
		EXPECT_LT(sh->victim_max_s, 2.0);
	}
}

TEST_F_TIMEOUT(rw, write_dereg, 120)
{
	run(_metadata, self->vfd, self->sh, false, false, false, false);
}

TEST_F_TIMEOUT(rw, read_dereg, 120)
{
	run(_metadata, self->vfd, self->sh, true, false, false, false);
}

TEST_F_TIMEOUT(rw, write_kill, 120)
{
	run(_metadata, self->vfd, self->sh, false, false, true, false);
}

TEST_F_TIMEOUT(rw, read_kill, 120)
{
	run(_metadata, self->vfd, self->sh, true, false, true, false);
}

TEST_F_TIMEOUT(rw, read_others_progress, 180)
{
	run(_metadata, self->vfd, self->sh, true, true, false, false);
}

TEST_F_TIMEOUT(rw, write_others_progress, 180)
{
	run(_metadata, self->vfd, self->sh, false, true, false, false);
}

TEST_F_TIMEOUT(rw, read_kill_mr_first, 120)
{
	run(_metadata, self->vfd, self->sh, true, false, true, true);
}

TEST_F_TIMEOUT(rw, write_kill_mr_first, 120)
{
	run(_metadata, self->vfd, self->sh, false, false, true, true);
}

TEST_HARNESS_MAIN
