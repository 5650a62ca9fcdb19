/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the rdma_stress_* programs share. Each case runs its scenario in
 * forked children (so the test survives a child being killed) and then
 * checks that everything is back to where it was: the module's global
 * counters (VAMR_IOC_STATS, VAMR_STATS_GLOBAL: pages pinned and live
 * regions), the VmPin of the children (read by the child itself before it
 * exits) and of the test process, and the kernel log of the test's window
 * (WARN, BUG, lockdep... lines are printed as "# kernel: ..." and fail the
 * test). Here: timed waits, /proc and sysfs files, the kernel log, the
 * baseline, the children's report page and ibv_advise_mr(). Include
 * kselftest_harness.h first.
 */
#ifndef VAMR_SELFTEST_STRESS_UTIL_H
#define VAMR_SELFTEST_STRESS_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/swap.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mm_util.h"
#include "pattern.h"
#include "rdma_pair.h"
#include "sys_guard.h"
#include "unpriv_util.h"
#include "vamr_lib.h"

#define PAGE 4096ul
#define MIB (1ul << 20)
#define RW (VAMR_ACCESS_READ | VAMR_ACCESS_WRITE)
#define ACC_REMOTE (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)
#define ACC_VA (ACC_REMOTE | VAMR_ACCESS_VA)

/* How long a deregistration may take, whatever is pending on the MR. */
#define DEREG_LIMIT_NS 1000000000LL
/* How long the counters may take to come back after a process is gone. */
#define BASELINE_WAIT_MS 5000

#define NOBODY 65534

/* ---- small helpers ------------------------------------------------------ */

static inline int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* Reap @pid, waiting at most @ms. 0, or -ETIMEDOUT (still running), or -errno. */
static inline int wait_child(pid_t pid, int *status, long ms)
{
	int64_t end = now_ns() + ms * 1000000LL;

	for (;;) {
		pid_t r = waitpid(pid, status, WNOHANG);

		if (r == pid)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
		if (now_ns() > end)
			return -ETIMEDOUT;
		sleep_ms(2);
	}
}

/* First number in a file (e.g. a sysctl), or -1. */
static inline long read_long(const char *path)
{
	char buf[64] = "";
	long v = -1;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	if (read(fd, buf, sizeof(buf) - 1) > 0 && sscanf(buf, "%ld", &v) != 1)
		v = -1;
	close(fd);
	return v;
}

static inline int write_str(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), ret = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, s, strlen(s)) != (ssize_t)strlen(s))
		ret = -errno;
	close(fd);
	return ret;
}

static inline int write_long(const char *path, long v)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%ld\n", v);
	return write_str(path, buf);
}

/* A "Key:   N kB" line of a /proc file, or -1. */
static inline long proc_kb(const char *path, const char *key)
{
	char line[256];
	size_t klen = strlen(key);
	long kb = -1;
	FILE *f = fopen(path, "re");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, klen) && line[klen] == ':') {
			sscanf(line + klen + 1, "%ld", &kb);
			break;
		}
	fclose(f);
	return kb;
}

/* A counter of /proc/vmstat, or -1. */
static inline long vmstat(const char *key)
{
	char line[128];
	size_t klen = strlen(key);
	long v = -1;
	FILE *f = fopen("/proc/vmstat", "re");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, klen) && line[klen] == ' ') {
			sscanf(line + klen + 1, "%ld", &v);
			break;
		}
	fclose(f);
	return v;
}

/* ---- the kernel log of a test's window ---------------------------------- */

static const char *const kernel_problems[] = {
	"BUG: ", "WARNING: ", "Oops", "Kernel panic", "general protection fault",
	"possible circular locking dependency", "possible recursive locking",
	"inconsistent lock state", "suspicious RCU usage", "blocked for more than",
	"lockdep: ", "UBSAN: ", "KASAN: ", "kernel BUG at", "Call Trace:",
	"unreferenced object", NULL,
};

/* /dev/kmsg positioned after the last record, or -1. */
static inline int kmsg_open(void)
{
	int fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);

	if (fd >= 0)
		lseek(fd, 0, SEEK_END);
	return fd;
}

/*
 * Read the kernel log records written since kmsg_open() and count those
 * that show a kernel problem (each printed as "# kernel: ..."). With
 * @oom_report, "Call Trace:" lines are not counted: an OOM kill dumps the
 * allocating task's stack. *@found is set when a record contains @want.
 */
static inline int kmsg_problems(int fd, int oom_report, const char *want, int *found)
{
	char rec[8192];
	int bad = 0, i;

	if (fd < 0)
		return 0;
	for (;;) {
		ssize_t n = read(fd, rec, sizeof(rec) - 1);
		char *msg, *nl;

		if (n < 0) {
			if (errno == EPIPE || errno == EINTR)
				continue;	/* records were overwritten: go on */
			break;			/* EAGAIN: the end */
		}
		rec[n] = 0;
		msg = strchr(rec, ';');
		if (!msg)
			continue;
		msg++;
		nl = strchr(msg, '\n');
		if (nl)
			*nl = 0;
		if (want && found && strstr(msg, want))
			*found = 1;
		for (i = 0; kernel_problems[i]; i++) {
			if (oom_report && !strcmp(kernel_problems[i], "Call Trace:"))
				continue;
			if (strstr(msg, kernel_problems[i])) {
				fprintf(stderr, "# kernel: %s\n", msg);
				bad++;
				break;
			}
		}
	}
	return bad;
}

/* ---- counters back to baseline ------------------------------------------ */

struct baseline {
	uint64_t pinned, regions;
	long vmpin;
};

static inline int take_baseline(int fd, struct baseline *b)
{
	struct vamr_stats s;
	int ret = vamr_stats(fd, VAMR_STATS_GLOBAL, &s);

	b->pinned = s.counters.pages_pinned;
	b->regions = s.counters.regions;
	b->vmpin = vamr_vmpin_kb();
	return ret;
}

/* Wait up to @ms for the global counters to equal @b; 0 or -1 (*@s: the last seen). */
static inline int wait_baseline(int fd, const struct baseline *b, long ms, struct vamr_stats *s)
{
	int64_t end = now_ns() + ms * 1000000LL;

	for (;;) {
		if (vamr_stats(fd, VAMR_STATS_GLOBAL, s))
			return -1;
		if (s->counters.pages_pinned == b->pinned && s->counters.regions == b->regions)
			return 0;
		if (now_ns() > end)
			return -1;
		sleep_ms(5);
	}
}

#define EXPECT_BASELINE(_fd, _b, _what) do {						\
		struct vamr_stats __s;							\
		int __r = wait_baseline(_fd, _b, BASELINE_WAIT_MS, &__s);		\
		EXPECT_EQ(0, __r) TH_LOG("%s: global counters not back to baseline "	\
					 "after %d ms: pinned %llu (was %llu), "	\
					 "regions %llu (was %llu)", _what,		\
					 BASELINE_WAIT_MS,				\
					 (unsigned long long)__s.counters.pages_pinned,	\
					 (unsigned long long)(_b)->pinned,		\
					 (unsigned long long)__s.counters.regions,	\
					 (unsigned long long)(_b)->regions);		\
		EXPECT_EQ((_b)->vmpin, vamr_vmpin_kb()) TH_LOG("%s: VmPin of the test"	\
							       " process", _what);	\
	} while (0)

#define EXPECT_KMSG_CLEAN(_kfd) \
	EXPECT_EQ(0, kmsg_problems(_kfd, 0, NULL, NULL)) TH_LOG("kernel problems logged")

/* ---- what a child reports (shared memory) ------------------------------- */

enum stage {
	ST_START, ST_VAMR, ST_EVENTS, ST_PAIR, ST_MRS, ST_POSTED, ST_ADVISED,
	ST_TRAFFIC, ST_DEREG, ST_DEREG_DONE, ST_ALLOC, ST_DONE, ST_COUNT,
};

static const char *const stage_name[] = {
	"start", "vamr", "events", "pair", "mrs", "posted", "advised", "traffic",
	"dereg", "dereg_done", "alloc", "done",
};

struct report {
	volatile int stage;
	volatile int go;		/* parent to child: go on */
	volatile int stop;		/* parent to child: stop */
	int step;			/* the child's (first) failing step, 0: none */
	volatile int fatal;		/* the child gave up at that step */
	char msg[400];
	long vmpin_start, vmpin_live, vmpin_end;
	volatile int64_t dereg_start_ns;
	int64_t dereg_ns;
	int max_sge, advise_calls, sges;
	unsigned long posted, completed, wc_errors, remaps, events, rounds;
	int err;			/* an errno the child saw */
	unsigned long pinned_before, ondemand, migrations;	/* compaction_hog */
	pid_t pid;
};

static inline struct report *report_new(void)
{
	void *p = mmap(NULL, sizeof(struct report), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static inline void report_reset(struct report *r)
{
	memset(r, 0, sizeof(*r));
}

#define CHILD_REQUIRE(_rep, _step, _cond, _fmt, ...) do {				\
		if (!(_cond)) {								\
			(_rep)->step = (_step);						\
			snprintf((_rep)->msg, sizeof((_rep)->msg), _fmt, ##__VA_ARGS__);\
			fprintf(stderr, "# child %d: step %d: %s\n", getpid(), _step,	\
				(_rep)->msg);						\
			(_rep)->fatal = 1;						\
			_exit(1);							\
		}									\
	} while (0)

/* A check whose failure is recorded (the first one) and printed; the child goes on. */
#define CHILD_CHECK(_rep, _step, _cond, _fmt, ...) do {				\
		if (!(_cond)) {								\
			if (!(_rep)->step) {						\
				(_rep)->step = (_step);					\
				snprintf((_rep)->msg, sizeof((_rep)->msg), _fmt,	\
					 ##__VA_ARGS__);				\
			}								\
			fprintf(stderr, "# child %d: step %d: " _fmt "\n", getpid(),	\
				_step, ##__VA_ARGS__);					\
		}									\
	} while (0)

#define EXPECT_CHILD_OK(_rep) \
	EXPECT_EQ(0, (_rep)->step) TH_LOG("child failed at step %d: %s", (_rep)->step, (_rep)->msg)

/* Wait until the child reached @stage (or died); 0, or -1 after @ms. */
static inline int wait_stage(struct report *r, pid_t pid, int stage, long ms)
{
	int64_t end = now_ns() + ms * 1000000LL;

	while (r->stage < stage) {
		siginfo_t si;

		memset(&si, 0, sizeof(si));
		/* Died (not reaped: the caller wants the status)? */
		if (!waitid(P_PID, pid, &si, WEXITED | WNOHANG | WNOWAIT) && si.si_pid == pid)
			return -1;
		if (r->fatal || now_ns() > end)
			return -1;
		sleep_ms(1);
	}
	return 0;
}

/*
 * Reap @pid within @ms, but once it started a deregistration
 * (ST_DEREG, dereg_start_ns) give that no more than 3 s: a dereg stuck in
 * the kernel is reported at once. 0 or -ETIMEDOUT.
 */
static inline int wait_child_or_dereg(struct report *r, pid_t pid, int *status, long ms)
{
	int64_t end = now_ns() + ms * 1000000LL;

	for (;;) {
		int64_t t = now_ns();

		if (waitpid(pid, status, WNOHANG) == pid)
			return 0;
		if (t > end)
			return -ETIMEDOUT;
		if (r->stage == ST_DEREG && r->dereg_start_ns &&
		    t > r->dereg_start_ns + 3 * 1000000000LL)
			return -ETIMEDOUT;
		sleep_ms(2);
	}
}

/*
 * ibv_dereg_mr(@mr) in a child, timed and marked for the parent: stage
 * ST_DEREG and dereg_start_ns while it runs (wait_child_or_dereg() gives it
 * 3 s), ST_DEREG_DONE once it returned. dereg_ns keeps the slowest such call
 * of the child. What ibv_dereg_mr() returned; *@ns (if not NULL): how long
 * this call took.
 */
static inline int timed_dereg(struct report *r, struct ibv_mr *mr, int64_t *ns)
{
	int64_t t0, dt;
	int ret;

	r->stage = ST_DEREG;
	t0 = now_ns();
	r->dereg_start_ns = t0;
	ret = ibv_dereg_mr(mr);
	dt = now_ns() - t0;
	if (dt > r->dereg_ns)
		r->dereg_ns = dt;
	r->stage = ST_DEREG_DONE;
	if (ns)
		*ns = dt;
	return ret;
}

/* ---- ibv_advise_mr ------------------------------------------------------ */

/*
 * rdma-core 44's rxe provider (Debian 12) does not implement ibv_advise_mr()
 * and answers EOPNOTSUPP in user space; the uverbs command is what newer
 * providers send. Exported by libibverbs for providers (IBVERBS_PRIVATE_34).
 */
int ibv_cmd_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
		      struct ibv_sge *sg_list, uint32_t num_sge);

/*
 * SGEs one ADVISE_MR command can carry: the SGE list is one uverbs ioctl
 * attribute, whose length is 16 bits (rdma-core refuses a longer one).
 */
#define ADVISE_MAX_SGE ((uint32_t)(UINT16_MAX / sizeof(struct ibv_sge)))

/* Advise @n SGEs in as few commands as the ABI allows; 0 or an errno. */
static inline int advise(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
		  struct ibv_sge *sge, uint32_t n, int *calls)
{
	uint32_t off, k;
	int ret;

	for (off = 0; off < n; off += k) {
		k = n - off < ADVISE_MAX_SGE ? n - off : ADVISE_MAX_SGE;
		ret = ibv_advise_mr(pd, advice, flags, sge + off, k);
		if (ret == EOPNOTSUPP)
			ret = ibv_cmd_advise_mr(pd, advice, flags, sge + off, k);
		if (ret)
			return ret;
		if (calls)
			++*calls;
	}
	return 0;
}


#endif /* VAMR_SELFTEST_STRESS_UTIL_H */
