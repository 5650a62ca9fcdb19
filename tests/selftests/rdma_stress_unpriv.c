// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_stress_unpriv: the unprivileged limits (RLIMIT_MEMLOCK,
 * max_regions_per_mm) as uid 65534, and the reproducer of a known bug:
 * ibv_dereg_mr() of a VA MR over PROT_NONE pages with a large asynchronous
 * prefetch pending waited for the prefetch work (~50 s under TCG, then a WARN
 * in rxe_pool and an oops).
 *
 * Each case runs its scenario in forked children and then checks that the
 * global counters, VmPin and the kernel log are back to where they were
 * (stress_util.h).
 */
#define _GNU_SOURCE
#include "kselftest_harness.h"
#include "stress_util.h"

/* ---- 6. unprivileged ---------------------------------------------------- */

#define MEMLOCK_DEFAULT (8 * MIB)

/* In a child: RLIMIT_MEMLOCK 8 MiB, then uid/gid 65534 and no capabilities left. */
static void become_nobody(struct report *rep)
{
	struct rlimit rl = { MEMLOCK_DEFAULT, MEMLOCK_DEFAULT };
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];

	CHILD_REQUIRE(rep, 90, !setrlimit(RLIMIT_MEMLOCK, &rl), "setrlimit: %s", strerror(errno));
	CHILD_REQUIRE(rep, 91, !setgroups(0, NULL), "setgroups: %s", strerror(errno));
	CHILD_REQUIRE(rep, 92, !setresgid(NOBODY, NOBODY, NOBODY), "setresgid: %s",
		      strerror(errno));
	CHILD_REQUIRE(rep, 93, !setresuid(NOBODY, NOBODY, NOBODY), "setresuid: %s",
		      strerror(errno));
	memset(data, 0, sizeof(data));
	CHILD_REQUIRE(rep, 94, !syscall(SYS_capget, &hdr, data), "capget");
	CHILD_REQUIRE(rep, 95, !data[0].effective && !data[1].effective,
		      "capabilities left: %#x %#x", data[0].effective, data[1].effective);
}

/* Runs @fn(rep) in a child as uid 65534 with the devices opened up; the test checks. */
static void run_unprivileged(struct __test_metadata *_metadata, void (*fn)(struct report *),
			     struct report *rep, long ms)
{
	char uv[64];
	int status, ret;
	pid_t pid;

	uverbs_path(uv, sizeof(uv));
	if (!uv[0])
		SKIP(return, "no uverbs device for %s", rdma_pair_default_dev());
	ASSERT_EQ(0, dev_open_up(uv));
	ASSERT_EQ(0, dev_open_up("/dev/vamr"));
	ASSERT_EQ(0, root_open_up());
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		become_nobody(rep);
		fn(rep);
		_exit(0);
	}
	ret = wait_child_or_dereg(rep, pid, &status, ms);
	sys_guard_restore();
	if (ret) {
		kill(pid, SIGKILL);
		/* Do not wait for a child stuck in the kernel: report now. */
		if (rep->stage == ST_DEREG)
			ASSERT_EQ(0, ret) TH_LOG("ibv_dereg_mr has not returned after %lld ms",
						 (long long)(now_ns() - rep->dereg_start_ns) /
						 1000000);
		ASSERT_EQ(0, ret) TH_LOG("the unprivileged child did not finish in %ld ms "
					 "(stage %s)", ms, stage_name[rep->stage]);
	}
	EXPECT_CHILD_OK(rep);
	EXPECT_EQ(0, status);
}

static void memlock_child(struct report *rep)
{
	struct ibv_mr *mr = NULL, *mr2 = NULL;
	struct rdma_pair p;
	uint8_t *m = map_anon(MEMLOCK_DEFAULT + 2 * PAGE);
	uint32_t h;
	int vfd, ret;

	CHILD_REQUIRE(rep, 1, m, "mmap");
	memset(m, 3, MEMLOCK_DEFAULT + 2 * PAGE);
	rep->vmpin_start = vamr_vmpin_kb();
	CHILD_REQUIRE(rep, 2, rep->vmpin_start == 0, "VmPin %ld kB at start", rep->vmpin_start);
	ret = rdma_pair_open(&p, NULL);
	CHILD_REQUIRE(rep, 3, !ret, "rdma_pair_open as uid %d: %s", NOBODY, strerror(-ret));
	vfd = vamr_open();
	CHILD_REQUIRE(rep, 4, vfd >= 0, "open /dev/vamr: %s", strerror(-vfd));

	/* One page beyond the limit: ENOMEM, nothing charged. */
	ret = rdma_pair_reg_mr(&p, m, MEMLOCK_DEFAULT + PAGE, ACC_VA, &mr);
	CHILD_REQUIRE(rep, 10, ret == -ENOMEM, "VA MR of 8 MiB + 4 KiB: %d", ret);
	ret = rdma_pair_reg_mr(&p, m + 1, MEMLOCK_DEFAULT, ACC_VA, &mr);
	CHILD_REQUIRE(rep, 11, ret == -ENOMEM, "VA MR of 8 MiB at an odd address: %d", ret);
	CHILD_REQUIRE(rep, 12, vamr_vmpin_kb() == 0, "VmPin %ld kB after refusals",
		      vamr_vmpin_kb());
	/* Exactly the limit: allowed; then nothing more, by either path. */
	ret = rdma_pair_reg_mr(&p, m, MEMLOCK_DEFAULT, ACC_VA, &mr);
	CHILD_REQUIRE(rep, 13, !ret, "VA MR of exactly 8 MiB: %d", ret);
	rep->vmpin_live = vamr_vmpin_kb();
	CHILD_REQUIRE(rep, 14, rep->vmpin_live == (long)(MEMLOCK_DEFAULT / 1024), "VmPin %ld kB",
		      rep->vmpin_live);
	ret = rdma_pair_reg_mr(&p, m + MEMLOCK_DEFAULT, PAGE, ACC_VA, &mr2);
	CHILD_REQUIRE(rep, 15, ret == -ENOMEM, "one more VA MR page: %d", ret);
	ret = vamr_register(vfd, m + MEMLOCK_DEFAULT, PAGE, RW, 0, &h);
	CHILD_REQUIRE(rep, 16, ret == -ENOMEM, "one more /dev/vamr page: %d", ret);
	CHILD_REQUIRE(rep, 17, vamr_vmpin_kb() == rep->vmpin_live, "VmPin %ld kB",
		      vamr_vmpin_kb());
	ret = ibv_dereg_mr(mr);
	CHILD_REQUIRE(rep, 18, !ret, "dereg: %s", strerror(ret));
	CHILD_REQUIRE(rep, 19, vamr_vmpin_kb() == 0, "VmPin %ld kB after dereg", vamr_vmpin_kb());
	/* The room is there again. */
	ret = vamr_register(vfd, m + MEMLOCK_DEFAULT, PAGE, RW, 0, &h);
	CHILD_REQUIRE(rep, 20, !ret, "register after dereg: %d", ret);
	CHILD_REQUIRE(rep, 21, !vamr_unregister(vfd, h), "unregister");
	CHILD_REQUIRE(rep, 22, !rdma_pair_close(&p), "close");
	close(vfd);
	rep->vmpin_end = vamr_vmpin_kb();
	CHILD_REQUIRE(rep, 23, rep->vmpin_end == 0, "VmPin %ld kB at the end", rep->vmpin_end);
	rep->stage = ST_DONE;
}

/* As uid 65534 with RLIMIT_MEMLOCK 8 MiB: VA MRs beyond it fail with ENOMEM. */
TEST(unpriv_memlock)
{
	struct report *rep = report_new();
	struct baseline b;
	int fd = vamr_open(), kfd = kmsg_open();

	ASSERT_NE(NULL, rep);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, take_baseline(fd, &b));
	run_unprivileged(_metadata, memlock_child, rep, 20000);
	EXPECT_BASELINE(fd, &b, "after the child");
	EXPECT_KMSG_CLEAN(kfd);
	close(fd);
}

#define MAX_REGIONS_PARAM "/sys/module/vamr/parameters/max_regions_per_mm"
#define TEST_MAX_REGIONS 16

static long region_limit;

static void region_limit_child(struct report *rep)
{
	uint8_t *m = map_anon((region_limit + 4) * PAGE);
	uint32_t *h = calloc(region_limit + 4, sizeof(*h)), extra;
	struct ibv_mr *mr = NULL;
	struct rdma_pair p;
	int vfd[2], ret;
	long i;

	CHILD_REQUIRE(rep, 1, m && h, "mmap");
	memset(m, 4, (region_limit + 4) * PAGE);
	vfd[0] = vamr_open();
	vfd[1] = vamr_open();
	CHILD_REQUIRE(rep, 2, vfd[0] >= 0 && vfd[1] >= 0, "open /dev/vamr");
	ret = rdma_pair_open(&p, NULL);
	CHILD_REQUIRE(rep, 3, !ret, "rdma_pair_open: %s", strerror(-ret));
	/* Up to the limit, over two files of this process. */
	for (i = 0; i < region_limit; i++) {
		ret = vamr_register(vfd[i % 2], m + i * PAGE, PAGE, RW, i, &h[i]);
		CHILD_REQUIRE(rep, 4, !ret, "region %ld of %ld: %s", i + 1, region_limit,
			      strerror(-ret));
	}
	/* One more: refused on either file, and as a VA MR. */
	ret = vamr_register(vfd[0], m + i * PAGE, PAGE, RW, i, &extra);
	rep->err = -ret;
	CHILD_REQUIRE(rep, 5, ret < 0, "region %ld of %ld accepted", i + 1, region_limit);
	ret = vamr_register(vfd[1], m + i * PAGE, PAGE, RW, i, &extra);
	CHILD_REQUIRE(rep, 6, ret < 0, "region %ld of %ld accepted (second file)", i + 1,
		      region_limit);
	ret = rdma_pair_reg_mr(&p, m + (i + 1) * PAGE, PAGE, ACC_VA, &mr);
	CHILD_REQUIRE(rep, 7, ret < 0, "a VA MR beyond %ld regions accepted", region_limit);
	rep->stage = ST_TRAFFIC;
	while (!rep->go)	/* the parent registers while this one is at its limit */
		sleep_ms(1);
	/* One region freed: one more fits, as a VA MR. */
	CHILD_REQUIRE(rep, 8, !vamr_unregister(vfd[1], h[1]), "unregister");
	ret = rdma_pair_reg_mr(&p, m + (i + 1) * PAGE, PAGE, ACC_VA, &mr);
	CHILD_REQUIRE(rep, 9, !ret, "VA MR after an unregister: %s", strerror(-ret));
	ret = vamr_register(vfd[1], m + i * PAGE, PAGE, RW, i, &extra);
	CHILD_REQUIRE(rep, 10, ret < 0, "region beyond the limit accepted after the VA MR");
	CHILD_REQUIRE(rep, 11, !ibv_dereg_mr(mr), "dereg");
	CHILD_REQUIRE(rep, 12, !rdma_pair_close(&p), "close");
	close(vfd[0]);
	close(vfd[1]);
	rep->vmpin_end = vamr_vmpin_kb();
	CHILD_REQUIRE(rep, 13, rep->vmpin_end == 0, "VmPin %ld kB at the end", rep->vmpin_end);
	rep->stage = ST_DONE;
}

/*
 * As uid 65534: max_regions_per_mm regions (set to 16 for the test when the
 * parameter is writable) over two /dev/vamr files fit; one more is refused
 * on either file and as a VA MR; the limit is per process (root registers
 * meanwhile); after an unregister one more fits.
 */
TEST(unpriv_region_limit)
{
	struct report *rep = report_new();
	struct baseline b;
	int fd = vamr_open(), kfd = kmsg_open(), status, ret;
	long old = read_long(MAX_REGIONS_PARAM);
	uint8_t *m = map_anon(PAGE);
	char uv[64], num[32];
	uint32_t h;
	pid_t pid;

	ASSERT_NE(NULL, rep);
	ASSERT_LE(0, fd);
	if (old < 0)
		SKIP(return, "%s does not exist (no per-process region limit)", MAX_REGIONS_PARAM);
	region_limit = old;
	snprintf(num, sizeof(num), "%d\n", TEST_MAX_REGIONS);
	if (old != TEST_MAX_REGIONS && !sys_guard_set(MAX_REGIONS_PARAM, num))
		region_limit = TEST_MAX_REGIONS;
	if (region_limit > 1024) {
		SKIP(return, "max_regions_per_mm is %ld and read-only: too many to reach",
		     region_limit);
	}
	uverbs_path(uv, sizeof(uv));
	ASSERT_NE(0, uv[0]);
	ASSERT_EQ(0, take_baseline(fd, &b));
	ASSERT_EQ(0, dev_open_up(uv));
	ASSERT_EQ(0, dev_open_up("/dev/vamr"));
	ASSERT_EQ(0, root_open_up());
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		become_nobody(rep);
		region_limit_child(rep);
		_exit(0);
	}
	if (!wait_stage(rep, pid, ST_TRAFFIC, 15000)) {
		memset(m, 5, PAGE);
		ret = vamr_register(fd, m, PAGE, RW, 0, &h);
		EXPECT_EQ(0, ret) TH_LOG("root in another process: %d", ret);
		if (!ret)
			EXPECT_EQ(0, vamr_unregister(fd, h));
	}
	rep->go = 1;
	ret = wait_child(pid, &status, 15000);
	if (ret) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	/* Device and root modes, the region limit: back as they were (also if killed before). */
	sys_guard_restore();
	EXPECT_EQ(0, ret);
	EXPECT_CHILD_OK(rep);
	EXPECT_EQ(0, status);
	TH_LOG("limit %ld (parameter %ld); the refusal was %s", region_limit, old,
	       strerror(rep->err));
	EXPECT_BASELINE(fd, &b, "after the child");
	EXPECT_KMSG_CLEAN(kfd);
	close(fd);
}

/* ---- the PROT_NONE + asynchronous prefetch + dereg case ----------------- */

/* Parameters of the child below. */
static size_t pn_pages;
static uint32_t pn_sges;

/*
 * A VA MR over pn_pages PROT_NONE pages, an asynchronous PREFETCH advice of
 * pn_sges SGEs each over the whole MR, then ibv_dereg_mr() at once.
 */
static void prot_none_child(struct report *rep)
{
	size_t len = pn_pages * PAGE;
	struct ibv_device_attr attr;
	struct ibv_sge *sge = calloc(pn_sges, sizeof(*sge));
	struct ibv_mr *mr;
	struct rdma_pair p;
	uint8_t *m;
	uint32_t i;
	int ret;

	rep->vmpin_start = vamr_vmpin_kb();
	CHILD_REQUIRE(rep, 1, sge, "calloc");
	ret = rdma_pair_open(&p, NULL);
	CHILD_REQUIRE(rep, 2, !ret, "rdma_pair_open: %s", strerror(-ret));
	memset(&attr, 0, sizeof(attr));
	CHILD_REQUIRE(rep, 3, !ibv_query_device(p.ctx, &attr), "ibv_query_device");
	rep->max_sge = attr.max_sge;
	m = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHILD_REQUIRE(rep, 4, m != MAP_FAILED, "mmap");
	ret = rdma_pair_reg_mr(&p, m, len, ACC_VA, &mr);
	CHILD_REQUIRE(rep, 5, !ret, "VA MR over %zu PROT_NONE pages: %s", pn_pages,
		      strerror(-ret));
	rep->vmpin_live = vamr_vmpin_kb();
	for (i = 0; i < pn_sges; i++)
		sge[i] = (struct ibv_sge){ .addr = (uintptr_t)m, .length = len, .lkey = mr->lkey };
	ret = advise(p.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, sge, pn_sges, &rep->advise_calls);
	CHILD_REQUIRE(rep, 6, !ret, "async PREFETCH advice of %u SGEs: %s", pn_sges,
		      strerror(ret));
	rep->sges = pn_sges;

	ret = timed_dereg(rep, mr, NULL);
	CHILD_REQUIRE(rep, 7, !ret, "ibv_dereg_mr: %s", strerror(ret));
	CHILD_REQUIRE(rep, 8, rep->dereg_ns < DEREG_LIMIT_NS, "ibv_dereg_mr took %lld ms",
		      (long long)(rep->dereg_ns / 1000000));
	CHILD_REQUIRE(rep, 9, !rdma_pair_close(&p), "close");
	rep->vmpin_end = vamr_vmpin_kb();
	CHILD_REQUIRE(rep, 10, rep->vmpin_end == rep->vmpin_start, "VmPin %ld kB, %ld at start",
		      rep->vmpin_end, rep->vmpin_start);
	rep->stage = ST_DONE;
}

/* As uid 65534: 1024 PROT_NONE pages, 512 SGEs; dereg within 1 s. */
TEST(unpriv_prot_none_prefetch)
{
	struct report *rep = report_new();
	struct baseline b;
	int fd = vamr_open(), kfd = kmsg_open();

	ASSERT_NE(NULL, rep);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, take_baseline(fd, &b));
	pn_pages = 1024;
	pn_sges = 512;
	/* Set-up takes a moment under TCG; the dereg itself gets 1 s + slack. */
	run_unprivileged(_metadata, prot_none_child, rep, 20000);
	TH_LOG("dereg took %lld ms (%d SGEs in %d call(s), device max_sge %d)",
	       (long long)rep->dereg_ns / 1000000, rep->sges, rep->advise_calls, rep->max_sge);
	EXPECT_BASELINE(fd, &b, "after the child");
	EXPECT_KMSG_CLEAN(kfd);
	close(fd);
}

/*
 * The reproducer: a VA MR over 2048 PROT_NONE pages, one asynchronous
 * PREFETCH advice (no IBV_ADVISE_MR_FLAG_FLUSH) of 2250 SGEs over it, then
 * ibv_dereg_mr() must return within 1 s, without a WARN, and leave nothing
 * behind. Before the fix it waited ~52 s for the prefetch work (rxe_pool's
 * 50 s completion timeout: WARN), then the kernel oopsed. The test does not
 * wait for such a dereg: it fails 3 s after it started.
 */
TEST(dereg_prot_none_prefetch)
{
	struct report *rep = report_new();
	struct baseline b;
	int fd = vamr_open(), kfd = kmsg_open(), status, ret;
	pid_t pid;

	ASSERT_NE(NULL, rep);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, take_baseline(fd, &b));
	pn_pages = 2048;
	pn_sges = 2250;
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		prot_none_child(rep);
		_exit(0);
	}
	ret = wait_child_or_dereg(rep, pid, &status, 20000);
	if (ret && rep->stage != ST_DEREG) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		ASSERT_EQ(0, ret) TH_LOG("set-up: stage %s, step %d: %s", stage_name[rep->stage],
					 rep->step, rep->msg);
	}
	if (ret) {
		/* Stuck in the kernel: a SIGKILL takes effect when the dereg returns. */
		kill(pid, SIGKILL);
		ASSERT_EQ(0, ret) TH_LOG("ibv_dereg_mr has not returned after %lld ms "
					 "(%d SGEs in %d advise call(s), device max_sge %d)",
					 (long long)(now_ns() - rep->dereg_start_ns) / 1000000,
					 rep->sges, rep->advise_calls, rep->max_sge);
	}
	TH_LOG("dereg took %lld ms (%d SGEs in %d call(s), device max_sge %d)",
	       (long long)rep->dereg_ns / 1000000, rep->sges, rep->advise_calls, rep->max_sge);
	EXPECT_CHILD_OK(rep);
	EXPECT_EQ(0, status);
	EXPECT_GT(DEREG_LIMIT_NS, rep->dereg_ns);
	/* Registration over PROT_NONE pins nothing but charges the range. */
	EXPECT_EQ(rep->vmpin_start + (long)(pn_pages * PAGE / 1024), rep->vmpin_live);
	EXPECT_BASELINE(fd, &b, "after the child");
	EXPECT_KMSG_CLEAN(kfd);
	close(fd);
}

TEST_HARNESS_MAIN
