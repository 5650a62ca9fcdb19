// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_verbs_edge: verbs-level edge cases of VA MRs (VAMR_ACCESS_VA through
 * ibv_reg_mr) on rxe, the inputs that syzbot and rdma bug reports against rxe
 * and ODP have shown to be dangerous. Every check asserts what the peer or
 * the CPU actually sees: the bytes at the VA, the bytes a READ returned, the
 * completion status, and that nothing outside the MR moved.
 *
 *   iova_*        ibv_reg_mr_iova2() with iova 0, an iova whose range ends at
 *                 2^64 - PAGE or exactly at 2^64, and one whose range wraps:
 *                 refused with EINVAL, or WRITE/READ right at the first and
 *                 the last byte and over the whole MR, a remote access error
 *                 one byte before and one byte past it, the bytes around the
 *                 MR untouched.
 *   va_mr_param_leaves_wrapping_mr_normal  with rdma_rxe's va_mr set, a
 *                 registration without the bit whose iovas wrap registers as
 *                 a normal MR.
 *   addr_out_of_range_and_huge_len  a kernel address, a range across the
 *                 top of user space or wrapping past 2^64 (refused), 64 GiB as
 *                 root (registered or ENOMEM, no kernel complaint).
 *   len_*         lengths 0 (EINVAL, nothing charged), 1, ending exactly at a
 *                 page boundary, and a range over an unmapped hole and a
 *                 PROT_NONE page (VmPin back after dereg).
 *   atomic_*      CMP_SWP and FETCH_ADD at an unaligned address (the same
 *                 status as a normal MR: IBV_WC_REM_INV_REQ_ERR, memory
 *                 unchanged), at the last 8 bytes of the MR after that page
 *                 was replaced, straddling the end; ATOMIC_WRITE at the same
 *                 places and on a read-only mapping. (FLUSH: rdma-core 44 has
 *                 no verb for it; a VA MR refuses FLUSH_PERSISTENT access.)
 *   rereg_*       every ibv_rereg_mr() flag combination on a VA MR: refused
 *                 (EOPNOTSUPP) but for a PD change, the MR as valid as before
 *                 after each refusal; after a PD change the old PD's QPs lose
 *                 access.
 *   mw_*          type 1 and type 2 memory windows on a VA MR follow a remap;
 *                 deregistering the MR with a window bound fails as for a
 *                 normal MR and leaves it working.
 *   flags_*       the VA bit with ODP, HUGETLB, ZERO_BASED, the flush bits and
 *                 unknown bits: the same answer as a normal MR but for the two
 *                 documented refusals; on the stock rxe (no vamr_access in
 *                 sysfs) the VA bit is ignored.
 *   dereg_races_*  ibv_dereg_mr() of a VA MR while another thread WRITEs
 *                 and READs through its rkey (200 rounds) or with it as the
 *                 local side (lkey, 100 rounds): only success or error
 *                 completions, no hang, successful data right, no kernel
 *                 complaint.
 *
 * Items covered elsewhere (not repeated here): an MR beyond RLIMIT_MEMLOCK
 * for an unprivileged user (rdma_stress_unpriv unpriv_memlock, VmPin checked),
 * atomics on read-only and PROT_NONE mappings (rdma_special ro_*_file,
 * prot_none, mprotect_ro_after_reg), an atomic after munmap + mmap
 * (rdma_va munmap_mmap), VA with ODP (rdma_va va_with_odp_refused).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <rdma/ib_user_verbs.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "kmsg_util.h"
#include "mm_util.h"
#include "pattern.h"
#include "rdma_pair.h"
#include "vamr_lib.h"

#define PAGE 4096ul
#define ACC_REMOTE (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)
#define ACC_VA (ACC_REMOTE | VAMR_ACCESS_VA)
/* The peer's buffers: room for the largest transfer here (a whole MR). */
#define PEER_LEN (16 * PAGE)
/* The byte every test mapping holds outside what a test writes. */
#define BG 0x5a

/* The uverbs flush access bits (rdma-core 44 has no names for them). */
#define ACC_FLUSH_GLOBAL (1u << 8)
#define ACC_FLUSH_PERSISTENT (1u << 9)

FIXTURE(edge)
{
	struct rdma_pair pair;
	bool open;
	bool va;		/* the device honours VAMR_ACCESS_VA (patched rxe) */
	uint8_t *src, *dst;
	struct ibv_mr *src_mr, *dst_mr;
};

FIXTURE_SETUP(edge)
{
	const char *dev = rdma_pair_default_dev();
	char path[128];
	int rc = rdma_pair_open(&self->pair, dev);

	if (rc == -ENODEV)
		SKIP(return, "RDMA device %s not present", dev);
	ASSERT_EQ(0, rc) TH_LOG("rdma_pair_open: %s", strerror(-rc));
	self->open = true;
	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/vamr_access", dev);
	self->va = !access(path, F_OK);
	self->src = map_anon(PEER_LEN);
	self->dst = map_anon(PEER_LEN);
	ASSERT_NE(NULL, self->src);
	ASSERT_NE(NULL, self->dst);
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, self->src, PEER_LEN, ACC_REMOTE,
				      &self->src_mr));
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, self->dst, PEER_LEN, ACC_REMOTE,
				      &self->dst_mr));
}

FIXTURE_TEARDOWN(edge)
{
	if (self->src_mr)
		ibv_dereg_mr(self->src_mr);
	if (self->dst_mr)
		ibv_dereg_mr(self->dst_mr);
	if (self->src)
		munmap(self->src, PEER_LEN);
	if (self->dst)
		munmap(self->dst, PEER_LEN);
	if (self->open)
		rdma_pair_close(&self->pair);
}

/* The tests of VA MRs proper need the patched rxe. */
#define NEED_VA()                                                               \
	do {                                                                    \
		if (!self->va)                                                  \
			SKIP(return, "the device has no VA MRs (stock rxe)");   \
	} while (0)

/*
 * How long a WR may take to complete: rdma_pair's default (0:
 * RDMA_PAIR_DEFAULT_TIMEOUT_MS, 15 s). A WR completes in milliseconds; the
 * bound only tells a lost completion from a slow machine. 5 s was exceeded
 * once, on the sanitizer kernel with the host's 2 cores at load 10.
 */
#define WC_WAIT_MS 0

/* Peer WRITE of @len bytes of pattern @seed to @raddr: the completion status. */
static int peer_write(FIXTURE_DATA(edge) *self, uint64_t raddr, uint32_t rkey, size_t len,
		      uint64_t seed)
{
	pattern_fill(self->src, len, seed, 0);
	return rdma_pair_write_sync(&self->pair, 0, self->src, self->src_mr->lkey, raddr, rkey,
				    (uint32_t)len, WC_WAIT_MS);
}

/* Peer READ of @len bytes at @raddr into dst (0xee before): the completion status. */
static int peer_read(FIXTURE_DATA(edge) *self, uint64_t raddr, uint32_t rkey, size_t len)
{
	memset(self->dst, 0xee, len + 1);
	return rdma_pair_read_sync(&self->pair, 0, self->dst, self->dst_mr->lkey, raddr, rkey,
				   (uint32_t)len, WC_WAIT_MS);
}

/* An atomic at any address (rdma_pair's helpers refuse unaligned ones). */
static int peer_atomic(FIXTURE_DATA(edge) *self, enum ibv_wr_opcode op, uint64_t raddr,
		       uint32_t rkey, uint64_t compare_add, uint64_t swap, uint64_t *orig)
{
	uint64_t *res = (uint64_t *)self->dst;
	struct ibv_sge sge = { .addr = (uintptr_t)res, .length = 8, .lkey = self->dst_mr->lkey };
	struct ibv_send_wr wr, *bad;
	struct ibv_wc wc;
	int st;

	*res = 0xdeadbeefdeadbeefull;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 77;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.wr.atomic.remote_addr = raddr;
	wr.wr.atomic.rkey = rkey;
	wr.wr.atomic.compare_add = compare_add;
	wr.wr.atomic.swap = swap;
	/* A provider returns the errno (it need not set errno). */
	st = ibv_post_send(self->pair.qp[0], &wr, &bad);
	if (st)
		return -st;
	st = rdma_pair_wait_send(&self->pair, 0, WC_WAIT_MS, &wc);
	if (orig)
		*orig = *res;
	return st;
}

/* After an error completion, bring the QPs back (assertion in the caller). */
static int recover_after(FIXTURE_DATA(edge) *self, int st)
{
	return st == IBV_WC_SUCCESS ? 0 : rdma_pair_recover(&self->pair);
}

/* Index of the first byte of [p, p + len) that is not BG, or -1. */
static long first_not_bg(const uint8_t *p, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (p[i] != BG)
			return (long)i;
	return -1;
}

/*
 * The bounds of an MR of @len bytes at @base (iova @iova) whose mapping
 * holds BG and extends at least one byte before and after it: WRITE and READ
 * of the first and the last byte and of the whole MR reach exactly those
 * bytes; one byte past the end and one byte before the start, and two bytes
 * straddling the end, give IBV_WC_REM_ACCESS_ERR and change nothing. The
 * mapping is BG again on return.
 */
static void check_bounds(struct __test_metadata *_metadata, FIXTURE_DATA(edge) *self,
			 struct ibv_mr *mr, uint8_t *base, size_t len, uint64_t iova)
{
	uint8_t *lo = base - 1, *hi = base + len + 1;
	uint8_t want;
	int st;

	ASSERT_LE(len, PEER_LEN - 1);
	ASSERT_EQ(-1, first_not_bg(lo, hi - lo));

	/* First byte. */
	st = peer_write(self, iova, mr->rkey, 1, 1);
	ASSERT_EQ(IBV_WC_SUCCESS, st) TH_LOG("write of the first byte: %d", st);
	pattern_fill(&want, 1, 1, 0);
	EXPECT_EQ(want, base[0]);
	EXPECT_EQ(BG, lo[0]);
	st = peer_read(self, iova, mr->rkey, 1);
	ASSERT_EQ(IBV_WC_SUCCESS, st) TH_LOG("read of the first byte: %d", st);
	EXPECT_EQ(want, self->dst[0]);
	EXPECT_EQ(0xee, self->dst[1]);
	base[0] = BG;

	/* Last byte. */
	st = peer_write(self, iova + len - 1, mr->rkey, 1, 2);
	ASSERT_EQ(IBV_WC_SUCCESS, st) TH_LOG("write of the last byte (iova %#llx): %d",
					     (unsigned long long)(iova + len - 1), st);
	pattern_fill(&want, 1, 2, 0);
	EXPECT_EQ(want, base[len - 1]);
	EXPECT_EQ(BG, base[len]);
	st = peer_read(self, iova + len - 1, mr->rkey, 1);
	ASSERT_EQ(IBV_WC_SUCCESS, st) TH_LOG("read of the last byte: %d", st);
	EXPECT_EQ(want, self->dst[0]);
	base[len - 1] = BG;

	/* The whole MR: every offset, in one WRITE and one READ. */
	st = peer_write(self, iova, mr->rkey, len, 3);
	ASSERT_EQ(IBV_WC_SUCCESS, st) TH_LOG("write of the whole MR (%zu bytes): %d", len, st);
	EXPECT_EQ((size_t)-1, pattern_check(base, len, 3, 0));
	EXPECT_EQ(BG, lo[0]);
	EXPECT_EQ(BG, base[len]);
	st = peer_read(self, iova, mr->rkey, len);
	ASSERT_EQ(IBV_WC_SUCCESS, st) TH_LOG("read of the whole MR: %d", st);
	EXPECT_EQ((size_t)-1, pattern_check(self->dst, len, 3, 0));
	memset(base, BG, len);

	/* One byte past the end, two straddling it, one before the start. */
	st = peer_write(self, iova + len, mr->rkey, 1, 4);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, st) TH_LOG("write one byte past the end: %d", st);
	ASSERT_EQ(0, recover_after(self, st));
	st = peer_write(self, iova + len - 1, mr->rkey, 2, 5);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, st) TH_LOG("write straddling the end: %d", st);
	ASSERT_EQ(0, recover_after(self, st));
	st = peer_read(self, iova + len, mr->rkey, 1);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, st) TH_LOG("read one byte past the end: %d", st);
	EXPECT_EQ(0xee, self->dst[0]);
	ASSERT_EQ(0, recover_after(self, st));
	st = peer_write(self, iova - 1, mr->rkey, 1, 6);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, st) TH_LOG("write one byte before the start: %d", st);
	ASSERT_EQ(0, recover_after(self, st));
	st = peer_read(self, iova - 1, mr->rkey, 2);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, st) TH_LOG("read straddling the start: %d", st);
	ASSERT_EQ(0, recover_after(self, st));
	EXPECT_EQ(-1, first_not_bg(lo, hi - lo)) TH_LOG("a refused access changed memory");
}

/*
 * A VA MR over @npages pages (the middle of a mapping with a page on each
 * side) at iova @iova; NULL with errno when registration fails. *@map gets the
 * mapping (npages + 2 pages of BG), the MR starts at *@map + PAGE.
 */
static struct ibv_mr *va_mr_iova(FIXTURE_DATA(edge) *self, size_t npages, uint64_t iova,
				 uint8_t **map)
{
	uint8_t *m = map_anon((npages + 2) * PAGE);

	*map = m;
	if (!m)
		return NULL;
	memset(m, BG, (npages + 2) * PAGE);
	return ibv_reg_mr_iova2(self->pair.pd, m + PAGE, npages * PAGE, iova, ACC_VA);
}

/* iova 0 (the MR's address is page aligned, so is the iova). */
TEST_F(edge, iova_zero)
{
	struct ibv_mr *mr;
	uint8_t *m;

	NEED_VA();
	mr = va_mr_iova(self, 4, 0, &m);
	ASSERT_NE(NULL, mr) TH_LOG("iova 0: %s", strerror(errno));
	check_bounds(_metadata, self, mr, m + PAGE, 4 * PAGE, 0);
	EXPECT_EQ(0, ibv_dereg_mr(mr));
	munmap(m, 6 * PAGE);
}

/* An iova range that ends one page below 2^64. */
TEST_F(edge, iova_top)
{
	uint64_t iova = 0 - 5 * PAGE;
	struct ibv_mr *mr;
	uint8_t *m;

	NEED_VA();
	mr = va_mr_iova(self, 4, iova, &m);
	ASSERT_NE(NULL, mr) TH_LOG("iova %#llx: %s", (unsigned long long)iova, strerror(errno));
	check_bounds(_metadata, self, mr, m + PAGE, 4 * PAGE, iova);
	EXPECT_EQ(0, ibv_dereg_mr(mr));
	munmap(m, 6 * PAGE);
}

/*
 * An iova range whose last byte is 2^64 - 1 (iova + len == 2^64): the byte
 * "past the end" is iova 0. Refused with EINVAL, or right at every offset.
 */
TEST_F(edge, iova_ends_at_2_64)
{
	uint64_t iova = 0 - 4 * PAGE;
	struct ibv_mr *mr;
	uint8_t *m;

	NEED_VA();
	mr = va_mr_iova(self, 4, iova, &m);
	if (!mr) {
		EXPECT_EQ(EINVAL, errno);
	} else {
		check_bounds(_metadata, self, mr, m + PAGE, 4 * PAGE, iova);
		EXPECT_EQ(0, ibv_dereg_mr(mr));
	}
	munmap(m, 6 * PAGE);
}

/*
 * An iova range that wraps past 2^64 (iova = 2^64 - 2 pages, 4 pages): the
 * MR's last two pages would have iovas 0 .. 2 pages, below its first iova.
 * Refused with EINVAL, or right at every offset; never charged when refused.
 */
TEST_F(edge, iova_wraps)
{
	uint64_t iova = 0 - 2 * PAGE;
	long pin0 = vamr_vmpin_kb();
	struct ibv_mr *mr;
	uint8_t *m;

	NEED_VA();
	mr = va_mr_iova(self, 4, iova, &m);
	if (!mr) {
		EXPECT_EQ(EINVAL, errno) TH_LOG("refused with %s", strerror(errno));
		EXPECT_EQ(pin0, vamr_vmpin_kb());
	} else {
		check_bounds(_metadata, self, mr, m + PAGE, 4 * PAGE, iova);
		EXPECT_EQ(0, ibv_dereg_mr(mr));
	}
	munmap(m, 6 * PAGE);
}

/* iova with the address's page offset, the MR not page aligned, then a remap. */
TEST_F(edge, iova_offset_remap)
{
	uint8_t *m = map_anon(6 * PAGE), *base;
	uint64_t iova;
	size_t len = 3 * PAGE + 100;
	struct ibv_mr *mr;

	NEED_VA();
	ASSERT_NE(NULL, m);
	memset(m, BG, 6 * PAGE);
	base = m + PAGE + 300;
	iova = 0x7000000000ull + 300;
	mr = ibv_reg_mr_iova2(self->pair.pd, base, len, iova, ACC_VA);
	ASSERT_NE(NULL, mr) TH_LOG("%s", strerror(errno));
	check_bounds(_metadata, self, mr, base, len, iova);
	/* Replace the pages under the MR: the bounds hold on the new ones. */
	ASSERT_EQ(0, remap_fixed(m + PAGE, 4 * PAGE));
	memset(m + PAGE, BG, 4 * PAGE);
	check_bounds(_metadata, self, mr, base, len, iova);
	EXPECT_EQ(0, ibv_dereg_mr(mr));
	munmap(m, 6 * PAGE);
}

/*
 * Address ranges a VA MR cannot cover: a kernel address, a range crossing
 * the top of the user address space, a range whose address wraps past 2^64:
 * refused (EFAULT or EINVAL, as a normal MR), nothing charged. A huge range
 * (almost all unmapped) as root (CAP_IPC_LOCK: no RLIMIT_MEMLOCK
 * charge limit), 64 GiB (a pin table of 128 MiB): registered or ENOMEM, never a kernel complaint; when
 * registered, a mapped page in it works and an unmapped one gives a remote
 * access error; VmPin back after dereg.
 */
TEST_F(edge, addr_out_of_range_and_huge_len)
{
	struct {
		uint64_t addr;
		size_t len;
		const char *name;
	} cases[] = {
		{ 0xffff888000000000ull, PAGE, "kernel address" },
		{ 0, 2 * PAGE, "across the top of user space" },
		{ 0ull - PAGE, 2 * PAGE, "address wrapping past 2^64" },
	};
	size_t huge = 1ull << 36, i;
	struct timespec t0, t1;
	long pin0 = vamr_vmpin_kb();
	int kfd = kmsg_open();
	uint64_t top = 0x7ffffffff000ull;	/* TASK_SIZE, 4-level paging */
	struct ibv_mr *mr;
	uint8_t *m;
	int st;

	NEED_VA();
	/* With 5-level paging a mapping above 47 bits is possible when asked for. */
	m = mmap((void *)(top + PAGE), PAGE, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (m != MAP_FAILED) {
		munmap(m, PAGE);
		top = 0x00fffffffffff000ull;
	}
	cases[1].addr = top - PAGE;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct ibv_mr *nmr = ibv_reg_mr(self->pair.pd, (void *)(uintptr_t)cases[i].addr,
						cases[i].len, ACC_REMOTE);
		int nerr = nmr ? 0 : errno, err;

		mr = ibv_reg_mr(self->pair.pd, (void *)(uintptr_t)cases[i].addr, cases[i].len,
				ACC_VA);
		err = mr ? 0 : errno;
		TH_LOG("%s: normal MR %s, VA MR %s", cases[i].name, strerror(nerr), strerror(err));
		EXPECT_EQ(NULL, mr);
		EXPECT_TRUE(err == EFAULT || err == EINVAL);
		if (mr)
			ibv_dereg_mr(mr);
		if (nmr)
			ibv_dereg_mr(nmr);
		EXPECT_EQ(pin0, vamr_vmpin_kb());
	}
	/* 64 GiB of address space with one page mapped in the middle. */
	m = mmap(NULL, huge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	ASSERT_NE(MAP_FAILED, m);
	ASSERT_EQ(0, munmap(m, huge));
	ASSERT_EQ(0, remap_fixed(m + huge / 2, PAGE));
	memset(m + huge / 2, BG, PAGE);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	mr = ibv_reg_mr(self->pair.pd, m, huge, ACC_VA);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	TH_LOG("VA MR of 64 GiB: %s in %ld ms; VmPin %ld kB", mr ? "registered" : strerror(errno),
	       (long)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000),
	       vamr_vmpin_kb());
	if (!mr) {
		EXPECT_EQ(ENOMEM, errno);
	} else {
		st = peer_write(self, (uintptr_t)m + huge / 2 + 8, mr->rkey, 64, 30);
		EXPECT_EQ(IBV_WC_SUCCESS, st);
		EXPECT_EQ((size_t)-1, pattern_check(m + huge / 2 + 8, 64, 30, 0));
		st = peer_write(self, (uintptr_t)m + huge - PAGE, mr->rkey, 64, 31);
		EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, st);
		ASSERT_EQ(0, recover_after(self, st));
		clock_gettime(CLOCK_MONOTONIC, &t0);
		EXPECT_EQ(0, ibv_dereg_mr(mr));
		clock_gettime(CLOCK_MONOTONIC, &t1);
		TH_LOG("dereg in %ld ms", (long)((t1.tv_sec - t0.tv_sec) * 1000 +
						 (t1.tv_nsec - t0.tv_nsec) / 1000000));
	}
	EXPECT_EQ(pin0, vamr_vmpin_kb());
	EXPECT_EQ(0, kmsg_problems(kfd));
	if (kfd >= 0)
		close(kfd);
	munmap(m + huge / 2, PAGE);
}

#define VA_MR_PARAM "/sys/module/rdma_rxe/parameters/va_mr"

/* Write @v to rdma_rxe's va_mr parameter: 0 or -errno. */
static int set_va_mr(char v)
{
	int fd = open(VA_MR_PARAM, O_WRONLY | O_CLOEXEC), ret = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, &v, 1) != 1)
		ret = -errno;
	close(fd);
	return ret;
}

/*
 * rdma_rxe's va_mr set (every user MR gets VA semantics): a registration
 * without the bit whose iovas wrap past 2^64, which a VA MR refuses, still
 * registers, as a normal MR (va_mr never makes a registration fail); one
 * that does not wrap becomes a VA MR; with the bit, the wrap is refused.
 */
TEST_F(edge, va_mr_param_leaves_wrapping_mr_normal)
{
	uint8_t *m = map_anon(4 * PAGE);
	struct vamr_mr_query q;
	struct ibv_mr *mr;
	char old = '0';
	int fd = vamr_open(), pfd;

	NEED_VA();
	ASSERT_NE(NULL, m);
	ASSERT_LE(0, fd);
	pfd = open(VA_MR_PARAM, O_RDONLY | O_CLOEXEC);
	if (pfd < 0)
		SKIP(return, "no %s", VA_MR_PARAM);
	ASSERT_EQ(1, read(pfd, &old, 1));
	close(pfd);
	if (set_va_mr('1'))
		SKIP(return, "cannot write %s (root needed)", VA_MR_PARAM);

	mr = ibv_reg_mr_iova2(self->pair.pd, m, 4 * PAGE, 0 - 2 * PAGE, ACC_REMOTE);
	EXPECT_NE(NULL, mr) TH_LOG("va_mr=1, wrapping iovas, no bit: %s", strerror(errno));
	if (mr) {
		q = vamr_mr_query_of(mr);
		EXPECT_EQ(-ENOENT, vamr_ioctl(fd, VAMR_IOC_MR_QUERY, &q)) TH_LOG("a VA MR");
		EXPECT_EQ(0, ibv_dereg_mr(mr));
	}
	mr = ibv_reg_mr_iova2(self->pair.pd, m, 4 * PAGE, 0 - 4 * PAGE, ACC_REMOTE);
	EXPECT_NE(NULL, mr) TH_LOG("va_mr=1, iovas up to 2^64: %s", strerror(errno));
	if (mr) {
		q = vamr_mr_query_of(mr);
		EXPECT_EQ(0, vamr_ioctl(fd, VAMR_IOC_MR_QUERY, &q)) TH_LOG("not a VA MR");
		EXPECT_EQ(0, ibv_dereg_mr(mr));
	}
	mr = ibv_reg_mr_iova2(self->pair.pd, m, 4 * PAGE, 0 - 2 * PAGE, ACC_VA);
	EXPECT_EQ(NULL, mr);
	EXPECT_EQ(EINVAL, errno);
	if (mr)
		ibv_dereg_mr(mr);
	EXPECT_EQ(0, set_va_mr(old));
	close(fd);
	munmap(m, 4 * PAGE);
}

/* Length 0: EINVAL, nothing charged; the same as a normal MR's answer or better. */
TEST_F(edge, len_zero)
{
	uint8_t *m = map_anon(PAGE);
	long pin0 = vamr_vmpin_kb();
	struct ibv_mr *mr, *nmr;
	int nerr;

	NEED_VA();
	ASSERT_NE(NULL, m);
	nmr = ibv_reg_mr(self->pair.pd, m, 0, ACC_REMOTE);
	nerr = nmr ? 0 : errno;
	TH_LOG("a normal MR of length 0: %s", nmr ? "registered" : strerror(nerr));
	if (nmr)
		ibv_dereg_mr(nmr);
	mr = ibv_reg_mr(self->pair.pd, m, 0, ACC_VA);
	EXPECT_EQ(NULL, mr);
	EXPECT_EQ(EINVAL, errno);
	if (mr)
		ibv_dereg_mr(mr);
	EXPECT_EQ(pin0, vamr_vmpin_kb());
	munmap(m, PAGE);
}

/* Length 1, in the middle of a page. */
TEST_F(edge, len_one)
{
	uint8_t *m = map_anon(3 * PAGE);
	struct ibv_mr *mr;

	NEED_VA();
	ASSERT_NE(NULL, m);
	memset(m, BG, 3 * PAGE);
	mr = ibv_reg_mr(self->pair.pd, m + PAGE + 37, 1, ACC_VA);
	ASSERT_NE(NULL, mr) TH_LOG("%s", strerror(errno));
	check_bounds(_metadata, self, mr, m + PAGE + 37, 1, (uintptr_t)m + PAGE + 37);
	EXPECT_EQ(0, ibv_dereg_mr(mr));
	munmap(m, 3 * PAGE);
}

/* A length that ends exactly at a page boundary (and one that starts at one). */
TEST_F(edge, len_to_page_end)
{
	uint8_t *m = map_anon(5 * PAGE);
	struct ibv_mr *mr;

	NEED_VA();
	ASSERT_NE(NULL, m);
	memset(m, BG, 5 * PAGE);
	mr = ibv_reg_mr(self->pair.pd, m + PAGE + 100, 2 * PAGE - 100, ACC_VA);
	ASSERT_NE(NULL, mr) TH_LOG("%s", strerror(errno));
	check_bounds(_metadata, self, mr, m + PAGE + 100, 2 * PAGE - 100,
		     (uintptr_t)m + PAGE + 100);
	EXPECT_EQ(0, ibv_dereg_mr(mr));
	mr = ibv_reg_mr(self->pair.pd, m + PAGE, PAGE, ACC_VA);
	ASSERT_NE(NULL, mr) TH_LOG("%s", strerror(errno));
	check_bounds(_metadata, self, mr, m + PAGE, PAGE, (uintptr_t)m + PAGE);
	EXPECT_EQ(0, ibv_dereg_mr(mr));
	munmap(m, 5 * PAGE);
}

/*
 * A VA MR over [mapped page][hole][PROT_NONE page][mapped page]: the mapped
 * pages work, the hole and the PROT_NONE page give remote access errors and
 * stay as they are, a WRITE spanning into the hole writes nothing; once the
 * hole is mapped it works. VmPin is back after dereg.
 */
TEST_F(edge, len_over_hole_and_prot_none)
{
	uint8_t *m = map_anon(6 * PAGE), *p0, *p1, *p2, *p3;
	long pin0 = vamr_vmpin_kb();
	struct ibv_mr *mr;
	uint8_t want;
	int st;

	NEED_VA();
	ASSERT_NE(NULL, m);
	memset(m, BG, 6 * PAGE);
	p0 = m + PAGE;
	p1 = p0 + PAGE;
	p2 = p1 + PAGE;
	p3 = p2 + PAGE;
	ASSERT_EQ(0, munmap(p1, PAGE));
	ASSERT_EQ(0, mprotect(p2, PAGE, PROT_NONE));
	mr = ibv_reg_mr(self->pair.pd, p0 + 10, 4 * PAGE - 20, ACC_VA);
	ASSERT_NE(NULL, mr) TH_LOG("%s", strerror(errno));
	TH_LOG("VmPin %ld kB before, %ld kB with the MR", pin0, vamr_vmpin_kb());

	st = peer_write(self, (uintptr_t)p0 + 10, mr->rkey, PAGE - 10, 10);
	ASSERT_EQ(IBV_WC_SUCCESS, st);
	EXPECT_EQ((size_t)-1, pattern_check(p0 + 10, PAGE - 10, 10, 0));
	st = peer_write(self, (uintptr_t)p3, mr->rkey, PAGE - 10, 11);
	ASSERT_EQ(IBV_WC_SUCCESS, st);
	EXPECT_EQ((size_t)-1, pattern_check(p3, PAGE - 10, 11, 0));
	EXPECT_EQ(-1, first_not_bg(p3 + PAGE - 10, 10));

	memset(p0, BG, PAGE);
	st = peer_write(self, (uintptr_t)p1 + 5, mr->rkey, 8, 12);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, st) TH_LOG("write into the hole: %d", st);
	ASSERT_EQ(0, recover_after(self, st));
	st = peer_read(self, (uintptr_t)p2 + 5, mr->rkey, 8);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, st) TH_LOG("read of the PROT_NONE page: %d", st);
	EXPECT_EQ(0xee, self->dst[0]);
	ASSERT_EQ(0, recover_after(self, st));
	st = peer_write(self, (uintptr_t)p2 + 5, mr->rkey, 8, 13);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, st) TH_LOG("write to the PROT_NONE page: %d", st);
	ASSERT_EQ(0, recover_after(self, st));
	/* A write from the mapped page into the hole: refused as a whole? At least
	 * nothing past the mapped page, and what landed in p0 is the pattern's.
	 */
	st = peer_write(self, (uintptr_t)p1 - 64, mr->rkey, 128, 14);
	EXPECT_NE(IBV_WC_SUCCESS, st);
	ASSERT_EQ(0, recover_after(self, st));
	ASSERT_EQ(0, mprotect(p2, PAGE, PROT_READ));
	EXPECT_EQ(-1, first_not_bg(p2, PAGE)) TH_LOG("the PROT_NONE page changed");
	pattern_fill(&want, 1, 14, 0);
	EXPECT_TRUE(p0[PAGE - 64] == BG || p0[PAGE - 64] == want);

	/* Map the hole: it works now. */
	ASSERT_EQ(0, remap_fixed(p1, PAGE));
	st = peer_write(self, (uintptr_t)p1, mr->rkey, PAGE, 15);
	ASSERT_EQ(IBV_WC_SUCCESS, st);
	EXPECT_EQ((size_t)-1, pattern_check(p1, PAGE, 15, 0));
	EXPECT_EQ(0, ibv_dereg_mr(mr));
	EXPECT_EQ(pin0, vamr_vmpin_kb());
	munmap(m, 6 * PAGE);
}

/*
 * A second pair of RC QPs, created with ibv_create_qp_ex() to post through
 * the ibv_wr_*() interface: rdma-core 44's rxe provider refuses an unaligned
 * atomic in ibv_post_send() (EINVAL, user space: the kernel never sees it),
 * but ibv_wr_atomic_*() write the WQE as given, so the responder's own
 * checks are reached; and ATOMIC_WRITE exists only there. qp[0] posts, qp[1]
 * is the responder; both in the fixture's PD, connected over the same GID.
 * After an error completion the pair is closed and opened again.
 */
struct xpair {
	struct ibv_cq *cq[2];
	struct ibv_qp *qp[2];
	struct ibv_qp_ex *qpx;
	bool atomic_write;	/* created with IBV_QP_EX_WITH_ATOMIC_WRITE */
};

#define XPAIR_OPS (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | \
		   IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)

static void xpair_close(struct xpair *x)
{
	int i;

	for (i = 0; i < 2; i++) {
		if (x->qp[i])
			ibv_destroy_qp(x->qp[i]);
		if (x->cq[i])
			ibv_destroy_cq(x->cq[i]);
	}
	memset(x, 0, sizeof(*x));
}

/* 0 or an errno; on failure nothing is left. */
static int xpair_open(FIXTURE_DATA(edge) *self, struct xpair *x)
{
	int i, err;

	memset(x, 0, sizeof(*x));
	x->atomic_write = true;
	for (i = 0; i < 2; i++) {
		struct ibv_qp_init_attr_ex a;

		x->cq[i] = ibv_create_cq(self->pair.ctx, 16, NULL, NULL, 0);
		if (!x->cq[i])
			goto fail;
		memset(&a, 0, sizeof(a));
		a.send_cq = a.recv_cq = x->cq[i];
		a.qp_type = IBV_QPT_RC;
		a.cap.max_send_wr = a.cap.max_recv_wr = 16;
		a.cap.max_send_sge = a.cap.max_recv_sge = 1;
		a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		a.pd = self->pair.pd;
		a.send_ops_flags = XPAIR_OPS | (x->atomic_write ? IBV_QP_EX_WITH_ATOMIC_WRITE : 0);
		x->qp[i] = ibv_create_qp_ex(self->pair.ctx, &a);
		if (!x->qp[i] && x->atomic_write) {
			x->atomic_write = false;
			a.send_ops_flags = XPAIR_OPS;
			x->qp[i] = ibv_create_qp_ex(self->pair.ctx, &a);
		}
		if (!x->qp[i])
			goto fail;
	}
	for (i = 0; i < 2; i++) {
		err = rdma_pair_connect_qp(&self->pair, x->qp[i], x->qp[!i]->qp_num, 0, 0);
		if (err) {
			errno = -err;
			goto fail;
		}
	}
	x->qpx = ibv_qp_to_qp_ex(x->qp[0]);
	if (!x->qpx)
		goto fail;
	return 0;
fail:
	err = errno ? errno : EIO;
	xpair_close(x);
	return err;
}

enum xop { X_CMP_SWP, X_FETCH_ADD, X_ATOMIC_WRITE };

/*
 * One atomic through the ibv_wr_*() interface at any @raddr: the completion
 * status (>= 0), or -errno. *@orig (if not NULL) gets the 8 bytes returned.
 * After an error completion the pair is reopened.
 */
static int x_atomic(FIXTURE_DATA(edge) *self, struct xpair *x, enum xop op, uint64_t raddr,
		    uint32_t rkey, uint64_t a, uint64_t b, uint64_t *orig)
{
	uint64_t *res = (uint64_t *)self->dst;
	struct ibv_wc wc;
	int ret, n, i;

	*res = 0xdeadbeefdeadbeefull;
	ibv_wr_start(x->qpx);
	x->qpx->wr_id = 9;
	x->qpx->wr_flags = IBV_SEND_SIGNALED;
	if (op == X_CMP_SWP)
		ibv_wr_atomic_cmp_swp(x->qpx, rkey, raddr, a, b);
	else if (op == X_FETCH_ADD)
		ibv_wr_atomic_fetch_add(x->qpx, rkey, raddr, a);
	else
		ibv_wr_atomic_write(x->qpx, rkey, raddr, &a);
	if (op != X_ATOMIC_WRITE)
		ibv_wr_set_sge(x->qpx, self->dst_mr->lkey, (uintptr_t)res, 8);
	ret = ibv_wr_complete(x->qpx);
	if (ret)
		return -ret;
	for (i = 0; i < 5000; i++) {
		n = ibv_poll_cq(x->cq[0], 1, &wc);
		if (n < 0)
			return -EIO;
		if (n)
			break;
		usleep(1000);
	}
	if (!n)
		return -ETIMEDOUT;
	if (orig)
		*orig = *res;
	if (wc.status != IBV_WC_SUCCESS) {
		xpair_close(x);
		ret = xpair_open(self, x);
		if (ret)
			return -ret;
	}
	return wc.status;
}

/*
 * An unaligned CMP_SWP or FETCH_ADD reaching the responder: the status a
 * normal MR gives (IBV_WC_REM_INV_REQ_ERR, rxe's misaligned-atomic NAK),
 * memory unchanged; on a VA MR with iova == addr and with another iova.
 * Through ibv_post_send() the provider refuses it first (EINVAL).
 */
TEST_F(edge, atomic_unaligned)
{
	static const enum xop ops[] = { X_CMP_SWP, X_FETCH_ADD };
	static const size_t off[] = { 64 + 4, PAGE - 9 };
	uint8_t *m = map_anon(3 * PAGE), *w;
	struct ibv_mr *mr[3];
	struct xpair x;
	int i, j, k, st, ret;

	NEED_VA();
	ASSERT_NE(NULL, m);
	memset(m, BG, 3 * PAGE);
	mr[0] = ibv_reg_mr(self->pair.pd, m, PAGE, ACC_REMOTE);
	mr[1] = ibv_reg_mr(self->pair.pd, m + PAGE, PAGE, ACC_VA);
	mr[2] = ibv_reg_mr_iova2(self->pair.pd, m + 2 * PAGE, PAGE, 0x100000, ACC_VA);
	ASSERT_TRUE(mr[0] && mr[1] && mr[2]);
	st = peer_atomic(self, IBV_WR_ATOMIC_FETCH_AND_ADD, (uintptr_t)m + PAGE + 4, mr[1]->rkey,
			 1, 0, NULL);
	TH_LOG("unaligned FETCH_ADD through ibv_post_send(): %s",
	       st >= 0 ? ibv_wc_status_str(st) : strerror(-st));
	EXPECT_TRUE(st == -EINVAL || st == IBV_WC_REM_INV_REQ_ERR);
	ASSERT_EQ(0, recover_after(self, st > 0 ? st : 0));
	ret = xpair_open(self, &x);
	ASSERT_EQ(0, ret) TH_LOG("QPs for ibv_wr_*(): %s", strerror(ret));
	for (i = 0; i < 3; i++)
		for (k = 0; k < 2; k++)
			for (j = 0; j < 2; j++) {
				uint64_t raddr = (i == 2 ? 0x100000 : (uintptr_t)m + i * PAGE) + off[j];

				w = m + i * PAGE + off[j];
				st = x_atomic(self, &x, ops[k], raddr, mr[i]->rkey,
					      0x5a5a5a5a5a5a5a5aull, 1, NULL);
				TH_LOG("%s MR%s, %s at offset %zu: %s", i ? "VA" : "normal",
				       i == 2 ? " (iova)" : "", k ? "FETCH_ADD" : "CMP_SWP", off[j],
				       st >= 0 ? ibv_wc_status_str(st) : strerror(-st));
				EXPECT_EQ(IBV_WC_REM_INV_REQ_ERR, st);
				ASSERT_LE(0, st);
				EXPECT_EQ(-1, first_not_bg(w - 8, 16));
			}
	/* The pair works: an aligned atomic on each MR. */
	for (i = 0; i < 3; i++) {
		uint64_t orig = 0, raddr = (i == 2 ? 0x100000 : (uintptr_t)m + i * PAGE) + 64;

		st = x_atomic(self, &x, X_FETCH_ADD, raddr, mr[i]->rkey, 1, 0, &orig);
		EXPECT_EQ(IBV_WC_SUCCESS, st);
		EXPECT_EQ(0x5a5a5a5a5a5a5a5aull, orig);
		EXPECT_EQ(0x5a5a5a5a5a5a5a5bull, *(uint64_t *)(m + i * PAGE + 64));
	}
	xpair_close(&x);
	for (i = 0; i < 3; i++)
		EXPECT_EQ(0, ibv_dereg_mr(mr[i]));
	munmap(m, 3 * PAGE);
}

/*
 * ATOMIC_WRITE on a VA MR (if the provider offers it): at the last 8 bytes
 * after that page was replaced (the new page gets the value), unaligned
 * (IBV_WC_REM_INV_REQ_ERR, as a normal MR), past the end and straddling it
 * (remote access error), on a read-only mapping (remote access error, page
 * unchanged). Nothing outside moves.
 */
TEST_F(edge, atomic_write)
{
	uint8_t *m = map_anon(5 * PAGE), *base;
	size_t len = 2 * PAGE;
	struct ibv_mr *mr, *nmr, *romr;
	uint64_t *last;
	struct xpair x;
	int st, ret;

	NEED_VA();
	ASSERT_NE(NULL, m);
	memset(m, BG, 5 * PAGE);
	base = m + PAGE;
	mr = ibv_reg_mr(self->pair.pd, base, len, ACC_VA);
	nmr = ibv_reg_mr(self->pair.pd, m + 4 * PAGE, PAGE, ACC_REMOTE);
	ASSERT_TRUE(mr && nmr);
	ret = xpair_open(self, &x);
	ASSERT_EQ(0, ret) TH_LOG("QPs for ibv_wr_*(): %s", strerror(ret));
	if (!x.atomic_write) {
		xpair_close(&x);
		ibv_dereg_mr(mr);
		ibv_dereg_mr(nmr);
		SKIP(return, "the provider has no ATOMIC_WRITE (ibv_create_qp_ex refused it)");
	}
	ASSERT_EQ(0, munmap(base + PAGE, PAGE));
	ASSERT_EQ(0, remap_fixed(base + PAGE, PAGE));
	memset(base + PAGE, BG, PAGE);
	last = (uint64_t *)(base + len - 8);
	st = x_atomic(self, &x, X_ATOMIC_WRITE, (uintptr_t)last, mr->rkey, 0x1122334455667788ull,
		      0, NULL);
	ASSERT_EQ(IBV_WC_SUCCESS, st) TH_LOG("ATOMIC_WRITE at the last word: %d", st);
	EXPECT_EQ(0x1122334455667788ull, *last);
	*last = 0x5a5a5a5a5a5a5a5aull;

	st = x_atomic(self, &x, X_ATOMIC_WRITE, (uintptr_t)base + 12, mr->rkey, 1, 0, NULL);
	TH_LOG("unaligned ATOMIC_WRITE, VA MR: %s", st >= 0 ? ibv_wc_status_str(st) : strerror(-st));
	ret = x_atomic(self, &x, X_ATOMIC_WRITE, (uintptr_t)m + 4 * PAGE + 12, nmr->rkey, 1, 0,
		       NULL);
	TH_LOG("unaligned ATOMIC_WRITE, normal MR: %s",
	       ret >= 0 ? ibv_wc_status_str(ret) : strerror(-ret));
	EXPECT_EQ(IBV_WC_REM_INV_REQ_ERR, st);
	EXPECT_EQ(ret, st);
	st = x_atomic(self, &x, X_ATOMIC_WRITE, (uintptr_t)base + len, mr->rkey, 1, 0, NULL);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, st) TH_LOG("past the end: %d", st);
	st = x_atomic(self, &x, X_ATOMIC_WRITE, (uintptr_t)base + len - 4, mr->rkey, 1, 0, NULL);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, st) TH_LOG("straddling the end: %d", st);
	EXPECT_EQ(-1, first_not_bg(m, 5 * PAGE));

	/* A read-only mapping under the VA MR: refused, the page unchanged. */
	ASSERT_EQ(0, mprotect(base, PAGE, PROT_READ));
	romr = ibv_reg_mr(self->pair.pd, base, PAGE, ACC_VA);
	ASSERT_NE(NULL, romr) TH_LOG("VA MR over a read-only page: %s", strerror(errno));
	st = x_atomic(self, &x, X_ATOMIC_WRITE, (uintptr_t)base + 64, romr->rkey, 1, 0, NULL);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, st) TH_LOG("read-only page, new MR: %d", st);
	st = x_atomic(self, &x, X_ATOMIC_WRITE, (uintptr_t)base + 64, mr->rkey, 1, 0, NULL);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, st) TH_LOG("read-only page, older MR: %d", st);
	EXPECT_EQ(-1, first_not_bg(m, 5 * PAGE));
	xpair_close(&x);
	EXPECT_EQ(0, ibv_dereg_mr(romr));
	EXPECT_EQ(0, ibv_dereg_mr(mr));
	EXPECT_EQ(0, ibv_dereg_mr(nmr));
	munmap(m, 5 * PAGE);
}

/*
 * Atomics at the last 8 bytes of a VA MR whose last page was munmapped and
 * mapped again after registration (a new page the CPU wrote), 8 bytes
 * straddling the end (remote access error), the aligned word past the end.
 */
TEST_F(edge, atomic_last_word_after_remap)
{
	uint8_t *m = map_anon(4 * PAGE);
	size_t len = 2 * PAGE;
	uint8_t *base;
	uint64_t *last, orig = 0, iova = 0x200000;
	struct ibv_mr *mr[2];
	struct xpair x;
	int i, st;

	NEED_VA();
	ASSERT_NE(NULL, m);
	memset(m, BG, 4 * PAGE);
	base = m + PAGE;
	mr[0] = ibv_reg_mr(self->pair.pd, base, len, ACC_VA);
	mr[1] = ibv_reg_mr_iova2(self->pair.pd, base, len, iova, ACC_VA);
	ASSERT_TRUE(mr[0] && mr[1]);
	ASSERT_EQ(0, xpair_open(self, &x));
	ASSERT_EQ(0, munmap(base + PAGE, PAGE));
	ASSERT_EQ(0, remap_fixed(base + PAGE, PAGE));
	memset(base + PAGE, BG, PAGE);
	last = (uint64_t *)(base + len - 8);
	for (i = 0; i < 2; i++) {
		uint64_t at = i ? iova : (uintptr_t)base;

		*last = 1000;
		st = peer_atomic(self, IBV_WR_ATOMIC_FETCH_AND_ADD, at + len - 8, mr[i]->rkey, 5, 0,
				 &orig);
		ASSERT_EQ(IBV_WC_SUCCESS, st) TH_LOG("FETCH_ADD at the last word: %d", st);
		EXPECT_EQ(1000ull, orig);
		EXPECT_EQ(1005ull, *last);
		st = peer_atomic(self, IBV_WR_ATOMIC_CMP_AND_SWP, at + len - 8, mr[i]->rkey, 1005,
				 77, &orig);
		ASSERT_EQ(IBV_WC_SUCCESS, st) TH_LOG("CMP_SWP at the last word: %d", st);
		EXPECT_EQ(1005ull, orig);
		EXPECT_EQ(77ull, *last);
		/* A compare that fails leaves the word. */
		st = peer_atomic(self, IBV_WR_ATOMIC_CMP_AND_SWP, at + len - 8, mr[i]->rkey, 1, 2,
				 &orig);
		ASSERT_EQ(IBV_WC_SUCCESS, st);
		EXPECT_EQ(77ull, orig);
		EXPECT_EQ(77ull, *last);
		*last = 0x5a5a5a5a5a5a5a5aull;

		/* 8 bytes straddling the end: 4 in, 4 out (ibv_wr_*(): see xpair). */
		st = x_atomic(self, &x, X_FETCH_ADD, at + len - 4, mr[i]->rkey, 1, 0, NULL);
		EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, st) TH_LOG("straddling the end: %d", st);
		/* The aligned word past the end. */
		st = peer_atomic(self, IBV_WR_ATOMIC_FETCH_AND_ADD, at + len, mr[i]->rkey, 1, 0,
				 NULL);
		EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, st) TH_LOG("past the end: %d", st);
		ASSERT_EQ(0, recover_after(self, st));
		st = peer_atomic(self, IBV_WR_ATOMIC_CMP_AND_SWP, at - 8, mr[i]->rkey, BG, 0, NULL);
		EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, st) TH_LOG("before the start: %d", st);
		ASSERT_EQ(0, recover_after(self, st));
		EXPECT_EQ(-1, first_not_bg(m, 4 * PAGE));
	}
	xpair_close(&x);
	for (i = 0; i < 2; i++)
		EXPECT_EQ(0, ibv_dereg_mr(mr[i]));
	munmap(m, 4 * PAGE);
}

/*
 * The uverbs REREG_MR command as a provider issues it (rdma-core 44's rxe
 * provider has no rereg_mr: ibv_rereg_mr() answers EOPNOTSUPP in user space
 * whatever the MR); see rdma_va.c, cmd_rereg(). Returns 0 or an errno.
 */
struct edge_verbs_mr {
	struct ibv_mr ibv_mr;
	int mr_type;
	int access;
};

struct edge_rereg_cmd {
	struct ib_uverbs_cmd_hdr hdr;
	struct ib_uverbs_rereg_mr core;
};

int ibv_cmd_rereg_mr(struct edge_verbs_mr *vmr, uint32_t flags, void *addr, size_t length,
		     uint64_t hca_va, int access, struct ibv_pd *pd, struct edge_rereg_cmd *cmd,
		     size_t cmd_sz, struct ib_uverbs_rereg_mr_resp *resp, size_t resp_sz);

static int cmd_rereg(struct ibv_mr *mr, uint32_t flags, void *addr, size_t len, int access,
		     struct ibv_pd *pd)
{
	struct edge_rereg_cmd cmd;
	struct ib_uverbs_rereg_mr_resp resp;

	memset(&cmd, 0, sizeof(cmd));
	memset(&resp, 0, sizeof(resp));
	return ibv_cmd_rereg_mr((struct edge_verbs_mr *)mr, flags, addr, len, (uintptr_t)addr,
				access, pd, &cmd, sizeof(cmd), &resp, sizeof(resp));
}

/* The MR still works as registered: a WRITE and a READ through its rkey. */
static void mr_works(struct __test_metadata *_metadata, FIXTURE_DATA(edge) *self,
		     struct ibv_mr *mr, uint8_t *base, size_t len, uint64_t seed)
{
	int st = peer_write(self, (uintptr_t)base, mr->rkey, len, seed);

	ASSERT_EQ(IBV_WC_SUCCESS, st) TH_LOG("write through the MR: %d", st);
	EXPECT_EQ((size_t)-1, pattern_check(base, len, seed, 0));
	st = peer_read(self, (uintptr_t)base, mr->rkey, len);
	ASSERT_EQ(IBV_WC_SUCCESS, st) TH_LOG("read through the MR: %d", st);
	EXPECT_EQ((size_t)-1, pattern_check(self->dst, len, seed, 0));
}

/*
 * Every flag combination of ibv_rereg_mr() on a VA MR: refused with
 * EOPNOTSUPP but for a PD change, and after each refusal the MR (keys,
 * range, VA semantics) is as it was. Turning the VA bit off by an access
 * change is refused too. A PD change moves the MR: the old PD's QPs get a
 * remote access error, back in the old PD it works again.
 */
TEST_F(edge, rereg_every_flag_on_va_mr)
{
	static const struct {
		uint32_t flags;
		int access;
		const char *name;
	} cases[] = {
		{ IBV_REREG_MR_CHANGE_TRANSLATION, 0, "TRANS" },
		{ IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD, 0, "TRANS|PD" },
		{ IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS, ACC_VA,
		  "TRANS|ACCESS" },
		{ IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS, ACC_VA, "PD|ACCESS" },
		{ IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD |
		  IBV_REREG_MR_CHANGE_ACCESS, ACC_VA, "TRANS|PD|ACCESS" },
		{ IBV_REREG_MR_CHANGE_ACCESS, ACC_VA, "ACCESS (same)" },
		{ IBV_REREG_MR_CHANGE_ACCESS, ACC_REMOTE, "ACCESS (VA bit off)" },
		{ IBV_REREG_MR_CHANGE_ACCESS, IBV_ACCESS_LOCAL_WRITE | VAMR_ACCESS_VA,
		  "ACCESS (less)" },
	};
	uint8_t *m = map_anon(8 * PAGE), *base;
	struct vamr_mr_query q;
	struct ibv_mr *mr;
	struct ibv_pd *pd2;
	uint32_t lkey, rkey;
	int fd = vamr_open(), ret, st;
	size_t i;

	NEED_VA();
	ASSERT_NE(NULL, m);
	ASSERT_LE(0, fd);
	base = m + PAGE;
	mr = ibv_reg_mr(self->pair.pd, base, 2 * PAGE, ACC_VA);
	ASSERT_NE(NULL, mr);
	lkey = mr->lkey;
	rkey = mr->rkey;
	pd2 = ibv_alloc_pd(self->pair.ctx);
	ASSERT_NE(NULL, pd2);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		/* TRANS to another range: 4 pages further. */
		ret = cmd_rereg(mr, cases[i].flags, m + 4 * PAGE, PAGE, cases[i].access, pd2);
		EXPECT_EQ(EOPNOTSUPP, ret) TH_LOG("rereg %s of a VA MR: %s", cases[i].name,
						  strerror(ret));
		EXPECT_EQ(lkey, mr->lkey);
		EXPECT_EQ(rkey, mr->rkey);
		mr_works(_metadata, self, mr, base, 2 * PAGE, 20 + i);
		/* Still a VA MR over the same range, following a remap. */
		q = vamr_mr_query_of(mr);
		ASSERT_EQ(0, vamr_ioctl(fd, VAMR_IOC_MR_QUERY, &q));
		EXPECT_EQ((uintptr_t)base, q.addr);
		EXPECT_EQ(2 * PAGE, q.len);
		ASSERT_EQ(0, remap_fixed(base, 2 * PAGE));
		mr_works(_metadata, self, mr, base, 2 * PAGE, 40 + i);
	}
	/* PD alone: allowed; the old PD's QPs lose access, then get it back. */
	ret = cmd_rereg(mr, IBV_REREG_MR_CHANGE_PD, NULL, 0, 0, pd2);
	ASSERT_EQ(0, ret) TH_LOG("rereg PD: %s", strerror(ret));
	memset(base, BG, 2 * PAGE);
	st = peer_write(self, (uintptr_t)base, mr->rkey, 64, 60);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, st) TH_LOG("write from a QP of the old PD: %d", st);
	ASSERT_EQ(0, recover_after(self, st));
	EXPECT_EQ(-1, first_not_bg(base, 2 * PAGE));
	ret = cmd_rereg(mr, IBV_REREG_MR_CHANGE_PD, NULL, 0, 0, self->pair.pd);
	ASSERT_EQ(0, ret) TH_LOG("rereg PD back: %s", strerror(ret));
	mr_works(_metadata, self, mr, base, 2 * PAGE, 61);
	EXPECT_EQ(0, ibv_dereg_mr(mr));
	EXPECT_EQ(0, ibv_dealloc_pd(pd2));
	close(fd);
	munmap(m, 8 * PAGE);
}

/* Bind a type 1 window (ibv_bind_mw) or a type 2 window (a BIND_MW WR) on @side. */
static int bind_mw(FIXTURE_DATA(edge) *self, int side, struct ibv_mw *mw, struct ibv_mr *mr,
		   void *addr, size_t len, uint32_t *rkey)
{
	struct ibv_mw_bind_info info = {
		.mr = mr,
		.addr = (uintptr_t)addr,
		.length = len,
		.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
	};
	struct ibv_wc wc;
	int st;

	if (mw->type == IBV_MW_TYPE_1) {
		struct ibv_mw_bind b = { .wr_id = 5, .send_flags = IBV_SEND_SIGNALED,
					 .bind_info = info };

		if (ibv_bind_mw(self->pair.qp[side], mw, &b))
			return -errno;
	} else {
		struct ibv_send_wr wr, *bad;

		memset(&wr, 0, sizeof(wr));
		wr.wr_id = 5;
		wr.opcode = IBV_WR_BIND_MW;
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.bind_mw.mw = mw;
		wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
		wr.bind_mw.bind_info = info;
		if (ibv_post_send(self->pair.qp[side], &wr, &bad))
			return -errno;
		mw->rkey = wr.bind_mw.rkey;
	}
	st = rdma_pair_wait_send(&self->pair, side, WC_WAIT_MS, &wc);
	*rkey = mw->rkey;
	return st;
}

/*
 * A window bound to a VA MR, then the MR's memory remapped: WRITE and READ
 * through the window's rkey reach the new pages, and stay inside the window.
 * ibv_dereg_mr() of the MR with the window bound fails as it does for a
 * normal MR, and the MR keeps working; after the window is gone the MR
 * deregisters.
 */
static void mw_row(struct __test_metadata *_metadata, FIXTURE_DATA(edge) *self,
		   enum ibv_mw_type type)
{
	uint8_t *m = map_anon(6 * PAGE), *base, *win;
	struct ibv_mr *mr, *nmr;
	struct ibv_mw *mw, *nmw;
	uint32_t rkey, nrkey;
	/* Type 2 windows are used through the QP that bound them: the responder, side 1. */
	int side = type == IBV_MW_TYPE_2 ? 1 : 0;
	int st, ret, nret;

	ASSERT_NE(NULL, m);
	memset(m, BG, 6 * PAGE);
	base = m + PAGE;
	win = base + PAGE + 16;
	mr = ibv_reg_mr(self->pair.pd, base, 3 * PAGE, ACC_VA | IBV_ACCESS_MW_BIND);
	ASSERT_NE(NULL, mr) TH_LOG("VA MR with MW_BIND: %s", strerror(errno));
	mw = ibv_alloc_mw(self->pair.pd, type);
	if (!mw) {
		ibv_dereg_mr(mr);
		SKIP(return, "ibv_alloc_mw(type %d): %s", type, strerror(errno));
	}
	st = bind_mw(self, side, mw, mr, win, PAGE, &rkey);
	ASSERT_EQ(IBV_WC_SUCCESS, st) TH_LOG("bind: %d", st);

	st = peer_write(self, (uintptr_t)win, rkey, PAGE, 70);
	ASSERT_EQ(IBV_WC_SUCCESS, st) TH_LOG("write through the window: %d", st);
	EXPECT_EQ((size_t)-1, pattern_check(win, PAGE, 70, 0));
	/* Remap the MR's pages: the window follows. */
	ASSERT_EQ(0, munmap(base, 3 * PAGE));
	ASSERT_EQ(0, remap_fixed(base, 3 * PAGE));
	memset(base, BG, 3 * PAGE);
	st = peer_write(self, (uintptr_t)win, rkey, PAGE, 71);
	ASSERT_EQ(IBV_WC_SUCCESS, st) TH_LOG("write through the window after a remap: %d", st);
	EXPECT_EQ((size_t)-1, pattern_check(win, PAGE, 71, 0));
	EXPECT_EQ(-1, first_not_bg(base, win - base));
	EXPECT_EQ(-1, first_not_bg(win + PAGE, base + 3 * PAGE - win - PAGE));
	pattern_fill(win, PAGE, 72, 0);
	st = peer_read(self, (uintptr_t)win, rkey, PAGE);
	ASSERT_EQ(IBV_WC_SUCCESS, st) TH_LOG("read through the window: %d", st);
	EXPECT_EQ((size_t)-1, pattern_check(self->dst, PAGE, 72, 0));
	/*
	 * Past the window but inside the MR: refused as an rkey violation
	 * (patches/rxe/0012; the stock rxe checked only the MR's range and let
	 * this WRITE through), and nothing changes, neither the window's last
	 * bytes nor the MR's bytes after it. The same for a READ that starts
	 * before the window.
	 */
	st = peer_write(self, (uintptr_t)win + PAGE - 4, rkey, 8, 73);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, st)
		TH_LOG("write past a type %d window, inside the MR: %s", type,
		       st >= 0 ? ibv_wc_status_str(st) : strerror(-st));
	ASSERT_EQ(0, recover_after(self, st));
	EXPECT_EQ((size_t)-1, pattern_check(win, PAGE, 72, 0));
	EXPECT_EQ(-1, first_not_bg(win + PAGE, base + 3 * PAGE - win - PAGE));
	st = peer_read(self, (uintptr_t)win - 8, rkey, 16);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, st)
		TH_LOG("read from before a type %d window: %s", type,
		       st >= 0 ? ibv_wc_status_str(st) : strerror(-st));
	ASSERT_EQ(0, recover_after(self, st));
	EXPECT_EQ(-1, first_not_bg(m, PAGE));
	EXPECT_EQ(-1, first_not_bg(base + 3 * PAGE, PAGE));

	/* The reference: the same on a normal MR. */
	nmr = ibv_reg_mr(self->pair.pd, m + 5 * PAGE, PAGE, ACC_REMOTE | IBV_ACCESS_MW_BIND);
	ASSERT_NE(NULL, nmr);
	nmw = ibv_alloc_mw(self->pair.pd, type);
	ASSERT_NE(NULL, nmw);
	st = bind_mw(self, side, nmw, nmr, m + 5 * PAGE, PAGE, &nrkey);
	ASSERT_EQ(IBV_WC_SUCCESS, st);
	nret = ibv_dereg_mr(nmr);
	ret = ibv_dereg_mr(mr);
	TH_LOG("dereg with a type %d window bound: normal MR %s, VA MR %s", type,
	       strerror(nret), strerror(ret));
	EXPECT_NE(0, nret);
	EXPECT_EQ(nret, ret);
	if (ret)
		mr_works(_metadata, self, mr, base, 3 * PAGE, 74);
	/* The window still works too. */
	if (ret) {
		st = peer_write(self, (uintptr_t)win, rkey, 64, 75);
		EXPECT_EQ(IBV_WC_SUCCESS, st);
		EXPECT_EQ((size_t)-1, pattern_check(win, 64, 75, 0));
	}
	/* The window gone, the MRs deregister; its rkey is refused. */
	EXPECT_EQ(0, ibv_dealloc_mw(mw));
	EXPECT_EQ(0, ibv_dealloc_mw(nmw));
	memset(base, BG, 3 * PAGE);
	st = peer_write(self, (uintptr_t)win, rkey, 64, 76);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, st) TH_LOG("write through a deallocated window: %d", st);
	ASSERT_EQ(0, recover_after(self, st));
	EXPECT_EQ(-1, first_not_bg(base, 3 * PAGE));
	if (ret)
		EXPECT_EQ(0, ibv_dereg_mr(mr));
	if (nret)
		EXPECT_EQ(0, ibv_dereg_mr(nmr));
	munmap(m, 6 * PAGE);
}

TEST_F(edge, mw_type1_follows_remap)
{
	NEED_VA();
	mw_row(_metadata, self, IBV_MW_TYPE_1);
}

TEST_F(edge, mw_type2_follows_remap)
{
	NEED_VA();
	mw_row(_metadata, self, IBV_MW_TYPE_2);
}

/* 0 or the errno of registering @len bytes at @a with @access; *@mr when 0. */
static int try_reg(FIXTURE_DATA(edge) *self, void *a, size_t len, unsigned int access,
		   struct ibv_mr **mr)
{
	*mr = ibv_reg_mr_iova2(self->pair.pd, a, len, (uintptr_t)a, access);
	return *mr ? 0 : errno;
}

/*
 * The VA bit with other access bits. Patched rxe: with ON_DEMAND EINVAL,
 * with FLUSH_PERSISTENT EOPNOTSUPP (documented); with anything else the same
 * answer as a normal MR with those bits, and when registered it is a VA MR
 * that works. Stock rxe (the bit in the optional range, ignored): exactly a
 * normal MR's answer, a normal MR.
 */
TEST_F(edge, flags_with_va_bit)
{
	static const struct {
		unsigned int bits;
		const char *name;
		int patched;	/* the patched rxe's answer, -1: a normal MR's */
	} cases[] = {
		{ 0, "none", -1 },
		{ IBV_ACCESS_ON_DEMAND, "ON_DEMAND", EINVAL },
		{ IBV_ACCESS_HUGETLB, "HUGETLB", -1 },
		{ IBV_ACCESS_ZERO_BASED, "ZERO_BASED", -1 },
		{ ACC_FLUSH_GLOBAL, "FLUSH_GLOBAL", -1 },
		{ ACC_FLUSH_PERSISTENT, "FLUSH_PERSISTENT", EOPNOTSUPP },
		{ IBV_ACCESS_RELAXED_ORDERING, "RELAXED_ORDERING", -1 },
		{ 1u << 25, "optional bit 25", -1 },
		{ 1u << 15, "unknown bit 15", -1 },
		{ IBV_ACCESS_MW_BIND, "MW_BIND", -1 },
	};
	uint8_t *m = map_anon(2 * PAGE);
	int fd = self->va ? vamr_open() : -1;
	size_t i;

	ASSERT_NE(NULL, m);
	if (self->va)
		ASSERT_LE(0, fd);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct ibv_mr *nmr, *mr;
		int nerr = try_reg(self, m, PAGE, ACC_REMOTE | cases[i].bits, &nmr);
		int err = try_reg(self, m + PAGE, PAGE, ACC_VA | cases[i].bits, &mr);
		int want = self->va && cases[i].patched >= 0 ? cases[i].patched : nerr;

		TH_LOG("%-18s normal MR: %-24s VA bit: %s", cases[i].name,
		       nerr ? strerror(nerr) : "registered", err ? strerror(err) : "registered");
		EXPECT_EQ(want, err) TH_LOG("%s with the VA bit: %s, want %s", cases[i].name,
					    strerror(err), strerror(want));
		if (mr) {
			struct vamr_mr_query q = vamr_mr_query_of(mr);

			if (self->va)
				EXPECT_EQ(0, vamr_ioctl(fd, VAMR_IOC_MR_QUERY, &q))
					TH_LOG("%s: not a VA MR", cases[i].name);
			memset(m + PAGE, BG, PAGE);
			/*
			 * The stock rxe made an ODP MR of it: its data path is
			 * rdma_va's (odp-stock column), not this test's.
			 */
			if (!self->va && (cases[i].bits & IBV_ACCESS_ON_DEMAND)) {
				EXPECT_EQ(0, ibv_dereg_mr(mr));
				if (nmr)
					EXPECT_EQ(0, ibv_dereg_mr(nmr));
				continue;
			}
			mr_works(_metadata, self, mr, m + PAGE, PAGE, 80 + i);
			if (self->va) {
				/* VA semantics: the CPU's new page is what the peer reads. */
				ASSERT_EQ(0, remap_fixed(m + PAGE, PAGE));
				mr_works(_metadata, self, mr, m + PAGE, PAGE, 90 + i);
			}
			EXPECT_EQ(0, ibv_dereg_mr(mr));
		}
		if (nmr)
			EXPECT_EQ(0, ibv_dereg_mr(nmr));
	}
	if (fd >= 0)
		close(fd);
	munmap(m, 2 * PAGE);
}

#define RACE_ROUNDS 200
#define RACE_LEN (16 * PAGE)
/* The MR's first half is READ (a fixed pattern), its second half WRITE slots. */
/*
 * A WRITE of two pages is two packets or more: the responder holds the MR from
 * the first to the last, so a deregistration between them is seen by the copy
 * of a later packet.
 */
#define RACE_SLOT (2 * PAGE)

struct race {
	FIXTURE_DATA(edge) *self;
	uint8_t *mem;
	uint32_t rkey, lkey;
	bool local;			/* the VA MR is the local side (lkey) */
	_Atomic int deregistered;	/* ibv_dereg_mr() returned */
	_Atomic unsigned long completed;	/* completions seen so far */
	int last_bad_status;
	/* Results of the posting thread for one round. */
	unsigned long ok, errors, after;
	int bad_status, timeouts, bad_data, recover_failed;
};

/* ibv_cmd_dereg_mr() of libibverbs (IBVERBS_PRIVATE_34), on an MR known by its handle. */
int ibv_cmd_dereg_mr(struct edge_verbs_mr *vmr);

/* What a child reports about the VA MR it registered on the parent's context. */
struct child_mr {
	int err;
	uint32_t handle, lkey, rkey;
	long vmpin_kb;
};

/*
 * VA MRs across processes sharing one uverbs context (fork):
 * - the child deregisters the parent's VA MR: the charge goes back to the
 *   parent's mm (VmPin), the rkey is dead for the peer;
 * - the child registers a VA MR over its own memory and exits: an access
 *   through its rkey fails (the region's address space is gone) and never
 *   reaches the parent's memory at the same address; the parent
 *   deregisters it; the parent's VmPin and vamr's global counters are back.
 */
TEST_F(edge, va_mr_across_fork)
{
	uint8_t *a = map_anon(4 * PAGE), *b = map_anon(4 * PAGE);
	struct edge_verbs_mr vmr;
	struct vamr_stats g0, g1;
	struct child_mr cm;
	long pin0 = vamr_vmpin_kb();
	struct ibv_mr *mr;
	int fd = vamr_open(), pfd[2], status, st;
	pid_t pid;

	NEED_VA();
	ASSERT_NE(NULL, a);
	ASSERT_NE(NULL, b);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, vamr_stats(fd, VAMR_STATS_GLOBAL, &g0));
	memset(a, BG, 4 * PAGE);
	memset(b, BG, 4 * PAGE);

	/* The child deregisters the parent's MR. */
	mr = ibv_reg_mr(self->pair.pd, a, 4 * PAGE, ACC_VA);
	ASSERT_NE(NULL, mr);
	EXPECT_EQ(pin0 + 16, vamr_vmpin_kb());
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid)
		_exit(ibv_dereg_mr(mr));
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status));
	TH_LOG("ibv_dereg_mr() of the parent's VA MR in the child: %s",
	       strerror(WEXITSTATUS(status)));
	if (WEXITSTATUS(status) == 0) {
		EXPECT_EQ(pin0, vamr_vmpin_kb()) TH_LOG("the parent's charge after the child's dereg");
		st = peer_write(self, (uintptr_t)a, mr->rkey, 64, 50);
		EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, st);
		ASSERT_EQ(0, recover_after(self, st));
		EXPECT_EQ(-1, first_not_bg(a, 4 * PAGE));
		EXPECT_NE(0, ibv_dereg_mr(mr));	/* gone already: libibverbs keeps its struct */
	} else {
		mr_works(_metadata, self, mr, a, 4 * PAGE, 51);
		EXPECT_EQ(0, ibv_dereg_mr(mr));
		EXPECT_EQ(pin0, vamr_vmpin_kb());
	}

	/* The child registers over its own copy of b and exits. */
	ASSERT_EQ(0, pipe(pfd));
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		struct ibv_mr *cmr;

		memset(&cm, 0, sizeof(cm));
		memset(b, 0x33, 4 * PAGE);	/* the child's pages, not the parent's */
		cmr = ibv_reg_mr(self->pair.pd, b, 4 * PAGE, ACC_VA);
		if (!cmr) {
			cm.err = errno;
		} else {
			cm.handle = cmr->handle;
			cm.lkey = cmr->lkey;
			cm.rkey = cmr->rkey;
		}
		cm.vmpin_kb = vamr_vmpin_kb();
		if (write(pfd[1], &cm, sizeof(cm)) != sizeof(cm))
			_exit(1);
		_exit(0);
	}
	close(pfd[1]);
	ASSERT_EQ((ssize_t)sizeof(cm), read(pfd[0], &cm, sizeof(cm)));
	close(pfd[0]);
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_EQ(0, cm.err) TH_LOG("VA MR in the child: %s", strerror(cm.err));
	TH_LOG("the child's VmPin with its MR: %ld kB; the parent's %ld kB", cm.vmpin_kb,
	       vamr_vmpin_kb());
	EXPECT_EQ(pin0, vamr_vmpin_kb());
	/* The child is gone: its MR reaches nothing, least of all the parent's b. */
	st = peer_write(self, (uintptr_t)b, cm.rkey, 64, 52);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, st) TH_LOG("write through the exited child's MR: %d", st);
	ASSERT_EQ(0, recover_after(self, st));
	st = peer_read(self, (uintptr_t)b, cm.rkey, 64);
	EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, st) TH_LOG("read through the exited child's MR: %d", st);
	EXPECT_EQ(0xee, self->dst[0]);
	ASSERT_EQ(0, recover_after(self, st));
	EXPECT_EQ(-1, first_not_bg(b, 4 * PAGE)) TH_LOG("the parent's memory changed");
	/* The parent deregisters it by its handle. */
	memset(&vmr, 0, sizeof(vmr));
	vmr.ibv_mr.context = self->pair.ctx;
	vmr.ibv_mr.pd = self->pair.pd;
	vmr.ibv_mr.handle = cm.handle;
	vmr.ibv_mr.lkey = cm.lkey;
	vmr.ibv_mr.rkey = cm.rkey;
	vmr.mr_type = 0;	/* IBV_MR_TYPE_MR */
	EXPECT_EQ(0, ibv_cmd_dereg_mr(&vmr));
	EXPECT_EQ(pin0, vamr_vmpin_kb());
	ASSERT_EQ(0, vamr_stats(fd, VAMR_STATS_GLOBAL, &g1));
	EXPECT_EQ(g0.counters.regions, g1.counters.regions);
	EXPECT_EQ(g0.counters.pages_pinned, g1.counters.pages_pinned);
	close(fd);
	munmap(a, 4 * PAGE);
	munmap(b, 4 * PAGE);
}

/* WRs the posting thread keeps in flight: RACE_BATCH / 2 WRITEs and as many READs. */
#define RACE_BATCH 8
/* The peer's fixed page (pattern 7) that READs into a local VA MR read. */
#define RACE_SRC_PAGE (PEER_LEN - PAGE)

/*
 * The posting thread: batches of RACE_BATCH WRs through the rkey, WRITEs (a
 * fresh pattern each, from its own part of src into its own slot of the MR's
 * second half) and READs (of the MR's first page, fixed, into their own page
 * of dst), all in flight together, then every completion. Every successful
 * WRITE's slot holds its pattern, every successful READ returned the page.
 * Ends after an error completion once the MR was deregistered.
 */
static void *race_poster(void *arg)
{
	struct race *r = arg;
	FIXTURE_DATA(edge) *self = r->self;
	uint64_t seed = 1000, seeds[RACE_BATCH];
	unsigned int batches = 0;

	for (;;) {
		int dereg = atomic_load(&r->deregistered);
		int posted = 0, got, k, err = 0;

		memset(self->dst, 0xee, RACE_BATCH / 2 * PAGE);
		for (k = 0; k < RACE_BATCH; k++) {
			size_t slot = RACE_LEN / 2 + (k / 2) * RACE_SLOT;
			int ret;

			if (!(k & 1))
				seeds[k] = ++seed;
			if (r->local && (k & 1)) {
				/* READ of the peer's fixed page into the VA MR. */
				memset(r->mem + (k / 2) * PAGE, 0xee, PAGE);
				ret = rdma_pair_post_read(&self->pair, 0, k, r->mem + (k / 2) * PAGE,
							  r->lkey, (uintptr_t)self->src + RACE_SRC_PAGE,
							  self->src_mr->rkey, PAGE);
			} else if (r->local) {
				/* WRITE from the VA MR to the peer. */
				pattern_fill(r->mem + slot, RACE_SLOT, seeds[k], 0);
				ret = rdma_pair_post_write(&self->pair, 0, k, r->mem + slot, r->lkey,
							   (uintptr_t)self->dst + (k / 2) * RACE_SLOT,
							   self->dst_mr->rkey, RACE_SLOT);
			} else if (k & 1) {
				ret = rdma_pair_post_read(&self->pair, 0, k, self->dst + (k / 2) * PAGE,
							  self->dst_mr->lkey, (uintptr_t)r->mem,
							  r->rkey, PAGE);
			} else {
				pattern_fill(self->src + k * RACE_SLOT, RACE_SLOT, seeds[k], 0);
				ret = rdma_pair_post_write(&self->pair, 0, k, self->src + k * RACE_SLOT,
							   self->src_mr->lkey,
							   (uintptr_t)r->mem + slot, r->rkey, RACE_SLOT);
			}
			if (ret)
				break;
			posted++;
		}
		for (got = 0; got < posted; got++) {
			struct ibv_wc wc;
			int st = rdma_pair_wait_send(&self->pair, 0, WC_WAIT_MS, &wc);

			if (st < 0) {
				r->timeouts++;
				return NULL;
			}
			atomic_fetch_add(&r->completed, 1);
			k = (int)wc.wr_id;
			if (st != IBV_WC_SUCCESS) {
				if (st != IBV_WC_WR_FLUSH_ERR &&
				    st != (r->local ? IBV_WC_LOC_PROT_ERR : IBV_WC_REM_ACCESS_ERR)) {
					r->bad_status++;
					r->last_bad_status = st;
				}
				r->errors++;
				err = 1;
				continue;
			}
			r->ok++;
			if (dereg)
				r->after++;	/* must not happen: the key was gone */
			if (r->local && (k & 1)) {
				if (pattern_check(r->mem + (k / 2) * PAGE, PAGE, 7, 0) != (size_t)-1)
					r->bad_data++;
			} else if (r->local) {
				if (pattern_check(self->dst + (k / 2) * RACE_SLOT, RACE_SLOT, seeds[k],
						  0) != (size_t)-1)
					r->bad_data++;
			} else if (k & 1) {
				if (pattern_check(self->dst + (k / 2) * PAGE, PAGE, 7, 0) != (size_t)-1)
					r->bad_data++;
			} else if (pattern_check(r->mem + RACE_LEN / 2 + (k / 2) * RACE_SLOT, RACE_SLOT,
						 seeds[k], 0) != (size_t)-1) {
				r->bad_data++;
			}
		}
		if (err && rdma_pair_recover(&self->pair)) {
			r->recover_failed++;
			break;
		}
		if (dereg && (err || ++batches > 100000))
			break;
	}
	return NULL;
}

/*
 * @rounds rounds of: register a VA MR over mem, let race_poster() post
 * through it (as the remote side, or with @local as the local side), and
 * deregister it in the middle of the traffic. Every WR completes, no success once
 * ibv_dereg_mr() returned, every success's data right, VmPin back, nothing
 * in the kernel log.
 */
static void race_rounds(struct __test_metadata *_metadata, FIXTURE_DATA(edge) *self,
			bool local, int rounds)
{
	uint8_t *mem = map_anon(RACE_LEN);
	unsigned long ok = 0, errors = 0;
	int kfd = kmsg_open(), round;
	long pin0 = vamr_vmpin_kb();
	struct timespec d;

	ASSERT_NE(NULL, mem);
	pattern_fill(mem, PAGE, 7, 0);
	pattern_fill(self->src + RACE_SRC_PAGE, PAGE, 7, 0);
	srand(12345);
	for (round = 0; round < rounds; round++) {
		struct race r = { .self = self, .mem = mem, .local = local };
		struct ibv_mr *mr = ibv_reg_mr(self->pair.pd, mem, RACE_LEN, ACC_VA);
		unsigned long want;
		pthread_t t;
		int spins;

		ASSERT_NE(NULL, mr) TH_LOG("round %d: %s", round, strerror(errno));
		r.rkey = mr->rkey;
		r.lkey = mr->lkey;
		ASSERT_EQ(0, pthread_create(&t, NULL, race_poster, &r));
		/*
		 * In the middle of the traffic: after 1-16 completions (at most 2 s),
		 * then 0-2 ms more, so that the deregistration falls between the
		 * packets of a WRITE or READ in flight.
		 */
		want = 1 + (unsigned long)(rand() % 16);
		for (spins = 0; atomic_load(&r.completed) < want && spins < 2000; spins++)
			usleep(1000);
		d.tv_sec = 0;
		d.tv_nsec = (long)(rand() % 2000) * 1000;
		nanosleep(&d, NULL);
		ASSERT_EQ(0, ibv_dereg_mr(mr)) TH_LOG("round %d", round);
		atomic_store(&r.deregistered, 1);
		ASSERT_EQ(0, pthread_join(t, NULL));
		ASSERT_EQ(0, r.timeouts) TH_LOG("round %d: a WR never completed", round);
		ASSERT_EQ(0, r.recover_failed) TH_LOG("round %d", round);
		EXPECT_EQ(0, r.bad_status) TH_LOG("round %d: unexpected status %s", round,
						  ibv_wc_status_str(r.last_bad_status));
		EXPECT_EQ(0, r.bad_data) TH_LOG("round %d: a success with wrong data", round);
		EXPECT_EQ(0ul, r.after) TH_LOG("round %d: success after dereg returned", round);
		ok += r.ok;
		errors += r.errors;
		if (r.bad_status || r.bad_data || r.after)
			break;
	}
	TH_LOG("%d rounds: %lu successful WRs, %lu error completions", round, ok, errors);
	EXPECT_LT(0ul, ok);
	EXPECT_EQ(pin0, vamr_vmpin_kb());
	EXPECT_EQ(0, kmsg_problems(kfd));
	if (kfd >= 0)
		close(kfd);
	munmap(mem, RACE_LEN);
}

/*
 * ibv_dereg_mr() of a VA MR while another thread WRITEs and READs through its
 * rkey (8 WRs in flight), 200 rounds: success before the deregistration, a
 * remote access error (or a flush) after.
 */
TEST_F_TIMEOUT(edge, dereg_races_traffic, 300)
{
	NEED_VA();
	race_rounds(_metadata, self, false, RACE_ROUNDS);
}

/*
 * The same with the VA MR as the local side (lkey: the source of WRITEs, the
 * destination of READs), 100 rounds: a local protection error (or a flush)
 * after the deregistration.
 */
TEST_F_TIMEOUT(edge, dereg_races_local_traffic, 300)
{
	NEED_VA();
	race_rounds(_metadata, self, true, RACE_ROUNDS / 2);
}

TEST_HARNESS_MAIN
