// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_baseline: what plain (pinned) MRs do today, on the soft-RoCE device
 * of the vamr test guest, without the vamr module.
 *
 * Every test checks the bytes the CPU actually sees, using position-
 * dependent patterns (pattern.h), including the bytes just outside each
 * transfer window.  Two RC QPs of one device talk to each other
 * (rdma_pair.h); side 0 posts, side 1's responder touches the MR.
 *
 * stale_mr_after_remap characterises the problem vamr exists for: a normal
 * MR keeps pointing at the pages pinned at registration time after the
 * process has replaced the mapping, so RDMA and the CPU silently disagree.
 *
 * Environment: VAMR_IBDEV (default rxe0).  The runner has already done
 * `rdma link add rxe0 type rxe netdev lo` and `ip link set lo up`.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "rdma_pair.h"
#include "pattern.h"

#define KIB		1024UL
#define MIB		(1024UL * KIB)
#define BUF_SIZE	(64 * KIB)

/* Seeds, all different, so each buffer's pattern is its own. */
#define SEED_SRC	0x5eed0001ULL
#define SEED_DST	0x5eed0002ULL
#define SEED_A		0xaaaa0003ULL
#define SEED_B		0xbbbb0004ULL
#define SEED_C		0xcccc0005ULL

#define ACC_LOCAL	(IBV_ACCESS_LOCAL_WRITE)
#define ACC_REMOTE	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
			 IBV_ACCESS_REMOTE_READ)
#define ACC_ATOMIC	(ACC_REMOTE | IBV_ACCESS_REMOTE_ATOMIC)

#define MAX_TRACKED	8

FIXTURE(rdma) {
	struct rdma_pair pair;
	bool pair_open;
	/* MRs and mappings made by the test body; teardown releases them. */
	struct ibv_mr *mrs[MAX_TRACKED];
	int nr_mrs;
	struct {
		void *addr;
		size_t len;
	} maps[MAX_TRACKED];
	int nr_maps;
};

FIXTURE_SETUP(rdma)
{
	const char *dev = rdma_pair_default_dev();
	int rc;

	rc = rdma_pair_open(&self->pair, dev);
	if (rc == -ENODEV)
		SKIP(return, "RDMA device '%s' not present (set %s or run `rdma link add %s type rxe netdev lo`)",
		     dev, RDMA_PAIR_ENV_DEV, dev);
	ASSERT_EQ(0, rc) {
		TH_LOG("rdma_pair_open(%s) failed: %s", dev, strerror(-rc));
	}
	self->pair_open = true;
	TH_LOG("device %s, port %u, gid index %d, qpn %u <-> %u",
	       self->pair.dev_name, self->pair.port, self->pair.gid_index,
	       self->pair.qp[0]->qp_num, self->pair.qp[1]->qp_num);
}

FIXTURE_TEARDOWN(rdma)
{
	int i;

	for (i = self->nr_mrs - 1; i >= 0; i--) {
		if (self->mrs[i]) {
			EXPECT_EQ(0, ibv_dereg_mr(self->mrs[i]));
			self->mrs[i] = NULL;
		}
	}
	self->nr_mrs = 0;
	for (i = self->nr_maps - 1; i >= 0; i--)
		munmap(self->maps[i].addr, self->maps[i].len);
	self->nr_maps = 0;
	if (self->pair_open) {
		EXPECT_EQ(0, rdma_pair_close(&self->pair));
		self->pair_open = false;
	}
}

/* Anonymous private mapping, remembered for teardown.  NULL on failure. */
static void *map_buf(FIXTURE_DATA(rdma) *self, size_t len)
{
	void *p;

	if (self->nr_maps >= MAX_TRACKED)
		return NULL;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	self->maps[self->nr_maps].addr = p;
	self->maps[self->nr_maps].len = len;
	self->nr_maps++;
	return p;
}

/* Register an MR in the pair's PD, remembered for teardown.  NULL on failure. */
static struct ibv_mr *reg_buf(FIXTURE_DATA(rdma) *self, void *addr,
			      size_t len, unsigned int access)
{
	struct ibv_mr *mr = NULL;

	if (self->nr_mrs >= MAX_TRACKED)
		return NULL;
	if (rdma_pair_reg_mr(&self->pair, addr, len, access, &mr))
		return NULL;
	self->mrs[self->nr_mrs++] = mr;
	return mr;
}

static uint64_t va(const void *p)
{
	return (uint64_t)(uintptr_t)p;
}

static uint64_t load64(const void *p)
{
	return __atomic_load_n((const uint64_t *)p, __ATOMIC_SEQ_CST);
}

static void store64(void *p, uint64_t v)
{
	__atomic_store_n((uint64_t *)p, v, __ATOMIC_SEQ_CST);
}

/* What a _sync call returned: a completion status, or a -errno. */
static const char *rc_str(int rc)
{
	return rc >= 0 ? ibv_wc_status_str(rc) : strerror(-rc);
}

/* 1. RDMA WRITE of an odd length at an odd offset into a pinned MR. */
TEST_F(rdma, write_pinned)
{
	const size_t src_off = 101, dst_off = 777, len = 12345;
	uint8_t *src, *dst;
	struct ibv_mr *smr, *dmr;
	int rc;

	src = map_buf(self, BUF_SIZE);
	dst = map_buf(self, BUF_SIZE);
	ASSERT_NE(NULL, src);
	ASSERT_NE(NULL, dst);
	pattern_fill(src, BUF_SIZE, SEED_SRC, 0);
	pattern_fill(dst, BUF_SIZE, SEED_DST, 0);

	smr = reg_buf(self, src, BUF_SIZE, ACC_LOCAL);
	dmr = reg_buf(self, dst, BUF_SIZE, ACC_REMOTE);
	ASSERT_NE(NULL, smr) TH_LOG("reg src: %s", strerror(errno));
	ASSERT_NE(NULL, dmr) TH_LOG("reg dst: %s", strerror(errno));

	rc = rdma_pair_write_sync(&self->pair, 0, src + src_off, smr->lkey,
				  va(dst + dst_off), dmr->rkey, len, 0);
	ASSERT_EQ(IBV_WC_SUCCESS, rc) TH_LOG("write: %d (%s)", rc, rc_str(rc));

	/* The window holds the source bytes, taken from src + src_off. */
	EXPECT_EQ(PATTERN_OK, pattern_check(dst + dst_off, len, SEED_SRC, src_off));
	/* Nothing before or after the window was touched. */
	EXPECT_EQ(PATTERN_OK, pattern_check(dst, dst_off, SEED_DST, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(dst + dst_off + len,
					    BUF_SIZE - dst_off - len,
					    SEED_DST, dst_off + len));
	/* And the source is unchanged. */
	EXPECT_EQ(PATTERN_OK, pattern_check(src, BUF_SIZE, SEED_SRC, 0));
}

/* 2. RDMA READ from an odd offset of a pinned MR into a local MR. */
TEST_F(rdma, read_pinned)
{
	const size_t remote_off = 777, local_off = 333, len = 12345;
	uint8_t *remote, *local;
	struct ibv_mr *rmr, *lmr;
	int rc;

	remote = map_buf(self, BUF_SIZE);
	local = map_buf(self, BUF_SIZE);
	ASSERT_NE(NULL, remote);
	ASSERT_NE(NULL, local);
	pattern_fill(remote, BUF_SIZE, SEED_SRC, 0);
	pattern_fill(local, BUF_SIZE, SEED_DST, 0);

	rmr = reg_buf(self, remote, BUF_SIZE, ACC_REMOTE);
	lmr = reg_buf(self, local, BUF_SIZE, ACC_LOCAL);
	ASSERT_NE(NULL, rmr) TH_LOG("reg remote: %s", strerror(errno));
	ASSERT_NE(NULL, lmr) TH_LOG("reg local: %s", strerror(errno));

	rc = rdma_pair_read_sync(&self->pair, 0, local + local_off, lmr->lkey,
				 va(remote + remote_off), rmr->rkey, len, 0);
	ASSERT_EQ(IBV_WC_SUCCESS, rc) TH_LOG("read: %d (%s)", rc, rc_str(rc));

	EXPECT_EQ(PATTERN_OK, pattern_check(local + local_off, len, SEED_SRC,
					    remote_off));
	EXPECT_EQ(PATTERN_OK, pattern_check(local, local_off, SEED_DST, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(local + local_off + len,
					    BUF_SIZE - local_off - len,
					    SEED_DST, local_off + len));
	EXPECT_EQ(PATTERN_OK, pattern_check(remote, BUF_SIZE, SEED_SRC, 0));
}

/* 3. SEND into a posted RECV buffer (bigger than the message). */
TEST_F(rdma, send_recv_pinned)
{
	const size_t send_off = 99, recv_off = 555;
	const size_t len = 5000, recv_len = 8192;
	uint8_t *sbuf, *rbuf;
	struct ibv_mr *smr, *rmr;
	struct ibv_wc wc;
	int rc;

	sbuf = map_buf(self, BUF_SIZE);
	rbuf = map_buf(self, BUF_SIZE);
	ASSERT_NE(NULL, sbuf);
	ASSERT_NE(NULL, rbuf);
	pattern_fill(sbuf, BUF_SIZE, SEED_SRC, 0);
	pattern_fill(rbuf, BUF_SIZE, SEED_DST, 0);

	smr = reg_buf(self, sbuf, BUF_SIZE, ACC_LOCAL);
	rmr = reg_buf(self, rbuf, BUF_SIZE, ACC_LOCAL);
	ASSERT_NE(NULL, smr) TH_LOG("reg send buf: %s", strerror(errno));
	ASSERT_NE(NULL, rmr) TH_LOG("reg recv buf: %s", strerror(errno));

	memset(&wc, 0, sizeof(wc));
	rc = rdma_pair_send_recv_sync(&self->pair, 0,
				      sbuf + send_off, smr->lkey, len,
				      rbuf + recv_off, rmr->lkey, recv_len,
				      0, &wc);
	ASSERT_EQ(IBV_WC_SUCCESS, rc) TH_LOG("send/recv: %d (%s)", rc, rc_str(rc));
	EXPECT_EQ(len, (size_t)wc.byte_len);

	EXPECT_EQ(PATTERN_OK, pattern_check(rbuf + recv_off, len, SEED_SRC,
					    send_off));
	/* Before the buffer, and the unused tail of the posted buffer. */
	EXPECT_EQ(PATTERN_OK, pattern_check(rbuf, recv_off, SEED_DST, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(rbuf + recv_off + len,
					    BUF_SIZE - recv_off - len,
					    SEED_DST, recv_off + len));
}

/* 4. Fetch-and-add and compare-and-swap on an aligned word of a pinned MR. */
TEST_F(rdma, atomic_pinned)
{
	const size_t word_off = 4096 + 8 * 3, res_off = 64;
	const uint64_t init = 0x0123456789abcdefULL;
	const uint64_t add = 0x1000000000000001ULL;
	const uint64_t swap = 0xfeedfacecafebeefULL;
	uint8_t *remote, *local;
	struct ibv_mr *rmr, *lmr;
	uint64_t *res, cur;
	int rc;

	remote = map_buf(self, BUF_SIZE);
	local = map_buf(self, BUF_SIZE);
	ASSERT_NE(NULL, remote);
	ASSERT_NE(NULL, local);
	pattern_fill(remote, BUF_SIZE, SEED_DST, 0);
	pattern_fill(local, BUF_SIZE, SEED_C, 0);
	store64(remote + word_off, init);
	res = (uint64_t *)(local + res_off);

	rmr = reg_buf(self, remote, BUF_SIZE, ACC_ATOMIC);
	lmr = reg_buf(self, local, BUF_SIZE, ACC_LOCAL);
	ASSERT_NE(NULL, rmr) TH_LOG("reg remote: %s", strerror(errno));
	ASSERT_NE(NULL, lmr) TH_LOG("reg local: %s", strerror(errno));

	/* fetch-and-add: returns the old value, memory gets old + add */
	store64(res, 0);
	rc = rdma_pair_fetch_add_sync(&self->pair, 0, res, lmr->lkey,
				      va(remote + word_off), rmr->rkey, add, 0);
	ASSERT_EQ(IBV_WC_SUCCESS, rc) TH_LOG("fetch_add: %d (%s)", rc, rc_str(rc));
	EXPECT_EQ(init, load64(res));
	cur = init + add;
	EXPECT_EQ(cur, load64(remote + word_off));

	/* cmp-swap with a wrong compare value: returns current, no change */
	store64(res, 0);
	rc = rdma_pair_cmp_swap_sync(&self->pair, 0, res, lmr->lkey,
				     va(remote + word_off), rmr->rkey,
				     cur ^ 1, swap, 0);
	ASSERT_EQ(IBV_WC_SUCCESS, rc) TH_LOG("cmp_swap (miss): %d (%s)", rc, rc_str(rc));
	EXPECT_EQ(cur, load64(res));
	EXPECT_EQ(cur, load64(remote + word_off));

	/* cmp-swap with the right compare value: returns current, swaps */
	store64(res, 0);
	rc = rdma_pair_cmp_swap_sync(&self->pair, 0, res, lmr->lkey,
				     va(remote + word_off), rmr->rkey,
				     cur, swap, 0);
	ASSERT_EQ(IBV_WC_SUCCESS, rc) TH_LOG("cmp_swap (hit): %d (%s)", rc, rc_str(rc));
	EXPECT_EQ(cur, load64(res));
	EXPECT_EQ(swap, load64(remote + word_off));

	/* Neighbouring bytes untouched on both sides. */
	EXPECT_EQ(PATTERN_OK, pattern_check(remote, word_off, SEED_DST, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(remote + word_off + 8,
					    BUF_SIZE - word_off - 8,
					    SEED_DST, word_off + 8));
	EXPECT_EQ(PATTERN_OK, pattern_check(local, res_off, SEED_C, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(local + res_off + 8,
					    BUF_SIZE - res_off - 8,
					    SEED_C, res_off + 8));
}

/*
 * 5. A normal MR after the process replaced the mapping under it.
 *
 * NOTE: this test asserts today's BROKEN behaviour of normal (pinned) MRs,
 * the problem vamr exists to fix.  ibv_reg_mr pins the pages that back the
 * range at registration time; after munmap + mmap(MAP_FIXED) of new memory
 * at the same address the MR still points at the old pages.  An RDMA WRITE
 * through it completes successfully but the process never sees the data,
 * and an RDMA READ returns the old pages, not what the CPU sees at that
 * address.  If this test starts failing on a plain MR, the kernel's
 * behaviour changed and the premise of vamr must be rechecked.
 */
TEST_F(rdma, stale_mr_after_remap)
{
	uint8_t *buf, *fresh, *src, *local;
	struct ibv_mr *mr, *smr, *lmr;
	size_t i, nonzero;
	int rc;

	buf = map_buf(self, BUF_SIZE);
	src = map_buf(self, BUF_SIZE);
	local = map_buf(self, BUF_SIZE);
	ASSERT_NE(NULL, buf);
	ASSERT_NE(NULL, src);
	ASSERT_NE(NULL, local);

	/* Touch the buffer so it is backed, then register it. */
	pattern_fill(buf, BUF_SIZE, SEED_C, 0);
	mr = reg_buf(self, buf, BUF_SIZE, ACC_REMOTE);
	ASSERT_NE(NULL, mr) TH_LOG("reg buf: %s", strerror(errno));

	pattern_fill(src, BUF_SIZE, SEED_B, 0);
	pattern_fill(local, BUF_SIZE, SEED_DST, 0);
	smr = reg_buf(self, src, BUF_SIZE, ACC_LOCAL);
	lmr = reg_buf(self, local, BUF_SIZE, ACC_LOCAL);
	ASSERT_NE(NULL, smr) TH_LOG("reg src: %s", strerror(errno));
	ASSERT_NE(NULL, lmr) TH_LOG("reg local: %s", strerror(errno));

	/* Replace the mapping: same address, new anonymous memory. */
	ASSERT_EQ(0, munmap(buf, BUF_SIZE));
	fresh = mmap(buf, BUF_SIZE, PROT_READ | PROT_WRITE,
		     MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, (void *)fresh) TH_LOG("mmap: %s", strerror(errno));
	ASSERT_EQ(va(buf), va(fresh));

	/* It really is new memory: zero-filled, not the old pattern. */
	for (i = 0, nonzero = 0; i < BUF_SIZE; i++)
		nonzero += fresh[i] != 0;
	ASSERT_EQ((size_t)0, nonzero);

	pattern_fill(fresh, BUF_SIZE, SEED_A, 0);

	/* The peer writes seed B through the (stale) MR: it "succeeds". */
	rc = rdma_pair_write_sync(&self->pair, 0, src, smr->lkey,
				  va(buf), mr->rkey, BUF_SIZE, 0);
	ASSERT_EQ(IBV_WC_SUCCESS, rc) TH_LOG("write: %d (%s)", rc, rc_str(rc));

	/* ... but the CPU's view of the address still holds seed A. */
	EXPECT_EQ(PATTERN_OK, pattern_check(fresh, BUF_SIZE, SEED_A, 0)) {
		TH_LOG("new mapping changed: the write reached the current pages");
	}

	/* A READ through the MR returns seed B: the old, pinned pages. */
	rc = rdma_pair_read_sync(&self->pair, 0, local, lmr->lkey,
				 va(buf), mr->rkey, BUF_SIZE, 0);
	ASSERT_EQ(IBV_WC_SUCCESS, rc) TH_LOG("read: %d (%s)", rc, rc_str(rc));
	EXPECT_EQ(PATTERN_OK, pattern_check(local, BUF_SIZE, SEED_B, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(fresh, BUF_SIZE, SEED_A, 0));
}

/* 6. A 4 MiB RDMA WRITE across many pages, unaligned on both ends. */
TEST_F_TIMEOUT(rdma, large_write, 180)
{
	const size_t len = 4 * MIB, src_off = 5, dst_off = 3;
	const size_t size = len + 2 * 4096;
	uint8_t *src, *dst;
	struct ibv_mr *smr, *dmr;
	int rc;

	src = map_buf(self, size);
	dst = map_buf(self, size);
	ASSERT_NE(NULL, src);
	ASSERT_NE(NULL, dst);
	pattern_fill(src, size, SEED_SRC, 0);
	pattern_fill(dst, size, SEED_DST, 0);

	smr = reg_buf(self, src, size, ACC_LOCAL);
	dmr = reg_buf(self, dst, size, ACC_REMOTE);
	ASSERT_NE(NULL, smr) TH_LOG("reg src: %s", strerror(errno));
	ASSERT_NE(NULL, dmr) TH_LOG("reg dst: %s", strerror(errno));

	rc = rdma_pair_write_sync(&self->pair, 0, src + src_off, smr->lkey,
				  va(dst + dst_off), dmr->rkey, len, 120000);
	ASSERT_EQ(IBV_WC_SUCCESS, rc) TH_LOG("write: %d (%s)", rc, rc_str(rc));

	EXPECT_EQ(PATTERN_OK, pattern_check(dst + dst_off, len, SEED_SRC, src_off));
	EXPECT_EQ(PATTERN_OK, pattern_check(dst, dst_off, SEED_DST, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(dst + dst_off + len,
					    size - dst_off - len,
					    SEED_DST, dst_off + len));
}

/*
 * 7. An access error and rdma_pair_recover(): a WRITE to an MR without
 * REMOTE_WRITE fails with IBV_WC_REM_ACCESS_ERR and leaves the target
 * untouched; after recovery the same pair carries a good WRITE again.
 * (Exercises the error path later tests rely on.)
 */
TEST_F(rdma, access_error_recover)
{
	const size_t off = 128, len = 4000;
	uint8_t *src, *ro, *dst;
	struct ibv_mr *smr, *romr, *dmr;
	int rc;

	src = map_buf(self, BUF_SIZE);
	ro = map_buf(self, BUF_SIZE);
	dst = map_buf(self, BUF_SIZE);
	ASSERT_NE(NULL, src);
	ASSERT_NE(NULL, ro);
	ASSERT_NE(NULL, dst);
	pattern_fill(src, BUF_SIZE, SEED_SRC, 0);
	pattern_fill(ro, BUF_SIZE, SEED_A, 0);
	pattern_fill(dst, BUF_SIZE, SEED_DST, 0);

	smr = reg_buf(self, src, BUF_SIZE, ACC_LOCAL);
	romr = reg_buf(self, ro, BUF_SIZE,
		       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	dmr = reg_buf(self, dst, BUF_SIZE, ACC_REMOTE);
	ASSERT_NE(NULL, smr) TH_LOG("reg src: %s", strerror(errno));
	ASSERT_NE(NULL, romr) TH_LOG("reg ro: %s", strerror(errno));
	ASSERT_NE(NULL, dmr) TH_LOG("reg dst: %s", strerror(errno));

	rc = rdma_pair_write_sync(&self->pair, 0, src, smr->lkey,
				  va(ro + off), romr->rkey, len, 0);
	ASSERT_EQ(IBV_WC_REM_ACCESS_ERR, rc)
		TH_LOG("write to read-only MR: %d (%s)", rc, rc_str(rc));
	EXPECT_EQ(PATTERN_OK, pattern_check(ro, BUF_SIZE, SEED_A, 0));
	/* rxe moves the QP to ERR just after posting the error CQE. */
	EXPECT_EQ(IBV_QPS_ERR, rdma_pair_wait_qp_state(&self->pair, 0,
						       IBV_QPS_ERR, 1000));

	rc = rdma_pair_recover(&self->pair);
	ASSERT_EQ(0, rc) TH_LOG("recover: %s", strerror(-rc));
	EXPECT_EQ(IBV_QPS_RTS, rdma_pair_qp_state(&self->pair, 0));
	EXPECT_EQ(IBV_QPS_RTS, rdma_pair_qp_state(&self->pair, 1));

	rc = rdma_pair_write_sync(&self->pair, 0, src, smr->lkey,
				  va(dst + off), dmr->rkey, len, 0);
	ASSERT_EQ(IBV_WC_SUCCESS, rc) TH_LOG("write after recover: %d (%s)", rc, rc_str(rc));
	EXPECT_EQ(PATTERN_OK, pattern_check(dst + off, len, SEED_SRC, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(dst, off, SEED_DST, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(dst + off + len,
					    BUF_SIZE - off - len,
					    SEED_DST, off + len));
}

/*
 * The premise of this file: the rdma_rxe under test is the kernel's own, and
 * vamr is not loaded (the guest's /init runs this program after unloading
 * the patched rxe and vamr and loading the stock module). /proc/modules
 * lists a module's users in its fourth field.
 */
TEST(runs_on_stock_rxe_without_vamr)
{
	FILE *f = fopen("/proc/modules", "r");
	char line[512];
	bool rxe = false, vamr = false;

	ASSERT_NE(NULL, f) TH_LOG("/proc/modules: %s", strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "rdma_rxe ", 9))
			rxe = true;
		if (strstr(line, "vamr"))
			vamr = true;
	}
	fclose(f);
	EXPECT_TRUE(rxe) TH_LOG("rdma_rxe is not loaded");
	EXPECT_FALSE(vamr) TH_LOG("vamr is loaded: this is not the stock rxe");
}

TEST_HARNESS_MAIN
