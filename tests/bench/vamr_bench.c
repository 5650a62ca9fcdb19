// SPDX-License-Identifier: GPL-2.0
/*
 * vamr_bench: normal vs ODP vs VA MRs on the soft-RoCE device of the guest,
 * side by side in one run. Prints one table (column bands, each with the rows
 * normal / odp / va / va/normal / va/odp, plus a memcpy ceiling row where a
 * plain copy means something). Documentation/bench-results.rst explains every
 * row.
 *
 * Never a timed assertion: the numbers are printed, not judged. The exit
 * status is non-zero only when something failed: a verbs call, a transfer
 * with an error completion or wrong data on a normal or VA MR. ODP MRs on rxe
 * have known copy bugs: their wrong data and error completions are counted
 * and printed (CORRUPT / errors), not failures.
 *
 * Each cell is the median over ROUNDS rounds with the spread [min..max];
 * ratio rows divide medians. The kinds are interleaved inside each round.
 *
 * usage: vamr_bench [rounds]     (default $VAMR_BENCH_ROUNDS, else 5; at most 32)
 * Environment: VAMR_BENCH_PERF=path of perf (default "perf"; the CPU-share
 * band is skipped with a note when it does not run), VAMR_IBDEV as for the
 * selftests. Progress goes to stderr as "# ..." lines.
 */
#define _GNU_SOURCE
#include "bench.h"

/* ------------------------------------------------------------------ table */

#define CW 21

static void fmt_num(char *b, size_t n, double v)
{
	if (isnan(v))
		snprintf(b, n, "-");
	else if (fabs(v) >= 100)
		snprintf(b, n, "%.0f", v);
	else if (fabs(v) >= 10)
		snprintf(b, n, "%.1f", v);
	else
		snprintf(b, n, "%.2f", v);
}

static void print_cell(const struct cell *c)
{
	char m[24], lo[24], hi[24], b[80];

	if (!c || !c->n) {
		printf(" %*s", CW, "-");
		return;
	}
	fmt_num(m, sizeof(m), cmed(c));
	fmt_num(lo, sizeof(lo), cmin(c));
	fmt_num(hi, sizeof(hi), cmax(c));
	snprintf(b, sizeof(b), "%s [%s..%s]", m, lo, hi);
	printf(" %*s", CW, b);
}

static void print_ratio(const struct cell *a, const struct cell *b)
{
	double x = a && b && a->n && b->n ? cmed(a) / cmed(b) : NAN;
	char s[32];

	/* A ratio of a negative or zero median (a difference lost in the noise) means nothing. */
	if (isnan(x) || isinf(x) || cmed(a) <= 0 || cmed(b) <= 0)
		snprintf(s, sizeof(s), "-");
	else
		snprintf(s, sizeof(s), "%.2fx", x);
	printf(" %*s", CW, s);
}

/* A band: title, column heads, and per kind a cell getter. */
typedef const struct cell *(*getter)(int kind, int col);

static void band(const char *title, const char *const *heads, int ncol, getter get,
		 const struct cell *(*ceiling)(int row, int col), int ratios)
{
	int k, c;

	printf("\n%s\n%-10s", title, "");
	for (c = 0; c < ncol; c++)
		printf(" %*s", CW, heads[c]);
	printf("\n");
	for (k = 0; k < NKIND; k++) {
		printf("%-10s", kind_name[k]);
		for (c = 0; c < ncol; c++)
			print_cell(get(k, c));
		printf("\n");
	}
	if (ratios) {
		printf("%-10s", "va/normal");
		for (c = 0; c < ncol; c++)
			print_ratio(get(VA, c), get(NORMAL, c));
		printf("\n%-10s", "va/odp");
		for (c = 0; c < ncol; c++)
			print_ratio(get(VA, c), get(ODP, c));
		printf("\n");
	}
	if (ceiling) {
		printf("%-10s", "memcpy");
		for (c = 0; c < ncol; c++)
			print_cell(ceiling(0, c));
		printf("\n%-10s", "u64 loop");
		for (c = 0; c < ncol; c++)
			print_cell(ceiling(1, c));
		printf("\n");
	}
}

static struct cell reg_pp[NKIND];
static const struct cell *g_reg(int k, int c) { return &reg_us[k][c]; }
static const struct cell *g_dereg(int k, int c) { return &dereg_us[k][c]; }
static const struct cell *g_first(int k, int c)
{
	return c == 0 ? &first_pp[k] : c == 1 ? &steady_pp[k] : c == 2 ? &pin_pp[k] : &reg_pp[k];
}
static const struct cell *g_sfirst(int k, int c)
{
	return c == 0 ? &sfirst_pp[k] : c == 1 ? &ssteady_pp[k] : c == 2 ? &spin_pp[k] : &reg_pp[k];
}
static const struct cell *g_wr(int k, int c) { return &wr_mbs[k][c]; }
static const struct cell *g_rd(int k, int c) { return &rd_mbs[k][c]; }
static const struct cell *g_tput_ceiling(int row, int c)
{
	return row ? &loop_mbs[c] : &memcpy_mbs[c];
}
static const struct cell *g_remap_c(int cpu1, int k, int c)
{
	return c == 0 ? &noremap_mbs[cpu1][k] : c == 1 ? &remap_mbs[cpu1][k] :
	       c == 2 ? &remap_rate[cpu1][k] : &remap_cost[cpu1][k];
}
static const struct cell *g_remap(int k, int c) { return g_remap_c(0, k, c); }
static const struct cell *g_remap1(int k, int c) { return g_remap_c(1, k, c); }
static const struct cell *g_remap_ceiling(int row, int c)
{
	return c ? NULL : row ? &remap_loop : &remap_memcpy;
}
static const struct cell *g_inv(int k, int c) { return &inv_call[k][c]; }
static const struct cell *g_invw(int k, int c) { return &inv_write[k][c]; }
static const struct cell *g_live(int k, int c) { return &live_dereg[k][c]; }
static const struct cell *g_cpu(int k, int c)
{
	return c == 0 ? &cpu_self[k] : c == 1 ? &cpu_incl[k] : c == 2 ? &cpu_copy[k] : &cpu_samples[k];
}

static void print_table(double wall_s)
{
	static const char *const hreg[] = { "4K", "1M", "64M", "1G" };
	static const char *const hfirst[] = { "after remap/page", "pinned/page",
					      "added/page", "reg/page (64M)" };
	static const char *const htput[] = { "4K", "64K", "1M", "4M" };
	static const char *const hremap[] = { "no remaps MB/s", "remapping MB/s", "remaps/s",
					      "us/remap" };
	static const char *const hinv[] = { "munmap", "mprotect", "dontneed", "munmap 1000 MRs" };
	static const char *const hlive[] = { "1 live", "1000 live", "4000 live" };
	static const char *const hcpu[] = { "vamr self %", "vamr incl. %", "data copy %",
					    "rxe samples" };
	char big[32], title[512];
	int k;

	for (k = 0; k < NKIND; k++) {
		int i;

		for (i = 0; i < reg_us[k][2].n; i++)
			put(&reg_pp[k], reg_us[k][2].v[i] / (64 * MIB / PAGE));
	}
	if (big_size != GIB)
		snprintf(big, sizeof(big), "%zuM", big_size / MIB);
	else
		snprintf(big, sizeof(big), "1G");
	printf("vamr_bench: %s, MTU %d, %d rounds, cells: median [min..max] over rounds, ratios of medians\n",
	       p->dev_name, 128 << p->mtu, rounds);
	printf("TCG guest: emulated time; compare rows within this run only. Buffers: anonymous, 2 MiB\n"
	       "aligned, MADV_NOHUGEPAGE, every page touched by the CPU (%s column: %s).\n"
	       "ODP on the stock rxe has copy bugs (fixed by patches/rxe 0008, 0009): wrong ODP data is marked CORRUPT, not a failure.\n",
	       big, big_size == GIB ? "1 GiB, all touched, not sparse" :
	       "the guest's free RAM did not fit 1 GiB; the largest power of two that did");
	{
		static const char *hr[4];

		hr[0] = "4K"; hr[1] = "1M"; hr[2] = "64M"; hr[3] = big;
		(void)hreg;
		band("[1] ibv_reg_mr, us (the median of " STR(REG_REPS) ", " STR(REG_REPS_64M) ", " STR(REG_REPS_BIG)
		     " calls per round at 4K and 1M, 64M, 1G)", hr, NREG, g_reg, NULL, 1);
		band("[2] ibv_dereg_mr, us", hr, NREG, g_dereg, NULL, 1);
		printf("%-10s 4K, 1M with the mean of the " STR(REG_REPS) " per round instead: reg %.2f, %.2f;"
		       " dereg %.2f, %.2f\n", "va/normal", cmed(&reg_mean_us[VA][0]) / cmed(&reg_mean_us[NORMAL][0]),
		       cmed(&reg_mean_us[VA][1]) / cmed(&reg_mean_us[NORMAL][1]),
		       cmed(&dereg_mean_us[VA][0]) / cmed(&dereg_mean_us[NORMAL][0]),
		       cmed(&dereg_mean_us[VA][1]) / cmed(&dereg_mean_us[NORMAL][1]));
	}
	snprintf(title, sizeof(title),
		 "[3a] first access after remap, us per page: munmap + mmap(MAP_FIXED) of %lu pages under the\n"
		 "     MR, CPU-touched, then one %lu KiB WRITE over them; 'pinned' = the same WRITE before\n"
		 "     the remap; added = what the first access adds per page; reg/page = [1] 64M / 16384",
		 REMAP_PAGES, REMAP_PAGES * PAGE / KIB);
	band(title, hfirst, 4, g_first, NULL, 1);
	snprintf(title, sizeof(title),
		 "[3b] the same with one %lu-byte WRITE per page (%d in flight) instead of one big WRITE:\n"
		 "     the per-page copy no longer buries what the first access adds",
		 FIRST_SMALL, DEPTH);
	band(title, hfirst, 4, g_sfirst, NULL, 1);
	printf("%-10s", "data");
	for (k = 0; k < NKIND; k++)
		printf(" %s=%s", kind_name[k], first_data[k] ? first_data[k] : "-");
	printf("   (normal: stale by design, it keeps the old pages)\n");
	printf("%-10s", "added/reg");
	for (k = 0; k < NKIND; k++) {
		double a = cmed(&pin_pp[k]) / cmed(&reg_pp[k]), b = cmed(&spin_pp[k]) / cmed(&reg_pp[k]);

		printf(" %s=", kind_name[k]);
		printf(a > 0 ? "%.1fx/" : "-/", a);
		printf(b > 0 ? "%.1fx" : "-", b);
	}
	printf("   ([3a]/[3b]: first-access cost per page / registration cost per page)\n");
	snprintf(title, sizeof(title),
		 "[4] RDMA WRITE throughput, MB/s, by message size (%d in flight, max(%lu MiB, 4 messages) per\n"
		 "    point, data checked); ceiling: the guest CPU copying the same bytes in the same pieces\n"
		 "    with glibc's memcpy and with a plain 8-byte loop",
		 DEPTH, STREAM_MIN / MIB);
	band(title, htput, NTPUT, g_wr, g_tput_ceiling, 1);
	snprintf(title, sizeof(title),
		 "[5] RDMA READ throughput, MB/s, by message size (as [4])");
	band(title, htput, NTPUT, g_rd, g_tput_ceiling, 1);
	printf("%-10s", "errors");
	for (k = 0; k < NKIND; k++)
		printf(" %s: %ld/%ld err, %ld/%ld CORRUPT", kind_name[k], wr_err[k], rd_err[k],
		       wr_corrupt[k], rd_corrupt[k]);
	printf("   (WRITE/READ)\n");
	snprintf(title, sizeof(title),
		 "[6] %lu KiB WRITEs streaming into a 16 MiB MR, %.1f s without and %.1f s with a thread\n"
		 "    remapping %lu KiB of it (mmap MAP_FIXED, untouched) every %d us, in %d alternating\n"
		 "    slices each; remaps/s as achieved",
		 REMAP_MSG / KIB, REMAP_SECONDS, REMAP_SECONDS, REMAP_CHUNK / KIB, REMAP_PERIOD_US,
		 REMAP_SLICES);
	band(title, hremap, 3, g_remap, g_remap_ceiling, 1);
	printf("%-10s", "remapping/");
	for (k = 0; k < NKIND; k++)
		printf(" %s=%.2f", kind_name[k], cmed(&remap_mbs[0][k]) / cmed(&noremap_mbs[0][k]));
	printf("   (no remaps)\n");
	band("[6b] the same with the benchmark, its remap thread and the unbound workqueues (rxe's\n"
	     "     responder) on one CPU: the stream's time is all the CPU's work, where it runs is fixed;\n"
	     "     us/remap: the stream's time beyond its time without remaps, per remap",
	     hremap, 4, g_remap1, NULL, 1);
	if (one_cpu_note)
		printf("%-10s %s\n", "", one_cpu_note);
	printf("%-10s", "remapping/");
	for (k = 0; k < NKIND; k++)
		printf(" %s=%.2f", kind_name[k], cmed(&remap_mbs[1][k]) / cmed(&noremap_mbs[1][k]));
	printf("   (no remaps; error completions under remaps in [6] and [6b]:");
	for (k = 0; k < NKIND; k++)
		printf(" %s %ld", kind_name[k], remap_err[k]);
	printf(")\n");
	if (va_counters_ok && va_remaps > 0)
		printf("va/remap   %.1f pages pinned on demand, %.1f unpinned, %.2f pin rounds lost to a race"
		       "   (vamr's counters; a remap replaces %lu pages)\n",
		       va_repinned / va_remaps, va_unpinned / va_remaps, va_lost / va_remaps,
		       REMAP_CHUNK / 4096);
	else if (!va_counters_ok)
		printf("va/remap   - (vamr's counters unavailable)\n");
	band("[7] one-page invalidation, us of the call alone: munmap / mprotect(RO and back) /\n"
	     "    MADV_DONTNEED of one page in a 16 MiB MR; munmap of one page among 1000 MRs of 16 KiB",
	     hinv, NICOL, g_inv, NULL, 1);
	band("[8] the same, us of the call + one 4 KiB WRITE next to the page (what the MR redoes)",
	     hinv, NICOL, g_invw, NULL, 1);
	snprintf(title, sizeof(title),
		 "[9] ibv_dereg_mr of one 4 KiB MR, us, with N MRs of the same kind live (median of %d per round)",
		 DEREG_SAMPLES);
	band(title, hlive, NLIVE, g_live, NULL, 1);
	snprintf(title, sizeof(title),
		 "[10] rxe CPU in a %lu KiB WRITE stream at MTU %d (perf record -a -g -e cpu-clock, %.0f s):\n"
		 "     %% of the samples with an rdma_rxe frame whose leaf is in vamr.ko (self), that have a\n"
		 "     vamr.ko frame but a leaf other than memcpy (incl.), whose leaf is memcpy (data copy)",
		 PERF_MSG / KIB, 128 << p->mtu, PERF_SECONDS);
	if (perf_note)
		printf("\n%s\n     not measured: %s\n", title, perf_note);
	else
		band(title, hcpu, 4, g_cpu, NULL, 0);
	printf("\nvamr_bench: %.0f s; %d failure(s); %ld ODP transfer problem(s) (known rxe ODP bugs)\n",
	       wall_s, failures, odp_bad);
}

int main(int argc, char **argv)
{
	double t0 = now_us(), t;
	const char *phases;
	int ret;

	if (argc > 1)
		rounds = atoi(argv[1]);
	else if (getenv("VAMR_BENCH_ROUNDS"))
		rounds = atoi(getenv("VAMR_BENCH_ROUNDS"));
	/* perf keeps its caches under $HOME; the guest's init has none. */
	setenv("HOME", "/tmp", 0);
	if (rounds < 1 || rounds > MAX_ROUNDS)
		rounds = 5;
	setvbuf(stdout, NULL, _IOLBF, 0);
	ret = rdma_pair_open(p, NULL);
	if (ret) {
		fprintf(stderr, "vamr_bench: cannot open the RDMA device: %s\n", strerror(-ret));
		return 1;
	}
	p->mtu = IBV_MTU_4096;
	if (rdma_pair_recover(p)) {
		fprintf(stderr, "vamr_bench: cannot reconnect the QPs at MTU 4096\n");
		return 1;
	}
	progress("%d rounds; MemAvailable %zu MiB", rounds, mem_available() / MIB);
	/* VAMR_BENCH_PHASES=reg,first,tput,remap,cpu,inval,live: only those (development). */
	phases = getenv("VAMR_BENCH_PHASES");
#define WANT(name) (!phases || strstr(phases, name))
#define PHASE(name, fn)                                                             \
	do {                                                                        \
		if (!WANT(name))                                                    \
			break;                                                      \
		t = now_us();                                                       \
		fn();                                                               \
		progress(#fn ": %.0f s", (now_us() - t) / 1e6);                     \
	} while (0)
	PHASE("reg", bench_reg);
	PHASE("first", bench_first_access);
	if ((WANT("tput") || WANT("remap") || WANT("cpu")) && stream_setup() == 0) {
		PHASE("tput", bench_throughput);
		PHASE("remap", bench_remaps);
		PHASE("cpu", bench_cpu_share);
	}
	PHASE("inval", bench_inval);
	PHASE("live", bench_live);
	print_table((now_us() - t0) / 1e6);
	return failures ? 1 : 0;
}
