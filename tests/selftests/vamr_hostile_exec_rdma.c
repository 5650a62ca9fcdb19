// SPDX-License-Identifier: GPL-2.0
/*
 * vamr_hostile_exec_rdma: VA MRs and uverbs files across exec and fork. A
 * VA MR kept across execve() in the inherited uverbs file (with a peer's
 * QPs connected to it, idle or streaming RDMA during the exec), and a forked
 * child using its parent's uverbs file through the ioctl path. The old MR
 * is dead to its peer, the new image's MRs are its own, VmPin of both mms
 * and the module's counters come back.
 *
 * The exec tests run this program again as a helper (argv[1] ==
 * HELPER_ARG), which checks what the new image can and cannot do with the
 * descriptors it inherited and exits 0, or with the line of its first
 * failed check.
 */
#define _GNU_SOURCE
#include "kselftest_harness.h"
#include "hostile_util.h"

/* ---------------------------------------------------------------------- */
/* The exec'd helper                                                      */
/* ---------------------------------------------------------------------- */

/*
 * "verbs": argv cmd_fd pd_handle mr_handle ib_index lkey addr len to_fd from_fd.
 * The old image's VA MR (mr_handle, lkey) over [addr, addr + len) lives on in
 * the inherited uverbs file; its region's mm is gone.
 */
static int helper_verbs(char **argv)
{
	int cmd = harg(argv, 3), to = harg(argv, 10), from = harg(argv, 11), vfd, err;
	uint32_t pd = harg(argv, 4), old_mr = harg(argv, 5), ib_index = harg(argv, 6);
	uint32_t old_lkey = harg(argv, 7), h, lkey, rkey;
	uint8_t *old = (uint8_t *)(uintptr_t)harg(argv, 8);
	size_t len = harg(argv, 9);
	struct vamr_mr_query q = { .key = old_lkey, .ib_index = ib_index };
	uint64_t msg[3];
	uint8_t *mine, b;
	size_t n;

	(void)err;
	HCHECK(vamr_vmpin_kb() == 0);
	vfd = vamr_open();
	HCHECK(vfd >= 0);
	/* The old MR is not this process's. */
	HCHECK(vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q) == -ENOENT);
	/* A prefetch of it has no mm to pin from. */
	HCHECK(uv_advise(cmd, pd, old, PAGE, old_lkey) < 0);

	mine = helper_map_at(old, len);
	HCHECK(mine);
	pattern_fill(mine, len, 0xe5, 0);
	HCHECK(uv_reg_mr(cmd, pd, mine, len, ACC | VAMR_ACCESS_VA, &h, &lkey, &rkey) == 0);
	/* The new MR is of this mm, charged to it, found by MR_QUERY. */
	HCHECK(vamr_vmpin_kb() == (long)(len / 1024));
	q = (struct vamr_mr_query){ .key = lkey, .ib_index = ib_index };
	HCHECK(vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q) == 0);
	HCHECK(q.addr == (uintptr_t)mine && q.len == len);
	HCHECK(uv_advise(cmd, pd, mine, len, lkey) == 0);

	/* The peer reads and writes both MRs, then says so. */
	msg[0] = rkey;
	msg[1] = (uintptr_t)mine;
	msg[2] = len;
	HCHECK(write_all(to, msg, sizeof(msg)) == 0);
	HCHECK(read_all(from, &b, 1) == 0);
	n = pattern_check(mine, len, 0xe6, 0);
	if (n != PATTERN_OK)
		fprintf(stderr, "# helper: byte %zu of the new MR is not the peer's\n", n);
	HCHECK(n == PATTERN_OK);

	HCHECK(uv_dereg_mr(cmd, h) == 0);
	HCHECK(vamr_vmpin_kb() == 0);
	/*
	 * Deregistering the old MR from here tears down a region of a gone mm:
	 * its charge goes back to that mm, not to this one.
	 */
	HCHECK(uv_dereg_mr(cmd, old_mr) == 0);
	HCHECK(vamr_vmpin_kb() == 0);
	HCHECK(vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q) == -ENOENT);
	close(vfd);
	return 0;
}

/*
 * "idle": argv cmd_fd mr_handle to_fd from_fd. Says it runs, waits for the
 * peer to stop its traffic, then deregisters the old image's VA MR.
 */
static int helper_idle(char **argv)
{
	int cmd = harg(argv, 3), to = harg(argv, 5), from = harg(argv, 6);
	uint8_t b = 1;

	HCHECK(vamr_vmpin_kb() == 0);
	HCHECK(write_all(to, &b, 1) == 0);
	HCHECK(read_all(from, &b, 1) == 0);
	HCHECK(uv_dereg_mr(cmd, harg(argv, 4)) == 0);
	HCHECK(vamr_vmpin_kb() == 0);
	return 0;
}

static int helper_main(int argc, char **argv)
{
	if (argc > 2 && !strcmp(argv[2], "idle") && argc == 7)
		return helper_idle(argv);
	if (argc > 2 && !strcmp(argv[2], "verbs") && argc == 12)
		return helper_verbs(argv);
	fprintf(stderr, "# helper: bad arguments\n");
	return 2;
}

/* ---------------------------------------------------------------------- */
/* 1. exec with live VA MRs, fork                                         */
/* ---------------------------------------------------------------------- */

/*
 * The child's side of the exec tests with a peer: a VA MR of @len bytes of
 * fresh memory filled with the pattern of @seed, two RC QPs connected to the
 * peer's (QP numbers over the pipes @to_peer and @from_peer, then the MR's
 * rkey and address), then it waits for the peer's go and clears FD_CLOEXEC
 * of the uverbs file so that it survives the exec. Exits (3-8) on failure.
 */
static void child_export_va_mr(struct rdma_pair *p, struct ibv_mr **mr, uint8_t **buf,
			       size_t len, uint64_t seed, int to_peer, int from_peer)
{
	uint32_t q[2], peer[2];
	uint64_t out[2];
	uint8_t go;
	int i;

	*buf = map_anon(len);
	if (!*buf || rdma_pair_open(p, NULL))
		_exit(3);
	pattern_fill(*buf, len, seed, 0);
	if (rdma_pair_reg_mr(p, *buf, len, ACC | VAMR_ACCESS_VA, mr))
		_exit(4);
	q[0] = p->qp[0]->qp_num;
	q[1] = p->qp[1]->qp_num;
	if (write_all(to_peer, q, sizeof(q)) || read_all(from_peer, peer, sizeof(peer)))
		_exit(5);
	for (i = 0; i < 2; i++)
		if (xconnect(p, i, peer[i], 0x2000 + i, 0x1000 + i))
			_exit(6);
	out[0] = (*mr)->rkey;
	out[1] = (uintptr_t)*buf;
	if (write_all(to_peer, out, sizeof(out)) || read_all(from_peer, &go, 1))
		_exit(7);
	/* Keep the uverbs file across exec. */
	if (fcntl(p->ctx->cmd_fd, F_SETFD, 0))
		_exit(8);
}

/*
 * The peer's side of child_export_va_mr(): connects @t's two QPs to the
 * child's and reads the child's MR (@info: rkey, address). 0, or -1 when a
 * pipe or a QP transition failed.
 */
static int connect_to_child(struct rdma_pair *t, int from_child, int to_child, uint64_t info[2])
{
	uint32_t mine[2], theirs[2];
	int i;

	if (read_all(from_child, theirs, sizeof(theirs)))
		return -1;
	mine[0] = t->qp[0]->qp_num;
	mine[1] = t->qp[1]->qp_num;
	for (i = 0; i < 2; i++)
		if (xconnect(t, i, theirs[i], 0x1000 + i, 0x2000 + i))
			return -1;
	if (write_all(to_child, mine, sizeof(mine)) ||
	    read_all(from_child, info, 2 * sizeof(info[0])))
		return -1;
	return 0;
}

/*
 * The pipes of an exec test: the child to the test (p2t) and back (t2p)
 * before the exec, the exec'd helper to the test (h2t) and back (t2h) after.
 */
struct exec_pipes {
	int p2t[2], t2p[2], h2t[2], t2h[2];
};

static int exec_pipes_open(struct exec_pipes *x)
{
	return pipe(x->p2t) || pipe(x->t2p) || pipe(x->h2t) || pipe(x->t2h) ? -1 : 0;
}

/*
 * The test's side once the child of an exec test is forked: closes the
 * child's ends of @x and opens @t. 0, or rdma_pair_open()'s -errno; on
 * -ENODEV (the test skips) the child is killed and reaped.
 */
static int exec_peer_open(struct rdma_pair *t, struct exec_pipes *x, pid_t pid)
{
	int rc;

	close(x->p2t[1]);
	close(x->t2p[0]);
	close(x->h2t[1]);
	close(x->t2h[0]);
	rc = rdma_pair_open(t, NULL);
	if (rc == -ENODEV) {
		kill(pid, SIGKILL);
		wait_exit(pid);
	}
	return rc;
}

/*
 * An RDMA READ that must fail (the MR's region is dead): QP @side of @t
 * reads @len bytes at @addr under @rkey into @land (lkey @lkey), filled
 * with 0xa5 first. The completion's status in *@status; returns the offset
 * of the first byte of @land it changed, @len when it delivered nothing.
 */
static size_t read_delivers_nothing(struct rdma_pair *t, int side, uint8_t *land, uint32_t lkey,
				    uint64_t addr, uint32_t rkey, size_t len, int *status)
{
	size_t i;

	memset(land, 0xa5, len);
	*status = rdma_pair_read_sync(t, side, land, lkey, addr, rkey, len, 0);
	for (i = 0; i < len; i++)
		if (land[i] != 0xa5)
			break;
	return i;
}

/*
 * A VA MR across exec: the process keeps its uverbs file (FD_CLOEXEC
 * cleared) and execs. A peer in another process (this test) has RC QPs
 * connected to two QPs of that file. After the exec: the old MR answers
 * neither MR_QUERY nor a prefetch, a peer's RDMA READ of it completes in
 * error with nothing delivered, and so does a WRITE; the new image registers
 * a VA MR of its own memory at the same address through the inherited file
 * (the ioctl path: write() commands refuse a changed security context), which
 * the peer reads and writes with the new image's bytes; VmPin of the new mm
 * is exact, and the module-wide counts come back.
 */
TEST(exec_with_live_va_mr)
{
	const size_t len = 8 * PAGE;
	struct rdma_pair t = { 0 };
	struct vamr_counters c0;
	struct ibv_mr *land_mr = NULL;
	struct exec_pipes pipes;
	int vfd, rc, st;
	uint64_t info[2], msg[3];
	uint8_t *land, go = 1;
	pid_t pid;

	vfd = vamr_open();
	ASSERT_LE(0, vfd);
	ASSERT_EQ(0, gcounters(vfd, &c0));
	ASSERT_EQ(0, exec_pipes_open(&pipes));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct rdma_pair p = { 0 };
		struct ibv_mr *mr;
		uint8_t *buf;
		char a[9][32];

		child_export_va_mr(&p, &mr, &buf, len, 0xe4, pipes.p2t[1], pipes.t2p[0]);
		snprintf(a[0], 32, "%d", p.ctx->cmd_fd);
		snprintf(a[1], 32, "%u", p.pd->handle);
		snprintf(a[2], 32, "%u", mr->handle);
		snprintf(a[3], 32, "%d", ibv_get_device_index(p.ctx->device));
		snprintf(a[4], 32, "%u", mr->lkey);
		snprintf(a[5], 32, "%#lx", (unsigned long)(uintptr_t)buf);
		snprintf(a[6], 32, "%zu", len);
		snprintf(a[7], 32, "%d", pipes.h2t[1]);
		snprintf(a[8], 32, "%d", pipes.t2h[0]);
		execl("/proc/self/exe", "vamr_hostile_exec_rdma", HELPER_ARG, "verbs", a[0], a[1], a[2], a[3],
		      a[4], a[5], a[6], a[7], a[8], (char *)NULL);
		_exit(9);
	}
	rc = exec_peer_open(&t, &pipes, pid);
	if (rc == -ENODEV)
		SKIP(return, "no RDMA device");
	ASSERT_EQ(0, rc);
	land = map_anon(len);
	ASSERT_NE(NULL, land);
	ASSERT_EQ(0, rdma_pair_reg_mr(&t, land, len, ACC, &land_mr));
	ASSERT_EQ(0, connect_to_child(&t, pipes.p2t[0], pipes.t2p[1], info));

	/* Before the exec: the old MR gives the old image's bytes. */
	ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_read_sync(&t, 0, land, land_mr->lkey, info[1],
						      (uint32_t)info[0], len, 0));
	ASSERT_EQ(PATTERN_OK, pattern_check(land, len, 0xe4, 0));
	ASSERT_EQ(0, write_all(pipes.t2p[1], &go, 1));
	/* The helper registered its MR: the exec is done. */
	ASSERT_EQ(0, read_all(pipes.h2t[0], msg, sizeof(msg)));

	/* The old MR: an error completion, nothing delivered. */
	EXPECT_EQ(len, read_delivers_nothing(&t, 0, land, land_mr->lkey, info[1], (uint32_t)info[0],
					     len, &rc));
	EXPECT_NE(IBV_WC_SUCCESS, rc);
	/* The new MR, at the same address: the new image's bytes, and a write it sees. */
	ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_read_sync(&t, 1, land, land_mr->lkey, msg[1],
						      (uint32_t)msg[0], len, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(land, len, 0xe5, 0));
	pattern_fill(land, len, 0xe6, 0);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_write_sync(&t, 1, land, land_mr->lkey, msg[1],
						       (uint32_t)msg[0], len, 0));
	/* Last (the responder QP goes to error): a WRITE to the old MR. */
	rc = rdma_pair_write_sync(&t, 1, land, land_mr->lkey, info[1], (uint32_t)info[0], len, 0);
	EXPECT_NE(IBV_WC_SUCCESS, rc);
	ASSERT_EQ(0, write_all(pipes.t2h[1], &go, 1));
	st = wait_exit(pid);
	EXPECT_EQ(0, st);
	ibv_dereg_mr(land_mr);
	rdma_pair_close(&t);
	EXPECT_GCOUNTERS_BACK(vfd, &c0);
	close(vfd);
}

/*
 * exec while a peer streams RDMA WRITEs (16 in flight) and READs at the
 * process's VA MR, without pausing for the exec: the old mm goes away under
 * the responder (which may be the one to drop the last reference to it). Every READ that completes
 * successfully carries the old image's bytes, never zeros or freed memory;
 * then both streams end in error completions; the old MR deregisters from
 * the new image; the module-wide counts come back.
 */
TEST(exec_during_rdma_traffic)
{
	const size_t len = 64 * PAGE, chunk = 16 * PAGE;
	struct rdma_pair t = { 0 };
	struct vamr_counters c0;
	struct ibv_mr *land_mr = NULL, *src_mr = NULL;
	struct exec_pipes pipes;
	int vfd, rc, st, inflight = 0;
	int reads_ok = 0, reads_after = 0, writes_ok = 0;
	bool rerr = false, werr = false, execd = false;
	uint8_t *land, *src, go = 1;
	uint64_t info[2], n = 0, nr = 0;
	double t_exec = 0;
	pid_t pid;

	vfd = vamr_open();
	ASSERT_LE(0, vfd);
	ASSERT_EQ(0, gcounters(vfd, &c0));
	ASSERT_EQ(0, exec_pipes_open(&pipes));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct rdma_pair p = { 0 };
		struct ibv_mr *mr;
		uint8_t *buf;
		char a[4][32];

		child_export_va_mr(&p, &mr, &buf, len, 0xd1, pipes.p2t[1], pipes.t2p[0]);
		snprintf(a[0], 32, "%d", p.ctx->cmd_fd);
		snprintf(a[1], 32, "%u", mr->handle);
		snprintf(a[2], 32, "%d", pipes.h2t[1]);
		snprintf(a[3], 32, "%d", pipes.t2h[0]);
		execl("/proc/self/exe", "vamr_hostile_exec_rdma", HELPER_ARG, "idle", a[0], a[1], a[2], a[3],
		      (char *)NULL);
		_exit(9);
	}
	rc = exec_peer_open(&t, &pipes, pid);
	if (rc == -ENODEV)
		SKIP(return, "no RDMA device");
	ASSERT_EQ(0, rc);
	land = map_anon(len);
	src = map_anon(chunk);
	ASSERT_NE(NULL, land);
	ASSERT_NE(NULL, src);
	pattern_fill(src, chunk, 0xd1, 0);
	ASSERT_EQ(0, rdma_pair_reg_mr(&t, land, len, ACC, &land_mr));
	ASSERT_EQ(0, rdma_pair_reg_mr(&t, src, chunk, ACC, &src_mr));
	ASSERT_EQ(0, connect_to_child(&t, pipes.p2t[0], pipes.t2p[1], info));

	/*
	 * WRITEs of the old image's own bytes (chunk-sized, at rotating offsets)
	 * and READs of a page, until both ended in error after the exec.
	 */
	while (!(rerr && werr)) {
		struct ibv_wc wc;
		size_t bad, x;

		while (!werr && inflight < 16) {
			ASSERT_EQ(0, rdma_pair_post_write(&t, 0, n, src, src_mr->lkey,
							  info[1] + (n % (len / chunk)) * chunk,
							  (uint32_t)info[0], chunk));
			n++;
			inflight++;
		}
		if (!rerr) {
			size_t off = (nr++ % (len / PAGE)) * PAGE;

			/* One page at a time: many READs around the exec. */
			memset(land + off, 0, PAGE);
			rc = rdma_pair_read_sync(&t, 1, land + off, land_mr->lkey, info[1] + off,
						 (uint32_t)info[0], PAGE, 10000);
			if (rc == IBV_WC_SUCCESS) {
				reads_ok++;
				reads_after += execd;
				/*
				 * Each byte: the old image's, or a WRITE's (pattern offset 0
				 * of its chunk; WRITEs and READs on two QPs interleave).
				 */
				for (bad = 0, x = off; x < off + PAGE; x++)
					bad += land[x] != pattern_byte(0xd1, x) &&
					       land[x] != pattern_byte(0xd1, x % chunk);
				EXPECT_EQ((size_t)0, bad);
			} else {
				rerr = true;
			}
		}
		while (inflight) {
			rc = rdma_pair_wait_send(&t, 0, 1, &wc);
			if (rc == -ETIMEDOUT)
				break;
			inflight--;
			if (rc == IBV_WC_SUCCESS)
				writes_ok++;
			else
				werr = true;
		}
		if (werr && inflight) {
			while (inflight && rdma_pair_wait_send(&t, 0, 2000, &wc) != -ETIMEDOUT)
				inflight--;
			inflight = 0;
		}
		if (!execd && reads_ok >= 32) {
			/* Exec now, and go on streaming while it happens. */
			ASSERT_EQ(0, write_all(pipes.t2p[1], &go, 1));
			execd = true;
			t_exec = mono_s();
		}
		/* Bounded: the streams must end within 20 s of the exec. */
		if (execd && mono_s() - t_exec > 20)
			break;
	}
	EXPECT_TRUE(execd);
	EXPECT_TRUE(rerr);
	EXPECT_TRUE(werr);
	/* The new image runs. */
	ASSERT_EQ(0, read_all(pipes.h2t[0], &go, 1));
	TH_LOG("reads ok %d (%d after the exec), writes ok %d", reads_ok, reads_after, writes_ok);
	ASSERT_EQ(0, write_all(pipes.t2h[1], &go, 1));
	st = wait_exit(pid);
	EXPECT_EQ(0, st);
	ibv_dereg_mr(land_mr);
	ibv_dereg_mr(src_mr);
	rdma_pair_close(&t);
	EXPECT_GCOUNTERS_BACK(vfd, &c0);
	close(vfd);
}

/*
 * A forked child (its own mm) shares the parent's uverbs file. Its write()
 * commands are refused (another security context), but the ioctl path is
 * not: the child registers a VA MR of its own memory in the parent's PD
 * (charged to the child's mm, not the parent's; MR_QUERY finds it for the
 * child only; a peer's READ through the parent's QP gets the child's bytes,
 * and an error once the child is gone), and it deregisters the parent's VA
 * MR, whose charge then goes back to the parent's mm.
 */
TEST(forked_child_uses_parents_uverbs_file)
{
	const size_t len = 8 * PAGE;
	uint8_t *buf = map_anon(len), *land = map_anon(len);
	struct rdma_pair p = { 0 };
	struct ibv_mr *mr, *lmr;
	struct vamr_counters c0, c;
	struct vamr_mr_query q;
	int c2p[2], p2c[2], fd, rc, st;
	uint64_t msg[4];
	long pin0;
	pid_t pid;
	uint8_t b = 1;

	ASSERT_NE(NULL, buf);
	ASSERT_NE(NULL, land);
	rc = rdma_pair_open(&p, NULL);
	if (rc == -ENODEV)
		SKIP(return, "no RDMA device");
	ASSERT_EQ(0, rc);
	fd = vamr_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, gcounters(fd, &c0));
	pin0 = vamr_vmpin_kb();
	pattern_fill(buf, len, 0x31, 0);
	ASSERT_EQ(0, rdma_pair_reg_mr(&p, buf, len, ACC | VAMR_ACCESS_VA, &mr));
	ASSERT_EQ(0, rdma_pair_reg_mr(&p, land, len, ACC, &lmr));
	/* Both charged: the VA MR by vamr, the normal MR by ib_umem_get(). */
	ASSERT_EQ(pin0 + (long)(2 * len / 1024), vamr_vmpin_kb());
	ASSERT_EQ(0, pipe(c2p));
	ASSERT_EQ(0, pipe(p2c));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		uint8_t *mine = map_anon(len);
		uint32_t h, lkey, rkey;
		int cfd = vamr_open();

		if (!mine || cfd < 0 || vamr_vmpin_kb() != 0)
			_exit(3);
		pattern_fill(mine, len, 0x32, 0);
		if (uv_reg_mr(p.ctx->cmd_fd, p.pd->handle, mine, len, ACC | VAMR_ACCESS_VA, &h,
			      &lkey, &rkey))
			_exit(4);
		if (vamr_vmpin_kb() != (long)(len / 1024))
			_exit(5);
		q = (struct vamr_mr_query){ .key = lkey,
					    .ib_index = ibv_get_device_index(p.ctx->device) };
		if (vamr_ioctl(cfd, VAMR_IOC_MR_QUERY, &q) || q.addr != (uintptr_t)mine)
			_exit(6);
		/* The parent's VA MR is not this mm's: no answer; but it can be destroyed. */
		q = vamr_mr_query_of(mr);
		if (vamr_ioctl(cfd, VAMR_IOC_MR_QUERY, &q) != -ENOENT)
			_exit(7);
		if (uv_dereg_mr(p.ctx->cmd_fd, mr->handle))
			_exit(8);
		if (vamr_vmpin_kb() != (long)(len / 1024))
			_exit(9);
		msg[0] = h;
		msg[1] = lkey;
		msg[2] = rkey;
		msg[3] = (uintptr_t)mine;
		if (write_all(c2p[1], msg, sizeof(msg)) || read_all(p2c[0], &b, 1))
			_exit(10);
		_exit(0);
	}
	close(c2p[1]);
	close(p2c[0]);
	ASSERT_EQ(0, read_all(c2p[0], msg, sizeof(msg)));
	/* The parent's VA MR is gone, its charge back with the parent's mm. */
	EXPECT_EQ(pin0 + (long)(len / 1024), vamr_vmpin_kb());
	q = vamr_mr_query_of(mr);
	EXPECT_EQ(-ENOENT, vamr_ioctl(fd, VAMR_IOC_MR_QUERY, &q));
	/* The child's MR: not the parent's memory, no answer here, the child's bytes. */
	q = (struct vamr_mr_query){ .key = (uint32_t)msg[1],
				    .ib_index = ibv_get_device_index(p.ctx->device) };
	EXPECT_EQ(-ENOENT, vamr_ioctl(fd, VAMR_IOC_MR_QUERY, &q));
	ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_read_sync(&p, 0, land, lmr->lkey, msg[3],
						      (uint32_t)msg[2], len, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(land, len, 0x32, 0));
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.regions + 1, c.regions);
	EXPECT_EQ(c0.pages_pinned + len / PAGE, c.pages_pinned);
	/* The child goes: its MR's region is dead, a READ fails, nothing delivered. */
	ASSERT_EQ(0, write_all(p2c[1], &b, 1));
	st = wait_exit(pid);
	ASSERT_EQ(0, st);
	EXPECT_EQ(len, read_delivers_nothing(&p, 0, land, lmr->lkey, msg[3], (uint32_t)msg[2], len,
					     &rc));
	EXPECT_NE(IBV_WC_SUCCESS, rc);
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.pages_pinned, c.pages_pinned);
	/* The parent deregisters the child's MR: a region of a gone mm. */
	EXPECT_EQ(0, uv_dereg_mr(p.ctx->cmd_fd, (uint32_t)msg[0]));
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.regions, c.regions);
	EXPECT_EQ(pin0 + (long)(len / 1024), vamr_vmpin_kb());
	ibv_dereg_mr(lmr);
	EXPECT_EQ(pin0, vamr_vmpin_kb());
	/* mr was destroyed by the child: its libibverbs struct is left as it is. */
	rdma_pair_close(&p);
	close(fd);
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], HELPER_ARG))
		return helper_main(argc, argv);
	return test_harness_run(argc, argv);
}
