// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_mm: VA MRs under the kernel's memory management: KSM merging, swap-out
 * of anonymous memory (zram swap set up by the guest), NUMA migration between
 * two fake nodes (numa=fake=2), and hardware poison (MADV_HWPOISON). After
 * each, what a peer's RDMA READ returns and what its WRITE leaves must again
 * be what the CPU sees, and a poisoned page must give an error completion,
 * never the poisoned data. The same is checked through /dev/vamr ACCESS.
 *
 * Pinned pages are not merged, swapped or migrated (as for a normal MR); the
 * interesting case is a page the region does not pin at that moment (after
 * it was released and touched again), which the kernel may then merge, swap
 * or move, and which the next access must find where the CPU finds it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "mm_util.h"
#include "pattern.h"
#include "rdma_pair.h"
#include "sys_guard.h"
#include "vamr_lib.h"

#define PAGE 4096ul
#define ACC (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

#ifndef MPOL_MF_MOVE
#define MPOL_MF_MOVE (1 << 1)
#endif

FIXTURE(mm)
{
	struct rdma_pair pair;
	bool open;
	uint8_t *buf;
	struct ibv_mr *buf_mr;
	int vfd;
};

FIXTURE_SETUP(mm)
{
	const char *dev = rdma_pair_default_dev();
	int rc = rdma_pair_open(&self->pair, dev);

	if (rc == -ENODEV)
		SKIP(return, "RDMA device %s not present", dev);
	ASSERT_EQ(0, rc);
	self->open = true;
	self->buf = map_anon(64 * PAGE);
	ASSERT_NE(NULL, self->buf);
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, self->buf, 64 * PAGE, ACC, &self->buf_mr));
	self->vfd = vamr_open();
	ASSERT_LE(0, self->vfd);
}

FIXTURE_TEARDOWN(mm)
{
	if (self->buf_mr)
		ibv_dereg_mr(self->buf_mr);
	if (self->open)
		rdma_pair_close(&self->pair);
	close(self->vfd);
}

/* Peer READ of len bytes at va: 0 and the bytes in self->buf, or the completion status. */
static int peer_read(FIXTURE_DATA(mm) *self, struct ibv_mr *mr, uint8_t *va, size_t len)
{
	memset(self->buf, 0xee, len);
	return rdma_pair_read_sync(&self->pair, 0, self->buf, self->buf_mr->lkey, (uintptr_t)va,
				   mr->rkey, len, 0);
}

static int write_file(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY), ok;

	if (fd < 0)
		return -1;
	ok = write(fd, s, strlen(s)) == (ssize_t)strlen(s);
	close(fd);
	return ok ? 0 : -1;
}

static long read_long(const char *path)
{
	char s[64] = "";
	int fd = open(path, O_RDONLY);

	if (fd < 0)
		return -1;
	if (read(fd, s, sizeof(s) - 1) < 0)
		s[0] = 0;
	close(fd);
	return atol(s);
}

/*
 * A VA MR over memory registered as a hole and then mapped: nothing pinned,
 * the pages belong to the kernel's memory management alone until accessed.
 */
static uint8_t *map_unpinned(FIXTURE_DATA(mm) *self, size_t len, struct ibv_mr **mr)
{
	uint8_t *a = map_anon(len);

	if (!a || munmap(a, len) || rdma_pair_reg_mr(&self->pair, a, len, ACC | VAMR_ACCESS_VA, mr))
		return NULL;
	if (remap_fixed(a, len))
		return NULL;
	return a;
}

/*
 * KSM merges identical pages under the MR: reads see them, a WRITE breaks the merge.
 * Whether KSM merged is read from this process's own count
 * (/proc/self/ksm_merging_pages, each of its pages that shares a KSM page), not
 * from the machine-wide pages_sharing, which also drops when ksmd prunes the
 * merges of processes that exited earlier (a delta of it failed: 97 -> 15).
 */
TEST_F(mm, ksm_merge)
{
	size_t n = 16, len = n * PAGE, i;
	struct ibv_mr *mr;
	uint8_t *a = map_unpinned(self, len, &mr);
	long merged0, merged = 0;

	ASSERT_NE(NULL, a);
	if (read_long("/sys/kernel/mm/ksm/run") < 0)
		SKIP(goto out, "no KSM");
	merged0 = read_long("/proc/self/ksm_merging_pages");
	if (merged0 < 0)
		SKIP(goto out, "no /proc/self/ksm_merging_pages");
	for (i = 0; i < n; i++)
		memset(a + i * PAGE, 0x3c, PAGE);	/* identical: KSM merges them */
	ASSERT_EQ(0, madvise(a, len, MADV_MERGEABLE));
	/* Both come back with sys_guard_restore(), or when the test is killed. */
	ASSERT_EQ(0, sys_guard_set("/sys/kernel/mm/ksm/sleep_millisecs", "10"));
	ASSERT_EQ(0, sys_guard_set("/sys/kernel/mm/ksm/run", "1"));
	for (i = 0; i < 300 && merged < merged0 + (long)n; i++) {
		usleep(20 * 1000);
		merged = read_long("/proc/self/ksm_merging_pages");
	}
	TH_LOG("this process's KSM-merged pages %ld -> %ld", merged0, merged);
	EXPECT_LE(merged0 + 2, merged) TH_LOG("KSM merged nothing");
	ASSERT_EQ(IBV_WC_SUCCESS, peer_read(self, mr, a + 3 * PAGE + 10, 2 * PAGE));
	EXPECT_EQ(0, memcmp(self->buf, a + 3 * PAGE + 10, 2 * PAGE));
	/* A peer WRITE into one merged page: lands where the CPU looks, the others stay. */
	pattern_fill(self->buf, 300, 301, 0);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_write_sync(&self->pair, 0, self->buf,
						       self->buf_mr->lkey, (uintptr_t)a + 5 * PAGE,
						       mr->rkey, 300, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(a + 5 * PAGE, 300, 301, 0));
	for (i = 0; i < len; i++)
		if ((i < 5 * PAGE || i >= 5 * PAGE + 300) && a[i] != 0x3c)
			break;
	EXPECT_EQ(len, i) TH_LOG("byte %zu changed", i);
	write_file("/sys/kernel/mm/ksm/run", "2");	/* unmerge everything */
	sys_guard_restore();
out:
	ibv_dereg_mr(mr);
	munmap(a, len);
}

/* Anonymous pages swapped out to zram under the MR come back for the peer's READ/WRITE. */
TEST_F(mm, swap_out_and_in)
{
	size_t n = 32, len = n * PAGE;
	struct ibv_mr *mr;
	uint8_t *a = map_unpinned(self, len, &mr);
	long swap0, swap1;

	ASSERT_NE(NULL, a);
	swap0 = vamr_status_kb("VmSwap");
	pattern_fill(a, len, 302, 0);
	if (madvise(a, len, MADV_PAGEOUT))
		SKIP(goto out, "MADV_PAGEOUT: %s", strerror(errno));
	swap1 = vamr_status_kb("VmSwap");
	TH_LOG("VmSwap %ld -> %ld kB", swap0, swap1);
	if (swap1 <= swap0)
		SKIP(goto out, "nothing was swapped out (no swap device?)");
	ASSERT_EQ(IBV_WC_SUCCESS, peer_read(self, mr, a + 7 * PAGE + 3, 5 * PAGE));
	EXPECT_EQ(PATTERN_OK, pattern_check(self->buf, 5 * PAGE, 302, 7 * PAGE + 3));
	ASSERT_EQ(0, madvise(a, len, MADV_PAGEOUT));
	pattern_fill(self->buf, 500, 303, 0);
	ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_write_sync(&self->pair, 0, self->buf,
						       self->buf_mr->lkey, (uintptr_t)a + 20 * PAGE,
						       mr->rkey, 500, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(a + 20 * PAGE, 500, 303, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(a + 20 * PAGE + 500, PAGE - 500, 302, 20 * PAGE + 500));
out:
	ibv_dereg_mr(mr);
	munmap(a, len);
}

/* Pages moved to the other fake NUMA node: the MR follows (unpinned) or keeps them (pinned). */
TEST_F(mm, numa_migration)
{
	size_t n = 8, len = n * PAGE, i;
	struct ibv_mr *mr, *pmr;
	uint8_t *a = map_unpinned(self, len, &mr), *p = map_anon(len);
	void *pages[8];
	int nodes[8], status[8];
	long ret;

	ASSERT_NE(NULL, a);
	ASSERT_NE(NULL, p);
	if (read_long("/sys/devices/system/node/node1/nr_hugepages") < 0 &&
	    access("/sys/devices/system/node/node1", F_OK))
		SKIP(goto out, "one NUMA node only (boot with numa=fake=2)");
	pattern_fill(a, len, 304, 0);
	pattern_fill(p, len, 305, 0);
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, p, len, ACC | VAMR_ACCESS_VA, &pmr));
	for (i = 0; i < n; i++) {
		pages[i] = a + i * PAGE;
		nodes[i] = 1;
	}
	/* Find where the pages are, then move them to the other node. */
	ret = syscall(SYS_move_pages, 0, n, pages, NULL, status, 0);
	ASSERT_EQ(0, ret);
	for (i = 0; i < n; i++)
		nodes[i] = status[i] == 0 ? 1 : 0;
	ret = syscall(SYS_move_pages, 0, n, pages, nodes, status, MPOL_MF_MOVE);
	ASSERT_LE(0, ret) TH_LOG("move_pages: %s", strerror(errno));
	for (i = 0; i < n && status[i] == nodes[i]; i++)
		;
	EXPECT_EQ(n, i) TH_LOG("page %zu not moved: status %d", i, i < n ? status[i] : 0);
	ASSERT_EQ(IBV_WC_SUCCESS, peer_read(self, mr, a + 100, len - 200));
	EXPECT_EQ(PATTERN_OK, pattern_check(self->buf, len - 200, 304, 100));
	/* Pinned pages are not migrated (FOLL_LONGTERM), and stay right. */
	for (i = 0; i < n; i++)
		pages[i] = p + i * PAGE;
	ret = syscall(SYS_move_pages, 0, n, pages, NULL, status, 0);
	ASSERT_EQ(0, ret);
	for (i = 0; i < n; i++)
		nodes[i] = status[i] == 0 ? 1 : 0;
	syscall(SYS_move_pages, 0, n, pages, nodes, status, MPOL_MF_MOVE);
	ASSERT_EQ(IBV_WC_SUCCESS, peer_read(self, pmr, p + 100, len - 200));
	EXPECT_EQ(PATTERN_OK, pattern_check(self->buf, len - 200, 305, 100));
	ibv_dereg_mr(pmr);
out:
	ibv_dereg_mr(mr);
	munmap(a, len);
	munmap(p, len);
}

static volatile sig_atomic_t sigbus_seen;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)si;
	(void)uc;
	sigbus_seen = 1;
}

/*
 * A poisoned page under the MR: the peer's READ gets an error completion,
 * never the poisoned data; the neighbours still read right. /dev/vamr ACCESS
 * fails the same way.
 */
TEST_F(mm, hwpoison_gives_error_completion)
{
	size_t n = 4, len = n * PAGE;
	uint8_t *a = map_anon(len);
	struct ibv_mr *mr;
	struct ibv_wc wc;
	uint8_t out[64];
	uint32_t h;
	int st;

	ASSERT_NE(NULL, a);
	pattern_fill(a, len, 306, 0);
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, a, len, ACC | VAMR_ACCESS_VA, &mr));
	struct sigaction sa = { .sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO };

	ASSERT_EQ(0, vamr_register(self->vfd, a, len, VAMR_ACCESS_READ, 1, &h));
	/* The kernel tells the process its page is gone (BUS_MCEERR_AR): note it, go on. */
	ASSERT_EQ(0, sigaction(SIGBUS, &sa, NULL));
	if (madvise(a + PAGE, PAGE, MADV_HWPOISON)) {
		ibv_dereg_mr(mr);
		SKIP(return, "MADV_HWPOISON: %s", strerror(errno));
	}
	usleep(100 * 1000);
	TH_LOG("SIGBUS delivered: %s", sigbus_seen ? "yes" : "no");
	st = peer_read(self, mr, a + PAGE + 8, 64);
	EXPECT_NE(IBV_WC_SUCCESS, st) TH_LOG("a READ of a poisoned page succeeded");
	EXPECT_NE(0, vamr_read(self->vfd, h, a + PAGE + 8, out, sizeof(out)));
	if (st != IBV_WC_SUCCESS) {
		while (rdma_pair_wait_send(&self->pair, 0, 100, &wc) >= 0)
			;
		ASSERT_EQ(0, rdma_pair_recover(&self->pair));
	}
	/* The pages around it are fine. */
	ASSERT_EQ(IBV_WC_SUCCESS, peer_read(self, mr, a + 2 * PAGE, 2 * PAGE));
	EXPECT_EQ(PATTERN_OK, pattern_check(self->buf, 2 * PAGE, 306, 2 * PAGE));
	ASSERT_EQ(0, vamr_read(self->vfd, h, a + 10, out, sizeof(out)));
	EXPECT_EQ(PATTERN_OK, pattern_check(out, sizeof(out), 306, 10));
	EXPECT_EQ(0, vamr_unregister(self->vfd, h));
	ibv_dereg_mr(mr);
	/* The poisoned page is never touched by the CPU: unmap it with the rest. */
	munmap(a, len);
}

TEST_HARNESS_MAIN
