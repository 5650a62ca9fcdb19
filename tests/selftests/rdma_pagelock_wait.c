// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_pagelock_wait: a wait on a page lock held by I/O that user space never
 * completes ends when the MR or region is cancelled (the page-lock kind of
 * rdma_uffd_wait's userfault traps).
 *
 * The trap: a file on a FUSE server of this test (fuse_server.h), mapped
 * read-only and registered (the server answers, and the bytes the module
 * reads through the region are checked against the file's position-dependent
 * pattern). Then the mapping is replaced by a new one of the same file, the
 * page cache is dropped, and the server stops answering READs: a fault on the
 * file now waits for the lock of a folio under a READ that never completes.
 * The registering side runs as uid 65534; the server is root's.
 *
 * dev_prefetch_unregister: a /dev/vamr PREFETCH waits on that page lock;
 * UNREGISTER returns within 1 s and ends the PREFETCH (ECANCELED); the
 * process then exits while the READ is still unanswered.
 * sync_advise_dereg: the same for a synchronous ibv_advise_mr(PREFETCH,
 * FLUSH) on a writable VA MR over a private mapping of the file (its pins
 * are COW copies, whose fault reads the file first) and ibv_dereg_mr().
 * Both: once the server answers, nothing of uid 65534 stays counted (debugfs
 * vamr/users), and the kernel log shows no WARN or hung task.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "fuse_server.h"
#include "kmsg_util.h"
#include "mm_util.h"
#include "pattern.h"
#include "rdma_pair.h"
#include "sys_guard.h"
#include "unpriv_util.h"
#include "vamr_lib.h"
#include "child_util.h"

#define ATTACKER 65534
#define PAGE 4096ul
#define PAGES 4
#define SEED 77

/* Exported by libibverbs for providers (IBVERBS_PRIVATE_34): see rdma_va.c. */
int ibv_cmd_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
		      struct ibv_sge *sg_list, uint32_t num_sge);

/* What the test and its child share (MAP_SHARED): the server and the child's report. */
struct shared {
	struct fuse_server srv;
	int want_hang;		/* child -> test: stop answering READs */
	int hanging;		/* test -> child: READs are held from now on */
	int step;		/* the child's first failed check, 0 if none */
	char msg[256];
	double dereg_s;		/* the deregistration's time */
	int blocked_ret;	/* what the waiting call returned */
	int reads_before;	/* READs the server had when the wait began */
	int writable;		/* the child maps the file private and writable */
};

/* Waits until the server received more than @n READs or @sec passed; whether it did. */
static bool wait_reads(struct fuse_server *s, int n, double sec)
{
	double t0 = mono_s();

	while (__atomic_load_n(&s->reads, __ATOMIC_ACQUIRE) <= n) {
		if (mono_s() - t0 > sec)
			return false;
		usleep(10 * 1000);
	}
	return true;
}

/*
 * Maps the server's file at @a (or anywhere when NULL): shared and read-only,
 * or private and writable when @sh->writable (a writable VA MR pins for
 * writing, which a shared file mapping refuses: the pins are then the COW
 * copies, whose fault reads the file first). The address, or NULL. The file
 * stays open through the mapping only.
 */
static uint8_t *map_file(struct shared *sh, void *a, size_t len)
{
	int fd = open(sh->srv.path, O_RDONLY | O_CLOEXEC);
	int prot = sh->writable ? PROT_READ | PROT_WRITE : PROT_READ;
	int flags = (sh->writable ? MAP_PRIVATE : MAP_SHARED) | (a ? MAP_FIXED : 0);
	void *p;

	if (fd < 0)
		return NULL;
	p = mmap(a, len, prot, flags, fd, 0);
	close(fd);
	return p == MAP_FAILED ? NULL : p;
}

/* Pages of the file in the page cache, through the mapping @a (mincore). */
static int cached_pages(uint8_t *a, size_t len)
{
	unsigned char vec[PAGES];
	int i, n = 0;

	if (mincore(a, len, vec))
		return -1;
	for (i = 0; i < (int)(len / PAGE); i++)
		n += vec[i] & 1;
	return n;
}

/*
 * Arms the trap under the registered mapping @a: a new mapping of the file
 * at @a, no page of the file cached, the server told to hold READs. 0, or the
 * failed step's message in @sh.
 */
static int arm(struct shared *sh, uint8_t *a, size_t len)
{
	double t0 = mono_s();
	int fd, n;

	__atomic_store_n(&sh->want_hang, 1, __ATOMIC_RELEASE);
	if (!child_wait_flag(&sh->hanging, 10))
		return snprintf(sh->msg, sizeof(sh->msg), "the server did not start holding");
	if (munmap(a, len) || map_file(sh, a, len) != a)
		return snprintf(sh->msg, sizeof(sh->msg), "remap: %s", strerror(errno));
	fd = open(sh->srv.path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return snprintf(sh->msg, sizeof(sh->msg), "open: %s", strerror(errno));
	/* The old mapping's pins go at its unmap; the cache may take a moment. */
	while ((n = cached_pages(a, len)) != 0 && mono_s() - t0 < 5) {
		posix_fadvise(fd, 0, len, POSIX_FADV_DONTNEED);
		usleep(20 * 1000);
	}
	close(fd);
	if (n)
		return snprintf(sh->msg, sizeof(sh->msg), "%d pages still cached after 5 s", n);
	sh->reads_before = __atomic_load_n(&sh->srv.reads, __ATOMIC_ACQUIRE);
	return 0;
}

/* Maps and checks the file with the CPU: its address, or the child exits. */
static uint8_t *map_checked(struct shared *sh, size_t len)
{
	uint8_t *a = map_file(sh, NULL, len);
	size_t bad;

	CHILD_CHECK(sh, 1, a, "mmap of %s: %s", sh->srv.path, strerror(errno));
	bad = pattern_check(a, len, SEED, 0);
	CHILD_CHECK(sh, 2, bad == PATTERN_OK, "the CPU reads a wrong byte at %zu", bad);
	return a;
}

struct call {
	int vfd;
	uint32_t handle;
	struct ibv_pd *pd;
	struct ibv_sge sge;
	void *addr;
	size_t len;
	int ret;
	int done;
};

static void *prefetch_thread(void *arg)
{
	struct call *c = arg;

	c->ret = vamr_prefetch(c->vfd, c->handle, c->addr, c->len, NULL);
	__atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void *advise_thread(void *arg)
{
	struct call *c = arg;

	c->ret = ibv_cmd_advise_mr(c->pd, IBV_ADVISE_MR_ADVICE_PREFETCH,
				   IBV_ADVISE_MR_FLAG_FLUSH, &c->sge, 1);
	__atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* Starts @fn on @c and checks that it waits on the held READ. */
static void start_waiting(struct shared *sh, struct call *c, void *(*fn)(void *), pthread_t *th)
{
	CHILD_CHECK(sh, 6, !pthread_create(th, NULL, fn, c), "thread");
	CHILD_CHECK(sh, 7, wait_reads(&sh->srv, sh->reads_before, 10),
		    "the call sent no READ to the server in 10 s (it %s, %d)",
		    __atomic_load_n(&c->done, __ATOMIC_ACQUIRE) ? "returned" : "waits", c->ret);
	usleep(200 * 1000);
	CHILD_CHECK(sh, 8, !__atomic_load_n(&c->done, __ATOMIC_ACQUIRE),
		    "the call returned %d before deregistration", c->ret);
}

static void dev_child(struct shared *sh)
{
	size_t len = PAGES * PAGE;
	uint8_t *a = map_checked(sh, len), *buf = malloc(len);
	struct call c = { .addr = a, .len = len };
	pthread_t th;
	double t0;
	int ret;

	c.vfd = vamr_open();
	CHILD_CHECK(sh, 3, c.vfd >= 0 && buf, "open /dev/vamr: %s", strerror(-c.vfd));
	ret = vamr_register(c.vfd, a, len, VAMR_ACCESS_READ, 0, &c.handle);
	CHILD_CHECK(sh, 3, !ret, "register: %s", strerror(-ret));
	ret = vamr_read(c.vfd, c.handle, a, buf, len);
	CHILD_CHECK(sh, 4, !ret, "read through the region: %s", strerror(-ret));
	CHILD_CHECK(sh, 4, pattern_check(buf, len, SEED, 0) == PATTERN_OK,
		    "the region reads a wrong byte at %zu", pattern_check(buf, len, SEED, 0));
	if (arm(sh, a, len)) {
		sh->step = 5;	/* arm() wrote the message */
		_exit(5);
	}
	start_waiting(sh, &c, prefetch_thread, &th);
	t0 = mono_s();
	ret = vamr_unregister(c.vfd, c.handle);
	sh->dereg_s = mono_s() - t0;
	CHILD_CHECK(sh, 9, !ret, "unregister: %s", strerror(-ret));
	CHILD_CHECK(sh, 10, child_wait_flag(&c.done, 5), "the prefetch still waits 5 s after UNREGISTER");
	pthread_join(th, NULL);
	sh->blocked_ret = c.ret;
	close(c.vfd);
}

static void verbs_child(struct shared *sh)
{
	size_t len = PAGES * PAGE;
	uint8_t *a = map_checked(sh, len);
	struct call c = { 0 };
	struct rdma_pair p;
	struct ibv_mr *mr;
	pthread_t th;
	double t0;
	int ret;

	ret = rdma_pair_open(&p, NULL);
	CHILD_CHECK(sh, 3, !ret, "rdma_pair_open: %s", strerror(-ret));
	/* PREFETCH advice needs an MR with local write access (rxe_odp.c's lookup). */
	ret = rdma_pair_reg_mr(&p, a, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
			       VAMR_ACCESS_VA, &mr);
	CHILD_CHECK(sh, 3, !ret, "VA MR: %s", strerror(-ret));
	if (arm(sh, a, len)) {
		sh->step = 5;	/* arm() wrote the message */
		_exit(5);
	}
	c.pd = p.pd;
	c.sge = (struct ibv_sge){ .addr = (uintptr_t)a, .length = len, .lkey = mr->lkey };
	start_waiting(sh, &c, advise_thread, &th);
	t0 = mono_s();
	ret = ibv_dereg_mr(mr);
	sh->dereg_s = mono_s() - t0;
	CHILD_CHECK(sh, 9, !ret, "dereg: %s", strerror(ret));
	CHILD_CHECK(sh, 10, child_wait_flag(&c.done, 5), "the advice still waits 5 s after dereg");
	pthread_join(th, NULL);
	sh->blocked_ret = c.ret;
	CHILD_CHECK(sh, 11, !rdma_pair_close(&p), "close");
}

FIXTURE(pagelock) {
	struct shared *sh;
	int kmsg;
	bool mounted;
};

FIXTURE_SETUP(pagelock)
{
	char uv[64];
	int ret;

	self->sh = child_shared_new(sizeof(*self->sh));
	ASSERT_NE(NULL, self->sh);
	if (access("/dev/vamr", F_OK))
		SKIP(return, "no /dev/vamr");
	uverbs_path(uv, sizeof(uv));
	if (uv[0])
		ASSERT_EQ(0, dev_open_up(uv));
	ASSERT_EQ(0, dev_open_up("/dev/vamr"));
	ASSERT_EQ(0, root_open_up());
	ret = fuse_server_start(&self->sh->srv, PAGES * PAGE, SEED);
	if (ret == -ENODEV)
		SKIP(return, "no FUSE (/dev/fuse) in this kernel");
	ASSERT_EQ(0, ret) TH_LOG("FUSE server: %s", strerror(-ret));
	self->mounted = true;
	self->kmsg = kmsg_open();
}

FIXTURE_TEARDOWN(pagelock)
{
	if (self->mounted)
		fuse_server_stop(&self->sh->srv);
	sys_guard_restore();
}

/*
 * Runs @fn as ATTACKER, holding the server's READs when it asks; checks its
 * report, that it exited while a READ was held, and the clean-up after the
 * server answered.
 */
static void run_child(struct __test_metadata *_metadata, struct shared *sh,
		      void (*fn)(struct shared *), int kmsg, int want_ret, const char *what)
{
	pid_t pid = CHILD_RUN_AS(ATTACKER, fn, sh);
	int st, held;

	ASSERT_LT(0, pid);
	if (child_wait_flag(&sh->want_hang, 30)) {
		fuse_server_hang(&sh->srv, 1);
		__atomic_store_n(&sh->hanging, 1, __ATOMIC_RELEASE);
	}
	st = child_reap(pid, 40, true);
	held = fuse_server_held(&sh->srv);
	fuse_server_hang(&sh->srv, 0);
	EXPECT_EQ(0, st) TH_LOG("child: step %d: %s", sh->step, sh->msg);
	if (st)
		return;
	TH_LOG("%s with a call waiting on a page lock held by I/O: %.3f s; the call: %s; "
	       "READs held at exit: %d", what, sh->dereg_s, strerror(abs(sh->blocked_ret)), held);
	EXPECT_GT(1.0, sh->dereg_s);
	EXPECT_EQ(want_ret, sh->blocked_ret);
	EXPECT_LT(0, held) TH_LOG("no READ was held while the process deregistered and exited");
	EXPECT_NE(0, child_user_gone(ATTACKER, 10)) TH_LOG("uid %d still counted", ATTACKER);
	EXPECT_EQ(0, kmsg_problems(kmsg));
}

TEST_F_TIMEOUT(pagelock, dev_prefetch_unregister, 120)
{
	run_child(_metadata, self->sh, dev_child, self->kmsg, -ECANCELED, "UNREGISTER");
}

TEST_F_TIMEOUT(pagelock, sync_advise_dereg, 120)
{
	char uv[64];

	uverbs_path(uv, sizeof(uv));
	if (!uv[0])
		SKIP(return, "no RDMA device %s", rdma_pair_default_dev());
	self->sh->writable = 1;
	run_child(_metadata, self->sh, verbs_child, self->kmsg, ECANCELED, "ibv_dereg_mr");
}

TEST_HARNESS_MAIN
