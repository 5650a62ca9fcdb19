// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_fuzz: the checker. TAP and diagnostic output, violations and their
 * distinct signatures, operation results, fault-tolerant copies through a
 * memfd, ranges of the VA window, the hang watchdog, ioctl arguments placed
 * at good and bad places with the errnos each ioctl may return, the table
 * of regions of the shared files.
 */
#define _GNU_SOURCE
#include "rdma_fuzz.h"

__thread struct thr *self_thr;

/* ---- output ---------------------------------------------------------- */

void diag(const char *fmt, ...)
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

void tap(bool ok, const char *name, const char *fmt, ...)
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

void tap_skip(const char *name, const char *why)
{
	pthread_mutex_lock(&G.out_lock);
	printf("ok %d %s # SKIP %s\n", ++tap_n, name, why);
	fflush(stdout);
	pthread_mutex_unlock(&G.out_lock);
}

const char *ename(int e)
{
	const char *s = e ? strerrorname_np(e) : "OK";

	return s ? s : "E?";
}

struct fuzz_sig sigs[MAX_SIGS];
int nsigs;
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

void violation(enum kind k, const char *fmt, ...)
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

void op_result(enum kind k, int err)
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

uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void sleep_ms(unsigned int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

bool stopping(void)
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
int self_write(void *dst, const void *src, size_t len)
{
	return copy_via_stage(dst, src, len);
}

/* Copy out of memory that may be unmapped or PROT_NONE. */
int self_read(void *dst, const void *src, size_t len)
{
	return copy_via_stage(dst, src, len);
}

/* ---- ranges of the window -------------------------------------------- */

struct range pick_range(struct rng *r, size_t max_len)
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
void unalign(struct rng *r, struct range *g)
{
	size_t head = below(r, PAGE), tail = below(r, PAGE);

	if (g->len > head + tail + 1) {
		g->addr += head;
		g->off += head;
		g->len -= head + tail;
	}
}

/* Run past the end of the arena into the PROT_NONE gap behind it. */
void into_gap(struct rng *r, struct range *g)
{
	size_t end = arena_layout[g->arena].off + arena_layout[g->arena].len;

	g->len = (size_t)(G.win + end - g->addr) + (1 + below(r, 4)) * PAGE;
}

bool in_window(const void *p, size_t len)
{
	const uint8_t *a = p;

	return a >= G.win && len <= WINDOW_LEN && a + len <= G.win + WINDOW_LEN;
}

/* ---- hang watchdog --------------------------------------------------- */

void op_begin(struct thr *t, enum kind k)
{
	t->cur = k;
	__atomic_store_n(&t->cur_start, now_ms(), __ATOMIC_RELEASE);
}

void op_end(struct thr *t)
{
	__atomic_store_n(&t->cur_start, 0, __ATOMIC_RELEASE);
	t->hang_reported = false;
}

void print_file_lines(const char *path, const char *prefix, int max)
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
int check_hangs(uint64_t limit_ms)
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

static const char *const loc_name[] = {
	"stack", "misaligned", "read-only", "unstable",
	"NULL", "kernel", "PROT_NONE", "straddle",
};

enum loc pick_loc(struct rng *r)
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
int ioc_at(struct thr *t, int fd, unsigned long cmd, void *s, size_t sz,
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

bool in_set(int e, const int *set)
{
	for (; *set; set++)
		if (*set == e)
			return true;
	return false;
}

/*
 * The checks every ioctl gets. Returns true when the argument sat where
 * the kernel read exactly what we wrote (so the caller may check more).
 */
bool ioc_check(enum kind k, const char *what, enum loc loc, bool iowr,
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
void ht_add(int fdi, struct thr *t, const struct hent *e)
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
bool ht_take(int fdi, struct thr *t, struct hent *out)
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
bool ht_peek(int fdi, struct thr *t, struct hent *out)
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

void ev_add(int fd, int qid, bool nonblock)
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

void publish_key(uint32_t key)
{
	unsigned int i = __atomic_fetch_add(&G.key_pos, 1, __ATOMIC_RELAXED);

	__atomic_store_n(&G.keys[i % NR_KEYS], key, __ATOMIC_RELAXED);
}

/* A random handle that can never be live (past the 65536 per file). */
uint32_t dead_handle(struct rng *r)
{
	return 65536 + (uint32_t)below(r, 0xfffe0000u);
}
