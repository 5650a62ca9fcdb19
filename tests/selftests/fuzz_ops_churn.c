// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_fuzz: the churn threads' operations: munmap, mmap of every kind,
 * mremap, madvise, mprotect, hole punch, truncate, mlock, move_pages, fork
 * and dips of max_regions_per_mm.
 */
#define _GNU_SOURCE
#include "rdma_fuzz.h"

/* ---- churn ----------------------------------------------------------- */

void op_touch(struct thr *t)
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

void op_remap(struct thr *t)
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

void op_munmap(struct thr *t)
{
	struct range g = pick_range(&t->rng, 0);

	op_result(K_mm_munmap, munmap(g.addr, g.len) ? errno : 0);
}

void op_mremap(struct thr *t, bool dontunmap)
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

void op_mprotect(struct thr *t)
{
	static const int prots[] = { PROT_NONE, PROT_READ, PROT_READ | PROT_WRITE,
				     PROT_READ | PROT_WRITE, PROT_WRITE };
	struct range g = pick_range(&t->rng, 0);

	op_result(K_mm_mprotect,
		  mprotect(g.addr, g.len, prots[below(&t->rng, 5)]) ? errno : 0);
}

void op_punch_hole(struct thr *t)
{
	struct range g = pick_range(&t->rng, 0);
	int ret = fallocate(G.memfd[g.arena], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			    (off_t)g.off, (off_t)g.len);

	op_result(K_mm_punch_hole, ret ? errno : 0);
}

void op_truncate(struct thr *t)
{
	int a = (int)below(&t->rng, NR_ARENAS);
	off_t len = (off_t)G.ar[a].len;

	if (chance(&t->rng, 50))
		len = (off_t)(below(&t->rng, G.ar[a].len / PAGE) * PAGE);
	op_result(K_mm_truncate, ftruncate(G.memfd[a], len) ? errno : 0);
}

void op_mlock(struct thr *t)
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

void op_migrate(struct thr *t)
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
void op_argpage(struct thr *t)
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
int write_limit(const char *val)
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
void op_vamr_limit(struct thr *t)
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

void op_madvise(struct thr *t, enum kind k)
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
void op_fork(struct thr *t)
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
