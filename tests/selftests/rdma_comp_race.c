// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_comp_race: what rxe's requester completions say when RDMA READs fail
 * part-way through their responses and the QP pair is recovered, under
 * streams of WRITEs, READs and atomics.
 *
 *   normal_mr_dereg_inflight  a normal MR is deregistered (ibv_dereg_mr)
 *                             while WRITEs, multi-packet READs and atomics at
 *                             it are in flight; the pair is recovered and the
 *                             next round starts with an atomic
 *   va_mr_remap_stream        a VA MR (VAMR_ACCESS_VA) whose range is
 *                             munmapped and mapped again, over and over,
 *                             while WRITEs, READs and atomics stream over it
 *   atomic_after_read_error   deterministic: a READ fails at its fifth
 *                             response packet, the pair is recovered, then a
 *                             FETCH_ADD
 *   retransmit_stream         nothing fails, but the shortest local ACK
 *                             timeout makes the requester retransmit all the
 *                             time under WRITEs and long READs
 *
 * Work requests may fail where memory goes away, and that is fine. What
 * must hold is what a completion says: every IBV_WC_SUCCESS delivered the
 * right bytes where they belong (position-dependent data, pattern.h; an
 * atomic's original value in its result buffer), a failure is an error
 * completion, and the kernel does not WARN.
 *
 * rxe kept the completer's "in the middle of a READ response" state across
 * a QP reset: after a READ that failed part-way and a recovery, the first
 * atomic's ATOMIC ACKNOWLEDGE was taken for an out-of-sequence packet,
 * rxe_completer() hit WARN_ON_ONCE(wqe->status == IB_WC_SUCCESS) and
 * completed the atomic with IBV_WC_SUCCESS without writing its result
 * (patches/rxe/0003-*, 0004-*). A WARN taints the kernel (TAINT_WARN, bit 9
 * of /proc/sys/kernel/tainted); each test fails if that bit appears while it
 * runs. WARN_ON_ONCE fires once per boot: if the bit was already set, only
 * the data checks can catch a lie.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "mm_util.h"
#include "pattern.h"
#include "rdma_pair.h"
#include "vamr_lib.h"

#define PAGE 4096ul
#define ACC_REMOTE (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)
#define TAINT_WARN_BIT (1ul << 9)
/* How long each racing test runs (-DRUN_MS=... for longer manual runs). */
#ifndef RUN_MS
#define RUN_MS 3000
#endif
#define MAX_ROUNDS 100000
/* Local buffers (normal MRs): WRITE sources, READ destinations, results. */
#define LOCAL_LEN (1ul << 20)

FIXTURE(comp_race)
{
	struct rdma_pair pair;
	bool open;
	uint8_t *src, *dst;
	struct ibv_mr *src_mr, *dst_mr;
	unsigned long taint0;
	int nr_status[IBV_WC_GENERAL_ERR + 1];
};

static unsigned long read_tainted(void)
{
	unsigned long v = ~0ul;
	FILE *f = fopen("/proc/sys/kernel/tainted", "r");

	if (f) {
		if (fscanf(f, "%lu", &v) != 1)
			v = ~0ul;
		fclose(f);
	}
	return v;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

FIXTURE_SETUP(comp_race)
{
	const char *dev = rdma_pair_default_dev();
	int rc;

	self->taint0 = read_tainted();
	ASSERT_NE(~0ul, self->taint0) TH_LOG("cannot read /proc/sys/kernel/tainted");
	if (self->taint0 & TAINT_WARN_BIT)
		TH_LOG("TAINT_WARN was set before this test: a new WARN cannot show");
	rc = rdma_pair_open(&self->pair, dev);
	if (rc == -ENODEV)
		SKIP(return, "RDMA device %s not present", dev);
	ASSERT_EQ(0, rc) TH_LOG("rdma_pair_open: %s", strerror(-rc));
	self->open = true;
	self->src = map_anon(LOCAL_LEN);
	self->dst = map_anon(LOCAL_LEN);
	ASSERT_NE(NULL, self->src);
	ASSERT_NE(NULL, self->dst);
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, self->src, LOCAL_LEN, ACC_REMOTE,
				      &self->src_mr));
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, self->dst, LOCAL_LEN, ACC_REMOTE,
				      &self->dst_mr));
}

FIXTURE_TEARDOWN(comp_race)
{
	if (self->src_mr)
		ibv_dereg_mr(self->src_mr);
	if (self->dst_mr)
		ibv_dereg_mr(self->dst_mr);
	if (self->open)
		rdma_pair_close(&self->pair);
	if (self->src)
		munmap(self->src, LOCAL_LEN);
	if (self->dst)
		munmap(self->dst, LOCAL_LEN);
}

/* Count a completion status (or a -errno) for the summary line. */
static void count_status(FIXTURE_DATA(comp_race) *self, int st)
{
	if (st >= 0 && st <= IBV_WC_GENERAL_ERR)
		self->nr_status[st]++;
}

static void log_statuses(struct __test_metadata *_metadata, FIXTURE_DATA(comp_race) *self)
{
	char buf[512];
	size_t n = 0;
	int i;

	buf[0] = 0;
	for (i = 0; i <= IBV_WC_GENERAL_ERR && n < sizeof(buf); i++)
		if (self->nr_status[i])
			n += snprintf(buf + n, sizeof(buf) - n, " %s=%d",
				      ibv_wc_status_str(i), self->nr_status[i]);
	TH_LOG("completions:%s", buf);
}

/* The TAINT_WARN bit must not have appeared while the test ran. */
#define EXPECT_NO_NEW_WARN()                                                        \
	do {                                                                        \
		unsigned long t1 = read_tainted();                                  \
		EXPECT_EQ(0ul, (t1 & ~self->taint0) & TAINT_WARN_BIT)                \
			TH_LOG("the kernel WARNed during the test (tainted %lu -> %lu)", \
			       self->taint0, t1);                                   \
	} while (0)

/*
 * Give up after 3 transport retries instead of never (rxe retries forever
 * with the default 7): rxe can lose the NAK for a replayed READ that fails,
 * and the requester must then end with an error completion, not hang.
 */
#define FINITE_RETRIES 3

/* The first 8 bytes at p, as the host-endian value an atomic sees there. */
static uint64_t word_at(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

/*
 * normal_mr_dereg_inflight: per round, a fresh target of A_NWR slots of
 * A_SLOT bytes under one normal MR gets one WR per slot posted at once:
 * FETCH_ADD on the slot's first word, WRITE, READ, FETCH_ADD, WRITE, ...;
 * after the first k completions (k varies with the round) the MR is
 * deregistered. The target stays mapped, so a successful WRITE has its bytes
 * in its slot, a successful READ brought its slot's bytes, and a successful
 * FETCH_ADD returned the slot's first word and added to it. Destinations
 * start poisoned. A round with an error ends with a recovery, and the next
 * round starts with an atomic on the fresh connection.
 */
#define A_NWR 16
#define A_SLOT (8ul << 10)	/* 8 packets at the 1 KiB path MTU */
#define A_LEN (A_NWR * A_SLOT)
static const char *const a_op_name[] = { "FETCH_ADD", "WRITE", "READ" };

TEST_F(comp_race, normal_mr_dereg_inflight)
{
	uint64_t deadline;
	int round, ok = 0, err = 0, lies = 0;

	self->pair.retry_cnt = FINITE_RETRIES;
	ASSERT_EQ(0, rdma_pair_recover(&self->pair));
	deadline = now_ms() + RUN_MS;
	for (round = 0; round < MAX_ROUNDS && now_ms() < deadline; round++) {
		uint64_t seed_t = 0x1000 + round, seed_w = 0x2000 + round;
		int i, k = round % (A_NWR / 2 + 1), round_err = 0;
		uint8_t *t = map_anon(A_LEN);
		struct ibv_mr *mr;

		ASSERT_NE(NULL, t);
		pattern_fill(t, A_LEN, seed_t, 0);
		pattern_fill(self->src, A_LEN, seed_w, 0);
		pattern_fill(self->dst, A_LEN, 0x3000 + round, 0);
		ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, t, A_LEN, ACC_REMOTE, &mr));
		for (i = 0; i < A_NWR; i++) {
			size_t off = i * A_SLOT;
			uint64_t raddr = (uintptr_t)t + off;
			int rc;

			if (i % 3 == 0)
				rc = rdma_pair_post_fetch_add(&self->pair, 0, i,
							      (uint64_t *)(self->dst + off),
							      self->dst_mr->lkey, raddr,
							      mr->rkey, i + 1);
			else if (i % 3 == 1)
				rc = rdma_pair_post_write(&self->pair, 0, i, self->src + off,
							  self->src_mr->lkey, raddr, mr->rkey,
							  A_SLOT);
			else
				rc = rdma_pair_post_read(&self->pair, 0, i, self->dst + off,
							 self->dst_mr->lkey, raddr, mr->rkey,
							 A_SLOT);
			ASSERT_EQ(0, rc) TH_LOG("post %d: %s", i, strerror(-rc));
		}
		for (i = 0; i < A_NWR; i++) {
			size_t off = i * A_SLOT, bad = PATTERN_OK;
			struct ibv_wc wc;
			int st;

			if (i == k)
				ASSERT_EQ(0, ibv_dereg_mr(mr));
			st = rdma_pair_wait_send(&self->pair, 0, 10000, &wc);
			ASSERT_LE(0, st) TH_LOG("round %d: no completion for WR %d: %s",
						round, i, strerror(-st));
			/* An RC send queue completes in order. */
			ASSERT_EQ((uint64_t)i, wc.wr_id);
			count_status(self, st);
			if (st != IBV_WC_SUCCESS) {
				err++;
				round_err = 1;
				continue;
			}
			ok++;
			if (i % 3 == 0) {
				uint8_t old[8];

				pattern_fill(old, 8, seed_t, off);
				if (word_at(self->dst + off) != word_at(old) ||
				    word_at(t + off) != word_at(old) + i + 1)
					bad = 0;
			} else if (i % 3 == 1) {
				bad = pattern_check(t + off, A_SLOT, seed_w, off);
			} else {
				bad = pattern_check(self->dst + off, A_SLOT, seed_t, off);
			}
			if (bad != PATTERN_OK && !lies++)
				TH_LOG("round %d: %s %d succeeded, but byte %zu of its slot is wrong",
				       round, a_op_name[i % 3], i, bad);
		}
		if (round_err)
			ASSERT_EQ(0, rdma_pair_recover(&self->pair));
		munmap(t, A_LEN);
	}
	TH_LOG("%d rounds: %d successful completions, %d error completions", round, ok, err);
	log_statuses(_metadata, self);
	EXPECT_EQ(0, lies) TH_LOG("%d successful completions without their data", lies);
	EXPECT_NO_NEW_WARN();
	/* The race was run: both outcomes were seen. */
	EXPECT_LT(0, ok);
	EXPECT_LT(0, err);
}

/*
 * va_mr_remap_stream: 1 KiB chunks (the path MTU) carry an 8-byte header
 * (tag << 32 | id) and then a pattern of that header at the chunk's offset
 * in the target, so a chunk found anywhere tells who wrote it and where it
 * belongs.
 */
#define CHUNK 1024ul
#define TAG_GEN 0x67656eu	/* a generation of the remapper */
#define TAG_WRITE 0x777269u	/* the source of WRITE number id */
#define TAG_POISON 0x706f69u	/* a READ destination or atomic result before the op */

static void fill_chunks(uint8_t *p, size_t len, size_t base, uint32_t tag, uint32_t id)
{
	uint64_t hdr = (uint64_t)tag << 32 | id;
	size_t off;

	for (off = 0; off < len; off += CHUNK) {
		memcpy(p + off, &hdr, 8);
		pattern_fill(p + off + 8, CHUNK - 8, hdr, base + off + 8);
	}
}

/* Offset of the first chunk that is not whole or has another tag, or -1. */
static long check_chunks(const uint8_t *p, size_t len, size_t base, uint32_t tag)
{
	size_t off;

	for (off = 0; off < len; off += CHUNK) {
		uint64_t hdr = word_at(p + off);

		if ((uint32_t)(hdr >> 32) != tag ||
		    pattern_check(p + off + 8, CHUNK - 8, hdr, base + off + 8) != PATTERN_OK)
			return off;
	}
	return -1;
}

/* Same, for chunks that may carry either tag a target chunk can have. */
static long check_target_chunks(const uint8_t *p, size_t len, size_t base)
{
	size_t off;

	for (off = 0; off < len; off += CHUNK)
		if (check_chunks(p + off, CHUNK, base + off, TAG_GEN) != -1 &&
		    check_chunks(p + off, CHUNK, base + off, TAG_WRITE) != -1)
			return off;
	return -1;
}

/*
 * Slot s of the target gets op s % 4: WRITE, READ, FETCH_ADD of 0 on the
 * slot's first chunk header (an atomic read that leaves the chunk whole),
 * READ. WRs go to the slots in turn.
 */
#define B_SLOT (4ul << 10)	/* 4 packets */
#define B_NSLOT 16
#define B_LEN (B_NSLOT * B_SLOT)
#define B_DEPTH 8		/* WRs in flight; < B_NSLOT, so a slot is never shared */
enum b_kind { B_WRITE, B_READ, B_ATOMIC, B_READ2 };

struct remapper {
	uint8_t *target;
	pthread_mutex_t lock;	/* held over munmap + mapping again */
	unsigned int seq;	/* odd while the range is being replaced */
	int stop;		/* __atomic: set by the test thread */
	int remaps, failed;
};

/* munmap the target, then map a new, already filled generation there. */
static void *remap_loop(void *arg)
{
	struct remapper *r = arg;
	uint32_t gen = 1;

	while (!__atomic_load_n(&r->stop, __ATOMIC_RELAXED)) {
		uint8_t *n = map_anon(B_LEN);

		if (!n) {
			r->failed = 1;
			break;
		}
		fill_chunks(n, B_LEN, 0, TAG_GEN, gen++);
		pthread_mutex_lock(&r->lock);
		__atomic_add_fetch(&r->seq, 1, __ATOMIC_SEQ_CST);
		if (munmap(r->target, B_LEN) ||
		    mremap(n, B_LEN, B_LEN, MREMAP_MAYMOVE | MREMAP_FIXED, r->target) != r->target)
			r->failed = 1;
		__atomic_add_fetch(&r->seq, 1, __ATOMIC_SEQ_CST);
		r->remaps++;
		pthread_mutex_unlock(&r->lock);
		if (r->failed)
			break;
		usleep(500);
	}
	return NULL;
}

static void stop_remapper(struct remapper *r, pthread_t thr)
{
	if (!__atomic_load_n(&r->stop, __ATOMIC_RELAXED)) {
		__atomic_store_n(&r->stop, 1, __ATOMIC_RELAXED);
		pthread_join(thr, NULL);
	}
}

struct b_op {
	uint64_t n;		/* wr_id */
	unsigned int seq;	/* remapper's seq when posted */
};

/*
 * Check a successful op of the stream: 0 if its data is right, else 1.
 * Called with the remapper's lock held, so the target is mapped and stays.
 */
static int b_check(const struct remapper *r, const struct b_op *op, const uint8_t *src,
		   const uint8_t *dst)
{
	size_t soff = (op->n % B_NSLOT) * B_SLOT;
	/* No remap since the op was posted: the target did not change under it. */
	bool same = r->seq == op->seq && !(op->seq & 1);
	uint64_t hdr;

	switch (op->n % B_NSLOT % 4) {
	case B_WRITE:
		/* Its chunks are whole wherever they are, and at the VA if no remap. */
		if (check_target_chunks(r->target + soff, B_SLOT, soff) != -1)
			return 1;
		return same && memcmp(r->target + soff, src + soff, B_SLOT);
	case B_ATOMIC:
		/* The original value is a generation's chunk header. */
		hdr = word_at(dst + soff);
		if ((uint32_t)(hdr >> 32) != TAG_GEN)
			return 1;
		return same && hdr != word_at(r->target + soff);
	default:
		/* A READ brought whole chunks of a generation; what is there if no remap. */
		if (check_chunks(dst + soff, B_SLOT, soff, TAG_GEN) != -1)
			return 1;
		return same && memcmp(dst + soff, r->target + soff, B_SLOT);
	}
}

TEST_F(comp_race, va_mr_remap_stream)
{
	struct remapper r = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct b_op ops[B_DEPTH];
	struct vamr_mr_query q = { 0 };
	uint64_t deadline, next = 0, done = 0;
	int ok = 0, err = 0, lies = 0, recovers = 0, fd, head = 0, inflight = 0;
	bool failing = false;
	struct ibv_mr *mr;
	pthread_t thr;

	r.target = map_anon(B_LEN);
	ASSERT_NE(NULL, r.target);
	fill_chunks(r.target, B_LEN, 0, TAG_GEN, 0);
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, r.target, B_LEN,
				      ACC_REMOTE | VAMR_ACCESS_VA, &mr));
	fd = vamr_open();
	q = vamr_mr_query_of(mr);
	if (fd < 0 || vamr_ioctl(fd, VAMR_IOC_MR_QUERY, &q)) {
		if (fd >= 0)
			close(fd);
		ibv_dereg_mr(mr);
		munmap(r.target, B_LEN);
		SKIP(return, "a normal MR, not a VA MR: vamr or the patched rxe is missing");
	}
	close(fd);
	self->pair.retry_cnt = FINITE_RETRIES;
	ASSERT_EQ(0, rdma_pair_recover(&self->pair));
	ASSERT_EQ(0, pthread_create(&thr, NULL, remap_loop, &r));
	deadline = now_ms() + RUN_MS;
	for (;;) {
		struct ibv_wc wc;
		struct b_op *op;
		int st;

		/* Keep B_DEPTH WRs in flight until the time is up or one failed. */
		while (!failing && inflight < B_DEPTH && now_ms() < deadline) {
			size_t off = (next % B_NSLOT) * B_SLOT;
			uint64_t raddr = (uintptr_t)r.target + off;
			int rc;

			op = &ops[(head + inflight) % B_DEPTH];
			op->n = next;
			op->seq = __atomic_load_n(&r.seq, __ATOMIC_SEQ_CST);
			switch (next % B_NSLOT % 4) {
			case B_WRITE:
				fill_chunks(self->src + off, B_SLOT, off, TAG_WRITE, next);
				rc = rdma_pair_post_write(&self->pair, 0, next, self->src + off,
							  self->src_mr->lkey, raddr, mr->rkey,
							  B_SLOT);
				break;
			case B_ATOMIC:
				fill_chunks(self->dst + off, CHUNK, off, TAG_POISON, next);
				rc = rdma_pair_post_fetch_add(&self->pair, 0, next,
							      (uint64_t *)(self->dst + off),
							      self->dst_mr->lkey, raddr,
							      mr->rkey, 0);
				break;
			default:
				fill_chunks(self->dst + off, B_SLOT, off, TAG_POISON, next);
				rc = rdma_pair_post_read(&self->pair, 0, next, self->dst + off,
							 self->dst_mr->lkey, raddr, mr->rkey,
							 B_SLOT);
				break;
			}
			if (rc) {
				stop_remapper(&r, thr);
				ASSERT_EQ(0, rc) TH_LOG("post %llu: %s",
							(unsigned long long)next, strerror(-rc));
			}
			next++;
			inflight++;
		}
		if (!inflight) {
			if (!failing)
				break;	/* time is up */
			/*
			 * Everything failed or was flushed: start over on a fresh
			 * connection (the range mapped meanwhile).
			 */
			pthread_mutex_lock(&r.lock);
			st = rdma_pair_recover(&self->pair);
			pthread_mutex_unlock(&r.lock);
			if (st)
				stop_remapper(&r, thr);
			ASSERT_EQ(0, st) TH_LOG("recover: %s", strerror(-st));
			recovers++;
			failing = false;
			if (now_ms() >= deadline)
				break;
			continue;
		}
		op = &ops[head];
		st = rdma_pair_wait_send(&self->pair, 0, 10000, &wc);
		if (st < 0 || wc.wr_id != op->n)
			stop_remapper(&r, thr);
		ASSERT_LE(0, st) TH_LOG("no completion for WR %llu: %s",
					(unsigned long long)op->n, strerror(-st));
		ASSERT_EQ(op->n, wc.wr_id);
		head = (head + 1) % B_DEPTH;
		inflight--;
		done++;
		count_status(self, st);
		if (st != IBV_WC_SUCCESS) {
			err++;
			failing = true;
			continue;
		}
		ok++;
		pthread_mutex_lock(&r.lock);
		st = b_check(&r, op, self->src, self->dst);
		pthread_mutex_unlock(&r.lock);
		if (st && !lies++)
			TH_LOG("WR %llu (%s) completed with success, but its data is wrong",
			       (unsigned long long)op->n,
			       (const char *[]){ "WRITE", "READ", "FETCH_ADD", "READ" }
			       [op->n % B_NSLOT % 4]);
	}
	stop_remapper(&r, thr);
	ASSERT_EQ(0, ibv_dereg_mr(mr));
	munmap(r.target, B_LEN);
	TH_LOG("%llu WRs: %d successful, %d error completions, %d recoveries, %d remaps",
	       (unsigned long long)done, ok, err, recovers, r.remaps);
	log_statuses(_metadata, self);
	EXPECT_EQ(0, r.failed) TH_LOG("the remapper could not munmap + map the range");
	EXPECT_EQ(0, lies) TH_LOG("%d successful completions without their data", lies);
	EXPECT_NO_NEW_WARN();
	EXPECT_LT(0, ok);
	EXPECT_LT(0, r.remaps);
}

/*
 * atomic_after_read_error: a READ of 8 packets into a buffer whose local MR
 * covers only its first half fails at the fifth response packet
 * (IBV_WC_LOC_PROT_ERR), in the middle of its response; the pair is
 * recovered (ERR, RESET, RTS) and a FETCH_ADD runs on the fresh connection.
 * It must succeed, return the old value and add to it. Three times.
 */
TEST_F(comp_race, atomic_after_read_error)
{
	size_t len = 2 * PAGE;
	uint8_t *r = map_anon(len), *l = map_anon(len);
	struct ibv_mr *rm, *lm;
	int i, st;

	ASSERT_NE(NULL, r);
	ASSERT_NE(NULL, l);
	pattern_fill(r, len, 0x7000, 0);
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, r, len, ACC_REMOTE, &rm));
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, l, len / 2, ACC_REMOTE, &lm));
	for (i = 0; i < 3; i++) {
		uint8_t *word = r + 8 * i;
		uint64_t *res = (uint64_t *)self->dst, old = word_at(word), add = 0x100 + i;

		pattern_fill(l, len, 0x7100 + i, 0);
		st = rdma_pair_read_sync(&self->pair, 0, l, lm->lkey, (uintptr_t)r, rm->rkey,
					 len, 0);
		ASSERT_LE(0, st) TH_LOG("READ: no completion: %s", strerror(-st));
		count_status(self, st);
		EXPECT_EQ(IBV_WC_LOC_PROT_ERR, st) TH_LOG("READ past its local MR: %s",
							  ibv_wc_status_str(st));
		/* What arrived before the failure is right. */
		EXPECT_EQ(0, memcmp(l, r, len / 2));
		ASSERT_EQ(0, rdma_pair_recover(&self->pair));

		*res = ~old;
		st = rdma_pair_fetch_add_sync(&self->pair, 0, res, self->dst_mr->lkey,
					      (uintptr_t)word, rm->rkey, add, 0);
		ASSERT_LE(0, st) TH_LOG("FETCH_ADD: no completion: %s", strerror(-st));
		count_status(self, st);
		EXPECT_EQ(IBV_WC_SUCCESS, st) TH_LOG("round %d: FETCH_ADD after recovery: %s",
						     i, ibv_wc_status_str(st));
		if (st == IBV_WC_SUCCESS)
			EXPECT_EQ(old, *res)
				TH_LOG("round %d: FETCH_ADD succeeded without its result", i);
		/* The responder executed it. */
		EXPECT_EQ(old + add, word_at(word));
		/* The connection works: a READ of the whole buffer. */
		st = rdma_pair_read_sync(&self->pair, 0, self->dst, self->dst_mr->lkey,
					 (uintptr_t)r, rm->rkey, len, 0);
		ASSERT_LE(0, st) TH_LOG("READ: no completion: %s", strerror(-st));
		count_status(self, st);
		EXPECT_EQ(IBV_WC_SUCCESS, st) TH_LOG("round %d: READ after the FETCH_ADD: %s", i,
						     ibv_wc_status_str(st));
		/* (The harness's assertions cannot take an else.) */
		if (st == IBV_WC_SUCCESS)
			EXPECT_EQ(0, memcmp(self->dst, r, len));
		if (st != IBV_WC_SUCCESS)
			ASSERT_EQ(0, rdma_pair_recover(&self->pair));
	}
	log_statuses(_metadata, self);
	EXPECT_EQ(0, ibv_dereg_mr(lm));
	EXPECT_EQ(0, ibv_dereg_mr(rm));
	munmap(r, len);
	munmap(l, len);
	EXPECT_NO_NEW_WARN();
}

/*
 * retransmit_stream: with IBV_QP_TIMEOUT 1 (one jiffy on rxe) the requester
 * retransmits all the time while WRITEs and 64-packet READs stream over a
 * normal MR: duplicate requests, replayed READ responses and duplicate ACKs.
 * Every WR must complete successfully with its data.
 */
#define C_RSLOT (64ul << 10)	/* READs of 64 packets */
#define C_WSLOT (2ul << 10)	/* WRITEs of 2 packets */
#define C_NSLOT 8		/* slot i: WRITE if i is even, READ if odd */
#define C_DEPTH 4

TEST_F(comp_race, retransmit_stream)
{
	size_t tlen = C_NSLOT * C_RSLOT;
	uint64_t deadline, next = 0, head = 0;
	int ok = 0, err = 0, lies = 0, st;
	uint8_t *t = map_anon(tlen);
	struct ibv_mr *mr;

	ASSERT_NE(NULL, t);
	pattern_fill(t, tlen, 0x4000, 0);
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, t, tlen, ACC_REMOTE, &mr));
	self->pair.timeout = 1;
	ASSERT_EQ(0, rdma_pair_recover(&self->pair));
	deadline = now_ms() + RUN_MS;
	for (;;) {
		struct ibv_wc wc;
		size_t off, bad;

		while (next - head < C_DEPTH && now_ms() < deadline) {
			off = (next % C_NSLOT) * C_RSLOT;
			if (next % 2 == 0) {
				pattern_fill(self->src + off, C_WSLOT, 0x5000 + next, off);
				st = rdma_pair_post_write(&self->pair, 0, next, self->src + off,
							  self->src_mr->lkey, (uintptr_t)t + off,
							  mr->rkey, C_WSLOT);
			} else {
				pattern_fill(self->dst + off, C_RSLOT, 0x6000 + next, off);
				st = rdma_pair_post_read(&self->pair, 0, next, self->dst + off,
							 self->dst_mr->lkey, (uintptr_t)t + off,
							 mr->rkey, C_RSLOT);
			}
			ASSERT_EQ(0, st);
			next++;
		}
		if (head == next)
			break;
		st = rdma_pair_wait_send(&self->pair, 0, 10000, &wc);
		ASSERT_LE(0, st) TH_LOG("no completion for WR %llu", (unsigned long long)head);
		ASSERT_EQ(head, wc.wr_id);
		count_status(self, st);
		off = (head % C_NSLOT) * C_RSLOT;
		if (st != IBV_WC_SUCCESS) {
			/* Nothing goes away here: there is no reason to fail. */
			err++;
			break;
		}
		ok++;
		if (head % 2 == 0)
			bad = pattern_check(t + off, C_WSLOT, 0x5000 + head, off);
		else
			bad = pattern_check(self->dst + off, C_RSLOT, 0x4000, off);
		if (bad != PATTERN_OK && !lies++)
			TH_LOG("%s %llu completed with success, but byte %zu is wrong",
			       head % 2 ? "READ" : "WRITE", (unsigned long long)head, bad);
		head++;
	}
	TH_LOG("%llu WRs: %d successful, %d error completions", (unsigned long long)next, ok,
	       err);
	log_statuses(_metadata, self);
	self->pair.timeout = 0;
	EXPECT_EQ(0, rdma_pair_recover(&self->pair));
	EXPECT_EQ(0, ibv_dereg_mr(mr));
	munmap(t, tlen);
	EXPECT_EQ(0, lies) TH_LOG("%d successful completions without their data", lies);
	EXPECT_EQ(0, err);
	EXPECT_NO_NEW_WARN();
	EXPECT_LT(0, ok);
}

_Static_assert(A_LEN <= LOCAL_LEN && B_LEN <= LOCAL_LEN && C_NSLOT * C_RSLOT <= LOCAL_LEN,
	       "local buffers too small");

TEST_HARNESS_MAIN
