/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rdma_fuzz: what its files share (rdma_fuzz.c says what it does): the
 * configuration, the operation kinds and their mixes, the random numbers,
 * the shared state G and the functions of each file.
 */
#ifndef VAMR_SELFTEST_RDMA_FUZZ_H
#define VAMR_SELFTEST_RDMA_FUZZ_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/falloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rdma/ib_user_verbs.h>

#include "kselftest.h"	/* ARRAY_SIZE, __printf; the TAP output is our own */
#include "pattern.h"
#include "rdma_pair.h"
#include "mm_util.h"
#include "vamr_lib.h"

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif
#ifndef MLOCK_ONFAULT
#define MLOCK_ONFAULT 1
#endif
#ifndef MFD_HUGETLB
#define MFD_HUGETLB 4U
#endif
#define FUZZ_MPOL_MF_MOVE (1 << 1)
/* IB_ACCESS_FLUSH_PERSISTENT (rdma-core 44 has no name for it). */
#define FUZZ_ACCESS_FLUSH_PERSISTENT (1u << 9)

#define PAGE		4096ul
#define MIB		(1ul << 20)

/* ---- configuration --------------------------------------------------- */

#define NR_IOCTL_THREADS	2
#define NR_RDMA_THREADS		2
#define NR_CHURN_THREADS	2
#define NR_EVENTS_THREADS	1
#define MAX_THREADS		8

#define NR_VFDS			3	/* shared /dev/vamr files */
#define MAX_HANDLES		48	/* regions remembered per shared file */
#define MAX_EVFDS		32	/* events files kept open */
#define MAX_MRS			16	/* MRs per rdma thread */
#define MAX_SGES		64	/* SGEs per advise */
#define NR_KEYS			64	/* recent MR keys for MR_QUERY */

#define OP_HANG_MS		60000	/* one operation longer than this: hang */
#define JOIN_LIMIT_MS		15000	/* stop -> all workers joined */
#define CLEANUP_LIMIT_MS	5000	/* joined -> everything released */
#define SETTLE_MS		3000	/* wait for counters to settle */
#define CHILD_EXIT_MS		10000	/* a forked child must be gone by then */
#define WC_WAIT_MS		5000	/* completions of one batch */
#define CHECK_WAIT_MS		15000	/* one checked operation (rdma_integrity) */
#define MAX_SOFT_OFFLINE	256	/* pages a run may soft-offline */
#define MAX_VIOLATIONS_SHOWN	40

/* The VA window all threads fight over: arenas with PROT_NONE gaps. */
#define WINDOW_HINT		0x100000000000ul	/* 16 TiB: far below mmap_base */
#define WINDOW_LEN		(16 * MIB)
#define ARG_OFF			(15 * MIB)		/* the unstable argument pages */
#define ARG_PAGES		4
#define ARG_SLICE		(ARG_PAGES * PAGE / MAX_THREADS)
#define SPARSE_ADDR		0x200000000000ul	/* nothing is ever mapped there */
#define LIMIT_PARAM		"/sys/module/vamr/parameters/max_regions_per_mm"
#define COOKIE_MAGIC		0xfa22ull

static const struct { size_t off, len; } arena_layout[] = {
	{ 0, 4 * MIB },		/* 2 MiB aligned: THP, hugetlb */
	{ 6 * MIB, 1 * MIB },
	{ 8 * MIB, 256 << 10 },
	{ 9 * MIB, 64 << 10 },
	{ 10 * MIB, 2 * MIB },	/* 2 MiB aligned */
	{ 14 * MIB, 16 << 10 },
};

#define NR_ARENAS ((int)ARRAY_SIZE(arena_layout))

#define BUF_LEN			(64 << 10)	/* per-thread bounce/pattern buffers */
#define LBUF_LEN		(1 * MIB)	/* rdma local buffer (normal MR) */
#define LBUF_RANDOM		(512 << 10)	/* first half: random batches */
#define VBUF_LEN		(16 * PAGE)	/* private VA MR / private region */

#define ACC_ALL (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

/* ---- operation kinds ------------------------------------------------- */

enum kind {
	K_ioc_query,
	K_ioc_register,
	K_ioc_unregister,
	K_ioc_access,
	K_ioc_atomic,
	K_ioc_prefetch,
	K_ioc_stats,
	K_ioc_events_open,
	K_ioc_mr_query,
	K_ioc_bad_cmd,
	K_ioc_fd_lifecycle,
	K_ioc_integrity,
	K_ev_read,
	K_ev_read_blocking,
	K_ev_poll,
	K_ev_close,
	K_mr_reg_va,
	K_mr_reg_normal,
	K_mr_reg_refused,
	K_mr_dereg,
	K_mr_rereg,
	K_advise_sync,
	K_advise_async,
	K_advise_normal,
	K_rdma_batch,
	K_rdma_dereg_inflight,
	K_rdma_integrity,
	K_qp_recover,
	K_mm_touch,
	K_mm_remap,
	K_mm_munmap,
	K_mm_mremap,
	K_mm_mremap_dontunmap,
	K_mm_mprotect,
	K_mm_punch_hole,
	K_mm_truncate,
	K_mm_mlock,
	K_mm_fork,
	K_mm_migrate,
	K_mm_argpage,
	K_vamr_limit,
	K_madv_dontneed,
	K_madv_free,
	K_madv_pageout,
	K_madv_cold,
	K_madv_willneed,
	K_madv_remove,
	K_madv_hugepage,
	K_madv_nohugepage,
	K_madv_mergeable,
	K_madv_unmergeable,
	K_madv_dontfork,
	K_madv_dofork,
	K_madv_wipeonfork,
	K_madv_keeponfork,
	K_madv_guard_install,
	K_madv_guard_remove,
	K_madv_populate_read,
	K_madv_populate_write,
	K_madv_collapse,
	K_madv_dontneed_locked,
	K_madv_soft_offline,
	K_thread_teardown,
	N_KINDS
};

static const char *const kind_name[N_KINDS] = {
	[K_ioc_query] = "ioc_query",
	[K_ioc_register] = "ioc_register",
	[K_ioc_unregister] = "ioc_unregister",
	[K_ioc_access] = "ioc_access",
	[K_ioc_atomic] = "ioc_atomic",
	[K_ioc_prefetch] = "ioc_prefetch",
	[K_ioc_stats] = "ioc_stats",
	[K_ioc_events_open] = "ioc_events_open",
	[K_ioc_mr_query] = "ioc_mr_query",
	[K_ioc_bad_cmd] = "ioc_bad_cmd",
	[K_ioc_fd_lifecycle] = "ioc_fd_lifecycle",
	[K_ioc_integrity] = "ioc_integrity",
	[K_ev_read] = "ev_read",
	[K_ev_read_blocking] = "ev_read_blocking",
	[K_ev_poll] = "ev_poll",
	[K_ev_close] = "ev_close",
	[K_mr_reg_va] = "mr_reg_va",
	[K_mr_reg_normal] = "mr_reg_normal",
	[K_mr_reg_refused] = "mr_reg_refused",
	[K_mr_dereg] = "mr_dereg",
	[K_mr_rereg] = "mr_rereg",
	[K_advise_sync] = "advise_sync",
	[K_advise_async] = "advise_async",
	[K_advise_normal] = "advise_normal",
	[K_rdma_batch] = "rdma_batch",
	[K_rdma_dereg_inflight] = "rdma_dereg_inflight",
	[K_rdma_integrity] = "rdma_integrity",
	[K_qp_recover] = "qp_recover",
	[K_mm_touch] = "mm_touch",
	[K_mm_remap] = "mm_remap",
	[K_mm_munmap] = "mm_munmap",
	[K_mm_mremap] = "mm_mremap",
	[K_mm_mremap_dontunmap] = "mm_mremap_dontunmap",
	[K_mm_mprotect] = "mm_mprotect",
	[K_mm_punch_hole] = "mm_punch_hole",
	[K_mm_truncate] = "mm_truncate",
	[K_mm_mlock] = "mm_mlock",
	[K_mm_fork] = "mm_fork",
	[K_mm_migrate] = "mm_migrate",
	[K_mm_argpage] = "mm_argpage",
	[K_vamr_limit] = "vamr_limit",
	[K_madv_dontneed] = "madv_dontneed",
	[K_madv_free] = "madv_free",
	[K_madv_pageout] = "madv_pageout",
	[K_madv_cold] = "madv_cold",
	[K_madv_willneed] = "madv_willneed",
	[K_madv_remove] = "madv_remove",
	[K_madv_hugepage] = "madv_hugepage",
	[K_madv_nohugepage] = "madv_nohugepage",
	[K_madv_mergeable] = "madv_mergeable",
	[K_madv_unmergeable] = "madv_unmergeable",
	[K_madv_dontfork] = "madv_dontfork",
	[K_madv_dofork] = "madv_dofork",
	[K_madv_wipeonfork] = "madv_wipeonfork",
	[K_madv_keeponfork] = "madv_keeponfork",
	[K_madv_guard_install] = "madv_guard_install",
	[K_madv_guard_remove] = "madv_guard_remove",
	[K_madv_populate_read] = "madv_populate_read",
	[K_madv_populate_write] = "madv_populate_write",
	[K_madv_collapse] = "madv_collapse",
	[K_madv_dontneed_locked] = "madv_dontneed_locked",
	[K_madv_soft_offline] = "madv_soft_offline",
	[K_thread_teardown] = "thread_teardown",
};

static const int madv_of_kind[N_KINDS] = {
	[K_madv_dontneed] = MADV_DONTNEED, [K_madv_free] = MADV_FREE,
	[K_madv_pageout] = MADV_PAGEOUT, [K_madv_cold] = MADV_COLD,
	[K_madv_willneed] = MADV_WILLNEED, [K_madv_remove] = MADV_REMOVE,
	[K_madv_hugepage] = MADV_HUGEPAGE, [K_madv_nohugepage] = MADV_NOHUGEPAGE,
	[K_madv_mergeable] = MADV_MERGEABLE, [K_madv_unmergeable] = MADV_UNMERGEABLE,
	[K_madv_dontfork] = MADV_DONTFORK, [K_madv_dofork] = MADV_DOFORK,
	[K_madv_wipeonfork] = MADV_WIPEONFORK, [K_madv_keeponfork] = MADV_KEEPONFORK,
	[K_madv_guard_install] = MADV_GUARD_INSTALL,
	[K_madv_guard_remove] = MADV_GUARD_REMOVE,
	[K_madv_populate_read] = MADV_POPULATE_READ,
	[K_madv_populate_write] = MADV_POPULATE_WRITE,
	[K_madv_collapse] = MADV_COLLAPSE,
	[K_madv_dontneed_locked] = MADV_DONTNEED_LOCKED,
	[K_madv_soft_offline] = MADV_SOFT_OFFLINE,
};

struct weight { enum kind k; unsigned int w; };

static const struct weight ioctl_mix[] = {
	{ K_ioc_query, 3 }, { K_ioc_register, 16 }, { K_ioc_unregister, 9 },
	{ K_ioc_access, 15 }, { K_ioc_atomic, 8 }, { K_ioc_prefetch, 8 },
	{ K_ioc_stats, 6 }, { K_ioc_events_open, 3 }, { K_ioc_mr_query, 6 },
	{ K_ioc_bad_cmd, 5 }, { K_ioc_fd_lifecycle, 2 }, { K_ioc_integrity, 4 },
};

static const struct weight events_mix[] = {
	{ K_ev_read, 50 }, { K_ev_read_blocking, 10 }, { K_ev_poll, 30 },
	{ K_ev_close, 4 }, { K_ioc_events_open, 6 },
};

static const struct weight rdma_mix[] = {
	{ K_mr_reg_va, 10 }, { K_mr_reg_normal, 6 }, { K_mr_reg_refused, 1 },
	{ K_mr_dereg, 8 }, { K_mr_rereg, 4 }, { K_advise_sync, 6 },
	{ K_advise_async, 6 }, { K_advise_normal, 3 }, { K_rdma_batch, 30 },
	{ K_rdma_dereg_inflight, 4 }, { K_rdma_integrity, 6 },
};

static const struct weight churn_mix[] = {
	{ K_mm_touch, 25 }, { K_mm_remap, 10 }, { K_mm_munmap, 4 },
	{ K_mm_mremap, 4 }, { K_mm_mremap_dontunmap, 3 }, { K_mm_mprotect, 6 },
	{ K_mm_punch_hole, 3 }, { K_mm_truncate, 2 }, { K_mm_mlock, 3 },
	{ K_mm_fork, 2 }, { K_mm_migrate, 2 }, { K_mm_argpage, 6 }, { K_vamr_limit, 1 },
	{ K_madv_dontneed, 4 }, { K_madv_free, 2 }, { K_madv_pageout, 2 },
	{ K_madv_cold, 1 }, { K_madv_willneed, 1 }, { K_madv_remove, 2 },
	{ K_madv_hugepage, 1 }, { K_madv_nohugepage, 1 }, { K_madv_mergeable, 1 },
	{ K_madv_unmergeable, 1 }, { K_madv_dontfork, 1 }, { K_madv_dofork, 1 },
	{ K_madv_wipeonfork, 1 }, { K_madv_keeponfork, 1 },
	{ K_madv_guard_install, 1 }, { K_madv_guard_remove, 1 },
	{ K_madv_populate_read, 1 }, { K_madv_populate_write, 1 },
	{ K_madv_collapse, 1 }, { K_madv_dontneed_locked, 1 },
	{ K_madv_soft_offline, 1 },
};

/* ---- random numbers -------------------------------------------------- */

struct rng { uint64_t s; };

static inline uint64_t rnd(struct rng *r)
{
	r->s += 0x9e3779b97f4a7c15ULL;
	return pattern_mix64(r->s);
}

static inline uint64_t below(struct rng *r, uint64_t n)
{
	return n ? rnd(r) % n : 0;
}

static inline bool chance(struct rng *r, unsigned int pct)
{
	return below(r, 100) < pct;
}

/* ---- shared state ---------------------------------------------------- */

enum role { R_IOCTL, R_EVENTS, R_RDMA, R_CHURN };
static const char *const role_name[] = { "ioctl", "events", "rdma", "churn" };

struct range { uint8_t *addr; size_t len; int arena; size_t off; };

struct hent { uint32_t handle; uint64_t addr, len; uint32_t access; };

struct htab {
	pthread_mutex_t lock;
	struct hent e[MAX_HANDLES];
	int n;
};

struct event { int fd; int qid; bool nonblock; };

struct mrent {
	struct ibv_mr *mr;
	uint8_t *addr;
	size_t len;
	uint64_t iova;
	unsigned int access;
	bool va;
	int pdi;		/* 0: the pair's PD, 1: pd2 */
};

struct rstate {
	struct rdma_pair p;
	bool open;
	struct ibv_pd *pd2;
	struct mrent m[MAX_MRS];
	int n;
	uint8_t *lbuf;		/* normal MR, private */
	struct ibv_mr *lmr;
	uint8_t *vbuf;		/* VA MR, private, checked by rdma_integrity */
	struct ibv_mr *vmr;
	int recover_fail_streak;
};

struct thr {
	enum role role;
	int idx;
	char name[16];
	pthread_t th;
	pid_t tid;
	struct rng rng;
	int cur;			/* kind of the operation in progress */
	uint64_t cur_start;		/* its start (ms), 0 when idle */
	bool hang_reported;
	bool done;
	uint8_t *argbuf;		/* [RW][PROT_NONE][RO] pages */
	uint8_t *unstable_at;		/* where the last LOC_UNSTABLE struct went */
	uint8_t *bounce;		/* BUF_LEN scratch */
	uint8_t *pat;			/* BUF_LEN of pattern bytes */
	uint8_t *priv;			/* ioctl: private region (VBUF_LEN) */
	uint32_t priv_h;
	bool priv_ok;
	struct rstate *rs;		/* rdma */
	timer_t timer;			/* events: interrupts blocking reads */
	bool timer_ok;
};

struct kstat {
	uint64_t n, ok;
	uint64_t err[134];		/* by errno; the last slot: other */
};

struct fuzz_state {
	unsigned int seconds;
	uint64_t seed;
	bool verbose;
	bool excluded[N_KINDS];
	int stop;
	uint8_t *win;
	struct range ar[NR_ARENAS];
	int memfd[NR_ARENAS];
	int hugefd;
	uint8_t *argpg;
	int vfd[NR_VFDS];
	struct htab ht[NR_VFDS];
	pthread_mutex_t ev_lock;
	struct event ev[MAX_EVFDS];
	int nev;
	int next_qid;
	uint32_t keys[NR_KEYS];
	unsigned int key_pos;
	int nnodes;
	bool have_rdma, va_supported;
	uint32_t ib_index;	/* rxe's device index, for MR_QUERY */
	int soft_offlined;
	struct thr thr[MAX_THREADS];
	int nthr;
	struct kstat ks[N_KINDS];
	uint64_t wc_hist[32];
	uint64_t violations;
	uint64_t hangs;
	uint64_t lost_handles;
	pthread_mutex_t out_lock;
	int ksm_run_saved;
	char limit_saved[16];		/* max_regions_per_mm at start, "" if none */
};

/* Everything the threads share (rdma_fuzz.c). */
extern struct fuzz_state G;

/* The thread running the current operation (NULL in main). */
extern __thread struct thr *self_thr;

/* ---- ioctl argument placement and the errnos of each ioctl ---------- */

enum loc {
	LOC_STACK, LOC_MISALIGNED, LOC_RO, LOC_UNSTABLE,
	LOC_NULL, LOC_KERNEL, LOC_NONE, LOC_STRADDLE,
};

static const uint64_t bad_addrs[] = {
	1, 0x1000, 0xffff888000000000ull, 0xffffffff81000000ull,
	0xffffc90000000000ull, 0x8000000000000000ull, 0xfffffffffffff000ull,
	0xfffffffffffffff8ull,
};
#define NR_BAD_ADDRS ARRAY_SIZE(bad_addrs)

static const int ERR_QUERY[] = { EINVAL, EFAULT, 0 };
static const int ERR_REGISTER[] = { EINVAL, EFAULT, ENOMEM, EPERM, EINTR, ENOSPC,
				    EHWPOISON, EAGAIN, 0 };
static const int ERR_UNREGISTER[] = { ENOENT, EINVAL, EFAULT, EPERM, 0 };
static const int ERR_ACCESS[] = { ENOENT, EINVAL, EACCES, EFAULT, EPERM, EAGAIN,
				  ENOMEM, EINTR, EHWPOISON, ECANCELED, 0 };
/* PREFETCH also: ECANCELED when the region is being unregistered. */
static const int ERR_PREFETCH[] = { ENOENT, EINVAL, EACCES, EFAULT, EPERM, EAGAIN,
				    ENOMEM, EINTR, EHWPOISON, ECANCELED, 0 };
static const int ERR_STATS[] = { ENOENT, EINVAL, EFAULT, EPERM, 0 };
static const int ERR_EVOPEN[] = { EINVAL, EMFILE, ENFILE, ENOMEM, EFAULT, EPERM, 0 };
static const int ERR_MRQUERY[] = { ENOENT, EINVAL, EFAULT, 0 };
/*
 * What a registration of mapped-or-not user memory may fail with: pin
 * failures, and ENOSPC (the max_regions_per_mm limit).
 */
static const int ERR_PIN[] = { ENOMEM, EINTR, EHWPOISON, EAGAIN, ENOSPC, 0 };

/* Distinct violations: the kind and the message with its numbers blanked. */
#define MAX_SIGS 64
struct fuzz_sig { char text[160]; uint64_t n; };
extern struct fuzz_sig sigs[MAX_SIGS];
extern int nsigs;

/*
 * fuzz_check.c: output, violations, time, copies, ranges of the window,
 * the hang watchdog, ioctl argument placement and checks, the region table.
 */
void diag(const char *fmt, ...) __printf(1, 2);
void tap(bool ok, const char *name, const char *fmt, ...) __printf(3, 4);
void tap_skip(const char *name, const char *why);
const char *ename(int e);
void violation(enum kind k, const char *fmt, ...) __printf(2, 3);
void op_result(enum kind k, int err);
uint64_t now_ms(void);
void sleep_ms(unsigned int ms);
bool stopping(void);
int self_write(void *dst, const void *src, size_t len);
int self_read(void *dst, const void *src, size_t len);
struct range pick_range(struct rng *r, size_t max_len);
void unalign(struct rng *r, struct range *g);
void into_gap(struct rng *r, struct range *g);
bool in_window(const void *p, size_t len);
void op_begin(struct thr *t, enum kind k);
void op_end(struct thr *t);
void print_file_lines(const char *path, const char *prefix, int max);
int check_hangs(uint64_t limit_ms);
enum loc pick_loc(struct rng *r);
int ioc_at(struct thr *t, int fd, unsigned long cmd, void *s, size_t sz, enum loc loc, bool *back);
bool in_set(int e, const int *set);
bool ioc_check(enum kind k, const char *what, enum loc loc, bool iowr, int ret, const int *set);
void ht_add(int fdi, struct thr *t, const struct hent *e);
bool ht_take(int fdi, struct thr *t, struct hent *out);
bool ht_peek(int fdi, struct thr *t, struct hent *out);
void ev_add(int fd, int qid, bool nonblock);
void publish_key(uint32_t key);
uint32_t dead_handle(struct rng *r);

/* fuzz_ops_ioctl.c: the /dev/vamr ioctl operations */
void op_query(struct thr *t);
void op_register(struct thr *t);
void op_unregister(struct thr *t);
void op_access(struct thr *t);
void op_atomic(struct thr *t);
void op_prefetch(struct thr *t);
void op_stats(struct thr *t);
void op_events_open(struct thr *t);
void op_mr_query(struct thr *t);
void op_bad_cmd(struct thr *t);
void op_fd_lifecycle(struct thr *t);
bool data_bad(const void *buf, size_t len, uint64_t seed, size_t *at);
void op_integrity(struct thr *t);

/* fuzz_ops_events.c: the events operations */
void op_ev_read(struct thr *t, bool blocking);
void op_ev_poll(struct thr *t);
void op_ev_close(struct thr *t);

/* fuzz_ops_rdma.c: the rdma operations */
int advise_mr(struct ibv_pd *pd, int advice, uint32_t flags, struct ibv_sge *sge, uint32_t n);
int mr_query_key(uint32_t key, struct vamr_mr_query *q);
void dereg_at(struct thr *t, int i, enum kind k);
void op_reg(struct thr *t, bool va);
void op_reg_refused(struct thr *t);
void op_dereg(struct thr *t);
void op_rereg(struct thr *t);
void op_advise(struct thr *t, enum kind k);
void op_rdma_batch(struct thr *t, bool dereg_inflight);
void op_rdma_integrity(struct thr *t);

/* fuzz_ops_churn.c: the churn operations */
void op_touch(struct thr *t);
void op_remap(struct thr *t);
void op_munmap(struct thr *t);
void op_mremap(struct thr *t, bool dontunmap);
void op_mprotect(struct thr *t);
void op_punch_hole(struct thr *t);
void op_truncate(struct thr *t);
void op_mlock(struct thr *t);
void op_migrate(struct thr *t);
void op_argpage(struct thr *t);
int write_limit(const char *val);
void op_vamr_limit(struct thr *t);
void op_madvise(struct thr *t, enum kind k);
void op_fork(struct thr *t);

/* fuzz_threads.c: the workers, their operation mix and signals */
void sigusr1(int sig);
void fatal_signal(int sig, siginfo_t *si, void *uc);
void *worker(void *arg);

#endif /* VAMR_SELFTEST_RDMA_FUZZ_H */
