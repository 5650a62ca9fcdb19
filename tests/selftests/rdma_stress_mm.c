// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_stress_mm: VA MRs and /dev/vamr files in another mm and under memory
 * pressure: descriptors passed to another process over SCM_RIGHTS, and
 * compaction under a memory hog while VA MRs are pinned and used.
 *
 * Each case runs its scenario in forked children and then checks that the
 * global counters, VmPin and the kernel log are back to where they were
 * (stress_util.h).
 */
#define _GNU_SOURCE
#include "kselftest_harness.h"
#include "stress_util.h"

/* ---- 3. file descriptors passed over SCM_RIGHTS ------------------------- */

struct scm_info {
	uint64_t addr[2];
	uint64_t len[2];
	uint64_t cookie[2];
	uint32_t handle[2];
};

#define SCM_PAGES 16

static int send_fds(int sock, int fd1, int fd2, const void *data, size_t len)
{
	char cbuf[CMSG_SPACE(2 * sizeof(int))];
	struct iovec iov = { .iov_base = (void *)data, .iov_len = len };
	struct msghdr mh = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = cbuf, .msg_controllen = sizeof(cbuf),
	};
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	int fds[2] = { fd1, fd2 };

	memset(cbuf, 0, sizeof(cbuf));
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(c), fds, sizeof(fds));
	return sendmsg(sock, &mh, 0) == (ssize_t)len ? 0 : -1;
}

static int recv_fds(int sock, int *fd1, int *fd2, void *data, size_t len)
{
	char cbuf[CMSG_SPACE(2 * sizeof(int))];
	struct iovec iov = { .iov_base = data, .iov_len = len };
	struct msghdr mh = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = cbuf, .msg_controllen = sizeof(cbuf),
	};
	struct cmsghdr *c;
	int fds[2];

	if (recvmsg(sock, &mh, MSG_CMSG_CLOEXEC) != (ssize_t)len)
		return -1;
	c = CMSG_FIRSTHDR(&mh);
	if (!c || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(fds)))
		return -1;
	memcpy(fds, CMSG_DATA(c), sizeof(fds));
	*fd1 = fds[0];
	*fd2 = fds[1];
	return 0;
}

/* The sender: two regions and an events fd, sent away; exits when told to. */
static void scm_sender(struct report *rep, int sock)
{
	struct vamr_events_open eo = { .flags = VAMR_EVENTS_NONBLOCK };
	struct scm_info info;
	uint8_t *mem = map_anon(2 * SCM_PAGES * PAGE);
	int vfd = vamr_open(), i, ret;
	char c;

	rep->vmpin_start = vamr_vmpin_kb();
	CHILD_REQUIRE(rep, 1, mem && vfd >= 0, "mmap/open");
	pattern_fill(mem, 2 * SCM_PAGES * PAGE, 0x31, 0);
	for (i = 0; i < 2; i++) {
		info.addr[i] = (uintptr_t)mem + i * SCM_PAGES * PAGE;
		info.len[i] = SCM_PAGES * PAGE;
		info.cookie[i] = 0x5c5c0000 + i;
		ret = vamr_register(vfd, (void *)(uintptr_t)info.addr[i], info.len[i], RW,
				    info.cookie[i], &info.handle[i]);
		CHILD_REQUIRE(rep, 2, !ret, "register: %s", strerror(-ret));
	}
	ret = vamr_ioctl(vfd, VAMR_IOC_EVENTS_OPEN, &eo);
	CHILD_REQUIRE(rep, 3, !ret, "EVENTS_OPEN: %s", strerror(-ret));
	rep->vmpin_live = vamr_vmpin_kb();
	CHILD_REQUIRE(rep, 4, rep->vmpin_live == rep->vmpin_start + 2 * SCM_PAGES * 4,
		      "VmPin %ld kB with two regions", rep->vmpin_live);
	CHILD_REQUIRE(rep, 5, !send_fds(sock, vfd, eo.fd, &info, sizeof(info)), "sendmsg: %s",
		      strerror(errno));
	/* Wait until the receiver has tried its ioctls; then exit, everything live. */
	CHILD_REQUIRE(rep, 6, read(sock, &c, 1) == 1, "read");
	rep->stage = ST_DONE;
	_exit(0);
}

/* The receiver of the sender's files. */
static void scm_receiver(struct report *rep, int sock)
{
	struct vamr_events_open eo = { .flags = VAMR_EVENTS_NONBLOCK };
	struct vamr_stats st;
	struct vamr_event ev[8];
	struct scm_info info;
	uint8_t *own = map_anon(PAGE), buf[64];
	uint32_t h = 0;
	uint64_t res;
	int vfd, efd, ret, i, n, release[2] = { 0, 0 };
	struct vamr_prefetch pf;

	rep->vmpin_start = vamr_vmpin_kb();
	CHILD_REQUIRE(rep, 1, own, "mmap");
	CHILD_REQUIRE(rep, 2, !recv_fds(sock, &vfd, &efd, &info, sizeof(info)), "recvmsg");
	memset(own, 1, PAGE);

	/* Everything that creates, uses or shows a region: EPERM. */
	ret = vamr_register(vfd, own, PAGE, RW, 1, &h);
	CHILD_CHECK(rep, 10, ret == -EPERM, "REGISTER of own memory: %d", ret);
	ret = vamr_register(vfd, (void *)(uintptr_t)info.addr[0], PAGE, RW, 1, &h);
	CHILD_CHECK(rep, 11, ret == -EPERM, "REGISTER at the sender's address: %d", ret);
	ret = vamr_read(vfd, info.handle[0], (void *)(uintptr_t)info.addr[0], buf, sizeof(buf));
	CHILD_CHECK(rep, 12, ret == -EPERM, "ACCESS read: %d", ret);
	ret = vamr_write(vfd, info.handle[0], (void *)(uintptr_t)info.addr[0], buf, sizeof(buf));
	CHILD_CHECK(rep, 13, ret == -EPERM, "ACCESS write: %d", ret);
	ret = vamr_atomic(vfd, info.handle[1], (void *)(uintptr_t)info.addr[1],
			  VAMR_ATOMIC_FETCH_ADD, 1, 0, &res);
	CHILD_CHECK(rep, 14, ret == -EPERM, "ATOMIC: %d", ret);
	pf = (struct vamr_prefetch){ .addr = info.addr[1], .len = PAGE, .handle = info.handle[1] };
	ret = vamr_ioctl(vfd, VAMR_IOC_PREFETCH, &pf);
	CHILD_CHECK(rep, 15, ret == -EPERM, "PREFETCH: %d", ret);
	ret = vamr_unregister(vfd, info.handle[0]);
	CHILD_CHECK(rep, 16, ret == -EPERM, "UNREGISTER: %d", ret);
	ret = vamr_stats(vfd, info.handle[0], &st);
	CHILD_CHECK(rep, 17, ret == -EPERM,
		      "STATS of the sender's region: %d (pages_pinned %llu generation %llu)", ret,
		      (unsigned long long)st.counters.pages_pinned,
		      (unsigned long long)st.generation);
	ret = vamr_ioctl(vfd, VAMR_IOC_EVENTS_OPEN, &eo);
	if (!ret)
		close(eo.fd);
	CHILD_CHECK(rep, 18, ret == -EPERM, "EVENTS_OPEN on the sender's file: %d", ret);
	/* Even module-wide counters: not through another process's file... */
	ret = vamr_stats(vfd, VAMR_STATS_GLOBAL, &st);
	CHILD_CHECK(rep, 19, ret == -EPERM, "global STATS on the sender's file: %d", ret);
	/* ...but through its own. */
	{
		int own = vamr_open();

		ret = own < 0 ? own : vamr_stats(own, VAMR_STATS_GLOBAL, &st);
		if (own >= 0)
			close(own);
		CHILD_CHECK(rep, 19, !ret, "global STATS on its own file: %d", ret);
	}
	CHILD_CHECK(rep, 20, vamr_vmpin_kb() == rep->vmpin_start, "VmPin of the receiver");

	/* Let the sender exit while this process holds its files. */
	CHILD_REQUIRE(rep, 21, write(sock, "x", 1) == 1, "write");
	rep->stage = ST_TRAFFIC;
	while (!rep->go)	/* the parent reaped the sender */
		sleep_ms(1);

	/* The sender's address space went away: one RELEASE record per region. */
	for (i = 0; i < 100 && !(release[0] && release[1]); i++) {
		n = read(efd, ev, sizeof(ev));
		if (n < 0 && errno == EAGAIN) {
			sleep_ms(10);
			continue;
		}
		CHILD_REQUIRE(rep, 23, n > 0 && n % sizeof(ev[0]) == 0, "read events: %d (%s)",
			      n, strerror(errno));
		for (n /= sizeof(ev[0]); n-- > 0;) {
			rep->events++;
			if (ev[n].kind == VAMR_EVENT_RELEASE && ev[n].handle == info.handle[0] &&
			    ev[n].cookie == info.cookie[0])
				release[0] = 1;
			if (ev[n].kind == VAMR_EVENT_RELEASE && ev[n].handle == info.handle[1] &&
			    ev[n].cookie == info.cookie[1])
				release[1] = 1;
		}
	}
	CHILD_CHECK(rep, 24, release[0] && release[1], "RELEASE records: %d %d (%lu records)",
		      release[0], release[1], rep->events);
	/* Still another mm: still EPERM. */
	ret = vamr_register(vfd, own, PAGE, RW, 1, &h);
	CHILD_CHECK(rep, 25, ret == -EPERM, "REGISTER after the sender exited: %d", ret);
	ret = vamr_read(vfd, info.handle[1], (void *)(uintptr_t)info.addr[1], buf, sizeof(buf));
	CHILD_CHECK(rep, 26, ret == -EPERM, "ACCESS after the sender exited: %d", ret);
	rep->stage = ST_DEREG;
	while (!rep->stop)	/* the parent looked at the counters */
		sleep_ms(1);
	close(vfd);
	close(efd);
	rep->vmpin_end = vamr_vmpin_kb();
	CHILD_REQUIRE(rep, 27, rep->vmpin_end == rep->vmpin_start, "VmPin of the receiver");
	rep->stage = ST_DONE;
	_exit(0);
}

/*
 * A /dev/vamr fd and its events fd passed to another process: every ioctl
 * on a region fails there with EPERM and nothing of the sender's regions
 * shows (STATS of its handles and EVENTS_OPEN on its file included);
 * the sender exits while the receiver holds the files (its pins go at once,
 * the receiver reads the RELEASE records); the receiver closes them; nothing
 * leaks.
 */
TEST(scm_rights_other_mm)
{
	struct report *srep = report_new(), *rrep = report_new();
	struct baseline b;
	struct vamr_stats s;
	int fd = vamr_open(), kfd = kmsg_open(), sv[2], status;
	pid_t sender, receiver;

	ASSERT_NE(NULL, srep);
	ASSERT_NE(NULL, rrep);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, take_baseline(fd, &b));
	ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv));
	sender = fork();
	ASSERT_LE(0, sender);
	if (!sender) {
		close(sv[1]);
		scm_sender(srep, sv[0]);
	}
	receiver = fork();
	ASSERT_LE(0, receiver);
	if (!receiver) {
		close(sv[0]);
		scm_receiver(rrep, sv[1]);
	}
	close(sv[0]);
	close(sv[1]);

	ASSERT_EQ(0, wait_child(sender, &status, 15000)) {
		kill(sender, SIGKILL);
		kill(receiver, SIGKILL);
		TH_LOG("receiver at step %d: %s", rrep->step, rrep->msg);
	}
	EXPECT_CHILD_OK(srep);
	EXPECT_EQ(0, status);
	EXPECT_EQ(2 * SCM_PAGES * 4, srep->vmpin_live - srep->vmpin_start);
	rrep->go = 1;
	if (wait_stage(rrep, receiver, ST_DEREG, 10000) == 0) {
		/*
		 * The sender's mm is gone: nothing of it stays pinned although
		 * the receiver still holds the files (the regions themselves
		 * may live on until the files are closed).
		 */
		int64_t end = now_ns() + BASELINE_WAIT_MS * 1000000LL;

		do {
			ASSERT_EQ(0, vamr_stats(fd, VAMR_STATS_GLOBAL, &s));
			if (s.counters.pages_pinned == b.pinned)
				break;
			sleep_ms(5);
		} while (now_ns() < end);
		EXPECT_EQ(b.pinned, s.counters.pages_pinned)
			TH_LOG("pages still pinned after the sender exited");
		EXPECT_GE(b.regions + 2, s.counters.regions);
		TH_LOG("with the receiver holding the files: %llu regions (baseline %llu)",
		       (unsigned long long)s.counters.regions, (unsigned long long)b.regions);
	}
	rrep->stop = 1;
	ASSERT_EQ(0, wait_child(receiver, &status, 15000)) {
		kill(receiver, SIGKILL);
		TH_LOG("receiver stuck at stage %s", stage_name[rrep->stage]);
	}
	EXPECT_CHILD_OK(rrep);
	EXPECT_EQ(0, status);
	EXPECT_BASELINE(fd, &b, "after both processes");
	EXPECT_KMSG_CLEAN(kfd);
	close(fd);
}

/* ---- 5. compaction under a memory hog ----------------------------------- */

#define CMP_PAGES 1024
#define CMP_WIN 16		/* pages per round */
#define CMP_ROUNDS 40
#define HOG_LEN (96 * MIB)

/* Allocate, fragment (free every other page) and free memory, until killed. */
static void hog(void)
{
	for (;;) {
		uint8_t *m = map_anon(HOG_LEN);
		size_t off;

		if (!m) {
			sleep_ms(10);
			continue;
		}
		for (off = 0; off < HOG_LEN; off += PAGE)
			m[off] = (uint8_t)off;
		for (off = 0; off < HOG_LEN; off += 2 * PAGE)
			madvise(m + off, PAGE, MADV_DONTNEED);
		sleep_ms(20);
		munmap(m, HOG_LEN);
	}
}

/*
 * The VA MR is registered over a PROT_NONE reservation (nothing pinnable),
 * which is then replaced by fresh memory with MAP_FIXED (an UNMAP
 * invalidation: no eager re-pin) and filled by the CPU: its pages are not
 * pinned (vamr pins on demand), so compaction may migrate them. (Registered
 * over untouched memory, GUP would fault in and pin every page, and pinned
 * pages are never migrated.) Each round the CPU rewrites a
 * window the RDMA side has not touched yet, an RDMA READ (pinning it on
 * demand, while compaction runs) must return exactly those bytes, and an
 * RDMA WRITE into it must be what the CPU then sees. At the end a READ of
 * the whole range must equal the CPU's view.
 */
static void compaction_child(struct report *rep)
{
	const size_t len = CMP_PAGES * PAGE, win = CMP_WIN * PAGE;
	struct ibv_mr *va_mr, *src_mr, *dst_mr;
	struct vamr_mr_query q0 = { 0 }, q1 = { 0 };
	uint8_t *va, *src, *dst, *ballast;
	struct rdma_pair p;
	int64_t end = now_ns() + 8 * 1000000000LL;
	int ret, r, vfd = vamr_open();
	size_t o;

	CHILD_REQUIRE(rep, 15, vfd >= 0, "open /dev/vamr");
	ret = rdma_pair_open(&p, NULL);
	CHILD_REQUIRE(rep, 1, !ret, "rdma_pair_open: %s", strerror(-ret));
	va = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	src = map_anon(win);
	dst = map_anon(win);
	CHILD_REQUIRE(rep, 2, va != MAP_FAILED && src && dst, "mmap");
	CHILD_REQUIRE(rep, 3, !rdma_pair_reg_mr(&p, src, win, ACC_REMOTE, &src_mr) &&
		      !rdma_pair_reg_mr(&p, dst, win, ACC_REMOTE, &dst_mr), "reg normal MRs");
	ret = rdma_pair_reg_mr(&p, va, len, ACC_VA, &va_mr);
	CHILD_REQUIRE(rep, 4, !ret, "reg VA MR: %s", strerror(-ret));
	CHILD_REQUIRE(rep, 16, !remap_fixed(va, len), "mmap MAP_FIXED");
	/*
	 * Fault the pages in between ballast pages that are freed again: the
	 * MR's pages end up alone in sparse pageblocks, which is what
	 * compaction empties.
	 */
	ballast = map_anon(len);
	CHILD_REQUIRE(rep, 21, ballast, "mmap");
	for (o = 0; o < len; o += PAGE) {
		ballast[o] = 1;
		va[o] = 1;
	}
	madvise(ballast, len, MADV_DONTNEED);
	pattern_fill(va, len, 0x50, 0);
	q0.key = q1.key = va_mr->lkey;
	ret = vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q0);
	CHILD_REQUIRE(rep, 17, !ret, "MR_QUERY: %d", ret);
	/* (An eager re-pin after, say, a NUMA hinting fault may have pinned a few.) */
	rep->pinned_before = q0.counters.pages_pinned;
	CHILD_REQUIRE(rep, 18, q0.counters.pages_pinned <= CMP_PAGES / 4,
		      "%llu pages pinned before any RDMA access",
		      (unsigned long long)q0.counters.pages_pinned);
	rep->stage = ST_TRAFFIC;
	for (r = 0; r < CMP_ROUNDS && now_ns() < end; r++) {
		/* 37 is odd: 64 different windows before one comes back. */
		uint8_t *w = va + (size_t)(r * 37 % (CMP_PAGES / CMP_WIN)) * win;
		size_t off = (size_t)r * 131 % (win / 2), n = win / 2 - r * 97 % PAGE;
		size_t bad;

		pattern_fill(w, win, 0x1000 + r, 0);
		/* READ: exactly what the CPU sees. */
		memset(dst, 0, win);
		ret = rdma_pair_read_sync(&p, 0, dst, dst_mr->lkey, (uintptr_t)w, va_mr->rkey,
					  win, 0);
		CHILD_REQUIRE(rep, 5, ret == IBV_WC_SUCCESS, "round %d: READ: %d", r, ret);
		bad = pattern_check(dst, win, 0x1000 + r, 0);
		CHILD_REQUIRE(rep, 6, bad == PATTERN_OK && !memcmp(dst, w, win),
			      "round %d: READ returned other bytes than the CPU sees at offset %zu",
			      r, bad);
		/* WRITE at an odd offset: the CPU sees it, the rest is untouched. */
		pattern_fill(src, n, 0x2000 + r, 0);
		ret = rdma_pair_write_sync(&p, 1, src, src_mr->lkey, (uintptr_t)w + off,
					   va_mr->rkey, n, 0);
		CHILD_REQUIRE(rep, 7, ret == IBV_WC_SUCCESS, "round %d: WRITE: %d", r, ret);
		bad = pattern_check(w + off, n, 0x2000 + r, 0);
		CHILD_REQUIRE(rep, 8, bad == PATTERN_OK, "round %d: WRITE not seen by the CPU at "
			      "offset %zu", r, off + bad);
		CHILD_REQUIRE(rep, 9, pattern_check(w, off, 0x1000 + r, 0) == PATTERN_OK &&
			      pattern_check(w + off + n, win - off - n, 0x1000 + r,
					    off + n) == PATTERN_OK,
			      "round %d: bytes outside the WRITE changed", r);
		rep->rounds++;
	}
	CHILD_REQUIRE(rep, 10, rep->rounds >= 5, "only %lu rounds in 8 s", rep->rounds);
	/* The whole range, the windows never read included. */
	for (o = 0; o < len; o += win) {
		memset(dst, 0, win);
		ret = rdma_pair_read_sync(&p, 0, dst, dst_mr->lkey, (uintptr_t)va + o,
					  va_mr->rkey, win, 0);
		CHILD_REQUIRE(rep, 11, ret == IBV_WC_SUCCESS, "READ at %zu: %d", o, ret);
		CHILD_REQUIRE(rep, 12, !memcmp(dst, va + o, win),
			      "READ at %zu returned other bytes than the CPU sees", o);
	}
	ret = vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q1);
	CHILD_REQUIRE(rep, 19, !ret, "MR_QUERY: %d", ret);
	/* Most pages were pinned on demand, after the CPU faulted them in. */
	rep->ondemand = q1.counters.ondemand_repins;
	/*
	 * Linux reports a migration (compaction, try_to_migrate()) as
	 * MMU_NOTIFY_CLEAR; MMU_NOTIFY_MIGRATE is device-memory migration only.
	 * Nothing else clears pages of this range after the fill.
	 */
	rep->migrations = q1.counters.invalidations[VAMR_EVENT_CLEAR] -
			  q0.counters.invalidations[VAMR_EVENT_CLEAR];
	CHILD_REQUIRE(rep, 20, q1.counters.ondemand_repins >= CMP_PAGES / 2,
		      "%llu pages pinned on demand",
		      (unsigned long long)q1.counters.ondemand_repins);
	CHILD_REQUIRE(rep, 13, !ibv_dereg_mr(va_mr) && !ibv_dereg_mr(src_mr) &&
		      !ibv_dereg_mr(dst_mr), "dereg");
	CHILD_REQUIRE(rep, 14, !rdma_pair_close(&p), "close");
	rep->stage = ST_DONE;
	_exit(0);
}

/*
 * A VA MR under RDMA WRITEs and READs with position-dependent data while
 * another process allocates, fragments and frees memory and this one makes
 * the kernel compact memory again and again (see compaction_child()): every
 * READ returns what the CPU sees, every WRITE is what the CPU then sees.
 */
TEST(compaction_hog)
{
	struct report *rep = report_new();
	struct vamr_stats s0, s1;
	struct baseline b;
	int fd = vamr_open(), kfd = kmsg_open(), status, compactions = 0, ret;
	long done, migrated = vmstat("pgmigrate_success");
	pid_t hogpid, pid;

	ASSERT_NE(NULL, rep);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, take_baseline(fd, &b));
	ASSERT_EQ(0, vamr_stats(fd, VAMR_STATS_GLOBAL, &s0));
	hogpid = fork();
	ASSERT_LE(0, hogpid);
	if (!hogpid)
		hog();
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid)
		compaction_child(rep);
	for (;;) {
		ret = wait_child(pid, &status, 100);
		if (ret != -ETIMEDOUT)
			break;
		if (!write_str("/proc/sys/vm/compact_memory", "1\n"))
			compactions++;
		if (compactions > 200)
			break;
	}
	kill(hogpid, SIGKILL);
	waitpid(hogpid, NULL, 0);
	if (ret) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	EXPECT_EQ(0, ret);
	EXPECT_CHILD_OK(rep);
	EXPECT_EQ(0, status);
	ASSERT_EQ(0, vamr_stats(fd, VAMR_STATS_GLOBAL, &s1));
	done = (long)rep->rounds;
	TH_LOG("%ld rounds, %d compactions, %ld pages migrated; the MR: %lu pages pinned "
	       "before the first access, %lu pinned on demand, %lu CLEAR invalidations during "
	       "the rounds (migrations); MIGRATE invalidations of all regions: %llu", done,
	       compactions, vmstat("pgmigrate_success") - migrated, rep->pinned_before,
	       rep->ondemand, rep->migrations,
	       (unsigned long long)(s1.counters.invalidations[VAMR_EVENT_MIGRATE] -
				    s0.counters.invalidations[VAMR_EVENT_MIGRATE]));
	EXPECT_LT(0, compactions);
	EXPECT_BASELINE(fd, &b, "after the child");
	EXPECT_KMSG_CLEAN(kfd);
	close(fd);
}

TEST_HARNESS_MAIN
