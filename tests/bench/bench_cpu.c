// SPDX-License-Identifier: GPL-2.0
/*
 * vamr_bench: the share of rxe's CPU time spent in vamr, from perf samples
 * attributed through /proc/kallsyms.
 */
#define _GNU_SOURCE
#include "bench.h"

/* ---------------------------------------------- vamr's share of rxe CPU */

struct ksym {
	unsigned long long addr;
	char name[40];
	unsigned char owner;
};

static struct ksym *ksyms;
static size_t nksyms;

static int cmp_ksym(const void *a, const void *b)
{
	const struct ksym *x = a, *y = b;

	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static int load_kallsyms(void)
{
	FILE *f = fopen("/proc/kallsyms", "r");
	char line[512], name[256], mod[128], type;
	unsigned long long addr;
	size_t cap = 0;

	if (!f)
		return -1;
	nksyms = 0;
	while (fgets(line, sizeof(line), f)) {
		int n = sscanf(line, "%llx %c %255s [%127[^]]]", &addr, &type, name, mod);

		if (n < 3 || !addr || (type != 't' && type != 'T'))
			continue;
		if (nksyms == cap) {
			cap = cap ? 2 * cap : 65536;
			ksyms = realloc(ksyms, cap * sizeof(*ksyms));
			if (!ksyms) {
				fclose(f);
				return -1;
			}
		}
		ksyms[nksyms].addr = addr;
		snprintf(ksyms[nksyms].name, sizeof(ksyms[nksyms].name), "%.39s", name);
		ksyms[nksyms].owner = n < 4 ? OWN_KERNEL : !strcmp(mod, "vamr") ? OWN_VAMR :
				      !strcmp(mod, "rdma_rxe") ? OWN_RXE : OWN_OTHER;
		nksyms++;
	}
	fclose(f);
	qsort(ksyms, nksyms, sizeof(*ksyms), cmp_ksym);
	return nksyms ? 0 : -1;
}

/* The kernel symbol at or below ip, or NULL (user space, or zero addresses in kallsyms). */
static const struct ksym *ksym_of(unsigned long long ip)
{
	size_t lo = 0, hi = nksyms;

	if (ip < 0xffff800000000000ull || !nksyms || ip < ksyms[0].addr)
		return NULL;
	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;

		if (ksyms[mid].addr <= ip)
			lo = mid;
		else
			hi = mid;
	}
	return &ksyms[lo];
}

static int is_copy_sym(const char *s)
{
	static const char *const copy[] = { "memcpy", "__memcpy", "memcpy_orig", "__pi_memcpy",
					    "memmove", "__memmove", "rep_movs_alternative",
					    "copy_page", "memcpy_erms", "__memcpy_flushcache", NULL };
	int i;

	for (i = 0; copy[i]; i++)
		if (!strcmp(s, copy[i]))
			return 1;
	return 0;
}

static int perf_dump;

/*
 * Parse `perf script -F comm,ip` of a callchain recording: among the samples
 * with an rdma_rxe frame on the stack (rxe's work, in whatever task it ran),
 * the share whose leaf is in vamr.ko (self), whose stack has a vamr.ko frame
 * but whose leaf is not the data copy itself (incl), and whose leaf is a
 * memcpy-like copy (copy). Returns the rxe sample count or -1.
 */
static long perf_parse(FILE *f, double *self, double *incl, double *copy, long *nsamples)
{
	static const struct ksym *fr[128];
	static const char *const own[] = { "kernel", "vamr", "rdma_rxe", "module" };
	char line[512];
	long rxe = 0, nself = 0, nincl = 0, ncopy = 0;
	int nf = 0, eof = 0, user = 0;

	while (!eof) {
		eof = !fgets(line, sizeof(line), f);
		if (!eof && (line[0] == ' ' || line[0] == '\t')) {
			unsigned long long ip;

			if (sscanf(line, " %llx", &ip) < 1 || nf >= 128)
				continue;
			fr[nf] = ksym_of(ip);
			if (fr[nf])
				nf++;
			else if (!nf)
				user = 1; /* the leaf is in user space */
			continue;
		}
		/* A header line, a blank line or the end: close the sample read so far. */
		if (nf || user) {
			int i, has_rxe = 0, has_vamr = 0;

			(*nsamples)++;
			for (i = 0; i < nf; i++) {
				has_rxe |= fr[i]->owner == OWN_RXE;
				has_vamr |= fr[i]->owner == OWN_VAMR;
			}
			if (has_rxe && !user) {
				if (perf_dump > 0) {
					perf_dump--;
					fprintf(stderr, "#   sample:");
					for (i = 0; i < nf && i < 12; i++)
						fprintf(stderr, " %s[%s]", fr[i]->name, own[fr[i]->owner]);
					fprintf(stderr, "\n");
				}
				rxe++;
				if (fr[0]->owner == OWN_VAMR)
					nself++;
				if (is_copy_sym(fr[0]->name))
					ncopy++;
				else if (has_vamr)
					nincl++;
			}
		}
		nf = 0;
		user = 0;
	}
	if (!rxe)
		return -1;
	*self = 100.0 * nself / rxe;
	*incl = 100.0 * nincl / rxe;
	*copy = 100.0 * ncopy / rxe;
	return rxe;
}

/* The first lines of a file on stderr, as progress lines. */
static void dump_head(const char *path, int lines)
{
	FILE *f = fopen(path, "r");
	char line[256];

	if (!f)
		return;
	while (lines-- > 0 && fgets(line, sizeof(line), f))
		fprintf(stderr, "#   %s", line);
	fclose(f);
}

/*
 * Sends CMD ("enable\n" or "disable\n") to perf record's control descriptor
 * CTL and waits up to 60 s for its "ack" on ACK: 0, or -1 when perf did not
 * answer (gone, or too old for --control).
 */
static int perf_ctl(int ctl, int ack, const char *cmd)
{
	struct pollfd p = { .fd = ack, .events = POLLIN };
	char buf[16];
	ssize_t n;

	if (write(ctl, cmd, strlen(cmd)) != (ssize_t)strlen(cmd))
		return -1;
	if (poll(&p, 1, 60000) != 1)
		return -1;
	n = read(ack, buf, sizeof(buf) - 1);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	return strncmp(buf, "ack", 3) ? -1 : 0;
}

void bench_cpu_share(void)
{
	const char *perf = getenv("VAMR_BENCH_PERF") ? getenv("VAMR_BENCH_PERF") : "perf";
	char data[64], cmd[256];
	int r, k;

	if (load_kallsyms()) {
		perf_note = "cannot read /proc/kallsyms";
		return;
	}
	/* A perf that died must not kill the benchmark through its control pipe. */
	signal(SIGPIPE, SIG_IGN);
	for (r = 0; r < rounds; r++) {
		for (k = 0; k < NKIND; k++) {
			double self, incl, copy, t;
			long e = 0, got, n, all;
			int status, ctl[2], ack[2];
			pid_t pid;
			FILE *f;

			snprintf(data, sizeof(data), "/tmp/vamr-bench-perf.data");
			unlink(data);
			/*
			 * perf starts with its events disabled (-D -1) and enables them
			 * when told on its control descriptor, acknowledging on another:
			 * the samples cover the stream exactly, however long perf itself
			 * takes to start (the host's perf, read over 9p).
			 */
			if (pipe(ctl) || pipe(ack)) {
				perf_note = "pipe failed";
				return;
			}
			pid = fork();
			if (pid == 0) {
				int fd = open("/dev/null", O_WRONLY);
				char arg[32];

				dup2(fd, 1);
				dup2(fd, 2);
				close(ctl[1]);
				close(ack[0]);
				snprintf(arg, sizeof(arg), "fd:%d,%d", ctl[0], ack[1]);
				execlp(perf, perf, "record", "-a", "-g", "-e", "cpu-clock", "-F", "1000",
				       "-N", "-q", "-D", "-1", "--control", arg, "-o", data, (char *)NULL);
				_exit(127);
			}
			close(ctl[0]);
			close(ack[1]);
			if (pid < 0) {
				perf_note = "fork failed";
				close(ctl[1]);
				close(ack[0]);
				return;
			}
			if (perf_ctl(ctl[1], ack[0], "enable\n")) {
				perf_note = "perf record did not start (no perf binary in the guest, or no --control)";
				kill(pid, SIGKILL);
				waitpid(pid, &status, 0);
				close(ctl[1]);
				close(ack[0]);
				return;
			}
			t = now_us();
			got = stream(IBV_WR_RDMA_WRITE, lbuf, lmr->lkey, tbuf[k], tmr[k]->rkey, TBUF,
				     PERF_MSG, 0, t + PERF_SECONDS * 1e6, &e);
			perf_ctl(ctl[1], ack[0], "disable\n");
			kill(pid, SIGINT);
			waitpid(pid, &status, 0);
			close(ctl[1]);
			close(ack[0]);
			if (got < 0 || e)
				bad_transfer(k, "WRITE stream under perf: error completions");
			snprintf(cmd, sizeof(cmd),
				 "%s script -i %s -F comm,ip >/tmp/vamr-bench-perf.txt 2>/tmp/vamr-bench-perf.err",
				 perf, data);
			if (system(cmd)) {
				perf_note = "perf script failed";
				dump_head("/tmp/vamr-bench-perf.err", 20);
				return;
			}
			f = fopen("/tmp/vamr-bench-perf.txt", "r");
			if (!f) {
				perf_note = "perf script wrote nothing";
				return;
			}
			if (r == 0 && getenv("VAMR_BENCH_PHASES") &&
			    strstr(getenv("VAMR_BENCH_PHASES"), "perfdump")) {
				progress("%s: samples with an rdma_rxe frame", kind_name[k]);
				perf_dump = 12;
			}
			all = 0;
			n = perf_parse(f, &self, &incl, &copy, &all);
			fclose(f);
			if (n < 0) {
				perf_note = "no sample had an rdma_rxe frame (perf could not resolve module symbols?)";
				progress("%ld samples, none with an rdma_rxe frame; the start of perf script:", all);
				dump_head("/tmp/vamr-bench-perf.txt", 40);
				dump_head("/tmp/vamr-bench-perf.err", 10);
				continue;
			}
			put(&cpu_self[k], self);
			put(&cpu_incl[k], incl);
			put(&cpu_copy[k], copy);
			put(&cpu_samples[k], n);
		}
		progress("cpu share round %d done", r + 1);
	}
	unlink(data);
	unlink("/tmp/vamr-bench-perf.txt");
}
