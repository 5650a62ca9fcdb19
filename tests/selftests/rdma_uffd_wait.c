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
 * fault_requests_per_user: the same in two processes of one uid, with
 * max_fault_requests_per_user lowered to 24: A's 16 wait, then only 8 of
 * B's (12 EAGAIN); debugfs vamr/users shows 24 while they wait.
 * device_waits_per_mm: 70 QPs of one process WRITE into its one trapped
 * VA MR: 64 responder tasks wait for its one fault request, the other 6
 * accesses fail at once (an access error completion); deregistration ends
 * the 64 waits.
 * va_mrs_count_per_user: VA MRs from ibv_reg_mr(VAMR_ACCESS_VA) count
 * against max_regions_per_user (lowered to 3), with /dev/vamr regions.
 * Every test ends with nothing of uid 65534 counted (debugfs vamr/users).
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
#include "child_util.h"

#define ATTACKER 65534
#define VICTIM 65533
#define ACC (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#define TRAP_PAGES 4
#define FLOOD 4400
#define MRS 20
#define FAULT_REQUESTS_PER_MM 16	/* Documentation/vamr.rst, "Security" */
#define FAULT_REQUESTS_PER_USER 24	/* lowered from 256 for the test */
#define DEVICE_WAITS_PER_MM 64
#define DEV_QPS 70
#define REGIONS_PER_USER 3		/* lowered from 65536 for the test */
#define PARAMS "/sys/module/vamr/parameters/"
#define USERS CHILD_USERS
#define LAT_WRITES 200

/* Exported by libibverbs for providers (IBVERBS_PRIVATE_34): see rdma_va.c. */
int ibv_cmd_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
		      struct ibv_sge *sg_list, uint32_t num_sge);

/* Sets the module parameter PARAMS/name (restored by sys_guard_restore()): 0, or -1. */
static int set_param(const char *name, long value)
{
	char path[128], val[32];

	snprintf(path, sizeof(path), PARAMS "%s", name);
	snprintf(val, sizeof(val), "%ld\n", value);
	return sys_guard_set(path, val);
}

/*
 * @uid's count in column @col (a per-user parameter's name) of debugfs
 * vamr/users: the count, 0 if @uid has no entry, -1 if there is no such file
 * or column.
 */
static long user_count(uid_t uid, const char *col)
{
	FILE *f = fopen(USERS, "re");
	char line[512], *tok, *save;
	int idx = -1, i = 0;
	long v = 0;

	if (!f)
		return -1;
	if (!fgets(line, sizeof(line), f)) {
		fclose(f);
		return -1;
	}
	for (tok = strtok_r(line, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save), i++)
		if (!strcmp(tok, col))
			idx = i;
	while (idx > 0 && fgets(line, sizeof(line), f)) {
		if (strtoul(line, NULL, 10) != uid)
			continue;
		tok = strtok_r(line, " \n", &save);
		for (i = 0; tok && i < idx; i++)
			tok = strtok_r(NULL, " \n", &save);
		v = tok ? strtol(tok, NULL, 10) : -1;
		break;
	}
	fclose(f);
	return idx > 0 ? v : -1;
}

/* What the children report, in shared memory. */
struct shared {
	int step;		/* first failed check of a child, 0 if none */
	char msg[256];
	double dereg_s;		/* the deregistration's time */
	int blocked_ret;	/* what the waiting call returned */
	/* Per child (fault_requests_per_*, device_waits_per_mm): */
	int early[2];		/* calls (accesses) that returned at once */
	int early_eagain[2];	/* ... of them with EAGAIN (an access error completion) */
	int late[2];		/* calls that returned after deregistration (ECANCELED) */
	int ready[2];		/* the child's calls wait now */
	int go;			/* the parent looked: deregister */
	int go2;		/* the parent looked again: exit */
	int early_status[24], late_status[24];	/* completions by status */
	int regs[3];		/* va_mrs_count_per_user: see regions_child() */
	int reg_err[2];
	int flood_ok, flood_other;
	uint64_t fault_requests;
	double quiet_ms, loaded_ms, after_ms, max_ms;
	int timeouts;
	int quiet_done, flood_done, loaded_done, attacker_done;
};

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
	double t0 = mono_s();

	c->ret = ibv_cmd_advise_mr(c->pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, c->flags,
				   &c->sge, 1);
	c->took = mono_s() - t0;
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
	CHILD_CHECK(sh, 6, child_wait_flag(&t->h.seen, 10), "the advice raised no userfault in 10 s");
	usleep(200 * 1000);
	CHILD_CHECK(sh, 7, !__atomic_load_n(&c.done, __ATOMIC_ACQUIRE),
		    "the advice returned %d before deregistration", c.ret);
	t0 = mono_s();
	ret = ibv_dereg_mr(mr);
	sh->dereg_s = mono_s() - t0;
	CHILD_CHECK(sh, 8, !ret, "dereg: %s", strerror(ret));
	CHILD_CHECK(sh, 9, child_wait_flag(&c.done, 5), "the advice still waits 5 s after dereg");
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
	CHILD_CHECK(sh, 6, child_wait_flag(&t->h.seen, 10), "the prefetch raised no userfault in 10 s");
	usleep(200 * 1000);
	CHILD_CHECK(sh, 7, !__atomic_load_n(&c.done, __ATOMIC_ACQUIRE),
		    "the prefetch returned %d before UNREGISTER", c.ret);
	t0 = mono_s();
	ret = vamr_unregister(c.vfd, c.handle);
	sh->dereg_s = mono_s() - t0;
	CHILD_CHECK(sh, 8, !ret, "unregister: %s", strerror(-ret));
	CHILD_CHECK(sh, 9, child_wait_flag(&c.done, 5), "the prefetch still waits 5 s after UNREGISTER");
	pthread_join(th, NULL);
	sh->blocked_ret = c.ret;
	trap_release(t);
	close(c.vfd);
}

/* Which child of a test a process is (set before CHILD_RUN_AS(); the fork keeps it). */
static int child_idx;

/*
 * MRS threads each advise (synchronously) one of MRS trapped VA MRs; after 2 s
 * the calls that returned are counted, the child says it is ready and, when
 * @hold, waits for the parent's go; then it deregisters everything.
 */
static void advise_mrs(struct shared *sh, bool hold)
{
	int k = child_idx;
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
			sh->early[k]++;
			sh->early_eagain[k] += c[i].ret == EAGAIN;
		}
	}
	__atomic_store_n(&sh->ready[k], 1, __ATOMIC_RELEASE);
	if (hold)
		CHILD_CHECK(sh, 9, child_wait_flag(&sh->go, 60), "no go from the parent");
	t0 = mono_s();
	for (i = 0; i < MRS; i++)
		CHILD_CHECK(sh, 6, !ibv_dereg_mr(mr[i]), "dereg %d", i);
	sh->dereg_s = mono_s() - t0;
	for (i = 0; i < MRS; i++) {
		CHILD_CHECK(sh, 7, child_wait_flag(&c[i].done, 5), "advice %d waits after dereg", i);
		pthread_join(th[i], NULL);
	}
	for (i = 0; i < MRS; i++)
		sh->late[k] += c[i].ret == ECANCELED;
	trap_release(t);
	CHILD_CHECK(sh, 8, !rdma_pair_close(&p), "close");
}

static void per_mm_child(struct shared *sh)
{
	advise_mrs(sh, false);
}

static void per_user_child(struct shared *sh)
{
	advise_mrs(sh, true);
}

/* Sender qp[i] and responder qp[DEV_QPS + i], connected, in @p's PD: 0 or -errno. */
static int dev_qps_open(struct rdma_pair *p, struct ibv_cq **cq, struct ibv_qp **qp)
{
	int i, ret;

	*cq = ibv_create_cq(p->ctx, 4 * DEV_QPS, NULL, NULL, 0);
	if (!*cq)
		return -ENOMEM;
	for (i = 0; i < 2 * DEV_QPS; i++) {
		struct ibv_qp_init_attr a = {
			.send_cq = *cq, .recv_cq = *cq, .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
				 .max_recv_sge = 1 },
		};

		qp[i] = ibv_create_qp(p->pd, &a);
		if (!qp[i])
			return errno ? -errno : -ENOMEM;
	}
	for (i = 0; i < 2 * DEV_QPS; i++) {
		ret = rdma_pair_connect_qp(p, qp[i], qp[(i + DEV_QPS) % (2 * DEV_QPS)]->qp_num, 0, 0);
		if (ret)
			return ret;
	}
	return 0;
}

static void dev_qps_close(struct ibv_cq *cq, struct ibv_qp **qp)
{
	for (int i = 0; i < 2 * DEV_QPS; i++)
		if (qp[i])
			ibv_destroy_qp(qp[i]);
	if (cq)
		ibv_destroy_cq(cq);
}

/*
 * Polls @cq for @sec seconds or until @want send completions came: how many
 * came, counted by status in @status (24 entries).
 */
static int dev_poll(struct ibv_cq *cq, int want, double sec, int *status)
{
	double t0 = mono_s();
	struct ibv_wc wc[16];
	int n = 0, got;

	while (n < want && mono_s() - t0 < sec) {
		got = ibv_poll_cq(cq, 16, wc);
		if (got <= 0) {
			usleep(5 * 1000);
			continue;
		}
		for (int i = 0; i < got; i++) {
			if (wc[i].wr_id >= DEV_QPS)
				continue;
			n++;
			status[wc[i].status < 24 ? wc[i].status : 23]++;
		}
	}
	return n;
}

/*
 * DEV_QPS senders each post one 64-byte RDMA WRITE into one trapped page of a
 * VA MR: every responder task needs the same fault, one fault request, and
 * waits for it (a device task: not the owner process) up to the mm's bound.
 */
static void device_waits_child(struct shared *sh)
{
	uint8_t *a = map_anon(PAGE), *buf = map_anon(PAGE);
	struct trap *t = calloc(1, sizeof(*t));
	struct ibv_qp *qp[2 * DEV_QPS] = { 0 };
	struct ibv_cq *cq = NULL;
	struct ibv_mr *mr, *bmr;
	struct rdma_pair p;
	double t0;
	int i, ret;

	CHILD_CHECK(sh, 1, a && buf && t, "mmap");
	ret = rdma_pair_open(&p, NULL);
	CHILD_CHECK(sh, 2, !ret, "rdma_pair_open: %s", strerror(-ret));
	pattern_fill(a, PAGE, 35, 0);
	pattern_fill(buf, PAGE, 36, 0);
	ret = rdma_pair_reg_mr(&p, a, PAGE, ACC | VAMR_ACCESS_VA, &mr);
	CHILD_CHECK(sh, 3, !ret, "VA MR: %s", strerror(-ret));
	CHILD_CHECK(sh, 4, !rdma_pair_reg_mr(&p, buf, PAGE, ACC, &bmr), "MR");
	ret = dev_qps_open(&p, &cq, qp);
	CHILD_CHECK(sh, 5, !ret, "%d QPs: %s", 2 * DEV_QPS, strerror(-ret));
	ret = trap_arm(t, a, PAGE);
	CHILD_CHECK(sh, 6, !ret, "userfaultfd: %s", strerror(-ret));
	for (i = 0; i < DEV_QPS; i++) {
		struct ibv_sge sge = { (uintptr_t)(buf + 64 * (i % 64)), 64, bmr->lkey };
		struct ibv_send_wr wr = {
			.wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
			.send_flags = IBV_SEND_SIGNALED,
			.wr.rdma = { (uintptr_t)(a + 64 * (i % 64)), mr->rkey },
		}, *bad;

		CHILD_CHECK(sh, 7, !ibv_post_send(qp[i], &wr, &bad), "post %d", i);
	}
	CHILD_CHECK(sh, 8, child_wait_flag(&t->h.seen, 10), "the WRITEs raised no userfault in 10 s");
	/* Those past the bound complete at once; give every responder task 2 s to get there. */
	sh->early[0] = dev_poll(cq, DEV_QPS, 2.0, sh->early_status);
	__atomic_store_n(&sh->ready[0], 1, __ATOMIC_RELEASE);
	CHILD_CHECK(sh, 9, child_wait_flag(&sh->go, 60), "no go from the parent");
	t0 = mono_s();
	ret = ibv_dereg_mr(mr);
	sh->dereg_s = mono_s() - t0;
	CHILD_CHECK(sh, 10, !ret, "dereg: %s", strerror(ret));
	sh->late[0] = dev_poll(cq, DEV_QPS - sh->early[0], 10.0, sh->late_status);
	trap_release(t);
	dev_qps_close(cq, qp);
	ibv_dereg_mr(bmr);
	CHILD_CHECK(sh, 11, !rdma_pair_close(&p), "close");
}

/*
 * VA MRs and a /dev/vamr region under max_regions_per_user (REGIONS_PER_USER):
 * regs[0] VA MRs registered before the first failure (its errno in
 * reg_err[0]), regs[1] whether a /dev/vamr region fits then (reg_err[1]), then
 * one dereg: regs[2] whether a VA MR fits again; the parent looks at the
 * counts at ready[0] (all held) and ready[1] (all deregistered).
 */
static void regions_child(struct shared *sh)
{
	uint8_t *a = map_anon(PAGE);
	struct ibv_mr *mr[REGIONS_PER_USER + 2] = { 0 };
	struct rdma_pair p;
	uint32_t h = 0;
	int i, n = 0, ret, vfd;

	CHILD_CHECK(sh, 1, a != NULL, "mmap");
	ret = rdma_pair_open(&p, NULL);
	CHILD_CHECK(sh, 2, !ret, "rdma_pair_open: %s", strerror(-ret));
	vfd = vamr_open();
	CHILD_CHECK(sh, 3, vfd >= 0, "open /dev/vamr: %s", strerror(-vfd));
	a[0] = 1;
	for (i = 0; i < REGIONS_PER_USER + 1; i++, n++) {
		mr[i] = ibv_reg_mr(p.pd, a, PAGE, ACC | VAMR_ACCESS_VA);
		if (!mr[i]) {
			sh->reg_err[0] = errno;
			break;
		}
	}
	sh->regs[0] = n;
	ret = vamr_register(vfd, a, PAGE, VAMR_ACCESS_READ | VAMR_ACCESS_WRITE, 0, &h);
	sh->regs[1] = !ret;
	sh->reg_err[1] = -ret;
	__atomic_store_n(&sh->ready[0], 1, __ATOMIC_RELEASE);
	CHILD_CHECK(sh, 4, child_wait_flag(&sh->go, 60), "no go from the parent");
	if (n > 0) {
		CHILD_CHECK(sh, 5, !ibv_dereg_mr(mr[n - 1]), "dereg");
		mr[n - 1] = ibv_reg_mr(p.pd, a, PAGE, ACC | VAMR_ACCESS_VA);
		sh->regs[2] = mr[n - 1] != NULL;
	}
	for (i = 0; i < n; i++)
		if (mr[i])
			CHILD_CHECK(sh, 6, !ibv_dereg_mr(mr[i]), "dereg %d", i);
	if (sh->regs[1])
		vamr_unregister(vfd, h);
	__atomic_store_n(&sh->ready[1], 1, __ATOMIC_RELEASE);
	CHILD_CHECK(sh, 7, child_wait_flag(&sh->go2, 60), "no second go from the parent");
	close(vfd);
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
		double t0 = mono_s();
		int ret;

		pattern_fill(src, PAGE, 40 + i, 0);
		ret = rdma_pair_write_sync(p, 0, src, smr->lkey, (uintptr_t)dst, dmr->rkey, PAGE,
					   2000);
		lat[i] = (mono_s() - t0) * 1000;
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
	CHILD_CHECK(sh, 15, child_wait_flag(&sh->flood_done, 120), "the flood did not end");
	sh->loaded_ms = write_latency(sh, &p, src, smr, dst, dmr);
	__atomic_store_n(&sh->loaded_done, 1, __ATOMIC_RELEASE);
	/* Quiet again once the attacker is gone: the same run's second reference. */
	CHILD_CHECK(sh, 16, child_wait_flag(&sh->attacker_done, 120), "the attacker did not end");
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
	CHILD_CHECK(sh, 7, child_wait_flag(&sh->loaded_done, 120), "the victim did not finish");
	t0 = mono_s();
	ret = ibv_dereg_mr(mr);
	sh->dereg_s = mono_s() - t0;
	CHILD_CHECK(sh, 8, !ret, "dereg: %s", strerror(ret));
	trap_release(t);
	close(vfd);
	CHILD_CHECK(sh, 9, !rdma_pair_close(&p), "close");
	__atomic_store_n(&sh->attacker_done, 1, __ATOMIC_RELEASE);
}

#define SETUP(sh, kmsg) do {								\
	int _r;										\
	sh = child_shared_new(sizeof(struct shared));					\
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
	st = child_reap(CHILD_RUN_AS(ATTACKER, sync_advise_child, sh), 60, false);
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
	st = child_reap(CHILD_RUN_AS(ATTACKER, dev_prefetch_child, sh), 60, false);
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
	st = child_reap(CHILD_RUN_AS(ATTACKER, per_mm_child, sh), 90, false);
	sys_guard_restore();
	CHECK_CHILD(sh, st);
	TH_LOG("%d advices: %d returned at once (%d with EAGAIN), %d ended by dereg "
	       "(ECANCELED); %d deregs took %.3f s", MRS, sh->early[0], sh->early_eagain[0],
	       sh->late[0], MRS, sh->dereg_s);
	EXPECT_EQ(MRS - FAULT_REQUESTS_PER_MM, sh->early[0]);
	EXPECT_EQ(MRS - FAULT_REQUESTS_PER_MM, sh->early_eagain[0]);
	EXPECT_EQ(FAULT_REQUESTS_PER_MM, sh->late[0]);
	EXPECT_GT(2.0, sh->dereg_s);
	EXPECT_EQ(0, kmsg_problems(kmsg));
}

/* Skips unless debugfs vamr/users is there; asserts that nothing of the attacker is counted. */
#define NEED_USERS() do {								\
	int _g = child_user_gone(ATTACKER, 5);						\
	if (_g < 0) {									\
		sys_guard_restore();							\
		SKIP(return, "no " USERS " (debugfs not mounted?)");			\
	}										\
	ASSERT_EQ(1, _g) TH_LOG("uid %d holds counts from an earlier test", ATTACKER); \
} while (0)

TEST_F_TIMEOUT(wait, fault_requests_per_user, 180)
{
	struct shared *sh;
	long held = -1, regions = -1, waits = -1;
	int kmsg, sa, sb = -1, gone;
	pid_t a, b = -1;

	SETUP(sh, kmsg);
	NEED_USERS();
	ASSERT_EQ(0, set_param("max_fault_requests_per_user", FAULT_REQUESTS_PER_USER));
	child_idx = 0;
	a = CHILD_RUN_AS(ATTACKER, per_user_child, sh);
	ASSERT_LE(0, a);
	if (child_wait_flag(&sh->ready[0], 60)) {
		child_idx = 1;
		b = CHILD_RUN_AS(ATTACKER, per_user_child, sh);
		if (b > 0 && child_wait_flag(&sh->ready[1], 60)) {
			held = user_count(ATTACKER, "max_fault_requests_per_user");
			waits = user_count(ATTACKER, "max_device_waits_per_user");
			regions = user_count(ATTACKER, "max_regions_per_user");
		}
	}
	__atomic_store_n(&sh->go, 1, __ATOMIC_RELEASE);
	sa = child_reap(a, 90, false);
	if (b > 0)
		sb = child_reap(b, 90, false);
	gone = child_user_gone(ATTACKER, 5);
	sys_guard_restore();
	CHECK_CHILD(sh, sa);
	CHECK_CHILD(sh, sb);
	TH_LOG("max_fault_requests_per_user %d, two processes of uid %d with %d advices each: "
	       "A %d at once (%d EAGAIN), %d ended by dereg; B %d at once (%d EAGAIN), %d ended "
	       "by dereg; vamr/users while they waited: %ld fault requests, %ld device waits, "
	       "%ld regions", FAULT_REQUESTS_PER_USER, ATTACKER, MRS, sh->early[0],
	       sh->early_eagain[0], sh->late[0], sh->early[1], sh->early_eagain[1], sh->late[1],
	       held, waits, regions);
	/* A: the bound per process; B: what is left of the user's. */
	EXPECT_EQ(MRS - FAULT_REQUESTS_PER_MM, sh->early_eagain[0]);
	EXPECT_EQ(FAULT_REQUESTS_PER_MM, sh->late[0]);
	EXPECT_EQ(MRS - (FAULT_REQUESTS_PER_USER - FAULT_REQUESTS_PER_MM), sh->early_eagain[1]);
	EXPECT_EQ(sh->early_eagain[1], sh->early[1]);
	EXPECT_EQ(FAULT_REQUESTS_PER_USER - FAULT_REQUESTS_PER_MM, sh->late[1]);
	EXPECT_EQ(FAULT_REQUESTS_PER_USER, held);
	EXPECT_EQ(0, waits);
	EXPECT_EQ(2 * MRS, regions);
	EXPECT_EQ(1, gone) TH_LOG("uid %d still counted after its processes exited", ATTACKER);
	EXPECT_EQ(0, kmsg_problems(kmsg));
}

TEST_F_TIMEOUT(wait, device_waits_per_mm, 120)
{
	struct shared *sh;
	long waits = -1, requests = -1, waits_after = -1;
	int kmsg, st, gone;
	pid_t pid;

	SETUP(sh, kmsg);
	NEED_USERS();
	child_idx = 0;
	pid = CHILD_RUN_AS(ATTACKER, device_waits_child, sh);
	ASSERT_LE(0, pid);
	if (child_wait_flag(&sh->ready[0], 60)) {
		waits = user_count(ATTACKER, "max_device_waits_per_user");
		requests = user_count(ATTACKER, "max_fault_requests_per_user");
	}
	__atomic_store_n(&sh->go, 1, __ATOMIC_RELEASE);
	st = child_reap(pid, 60, false);
	gone = child_user_gone(ATTACKER, 5);
	waits_after = user_count(ATTACKER, "max_device_waits_per_user");
	sys_guard_restore();
	CHECK_CHILD(sh, st);
	TH_LOG("%d RDMA WRITEs into one trapped VA MR: %d completed at once (%d remote access "
	       "errors, %d flushed), %d after dereg (%d remote access errors, %d successful), "
	       "dereg %.3f s; vamr/users while they waited: %ld device waits, %ld fault requests",
	       DEV_QPS, sh->early[0], sh->early_status[IBV_WC_REM_ACCESS_ERR],
	       sh->early_status[IBV_WC_WR_FLUSH_ERR], sh->late[0],
	       sh->late_status[IBV_WC_REM_ACCESS_ERR], sh->late_status[IBV_WC_SUCCESS],
	       sh->dereg_s, waits, requests);
	EXPECT_EQ(DEV_QPS - DEVICE_WAITS_PER_MM, sh->early[0]);
	EXPECT_EQ(DEV_QPS - DEVICE_WAITS_PER_MM, sh->early_status[IBV_WC_REM_ACCESS_ERR]);
	EXPECT_EQ(DEVICE_WAITS_PER_MM, waits);
	EXPECT_EQ(1, requests);
	EXPECT_EQ(DEVICE_WAITS_PER_MM, sh->late[0]);
	EXPECT_EQ(0, sh->late_status[IBV_WC_SUCCESS]);
	/*
	 * Dereg ends all 64 waits at once, then rxe's workers complete the 64
	 * WRITEs one after the other: 0.3 s on an idle TCG guest, a few seconds
	 * with the host loaded. The bound is the kind's: far from rxe's cleanup
	 * timeout (whose WARN kmsg_problems() would see) and the hung-task one.
	 */
	EXPECT_GT(10.0, sh->dereg_s);
	EXPECT_EQ(0, waits_after);
	EXPECT_EQ(1, gone) TH_LOG("uid %d still counted after its process exited", ATTACKER);
	EXPECT_EQ(0, kmsg_problems(kmsg));
}

TEST_F_TIMEOUT(wait, va_mrs_count_per_user, 120)
{
	struct shared *sh;
	long held = -1, after = -1;
	int kmsg, st, gone;
	pid_t pid;

	SETUP(sh, kmsg);
	NEED_USERS();
	ASSERT_EQ(0, set_param("max_regions_per_user", REGIONS_PER_USER));
	pid = CHILD_RUN_AS(ATTACKER, regions_child, sh);
	ASSERT_LE(0, pid);
	if (child_wait_flag(&sh->ready[0], 60))
		held = user_count(ATTACKER, "max_regions_per_user");
	__atomic_store_n(&sh->go, 1, __ATOMIC_RELEASE);
	if (child_wait_flag(&sh->ready[1], 60))
		after = user_count(ATTACKER, "max_regions_per_user");
	__atomic_store_n(&sh->go2, 1, __ATOMIC_RELEASE);
	st = child_reap(pid, 60, false);
	gone = child_user_gone(ATTACKER, 5);
	sys_guard_restore();
	CHECK_CHILD(sh, st);
	TH_LOG("max_regions_per_user %d: %d VA MRs, then ibv_reg_mr: %s; /dev/vamr REGISTER: "
	       "%s; after one dereg a VA MR %s; vamr/users regions %ld held, %ld after dereg",
	       REGIONS_PER_USER, sh->regs[0], strerror(sh->reg_err[0]),
	       sh->regs[1] ? "fits" : strerror(sh->reg_err[1]), sh->regs[2] ? "fits" : "fails",
	       held, after);
	EXPECT_EQ(REGIONS_PER_USER, sh->regs[0]);
	EXPECT_EQ(ENOSPC, sh->reg_err[0]);
	EXPECT_EQ(0, sh->regs[1]);
	EXPECT_EQ(ENOSPC, sh->reg_err[1]);
	EXPECT_EQ(1, sh->regs[2]);
	EXPECT_EQ(REGIONS_PER_USER, held);
	EXPECT_EQ(0, after);
	EXPECT_EQ(1, gone) TH_LOG("uid %d still counted after its process exited", ATTACKER);
	EXPECT_EQ(0, kmsg_problems(kmsg));
}

TEST_F_TIMEOUT(wait, async_advise_flood, 300)
{
	struct shared *sh;
	pid_t victim, attacker = -1;
	int kmsg, vs, as = -1;
	double quiet;

	SETUP(sh, kmsg);
	victim = CHILD_RUN_AS(VICTIM, victim_child, sh);
	ASSERT_LE(0, victim);
	if (child_wait_flag(&sh->quiet_done, 120))
		attacker = CHILD_RUN_AS(ATTACKER, flood_child, sh);
	vs = child_reap(victim, 240, false);
	if (attacker > 0)
		as = child_reap(attacker, 60, false);
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
