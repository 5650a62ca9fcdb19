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
 *
 * One program of several files (rdma_fuzz.h declares what they share):
 * rdma_fuzz.c (set-up, the phases, teardown checks, main), fuzz_threads.c
 * (the workers), fuzz_check.c (output, violations, the hang watchdog, the
 * checks of every ioctl), fuzz_ops_ioctl.c, fuzz_ops_events.c,
 * fuzz_ops_rdma.c and fuzz_ops_churn.c (the operations of each role).
 */
#define _GNU_SOURCE
#include "rdma_fuzz.h"

struct fuzz_state G = {
	.ev_lock = PTHREAD_MUTEX_INITIALIZER,
	.out_lock = PTHREAD_MUTEX_INITIALIZER,
	.hugefd = -1,
	.ksm_run_saved = -1,
};

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
