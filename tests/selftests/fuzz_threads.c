// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_fuzz: the worker threads: each picks operation kinds from its role's
 * mix with its own random numbers (seeded from the run's seed), runs them
 * under the hang watchdog, and sets up and tears down an rdma thread's QPs
 * and MRs.
 */
#define _GNU_SOURCE
#include "rdma_fuzz.h"

/* ---- threads --------------------------------------------------------- */

static enum kind pick_kind(struct thr *t, const struct weight *mix, size_t n)
{
	unsigned int total = 0, x;
	size_t i;

	for (i = 0; i < n; i++)
		if (!G.excluded[mix[i].k])
			total += mix[i].w;
	if (!total)
		return N_KINDS;
	x = (unsigned int)below(&t->rng, total);
	for (i = 0; i < n; i++) {
		if (G.excluded[mix[i].k])
			continue;
		if (x < mix[i].w)
			return mix[i].k;
		x -= mix[i].w;
	}
	return N_KINDS;
}

static void run_op(struct thr *t, enum kind k)
{
	op_begin(t, k);
	switch (k) {
	case K_ioc_query:
		op_query(t);
		break;
	case K_ioc_register:
		op_register(t);
		break;
	case K_ioc_unregister:
		op_unregister(t);
		break;
	case K_ioc_access:
		op_access(t);
		break;
	case K_ioc_atomic:
		op_atomic(t);
		break;
	case K_ioc_prefetch:
		op_prefetch(t);
		break;
	case K_ioc_stats:
		op_stats(t);
		break;
	case K_ioc_events_open:
		op_events_open(t);
		break;
	case K_ioc_mr_query:
		op_mr_query(t);
		break;
	case K_ioc_bad_cmd:
		op_bad_cmd(t);
		break;
	case K_ioc_fd_lifecycle:
		op_fd_lifecycle(t);
		break;
	case K_ioc_integrity:
		op_integrity(t);
		break;
	case K_ev_read:
		op_ev_read(t, false);
		break;
	case K_ev_read_blocking:
		op_ev_read(t, true);
		break;
	case K_ev_poll:
		op_ev_poll(t);
		break;
	case K_ev_close:
		op_ev_close(t);
		break;
	case K_mr_reg_va:
		op_reg(t, true);
		break;
	case K_mr_reg_normal:
		op_reg(t, false);
		break;
	case K_mr_reg_refused:
		op_reg_refused(t);
		break;
	case K_mr_dereg:
		op_dereg(t);
		break;
	case K_mr_rereg:
		op_rereg(t);
		break;
	case K_advise_sync:
	case K_advise_async:
	case K_advise_normal:
		op_advise(t, k);
		break;
	case K_rdma_batch:
		op_rdma_batch(t, false);
		break;
	case K_rdma_dereg_inflight:
		op_rdma_batch(t, true);
		break;
	case K_rdma_integrity:
		op_rdma_integrity(t);
		break;
	case K_mm_touch:
		op_touch(t);
		break;
	case K_mm_remap:
		op_remap(t);
		break;
	case K_mm_munmap:
		op_munmap(t);
		break;
	case K_mm_mremap:
		op_mremap(t, false);
		break;
	case K_mm_mremap_dontunmap:
		op_mremap(t, true);
		break;
	case K_mm_mprotect:
		op_mprotect(t);
		break;
	case K_mm_punch_hole:
		op_punch_hole(t);
		break;
	case K_mm_truncate:
		op_truncate(t);
		break;
	case K_mm_mlock:
		op_mlock(t);
		break;
	case K_mm_fork:
		op_fork(t);
		break;
	case K_mm_migrate:
		op_migrate(t);
		break;
	case K_mm_argpage:
		op_argpage(t);
		break;
	case K_vamr_limit:
		op_vamr_limit(t);
		break;
	default:
		if (k < N_KINDS && madv_of_kind[k])
			op_madvise(t, k);
		break;
	}
	op_end(t);
}

void sigusr1(int sig)
{
	(void)sig;
}

void fatal_signal(int sig, siginfo_t *si, void *uc)
{
	char buf[160];
	int n;

	(void)uc;
	if (G.limit_saved[0])
		write_limit(G.limit_saved);
	n = snprintf(buf, sizeof(buf), "# FATAL: signal %d at %p in %s during %s (seed %llu)\n",
		     sig, si->si_addr, self_thr ? self_thr->name : "main",
		     self_thr ? kind_name[self_thr->cur] : "-", (unsigned long long)G.seed);
	if (n > 0 && write(STDOUT_FILENO, buf, (size_t)n) < 0)
		_exit(3);
	_exit(3);
}

static int rdma_thread_setup(struct thr *t)
{
	struct rstate *s = calloc(1, sizeof(*s));
	int ret;

	if (!s)
		return -ENOMEM;
	t->rs = s;
	ret = rdma_pair_open(&s->p, NULL);
	if (ret)
		return ret;
	s->open = true;
	s->pd2 = ibv_alloc_pd(s->p.ctx);
	s->lbuf = mmap(NULL, LBUF_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	s->vbuf = mmap(NULL, VBUF_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (!s->pd2 || s->lbuf == MAP_FAILED || s->vbuf == MAP_FAILED)
		return -ENOMEM;
	memset(s->lbuf, 0, LBUF_LEN);
	memset(s->vbuf, 0, VBUF_LEN);
	ret = rdma_pair_reg_mr(&s->p, s->lbuf, LBUF_LEN, ACC_ALL, &s->lmr);
	if (!ret)
		ret = rdma_pair_reg_mr(&s->p, s->vbuf, VBUF_LEN, ACC_ALL | VAMR_ACCESS_VA, &s->vmr);
	return ret;
}

static void rdma_thread_teardown(struct thr *t)
{
	struct rstate *s = t->rs;
	int ret;

	if (!s)
		return;
	if (s->open) {
		/* Make sure no WR still uses an MR we are about to free. */
		rdma_pair_recover(&s->p);
	}
	while (s->n)
		dereg_at(t, s->n - 1, K_mr_dereg);
	ret = s->vmr ? ibv_dereg_mr(s->vmr) : 0;
	if (ret)
		violation(K_mr_dereg, "dereg of the private VA MR: %s", ename(ret));
	ret = s->lmr ? ibv_dereg_mr(s->lmr) : 0;
	if (ret)
		violation(K_mr_dereg, "dereg of the private MR: %s", ename(ret));
	ret = s->pd2 ? ibv_dealloc_pd(s->pd2) : 0;
	if (ret)
		violation(K_mr_dereg, "ibv_dealloc_pd: %s", ename(ret));
	ret = s->open ? rdma_pair_close(&s->p) : 0;
	if (ret)
		violation(K_mr_dereg, "rdma_pair_close: %s", ename(-ret));
	if (s->lbuf && s->lbuf != MAP_FAILED)
		munmap(s->lbuf, LBUF_LEN);
	if (s->vbuf && s->vbuf != MAP_FAILED)
		munmap(s->vbuf, VBUF_LEN);
	free(s);
	t->rs = NULL;
}

void *worker(void *arg)
{
	struct thr *t = arg;
	const struct weight *mix;
	size_t nmix;

	self_thr = t;
	t->tid = (pid_t)syscall(SYS_gettid);
	pthread_setname_np(pthread_self(), t->name);
	switch (t->role) {
	case R_IOCTL:
		mix = ioctl_mix;
		nmix = ARRAY_SIZE(ioctl_mix);
		break;
	case R_EVENTS:
		mix = events_mix;
		nmix = ARRAY_SIZE(events_mix);
		break;
	case R_RDMA:
		mix = rdma_mix;
		nmix = ARRAY_SIZE(rdma_mix);
		break;
	default:
		mix = churn_mix;
		nmix = ARRAY_SIZE(churn_mix);
		break;
	}
	if (t->role == R_EVENTS) {
		struct sigevent sev;

		memset(&sev, 0, sizeof(sev));
		sev.sigev_notify = SIGEV_THREAD_ID;
		sev.sigev_signo = SIGUSR1;
		sev._sigev_un._tid = t->tid;
		t->timer_ok = !timer_create(CLOCK_MONOTONIC, &sev, &t->timer);
	}
	if (t->role == R_RDMA) {
		int ret = rdma_thread_setup(t);

		if (ret) {
			violation(K_rdma_batch, "rdma thread set-up: %s", ename(-ret));
			goto out;
		}
	}
	while (!stopping()) {
		enum kind k = pick_kind(t, mix, nmix);

		if (k == N_KINDS)
			break;		/* everything excluded */
		run_op(t, k);
	}
out:
	op_begin(t, K_thread_teardown);	/* the watchdog sees a stuck teardown too */
	if (t->role == R_RDMA)
		rdma_thread_teardown(t);
	if (t->timer_ok)
		timer_delete(t->timer);
	op_end(t);
	__atomic_store_n(&t->done, true, __ATOMIC_RELEASE);
	return NULL;
}
