// SPDX-License-Identifier: GPL-2.0
/*
 * A registration cache of *normal* MRs (no VAMR_ACCESS_VA) kept correct by
 * monitor mode (examples/mcache.h), through the remap scenarios a cache
 * meets: munmap + mmap at the same address, MADV_DONTNEED, mremap of another
 * buffer over it, mmap MAP_FIXED over it (raw system calls). In each, the
 * cache registers the buffer, the mapping changes, the CPU writes new data
 * at the same address, the cache is asked again for the same range, and the
 * peer RDMA READs the buffer (must see the CPU's data) and RDMA WRITEs it
 * (the CPU must see the peer's data), position-dependent bytes checked.
 *
 * With the generation check the cache re-registers and every byte is right.
 * The control runs the same with a cache that ignores the generation (as a
 * cache without a monitor): its hit is stale and the bytes must come out
 * wrong, which shows the scenarios really move the pages.
 *
 * Needs no VA support from the device: it runs on the patched rxe and again
 * on the stock rdma_rxe (section rdma_monitor_stock), with vamr loaded
 * alone for /dev/vamr.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "pattern.h"
#include "rdma_pair.h"
#include "../../examples/mcache.h"

#define PAGE 4096ul
#define LEN (16 * PAGE)
#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

enum remap { MUNMAP_MMAP, DONTNEED, MREMAP_OVER, MMAP_FIXED_OVER };

static const char *const remap_name[] = {
	"munmap+mmap", "MADV_DONTNEED", "mremap over", "mmap MAP_FIXED over",
};

static void *sys_mmap(void *addr, size_t len, int flags)
{
	return (void *)syscall(SYS_mmap, addr, len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
}

/* Changes the mapping at @buf (LEN bytes) with raw system calls. 0 or -errno. */
static int do_remap(uint8_t *buf, enum remap how)
{
	uint8_t *b;

	switch (how) {
	case MUNMAP_MMAP:
		if (syscall(SYS_munmap, buf, LEN))
			return -errno;
		return sys_mmap(buf, LEN, MAP_FIXED_NOREPLACE) == buf ? 0 : -EADDRINUSE;
	case DONTNEED:
		return syscall(SYS_madvise, buf, LEN, MADV_DONTNEED) ? -errno : 0;
	case MREMAP_OVER:
		b = sys_mmap(NULL, LEN, 0);
		if (b == MAP_FAILED)
			return -ENOMEM;
		memset(b, 0x11, LEN);
		return (void *)syscall(SYS_mremap, b, LEN, LEN, MREMAP_MAYMOVE | MREMAP_FIXED,
				       buf) == buf ? 0 : -errno;
	case MMAP_FIXED_OVER:
		return sys_mmap(buf, LEN, MAP_FIXED) == buf ? 0 : -errno;
	}
	return -EINVAL;
}

FIXTURE(mon)
{
	struct rdma_pair p;
	struct mcache c;
	uint8_t *src, *dst;		/* the peer's buffers */
	struct ibv_mr *src_mr, *dst_mr;
	int opened;
};

FIXTURE_SETUP(mon)
{
	int ret;

	self->c.fd = -1;
	ret = rdma_pair_open(&self->p, NULL);
	if (ret == -ENODEV)
		SKIP(return, "no RDMA device %s", rdma_pair_default_dev());
	ASSERT_EQ(0, ret);
	self->opened = 1;
	self->src = sys_mmap(NULL, LEN, 0);
	self->dst = sys_mmap(NULL, LEN, 0);
	ASSERT_NE(MAP_FAILED, self->src);
	ASSERT_NE(MAP_FAILED, self->dst);
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->p, self->src, LEN, ACCESS, &self->src_mr));
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->p, self->dst, LEN, ACCESS, &self->dst_mr));
}

FIXTURE_TEARDOWN(mon)
{
	if (!self->opened)
		return;
	mcache_close(&self->c);
	ibv_dereg_mr(self->src_mr);
	ibv_dereg_mr(self->dst_mr);
	rdma_pair_close(&self->p);
}

struct outcome {
	int read_ok, write_ok, hit, rereg;
};

/*
 * One scenario through a cache that checks (@check) or ignores the
 * generation. Fills *o with what the peer's READ and WRITE saw.
 */
static void scenario(struct __test_metadata *_metadata, FIXTURE_DATA(mon) *self,
		     enum remap how, int check, struct outcome *o)
{
	uint64_t seed = 0x30000 + how * 16 + check * 4;
	struct ibv_mr *mr, *again;
	unsigned long hits, reregs;
	uint8_t *buf;
	int ret;

	ret = mcache_open(&self->c, self->p.pd, check);
	if (ret == -EOPNOTSUPP || ret == -ENOENT)
		SKIP(return, "/dev/vamr without monitor mode");
	ASSERT_EQ(0, ret);
	buf = sys_mmap(NULL, LEN, 0);
	ASSERT_NE(MAP_FAILED, buf);
	pattern_fill(buf, LEN, seed, 0);
	mr = mcache_get(&self->c, buf, LEN, ACCESS);
	ASSERT_NE(NULL, mr);
	/* A transfer before the remap is right either way. */
	ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_read_sync(&self->p, 0, self->dst, self->dst_mr->lkey,
						      (uintptr_t)buf, mr->rkey, LEN, 0));
	ASSERT_EQ(PATTERN_OK, pattern_check(self->dst, LEN, seed, 0));

	ASSERT_EQ(0, do_remap(buf, how));
	pattern_fill(buf, LEN, seed + 1, 0);		/* the CPU's new data */
	hits = self->c.hits;
	reregs = self->c.reregistrations;
	again = mcache_get(&self->c, buf, LEN, ACCESS);
	ASSERT_NE(NULL, again);
	o->hit = self->c.hits > hits;
	o->rereg = self->c.reregistrations > reregs;

	/* The peer reads what the CPU wrote... */
	memset(self->dst, 0, LEN);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_read_sync(&self->p, 0, self->dst, self->dst_mr->lkey,
						      (uintptr_t)buf, again->rkey, LEN, 0));
	o->read_ok = pattern_check(self->dst, LEN, seed + 1, 0) == PATTERN_OK;
	/* ...and the CPU sees what the peer writes. */
	pattern_fill(self->src, LEN, seed + 2, 0);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_write_sync(&self->p, 0, self->src, self->src_mr->lkey,
						       (uintptr_t)buf, again->rkey, LEN, 0));
	o->write_ok = pattern_check(buf, LEN, seed + 2, 0) == PATTERN_OK;
	if (check)
		EXPECT_TRUE(mcache_still_valid(&self->c, again));
	mcache_close(&self->c);
	syscall(SYS_munmap, buf, LEN);
	TH_LOG("%s, cache %s: %s, peer READ %s, peer WRITE %s", remap_name[how],
	       check ? "checks the generation" : "ignores the generation (control)",
	       o->rereg ? "re-registered" : o->hit ? "hit" : "miss",
	       o->read_ok ? "correct" : "STALE", o->write_ok ? "correct" : "STALE");
}

static void correct(struct __test_metadata *_metadata, FIXTURE_DATA(mon) *self, enum remap how)
{
	struct outcome o = { 0 };

	scenario(_metadata, self, how, 1, &o);
	EXPECT_TRUE(o.rereg);
	EXPECT_TRUE(o.read_ok);
	EXPECT_TRUE(o.write_ok);
}

static void control(struct __test_metadata *_metadata, FIXTURE_DATA(mon) *self, enum remap how)
{
	struct outcome o = { 0 };

	scenario(_metadata, self, how, 0, &o);
	EXPECT_TRUE(o.hit);
	EXPECT_FALSE(o.read_ok);
	EXPECT_FALSE(o.write_ok);
}

TEST_F(mon, munmap_mmap_same_address) { correct(_metadata, self, MUNMAP_MMAP); }
TEST_F(mon, madv_dontneed) { correct(_metadata, self, DONTNEED); }
TEST_F(mon, mremap_over) { correct(_metadata, self, MREMAP_OVER); }
TEST_F(mon, mmap_fixed_over) { correct(_metadata, self, MMAP_FIXED_OVER); }
TEST_F(mon, control_munmap_mmap_same_address_is_stale) { control(_metadata, self, MUNMAP_MMAP); }
TEST_F(mon, control_madv_dontneed_is_stale) { control(_metadata, self, DONTNEED); }
TEST_F(mon, control_mremap_over_is_stale) { control(_metadata, self, MREMAP_OVER); }
TEST_F(mon, control_mmap_fixed_over_is_stale) { control(_metadata, self, MMAP_FIXED_OVER); }

/* Without a change the cache hits, without any system call, and the bytes are right. */
TEST_F(mon, unchanged_buffer_hits)
{
	struct ibv_mr *mr;
	uint8_t *buf;
	int i, ret;

	ret = mcache_open(&self->c, self->p.pd, 1);
	if (ret == -EOPNOTSUPP || ret == -ENOENT)
		SKIP(return, "/dev/vamr without monitor mode");
	ASSERT_EQ(0, ret);
	buf = sys_mmap(NULL, LEN, 0);
	ASSERT_NE(MAP_FAILED, buf);
	for (i = 0; i < 4; i++) {
		pattern_fill(self->src, LEN, 0x4000 + i, 0);
		mr = mcache_get(&self->c, buf, LEN, ACCESS);
		ASSERT_NE(NULL, mr);
		ASSERT_EQ(IBV_WC_SUCCESS,
			  rdma_pair_write_sync(&self->p, 0, self->src, self->src_mr->lkey,
					       (uintptr_t)buf, mr->rkey, LEN, 0));
		EXPECT_EQ(PATTERN_OK, pattern_check(buf, LEN, 0x4000 + i, 0));
	}
	EXPECT_EQ(1u, self->c.misses);
	EXPECT_EQ(3u, self->c.hits);
	EXPECT_EQ(0u, self->c.reregistrations);
	syscall(SYS_munmap, buf, LEN);
}

TEST_HARNESS_MAIN
