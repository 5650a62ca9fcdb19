// SPDX-License-Identifier: GPL-2.0
/*
 * vamr_hostile_remote: changes to a registered range made by another
 * process: process_madvise(MADV_COLD / MADV_PAGEOUT / MADV_COLLAPSE),
 * process_vm_writev() and FOLL_FORCE writes through /proc/PID/mem. The
 * region then sees exactly what the owner's CPU sees.
 *
 * Data is position dependent (pattern.h) and checked byte by byte; the
 * module-wide counters are checked where pins are involved.
 */
#define _GNU_SOURCE
#include "kselftest_harness.h"
#include "hostile_util.h"

/* ---------------------------------------------------------------------- */
/* 5. Another process: process_madvise, process_vm_writev                 */
/* ---------------------------------------------------------------------- */

/*
 * Runs fn(arg) in a child process (another mm, another process) and
 * returns its exit status.
 */
static int in_other_process(int (*fn)(void *), void *arg)
{
	pid_t pid = fork();

	if (pid < 0)
		return -1;
	if (pid == 0)
		_exit(fn(arg));
	return wait_exit(pid);
}

struct remote_op {
	pid_t target;
	struct iovec iov[4];
	int n;
	int advice;
	uint64_t seed;
};

static int do_process_madvise(void *arg)
{
	struct remote_op *op = arg;
	int pfd = pidfd_open(op->target);

	if (pfd < 0)
		return 10;
	if (syscall(__NR_process_madvise, pfd, op->iov, op->n, op->advice, 0) < 0)
		return errno == EINVAL || errno == ENOSYS ? 11 : 12;
	return 0;
}

static int do_process_vm_writev(void *arg)
{
	struct remote_op *op = arg;
	struct iovec local[4];
	ssize_t want = 0;
	size_t off = 0;
	int i;

	/* Local buffers: pattern (seed, offset within the remote iovecs, summed). */
	for (i = 0; i < op->n; i++) {
		local[i].iov_base = malloc(op->iov[i].iov_len);
		local[i].iov_len = op->iov[i].iov_len;
		pattern_fill(local[i].iov_base, local[i].iov_len, op->seed, off);
		off += op->iov[i].iov_len;
		want += op->iov[i].iov_len;
	}
	return process_vm_writev(op->target, local, op->n, op->iov, op->n, 0) == want ? 0 : 13;
}

/*
 * process_madvise(MADV_COLD, then MADV_PAGEOUT) from another process over
 * the owner's registered memory: private anonymous memory (pinned, and part
 * of it released with MADV_DONTNEED and touched again, so not pinned: those
 * pages can really be swapped out), and shared memory (memfd, whose pinned
 * pages pageout can unmap). After each, reads through the region, and
 * through a VA MR by a peer, are exactly what the owner's CPU sees, and
 * writes through them are what the CPU reads.
 */
TEST(process_madvise_from_other_process)
{
	const size_t len = 32 * PAGE;
	uint8_t *anon = map_anon(len), *shm, *tmp = malloc(len), *land;
	struct rdma_pair p = { 0 };
	struct ibv_mr *mr = NULL, *lmr = NULL;
	struct vamr_counters c0;
	struct remote_op op;
	int fd, mfd, err, st, round;
	uint32_t ha, hs;
	bool rdma;

	ASSERT_NE(NULL, anon);
	fd = vamr_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, gcounters(fd, &c0));
	mfd = memfd_create("vamr_hostile_shm", MFD_CLOEXEC);
	ASSERT_LE(0, mfd);
	ASSERT_EQ(0, ftruncate(mfd, len));
	shm = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	ASSERT_NE(MAP_FAILED, shm);
	land = map_anon(len);
	ASSERT_NE(NULL, land);
	pattern_fill(anon, len, 0xa1, 0);
	pattern_fill(shm, len, 0xa2, 0);
	ASSERT_EQ(0, vamr_register(fd, anon, len, RW, 1, &ha));
	ASSERT_EQ(0, vamr_register(fd, shm, len, VAMR_ACCESS_READ, 2, &hs));
	rdma = rdma_pair_open(&p, NULL) == 0;
	if (rdma) {
		ASSERT_EQ(0, rdma_pair_reg_mr(&p, anon, len, ACC | VAMR_ACCESS_VA, &mr));
		ASSERT_EQ(0, rdma_pair_reg_mr(&p, land, len, ACC, &lmr));
	}
	/* Pages 8..15 of the anonymous memory: released, touched again, not pinned now. */
	ASSERT_EQ(0, madvise(anon + 8 * PAGE, 8 * PAGE, MADV_DONTNEED));
	usleep(20000);
	pattern_fill(anon + 8 * PAGE, 8 * PAGE, 0xa3, 0);

	for (round = 0; round < 2; round++) {
		op = (struct remote_op){ .target = getpid(), .n = 2,
					 .advice = round ? MADV_PAGEOUT : MADV_COLD };
		op.iov[0] = (struct iovec){ anon, len };
		op.iov[1] = (struct iovec){ shm, len };
		st = in_other_process(do_process_madvise, &op);
		if (st == 11)
			SKIP(return, "process_madvise unsupported");
		ASSERT_EQ(0, st);
		usleep(20000);
		EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, ha, anon, len, &err));
		EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, hs, shm, len, &err));
		EXPECT_EQ(PATTERN_OK, pattern_check(anon + 8 * PAGE, 8 * PAGE, 0xa3, 0));
		EXPECT_EQ(PATTERN_OK, pattern_check(shm, len, 0xa2, 0));
		if (rdma) {
			ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_read_sync(&p, 0, land, lmr->lkey,
								      (uintptr_t)anon, mr->rkey,
								      len, 0));
			EXPECT_EQ(0, memcmp(land, anon, len));
		}
		/* Writes: through the region, and through the shared file. */
		pattern_fill(tmp, len, 0xb0 + round, 0);
		ASSERT_EQ(0, vamr_write(fd, ha, anon, tmp, len));
		EXPECT_EQ(PATTERN_OK, pattern_check(anon, len, 0xb0 + round, 0));
		pattern_fill(tmp, len, 0xb2 + round, 0);
		ASSERT_EQ((ssize_t)len, pwrite(mfd, tmp, len, 0));
		EXPECT_EQ(PATTERN_OK, region_check(fd, hs, shm, len, 0xb2 + round, 0, &err));
		if (rdma) {
			pattern_fill(land, len, 0xb4 + round, 0);
			ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_write_sync(&p, 0, land, lmr->lkey,
								       (uintptr_t)anon, mr->rkey,
								       len, 0));
			EXPECT_EQ(PATTERN_OK, pattern_check(anon, len, 0xb4 + round, 0));
			EXPECT_EQ(PATTERN_OK, region_check(fd, ha, anon, len, 0xb4 + round, 0,
							   &err));
		}
		/* Unpinned again for the next round. */
		ASSERT_EQ(0, madvise(anon + 8 * PAGE, 8 * PAGE, MADV_DONTNEED));
		usleep(20000);
		pattern_fill(anon + 8 * PAGE, 8 * PAGE, 0xa3, 0);
		pattern_fill(shm, len, 0xa2, 0);
	}
	if (rdma) {
		ibv_dereg_mr(mr);
		ibv_dereg_mr(lmr);
		rdma_pair_close(&p);
	}
	EXPECT_EQ(0, vamr_unregister(fd, ha));
	EXPECT_EQ(0, vamr_unregister(fd, hs));
	EXPECT_GCOUNTERS_BACK(fd, &c0);
	munmap(shm, len);
	close(mfd);
	free(tmp);
	close(fd);
}

/*
 * process_vm_writev() from another process into the owner's registered
 * memory: written anonymous pages (pinned for writing), a read-only region
 * over memory never touched (the shared zero page: the write replaces it),
 * a read-only region over a private file mapping (a read pin of the page
 * cache page: the write makes a private copy), and pages released with
 * MADV_DONTNEED. The region, and a peer's RDMA READ of a VA MR, then return
 * exactly the bytes the owner's CPU sees, which are the writer's.
 */
TEST(process_vm_writev_from_other_process)
{
	const size_t len = 16 * PAGE;
	uint8_t *anon = map_anon(len), *zero = map_anon(len), *priv, *land, *tmp = malloc(len);
	struct rdma_pair p = { 0 };
	struct ibv_mr *mr = NULL, *zmr = NULL, *lmr = NULL;
	struct vamr_counters c0;
	struct remote_op op;
	int fd, mfd, err, st;
	uint32_t ha, hz, hp;
	bool rdma;

	ASSERT_NE(NULL, anon);
	ASSERT_NE(NULL, zero);
	fd = vamr_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, gcounters(fd, &c0));
	mfd = memfd_create("vamr_hostile_priv", MFD_CLOEXEC);
	ASSERT_LE(0, mfd);
	pattern_fill(tmp, len, 0xc0, 0);
	ASSERT_EQ((ssize_t)len, pwrite(mfd, tmp, len, 0));
	priv = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, mfd, 0);
	ASSERT_NE(MAP_FAILED, priv);
	/* Read-fault the private file pages in: the page cache's pages are mapped. */
	EXPECT_EQ(PATTERN_OK, pattern_check(priv, len, 0xc0, 0));
	land = map_anon(len);
	ASSERT_NE(NULL, land);
	pattern_fill(anon, len, 0xc1, 0);
	ASSERT_EQ(0, vamr_register(fd, anon, len, RW, 1, &ha));
	ASSERT_EQ(0, vamr_register(fd, zero, len, VAMR_ACCESS_READ, 2, &hz));
	ASSERT_EQ(0, vamr_register(fd, priv, len, VAMR_ACCESS_READ, 3, &hp));
	EXPECT_EQ(PATTERN_OK, region_check(fd, hp, priv, len, 0xc0, 0, &err));
	memset(tmp, 0xff, len);
	ASSERT_EQ(0, vamr_read(fd, hz, zero, tmp, len));
	EXPECT_EQ(0, tmp[0]);
	EXPECT_EQ(0, tmp[len - 1]);
	rdma = rdma_pair_open(&p, NULL) == 0;
	if (rdma) {
		ASSERT_EQ(0, rdma_pair_reg_mr(&p, anon, len, ACC | VAMR_ACCESS_VA, &mr));
		ASSERT_EQ(0, rdma_pair_reg_mr(&p, zero, len, IBV_ACCESS_REMOTE_READ |
						 VAMR_ACCESS_VA, &zmr));
		ASSERT_EQ(0, rdma_pair_reg_mr(&p, land, len, ACC, &lmr));
	}
	/* Part of the anonymous memory released. */
	ASSERT_EQ(0, madvise(anon + 12 * PAGE, 4 * PAGE, MADV_DONTNEED));

	/* The writer: odd ranges across pages, in all three. */
	op = (struct remote_op){ .target = getpid(), .n = 4, .seed = 0xc2 };
	op.iov[0] = (struct iovec){ anon + 100, 5 * PAGE };
	op.iov[1] = (struct iovec){ anon + 11 * PAGE + 7, 4 * PAGE + 9 };
	op.iov[2] = (struct iovec){ zero + PAGE - 3, 6 * PAGE };
	op.iov[3] = (struct iovec){ priv + 2 * PAGE + 1, 9 * PAGE };
	st = in_other_process(do_process_vm_writev, &op);
	ASSERT_EQ(0, st);
	/* The CPU sees the writer's bytes where it wrote. */
	EXPECT_EQ(PATTERN_OK, pattern_check(anon + 100, 5 * PAGE, 0xc2, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(anon + 11 * PAGE + 7, 4 * PAGE + 9, 0xc2, 5 * PAGE));
	EXPECT_EQ(PATTERN_OK, pattern_check(zero + PAGE - 3, 6 * PAGE, 0xc2, 9 * PAGE + 9));
	EXPECT_EQ(PATTERN_OK, pattern_check(priv + 2 * PAGE + 1, 9 * PAGE, 0xc2,
					    15 * PAGE + 9));
	/*
	 * The regions see exactly what the CPU sees: the anonymous one at once
	 * (an access meets the pins the writes made suspect and pins again),
	 * the others after the verify pass ran (it must swap the old pins for
	 * the new pages itself).
	 */
	EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, ha, anon, len, &err));
	usleep(50000);
	EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, hz, zero, len, &err));
	EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, hp, priv, len, &err));
	EXPECT_EQ(PATTERN_OK, region_check(fd, hz, zero + PAGE - 3, 6 * PAGE, 0xc2,
					   9 * PAGE + 9, &err));
	EXPECT_EQ(PATTERN_OK, region_check(fd, hp, priv + 2 * PAGE + 1, 9 * PAGE, 0xc2,
					   15 * PAGE + 9, &err));
	/* The file itself kept its bytes (the write went to private copies). */
	ASSERT_EQ((ssize_t)len, pread(mfd, tmp, len, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(tmp, len, 0xc0, 0));
	if (rdma) {
		ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_read_sync(&p, 0, land, lmr->lkey,
							      (uintptr_t)anon, mr->rkey, len, 0));
		EXPECT_EQ(0, memcmp(land, anon, len));
		ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_read_sync(&p, 0, land, lmr->lkey,
							      (uintptr_t)zero, zmr->rkey, len, 0));
		EXPECT_EQ(0, memcmp(land, zero, len));
		ibv_dereg_mr(mr);
		ibv_dereg_mr(zmr);
		ibv_dereg_mr(lmr);
		rdma_pair_close(&p);
	}
	EXPECT_EQ(0, vamr_unregister(fd, ha));
	EXPECT_EQ(0, vamr_unregister(fd, hz));
	EXPECT_EQ(0, vamr_unregister(fd, hp));
	EXPECT_GCOUNTERS_BACK(fd, &c0);
	munmap(priv, len);
	close(mfd);
	free(tmp);
	close(fd);
}

/*
 * process_madvise(MADV_COLLAPSE) from another process over 2 MiB of the
 * owner's registered memory that the region does not pin at that moment
 * (released with MADV_DONTNEED, written again by the CPU): the kernel may
 * replace the 512 pages by one huge page; the region then reads and writes
 * exactly what the CPU sees. Pinned, the range is not collapsed (pinned
 * pages refuse it) and nothing changes either.
 */
TEST(process_madvise_collapse_from_other_process)
{
	const size_t len = 2ul << 20;
	uint8_t *buf = map_aligned_2m(len), *tmp = malloc(len);
	struct vamr_counters c0;
	struct remote_op op;
	int fd, err, st, round;
	uint32_t h;

	ASSERT_NE(NULL, buf);
	ASSERT_EQ(0, madvise(buf, len, MADV_HUGEPAGE));
	fd = vamr_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, gcounters(fd, &c0));
	pattern_fill(buf, len, 0xe8, 0);
	ASSERT_EQ(0, vamr_register(fd, buf, len, RW, 1, &h));
	for (round = 0; round < 2; round++) {
		if (round == 1) {
			/* Not pinned now: released, then written again by the CPU. */
			ASSERT_EQ(0, madvise(buf, len, MADV_DONTNEED));
			ASSERT_EQ(0ull, vamr_wait_counter(fd, h, offsetof(struct vamr_counters,
									   pages_pinned),
							  0, 2000));
			pattern_fill(buf, len, 0xe9, 0);
		}
		op = (struct remote_op){ .target = getpid(), .n = 1, .advice = MADV_COLLAPSE };
		op.iov[0] = (struct iovec){ buf, len };
		st = in_other_process(do_process_madvise, &op);
		if (st == 11)
			SKIP(return, "process_madvise(MADV_COLLAPSE) unsupported");
		/* Collapsed (0) or refused (12: EAGAIN, EBUSY, ENOMEM...): the region agrees. */
		EXPECT_TRUE(st == 0 || st == 12);
		TH_LOG("round %d: collapse %s, AnonHugePages %ld kB", round,
		       st ? "refused" : "done", anon_huge_kb(buf));
		usleep(20000);
		EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, h, buf, len, &err));
		EXPECT_EQ(PATTERN_OK, pattern_check(buf, len, round ? 0xe9 : 0xe8, 0));
		pattern_fill(tmp, len, 0xea + round, 0);
		ASSERT_EQ(0, vamr_write(fd, h, buf, tmp, len));
		EXPECT_EQ(PATTERN_OK, pattern_check(buf, len, 0xea + round, 0));
		EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, h, buf, len, &err));
	}
	EXPECT_EQ(0, vamr_unregister(fd, h));
	EXPECT_GCOUNTERS_BACK(fd, &c0);
	munmap(buf, len);
	free(tmp);
	close(fd);
}

struct mem_write {
	pid_t target;
	uint8_t *addr;
	size_t len;
	uint64_t seed;
};

static int do_proc_mem_write(void *arg)
{
	struct mem_write *w = arg;
	uint8_t *b = malloc(w->len);
	char path[64];
	int fd;

	/* FOLL_FORCE through /proc/pid/mem needs the writer to be the tracer (PROC_MEM_FORCE_PTRACE). */
	if (ptrace(PTRACE_SEIZE, w->target, 0, 0))
		return 10;
	snprintf(path, sizeof(path), "/proc/%d/mem", w->target);
	fd = open(path, O_RDWR);
	if (fd < 0)
		return 10;
	pattern_fill(b, w->len, w->seed, 0);
	return pwrite(fd, b, w->len, (off_t)(uintptr_t)w->addr) == (ssize_t)w->len ? 0 : 11;
}

/*
 * A write through /proc/<pid>/mem (FOLL_FORCE, by a tracer) from another process into
 * read-only memory (mprotect(PROT_READ) after it was written) that a
 * read-only region and a read-only VA MR pin, and into read-only memory
 * never touched (the zero page): the region and a peer's READ then return
 * exactly the bytes the owner's CPU sees, which are the writer's.
 */
TEST(proc_mem_force_write_from_other_process)
{
	const size_t len = 8 * PAGE;
	uint8_t *ro = map_anon(len), *zero = map_anon(len), *land = map_anon(len);
	struct rdma_pair p = { 0 };
	struct ibv_mr *mr = NULL, *lmr = NULL;
	struct vamr_counters c0;
	struct mem_write w;
	int fd, err, st;
	uint32_t h, hz;
	bool rdma;

	ASSERT_NE(NULL, ro);
	ASSERT_NE(NULL, zero);
	ASSERT_NE(NULL, land);
	fd = vamr_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, gcounters(fd, &c0));
	pattern_fill(ro, len, 0xf5, 0);
	ASSERT_EQ(0, mprotect(ro, len, PROT_READ));
	ASSERT_EQ(0, mprotect(zero, len, PROT_READ));
	ASSERT_EQ(0, vamr_register(fd, ro, len, VAMR_ACCESS_READ, 1, &h));
	ASSERT_EQ(0, vamr_register(fd, zero, len, VAMR_ACCESS_READ, 2, &hz));
	rdma = rdma_pair_open(&p, NULL) == 0;
	if (rdma) {
		ASSERT_EQ(0, rdma_pair_reg_mr(&p, ro, len, IBV_ACCESS_REMOTE_READ | VAMR_ACCESS_VA,
					      &mr));
		ASSERT_EQ(0, rdma_pair_reg_mr(&p, land, len, ACC, &lmr));
	}
	w = (struct mem_write){ .target = getpid(), .addr = ro + 3 * PAGE + 11,
				.len = 2 * PAGE, .seed = 0xf6 };
	st = in_other_process(do_proc_mem_write, &w);
	if (st == 10)
		SKIP(return, "/proc/pid/mem not writable");
	ASSERT_EQ(0, st);
	w = (struct mem_write){ .target = getpid(), .addr = zero + PAGE - 5,
				.len = 3 * PAGE, .seed = 0xf7 };
	ASSERT_EQ(0, in_other_process(do_proc_mem_write, &w));
	EXPECT_EQ(PATTERN_OK, pattern_check(ro + 3 * PAGE + 11, 2 * PAGE, 0xf6, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(ro, 3 * PAGE + 11, 0xf5, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(zero + PAGE - 5, 3 * PAGE, 0xf7, 0));
	/* After the verify pass (it must swap the zero page's pins for the new pages). */
	usleep(50000);
	EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, h, ro, len, &err));
	EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, hz, zero, len, &err));
	EXPECT_EQ(PATTERN_OK, region_check(fd, hz, zero + PAGE - 5, 3 * PAGE, 0xf7, 0, &err));
	if (rdma) {
		ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_read_sync(&p, 0, land, lmr->lkey,
							      (uintptr_t)ro, mr->rkey, len, 0));
		EXPECT_EQ(0, memcmp(land, ro, len));
		ibv_dereg_mr(mr);
		ibv_dereg_mr(lmr);
		rdma_pair_close(&p);
	}
	EXPECT_EQ(0, vamr_unregister(fd, h));
	EXPECT_EQ(0, vamr_unregister(fd, hz));
	EXPECT_GCOUNTERS_BACK(fd, &c0);
	close(fd);
}

TEST_HARNESS_MAIN
