/* SPDX-License-Identifier: GPL-2.0 */
/*
 * vamr_bench: what its files share (vamr_bench.c says what it measures):
 * the MR kinds, the cells of the results and the functions of each file.
 */
#ifndef VAMR_BENCH_H
#define VAMR_BENCH_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../include/uapi/misc/vamr.h"
#include "../selftests/mm_util.h"
#include "../selftests/pattern.h"
#include "../selftests/rdma_pair.h"
#include "../selftests/vamr_lib.h"
#include "bench_util.h"

#define KIB 1024ul
#define MIB (1ul << 20)
#define GIB (1ul << 30)
#define PAGE 4096ul
#define HUGE (2ul << 20)
#define ACC (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#define MAX_ROUNDS 32

/* Streams: the MR under test is TBUF bytes; DEPTH WRs in flight. */
#define TBUF (16 * MIB)
#define DEPTH 16
/* Bytes per throughput point: STREAM_MIN, and at least 4 messages. */
#define STREAM_MIN (16 * MIB)
#define STREAM_BYTES(msg) ((msg) * 4 > STREAM_MIN ? (msg) * 4 : STREAM_MIN)
/* First access after remap: REMAP_PAGES pages. */
#define REMAP_PAGES 1024ul
/* Periodic remaps: REMAP_CHUNK every REMAP_PERIOD_US while WRITEs of REMAP_MSG stream. */
#define REMAP_CHUNK (64 * KIB)
#define REMAP_PERIOD_US 1000
#define REMAP_MSG (64 * KIB)
#define REMAP_SECONDS 1.5	/* per condition and round, */
#define REMAP_SLICES 3		/* in slices alternating with and without remaps */
/* vamr's CPU share: a WRITE stream of PERF_MSG messages for PERF_SECONDS under perf. */
#define PERF_MSG (64 * KIB)
#define PERF_SECONDS 2.0
/* Invalidations. */
#define INV_LEN (16 * MIB)
#define INV_REPS 3	/* per round, for the 16 MiB MR columns */
#define NMR 1000
#define STRIDE (32 * KIB)
#define MRLEN (16 * KIB)
/* Deregistration with N live MRs. */
#define LIVE_MAX 4000
#define DEREG_SAMPLES 8

enum kind { NORMAL, ODP, VA, NKIND };
static const char *const kind_name[NKIND] = { "normal", "odp", "va" };
static const unsigned int kind_access[NKIND] = { 0, IBV_ACCESS_ON_DEMAND, VAMR_ACCESS_VA };

struct cell {
	double v[MAX_ROUNDS];
	int n;
};

/* Repetitions inside a round: the round's value is their median. */
#define MAX_REPS 8

struct reps {
	double v[MAX_REPS];
	int n;
};

static const size_t reg_size[] = { 4 * KIB, MIB, 64 * MIB, GIB };

#define NREG 4

static const size_t tput_size[] = { 4 * KIB, 64 * KIB, MIB, 4 * MIB };

#define NTPUT 4

enum icol { MUNMAP, MPROTECT, DONTNEED, MANY, NICOL };

static const int live_n[] = { 1, 1000, LIVE_MAX };

#define NLIVE 3

/* Registrations per round at 4 KiB and 1 MiB (the round's value is their
 * median; their mean goes to reg_mean_us): one interrupt or RCU batch in a
 * 30 us deregistration moves a mean of 8 by tens of percent. */
#define REG_REPS 32

/* ... at 64M and in the last column (1G, or the largest power of two that
 * fits: REG_REPS_64M when that is 64M); the round's value is their median. */
#define REG_REPS_64M 7

#define REG_REPS_BIG 3

#define STR_(x) #x
#define STR(x) STR_(x)

/* FIRST_SMALL bytes at the start of each page: the per-page variant of [3]. */
#define FIRST_SMALL 64ul

#define WQ_CPUMASK "/sys/devices/virtual/workqueue/cpumask"

/* The state one_cpu_begin() changed, for one_cpu_end(). */
struct one_cpu {
	char saved[256];	/* the unbound workqueue cpumask before */
	cpu_set_t old;		/* the thread's affinity before */
	int state;		/* 0 nothing changed, 1 affinity saved, 2 the cpumask changed too */
};

/*
 * Symbols come from /proc/kallsyms, not from perf: perf looks module ELF files
 * up by name under /lib/modules and would take the stock rdma_rxe.ko in
 * kernel/ for the patched one (updates/) that is loaded. Each kernel text
 * symbol with the module it belongs to; an address belongs to the module of
 * the closest symbol at or below it.
 */
enum owner { OWN_KERNEL, OWN_VAMR, OWN_RXE, OWN_OTHER };

/* The state of the run and the results: each defined in the file that fills it. */
extern int rounds;
extern int failures;
extern long odp_bad;
extern struct rdma_pair *p;
extern size_t big_size;
extern struct cell reg_us[NKIND][NREG], dereg_us[NKIND][NREG];
extern struct cell reg_mean_us[NKIND][NREG], dereg_mean_us[NKIND][NREG];
extern struct cell first_pp[NKIND], steady_pp[NKIND], pin_pp[NKIND];
extern struct cell sfirst_pp[NKIND], ssteady_pp[NKIND], spin_pp[NKIND];
extern const char *first_data[NKIND];
extern struct cell wr_mbs[NKIND][NTPUT], rd_mbs[NKIND][NTPUT], memcpy_mbs[NTPUT], loop_mbs[NTPUT];
extern long wr_err[NKIND], rd_err[NKIND], wr_corrupt[NKIND], rd_corrupt[NKIND];
extern struct cell remap_mbs[2][NKIND], noremap_mbs[2][NKIND], remap_rate[2][NKIND];
extern struct cell remap_cost[2][NKIND], remap_memcpy, remap_loop;
extern const char *one_cpu_note;
extern uint8_t *lbuf, *rbuf, *tbuf[NKIND];
extern long remap_err[NKIND];
extern struct cell inv_call[NKIND][NICOL], inv_write[NKIND][NICOL];
extern struct cell live_dereg[NKIND][NLIVE];
extern struct cell cpu_self[NKIND], cpu_incl[NKIND], cpu_copy[NKIND], cpu_samples[NKIND];
extern const char *perf_note;
extern struct ibv_mr *lmr, *rmr, *tmr[NKIND];
extern double va_remaps;
extern uint64_t va_repinned, va_unpinned, va_lost;
extern int va_counters_ok;

/* bench_common.c: cells, output, buffers, MRs, streams, copy rates */
void put(struct cell *c, double x);
double cmed(const struct cell *c);
double cmin(const struct cell *c);
double cmax(const struct cell *c);
void rep(struct reps *r, double x);
void put_reps(struct cell *c, struct reps *r);
void progress(const char *fmt, ...);
void fail(const char *fmt, ...);
void bad_transfer(enum kind k, const char *what);
uint8_t *buf_alloc(size_t len, int touch);
struct ibv_mr *reg(void *a, size_t len, enum kind k);
void dereg(struct ibv_mr *mr);
long stream_strided(enum ibv_wr_opcode op, uint8_t *lb, uint32_t lkey, uint8_t *rb,
		    uint32_t rkey, size_t buflen, size_t msg, size_t stride, size_t total, double deadline_us, long *nerr);
long stream(enum ibv_wr_opcode op, uint8_t *lb, uint32_t lkey, uint8_t *rb, uint32_t rkey,
	    size_t buflen, size_t msg, size_t total, double deadline_us, long *nerr);
int write_once(uint8_t *lb, uint32_t lkey, uint8_t *rb, uint32_t rkey, size_t len);
double copy_rate(size_t msg, size_t bytes, int loop);

/* bench_reg.c: registration and deregistration */
size_t mem_available(void);
void bench_reg(void);

/* bench_first.c: the first access after a remap */
int one_cpu_begin(struct one_cpu *o);
void one_cpu_end(struct one_cpu *o, const char *what);
void bench_first_access(void);

/* bench_tput.c: throughput, and throughput under periodic remaps */
int stream_setup(void);
void bench_throughput(void);
void bench_remaps(void);

/* bench_cpu.c: vamr's share of rxe's CPU time (perf) */
void bench_cpu_share(void);

/* bench_inval.c: invalidations, deregistration with N MRs alive */
void bench_inval(void);
void bench_live(void);

#endif /* VAMR_BENCH_H */
