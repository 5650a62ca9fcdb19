// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_stress_live: VA MRs (rdma_rxe + vamr) and /dev/vamr regions with
 * everything live: deregistration with work in flight, SIGKILL (at random
 * moments: VAMR_STRESS_SEED repeats them) and exit of a process with
 * traffic, advice, events and regions live, and an OOM kill of such a
 * process.
 *
 * Each case runs its scenario in forked children and then checks that the
 * global counters, VmPin and the kernel log are back to where they were
 * (stress_util.h).
 */
#define _GNU_SOURCE
#include "kselftest_harness.h"
#include "stress_util.h"

/* xorshift64*: the random moments of the kill loop, reproducible from the seed. */
static uint64_t rnd_state;

static uint64_t rnd(void)
{
	rnd_state ^= rnd_state >> 12;
	rnd_state ^= rnd_state << 25;
	rnd_state ^= rnd_state >> 27;
	return rnd_state * 0x2545f4914f6cdd1dULL;
}

static void rnd_seed(struct __test_metadata *_metadata)
{
	const char *s = getenv("VAMR_STRESS_SEED");

	rnd_state = s ? strtoull(s, NULL, 0) : (uint64_t)now_ns();
	if (!rnd_state)
		rnd_state = 1;
	TH_LOG("random seed %#llx (set VAMR_STRESS_SEED to repeat)",
	       (unsigned long long)rnd_state);
}

/* ---- traffic on the loopback pair --------------------------------------- */

/*
 * Keeps RDMA WRITEs (side 0: src -> the VA MR) and RDMA READs (side 1: the
 * VA MR -> rd, itself a VA MR used as the local buffer) outstanding.
 */
struct traffic {
	struct rdma_pair *p;
	uint8_t *src, *va, *rd;
	size_t src_len, va_len, rd_len;
	struct ibv_mr *src_mr, *va_mr, *rd_mr;
	int out[2];
	uint64_t seq;
	struct report *rep;
};

#define XFER (4 * PAGE)

static int traffic_post(struct traffic *t, int side)
{
	size_t off = (t->seq * 3 * PAGE + t->seq % 61) % (t->va_len - XFER);
	int ret;

	if (side == 0)
		ret = rdma_pair_post_write(t->p, 0, t->seq, t->src + off % (t->src_len - XFER),
					   t->src_mr->lkey, (uintptr_t)(t->va + off),
					   t->va_mr->rkey, XFER);
	else
		ret = rdma_pair_post_read(t->p, 1, t->seq, t->rd + off % (t->rd_len - XFER),
					  t->rd_mr->lkey, (uintptr_t)(t->va + off),
					  t->va_mr->rkey, XFER);
	if (!ret) {
		t->seq++;
		t->out[side]++;
		t->rep->posted++;
	}
	return ret;
}

/* Reap completions, recover the pair after an error, refill to @depth per side. */
static int traffic_pump(struct traffic *t, int depth)
{
	struct ibv_wc wc[16];
	int side, n, i, broken = 0, ret;

	for (side = 0; side < 2; side++) {
		while ((n = ibv_poll_cq(t->p->scq[side], 16, wc)) > 0) {
			for (i = 0; i < n; i++) {
				t->rep->completed++;
				if (wc[i].status != IBV_WC_SUCCESS) {
					t->rep->wc_errors++;
					broken = 1;
				}
			}
			t->out[side] -= n;
		}
		if (n < 0)
			return -EIO;
	}
	if (broken) {
		ret = rdma_pair_recover(t->p);
		if (ret)
			return ret;
		t->out[0] = t->out[1] = 0;
	}
	for (side = 0; side < 2; side++)
		while (t->out[side] < depth) {
			ret = traffic_post(t, side);
			if (ret)
				return ret;
		}
	return 0;
}

/* ---- a child with everything live --------------------------------------- */

enum live_end {
	LIVE_UNTIL_KILLED,	/* traffic until the parent kills it */
	LIVE_EXIT_ABRUPT,	/* _exit() with everything live */
	LIVE_EXIT_CLEAN,	/* release everything, check VmPin, exit */
	LIVE_OOM,		/* allocate until the OOM killer comes */
};

#define LIVE_VA_PAGES 64
#define LIVE_RD_PAGES 32
#define LIVE_SRC_PAGES 32
#define LIVE_REGION_PAGES 32
#define LIVE_ADVISE_SGES 256

/*
 * /dev/vamr with two regions and an events fd, the loopback pair, two VA
 * MRs with RDMA WRITEs and READs outstanding, an asynchronous prefetch with
 * many SGEs pending, then traffic with remaps of the VA MR's pages. How it
 * ends depends on @end. Never returns.
 */
static void live_child(struct report *rep, enum live_end end)
{
	struct vamr_events_open eo = { .flags = VAMR_EVENTS_NONBLOCK | VAMR_EVENTS_CLOEXEC };
	struct ibv_sge sge[LIVE_ADVISE_SGES];
	struct vamr_event ev[16];
	struct rdma_pair p;
	struct traffic t = { .p = &p, .rep = rep };
	uint32_t h1 = 0, h2 = 0;
	uint8_t *regmem;
	int vfd, ret, i;
	int64_t stop_at = now_ns() + 10 * 1000000000LL;

	rep->pid = getpid();
	rep->vmpin_start = vamr_vmpin_kb();

	vfd = vamr_open();
	CHILD_REQUIRE(rep, 1, vfd >= 0, "open /dev/vamr: %s", strerror(-vfd));
	regmem = map_anon(2 * LIVE_REGION_PAGES * PAGE);
	CHILD_REQUIRE(rep, 2, regmem, "mmap");
	pattern_fill(regmem, 2 * LIVE_REGION_PAGES * PAGE, 0x11, 0);
	ret = vamr_register(vfd, regmem, LIVE_REGION_PAGES * PAGE, RW, 0xa1, &h1);
	CHILD_REQUIRE(rep, 3, !ret, "register: %s", strerror(-ret));
	/* Overlapping the first one, read-only, unaligned. */
	ret = vamr_register(vfd, regmem + LIVE_REGION_PAGES / 2 * PAGE + 9,
			    LIVE_REGION_PAGES * PAGE, VAMR_ACCESS_READ, 0xa2, &h2);
	CHILD_REQUIRE(rep, 4, !ret, "register: %s", strerror(-ret));
	rep->stage = ST_VAMR;

	ret = vamr_ioctl(vfd, VAMR_IOC_EVENTS_OPEN, &eo);
	CHILD_REQUIRE(rep, 5, !ret, "EVENTS_OPEN: %s", strerror(-ret));
	rep->stage = ST_EVENTS;

	ret = rdma_pair_open(&p, NULL);
	CHILD_REQUIRE(rep, 6, !ret, "rdma_pair_open: %s", strerror(-ret));
	rep->stage = ST_PAIR;

	t.src_len = LIVE_SRC_PAGES * PAGE;
	t.va_len = LIVE_VA_PAGES * PAGE;
	t.rd_len = LIVE_RD_PAGES * PAGE;
	t.src = map_anon(t.src_len);
	t.va = map_anon(t.va_len);
	t.rd = map_anon(t.rd_len);
	CHILD_REQUIRE(rep, 7, t.src && t.va && t.rd, "mmap");
	pattern_fill(t.src, t.src_len, 0x12, 0);
	pattern_fill(t.va, t.va_len, 0x13, 0);
	memset(t.rd, 0, t.rd_len);
	ret = rdma_pair_reg_mr(&p, t.src, t.src_len, ACC_REMOTE, &t.src_mr);
	CHILD_REQUIRE(rep, 8, !ret, "reg src: %s", strerror(-ret));
	ret = rdma_pair_reg_mr(&p, t.va, t.va_len, ACC_VA, &t.va_mr);
	CHILD_REQUIRE(rep, 9, !ret, "reg VA MR: %s", strerror(-ret));
	ret = rdma_pair_reg_mr(&p, t.rd, t.rd_len, ACC_VA, &t.rd_mr);
	CHILD_REQUIRE(rep, 10, !ret, "reg VA MR: %s", strerror(-ret));
	rep->stage = ST_MRS;

	ret = traffic_pump(&t, 24);
	CHILD_REQUIRE(rep, 11, !ret, "post: %s", strerror(-ret));
	rep->stage = ST_POSTED;

	/* Give the prefetch something to pin: drop the pages first. */
	madvise(t.va, t.va_len, MADV_DONTNEED);
	for (i = 0; i < LIVE_ADVISE_SGES; i++)
		sge[i] = (struct ibv_sge){
			.addr = (uintptr_t)t.va + (i % LIVE_VA_PAGES) * PAGE + i % 7,
			.length = (uint32_t)(PAGE - i % 7), .lkey = t.va_mr->lkey,
		};
	ret = advise(p.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, sge, LIVE_ADVISE_SGES,
		     &rep->advise_calls);
	CHILD_REQUIRE(rep, 12, !ret, "async advise: %s", strerror(ret));
	rep->stage = ST_ADVISED;
	rep->vmpin_live = vamr_vmpin_kb();
	rep->stage = ST_TRAFFIC;

	for (rep->rounds = 0; ; rep->rounds++) {
		ret = traffic_pump(&t, 24);
		CHILD_REQUIRE(rep, 13, !ret, "traffic: %s", strerror(-ret));
		if (rep->rounds % 8 == 7) {
			/* Replace 8 pages of the VA MR atomically: invalidations. */
			CHILD_REQUIRE(rep, 14, !remap_fixed(t.va + (rep->rounds / 8 % 8) * 8 * PAGE,
							    8 * PAGE), "remap");
			rep->remaps++;
			/* And one page of a /dev/vamr region: an event. */
			madvise(regmem + (rep->rounds / 8 % LIVE_REGION_PAGES) * PAGE, PAGE,
				MADV_DONTNEED);
		}
		while ((ret = read(eo.fd, ev, sizeof(ev))) > 0)
			rep->events += ret / sizeof(ev[0]);
		if (end == LIVE_UNTIL_KILLED) {
			CHILD_REQUIRE(rep, 15, now_ns() < stop_at, "not killed after 10 s");
			continue;
		}
		if (rep->rounds >= 20)
			break;
	}

	/* Leave with work outstanding and another prefetch pending. */
	ret = traffic_pump(&t, 24);
	CHILD_REQUIRE(rep, 16, !ret, "post: %s", strerror(-ret));
	ret = advise(p.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, sge, LIVE_ADVISE_SGES,
		     &rep->advise_calls);
	CHILD_REQUIRE(rep, 17, !ret, "async advise: %s", strerror(ret));
	rep->vmpin_live = vamr_vmpin_kb();

	if (end == LIVE_EXIT_ABRUPT) {
		rep->stage = ST_DONE;
		_exit(0);
	}
	if (end == LIVE_OOM) {
		long vmsize = proc_kb("/proc/self/status", "VmSize");
		long total = proc_kb("/proc/meminfo", "MemTotal");
		struct rlimit rl;

		CHILD_REQUIRE(rep, 20, vmsize > 0 && total > 0, "/proc: VmSize %ld MemTotal %ld",
			      vmsize, total);
		CHILD_REQUIRE(rep, 21, !write_long("/proc/self/oom_score_adj", 1000),
			      "oom_score_adj: %s", strerror(errno));
		/* Never more than all of RAM on top of what is mapped now. */
		rl.rlim_cur = rl.rlim_max = (rlim_t)(vmsize + total) * 1024;
		CHILD_REQUIRE(rep, 22, !setrlimit(RLIMIT_AS, &rl), "RLIMIT_AS: %s",
			      strerror(errno));
		rep->rounds = 0;
		rep->stage = ST_ALLOC;
		while (!rep->go)
			sleep_ms(1);
		for (;;) {
			void *m = mmap(NULL, 16 * MIB, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

			CHILD_REQUIRE(rep, 23, m != MAP_FAILED,
				      "mmap failed before the OOM killer came: %s",
				      strerror(errno));
			memset(m, 0x5a, 16 * MIB);	/* in case MAP_POPULATE stopped short */
			rep->rounds++;
		}
	}

	/* LIVE_EXIT_CLEAN: every deregistration returns promptly, VmPin back to start. */
	{
		struct ibv_mr *mrs[3] = { t.va_mr, t.rd_mr, t.src_mr };

		for (i = 0; i < 3; i++) {
			int64_t dt;

			ret = timed_dereg(rep, mrs[i], &dt);
			CHILD_REQUIRE(rep, 30 + i, !ret, "dereg: %s", strerror(ret));
			CHILD_REQUIRE(rep, 33, dt < DEREG_LIMIT_NS, "dereg %d took %lld ms", i,
				      (long long)(dt / 1000000));
		}
		ret = rdma_pair_close(&p);
		CHILD_REQUIRE(rep, 34, !ret, "rdma_pair_close: %s", strerror(-ret));
		CHILD_REQUIRE(rep, 35, !vamr_unregister(vfd, h1) && !vamr_unregister(vfd, h2),
			      "unregister");
		close(eo.fd);
		close(vfd);
		rep->vmpin_end = vamr_vmpin_kb();
		CHILD_REQUIRE(rep, 36, rep->vmpin_end == rep->vmpin_start,
			      "VmPin %ld kB after releasing everything, %ld kB at start",
			      rep->vmpin_end, rep->vmpin_start);
		rep->stage = ST_DONE;
		_exit(0);
	}
}

/* ---- 1. deregistration with work in flight ------------------------------ */

#define DIF_VA_LEN (4 * MIB)
#define DIF_CHUNK (128 * 1024)
#define DIF_WRS 32
#define DIF_SGES 2048

static void dereg_in_flight_child(struct report *rep)
{
	struct ibv_sge *sge = calloc(DIF_SGES, sizeof(*sge));
	struct ibv_mr *va_mr, *src_mr, *rd_mr;
	uint8_t *va, *src, *rd;
	struct rdma_pair p;
	struct ibv_wc wc;
	int64_t end;
	int i, ret, got = 0, side;

	rep->vmpin_start = vamr_vmpin_kb();
	CHILD_REQUIRE(rep, 1, sge, "calloc");
	ret = rdma_pair_open(&p, NULL);
	CHILD_REQUIRE(rep, 2, !ret, "rdma_pair_open: %s", strerror(-ret));
	va = map_anon(DIF_VA_LEN);
	src = map_anon(MIB);
	rd = map_anon(MIB);
	CHILD_REQUIRE(rep, 3, va && src && rd, "mmap");
	pattern_fill(va, DIF_VA_LEN, 0x21, 0);
	pattern_fill(src, MIB, 0x22, 0);
	CHILD_REQUIRE(rep, 4, !rdma_pair_reg_mr(&p, src, MIB, ACC_REMOTE, &src_mr) &&
		      !rdma_pair_reg_mr(&p, rd, MIB, ACC_REMOTE, &rd_mr), "reg normal MRs");
	ret = rdma_pair_reg_mr(&p, va, DIF_VA_LEN, ACC_VA, &va_mr);
	CHILD_REQUIRE(rep, 5, !ret, "reg VA MR: %s", strerror(-ret));

	/* 32 WRITEs and 32 READs of 128 KiB over the whole VA MR. */
	for (i = 0; i < DIF_WRS; i++) {
		ret = rdma_pair_post_write(&p, 0, i, src + (i % 8) * DIF_CHUNK, src_mr->lkey,
					   (uintptr_t)va + i * DIF_CHUNK, va_mr->rkey, DIF_CHUNK);
		CHILD_REQUIRE(rep, 6, !ret, "post write %d: %s", i, strerror(-ret));
		ret = rdma_pair_post_read(&p, 1, i, rd + (i % 8) * DIF_CHUNK, rd_mr->lkey,
					  (uintptr_t)va + (DIF_WRS - 1 - i) * DIF_CHUNK,
					  va_mr->rkey, DIF_CHUNK);
		CHILD_REQUIRE(rep, 7, !ret, "post read %d: %s", i, strerror(-ret));
		rep->posted += 2;
	}
	/* Half the pages dropped: the prefetch has pinning to do. */
	madvise(va, DIF_VA_LEN / 2, MADV_DONTNEED);
	for (i = 0; i < DIF_SGES; i++)
		sge[i] = (struct ibv_sge){
			.addr = (uintptr_t)va + (i * 7 % (DIF_VA_LEN / PAGE)) * PAGE,
			.length = 2 * PAGE, .lkey = va_mr->lkey,
		};
	for (i = 0; i < DIF_SGES; i++)
		if (sge[i].addr + sge[i].length > (uintptr_t)va + DIF_VA_LEN)
			sge[i].length = PAGE;
	ret = advise(p.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, sge, DIF_SGES, &rep->advise_calls);
	CHILD_REQUIRE(rep, 8, !ret, "async advise: %s", strerror(ret));
	rep->sges = DIF_SGES;

	ret = timed_dereg(rep, va_mr, NULL);
	CHILD_REQUIRE(rep, 9, !ret, "ibv_dereg_mr: %s", strerror(ret));

	/* Every posted WR completes (success, or an error and a flush). */
	end = now_ns() + 15 * 1000000000LL;
	for (side = 0; side < 2; side++)
		for (i = 0; i < DIF_WRS; i++) {
			ret = -ETIMEDOUT;
			while (now_ns() < end) {
				ret = rdma_pair_wait_send(&p, side, 100, &wc);
				if (ret != -ETIMEDOUT)
					break;
			}
			CHILD_REQUIRE(rep, 10, ret >= 0, "side %d: %d of %d completions: %s",
				      side, i, DIF_WRS, strerror(-ret));
			got++;
			rep->completed++;
			if (ret != IBV_WC_SUCCESS)
				rep->wc_errors++;
		}
	CHILD_REQUIRE(rep, 11, !rdma_pair_recover(&p), "recover");
	CHILD_REQUIRE(rep, 12, !ibv_dereg_mr(src_mr) && !ibv_dereg_mr(rd_mr), "dereg");
	CHILD_REQUIRE(rep, 13, !rdma_pair_close(&p), "close");
	rep->vmpin_end = vamr_vmpin_kb();
	CHILD_REQUIRE(rep, 14, rep->vmpin_end == rep->vmpin_start, "VmPin %ld kB, %ld at start",
		      rep->vmpin_end, rep->vmpin_start);
	rep->stage = ST_DONE;
	_exit(0);
}

/*
 * Deregistration of a VA MR with 64 RDMA WRITEs/READs outstanding on it and
 * an asynchronous prefetch of 2048 SGEs pending: returns within 1 s, every
 * WR completes, nothing stays pinned or charged.
 */
TEST(dereg_in_flight)
{
	struct report *rep = report_new();
	struct baseline b;
	int fd = vamr_open(), kfd = kmsg_open(), status;
	pid_t pid;

	ASSERT_NE(NULL, rep);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, take_baseline(fd, &b));
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid)
		dereg_in_flight_child(rep);
	ASSERT_EQ(0, wait_child(pid, &status, 25000)) {
		kill(pid, SIGKILL);
		TH_LOG("child stuck at stage %s", stage_name[rep->stage]);
	}
	EXPECT_CHILD_OK(rep);
	EXPECT_EQ(0, status);
	TH_LOG("dereg took %lld us; %lu WRs, %lu error completions; %d advise call(s)",
	       (long long)rep->dereg_ns / 1000, rep->posted, rep->wc_errors, rep->advise_calls);
	EXPECT_GT(DEREG_LIMIT_NS, rep->dereg_ns);
	EXPECT_BASELINE(fd, &b, "after the child");
	EXPECT_KMSG_CLEAN(kfd);
	close(fd);
}

/* ---- 2. SIGKILL and exit with everything live --------------------------- */

#define KILL_ROUNDS 20

/*
 * 20 children with everything live (regions, events fd, VA MRs, QPs with
 * WRs posted, a pending asynchronous prefetch, remaps) killed with SIGKILL
 * at random moments: during set-up and during traffic. After each, the
 * counters are back to baseline.
 */
TEST(sigkill_live)
{
	struct report *rep = report_new();
	int hist[ST_COUNT] = { 0 };
	struct baseline b;
	int fd = vamr_open(), kfd = kmsg_open(), round, status;
	unsigned long completed = 0;

	ASSERT_NE(NULL, rep);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, take_baseline(fd, &b));
	rnd_seed(_metadata);
	for (round = 0; round < KILL_ROUNDS; round++) {
		uint64_t r = rnd();
		struct vamr_stats s;
		pid_t pid;

		report_reset(rep);
		pid = fork();
		ASSERT_LE(0, pid);
		if (!pid)
			live_child(rep, LIVE_UNTIL_KILLED);
		if (round % 4 == 0) {
			/* Anywhere in the set-up (or early traffic when it is quick). */
			sleep_ms(r / 4 % 60);
		} else {
			/* During the traffic. */
			if (wait_stage(rep, pid, ST_TRAFFIC, 10000)) {
				kill(pid, SIGKILL);
				waitpid(pid, &status, 0);
				ASSERT_EQ(0, rep->step) TH_LOG("round %d: child failed at step "
							       "%d: %s", round, rep->step,
							       rep->msg);
				ASSERT_TRUE(0) TH_LOG("round %d: no traffic after 10 s (stage %s)",
						      round, stage_name[rep->stage]);
			}
			sleep_ms(r / 4 % 80);
		}
		ASSERT_EQ(0, kill(pid, SIGKILL));
		ASSERT_EQ(0, wait_child(pid, &status, 15000))
			TH_LOG("round %d: a SIGKILLed child did not die in 15 s (stage %s)",
			       round, stage_name[rep->stage]);
		ASSERT_EQ(0, rep->step) TH_LOG("round %d: child failed at step %d: %s",
					       round, rep->step, rep->msg);
		ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
			TH_LOG("round %d: status %#x", round, status);
		hist[rep->stage]++;
		completed += rep->completed;
		ASSERT_EQ(0, wait_baseline(fd, &b, BASELINE_WAIT_MS, &s))
			TH_LOG("round %d (killed at stage %s): pinned %llu (was %llu), "
			       "regions %llu (was %llu)", round, stage_name[rep->stage],
			       (unsigned long long)s.counters.pages_pinned,
			       (unsigned long long)b.pinned,
			       (unsigned long long)s.counters.regions,
			       (unsigned long long)b.regions);
	}
	for (round = 0; round < ST_COUNT; round++)
		if (hist[round])
			TH_LOG("killed at stage %-8s %d time(s)", stage_name[round], hist[round]);
	TH_LOG("%lu completions seen before the kills", completed);
	/* Most kills land in the traffic phase, with WRs and prefetch in flight. */
	EXPECT_LE(KILL_ROUNDS / 2, hist[ST_TRAFFIC]);
	EXPECT_BASELINE(fd, &b, "after the kills");
	EXPECT_KMSG_CLEAN(kfd);
	close(fd);
}

static void exit_live(struct __test_metadata *_metadata, enum live_end end)
{
	struct report *rep = report_new();
	struct baseline b;
	int fd = vamr_open(), kfd = kmsg_open(), status;
	pid_t pid;

	ASSERT_NE(NULL, rep);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, take_baseline(fd, &b));
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid)
		live_child(rep, end);
	ASSERT_EQ(0, wait_child(pid, &status, 25000)) {
		kill(pid, SIGKILL);
		TH_LOG("child stuck at stage %s", stage_name[rep->stage]);
	}
	EXPECT_CHILD_OK(rep);
	EXPECT_EQ(0, status);
	EXPECT_EQ(ST_DONE, rep->stage);
	TH_LOG("%lu WRs posted, %lu completed (%lu errors), %lu remaps, %lu events; VmPin "
	       "%ld kB at start, %ld kB live, %ld kB at the end; slowest dereg %lld us",
	       rep->posted, rep->completed, rep->wc_errors, rep->remaps, rep->events,
	       rep->vmpin_start, rep->vmpin_live, rep->vmpin_end,
	       (long long)rep->dereg_ns / 1000);
	/* Everything was live and charged: the VA MRs, the regions, the normal MR. */
	EXPECT_LE(rep->vmpin_start + (long)((LIVE_VA_PAGES + LIVE_RD_PAGES + LIVE_SRC_PAGES +
					     LIVE_REGION_PAGES) * PAGE / 1024),
		  rep->vmpin_live);
	EXPECT_LT(0ul, rep->events);
	EXPECT_BASELINE(fd, &b, "after the child");
	EXPECT_KMSG_CLEAN(kfd);
	close(fd);
}

/* The same child exits by itself with everything live. */
TEST(exit_live_abrupt)
{
	exit_live(_metadata, LIVE_EXIT_ABRUPT);
}

/* The same child releases everything first, each dereg within 1 s; VmPin back to start. */
TEST(exit_live_clean)
{
	exit_live(_metadata, LIVE_EXIT_CLEAN);
}

/* ---- 4. OOM kill with live VA MRs --------------------------------------- */

#define OOM_HEADROOM_MB 160
#define CG_DIR "/sys/fs/cgroup/vamr_stress_oom"

/* A cgroup v2 with the memory controller for the child, or -1 (then: global OOM). */
static int oom_cgroup_setup(void)
{
	char buf[256] = "";
	int fd;

	if (access("/sys/fs/cgroup/cgroup.controllers", R_OK))
		mount("none", "/sys/fs/cgroup", "cgroup2", 0, NULL);
	fd = open("/sys/fs/cgroup/cgroup.controllers", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (read(fd, buf, sizeof(buf) - 1) < 0 || !strstr(buf, "memory")) {
		close(fd);
		return -1;
	}
	close(fd);
	write_str("/sys/fs/cgroup/cgroup.subtree_control", "+memory");
	if (mkdir(CG_DIR, 0755) && errno != EEXIST)
		return -1;
	if (write_str(CG_DIR "/memory.max", "96M") ||
	    (write_str(CG_DIR "/memory.swap.max", "0") && errno != ENOENT)) {
		rmdir(CG_DIR);
		return -1;
	}
	return 0;
}

/*
 * A child with live VA MRs, regions, WRs and a prefetch in flight allocates
 * memory until the OOM killer kills it: in a memory cgroup when there is one,
 * otherwise with oom_score_adj 1000 and the free memory first shrunk by
 * taking most of it into the hugetlb pool (so the OOM comes after a few
 * hundred MiB), RLIMIT_AS capping the child at all of RAM on top of what it
 * maps. The kernel log must name the child as the OOM victim and show no
 * other problem (the OOM report's stack dump is kept off the console while
 * the child allocates: it is expected, and read here instead).
 */
FIXTURE(oom) {};
FIXTURE_SETUP(oom) {}
FIXTURE_TEARDOWN(oom) {}

/*
 * Up to 15 s for the child's set-up plus 60 s for the OOM kill (under load,
 * the child once filled only 7 x 16 MiB in 20 s): within the 90 s timeout,
 * so the test ends by its own waits. The system settings it changes come
 * back through sys_guard.h even when the harness kills it.
 */
TEST_F_TIMEOUT(oom, kill_live, 90)
{
	struct report *rep = report_new();
	struct baseline b;
	int fd = vamr_open(), kfd, status, cg, found = 0, bad, ret;
	long printk_level, hp_old, hp_new = -1, avail;
	char num[32];
	char want[64];
	pid_t pid;

	ASSERT_NE(NULL, rep);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, take_baseline(fd, &b));
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid)
		live_child(rep, LIVE_OOM);
	ASSERT_EQ(0, wait_stage(rep, pid, ST_ALLOC, 15000)) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		TH_LOG("child at stage %s, step %d: %s", stage_name[rep->stage], rep->step,
		       rep->msg);
	}

	cg = oom_cgroup_setup();
	if (!cg) {
		char s[32];

		snprintf(s, sizeof(s), "%d\n", pid);
		if (write_str(CG_DIR "/cgroup.procs", s)) {
			rmdir(CG_DIR);
			cg = -1;
		}
	}
	hp_old = read_long("/proc/sys/vm/nr_hugepages");
	if (cg) {
		/* No memory cgroup: leave OOM_HEADROOM_MB free for the child to fill. */
		avail = proc_kb("/proc/meminfo", "MemFree") / 1024;
		if (hp_old >= 0 && avail > OOM_HEADROOM_MB + 64) {
			hp_new = hp_old + (avail - OOM_HEADROOM_MB) / 2;
			snprintf(num, sizeof(num), "%ld\n", hp_new);
			sys_guard_set("/proc/sys/vm/nr_hugepages", num);
		}
	}
	TH_LOG("%s; MemFree %ld kB, hugetlb pool %ld -> %ld pages",
	       cg ? "global OOM (no memory cgroup)" : "memory cgroup of 96 MiB",
	       proc_kb("/proc/meminfo", "MemFree"), hp_old,
	       read_long("/proc/sys/vm/nr_hugepages"));

	/* The guest swaps to zram: without swap the OOM comes in seconds, not minutes. */
	sys_guard_swapoff("/dev/zram0");
	kfd = kmsg_open();
	printk_level = read_long("/proc/sys/kernel/printk");
	if (printk_level > 4)
		sys_guard_set("/proc/sys/kernel/printk", "4");
	rep->go = 1;
	ret = wait_child(pid, &status, 60000);
	if (ret)
		kill(pid, SIGKILL);
	/* printk level, hugetlb pool, swap: back as they were (also if killed before). */
	sys_guard_restore();
	if (!cg)
		rmdir(CG_DIR);
	if (ret)
		waitpid(pid, &status, 0);

	EXPECT_EQ(0, ret) TH_LOG("the child was not OOM-killed in 60 s (%lu x 16 MiB)",
				 rep->rounds);
	EXPECT_EQ(0, rep->step) TH_LOG("child failed at step %d: %s", rep->step, rep->msg);
	EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
		TH_LOG("status %#x", status);
	snprintf(want, sizeof(want), "Killed process %d (", pid);
	bad = kmsg_problems(kfd, 1, want, &found);
	EXPECT_EQ(1, found) TH_LOG("no OOM kill of the child (%d) in the kernel log", pid);
	EXPECT_EQ(0, bad);
	TH_LOG("OOM kill after %lu x 16 MiB; VmPin of the child %ld kB live", rep->rounds,
	       rep->vmpin_live);
	EXPECT_BASELINE(fd, &b, "after the OOM kill");
	close(kfd);
	close(fd);
}

TEST_HARNESS_MAIN
