// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_fuzz: a structured, time-bounded fuzzer of vamr and of VA MRs on rxe.
 *
 * Several threads pick operations at random for a bounded time:
 *
 *   ioctl threads   every /dev/vamr ioctl with valid and invalid arguments,
 *                   argument structs at bad places (NULL, kernel addresses,
 *                   PROT_NONE, read-only, straddling into PROT_NONE, a page
 *                   another thread keeps unmapping), random command numbers,
 *                   open/register/close cycles, and a private region whose
 *                   data is checked through VAMR_IOC_ACCESS and ATOMIC;
 *   events thread   read()/poll() of events files (short, bad and unstable
 *                   buffers, reads interrupted by a signal), record checks;
 *   rdma threads    each with its own loopback QP pair (rdma_pair.h):
 *                   ibv_reg_mr/dereg/rereg of VA MRs (VAMR_ACCESS_VA) and
 *                   normal MRs, ibv_advise_mr (sync and async, PREFETCH,
 *                   PREFETCH_WRITE, PREFETCH_NO_FAULT, many SGEs), batches of
 *                   RDMA WRITE/READ/SEND/atomics over those MRs (error
 *                   completions tolerated, QPs recovered), deregistration
 *                   with work in flight, and a private VA MR whose data is
 *                   checked after remaps (rereg and advise go to the kernel
 *                   as the uverbs commands when the provider lacks them);
 *   churn threads   munmap, mmap MAP_FIXED (anon, shmem, memfd, hugetlb,
 *                   PROT_NONE, read-only), mremap (also MREMAP_DONTUNMAP),
 *                   every madvise advice, mprotect, memfd hole punch and
 *                   truncate, mlock, move_pages, fork (the child touches
 *                   memory, checks EPERM from the parent's file and exits),
 *                   and short dips of vamr's max_regions_per_mm parameter.
 *
 * All of them work over one VA window (arenas) so that registrations,
 * accesses and remaps collide. The fuzzer never touches that window with
 * the CPU: it copies through a memfd (pwrite + pread), so a bad mapping
 * makes a syscall fail with EFAULT instead of killing the process.
 *
 * Invariants checked: each ioctl fails only with the errnos its
 * documentation lists (never ENOTTY for a known command), with exactly
 * EFAULT for an unreadable argument, with EINVAL for invalid flags (never
 * success); _IOWR ioctls never succeed when the reply cannot be written;
 * the data of the private region and the private VA MR is right; VA MRs are
 * found by VAMR_IOC_MR_QUERY with their range and normal MRs are not;
 * documented refusals (VA + ODP, VA + FLUSH_PERSISTENT, rereg of a VA MR)
 * stay refusals; events records are well-formed with growing generations;
 * no operation hangs; forked children exit; after teardown VmPin and the
 * global vamr counters are back to their starting values, the per-process
 * region count is back to zero and the teardown was quick; a child that
 * exits with everything live leaves nothing behind.
 *
 * TAP: "# seed=N" first (replay with -s N; threads interleave differently
 * on every run, so a replay repeats each thread's choices, not the timing),
 * then one test per phase: fuzz_run, teardown_clean, exit_release; then the
 * operations done per kind.
 *
 * usage: rdma_fuzz [-t SECONDS] [-s SEED] [-x KIND[,KIND...]] [-l] [-v]
 *   -t  run time (default 10, what scripts/test.sh runs; scripts/soak.sh runs
 *       it for 30 min); env VAMR_FUZZ_SECONDS overrides
 *   -s  seed (default from the clock); env VAMR_FUZZ_SEED overrides
 *   -x  exclude operation kinds ("name" or "prefix*"); env VAMR_FUZZ_EXCLUDE
 *       adds to it
 *   -l  list the operation kinds
 *   -v  print every violation (default: the first 40)
 */
#define _GNU_SOURCE
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
#include "vamr_lib.h"

/* Advice values the libc headers may lack (asm-generic/mman-common.h). */
#ifndef MADV_FREE
#define MADV_FREE 8
#endif
#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#endif
#ifndef MADV_KEEPONFORK
#define MADV_KEEPONFORK 19
#endif
#ifndef MADV_COLD
#define MADV_COLD 20
#endif
#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef MADV_DONTNEED_LOCKED
#define MADV_DONTNEED_LOCKED 24
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
#ifndef MADV_SOFT_OFFLINE
#define MADV_SOFT_OFFLINE 101
#endif
#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif
#ifndef MADV_GUARD_REMOVE
#define MADV_GUARD_REMOVE 103
#endif
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

static uint64_t rnd(struct rng *r)
{
	r->s += 0x9e3779b97f4a7c15ULL;
	return pattern_mix64(r->s);
}

static uint64_t below(struct rng *r, uint64_t n)
{
	return n ? rnd(r) % n : 0;
}

static bool chance(struct rng *r, unsigned int pct)
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

static struct {
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
} G = {
	.ev_lock = PTHREAD_MUTEX_INITIALIZER,
	.out_lock = PTHREAD_MUTEX_INITIALIZER,
	.hugefd = -1,
	.ksm_run_saved = -1,
};

static __thread struct thr *self_thr;

/* ---- output ---------------------------------------------------------- */

static void diag(const char *fmt, ...) __printf(1, 2);
static void diag(const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&G.out_lock);
	printf("# %s\n", buf);
	fflush(stdout);
	pthread_mutex_unlock(&G.out_lock);
}

static int tap_n;

static void tap(bool ok, const char *name, const char *fmt, ...)
	__printf(3, 4);
static void tap(bool ok, const char *name, const char *fmt, ...)
{
	char why[256] = "";
	va_list ap;

	if (fmt) {
		va_start(ap, fmt);
		vsnprintf(why, sizeof(why), fmt, ap);
		va_end(ap);
	}
	pthread_mutex_lock(&G.out_lock);
	printf("%s %d %s%s%s\n", ok ? "ok" : "not ok", ++tap_n, name,
	       why[0] ? " # " : "", why);
	fflush(stdout);
	pthread_mutex_unlock(&G.out_lock);
}

static void tap_skip(const char *name, const char *why)
{
	pthread_mutex_lock(&G.out_lock);
	printf("ok %d %s # SKIP %s\n", ++tap_n, name, why);
	fflush(stdout);
	pthread_mutex_unlock(&G.out_lock);
}

static const char *ename(int e)
{
	const char *s = e ? strerrorname_np(e) : "OK";

	return s ? s : "E?";
}

static void violation(enum kind k, const char *fmt, ...)
	__printf(2, 3);
/* Distinct violations: the kind and the message with its numbers blanked. */
#define MAX_SIGS 64
static struct { char text[160]; uint64_t n; } sigs[MAX_SIGS];
static int nsigs;
static pthread_mutex_t sig_lock = PTHREAD_MUTEX_INITIALIZER;

/* Count a violation; true when it is the first of its signature. */
static bool count_signature(enum kind k, const char *msg)
{
	char sig[160];
	size_t j = 0;
	bool first = false;
	int i;

	j = (size_t)snprintf(sig, sizeof(sig), "[%s] ", kind_name[k]);
	for (; *msg && j < sizeof(sig) - 2; msg++) {
		if ((*msg >= '0' && *msg <= '9') ||
		    (j && sig[j - 1] == '#' && ((*msg >= 'a' && *msg <= 'f') || *msg == 'x'))) {
			if (sig[j - 1] != '#')
				sig[j++] = '#';
			continue;
		}
		sig[j++] = *msg;
	}
	sig[j] = 0;
	pthread_mutex_lock(&sig_lock);
	for (i = 0; i < nsigs; i++)
		if (!strcmp(sigs[i].text, sig))
			break;
	if (i == nsigs && nsigs < MAX_SIGS) {
		snprintf(sigs[nsigs++].text, sizeof(sigs[0].text), "%s", sig);
		first = true;
	}
	if (i < nsigs)
		sigs[i].n++;
	pthread_mutex_unlock(&sig_lock);
	return first;
}

static void violation(enum kind k, const char *fmt, ...)
{
	uint64_t n = __atomic_add_fetch(&G.violations, 1, __ATOMIC_RELAXED);
	char buf[400];
	bool first;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	first = count_signature(k, buf);
	if (n > MAX_VIOLATIONS_SHOWN && !first && !G.verbose)
		return;
	diag("VIOLATION %s [%s]: %s", self_thr ? self_thr->name : "main", kind_name[k], buf);
}

static void op_result(enum kind k, int err)
{
	struct kstat *s = &G.ks[k];
	int slot = err;

	if (slot < 0 || slot >= (int)ARRAY_SIZE(s->err))
		slot = (int)ARRAY_SIZE(s->err) - 1;
	__atomic_add_fetch(&s->n, 1, __ATOMIC_RELAXED);
	if (!err)
		__atomic_add_fetch(&s->ok, 1, __ATOMIC_RELAXED);
	else
		__atomic_add_fetch(&s->err[slot], 1, __ATOMIC_RELAXED);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(unsigned int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static bool stopping(void)
{
	return __atomic_load_n(&G.stop, __ATOMIC_RELAXED);
}

/*
 * ---- fault-tolerant copies into and out of our own address space ----
 *
 * Through a per-thread memfd: pwrite() reads the source and pread() writes
 * the destination with the kernel's user copies, which fail with EFAULT
 * (or copy less) where nothing usable is mapped, instead of raising a
 * signal. (The test kernel has no process_vm_readv/writev.)
 */

static __thread int stage_fd = -1;

static int copy_via_stage(void *dst, const void *src, size_t len)
{
	ssize_t n;

	if (stage_fd < 0)
		stage_fd = memfd_create("rdma_fuzz_stage", MFD_CLOEXEC);
	if (stage_fd < 0)
		return errno;
	n = pwrite(stage_fd, src, len, 0);
	if (n != (ssize_t)len)
		return n < 0 ? errno : EFAULT;
	n = pread(stage_fd, dst, len, 0);
	return n == (ssize_t)len ? 0 : n < 0 ? errno : EFAULT;
}

/* Copy into memory that may be unmapped, read-only or PROT_NONE. */
static int self_write(void *dst, const void *src, size_t len)
{
	return copy_via_stage(dst, src, len);
}

/* Copy out of memory that may be unmapped or PROT_NONE. */
static int self_read(void *dst, const void *src, size_t len)
{
	return copy_via_stage(dst, src, len);
}

/* ---- ranges of the window -------------------------------------------- */

static struct range pick_range(struct rng *r, size_t max_len)
{
	int a = (int)below(r, NR_ARENAS);
	size_t pages = G.ar[a].len / PAGE, n, first;
	unsigned int c = (unsigned int)below(r, 100);

	if (c < 55)
		n = 1 + below(r, 4);
	else if (c < 85)
		n = 1 + below(r, 64);
	else
		n = 1 + below(r, pages);
	if (n > pages)
		n = pages;
	if (max_len && n * PAGE > max_len)
		n = max_len / PAGE ? max_len / PAGE : 1;
	first = below(r, pages - n + 1);
	return (struct range){ G.ar[a].addr + first * PAGE, n * PAGE, a, first * PAGE };
}

/* Shave a random head and tail off a range (unaligned start and length). */
static void unalign(struct rng *r, struct range *g)
{
	size_t head = below(r, PAGE), tail = below(r, PAGE);

	if (g->len > head + tail + 1) {
		g->addr += head;
		g->off += head;
		g->len -= head + tail;
	}
}

/* Run past the end of the arena into the PROT_NONE gap behind it. */
static void into_gap(struct rng *r, struct range *g)
{
	size_t end = arena_layout[g->arena].off + arena_layout[g->arena].len;

	g->len = (size_t)(G.win + end - g->addr) + (1 + below(r, 4)) * PAGE;
}

static bool in_window(const void *p, size_t len)
{
	const uint8_t *a = p;

	return a >= G.win && len <= WINDOW_LEN && a + len <= G.win + WINDOW_LEN;
}

/* ---- hang watchdog --------------------------------------------------- */

static void op_begin(struct thr *t, enum kind k)
{
	t->cur = k;
	__atomic_store_n(&t->cur_start, now_ms(), __ATOMIC_RELEASE);
}

static void op_end(struct thr *t)
{
	__atomic_store_n(&t->cur_start, 0, __ATOMIC_RELEASE);
	t->hang_reported = false;
}

static void print_file_lines(const char *path, const char *prefix, int max)
{
	char line[256];
	FILE *f = fopen(path, "r");
	int n = 0;

	if (!f)
		return;
	while (n++ < max && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		diag("%s%s", prefix, line);
	}
	fclose(f);
}

/* Report a thread stuck in one operation: which, for how long, its kernel stack. */
static void report_stuck(struct thr *t, uint64_t ms)
{
	char path[96];

	diag("HANG %s (tid %d) in %s for %" PRIu64 " ms", t->name, t->tid,
	     kind_name[t->cur], ms);
	snprintf(path, sizeof(path), "/proc/self/task/%d/wchan", t->tid);
	print_file_lines(path, "  wchan: ", 1);
	snprintf(path, sizeof(path), "/proc/self/task/%d/stack", t->tid);
	print_file_lines(path, "  ", 24);
}

/* Returns how many threads are stuck past limit_ms (reporting each once). */
static int check_hangs(uint64_t limit_ms)
{
	uint64_t now = now_ms();
	int i, stuck = 0;

	for (i = 0; i < G.nthr; i++) {
		struct thr *t = &G.thr[i];
		uint64_t s = __atomic_load_n(&t->cur_start, __ATOMIC_ACQUIRE);

		/* (an operation that began after `now` was read is not late) */
		if (!s || s > now || now - s < limit_ms)
			continue;
		stuck++;
		if (!t->hang_reported) {
			t->hang_reported = true;
			G.hangs++;
			report_stuck(t, now - s);
		}
	}
	return stuck;
}

/* ---- ioctl argument placement ---------------------------------------- */

enum loc {
	LOC_STACK, LOC_MISALIGNED, LOC_RO, LOC_UNSTABLE,
	LOC_NULL, LOC_KERNEL, LOC_NONE, LOC_STRADDLE,
};

static const char *const loc_name[] = {
	"stack", "misaligned", "read-only", "unstable",
	"NULL", "kernel", "PROT_NONE", "straddle",
};

static const uint64_t bad_addrs[] = {
	1, 0x1000, 0xffff888000000000ull, 0xffffffff81000000ull,
	0xffffc90000000000ull, 0x8000000000000000ull, 0xfffffffffffff000ull,
	0xfffffffffffffff8ull,
};

#define NR_BAD_ADDRS ARRAY_SIZE(bad_addrs)

static enum loc pick_loc(struct rng *r)
{
	unsigned int c = (unsigned int)below(r, 100);

	if (c < 55)
		return LOC_STACK;
	if (c < 60)
		return LOC_MISALIGNED;
	if (c < 68)
		return LOC_RO;
	if (c < 76)
		return LOC_UNSTABLE;
	if (c < 82)
		return LOC_NULL;
	if (c < 88)
		return LOC_KERNEL;
	if (c < 94)
		return LOC_NONE;
	return LOC_STRADDLE;
}

static bool loc_bad(enum loc l)
{
	return l >= LOC_NULL;
}

/*
 * Issue @cmd with the struct @s (@sz bytes) placed at @loc. Returns 0 or
 * the errno. When the location could hold the kernel's reply, @s gets it
 * and *back is true.
 */
static int ioc_at(struct thr *t, int fd, unsigned long cmd, void *s, size_t sz,
		  enum loc loc, bool *back)
{
	uint8_t *p = NULL, old[256];	/* more than the largest struct */
	int ret;

	*back = false;
	switch (loc) {
	case LOC_STACK:
		ret = ioctl(fd, cmd, s) ? errno : 0;
		*back = true;
		return ret;
	case LOC_MISALIGNED:
		p = t->argbuf + 1 + below(&t->rng, 7);
		memcpy(p, s, sz);
		ret = ioctl(fd, cmd, p) ? errno : 0;
		memcpy(s, p, sz);
		*back = true;
		return ret;
	case LOC_RO:
		p = t->argbuf + 2 * PAGE + 8 * below(&t->rng, (PAGE - sz) / 8);
		mprotect(t->argbuf + 2 * PAGE, PAGE, PROT_READ | PROT_WRITE);
		memcpy(p, s, sz);
		mprotect(t->argbuf + 2 * PAGE, PAGE, PROT_READ);
		break;
	case LOC_UNSTABLE:	/* this thread's slice, after its UNREGISTER slot */
		p = G.argpg + t->idx * ARG_SLICE + 16 +
		    8 * below(&t->rng, (ARG_SLICE - 16 - sz) / 8);
		t->unstable_at = p;
		/*
		 * Gone or PROT_NONE: the kernel faults too (or finds a fresh
		 * zero page). Read-only: it would read an older struct of ours,
		 * so make it a PROT_NONE argument instead.
		 */
		if (self_write(p, s, sz) && !self_read(old, p, sz))
			p = t->argbuf + PAGE;
		break;
	case LOC_NULL:
		p = NULL;
		break;
	case LOC_KERNEL:
		p = (uint8_t *)(uintptr_t)bad_addrs[below(&t->rng, NR_BAD_ADDRS)];
		break;
	case LOC_NONE:
		p = t->argbuf + PAGE + 8 * below(&t->rng, (PAGE - sz) / 8);
		break;
	case LOC_STRADDLE:
		p = t->argbuf + PAGE - (sz / 2 > 4 ? sz / 2 : 4);
		if (below(&t->rng, 2))
			memcpy(p, s, PAGE - (size_t)(p - t->argbuf) < sz ?
			       PAGE - (size_t)(p - t->argbuf) : sz);
		break;
	}
	return ioctl(fd, cmd, p) ? errno : 0;
}

static bool in_set(int e, const int *set)
{
	for (; *set; set++)
		if (*set == e)
			return true;
	return false;
}

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

/*
 * The checks every ioctl gets. Returns true when the argument sat where
 * the kernel read exactly what we wrote (so the caller may check more).
 */
static bool ioc_check(enum kind k, const char *what, enum loc loc, bool iowr,
		      int ret, const int *set)
{
	if (loc_bad(loc)) {
		if (ret != EFAULT)
			violation(k, "%s with the argument at %s: %s, expected EFAULT",
				  what, loc_name[loc], ename(ret));
		return false;
	}
	if (ret && !in_set(ret, set)) {
		violation(k, "%s (argument %s): undocumented errno %s", what,
			  loc_name[loc], ename(ret));
		return false;
	}
	if (loc == LOC_RO && iowr) {
		if (!ret)
			violation(k, "%s succeeded with a read-only argument", what);
		return false;
	}
	return loc != LOC_UNSTABLE;
}

/* ---- region table ---------------------------------------------------- */

/*
 * Handle 0 of each shared file is never tracked: an UNREGISTER whose
 * argument page was zeroed by the churn (an all-zero struct) frees it, so
 * whatever region holds handle 0 is a dummy that may vanish at any time.
 */
static void ht_add(int fdi, struct thr *t, const struct hent *e)
{
	struct htab *h = &G.ht[fdi];
	struct hent victim;
	bool evict = false;

	if (e->handle == 0)
		return;
	pthread_mutex_lock(&h->lock);
	if (h->n == MAX_HANDLES) {
		int i = (int)below(&t->rng, MAX_HANDLES);

		victim = h->e[i];
		h->e[i] = *e;
		evict = true;
	} else {
		h->e[h->n++] = *e;
	}
	pthread_mutex_unlock(&h->lock);
	if (evict) {
		int ret = vamr_unregister(G.vfd[fdi], victim.handle);

		op_result(K_ioc_unregister, -ret);
		if (ret)
			violation(K_ioc_unregister, "unregister of evicted handle %u: %s",
				  victim.handle, ename(-ret));
	}
}

/* Take an entry out of the table (it is then ours alone). */
static bool ht_take(int fdi, struct thr *t, struct hent *out)
{
	struct htab *h = &G.ht[fdi];
	bool got = false;

	pthread_mutex_lock(&h->lock);
	if (h->n) {
		int i = (int)below(&t->rng, h->n);

		*out = h->e[i];
		h->e[i] = h->e[--h->n];
		got = true;
	}
	pthread_mutex_unlock(&h->lock);
	return got;
}

/* A copy of an entry (it may go away or be replaced at any time). */
static bool ht_peek(int fdi, struct thr *t, struct hent *out)
{
	struct htab *h = &G.ht[fdi];
	bool got = false;

	pthread_mutex_lock(&h->lock);
	if (h->n) {
		*out = h->e[below(&t->rng, h->n)];
		got = true;
	}
	pthread_mutex_unlock(&h->lock);
	return got;
}

static void ev_add(int fd, int qid, bool nonblock)
{
	bool full;

	pthread_mutex_lock(&G.ev_lock);
	full = G.nev == MAX_EVFDS;
	if (!full)
		G.ev[G.nev++] = (struct event){ fd, qid, nonblock };
	pthread_mutex_unlock(&G.ev_lock);
	if (full)
		close(fd);
}

static void publish_key(uint32_t key)
{
	unsigned int i = __atomic_fetch_add(&G.key_pos, 1, __ATOMIC_RELAXED);

	__atomic_store_n(&G.keys[i % NR_KEYS], key, __ATOMIC_RELAXED);
}

/* A random handle that can never be live (past the 65536 per file). */
static uint32_t dead_handle(struct rng *r)
{
	return 65536 + (uint32_t)below(r, 0xfffe0000u);
}

/* ---- ioctl operations ------------------------------------------------ */

static void op_query(struct thr *t)
{
	struct vamr_query q = { 0 };
	enum loc loc = pick_loc(&t->rng);
	bool bad = false, back;
	int ret, fd = G.vfd[below(&t->rng, NR_VFDS)];

	if (chance(&t->rng, 15)) {
		q.flags = (uint32_t)rnd(&t->rng) | 1;
		bad = true;
	}
	if (chance(&t->rng, 10)) {
		q.reserved = (uint32_t)rnd(&t->rng) | 0x100;
		bad = true;
	}
	if (chance(&t->rng, 20)) {	/* output fields: ignored on input */
		q.abi_version = (uint32_t)rnd(&t->rng);
		q.features = rnd(&t->rng);
		q.page_size = (uint32_t)rnd(&t->rng);
	}
	ret = ioc_at(t, fd, VAMR_IOC_QUERY, &q, sizeof(q), loc, &back);
	op_result(K_ioc_query, ret);
	if (!ioc_check(K_ioc_query, "QUERY", loc, true, ret, ERR_QUERY))
		return;
	if (bad) {
		if (ret != EINVAL)
			violation(K_ioc_query, "QUERY with flags %#x reserved %#x: %s, expected EINVAL",
				  q.flags, q.reserved, ename(ret));
		return;
	}
	if (ret)
		violation(K_ioc_query, "valid QUERY failed: %s", ename(ret));
	else if (back && (q.abi_version != VAMR_ABI_VERSION || q.page_size != PAGE ||
			  (q.features & ~VAMR_FEATURES_KNOWN) ||
			  !(q.features & VAMR_FEATURE_REGIONS) || q.reserved || q.flags))
		violation(K_ioc_query, "QUERY answer abi %u page %u features %#llx reserved %u",
			  q.abi_version, q.page_size, (unsigned long long)q.features, q.reserved);
}

enum expect { EXP_OK, EXP_EINVAL, EXP_EFAULT };

static void op_register(struct thr *t)
{
	struct rng *r = &t->rng;
	int fdi = (int)below(r, NR_VFDS);
	struct vamr_register reg = { 0 };
	enum loc loc = pick_loc(r);
	enum expect exp = EXP_OK;
	bool writable_ok = true, back;
	unsigned int c = (unsigned int)below(r, 100);
	uint8_t on_stack;
	int ret;

	if (c < 70) {
		struct range g = pick_range(r, 0);

		if (chance(r, 30))
			unalign(r, &g);
		if (chance(r, 10))
			into_gap(r, &g);
		reg.addr = (uintptr_t)g.addr;
		reg.len = g.len;
	} else if (c < 76) {		/* the window up to the argument pages */
		reg.addr = (uintptr_t)G.win;
		reg.len = ARG_OFF;
	} else if (c < 78) {		/* large and sparse: nothing mapped */
		reg.addr = SPARSE_ADDR + below(r, 1 << 20) * PAGE;
		reg.len = (1 + below(r, 256)) * MIB;
		writable_ok = false;
	} else if (c < 82) {		/* our own stack: read-only regions only */
		reg.addr = (uintptr_t)&on_stack - below(r, 2 * PAGE);
		reg.len = 1 + below(r, 2 * PAGE);
		writable_ok = false;
	} else if (c < 87) {		/* kernel addresses */
		reg.addr = bad_addrs[2 + below(r, NR_BAD_ADDRS - 4)];
		reg.len = 1 + below(r, 16 * PAGE);
		exp = EXP_EFAULT;
	} else if (c < 91) {		/* wraps around */
		reg.addr = UINT64_MAX - below(r, 4 * PAGE);
		reg.len = 4 * PAGE + below(r, UINT64_MAX / 2);
		exp = EXP_EINVAL;
	} else if (c < 94) {		/* empty */
		reg.addr = (uintptr_t)G.win + below(r, WINDOW_LEN);
		reg.len = 0;
		exp = EXP_EINVAL;
	} else {			/* low addresses, nothing mapped */
		reg.addr = below(r, 16) * PAGE + below(r, 2) * below(r, PAGE);
		reg.len = 1 + below(r, 8 * PAGE);
		writable_ok = false;
	}
	reg.access = VAMR_ACCESS_READ;
	if (writable_ok && chance(r, 75))
		reg.access |= VAMR_ACCESS_WRITE;
	if (chance(r, 10))
		reg.access &= ~VAMR_ACCESS_READ;	/* READ is implied */
	reg.cookie = COOKIE_MAGIC << 48 | (uint64_t)fdi << 40 | (rnd(r) & 0xffffffffffull);
	if (chance(r, 8)) {
		switch (below(r, 3)) {
		case 0:
			reg.flags = (uint32_t)rnd(r) | 1;
			break;
		case 1:
			reg.reserved = (uint32_t)rnd(r) | 2;
			break;
		default:
			reg.access |= (uint32_t)(rnd(r) | 4) & ~VAMR_ACCESS_KNOWN & ~1u;
			if (!(reg.access & ~VAMR_ACCESS_KNOWN))
				reg.access |= 1u << 31;
			break;
		}
		exp = EXP_EINVAL;	/* checked before anything else */
	}
	if (chance(r, 10))
		reg.handle = (uint32_t)rnd(r);		/* output: ignored */

	ret = ioc_at(t, G.vfd[fdi], VAMR_IOC_REGISTER, &reg, sizeof(reg), loc, &back);
	op_result(K_ioc_register, ret);
	if (!ret && loc == LOC_UNSTABLE) {
		/* Keep the handle if the reply is still there, intact. */
		struct vamr_register rb;

		if (!self_read(&rb, t->unstable_at, sizeof(rb)) && rb.addr == reg.addr &&
		    rb.len == reg.len && rb.cookie == reg.cookie && rb.access == reg.access &&
		    !rb.flags && !rb.reserved) {
			struct hent e = { rb.handle, rb.addr, rb.len, rb.access };

			ht_add(fdi, t, &e);
		} else {
			__atomic_add_fetch(&G.lost_handles, 1, __ATOMIC_RELAXED);
		}
	}
	if (!ioc_check(K_ioc_register, "REGISTER", loc, true, ret, ERR_REGISTER))
		return;
	if (exp == EXP_EINVAL && ret != EINVAL)
		violation(K_ioc_register, "REGISTER addr %#llx len %#llx access %#x flags %#x reserved %#x: %s, expected EINVAL",
			  (unsigned long long)reg.addr, (unsigned long long)reg.len, reg.access,
			  reg.flags, reg.reserved, ename(ret));
	else if (exp == EXP_EFAULT && ret != EFAULT && ret != ENOSPC && ret != ENOMEM)
		violation(K_ioc_register, "REGISTER of kernel range %#llx+%#llx: %s, expected EFAULT",
			  (unsigned long long)reg.addr, (unsigned long long)reg.len, ename(ret));
	else if (exp == EXP_OK && ret && !in_set(ret, ERR_PIN))
		violation(K_ioc_register, "REGISTER of user range %#llx+%#llx access %#x: %s",
			  (unsigned long long)reg.addr, (unsigned long long)reg.len, reg.access,
			  ename(ret));
	if (!ret && back) {
		struct hent e = { reg.handle, reg.addr, reg.len, reg.access };

		ht_add(fdi, t, &e);
	}
}

static void op_unregister(struct thr *t)
{
	struct rng *r = &t->rng;
	int fdi = (int)below(r, NR_VFDS);
	struct vamr_handle_arg a = { 0 };
	enum loc loc = pick_loc(r);
	struct hent e;
	bool mine = false, back, strict;
	int ret;

	/*
	 * Through the unstable page only never-live handles, in a slot where
	 * nothing else is written: what the kernel reads there is then this
	 * struct or zeros (handle 0, the dummy), never a live handle.
	 */
	if (loc != LOC_UNSTABLE && chance(r, 75) && ht_take(fdi, t, &e)) {
		a.handle = e.handle;
		mine = true;
	} else {
		a.handle = dead_handle(r);
	}
	if (chance(r, 8))
		a.flags = (uint32_t)rnd(r) | 1;
	if (loc == LOC_UNSTABLE) {
		uint8_t *slot = G.argpg + t->idx * ARG_SLICE;
		struct vamr_handle_arg old;

		/* Unwritable but readable (read-only): it holds an older struct. */
		if (self_write(slot, &a, sizeof(a)) && !self_read(&old, slot, sizeof(old)))
			return;
		ret = ioctl(G.vfd[fdi], VAMR_IOC_UNREGISTER, slot) ? errno : 0;
		back = false;
	} else {
		ret = ioc_at(t, G.vfd[fdi], VAMR_IOC_UNREGISTER, &a, sizeof(a), loc, &back);
	}
	op_result(K_ioc_unregister, ret);
	strict = ioc_check(K_ioc_unregister, "UNREGISTER", loc, false, ret, ERR_UNREGISTER);
	if (strict) {
		if (a.flags && ret != EINVAL)
			violation(K_ioc_unregister, "UNREGISTER with flags %#x: %s, expected EINVAL",
				  a.flags, ename(ret));
		else if (!a.flags && mine && ret)
			violation(K_ioc_unregister, "UNREGISTER of live handle %u: %s",
				  a.handle, ename(ret));
		else if (!a.flags && !mine && ret != ENOENT)
			violation(K_ioc_unregister, "UNREGISTER of never-live handle %u: %s, expected ENOENT",
				  a.handle, ename(ret));
	}
	/* Still registered? Then it goes back (unless we cannot know). */
	if (mine && ret && loc != LOC_UNSTABLE)
		ht_add(fdi, t, &e);
	else if (mine && loc == LOC_UNSTABLE && ret)
		__atomic_add_fetch(&G.lost_handles, 1, __ATOMIC_RELAXED);
}

/* A buffer for ACCESS: bounce, window, or bad. *len may be shortened. */
static uint64_t pick_buf(struct thr *t, __u64 *len, bool *bad)
{
	struct rng *r = &t->rng;
	unsigned int c = (unsigned int)below(r, 100);

	*bad = false;
	if (c < 50) {
		if (*len > BUF_LEN)
			*len = BUF_LEN;
		return (uintptr_t)t->bounce;
	}
	if (c < 80) {		/* the window: arenas and gaps, not the argument pages */
		uint64_t off;

		if (*len > ARG_OFF / 4)
			*len = ARG_OFF / 4;
		off = below(r, ARG_OFF - *len + 1);
		return (uintptr_t)G.win + off;
	}
	if (c < 88) {		/* the read-only page: kernel writes fail */
		if (*len > PAGE)
			*len = PAGE;
		return (uintptr_t)t->argbuf + 2 * PAGE;
	}
	*bad = true;
	if (c < 94)
		return 0;
	return bad_addrs[below(r, NR_BAD_ADDRS)];
}

/* Address and length inside (mostly) the region of @e. */
static void pick_sub(struct rng *r, const struct hent *e, __u64 *addr, __u64 *len,
		     uint64_t max)
{
	unsigned int c = (unsigned int)below(r, 100);
	uint64_t off;

	if (c < 80) {
		off = below(r, e->len);
		*len = 1 + below(r, e->len - off);
		if (*len > max)
			*len = 1 + below(r, max);
		*addr = e->addr + off;
	} else if (c < 90) {	/* runs past the end */
		off = below(r, e->len);
		*addr = e->addr + off;
		*len = e->len - off + 1 + below(r, 2 * PAGE);
	} else if (c < 95) {	/* starts before */
		*addr = e->addr - 1 - below(r, PAGE);
		*len = 1 + below(r, 2 * PAGE);
	} else {
		*addr = e->addr + below(r, e->len);
		*len = chance(r, 50) ? 0 : UINT64_MAX - below(r, 4 * PAGE);
	}
}

static void op_access(struct thr *t)
{
	struct rng *r = &t->rng;
	int fdi = (int)below(r, NR_VFDS);
	struct vamr_access a = { 0 };
	enum loc loc = pick_loc(r);
	struct hent e;
	bool live = false, badbuf, back, strict;
	__u64 len;
	int ret;

	if (chance(r, 85) && ht_peek(fdi, t, &e)) {
		live = true;
		pick_sub(r, &e, &a.addr, &len, 4 * MIB);
	} else {
		e.handle = dead_handle(r);
		a.addr = (uintptr_t)G.win + below(r, WINDOW_LEN);
		len = 1 + below(r, 4 * PAGE);
	}
	a.handle = e.handle;
	a.op = chance(r, 50) ? VAMR_ACCESS_OP_READ : VAMR_ACCESS_OP_WRITE;
	if (chance(r, 6))
		a.op = 2 + (uint32_t)below(r, 0xfffffff0u);
	badbuf = false;
	if (len && len < UINT64_MAX - 8 * PAGE)	/* (else EINVAL before any copy) */
		a.buf = pick_buf(t, &len, &badbuf);
	else
		a.buf = (uintptr_t)t->bounce;
	a.len = len;
	ret = ioc_at(t, G.vfd[fdi], VAMR_IOC_ACCESS, &a, sizeof(a), loc, &back);
	op_result(K_ioc_access, ret);
	strict = ioc_check(K_ioc_access, "ACCESS", loc, false, ret, ERR_ACCESS);
	if (!strict)
		return;
	if (a.op > VAMR_ACCESS_OP_WRITE && ret != EINVAL)
		violation(K_ioc_access, "ACCESS with op %u: %s, expected EINVAL", a.op, ename(ret));
	else if (a.op <= VAMR_ACCESS_OP_WRITE && !live && ret != ENOENT)
		violation(K_ioc_access, "ACCESS of never-live handle %u: %s, expected ENOENT",
			  a.handle, ename(ret));
	else if (!ret && badbuf)
		violation(K_ioc_access, "ACCESS with buf %#llx len %llu succeeded",
			  (unsigned long long)a.buf, (unsigned long long)a.len);
	else if (!ret && a.op == VAMR_ACCESS_OP_READ &&
		 a.buf == (uintptr_t)t->argbuf + 2 * PAGE)
		violation(K_ioc_access, "ACCESS READ into a read-only page succeeded");
}

static void op_atomic(struct thr *t)
{
	struct rng *r = &t->rng;
	int fdi = (int)below(r, NR_VFDS);
	struct vamr_atomic a = { 0 };
	enum loc loc = pick_loc(r);
	struct hent e;
	bool live = false, back, misaligned = false;
	__u64 len;
	int ret;

	if (chance(r, 85) && ht_peek(fdi, t, &e)) {
		live = true;
		pick_sub(r, &e, &a.addr, &len, 8);
		if (chance(r, 85))
			a.addr &= ~7ull;
		misaligned = a.addr & 7;
	} else {
		e.handle = dead_handle(r);
		a.addr = ((uintptr_t)G.win + below(r, WINDOW_LEN)) & ~7ull;
	}
	a.handle = e.handle;
	a.op = (uint32_t)below(r, 3);
	if (chance(r, 6))
		a.op = 3 + (uint32_t)below(r, 0xfffffff0u);
	a.compare = rnd(r);
	a.swap = rnd(r);
	ret = ioc_at(t, G.vfd[fdi], VAMR_IOC_ATOMIC, &a, sizeof(a), loc, &back);
	op_result(K_ioc_atomic, ret);
	if (!ioc_check(K_ioc_atomic, "ATOMIC", loc, true, ret, ERR_ACCESS))
		return;
	if (a.op > VAMR_ATOMIC_WRITE && ret != EINVAL)
		violation(K_ioc_atomic, "ATOMIC with op %u: %s, expected EINVAL", a.op, ename(ret));
	else if (a.op <= VAMR_ATOMIC_WRITE && !live && ret != ENOENT)
		violation(K_ioc_atomic, "ATOMIC on never-live handle: %s, expected ENOENT",
			  ename(ret));
	else if (a.op <= VAMR_ATOMIC_WRITE && misaligned && ret != EINVAL && ret != ENOENT)
		violation(K_ioc_atomic, "ATOMIC at misaligned %#llx: %s, expected EINVAL",
			  (unsigned long long)a.addr, ename(ret));
}

static void op_prefetch(struct thr *t)
{
	struct rng *r = &t->rng;
	int fdi = (int)below(r, NR_VFDS);
	struct vamr_prefetch p = { 0 };
	enum loc loc = pick_loc(r);
	struct hent e;
	bool live = false, bad = false, back;
	int ret;

	if (chance(r, 85) && ht_peek(fdi, t, &e)) {
		live = true;
		pick_sub(r, &e, &p.addr, &p.len, 64 * MIB);
	} else {
		e.handle = dead_handle(r);
		p.addr = (uintptr_t)G.win;
		p.len = PAGE;
	}
	p.handle = e.handle;
	/* the advice: read, VAMR_PREFETCH_WRITE or VAMR_PREFETCH_NO_FAULT */
	p.flags = (uint32_t)below(r, 3);
	if (chance(r, 8)) {
		switch (below(r, 3)) {
		case 0:
			p.flags = VAMR_PREFETCH_KNOWN;	/* both: EINVAL */
			break;
		case 1:
			p.flags |= ((uint32_t)rnd(r) | 4) & ~VAMR_PREFETCH_KNOWN;
			break;
		default:
			p.reserved = (uint32_t)rnd(r) | 1;
			break;
		}
		bad = true;
	}
	ret = ioc_at(t, G.vfd[fdi], VAMR_IOC_PREFETCH, &p, sizeof(p), loc, &back);
	op_result(K_ioc_prefetch, ret);
	if (!ioc_check(K_ioc_prefetch, "PREFETCH", loc, true, ret, ERR_PREFETCH))
		return;
	if (bad && ret != EINVAL)
		violation(K_ioc_prefetch, "PREFETCH with flags %#x reserved %#x: %s, expected EINVAL",
			  p.flags, p.reserved, ename(ret));
	else if (!bad && !live && ret != ENOENT)
		violation(K_ioc_prefetch, "PREFETCH on never-live handle: %s, expected ENOENT",
			  ename(ret));
	else if (!ret && back && p.pages > (p.len + 2 * PAGE) / PAGE)
		violation(K_ioc_prefetch, "PREFETCH of %llu bytes pinned %u pages",
			  (unsigned long long)p.len, p.pages);
}

static void op_stats(struct thr *t)
{
	struct rng *r = &t->rng;
	int fdi = (int)below(r, NR_VFDS);
	struct vamr_stats s;
	enum loc loc = pick_loc(r);
	unsigned int c = (unsigned int)below(r, 100);
	bool back, global = false, never = false;
	struct hent e;
	int ret;

	memset(&s, 0, sizeof(s));
	if (c < 40) {
		s.handle = VAMR_STATS_GLOBAL;
		global = true;
	} else if (c < 80 && ht_peek(fdi, t, &e)) {
		s.handle = e.handle;
	} else {
		s.handle = dead_handle(r);
		never = s.handle != VAMR_STATS_GLOBAL;
		global = !never;
	}
	if (chance(r, 8))
		s.flags = (uint32_t)rnd(r) | 1;
	ret = ioc_at(t, G.vfd[fdi], VAMR_IOC_STATS, &s, sizeof(s), loc, &back);
	op_result(K_ioc_stats, ret);
	if (!ioc_check(K_ioc_stats, "STATS", loc, true, ret, ERR_STATS))
		return;
	if (s.flags && ret != EINVAL)
		violation(K_ioc_stats, "STATS with flags %#x: %s, expected EINVAL", s.flags,
			  ename(ret));
	else if (!s.flags && global && ret)
		violation(K_ioc_stats, "global STATS failed: %s", ename(ret));
	else if (!s.flags && never && ret != ENOENT)
		violation(K_ioc_stats, "STATS of never-live handle: %s, expected ENOENT",
			  ename(ret));
	else if (!ret && back && !global && s.counters.regions != 1)
		violation(K_ioc_stats, "STATS of a region reports %llu regions",
			  (unsigned long long)s.counters.regions);
	else if (!ret && back && global && s.generation)
		violation(K_ioc_stats, "global STATS generation %llu, expected 0",
			  (unsigned long long)s.generation);
}

static void op_events_open(struct thr *t)
{
	struct rng *r = &t->rng;
	int fdi = (int)below(r, NR_VFDS);
	struct vamr_events_open o = { 0 };
	enum loc loc = pick_loc(r);
	bool bad = false, back;
	int ret;

	o.flags = (uint32_t)below(r, 4);
	if (chance(r, 8)) {
		o.flags |= (uint32_t)rnd(r) & ~3u;
		if (!(o.flags & ~3u))
			o.flags |= 4;
		bad = true;
	}
	o.fd = (int32_t)rnd(r);
	ret = ioc_at(t, G.vfd[fdi], VAMR_IOC_EVENTS_OPEN, &o, sizeof(o), loc, &back);
	op_result(K_ioc_events_open, ret);
	if (!ioc_check(K_ioc_events_open, "EVENTS_OPEN", loc, true, ret, ERR_EVOPEN))
		return;
	if (bad && ret != EINVAL)
		violation(K_ioc_events_open, "EVENTS_OPEN with flags %#x: %s, expected EINVAL",
			  o.flags, ename(ret));
	if (!ret && back) {
		if (o.fd < 0 || fcntl(o.fd, F_GETFD) < 0) {
			violation(K_ioc_events_open, "EVENTS_OPEN returned fd %d", o.fd);
			return;
		}
		if (!!(fcntl(o.fd, F_GETFD) & FD_CLOEXEC) != !!(o.flags & VAMR_EVENTS_CLOEXEC) ||
		    !!(fcntl(o.fd, F_GETFL) & O_NONBLOCK) != !!(o.flags & VAMR_EVENTS_NONBLOCK))
			violation(K_ioc_events_open, "EVENTS_OPEN flags %#x not reflected by fd %d",
				  o.flags, o.fd);
		ev_add(o.fd, fdi, o.flags & VAMR_EVENTS_NONBLOCK);
	}
}

static void op_mr_query(struct thr *t)
{
	struct rng *r = &t->rng;
	struct vamr_mr_query q;
	enum loc loc = pick_loc(r);
	bool back;
	int ret;

	memset(&q, 0, sizeof(q));
	if (chance(r, 60))
		q.key = __atomic_load_n(&G.keys[below(r, NR_KEYS)], __ATOMIC_RELAXED);
	else
		q.key = (uint32_t)rnd(r);
	q.ib_index = chance(r, 90) ? G.ib_index : (uint32_t)rnd(r);
	if (chance(r, 8))
		q.flags = (uint32_t)rnd(r) | 1;
	if (chance(r, 4))
		q.reserved = (uint32_t)rnd(r) | 1;
	ret = ioc_at(t, G.vfd[below(r, NR_VFDS)], VAMR_IOC_MR_QUERY, &q, sizeof(q), loc, &back);
	op_result(K_ioc_mr_query, ret);
	if (!ioc_check(K_ioc_mr_query, "MR_QUERY", loc, true, ret, ERR_MRQUERY))
		return;
	if ((q.flags || q.reserved) && ret != EINVAL)
		violation(K_ioc_mr_query, "MR_QUERY with flags %#x reserved %#x: %s, expected EINVAL",
			  q.flags, q.reserved, ename(ret));
	else if (!ret && back && (!q.len || q.counters.regions != 1))
		violation(K_ioc_mr_query, "MR_QUERY of key %#x: len %llu regions %llu", q.key,
			  (unsigned long long)q.len, (unsigned long long)q.counters.regions);
}

static const unsigned long known_cmds[] = {
	VAMR_IOC_QUERY, VAMR_IOC_REGISTER, VAMR_IOC_UNREGISTER, VAMR_IOC_ACCESS,
	VAMR_IOC_ATOMIC, VAMR_IOC_PREFETCH, VAMR_IOC_STATS, VAMR_IOC_EVENTS_OPEN,
	VAMR_IOC_MR_QUERY, VAMR_IOC_DEVICE, VAMR_IOC_EVENTS_OPEN_EX, VAMR_IOC_WATCH,
	VAMR_IOC_UNWATCH, VAMR_IOC_WATCH_SYNC,
};

#define NR_KNOWN_CMDS ARRAY_SIZE(known_cmds)

/* ioctl types the VFS answers itself (fs/ioctl.c do_vfs_ioctl). */
static bool vfs_type(unsigned int type)
{
	return type == 0x00 || type == 0x15 || type == 'T' || type == 'X' ||
	       type == 'f' || type == 0x94;
}

static void op_bad_cmd(struct thr *t)
{
	struct rng *r = &t->rng;
	unsigned int c = (unsigned int)below(r, 100);
	unsigned long cmd;
	uint8_t junk[64];
	void *arg;
	bool events = false;
	int fd, ret;
	size_t i;

	do {
		if (c < 40) {
			cmd = _IOC(below(r, 4), VAMR_IOCTL_TYPE, below(r, 256), below(r, 1 << 14));
		} else if (c < 70) {
			unsigned long k = known_cmds[below(r, NR_KNOWN_CMDS)];

			if (below(r, 2))	/* another size */
				cmd = _IOC(_IOC_DIR(k), _IOC_TYPE(k), _IOC_NR(k),
					   (_IOC_SIZE(k) + 1 + below(r, 64)) & 0x3fff);
			else			/* another direction */
				cmd = _IOC((_IOC_DIR(k) + 1 + below(r, 3)) & 3, _IOC_TYPE(k),
					   _IOC_NR(k), _IOC_SIZE(k));
		} else {
			cmd = (uint32_t)rnd(r);
		}
		for (i = 0; i < NR_KNOWN_CMDS; i++)
			if (cmd == known_cmds[i])
				break;
		c = (unsigned int)below(r, 100);
	} while (i < NR_KNOWN_CMDS || vfs_type(_IOC_TYPE(cmd)));

	switch (below(r, 4)) {
	case 0:
		arg = NULL;
		break;
	case 1:
		arg = (void *)(uintptr_t)bad_addrs[below(r, NR_BAD_ADDRS)];
		break;
	default:
		memset(junk, 0xa5, sizeof(junk));
		arg = junk;
		break;
	}
	fd = G.vfd[below(r, NR_VFDS)];
	if (chance(r, 20)) {
		pthread_mutex_lock(&G.ev_lock);
		if (G.nev) {
			fd = G.ev[below(r, G.nev)].fd;
			events = true;
		}
		pthread_mutex_unlock(&G.ev_lock);
	}
	ret = ioctl(fd, cmd, arg) ? errno : 0;
	op_result(K_ioc_bad_cmd, ret);
	/* An events fd may have been closed meanwhile (EBADF) or reused. */
	if (ret != ENOTTY && !(events && (ret == EBADF || ret == ENOTTY)))
		violation(K_ioc_bad_cmd, "unknown command %#lx on %s file: %s, expected ENOTTY",
			  cmd, events ? "an events" : "a /dev/vamr", ename(ret));
}

/* Open a file, register a few regions, maybe an events file, close with all live. */
static void op_fd_lifecycle(struct thr *t)
{
	struct rng *r = &t->rng;
	int fd = vamr_open(), n = 1 + (int)below(r, 4), i, ret;
	uint32_t h = 0;

	if (fd < 0) {
		op_result(K_ioc_fd_lifecycle, -fd);
		if (fd != -EMFILE && fd != -ENFILE && fd != -ENOMEM)
			violation(K_ioc_fd_lifecycle, "open /dev/vamr: %s", ename(-fd));
		return;
	}
	for (i = 0; i < n; i++) {
		struct range g = pick_range(r, 0);

		if (chance(r, 30))
			unalign(r, &g);
		ret = vamr_register(fd, g.addr, g.len, VAMR_ACCESS_READ | VAMR_ACCESS_WRITE,
				    COOKIE_MAGIC << 48 | 0xffull << 40 | i, &h);
		if (ret && !in_set(-ret, ERR_PIN))
			violation(K_ioc_fd_lifecycle, "REGISTER %p+%zu on a fresh file: %s",
				  g.addr, g.len, ename(-ret));
		if (!ret && chance(r, 40)) {
			ret = vamr_prefetch(fd, h, g.addr, g.len, NULL);
			if (ret && !in_set(-ret, ERR_PREFETCH))
				violation(K_ioc_fd_lifecycle, "PREFETCH on a fresh file: %s",
					  ename(-ret));
		}
	}
	if (chance(r, 40)) {
		struct vamr_events_open o = { .flags = VAMR_EVENTS_NONBLOCK | VAMR_EVENTS_CLOEXEC };

		if (!vamr_ioctl(fd, VAMR_IOC_EVENTS_OPEN, &o))
			ev_add(o.fd, __atomic_add_fetch(&G.next_qid, 1, __ATOMIC_RELAXED), true);
	}
	ret = close(fd) ? errno : 0;
	op_result(K_ioc_fd_lifecycle, ret);
	if (ret)
		violation(K_ioc_fd_lifecycle, "close of a /dev/vamr file: %s", ename(ret));
}

/* True when @buf is not pattern @seed; *at gets the first wrong byte. */
static bool data_bad(const void *buf, size_t len, uint64_t seed, size_t *at)
{
	*at = pattern_check(buf, len, seed, 0);
	return *at != PATTERN_OK;
}

/*
 * The private region (not in the window, registered on the first shared
 * file, used by this thread only): remap it, then check the data through
 * ACCESS both ways and through an ATOMIC.
 */
static void op_integrity(struct thr *t)
{
	struct rng *r = &t->rng;
	uint64_t seed = rnd(r), off, len, old, res = 0, add;
	int fd = G.vfd[0], ret;
	size_t bad;
	uint64_t *w;

	if (!t->priv_ok)
		return;
	switch (below(r, 4)) {
	case 0:
		madvise(t->priv, VBUF_LEN, MADV_DONTNEED);
		break;
	case 1:
		mmap(t->priv, VBUF_LEN, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
		break;
	case 2:
		mprotect(t->priv, VBUF_LEN, PROT_READ);
		mprotect(t->priv, VBUF_LEN, PROT_READ | PROT_WRITE);
		break;
	}
	off = below(r, VBUF_LEN);
	len = 1 + below(r, VBUF_LEN - off);
	if (len > BUF_LEN)
		len = BUF_LEN;
	pattern_fill(t->priv + off, len, seed, 0);
	ret = vamr_read(fd, t->priv_h, t->priv + off, t->bounce, len);
	if (ret)
		violation(K_ioc_integrity, "ACCESS READ of the private region: %s", ename(-ret));
	else if (data_bad(t->bounce, len, seed, &bad))
		violation(K_ioc_integrity, "ACCESS READ at +%llu: byte %zu of %llu differs from what the CPU wrote",
			  (unsigned long long)off, bad, (unsigned long long)len);
	off = below(r, VBUF_LEN);
	len = 1 + below(r, VBUF_LEN - off);
	if (len > BUF_LEN)
		len = BUF_LEN;
	pattern_fill(t->bounce, len, seed + 1, 0);
	ret = vamr_write(fd, t->priv_h, t->priv + off, t->bounce, len);
	if (ret)
		violation(K_ioc_integrity, "ACCESS WRITE of the private region: %s", ename(-ret));
	else if (data_bad(t->priv + off, len, seed + 1, &bad))
		violation(K_ioc_integrity, "ACCESS WRITE at +%llu: the CPU sees byte %zu of %llu wrong",
			  (unsigned long long)off, bad, (unsigned long long)len);
	w = (uint64_t *)(t->priv + (below(r, VBUF_LEN) & ~7ull));
	old = *w;
	add = rnd(r);
	ret = vamr_atomic(fd, t->priv_h, w, VAMR_ATOMIC_FETCH_ADD, add, 0, &res);
	if (ret)
		violation(K_ioc_integrity, "ATOMIC FETCH_ADD on the private region: %s", ename(-ret));
	else if (res != old || *w != old + add)
		violation(K_ioc_integrity, "ATOMIC FETCH_ADD: old %#llx result %#llx now %#llx",
			  (unsigned long long)old, (unsigned long long)res,
			  (unsigned long long)*w);
	op_result(K_ioc_integrity, ret ? -ret : 0);
}

/* ---- events ---------------------------------------------------------- */

#define NR_QSTATE 256
static struct { int qid; uint64_t gen; } qstate[NR_QSTATE];

static void check_records(const struct vamr_event *ev, size_t n, int qid)
{
	unsigned int slot = (unsigned int)qid % NR_QSTATE;
	size_t i;

	if (qstate[slot].qid != qid) {
		qstate[slot].qid = qid;
		qstate[slot].gen = 0;
	}
	for (i = 0; i < n; i++) {
		const struct vamr_event *e = &ev[i];

		if (e->kind == VAMR_EVENT_OVERFLOW) {
			if (e->handle || e->cookie || !e->len)
				violation(K_ev_read, "overflow record handle %u cookie %#llx lost %llu",
					  e->handle, (unsigned long long)e->cookie,
					  (unsigned long long)e->len);
		} else if (e->kind >= VAMR_EVENT_COUNT) {
			violation(K_ev_read, "record of unknown kind %u", e->kind);
		} else if (e->cookie >> 48 != COOKIE_MAGIC) {
			violation(K_ev_read, "record with cookie %#llx we never gave",
				  (unsigned long long)e->cookie);
		} else if (!e->len) {
			violation(K_ev_read, "record of 0 bytes (kind %u)", e->kind);
		}
		/*
		 * Generations grow by one per record, delivered or lost. The
		 * overflow report carries the counter at the time it is read,
		 * which may equal the generation of the record just before it
		 * (records queued after the losses come out first).
		 */
		if (e->generation < qstate[slot].gen ||
		    (e->generation == qstate[slot].gen && e->kind != VAMR_EVENT_OVERFLOW))
			violation(K_ev_read, "queue %d: generation %llu after %llu", qid,
				  (unsigned long long)e->generation,
				  (unsigned long long)qstate[slot].gen);
		qstate[slot].gen = e->generation;
	}
}

static bool ev_pick(struct thr *t, struct event *out)
{
	bool got = false;

	pthread_mutex_lock(&G.ev_lock);
	if (G.nev) {
		*out = G.ev[below(&t->rng, G.nev)];
		got = true;
	}
	pthread_mutex_unlock(&G.ev_lock);
	return got;
}

static void op_ev_read(struct thr *t, bool blocking)
{
	struct rng *r = &t->rng;
	enum kind k = blocking ? K_ev_read_blocking : K_ev_read;
	struct vamr_event recs[32];
	struct event e;
	size_t rec = sizeof(struct vamr_event), len;
	unsigned int c = (unsigned int)below(r, 100);
	void *buf = recs;
	bool bad = false, unstable = false;
	ssize_t n;
	int ret;

	if (!ev_pick(t, &e))
		return;
	if (blocking && !e.nonblock && !t->timer_ok)
		return;		/* nothing would end the wait */
	if (!blocking && !e.nonblock) {
		struct pollfd pfd = { .fd = e.fd, .events = POLLIN };

		if (poll(&pfd, 1, 0) != 1)
			return;		/* would block: only the timed variant may */
	}
	if (c < 10)
		len = below(r, rec);			/* too small */
	else if (c < 70)
		len = rec * (1 + below(r, 32)) + below(r, rec);
	else if (c < 80) {
		len = rec * (1 + below(r, 4));
		buf = NULL;
		bad = true;
	} else if (c < 85) {
		len = rec;
		buf = (void *)(uintptr_t)bad_addrs[below(r, NR_BAD_ADDRS)];
		bad = true;
	} else if (c < 90) {
		len = rec * (1 + below(r, 4));
		buf = t->argbuf + PAGE;		/* PROT_NONE */
		bad = true;
	} else {
		len = rec * (1 + below(r, ARG_SLICE / rec));
		buf = G.argpg + t->idx * ARG_SLICE;
		unstable = true;
	}
	if (blocking && t->timer_ok) {
		/*
		 * First after 1-30 ms, then every 10 ms until disarmed: a thread
		 * delayed past the first expiry before it enters read() (a loaded
		 * host under TCG) takes that signal outside the wait, and a one-shot
		 * timer would leave the read blocked until an event came ("workers
		 * still running" at teardown).
		 */
		struct itimerspec its = {
			.it_value = { 0, (long)(1 + below(r, 30)) * 1000000L },
			.it_interval = { 0, 10 * 1000000L },
		};

		timer_settime(t->timer, 0, &its, NULL);
	}
	n = read(e.fd, buf, len);
	ret = n < 0 ? errno : 0;
	if (blocking && t->timer_ok) {
		struct itimerspec off = { 0 };

		timer_settime(t->timer, 0, &off, NULL);
	}
	op_result(k, ret);
	if (ret == EBADF)
		return;		/* closed meanwhile by nobody else: cannot happen */
	if (len < rec) {
		if (ret != EINVAL)
			violation(k, "read of %zu bytes (less than a record): %s, expected EINVAL",
				  len, ename(ret));
		return;
	}
	if (ret) {
		if (ret != EAGAIN && ret != EINTR && !(ret == EFAULT && (bad || unstable)))
			violation(k, "read of an events file: %s", ename(ret));
		if (ret == EAGAIN && blocking && !e.nonblock)
			violation(k, "blocking read returned EAGAIN");
		return;
	}
	/* End of file: every events file here outlives its /dev/vamr file (op_fd_lifecycle). */
	if (n == 0)
		return;
	if (bad) {
		violation(k, "read into %p succeeded (%zd bytes)", buf, n);
		return;
	}
	if ((size_t)n % rec || (size_t)n > len)
		violation(k, "read of %zu bytes returned %zd", len, n);
	else if (!unstable)
		check_records(recs, (size_t)n / rec, e.qid);
}

static void op_ev_poll(struct thr *t)
{
	struct pollfd pfd[MAX_EVFDS];
	int n = 0, i, ret;

	pthread_mutex_lock(&G.ev_lock);
	for (i = 0; i < G.nev; i++)
		if (chance(&t->rng, 50))
			pfd[n++] = (struct pollfd){ .fd = G.ev[i].fd, .events = POLLIN | POLLOUT };
	pthread_mutex_unlock(&G.ev_lock);
	ret = poll(pfd, n, (int)below(&t->rng, 20)) < 0 ? errno : 0;
	op_result(K_ev_poll, ret);
	if (ret && ret != EINTR)
		violation(K_ev_poll, "poll of %d events files: %s", n, ename(ret));
	for (i = 0; !ret && i < n; i++)
		if (pfd[i].revents & ~(POLLIN | POLLRDNORM | POLLHUP))
			violation(K_ev_poll, "poll revents %#x", pfd[i].revents);
}

static void op_ev_close(struct thr *t)
{
	struct event e;
	bool got = false;
	int ret;

	pthread_mutex_lock(&G.ev_lock);
	if (G.nev) {
		int i = (int)below(&t->rng, G.nev);

		e = G.ev[i];
		G.ev[i] = G.ev[--G.nev];
		got = true;
	}
	pthread_mutex_unlock(&G.ev_lock);
	if (!got)
		return;
	ret = close(e.fd) ? errno : 0;
	op_result(K_ev_close, ret);
	if (ret)
		violation(K_ev_close, "close of events fd %d: %s", e.fd, ename(ret));
}

/* ---- rdma ------------------------------------------------------------ */

int ibv_cmd_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
		      struct ibv_sge *sg_list, uint32_t num_sge);

/* ibv_advise_mr(), or the uverbs command itself where the provider lacks it. */
static int advise_mr(struct ibv_pd *pd, int advice, uint32_t flags, struct ibv_sge *sge,
		     uint32_t n)
{
	int ret = ibv_advise_mr(pd, advice, flags, sge, n);

	if (ret == EOPNOTSUPP)
		ret = ibv_cmd_advise_mr(pd, advice, flags, sge, n);
	return ret;
}

/*
 * The uverbs REREG_MR command, as a provider issues it (exported for
 * providers, IBVERBS_PRIVATE_34): rdma-core 44's rxe provider has no
 * rereg_mr, so ibv_rereg_mr() fails in user space without asking the
 * kernel. The command struct is libibverbs' struct ibv_rereg_mr: the
 * header, then the kernel's payload; the MR is a struct verbs_mr, whose
 * first member is the struct ibv_mr.
 */
struct fz_rereg_cmd {
	struct ib_uverbs_cmd_hdr hdr;
	struct ib_uverbs_rereg_mr core;
};

int ibv_cmd_rereg_mr(void *vmr, uint32_t flags, void *addr, size_t length, uint64_t hca_va,
		     int access, struct ibv_pd *pd, void *cmd, size_t cmd_sz,
		     struct ib_uverbs_rereg_mr_resp *resp, size_t resp_sz);

/* Returns 0 or an errno value. */
static int rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t len,
		    int access)
{
	struct ib_uverbs_rereg_mr_resp resp;
	struct fz_rereg_cmd cmd;
	int ret;

	memset(&cmd, 0, sizeof(cmd));
	memset(&resp, 0, sizeof(resp));
	errno = 0;
	ret = ibv_cmd_rereg_mr(mr, (uint32_t)flags, addr, len, (uintptr_t)addr, access, pd, &cmd,
			       sizeof(cmd), &resp, sizeof(resp));
	if (ret)
		return ret > 0 ? ret : errno ? errno : EIO;
	if (flags & IBV_REREG_MR_CHANGE_PD)
		mr->pd = pd;
	return 0;
}

static struct ibv_pd *pd_of(struct rstate *s, int pdi)
{
	return pdi ? s->pd2 : s->p.pd;
}

static unsigned int random_access(struct rng *r)
{
	unsigned int acc = 0;

	if (chance(r, 85))
		acc |= IBV_ACCESS_LOCAL_WRITE;
	if ((acc & IBV_ACCESS_LOCAL_WRITE) && chance(r, 75))
		acc |= IBV_ACCESS_REMOTE_WRITE;
	if ((acc & IBV_ACCESS_LOCAL_WRITE) && chance(r, 50))
		acc |= IBV_ACCESS_REMOTE_ATOMIC;
	if (chance(r, 75))
		acc |= IBV_ACCESS_REMOTE_READ;
	return acc;
}

static bool access_valid(unsigned int acc)
{
	return (acc & IBV_ACCESS_LOCAL_WRITE) ||
	       !(acc & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC));
}

static int mr_query_key(uint32_t key, struct vamr_mr_query *q)
{
	memset(q, 0, sizeof(*q));
	q->key = key;
	q->ib_index = G.ib_index;
	return vamr_ioctl(G.vfd[0], VAMR_IOC_MR_QUERY, q);
}

static void drop_mr(struct rstate *s, int i)
{
	s->m[i] = s->m[--s->n];
}

static void dereg_at(struct thr *t, int i, enum kind k)
{
	struct rstate *s = t->rs;
	int ret = ibv_dereg_mr(s->m[i].mr);

	op_result(K_mr_dereg, ret);
	if (ret)
		violation(k, "ibv_dereg_mr of a %s MR: %s", s->m[i].va ? "VA" : "normal",
			  ename(ret));
	drop_mr(s, i);
}

static void op_reg(struct thr *t, bool va)
{
	struct rng *r = &t->rng;
	struct rstate *s = t->rs;
	enum kind k = va ? K_mr_reg_va : K_mr_reg_normal;
	struct range g = pick_range(r, 0);
	unsigned int acc = random_access(r);
	uint64_t iova;
	struct ibv_mr *mr;
	struct vamr_mr_query q;
	bool gap = false;
	int ret;

	if (s->n == MAX_MRS)
		dereg_at(t, (int)below(r, s->n), k);
	if (chance(r, 30))
		unalign(r, &g);
	if (chance(r, 10)) {
		into_gap(r, &g);
		gap = true;
	}
	if (chance(r, 3))
		acc = IBV_ACCESS_REMOTE_WRITE;		/* needs LOCAL_WRITE: EINVAL */
	iova = (uintptr_t)g.addr;
	if (va && chance(r, 15))
		iova = ((1 + below(r, 1 << 20)) << 24) | ((uintptr_t)g.addr & (PAGE - 1));
	mr = ibv_reg_mr_iova2(pd_of(s, 0), g.addr, g.len, iova, acc | (va ? VAMR_ACCESS_VA : 0));
	ret = mr ? 0 : errno;
	op_result(k, ret);
	if (!mr) {
		/* A VA MR takes any user range: holes and PROT_NONE stay absent. */
		if (va && G.va_supported && access_valid(acc) && !in_set(ret, ERR_PIN))
			violation(k, "VA MR over %p+%zu (access %#x%s) failed: %s", g.addr, g.len,
				  acc, gap ? ", into a gap" : "", ename(ret));
		return;
	}
	if (!access_valid(acc))
		violation(k, "MR with access %#x (REMOTE_WRITE without LOCAL_WRITE) registered",
			  acc);
	s->m[s->n++] = (struct mrent){ mr, g.addr, g.len, iova, acc, va, 0 };
	publish_key(mr->lkey);
	ret = mr_query_key(mr->lkey, &q);
	if (va && G.va_supported) {
		if (ret)
			violation(k, "MR_QUERY of a fresh VA MR: %s", ename(-ret));
		else if (q.addr != (uintptr_t)g.addr || q.len != g.len)
			violation(k, "MR_QUERY of VA MR %p+%zu says %#llx+%llu", g.addr, g.len,
				  (unsigned long long)q.addr, (unsigned long long)q.len);
	} else if (!va && ret != -ENOENT) {
		violation(k, "MR_QUERY of a normal MR: %s, expected ENOENT", ename(-ret));
	}
}

/* The documented refusals stay refusals. */
static void op_reg_refused(struct thr *t)
{
	struct rng *r = &t->rng;
	struct range g = pick_range(r, 16 * PAGE);
	bool odp = chance(r, 50);
	unsigned int acc = ACC_ALL | VAMR_ACCESS_VA |
			   (odp ? IBV_ACCESS_ON_DEMAND : FUZZ_ACCESS_FLUSH_PERSISTENT);
	int want = odp ? EINVAL : EOPNOTSUPP;
	struct ibv_mr *mr = ibv_reg_mr(pd_of(t->rs, 0), g.addr, g.len, acc);
	int ret = mr ? 0 : errno;

	op_result(K_mr_reg_refused, ret);
	if (!G.va_supported)
		goto out;
	if (mr)
		violation(K_mr_reg_refused, "VA MR with %s registered",
			  odp ? "IBV_ACCESS_ON_DEMAND" : "FLUSH_PERSISTENT");
	else if (ret != want)
		violation(K_mr_reg_refused, "VA MR with %s: %s, expected %s",
			  odp ? "IBV_ACCESS_ON_DEMAND" : "FLUSH_PERSISTENT", ename(ret),
			  ename(want));
out:
	if (mr)
		ibv_dereg_mr(mr);
}

static void op_dereg(struct thr *t)
{
	if (t->rs->n)
		dereg_at(t, (int)below(&t->rng, t->rs->n), K_mr_dereg);
}

static void op_rereg(struct thr *t)
{
	struct rng *r = &t->rng;
	struct rstate *s = t->rs;
	struct mrent *m;
	int flags = 0, ret, pdi;
	unsigned int acc;
	struct range g = pick_range(r, 0);
	struct vamr_mr_query q;
	bool must_fail;

	if (!s->n)
		return;
	m = &s->m[below(r, s->n)];
	if (chance(r, 50))
		flags |= IBV_REREG_MR_CHANGE_PD;
	if (chance(r, 50))
		flags |= IBV_REREG_MR_CHANGE_ACCESS;
	if (chance(r, 20))
		flags |= IBV_REREG_MR_CHANGE_TRANSLATION;
	if (!flags)
		flags = IBV_REREG_MR_CHANGE_PD;
	pdi = flags & IBV_REREG_MR_CHANGE_PD ? !m->pdi : m->pdi;
	acc = random_access(r);
	if (chance(r, 40))
		acc |= VAMR_ACCESS_VA;
	must_fail = (m->va && (flags & ~IBV_REREG_MR_CHANGE_PD)) ||
		    (!m->va && (flags & IBV_REREG_MR_CHANGE_ACCESS) && (acc & VAMR_ACCESS_VA));
	ret = rereg_mr(m->mr, flags, pd_of(s, pdi),
		       flags & IBV_REREG_MR_CHANGE_TRANSLATION ? g.addr : NULL,
		       flags & IBV_REREG_MR_CHANGE_TRANSLATION ? g.len : 0,
		       flags & IBV_REREG_MR_CHANGE_ACCESS ? (int)acc : 0);
	op_result(K_mr_rereg, ret);
	if (!ret && must_fail && G.va_supported)
		violation(K_mr_rereg, "rereg (flags %#x, access %#x) of a %s MR succeeded", flags,
			  acc, m->va ? "VA" : "normal");
	if (ret)
		return;
	if (flags & IBV_REREG_MR_CHANGE_PD)
		m->pdi = pdi;
	if (flags & IBV_REREG_MR_CHANGE_ACCESS)
		m->access = acc;
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		m->addr = g.addr;
		m->len = g.len;
		m->iova = (uintptr_t)g.addr;
	}
	publish_key(m->mr->lkey);
	if (m->va && G.va_supported) {
		ret = mr_query_key(m->mr->lkey, &q);
		if (ret || q.addr != (uintptr_t)m->addr || q.len != m->len)
			violation(K_mr_rereg, "after a PD rereg, MR_QUERY of the VA MR: %s %#llx+%llu",
				  ename(-ret), (unsigned long long)q.addr,
				  (unsigned long long)q.len);
	}
}

static void op_advise(struct thr *t, enum kind k)
{
	struct rng *r = &t->rng;
	struct rstate *s = t->rs;
	struct ibv_sge sge[MAX_SGES];
	int idx[MAX_MRS], nidx = 0, i, n, ret, advice;
	uint32_t flags;

	for (i = 0; i < s->n; i++)
		if (s->m[i].va || k == K_advise_normal)
			idx[nidx++] = i;
	if (!nidx && k != K_advise_normal)
		return;
	n = chance(r, 70) ? 1 + (int)below(r, 4) : 1 + (int)below(r, MAX_SGES);
	for (i = 0; i < n; i++) {
		struct mrent *m = nidx ? &s->m[idx[below(r, nidx)]] : NULL;
		uint64_t off;

		if (k == K_advise_normal && (!m || chance(r, 30))) {
			/* the private normal MR, or an unrelated key */
			sge[i].addr = (uintptr_t)s->lbuf + below(r, LBUF_LEN / 2);
			sge[i].length = (uint32_t)(1 + below(r, LBUF_LEN / 2));
			sge[i].lkey = s->lmr->lkey;
			continue;
		}
		if (!m)
			m = &s->m[idx[0]];
		off = below(r, m->len);
		sge[i].addr = m->iova + off;
		sge[i].length = (uint32_t)(1 + below(r, m->len - off));
		sge[i].lkey = m->mr->lkey;
		if (chance(r, 5))
			sge[i].length += (uint32_t)below(r, 4 * PAGE);	/* past the end */
		if (chance(r, 3))
			sge[i].length = 0;
		if (chance(r, 3))
			sge[i].lkey = (uint32_t)rnd(r);
	}
	advice = (int)below(r, 3);	/* PREFETCH, PREFETCH_WRITE, PREFETCH_NO_FAULT */
	if (chance(r, 3))
		advice = 3 + (int)below(r, 10);
	if (k == K_advise_sync)
		flags = IBV_ADVISE_MR_FLAG_FLUSH;
	else if (k == K_advise_async)
		flags = 0;
	else
		flags = below(r, 2) ? IBV_ADVISE_MR_FLAG_FLUSH : 0;
	if (chance(r, 3))
		flags |= 2u << below(r, 30);
	ret = advise_mr(pd_of(s, 0), advice, flags, sge, (uint32_t)n);
	op_result(k, ret);
}

/* ibv_post_send of one WR with one SGE. */
static int post_one(struct rstate *s, int side, enum ibv_wr_opcode op, uint64_t laddr,
		    uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey,
		    uint64_t cmp, uint64_t swp, uint64_t wr_id)
{
	struct ibv_sge sge = { .addr = laddr, .length = len, .lkey = lkey };
	struct ibv_send_wr wr, *bad = NULL;
	int ret;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.opcode = op;
	wr.sg_list = len ? &sge : NULL;
	wr.num_sge = len ? 1 : 0;
	wr.send_flags = IBV_SEND_SIGNALED;
	if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = cmp;
		wr.wr.atomic.swap = swp;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	errno = 0;
	ret = ibv_post_send(s->p.qp[side], &wr, &bad);
	return ret ? (ret > 0 ? ret : errno ? errno : EIO) : 0;
}

static void count_wc(int st)
{
	if (st >= 0 && st < 32)
		__atomic_add_fetch(&G.wc_hist[st], 1, __ATOMIC_RELAXED);
}

static void recover_pair(struct thr *t)
{
	struct rstate *s = t->rs;
	int ret = rdma_pair_recover(&s->p);

	op_result(K_qp_recover, -ret);
	if (!ret) {
		s->recover_fail_streak = 0;
		return;
	}
	{
		static int shown;

		if (__atomic_add_fetch(&shown, 1, __ATOMIC_RELAXED) <= 3)
			diag("%s: QP recovery failed: %s (QP states %d %d)", t->name, ename(-ret),
			     rdma_pair_qp_state(&s->p, 0), rdma_pair_qp_state(&s->p, 1));
	}
	if (++s->recover_fail_streak == 3)
		violation(K_qp_recover, "the QP pair did not recover 3 times in a row: %s (QP states %d %d)",
			  ename(-ret), rdma_pair_qp_state(&s->p, 0), rdma_pair_qp_state(&s->p, 1));
}

/*
 * Wait for @posted send completions on @side (one deadline for all).
 * Returns 0 when all succeeded, the first bad status + 1000, or ETIMEDOUT.
 */
static int wait_batch(struct thr *t, int side, int posted)
{
	uint64_t deadline = now_ms() + WC_WAIT_MS;
	struct ibv_wc wc;
	int i, first = 0;

	for (i = 0; i < posted; i++) {
		uint64_t now = now_ms();
		int st;

		if (now >= deadline)
			return first ? first : ETIMEDOUT;
		st = rdma_pair_wait_send(&t->rs->p, side, (int)(deadline - now), &wc);
		if (st < 0)
			return first ? first : ETIMEDOUT;
		count_wc(st);
		if (st != IBV_WC_SUCCESS && !first) {
			first = 1000 + st;
			break;	/* the rest is flushed; recovery discards it */
		}
	}
	return first;
}

/* A target MR for RDMA: a table MR, or the private VA MR. */
static void pick_target(struct thr *t, uint64_t *iova, size_t *len, uint32_t *rkey,
			uint32_t *lkey, int *which)
{
	struct rstate *s = t->rs;

	if (s->n && chance(&t->rng, 90)) {
		int i = (int)below(&t->rng, s->n);

		*iova = s->m[i].iova;
		*len = s->m[i].len;
		*rkey = s->m[i].mr->rkey;
		*lkey = s->m[i].mr->lkey;
		*which = i;
	} else if (G.excluded[K_mr_reg_va]) {	/* no VA MR wanted: the private normal MR */
		*iova = (uintptr_t)s->lbuf;
		*len = LBUF_RANDOM;
		*rkey = s->lmr->rkey;
		*lkey = s->lmr->lkey;
		*which = -1;
	} else {
		*iova = (uintptr_t)s->vbuf;
		*len = VBUF_LEN / 2;	/* the first half: never checked */
		*rkey = s->vmr->rkey;
		*lkey = s->vmr->lkey;
		*which = -1;
	}
}

static void op_rdma_batch(struct thr *t, bool dereg_inflight)
{
	struct rng *r = &t->rng;
	struct rstate *s = t->rs;
	enum kind k = dereg_inflight ? K_rdma_dereg_inflight : K_rdma_batch;
	int side = (int)below(r, 2), n = 1 + (int)below(r, 8), posted = 0, i, ret = 0;
	int victim = -1;

	if (dereg_inflight) {
		if (!s->n)
			return;
		victim = (int)below(r, s->n);
	}
	for (i = 0; i < n; i++) {
		uint64_t riova, raddr, laddr, off;
		size_t rlen;
		uint32_t rkey, lkey, len, tkey, tl;
		unsigned int c = (unsigned int)below(r, 100);
		enum ibv_wr_opcode op;
		int which;

		pick_target(t, &riova, &rlen, &rkey, &tkey, &which);
		if (victim >= 0) {
			riova = s->m[victim].iova;
			rlen = s->m[victim].len;
			rkey = s->m[victim].mr->rkey;
			c = (unsigned int)below(r, 70);
		}
		off = below(r, rlen);
		len = (uint32_t)(1 + below(r, rlen - off < 65536 ? rlen - off : 65536));
		if (chance(r, 8))
			len += (uint32_t)below(r, 8192);	/* past the end */
		if (chance(r, 3))
			rkey = (uint32_t)rnd(r);
		raddr = riova + off;
		/* local: the private normal MR mostly, a table MR sometimes */
		laddr = (uintptr_t)s->lbuf + below(r, LBUF_RANDOM - 65536 - 8192);
		lkey = s->lmr->lkey;
		if (chance(r, 25) && s->n) {
			int j = (int)below(r, s->n);

			tl = s->m[j].len;
			off = below(r, tl);
			laddr = s->m[j].iova + off;
			if (len > tl - off)
				len = (uint32_t)(tl - off);
			lkey = s->m[j].mr->lkey;
		}
		if (c < 35) {
			op = IBV_WR_RDMA_WRITE;
		} else if (c < 65) {
			op = IBV_WR_RDMA_READ;
		} else if (c < 85) {
			op = c < 75 ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP;
			if (chance(r, 90))
				raddr &= ~7ull;
			len = 8;
			laddr = ((uintptr_t)s->lbuf + below(r, LBUF_RANDOM - 16)) & ~7ull;
			lkey = s->lmr->lkey;
		} else {
			/* SEND into a receive buffer of the other side: a table MR or lbuf */
			uint64_t rb = (uintptr_t)s->lbuf + below(r, LBUF_RANDOM - 65536 - 8192);
			uint32_t rbk = s->lmr->lkey, rbl = len;

			if (chance(r, 60)) {
				rb = raddr;
				rbk = tkey;
			}
			if (rdma_pair_post_recv(&s->p, !side, 0x7700 + i, (void *)(uintptr_t)rb,
						rbk, rbl))
				break;
			op = IBV_WR_SEND;
		}
		ret = post_one(s, side, op, laddr, len, lkey, raddr, rkey, rnd(r), rnd(r), i);
		if (ret)
			break;
		posted++;
	}
	if (victim >= 0)
		dereg_at(t, victim, k);
	if (posted)
		ret = wait_batch(t, side, posted);
	op_result(k, ret >= 1000 ? EIO : ret);
	if (ret)
		recover_pair(t);
	else
		rdma_pair_drain(&s->p);
}

/*
 * The private VA MR: remap it, then the peer WRITEs a pattern into it (the
 * CPU must see it), READs what the CPU wrote, does a FETCH_ADD; and a READ
 * with the VA MR as the local buffer.
 */
static void op_rdma_integrity(struct thr *t)
{
	struct rng *r = &t->rng;
	struct rstate *s = t->rs;
	uint8_t *v = s->vbuf + VBUF_LEN / 2, *l = s->lbuf + LBUF_RANDOM;
	uint64_t viova = (uintptr_t)v, seed = rnd(r), old, add = rnd(r), *w, *res;
	size_t half = VBUF_LEN / 2, off, len, bad;
	int side = (int)below(r, 2), st, fails = 0;

	switch (below(r, 4)) {
	case 0:
		madvise(v, half, MADV_DONTNEED);
		break;
	case 1:
		mmap(v, half, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
		     -1, 0);
		break;
	case 2:
		mprotect(v, half, PROT_READ);
		mprotect(v, half, PROT_READ | PROT_WRITE);
		break;
	}
	if (rdma_pair_qp_state(&s->p, 0) != IBV_QPS_RTS ||
	    rdma_pair_qp_state(&s->p, 1) != IBV_QPS_RTS)
		recover_pair(t);

	off = below(r, half);
	len = 1 + below(r, half - off);
	pattern_fill(l, len, seed, 0);
	st = rdma_pair_write_sync(&s->p, side, l, s->lmr->lkey, viova + off, s->vmr->rkey,
				  (uint32_t)len, CHECK_WAIT_MS);
	count_wc(st);
	if (st) {
		violation(K_rdma_integrity, "WRITE into the private VA MR: %s (QP states %d %d)",
			  st > 0 ? ibv_wc_status_str(st) : ename(-st),
			  rdma_pair_qp_state(&s->p, 0), rdma_pair_qp_state(&s->p, 1));
		fails++;
	} else if (data_bad(v + off, len, seed, &bad)) {
		violation(K_rdma_integrity, "WRITE of %zu bytes at +%zu: the CPU sees byte %zu wrong",
			  len, off, bad);
		fails++;
	}

	off = below(r, half);
	len = 1 + below(r, half - off);
	pattern_fill(v + off, len, seed + 1, 0);
	memset(l, 0, len);
	st = fails ? -EAGAIN : rdma_pair_read_sync(&s->p, side, l, s->lmr->lkey, viova + off,
						   s->vmr->rkey, (uint32_t)len, CHECK_WAIT_MS);
	count_wc(st);
	if (!fails && st) {
		violation(K_rdma_integrity, "READ from the private VA MR: %s (QP states %d %d)",
			  st > 0 ? ibv_wc_status_str(st) : ename(-st),
			  rdma_pair_qp_state(&s->p, 0), rdma_pair_qp_state(&s->p, 1));
		fails++;
	} else if (!fails && data_bad(l, len, seed + 1, &bad)) {
		violation(K_rdma_integrity, "READ of %zu bytes at +%zu: byte %zu is not what the CPU wrote",
			  len, off, bad);
		fails++;
	}

	w = (uint64_t *)(v + (below(r, half) & ~7ull));
	res = (uint64_t *)(l + 4096);
	old = *w;
	*res = ~old;
	st = fails ? -EAGAIN : rdma_pair_fetch_add_sync(&s->p, side, res, s->lmr->lkey,
							(uintptr_t)w, s->vmr->rkey, add,
							CHECK_WAIT_MS);
	count_wc(st);
	if (!fails && st) {
		violation(K_rdma_integrity, "FETCH_ADD on the private VA MR: %s (QP states %d %d)",
			  st > 0 ? ibv_wc_status_str(st) : ename(-st),
			  rdma_pair_qp_state(&s->p, 0), rdma_pair_qp_state(&s->p, 1));
		fails++;
	} else if (!fails && (*res != old || *w != old + add)) {
		violation(K_rdma_integrity, "FETCH_ADD: old %#llx result %#llx now %#llx",
			  (unsigned long long)old, (unsigned long long)*res,
			  (unsigned long long)*w);
		fails++;
	}

	/* The VA MR as the local buffer: READ from lbuf into it. */
	off = below(r, half);
	len = 1 + below(r, half - off);
	pattern_fill(l, len, seed + 2, 0);
	st = fails ? -EAGAIN : rdma_pair_read_sync(&s->p, side, v + off, s->vmr->lkey,
						   (uintptr_t)l, s->lmr->rkey, (uint32_t)len,
						   CHECK_WAIT_MS);
	count_wc(st);
	if (!fails && st) {
		violation(K_rdma_integrity, "READ into the private VA MR (local): %s (QP states %d %d)",
			  st > 0 ? ibv_wc_status_str(st) : ename(-st),
			  rdma_pair_qp_state(&s->p, 0), rdma_pair_qp_state(&s->p, 1));
		fails++;
	} else if (!fails && data_bad(v + off, len, seed + 2, &bad)) {
		violation(K_rdma_integrity, "READ into the VA MR at +%zu: the CPU sees byte %zu of %zu wrong",
			  off, bad, len);
		fails++;
	}
	op_result(K_rdma_integrity, fails ? EIO : 0);
	if (fails)
		recover_pair(t);
}

/* ---- churn ----------------------------------------------------------- */

static void op_touch(struct thr *t)
{
	struct range g = pick_range(&t->rng, 256 << 10);
	size_t done;
	int ret = 0;

	for (done = 0; done < g.len && !ret; done += BUF_LEN) {
		size_t n = g.len - done < BUF_LEN ? g.len - done : BUF_LEN;

		if (chance(&t->rng, 60))
			ret = self_write(g.addr + done, t->pat, n);
		else
			ret = self_read(t->bounce, g.addr + done, n);
	}
	op_result(K_mm_touch, ret);
}

static void op_remap(struct thr *t)
{
	struct rng *r = &t->rng;
	struct range g = pick_range(r, 0);
	unsigned int c = (unsigned int)below(r, 100);
	int prot = PROT_READ | PROT_WRITE, flags = MAP_FIXED, fd = -1;
	off_t foff = 0;
	void *p;

	if (c < 40) {
		flags |= MAP_PRIVATE | MAP_ANONYMOUS;
	} else if (c < 50) {
		flags |= MAP_SHARED | MAP_ANONYMOUS;
	} else if (c < 70) {
		flags |= MAP_SHARED;
		fd = G.memfd[g.arena];
		foff = (off_t)g.off;
	} else if (c < 80) {
		flags |= MAP_PRIVATE;
		fd = G.memfd[g.arena];
		foff = (off_t)g.off;
	} else if (c < 86) {
		flags |= MAP_PRIVATE | MAP_ANONYMOUS;
		prot = PROT_NONE;
	} else if (c < 91) {
		flags |= MAP_PRIVATE | MAP_ANONYMOUS;
		prot = PROT_READ;
	} else if (c < 96 && G.hugefd >= 0 && G.ar[g.arena].len >= 2 * MIB) {
		/* a 2 MiB aligned hugetlb chunk */
		size_t chunks = G.ar[g.arena].len / (2 * MIB), ch = below(r, chunks);

		g.addr = G.ar[g.arena].addr + ch * 2 * MIB;
		g.len = 2 * MIB;
		flags |= MAP_SHARED;
		fd = G.hugefd;
		foff = (off_t)(below(r, 2) * 2 * MIB);
	} else {
		flags |= MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE;
	}
	p = mmap(g.addr, g.len, prot, flags, fd, foff);
	op_result(K_mm_remap, p == MAP_FAILED ? errno : 0);
	if (p != MAP_FAILED && p != g.addr)
		violation(K_mm_remap, "MAP_FIXED at %p returned %p", g.addr, p);
	if (p != MAP_FAILED && prot != PROT_NONE && chance(r, 50))
		self_write(g.addr, t->pat, g.len < BUF_LEN ? g.len : BUF_LEN);
}

static void op_munmap(struct thr *t)
{
	struct range g = pick_range(&t->rng, 0);

	op_result(K_mm_munmap, munmap(g.addr, g.len) ? errno : 0);
}

static void op_mremap(struct thr *t, bool dontunmap)
{
	struct rng *r = &t->rng;
	struct range src = pick_range(r, 256 << 10), dst = pick_range(r, 0);
	enum kind k = dontunmap ? K_mm_mremap_dontunmap : K_mm_mremap;
	unsigned int c = (unsigned int)below(r, 100);
	void *p;

	if (dst.len > src.len)
		dst.len = src.len;
	if (dontunmap) {
		if (c < 70)
			p = mremap(src.addr, src.len, src.len,
				   MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, dst.addr);
		else	/* anywhere: give it back at once */
			p = mremap(src.addr, src.len, src.len, MREMAP_MAYMOVE | MREMAP_DONTUNMAP);
		if (p != MAP_FAILED && !in_window(p, src.len))
			munmap(p, src.len);
	} else if (c < 50) {	/* move (or move and shrink) into another place */
		p = mremap(src.addr, src.len, dst.len, MREMAP_MAYMOVE | MREMAP_FIXED, dst.addr);
	} else if (c < 70) {	/* shrink in place */
		size_t nl = (src.len / 2) & ~(PAGE - 1);

		p = mremap(src.addr, src.len, nl ? nl : PAGE, 0);
	} else if (c < 85) {	/* grow in place, inside the arena */
		size_t room = G.ar[src.arena].len - src.off;

		p = mremap(src.addr, src.len, src.len + below(r, room - src.len + 1) / PAGE * PAGE,
			   0);
	} else {		/* grow, maybe moving out of the window, then back in */
		p = mremap(src.addr, src.len, src.len + PAGE, MREMAP_MAYMOVE);
		if (p != MAP_FAILED && !in_window(p, src.len + PAGE)) {
			void *q = mremap(p, src.len + PAGE, dst.len, MREMAP_MAYMOVE | MREMAP_FIXED,
					 dst.addr);

			if (q == MAP_FAILED)
				munmap(p, src.len + PAGE);
		}
	}
	op_result(k, p == MAP_FAILED ? errno : 0);
}

static void op_mprotect(struct thr *t)
{
	static const int prots[] = { PROT_NONE, PROT_READ, PROT_READ | PROT_WRITE,
				     PROT_READ | PROT_WRITE, PROT_WRITE };
	struct range g = pick_range(&t->rng, 0);

	op_result(K_mm_mprotect,
		  mprotect(g.addr, g.len, prots[below(&t->rng, 5)]) ? errno : 0);
}

static void op_punch_hole(struct thr *t)
{
	struct range g = pick_range(&t->rng, 0);
	int ret = fallocate(G.memfd[g.arena], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			    (off_t)g.off, (off_t)g.len);

	op_result(K_mm_punch_hole, ret ? errno : 0);
}

static void op_truncate(struct thr *t)
{
	int a = (int)below(&t->rng, NR_ARENAS);
	off_t len = (off_t)G.ar[a].len;

	if (chance(&t->rng, 50))
		len = (off_t)(below(&t->rng, G.ar[a].len / PAGE) * PAGE);
	op_result(K_mm_truncate, ftruncate(G.memfd[a], len) ? errno : 0);
}

static void op_mlock(struct thr *t)
{
	struct range g = pick_range(&t->rng, 0);
	int ret;

	switch (below(&t->rng, 3)) {
	case 0:
		ret = mlock(g.addr, g.len);
		break;
	case 1:
		ret = (int)syscall(SYS_mlock2, g.addr, g.len, MLOCK_ONFAULT);
		break;
	default:
		ret = munlock(g.addr, g.len);
		break;
	}
	op_result(K_mm_mlock, ret ? errno : 0);
}

static void op_migrate(struct thr *t)
{
	struct range g = pick_range(&t->rng, 16 * PAGE);
	void *pages[16];
	int nodes[16], status[16];
	size_t i, n = g.len / PAGE;
	long ret;

	if (G.nnodes < 2) {
		op_result(K_mm_migrate, ENODEV);
		return;
	}
	for (i = 0; i < n; i++) {
		pages[i] = g.addr + i * PAGE;
		nodes[i] = (int)below(&t->rng, G.nnodes);
	}
	ret = syscall(SYS_move_pages, 0, n, pages, nodes, status, FUZZ_MPOL_MF_MOVE);
	op_result(K_mm_migrate, ret < 0 ? errno : 0);
}

/* The unstable argument pages: gone, back, read-only, PROT_NONE, zeroed. */
static void op_argpage(struct thr *t)
{
	struct rng *r = &t->rng;
	uint8_t *p = G.argpg + below(r, ARG_PAGES) * PAGE;
	size_t len = PAGE * (1 + below(r, 2));
	int ret;

	if (p + len > G.argpg + ARG_PAGES * PAGE)
		len = PAGE;
	switch (below(r, 5)) {
	case 0:
		ret = munmap(p, len);
		break;
	case 1:
		ret = mmap(p, len, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED;
		break;
	case 2:
		ret = mprotect(p, len, below(r, 2) ? PROT_NONE : PROT_READ);
		break;
	case 3:
		ret = mprotect(p, len, PROT_READ | PROT_WRITE);
		break;
	default:
		ret = madvise(p, len, MADV_DONTNEED);
		break;
	}
	op_result(K_mm_argpage, ret ? errno : 0);
}

/* Write max_regions_per_mm (async-signal-safe: also used by the fatal handler). */
static int write_limit(const char *val)
{
	int fd = open(LIMIT_PARAM, O_WRONLY | O_CLOEXEC), ret = 0;

	if (fd < 0)
		return errno;
	if (write(fd, val, strlen(val)) < 0)
		ret = errno;
	close(fd);
	return ret;
}

/*
 * Lower the per-process region limit for a moment (registrations racing
 * with it may fail with ENOSPC), then put it back.
 */
static void op_vamr_limit(struct thr *t)
{
	char val[16];
	int ret;

	if (!G.limit_saved[0]) {
		op_result(K_vamr_limit, ENOENT);
		return;
	}
	snprintf(val, sizeof(val), "%u", (unsigned int)below(&t->rng, 64));
	ret = write_limit(val);
	sleep_ms((unsigned int)below(&t->rng, 20));
	if (write_limit(G.limit_saved))
		violation(K_vamr_limit, "could not restore %s", LIMIT_PARAM);
	op_result(K_vamr_limit, ret);
}

static void op_madvise(struct thr *t, enum kind k)
{
	struct range g = pick_range(&t->rng, 0);
	int advice = madv_of_kind[k];

	if (k == K_madv_soft_offline) {
		/* one page of an arena that never holds hugetlb pages */
		if (G.ar[g.arena].len >= 2 * MIB ||
		    __atomic_add_fetch(&G.soft_offlined, 1, __ATOMIC_RELAXED) > MAX_SOFT_OFFLINE)
			return;
		g.len = PAGE;
	}
	op_result(k, madvise(g.addr, g.len, advice) ? errno : 0);
}

/*
 * fork: the child touches some of the window, checks that the parent's
 * /dev/vamr file refuses it (EPERM), and exits at once. Only syscalls in
 * the child: the parent is multithreaded.
 */
static void op_fork(struct thr *t)
{
	struct range g = pick_range(&t->rng, 64 << 10);
	uint64_t deadline;
	int status = 0;
	pid_t pid, w;

	pid = fork();
	if (pid < 0) {
		op_result(K_mm_fork, errno);
		return;
	}
	if (pid == 0) {
		struct vamr_register reg = {
			.addr = (uintptr_t)g.addr, .len = g.len,
			.access = VAMR_ACCESS_READ | VAMR_ACCESS_WRITE,
		};
		struct vamr_prefetch pf = { .addr = (uintptr_t)g.addr, .len = PAGE };
		struct vamr_stats st = { .handle = VAMR_STATS_GLOBAL };
		struct vamr_events_open o = { .flags = VAMR_EVENTS_NONBLOCK };
		int code = 0;

		self_write(g.addr, t->pat, g.len);
		if (!ioctl(G.vfd[0], VAMR_IOC_REGISTER, &reg) || errno != EPERM)
			code = 10;
		else if (!ioctl(G.vfd[1], VAMR_IOC_PREFETCH, &pf) || errno != EPERM)
			code = 11;
		else if (!ioctl(G.vfd[2], VAMR_IOC_STATS, &st) || errno != EPERM)
			code = 12;
		else if (!ioctl(G.vfd[0], VAMR_IOC_EVENTS_OPEN, &o) || errno != EPERM)
			code = 13;
		syscall(SYS_exit_group, code);
	}
	deadline = now_ms() + CHILD_EXIT_MS;
	while ((w = waitpid(pid, &status, WNOHANG)) == 0 && now_ms() < deadline)
		sleep_ms(1);
	if (w == 0) {
		violation(K_mm_fork, "forked child %d did not exit within %d ms", pid,
			  CHILD_EXIT_MS);
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		op_result(K_mm_fork, ETIMEDOUT);
		return;
	}
	op_result(K_mm_fork, 0);
	if (WIFSIGNALED(status))
		violation(K_mm_fork, "forked child killed by signal %d", WTERMSIG(status));
	else if (WIFEXITED(status) && WEXITSTATUS(status))
		violation(K_mm_fork, "forked child: %s",
			  WEXITSTATUS(status) == 10 ? "REGISTER on the parent's file was not EPERM" :
			  WEXITSTATUS(status) == 11 ? "PREFETCH on the parent's file was not EPERM" :
			  WEXITSTATUS(status) == 12 ? "STATS on the parent's file was not EPERM" :
			  "EVENTS_OPEN on the parent's file was not EPERM");
}

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

static void sigusr1(int sig)
{
	(void)sig;
}

static void fatal_signal(int sig, siginfo_t *si, void *uc)
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

static void *worker(void *arg)
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

/* ---- set-up and teardown --------------------------------------------- */

static int count_nodes(void)
{
	char buf[64];
	FILE *f = fopen("/sys/devices/system/node/online", "r");
	int lo, hi, n = 1;

	if (!f)
		return 1;
	if (fgets(buf, sizeof(buf), f) && sscanf(buf, "%d-%d", &lo, &hi) == 2)
		n = hi - lo + 1;
	fclose(f);
	return n;
}

static int read_int_file(const char *path)
{
	FILE *f = fopen(path, "r");
	int v = -1;

	if (f) {
		if (fscanf(f, "%d", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

static void write_int_file(const char *path, int v)
{
	FILE *f = fopen(path, "w");

	if (f) {
		fprintf(f, "%d\n", v);
		fclose(f);
	}
}

static bool setup_window(void)
{
	int a;

	G.win = mmap((void *)WINDOW_HINT, WINDOW_LEN, PROT_NONE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
	if (G.win == MAP_FAILED) {
		diag("window at %#lx unavailable (%s); taking any address", WINDOW_HINT,
		     strerror(errno));
		G.win = mmap(NULL, WINDOW_LEN, PROT_NONE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (G.win == MAP_FAILED)
			return false;
	}
	for (a = 0; a < NR_ARENAS; a++) {
		char name[32];

		G.ar[a] = (struct range){ G.win + arena_layout[a].off, arena_layout[a].len, a, 0 };
		if (mmap(G.ar[a].addr, G.ar[a].len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
			return false;
		memset(G.ar[a].addr, 0x11 * (a + 1), G.ar[a].len);
		snprintf(name, sizeof(name), "rdma_fuzz_a%d", a);
		G.memfd[a] = memfd_create(name, MFD_CLOEXEC);
		if (G.memfd[a] < 0 || ftruncate(G.memfd[a], (off_t)G.ar[a].len))
			return false;
	}
	G.argpg = G.win + ARG_OFF;
	if (mmap(G.argpg, ARG_PAGES * PAGE, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
		return false;
	G.hugefd = memfd_create("rdma_fuzz_huge", MFD_CLOEXEC | MFD_HUGETLB);
	if (G.hugefd >= 0 && ftruncate(G.hugefd, 4 * MIB)) {
		close(G.hugefd);
		G.hugefd = -1;
	}
	return true;
}

static void thread_buffers(struct thr *t)
{
	t->argbuf = mmap(NULL, 3 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			 -1, 0);
	mprotect(t->argbuf + PAGE, PAGE, PROT_NONE);
	mprotect(t->argbuf + 2 * PAGE, PAGE, PROT_READ);
	t->bounce = malloc(BUF_LEN);
	t->pat = malloc(BUF_LEN);
	pattern_fill(t->pat, BUF_LEN, G.seed ^ (uint64_t)t->idx, 0);
}

/* Close events files no table knows of (their EVENTS_OPEN reply was lost). */
static int sweep_stray_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		char path[64], target[128];
		int fd = atoi(de->d_name);
		ssize_t l;

		if (fd <= 2 || fd == dirfd(d))
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		l = readlink(path, target, sizeof(target) - 1);
		if (l <= 0)
			continue;
		target[l] = 0;
		if (strstr(target, "vamr")) {
			close(fd);
			n++;
		}
	}
	closedir(d);
	return n;
}

static int global_stats(struct vamr_stats *s)
{
	int fd = vamr_open(), ret;

	if (fd < 0)
		return fd;
	ret = vamr_stats(fd, VAMR_STATS_GLOBAL, s);
	close(fd);
	return ret;
}

/* Poll until VmPin and the global counters are back (or SETTLE_MS passed). */
static bool settled(long vmpin0, const struct vamr_stats *g0, long *vmpin, struct vamr_stats *g)
{
	uint64_t deadline = now_ms() + SETTLE_MS;

	for (;;) {
		*vmpin = vamr_vmpin_kb();
		if (!global_stats(g) && *vmpin == vmpin0 &&
		    g->counters.regions == g0->counters.regions &&
		    g->counters.pages_pinned == g0->counters.pages_pinned)
			return true;
		if (now_ms() > deadline)
			return false;
		sleep_ms(20);
	}
}

/*
 * After teardown this process holds no region, so with max_regions_per_mm
 * at 4 exactly 4 registrations must fit (a leaked count of the per-process
 * limit shows here). Returns NULL or what went wrong.
 */
static const char *check_region_count(void)
{
	static char why[200];
	uint8_t *b = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			  -1, 0);
	int fd = vamr_open(), i, ret;
	const char *res = NULL;
	uint32_t h;

	if (!G.limit_saved[0] || b == MAP_FAILED || fd < 0)
		goto out;
	if (write_limit("4\n")) {
		res = "could not set max_regions_per_mm";
		goto out;
	}
	for (i = 0; i < 5 && !res; i++) {
		ret = vamr_register(fd, b + (i % 4) * PAGE, PAGE, VAMR_ACCESS_READ,
				    COOKIE_MAGIC << 48, &h);
		if (i < 4 && ret) {
			snprintf(why, sizeof(why),
				 "with max_regions_per_mm=4 and no region left, registration %d failed: %s (a leaked region count)",
				 i + 1, ename(-ret));
			res = why;
		} else if (i == 4 && ret != -ENOSPC) {
			snprintf(why, sizeof(why),
				 "with max_regions_per_mm=4, a 5th registration: %s, expected ENOSPC",
				 ename(-ret));
			res = why;
		}
	}
	write_limit(G.limit_saved);
out:
	if (fd >= 0)
		close(fd);
	if (b != MAP_FAILED)
		munmap(b, 4 * PAGE);
	return res;
}

/* The RDMA device's port counters (retries, sequence errors...), the non-zero ones. */
static void print_rdma_counters(void)
{
	char dir[128], path[400], line[400];
	size_t len = 0;
	struct dirent *de;
	DIR *d;

	snprintf(dir, sizeof(dir), "/sys/class/infiniband/%s/ports/%d/hw_counters",
		 rdma_pair_default_dev(), RDMA_PAIR_PORT);
	d = opendir(dir);
	if (!d)
		return;
	line[0] = 0;
	while ((de = readdir(d)) && len < sizeof(line) - 40) {
		long long v;
		FILE *f;

		if (de->d_name[0] == '.' || strstr(de->d_name, "bytes") ||
		    strstr(de->d_name, "pkts") || !strcmp(de->d_name, "lifespan"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fscanf(f, "%lld", &v) == 1 && v)
			len += (size_t)snprintf(line + len, sizeof(line) - len, " %s:%lld",
						de->d_name, v);
		fclose(f);
	}
	closedir(d);
	diag("%s counters:%s", rdma_pair_default_dev(), len ? line : " all zero");
}

static void print_summary(void)
{
	int k, e;

	diag("operations per kind (count, successes, errors by errno):");
	for (k = 0; k < N_KINDS; k++) {
		struct kstat *s = &G.ks[k];
		char line[400];
		size_t len = 0;
		int nerr = (int)ARRAY_SIZE(s->err);

		if (G.excluded[k]) {
			diag("op %-22s excluded", kind_name[k]);
			continue;
		}
		line[0] = 0;
		for (e = 1; e < nerr && len < sizeof(line) - 40; e++) {
			if (!s->err[e])
				continue;
			len += (size_t)snprintf(line + len, sizeof(line) - len, " %s:%" PRIu64,
						e == nerr - 1 ? "other" : ename(e), s->err[e]);
		}
		diag("op %-22s %8" PRIu64 " ok %-8" PRIu64 "%s", kind_name[k], s->n, s->ok, line);
	}
	{
		char line[400];
		size_t len = 0;
		int st;

		line[0] = 0;
		for (st = 0; st < 32 && len < sizeof(line) - 60; st++) {
			if (!G.wc_hist[st])
				continue;
			len += (size_t)snprintf(line + len, sizeof(line) - len, " %s:%" PRIu64,
						ibv_wc_status_str(st), G.wc_hist[st]);
		}
		diag("work completions:%s", len ? line : " none");
	}
	if (G.have_rdma)
		print_rdma_counters();
	diag("violations %" PRIu64 ", hangs %" PRIu64 ", registrations whose handle was lost %" PRIu64,
	     G.violations, G.hangs, G.lost_handles);
	for (k = 0; k < nsigs; k++)
		diag("  %6" PRIu64 " x %s", sigs[k].n, sigs[k].text);
}

/*
 * exit_release: a child (forked from the now single-threaded fuzzer) sets
 * up regions, VA and normal MRs, an events file, RDMA traffic and prefetches
 * and exits without releasing anything. It must exit in time and leave the
 * global counters as they were.
 */
static void phase_exit_release(const struct vamr_stats *g0)
{
	struct vamr_stats g;
	uint64_t deadline, t0;
	int status = 0;
	pid_t pid, w;

	fflush(stdout);
	pid = fork();
	if (pid < 0) {
		tap(false, "exit_release", "fork: %s", strerror(errno));
		return;
	}
	if (pid == 0) {
		struct rng r = { G.seed ^ 0xe817 };
		struct rdma_pair p;
		uint8_t *b = mmap(NULL, 64 * PAGE, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		struct vamr_events_open o = { .flags = VAMR_EVENTS_NONBLOCK };
		struct ibv_mr *mr[4] = { 0 };
		int fd = vamr_open(), i;
		uint32_t h;

		if (b == MAP_FAILED || fd < 0)
			_exit(1);
		memset(b, 0x5a, 64 * PAGE);
		for (i = 0; i < 4; i++)
			vamr_register(fd, b + below(&r, 32) * PAGE + below(&r, 64),
				      1 + below(&r, 32 * PAGE),
				      VAMR_ACCESS_READ | VAMR_ACCESS_WRITE, COOKIE_MAGIC << 48, &h);
		vamr_ioctl(fd, VAMR_IOC_EVENTS_OPEN, &o);
		if (G.have_rdma && !rdma_pair_open(&p, NULL)) {
			for (i = 0; i < 4; i++)
				rdma_pair_reg_mr(&p, b + i * 16 * PAGE, 16 * PAGE,
						 ACC_ALL | (i < 3 ? VAMR_ACCESS_VA : 0), &mr[i]);
			madvise(b + 16 * PAGE, 4 * PAGE, MADV_DONTNEED);
			munmap(b + 40 * PAGE, 2 * PAGE);
			for (i = 0; i < 8 && mr[0] && mr[3]; i++)
				rdma_pair_post_write(&p, 0, i, b + 48 * PAGE, mr[3]->lkey,
						     (uintptr_t)b + i * 1024, mr[0]->rkey,
						     8 * PAGE);
			if (mr[1] && !G.excluded[K_advise_async]) {
				struct ibv_sge sge = { (uintptr_t)b + 16 * PAGE, 16 * PAGE,
						       mr[1]->lkey };

				advise_mr(p.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &sge, 1);
			}
		}
		_exit(0);	/* nothing released */
	}
	t0 = now_ms();
	deadline = t0 + CHILD_EXIT_MS;
	while ((w = waitpid(pid, &status, WNOHANG)) == 0 && now_ms() < deadline)
		sleep_ms(5);
	if (w == 0) {
		char path[64];

		snprintf(path, sizeof(path), "/proc/%d/stack", pid);
		diag("the exit_release child %d is still there after %d ms:", pid, CHILD_EXIT_MS);
		print_file_lines(path, "  ", 24);
		kill(pid, SIGKILL);
		tap(false, "exit_release", "a child with live MRs and regions did not exit within %d ms",
		    CHILD_EXIT_MS);
		return;
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		tap(false, "exit_release", "child status %#x", status);
		return;
	}
	/* VmPin is the parent's; only the global counters matter here. */
	deadline = now_ms() + SETTLE_MS;
	for (;;) {
		if (!global_stats(&g) && g.counters.regions == g0->counters.regions &&
		    g.counters.pages_pinned == g0->counters.pages_pinned)
			break;
		if (now_ms() > deadline) {
			tap(false, "exit_release",
			    "after the child's exit: %llu regions, %llu pages pinned (expected %llu, %llu)",
			    (unsigned long long)g.counters.regions,
			    (unsigned long long)g.counters.pages_pinned,
			    (unsigned long long)g0->counters.regions,
			    (unsigned long long)g0->counters.pages_pinned);
			return;
		}
		sleep_ms(20);
	}
	tap(true, "exit_release", NULL);
	diag("exit_release: child gone and counters back after %llu ms",
	     (unsigned long long)(now_ms() - t0));
}

static void print_usage(const char *argv0)
{
	fprintf(stderr, "usage: %s [-t SECONDS] [-s SEED] [-x KIND[,KIND...]] [-l] [-v]\n",
		argv0);
	exit(2);
}

static void exclude(const char *list)
{
	char *dup = strdup(list), *tok, *save = NULL;
	int k;

	for (tok = strtok_r(dup, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
		size_t n = strlen(tok);
		bool prefix = n && tok[n - 1] == '*', hit = false;

		for (k = 0; k < N_KINDS; k++) {
			if (prefix ? strncmp(kind_name[k], tok, n - 1) : strcmp(kind_name[k], tok))
				continue;
			G.excluded[k] = true;
			hit = true;
		}
		if (!hit) {
			fprintf(stderr, "unknown operation kind '%s' (-l lists them)\n", tok);
			exit(2);
		}
	}
	free(dup);
}

int main(int argc, char **argv)
{
	struct vamr_stats g0, g;
	struct sigaction sa;
	struct rlimit nofile = { 65536, 65536 };
	uint64_t t_stop, t_joined, t_end, deadline, next_progress;
	long vmpin0, vmpin;
	const char *env;
	int opt, i, fd, nthr_roles[4] = { NR_IOCTL_THREADS, NR_EVENTS_THREADS,
						  NR_RDMA_THREADS, NR_CHURN_THREADS };
	bool run_ok, clean_ok = true, joined = true;
	char why[256] = "";

	G.seconds = 10;
	G.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	while ((opt = getopt(argc, argv, "t:s:x:lvh")) != -1) {
		switch (opt) {
		case 't':
			G.seconds = (unsigned int)strtoul(optarg, NULL, 0);
			break;
		case 's':
			G.seed = strtoull(optarg, NULL, 0);
			break;
		case 'x':
			exclude(optarg);
			break;
		case 'l':
			for (i = 0; i < N_KINDS; i++)
				if (i != K_qp_recover && i != K_thread_teardown)
					printf("%s\n", kind_name[i]);
			return 0;
		case 'v':
			G.verbose = true;
			break;
		default:
			print_usage(argv[0]);
		}
	}
	env = getenv("VAMR_FUZZ_SECONDS");
	if (env && *env)
		G.seconds = (unsigned int)strtoul(env, NULL, 0);
	env = getenv("VAMR_FUZZ_SEED");
	if (env && *env)
		G.seed = strtoull(env, NULL, 0);
	env = getenv("VAMR_FUZZ_EXCLUDE");
	if (env && *env)
		exclude(env);

	printf("TAP version 13\n");
	printf("# seed=%llu\n", (unsigned long long)G.seed);
	printf("1..3\n");
	fflush(stdout);

	fd = vamr_open();
	if (fd < 0) {
		tap_skip("fuzz_run", "/dev/vamr not available");
		tap_skip("teardown_clean", "/dev/vamr not available");
		tap_skip("exit_release", "/dev/vamr not available");
		return 0;
	}
	close(fd);

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = sigusr1;		/* no SA_RESTART: reads return EINTR */
	sigaction(SIGUSR1, &sa, NULL);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = fatal_signal;
	sa.sa_flags = SA_SIGINFO;
	sigaction(SIGSEGV, &sa, NULL);
	sigaction(SIGBUS, &sa, NULL);
	sigaction(SIGILL, &sa, NULL);
	setrlimit(RLIMIT_NOFILE, &nofile);

	vmpin0 = vamr_vmpin_kb();
	if (global_stats(&g0)) {
		tap(false, "fuzz_run", "global STATS failed");
		return 1;
	}
	G.nnodes = count_nodes();
	G.ksm_run_saved = read_int_file("/sys/kernel/mm/ksm/run");
	{
		int lim = read_int_file(LIMIT_PARAM);

		if (lim > 0)
			snprintf(G.limit_saved, sizeof(G.limit_saved), "%d\n", lim);
	}
	if (G.ksm_run_saved == 0)
		write_int_file("/sys/kernel/mm/ksm/run", 1);
	if (!setup_window()) {
		tap(false, "fuzz_run", "set-up of the VA window failed: %s", strerror(errno));
		return 1;
	}
	for (i = 0; i < NR_VFDS; i++) {
		uint32_t h = ~0u;

		G.vfd[i] = vamr_open();
		pthread_mutex_init(&G.ht[i].lock, NULL);
		if (G.vfd[i] < 0) {
			tap(false, "fuzz_run", "open /dev/vamr: %s", strerror(-G.vfd[i]));
			return 1;
		}
		/* handle 0: the dummy (see ht_add()) */
		if (vamr_register(G.vfd[i], G.ar[0].addr, PAGE, VAMR_ACCESS_READ,
				  COOKIE_MAGIC << 48, &h) || h != 0) {
			tap(false, "fuzz_run", "first REGISTER on a fresh file: handle %u", h);
			return 1;
		}
	}
	G.next_qid = 1000;

	/* RDMA: is rxe there, and does it give VA semantics? */
	{
		struct rdma_pair p;
		int ret = rdma_pair_open(&p, NULL);

		if (!ret) {
			uint8_t *b = mmap(NULL, PAGE, PROT_READ | PROT_WRITE,
					  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			struct ibv_mr *mr = NULL;
			struct vamr_mr_query q;

			G.have_rdma = true;
			G.ib_index = (uint32_t)ibv_get_device_index(p.ctx->device);
			if (b != MAP_FAILED &&
			    !rdma_pair_reg_mr(&p, b, PAGE, ACC_ALL | VAMR_ACCESS_VA, &mr)) {
				G.va_supported = !mr_query_key(mr->lkey, &q);
				ibv_dereg_mr(mr);
			}
			rdma_pair_close(&p);
			if (b != MAP_FAILED)
				munmap(b, PAGE);
		} else {
			diag("no RDMA device %s (%s): ioctl, events and churn threads only",
			     rdma_pair_default_dev(), strerror(-ret));
			nthr_roles[R_RDMA] = 0;
		}
	}
	diag("%u s, threads: %d ioctl, %d events, %d rdma, %d churn; VA MRs %s; %d NUMA nodes; hugetlb %s",
	     G.seconds, nthr_roles[R_IOCTL], nthr_roles[R_EVENTS], nthr_roles[R_RDMA],
	     nthr_roles[R_CHURN], G.va_supported ? "supported" : "NOT supported", G.nnodes,
	     G.hugefd >= 0 ? "yes" : "no");

	for (i = 0; i < 4; i++) {
		int j;

		for (j = 0; j < nthr_roles[i]; j++) {
			struct thr *t = &G.thr[G.nthr];

			t->role = (enum role)i;
			t->idx = G.nthr;
			t->rng.s = G.seed * 0x100000001b3ull +
				   (uint64_t)G.nthr * 0x9e3779b97f4a7c15ull;
			snprintf(t->name, sizeof(t->name), "fz-%s%d", role_name[i], j);
			thread_buffers(t);
			if (t->role == R_IOCTL) {
				t->priv = mmap(NULL, VBUF_LEN, PROT_READ | PROT_WRITE,
					       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
				t->priv_ok = t->priv != MAP_FAILED &&
					     !vamr_register(G.vfd[0], t->priv, VBUF_LEN,
							    VAMR_ACCESS_READ | VAMR_ACCESS_WRITE,
							    COOKIE_MAGIC << 48, &t->priv_h);
			}
			G.nthr++;
		}
	}
	for (i = 0; i < G.nthr; i++)
		pthread_create(&G.thr[i].th, NULL, worker, &G.thr[i]);

	/* Run, watching for stuck operations. */
	deadline = now_ms() + (uint64_t)G.seconds * 1000;
	next_progress = now_ms() + 30000;
	while (now_ms() < deadline) {
		uint64_t total = 0;
		int k;

		sleep_ms(200);
		check_hangs(OP_HANG_MS);
		if (now_ms() >= next_progress) {
			next_progress += 30000;
			for (k = 0; k < N_KINDS; k++)
				total += G.ks[k].n;
			diag("progress: %" PRIu64 " of %u s, %" PRIu64 " operations, %" PRIu64
			     " violations", (now_ms() + (uint64_t)G.seconds * 1000 - deadline) / 1000,
			     G.seconds, total, G.violations);
		}
	}
	__atomic_store_n(&G.stop, 1, __ATOMIC_RELAXED);
	t_stop = now_ms();
	for (;;) {
		bool all = true;

		for (i = 0; i < G.nthr; i++)
			if (!__atomic_load_n(&G.thr[i].done, __ATOMIC_ACQUIRE))
				all = false;
		if (all)
			break;
		if (now_ms() - t_stop > JOIN_LIMIT_MS) {
			joined = false;
			break;
		}
		check_hangs(OP_HANG_MS);
		sleep_ms(10);
	}
	t_joined = now_ms();

	run_ok = !G.violations && !G.hangs;
	if (run_ok)
		tap(true, "fuzz_run", NULL);
	else
		tap(false, "fuzz_run", "%" PRIu64 " violations, %" PRIu64 " stuck operations (seed %llu)",
		    G.violations, G.hangs, (unsigned long long)G.seed);
	print_summary();

	if (!joined) {
		check_hangs(0);
		tap(false, "teardown_clean", "workers still running %llu ms after the stop",
		    (unsigned long long)(t_joined - t_stop));
		tap_skip("exit_release", "teardown did not finish");
		if (G.limit_saved[0])
			write_limit(G.limit_saved);
		fflush(stdout);
		_exit(1);	/* threads may be stuck in the kernel: no cleanup */
	}
	for (i = 0; i < G.nthr; i++)
		pthread_join(G.thr[i].th, NULL);

	/* Release everything the main thread knows of. */
	for (i = 0; i < NR_VFDS; i++) {
		struct htab *h = &G.ht[i];
		int j, ret;

		for (j = 0; j < h->n; j++) {
			ret = vamr_unregister(G.vfd[i], h->e[j].handle);
			if (ret && clean_ok) {
				snprintf(why, sizeof(why), "UNREGISTER of live handle %u: %s",
					 h->e[j].handle, ename(-ret));
				clean_ok = false;
			}
		}
		h->n = 0;
	}
	for (i = 0; i < G.nthr; i++) {
		struct thr *t = &G.thr[i];

		if (t->priv_ok && vamr_unregister(G.vfd[0], t->priv_h) && clean_ok) {
			snprintf(why, sizeof(why), "UNREGISTER of a private region failed");
			clean_ok = false;
		}
	}
	for (i = 0; i < G.nev; i++)
		close(G.ev[i].fd);
	G.nev = 0;
	for (i = 0; i < NR_VFDS; i++)
		close(G.vfd[i]);
	i = sweep_stray_fds();
	if (i)
		diag("closed %d events files whose EVENTS_OPEN reply went to an unstable page", i);
	munmap(G.win, WINDOW_LEN);
	for (i = 0; i < NR_ARENAS; i++)
		close(G.memfd[i]);
	if (G.hugefd >= 0)
		close(G.hugefd);
	for (i = 0; i < G.nthr; i++) {
		struct thr *t = &G.thr[i];

		if (t->priv && t->priv != MAP_FAILED)
			munmap(t->priv, VBUF_LEN);
		munmap(t->argbuf, 3 * PAGE);
		free(t->bounce);
		free(t->pat);
	}
	t_end = now_ms();
	if (clean_ok && !settled(vmpin0, &g0, &vmpin, &g)) {
		snprintf(why, sizeof(why),
			 "VmPin %ld kB (was %ld), global regions %llu (was %llu), pages pinned %llu (was %llu)",
			 vmpin, vmpin0, (unsigned long long)g.counters.regions,
			 (unsigned long long)g0.counters.regions,
			 (unsigned long long)g.counters.pages_pinned,
			 (unsigned long long)g0.counters.pages_pinned);
		clean_ok = false;
	}
	if (clean_ok) {
		const char *bad = check_region_count();

		if (bad) {
			snprintf(why, sizeof(why), "%s", bad);
			clean_ok = false;
		}
	}
	if (clean_ok && t_end - t_joined > CLEANUP_LIMIT_MS) {
		snprintf(why, sizeof(why), "releasing everything took %llu ms",
			 (unsigned long long)(t_end - t_joined));
		clean_ok = false;
	}
	diag("teardown: workers stopped in %llu ms, released in %llu ms",
	     (unsigned long long)(t_joined - t_stop), (unsigned long long)(t_end - t_joined));
	if (clean_ok)
		tap(true, "teardown_clean", NULL);
	else
		tap(false, "teardown_clean", "%s", why);
	if (G.ksm_run_saved == 0)
		write_int_file("/sys/kernel/mm/ksm/run", 0);

	phase_exit_release(&g0);
	return run_ok && clean_ok ? 0 : 1;
}
