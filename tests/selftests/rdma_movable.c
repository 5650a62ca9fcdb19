// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_movable: VA MRs over memory in ZONE_MOVABLE (a guest booted with
 * movablecore=). A FOLL_LONGTERM pin must not stay on a movable page: GUP
 * migrates the page out first (mm/gup.c, migrate_longterm_unpinnable_folios)
 * and pins the new one. The migration invalidates the region's own range in
 * the middle of its own pin round (MMU_NOTIFY_CLEAR from try_to_migrate), so
 * the round loses the mmu_interval_read_retry() race once and pins again.
 *
 * Checked, for registration (/dev/vamr and rxe), rxe's on-demand pins after a
 * remap, the verify pass after fork / mprotect / MADV_DONTNEED, and a
 * migration that fails (a page held by a pipe through vmsplice):
 *  - every page is pinned (pages_pinned, VmPin) and no pinned page is left in
 *    the Movable zone (PFN from /proc/self/pagemap);
 *  - the bytes a peer's RDMA READ returns are what the CPU wrote before, and
 *    what its WRITE leaves is what the CPU reads (the pin is on the page the
 *    migration moved the data to);
 *  - pin rounds thrown away (repin_retries) stay bounded: at most two per
 *    512-page batch (one lost to the pin's own migration);
 *  - a failed migration gives ENOMEM at registration and an error completion
 *    to an access, with nothing pinned or charged afterwards;
 *  - rxe's responder, the verify pass and a prefetch work item pinning the
 *    same fresh pages at once do not fail each other: no access fails.
 *
 * Every test SKIPs when no populated Movable zone exists (a boot without
 * movablecore=), unless the kernel command line carries vamr_movable_force
 * (then the figures of a normal boot are logged and the zone checks left out).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "mm_util.h"
#include "pattern.h"
#include "rdma_pair.h"
#include "vamr_lib.h"

#define PAGE 4096ul
#define NPAGES 1024ul /* two 512-page pin batches */
#define LEN (NPAGES * PAGE)
#define ACC (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#define VRW (VAMR_ACCESS_READ | VAMR_ACCESS_WRITE)
/* Pin rounds thrown away per 512-page batch: one lost to the pin's own migration, plus one. */
#define RETRIES_PER_BATCH 2ull

/* The PFN ranges [start, end) of the populated Movable zones (one per node). */
static struct {
	int n;
	unsigned long start[8], end[8];
} movable;

static int read_movable_zones(void)
{
	char line[256], zone[32] = "";
	unsigned long spanned = 0, present = 0, v;
	FILE *f = fopen("/proc/zoneinfo", "r");

	movable.n = 0;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		int node;

		if (sscanf(line, "Node %d, zone %31s", &node, zone) == 2) {
			spanned = present = 0;
			continue;
		}
		if (sscanf(line, " spanned %lu", &v) == 1)
			spanned = v;
		else if (sscanf(line, " present %lu", &v) == 1)
			present = v;
		else if (sscanf(line, " start_pfn: %lu", &v) == 1 && !strcmp(zone, "Movable") &&
			 present > 0 && movable.n < 8) {
			movable.start[movable.n] = v;
			movable.end[movable.n] = v + spanned;
			movable.n++;
		}
	}
	fclose(f);
	return movable.n;
}

static bool force_run(void)
{
	char s[4096] = "";
	int fd = open("/proc/cmdline", O_RDONLY);
	ssize_t r;

	if (fd < 0)
		return false;
	r = read(fd, s, sizeof(s) - 1);
	close(fd);
	return r > 0 && strstr(s, "vamr_movable_force");
}

/* The PFN mapped at va (0: not present, or PFNs hidden from this process). */
static unsigned long pfn_of(const void *va)
{
	uint64_t e = 0;
	int fd = open("/proc/self/pagemap", O_RDONLY);

	if (fd < 0)
		return 0;
	if (pread(fd, &e, sizeof(e), (uintptr_t)va / PAGE * sizeof(e)) != sizeof(e))
		e = 0;
	close(fd);
	if (!(e >> 63 & 1))
		return 0;
	return e & ((1ull << 55) - 1);
}

static bool pfn_movable(unsigned long pfn)
{
	int i;

	for (i = 0; i < movable.n; i++)
		if (pfn >= movable.start[i] && pfn < movable.end[i])
			return true;
	return false;
}

/* Pages of [a, a + n pages) mapped in a Movable zone; -1 when PFNs are hidden. */
static long count_movable(const uint8_t *a, size_t n)
{
	uint64_t *e = calloc(n, sizeof(*e));
	int fd = open("/proc/self/pagemap", O_RDONLY);
	long c = 0, seen = 0;
	size_t i;

	/* One read for the range: a read per page costs seconds of system time under TCG. */
	if (e && fd >= 0 &&
	    pread(fd, e, n * sizeof(*e), (uintptr_t)a / PAGE * sizeof(*e)) == (ssize_t)(n * sizeof(*e)))
		for (i = 0; i < n; i++) {
			unsigned long pfn = e[i] >> 63 & 1 ? e[i] & ((1ull << 55) - 1) : 0;

			seen += pfn != 0;
			c += pfn_movable(pfn);
		}
	if (fd >= 0)
		close(fd);
	free(e);
	return seen ? c : -1;
}

/* Touch every page (write) with the pattern of seed. */
static void fill(uint8_t *a, size_t len, uint64_t seed)
{
	pattern_fill(a, len, seed, 0);
}

FIXTURE(mov)
{
	struct rdma_pair pair;
	bool open;
	uint8_t *buf; /* the local side of the peer's READs and WRITEs */
	struct ibv_mr *buf_mr;
	int vfd;
	long vmpin0;
	bool zone; /* a populated Movable zone: the zone checks apply */
};

FIXTURE_SETUP(mov)
{
	const char *dev = rdma_pair_default_dev();
	int rc;

	self->vfd = -1;
	self->zone = read_movable_zones() > 0;
	if (!self->zone && !force_run())
		SKIP(return, "no populated Movable zone (boot with movablecore=)");
	rc = rdma_pair_open(&self->pair, dev);
	if (rc == -ENODEV)
		SKIP(return, "RDMA device %s not present", dev);
	ASSERT_EQ(0, rc);
	self->open = true;
	self->buf = map_anon(LEN);
	ASSERT_NE(NULL, self->buf);
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, self->buf, LEN, ACC, &self->buf_mr));
	self->vfd = vamr_open();
	ASSERT_LE(0, self->vfd);
	self->vmpin0 = vamr_vmpin_kb();
}

FIXTURE_TEARDOWN(mov)
{
	if (self->buf_mr)
		ibv_dereg_mr(self->buf_mr);
	if (self->open)
		rdma_pair_close(&self->pair);
	if (self->vfd >= 0)
		close(self->vfd);
}

/* The counters of a VA MR (VAMR_IOC_MR_QUERY): 0 or -errno. */
static int mr_counters(int vfd, struct ibv_mr *mr, struct vamr_counters *c)
{
	struct vamr_mr_query q = vamr_mr_query_of(mr);
	int ret = vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q);

	if (!ret)
		*c = q.counters;
	return ret;
}

/* Peer READ of len bytes at va into self->buf (poisoned first): 0 or the completion status. */
static int peer_read(FIXTURE_DATA(mov) *self, struct ibv_mr *mr, const uint8_t *va, size_t len)
{
	memset(self->buf, 0xee, len);
	return rdma_pair_read_sync(&self->pair, 0, self->buf, self->buf_mr->lkey, (uintptr_t)va,
				   mr->rkey, len, 0);
}

/* Peer WRITE of the pattern of seed (offsets from 0) to va. */
static int peer_write(FIXTURE_DATA(mov) *self, struct ibv_mr *mr, uint8_t *va, size_t len,
		      uint64_t seed)
{
	pattern_fill(self->buf, len, seed, 0);
	return rdma_pair_write_sync(&self->pair, 0, self->buf, self->buf_mr->lkey, (uintptr_t)va,
				    mr->rkey, len, 0);
}

/*
 * Registration through /dev/vamr of memory the CPU wrote (in the Movable zone):
 * every page pinned, none left in the zone, the bytes through the region are
 * the CPU's in both directions, at most RETRIES_PER_BATCH lost rounds a batch.
 */
TEST_F(mov, register_pins_every_page)
{
	struct vamr_stats st, g0, g1;
	uint8_t *a = map_anon(LEN), *out = malloc(LEN);
	long before, after;
	unsigned long pfn0;
	uint32_t h;
	double t0, t1;

	ASSERT_NE(NULL, a);
	ASSERT_NE(NULL, out);
	fill(a, LEN, 1);
	pfn0 = pfn_of(a);
	before = count_movable(a, NPAGES);
	ASSERT_EQ(0, vamr_stats(self->vfd, VAMR_STATS_GLOBAL, &g0));
	t0 = mono_s();
	ASSERT_EQ(0, vamr_register(self->vfd, a, LEN, VRW, 1, &h));
	t1 = mono_s();
	ASSERT_EQ(0, vamr_stats(self->vfd, h, &st));
	after = count_movable(a, NPAGES);
	TH_LOG("movable before %ld after %ld; pinned %llu, clear invalidations %llu, "
	       "repin_retries %llu; %.1f ms",
	       before, after, (unsigned long long)st.counters.pages_pinned,
	       (unsigned long long)st.counters.invalidations[VAMR_EVENT_CLEAR],
	       (unsigned long long)st.counters.repin_retries, (t1 - t0) * 1e3);
	EXPECT_EQ(NPAGES, st.counters.pages_pinned);
	EXPECT_EQ(self->vmpin0 + (long)(LEN / 1024), vamr_vmpin_kb());
	EXPECT_GE(RETRIES_PER_BATCH * NPAGES / 512, st.counters.repin_retries);
	if (self->zone && before > 0) {
		/* The pins migrated the pages: the region saw its own invalidations. */
		EXPECT_EQ(0, after);
		EXPECT_LE((uint64_t)before, st.counters.invalidations[VAMR_EVENT_CLEAR]);
		EXPECT_LE(1u, st.counters.repin_retries);
		if (pfn_movable(pfn0))
			EXPECT_NE(pfn0, pfn_of(a));
	}
	/* The data moved with the pages: the region reads what the CPU wrote. */
	ASSERT_EQ(0, vamr_read(self->vfd, h, a, out, LEN));
	EXPECT_EQ(PATTERN_OK, pattern_check(out, LEN, 1, 0));
	/* And the pins are the pages the process maps, both ways. */
	fill(a, LEN, 2);
	ASSERT_EQ(0, vamr_read(self->vfd, h, a, out, LEN));
	EXPECT_EQ(PATTERN_OK, pattern_check(out, LEN, 2, 0));
	pattern_fill(out, LEN, 3, 0);
	ASSERT_EQ(0, vamr_write(self->vfd, h, a, out, LEN));
	EXPECT_EQ(PATTERN_OK, pattern_check(a, LEN, 3, 0));
	ASSERT_EQ(0, vamr_stats(self->vfd, h, &st));
	EXPECT_EQ(NPAGES, st.counters.pages_pinned);
	ASSERT_EQ(0, vamr_unregister(self->vfd, h));
	EXPECT_EQ(self->vmpin0, vamr_vmpin_kb());
	ASSERT_EQ(0, vamr_stats(self->vfd, VAMR_STATS_GLOBAL, &g1));
	EXPECT_EQ(g0.counters.regions, g1.counters.regions);
	munmap(a, LEN);
	free(out);
}

/*
 * The events of a registration in the Movable zone: the pins' own migration
 * invalidates the region being registered (one CLEAR per page), and each of
 * those is an event record of the /dev/vamr file (the region's cookie, a
 * handle REGISTER has not returned yet). Logged: how many, and whether the
 * default ring of 512 overflowed. Checked: the records name only this
 * region's range, and none is an UNMAP (the mapping stayed).
 */
TEST_F(mov, registration_events)
{
	static struct vamr_event ev[VAMR_EVENTS_RING_DEFAULT + 1];
	uint8_t *a = map_anon(LEN);
	int efd, n, i, clear = 0, overflow = 0, other = 0;
	uint64_t lost = 0;
	uint32_t h;

	ASSERT_NE(NULL, a);
	fill(a, LEN, 5);
	efd = vamr_events_open_ex(self->vfd, VAMR_EVENTS_NONBLOCK, 0, NULL);
	ASSERT_LE(0, efd);
	ASSERT_EQ(0, vamr_register(self->vfd, a, LEN, VRW, 77, &h));
	n = vamr_drain_events(efd, ev, VAMR_EVENTS_RING_DEFAULT + 1);
	ASSERT_LE(0, n);
	for (i = 0; i < n; i++) {
		if (ev[i].kind == VAMR_EVENT_OVERFLOW) {
			overflow++;
			lost += ev[i].len;
			continue;
		}
		EXPECT_EQ(77u, ev[i].cookie);
		EXPECT_LE((uintptr_t)a, ev[i].addr);
		EXPECT_GE((uintptr_t)a + LEN, ev[i].addr + ev[i].len);
		EXPECT_NE((uint32_t)VAMR_EVENT_UNMAP, ev[i].kind);
		if (ev[i].kind == VAMR_EVENT_CLEAR)
			clear++;
		else
			other++;
	}
	TH_LOG("registration of %lu pages: %d records (%d CLEAR, %d other), %d overflow (%llu lost)",
	       NPAGES, n, clear, other, overflow, (unsigned long long)lost);
	ASSERT_EQ(0, vamr_unregister(self->vfd, h));
	close(efd);
	munmap(a, LEN);
}

/*
 * An rxe VA MR over movable memory: the peer's READ returns what the CPU
 * wrote before registering, its WRITE is what the CPU reads; MR_QUERY counts
 * every page pinned. A normal MR over the same kind of memory, for comparison.
 */
TEST_F(mov, rxe_register_read_write)
{
	uint8_t *a = map_anon(LEN), *b = map_anon(LEN);
	struct vamr_counters c;
	struct ibv_mr *mr, *nmr;
	long before, after;

	ASSERT_NE(NULL, a);
	ASSERT_NE(NULL, b);
	fill(a, LEN, 11);
	fill(b, LEN, 12);
	before = count_movable(a, NPAGES);
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, a, LEN, ACC | VAMR_ACCESS_VA, &mr));
	after = count_movable(a, NPAGES);
	ASSERT_EQ(0, mr_counters(self->vfd, mr, &c));
	TH_LOG("VA MR: movable before %ld after %ld; pinned %llu, clear invalidations %llu, "
	       "repin_retries %llu",
	       before, after, (unsigned long long)c.pages_pinned,
	       (unsigned long long)c.invalidations[VAMR_EVENT_CLEAR],
	       (unsigned long long)c.repin_retries);
	EXPECT_EQ(NPAGES, c.pages_pinned);
	EXPECT_GE(RETRIES_PER_BATCH * NPAGES / 512, c.repin_retries);
	if (self->zone && before > 0)
		EXPECT_EQ(0, after);
	EXPECT_EQ(self->vmpin0 + (long)(LEN / 1024), vamr_vmpin_kb());

	ASSERT_EQ(0, peer_read(self, mr, a, LEN));
	EXPECT_EQ(PATTERN_OK, pattern_check(self->buf, LEN, 11, 0));
	ASSERT_EQ(0, peer_write(self, mr, a, LEN, 13));
	EXPECT_EQ(PATTERN_OK, pattern_check(a, LEN, 13, 0));
	/* The CPU writes again: the peer sees it (the pin is the mapped page). */
	fill(a, LEN, 14);
	ASSERT_EQ(0, peer_read(self, mr, a, LEN));
	EXPECT_EQ(PATTERN_OK, pattern_check(self->buf, LEN, 14, 0));
	ASSERT_EQ(0, mr_counters(self->vfd, mr, &c));
	EXPECT_EQ(NPAGES, c.pages_pinned);
	EXPECT_EQ(0u, c.ondemand_repins);

	/* A normal MR (ib_umem_get()) over movable memory, the kernel's own path. */
	before = count_movable(b, NPAGES);
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, b, LEN, ACC, &nmr));
	if (self->zone && before > 0)
		EXPECT_EQ(0, count_movable(b, NPAGES));
	ASSERT_EQ(0, peer_read(self, nmr, b, LEN));
	EXPECT_EQ(PATTERN_OK, pattern_check(self->buf, LEN, 12, 0));
	ASSERT_EQ(0, ibv_dereg_mr(nmr));

	ASSERT_EQ(0, ibv_dereg_mr(mr));
	EXPECT_EQ(self->vmpin0, vamr_vmpin_kb());
	munmap(a, LEN);
	munmap(b, LEN);
}

/*
 * munmap + mmap of the middle half of a VA MR: the new pages (allocated
 * movable, written by the CPU) are pinned on demand by rxe's responder, which
 * migrates them first. The first access's slow path pins the whole remapped
 * half (its own lost race is retried, not shrunk to the access's own page).
 * Right bytes for READ and WRITE, bounded retries, none left movable, VmPin
 * back to its baseline after deregistration.
 */
TEST_F(mov, ondemand_after_remap)
{
	uint8_t *a = map_anon(LEN), *mid;
	size_t half = LEN / 2;
	struct vamr_counters c0, c;
	struct ibv_mr *mr;
	long before;

	ASSERT_NE(NULL, a);
	mid = a + LEN / 4;
	fill(a, LEN, 21);
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, a, LEN, ACC | VAMR_ACCESS_VA, &mr));
	ASSERT_EQ(0, mr_counters(self->vfd, mr, &c0));
	ASSERT_EQ(0, remap_fixed(mid, half));
	pattern_fill(mid, half, 22, LEN / 4);
	before = count_movable(mid, half / PAGE);
	ASSERT_EQ(0, mr_counters(self->vfd, mr, &c));
	EXPECT_EQ(NPAGES - half / PAGE, c.pages_pinned);

	/*
	 * A READ of 64 bytes at the start of the middle: its slow path pins the
	 * present pages after it too (the 512 absent slots, one batch), although
	 * its first round loses the race with its own migration.
	 */
	ASSERT_EQ(0, peer_read(self, mr, mid, 64));
	EXPECT_EQ(PATTERN_OK, pattern_check(self->buf, 64, 22, LEN / 4));
	ASSERT_EQ(0, mr_counters(self->vfd, mr, &c));
	TH_LOG("64-byte read: pinned %llu, ondemand %llu, repin_retries %llu",
	       (unsigned long long)c.pages_pinned, (unsigned long long)c.ondemand_repins,
	       (unsigned long long)(c.repin_retries - c0.repin_retries));
	EXPECT_EQ(NPAGES, c.pages_pinned);
	/* READ of the whole MR: the old quarters and the middle through their pins. */
	ASSERT_EQ(0, peer_read(self, mr, a, LEN));
	EXPECT_EQ(PATTERN_OK, pattern_check(self->buf, LEN / 4, 21, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(self->buf + LEN / 4, half, 22, LEN / 4));
	EXPECT_EQ(PATTERN_OK, pattern_check(self->buf + LEN / 4 + half, LEN / 4, 21,
					    LEN / 4 + half));
	ASSERT_EQ(0, mr_counters(self->vfd, mr, &c));
	TH_LOG("read: movable before %ld after %ld; pinned %llu, ondemand %llu, "
	       "repin_retries %llu (registration's %llu)",
	       before, count_movable(mid, half / PAGE), (unsigned long long)c.pages_pinned,
	       (unsigned long long)c.ondemand_repins, (unsigned long long)c.repin_retries,
	       (unsigned long long)c0.repin_retries);
	EXPECT_EQ(NPAGES, c.pages_pinned);
	EXPECT_EQ(half / PAGE, c.ondemand_repins);
	EXPECT_GE(RETRIES_PER_BATCH * half / PAGE / 512, c.repin_retries - c0.repin_retries);
	if (self->zone)
		EXPECT_EQ(0, count_movable(mid, half / PAGE));

	/* Again, with a WRITE as the first access: the responder pins for writing. */
	ASSERT_EQ(0, remap_fixed(mid, half));
	pattern_fill(mid, half, 23, 0);
	ASSERT_EQ(0, mr_counters(self->vfd, mr, &c0));
	ASSERT_EQ(0, peer_write(self, mr, mid, half, 24));
	EXPECT_EQ(PATTERN_OK, pattern_check(mid, half, 24, 0));
	ASSERT_EQ(0, mr_counters(self->vfd, mr, &c));
	TH_LOG("write: pinned %llu, ondemand %llu, repin_retries %llu",
	       (unsigned long long)c.pages_pinned,
	       (unsigned long long)(c.ondemand_repins - c0.ondemand_repins),
	       (unsigned long long)(c.repin_retries - c0.repin_retries));
	EXPECT_EQ(NPAGES, c.pages_pinned);
	EXPECT_GE(RETRIES_PER_BATCH * half / PAGE / 512, c.repin_retries - c0.repin_retries);
	if (self->zone)
		EXPECT_EQ(0, count_movable(mid, half / PAGE));
	/* The CPU's next bytes reach the peer through those pins. */
	fill(a, LEN, 25);
	ASSERT_EQ(0, peer_read(self, mr, a, LEN));
	EXPECT_EQ(PATTERN_OK, pattern_check(self->buf, LEN, 25, 0));

	ASSERT_EQ(0, ibv_dereg_mr(mr));
	EXPECT_EQ(self->vmpin0, vamr_vmpin_kb());
	munmap(a, LEN);
}

/*
 * fork and mprotect keep the mapping: the verify pass keeps the pins (no GUP,
 * no migration). MADV_DONTNEED of a quarter and a CPU write right after: new
 * movable pages, which the verify pass swaps in (pinning with FOLL_NOFAULT,
 * migrating them) or leaves absent for the next access. Either way, the peer
 * reads the CPU's bytes and nothing stays in the Movable zone once accessed.
 */
TEST_F(mov, verify_pass)
{
	uint8_t *a = map_anon(LEN), *q;
	struct vamr_counters c0, c;
	struct ibv_mr *mr;
	pid_t pid;
	int status, i;

	ASSERT_NE(NULL, a);
	q = a + LEN / 2;
	fill(a, LEN, 31);
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, a, LEN, ACC | VAMR_ACCESS_VA, &mr));
	ASSERT_EQ(0, mr_counters(self->vfd, mr, &c0));

	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0)
		_exit(a[0] == pattern_byte(31, 0) ? 0 : 1);
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_EQ(0, mprotect(a, LEN, PROT_READ));
	ASSERT_EQ(0, mprotect(a, LEN, PROT_READ | PROT_WRITE));
	/* The verify pass keeps every pin: same pages, nothing pinned again. */
	for (i = 0; i < 5000; i++) {
		ASSERT_EQ(0, mr_counters(self->vfd, mr, &c));
		if (c.pins_kept - c0.pins_kept >= NPAGES)
			break;
		usleep(1000);
	}
	TH_LOG("fork+mprotect: kept %llu swapped %llu unpinned %llu retries %llu",
	       (unsigned long long)(c.pins_kept - c0.pins_kept),
	       (unsigned long long)(c.pins_swapped - c0.pins_swapped),
	       (unsigned long long)(c.pages_unpinned - c0.pages_unpinned),
	       (unsigned long long)(c.repin_retries - c0.repin_retries));
	EXPECT_LE(NPAGES, c.pins_kept - c0.pins_kept);
	EXPECT_EQ(0u, c.pages_unpinned - c0.pages_unpinned);
	fill(a, LEN, 32);
	ASSERT_EQ(0, peer_read(self, mr, a, LEN));
	EXPECT_EQ(PATTERN_OK, pattern_check(self->buf, LEN, 32, 0));
	ASSERT_EQ(0, peer_write(self, mr, a, LEN, 33));
	EXPECT_EQ(PATTERN_OK, pattern_check(a, LEN, 33, 0));

	/* DONTNEED + immediate touch: new (movable) pages under suspect pins. */
	ASSERT_EQ(0, mr_counters(self->vfd, mr, &c0));
	ASSERT_EQ(0, madvise(q, LEN / 4, MADV_DONTNEED));
	pattern_fill(q, LEN / 4, 34, 0);
	for (i = 0; i < 5000; i++) {
		ASSERT_EQ(0, mr_counters(self->vfd, mr, &c));
		if (c.pins_swapped - c0.pins_swapped + c.pages_unpinned - c0.pages_unpinned >=
		    LEN / 4 / PAGE)
			break;
		usleep(1000);
	}
	TH_LOG("dontneed: swapped %llu unpinned %llu kept %llu retries %llu, movable %ld",
	       (unsigned long long)(c.pins_swapped - c0.pins_swapped),
	       (unsigned long long)(c.pages_unpinned - c0.pages_unpinned),
	       (unsigned long long)(c.pins_kept - c0.pins_kept),
	       (unsigned long long)(c.repin_retries - c0.repin_retries),
	       count_movable(q, LEN / 4 / PAGE));
	EXPECT_GE(RETRIES_PER_BATCH * 2, c.repin_retries - c0.repin_retries);
	ASSERT_EQ(0, peer_read(self, mr, q, LEN / 4));
	EXPECT_EQ(PATTERN_OK, pattern_check(self->buf, LEN / 4, 34, 0));
	ASSERT_EQ(0, mr_counters(self->vfd, mr, &c));
	EXPECT_EQ(NPAGES, c.pages_pinned);
	if (self->zone)
		EXPECT_EQ(0, count_movable(a, NPAGES));
	ASSERT_EQ(0, peer_write(self, mr, q, LEN / 4, 35));
	EXPECT_EQ(PATTERN_OK, pattern_check(q, LEN / 4, 35, 0));

	ASSERT_EQ(0, ibv_dereg_mr(mr));
	EXPECT_EQ(self->vmpin0, vamr_vmpin_kb());
	munmap(a, LEN);
}

/*
 * Threads that access the same fresh (movable) pages at the same moment:
 * each access pins them on demand, so several pin rounds migrate the same page
 * at once, and one that finds another's pin on it fails its migration
 * (ENOMEM). vamr tries such a round again (4 times), which does not always
 * get through: a read may fail with ENOMEM (a known limit, logged; normal MRs
 * registered the same way fail as often, see concurrent_normal_*). Checked:
 * a read succeeds with the CPU's bytes or fails with ENOMEM, the CPU's own
 * bytes never change, and every page is pinned once all is over.
 */
#define THREADS 4
#define ROUNDS 2
#define CLEN (256 * PAGE)
struct reader {
	int fd;
	uint32_t h;
	uint8_t *a;
	pthread_barrier_t *bar;
	int err;	/* first error (-errno), 0 */
	int bad;	/* reads whose bytes were wrong */
	size_t off;	/* the first wrong byte's offset, of the last wrong read */
	uint8_t got;
	uint64_t seed;
	uint8_t *out;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	int ret;

	pthread_barrier_wait(r->bar);
	ret = vamr_read(r->fd, r->h, r->a, r->out, CLEN);
	if (ret && !r->err)
		r->err = ret;
	if (!ret) {
		size_t off = pattern_check(r->out, CLEN, r->seed, 0);

		if (off != PATTERN_OK) {
			r->bad++;
			r->off = off;
			r->got = r->out[off];
		}
	}
	return NULL;
}

TEST_F_TIMEOUT(mov, concurrent_first_access, 120)
{
	struct reader rd[THREADS];
	pthread_barrier_t bar;
	pthread_t t[THREADS];
	struct vamr_stats st;
	uint8_t *a = map_anon(CLEN);
	int i, k, errs = 0, enomem = 0, bad = 0, cpu_bad = 0;
	uint32_t h;

	ASSERT_NE(NULL, a);
	/*
	 * Registered over the mapping, not over a hole: a hole's VA could be
	 * handed to one of the malloc()s below, and the remap would then put the
	 * region under a reader's own buffer.
	 */
	ASSERT_EQ(0, vamr_register(self->vfd, a, CLEN, VRW, 1, &h));
	ASSERT_EQ(0, pthread_barrier_init(&bar, NULL, THREADS));
	for (i = 0; i < THREADS; i++) {
		rd[i] = (struct reader){ .fd = self->vfd, .h = h, .a = a, .bar = &bar };
		rd[i].out = malloc(CLEN);
		ASSERT_NE(NULL, rd[i].out);
	}
	for (k = 0; k < ROUNDS; k++) {
		/* Fresh memory at the same VA (the old pins go with the munmap). */
		ASSERT_EQ(0, remap_fixed(a, CLEN));
		fill(a, CLEN, 50 + k);
		for (i = 0; i < THREADS; i++) {
			rd[i].seed = 50 + k;
			rd[i].err = 0;
			ASSERT_EQ(0, pthread_create(&t[i], NULL, reader_main, &rd[i]));
		}
		for (i = 0; i < THREADS; i++) {
			pthread_join(t[i], NULL);
			if (rd[i].bad) {
				size_t o = rd[i].off, e = o;

				/* How far the wrong bytes go (the page?) and whose they are. */
				while (e < CLEN && rd[i].out[e] != pattern_byte(rd[i].seed, e))
					e++;
				TH_LOG("round %d thread %d: wrong from %zu (page %zu) to %zu: got %#x, "
				       "want %#x, previous round's %#x, CPU now %#x, err %d", k, i, o,
				       o / PAGE, e, rd[i].got, pattern_byte(rd[i].seed, o),
				       pattern_byte(rd[i].seed - 1, o), a[o], rd[i].err);
			}
			errs += rd[i].err != 0;
			enomem += rd[i].err == -ENOMEM;
			bad += rd[i].bad;
			rd[i].bad = 0;
		}
		/* The CPU's own bytes, whatever the reads returned. */
		if (pattern_check(a, CLEN, 50 + k, 0) != PATTERN_OK) {
			size_t off = pattern_check(a, CLEN, 50 + k, 0);

			cpu_bad++;
			TH_LOG("round %d: the CPU's bytes changed at %zu (page %zu): %#x, want %#x",
			       k, off, off / PAGE, a[off], pattern_byte(50 + k, off));
		}
	}
	ASSERT_EQ(0, vamr_stats(self->vfd, h, &st));
	TH_LOG("%d rounds x %d threads: %d reads failed (%d ENOMEM), %d wrong; "
	       "repin_retries %llu, movable after %ld",
	       ROUNDS, THREADS, errs, enomem, bad, (unsigned long long)st.counters.repin_retries,
	       count_movable(a, (CLEN / PAGE)));
	EXPECT_EQ(0, cpu_bad);
	EXPECT_EQ(enomem, errs);
	EXPECT_EQ(0, bad);
	/* A last read, alone: everything pinned, the last round's bytes. */
	ASSERT_EQ(0, vamr_read(self->vfd, h, a, rd[0].out, CLEN));
	EXPECT_EQ(PATTERN_OK, pattern_check(rd[0].out, CLEN, 50 + ROUNDS - 1, 0));
	ASSERT_EQ(0, vamr_stats(self->vfd, h, &st));
	EXPECT_EQ((CLEN / PAGE), st.counters.pages_pinned);
	if (self->zone)
		EXPECT_EQ(0, count_movable(a, (CLEN / PAGE)));
	ASSERT_EQ(0, vamr_unregister(self->vfd, h));
	EXPECT_EQ(self->vmpin0, vamr_vmpin_kb());
	for (i = 0; i < THREADS; i++)
		free(rd[i].out);
	pthread_barrier_destroy(&bar);
	munmap(a, CLEN);
}

/*
 * The same without vamr (control): threads that register normal MRs
 * (ib_umem_get(), FOLL_LONGTERM) over the same fresh movable pages at the same
 * moment, then the CPU checks its own bytes. Whatever goes wrong here is the
 * kernel's long-term pin migration, not vamr's.
 */
struct regger {
	struct rdma_pair *pair;
	unsigned int access;
	uint8_t *a;
	pthread_barrier_t *bar;
	int err;
};

static void *regger_main(void *arg)
{
	struct regger *r = arg;
	struct ibv_mr *mr = NULL;

	pthread_barrier_wait(r->bar);
	r->err = rdma_pair_reg_mr(r->pair, r->a, CLEN, r->access, &mr);
	if (!r->err)
		ibv_dereg_mr(mr);
	return NULL;
}

static void normal_mrs(struct __test_metadata *_metadata, FIXTURE_DATA(mov) *self,
		       unsigned int access)
{
	struct regger rg[THREADS];
	pthread_barrier_t bar;
	pthread_t t[THREADS];
	uint8_t *a = map_anon(CLEN);
	int i, k, errs = 0, enomem = 0, bad = 0;

	ASSERT_NE(NULL, a);
	ASSERT_EQ(0, pthread_barrier_init(&bar, NULL, THREADS));
	for (k = 0; k < ROUNDS; k++) {
		size_t off;

		ASSERT_EQ(0, remap_fixed(a, CLEN));
		fill(a, CLEN, 60 + k);
		for (i = 0; i < THREADS; i++) {
			rg[i] = (struct regger){ .pair = &self->pair, .access = access, .a = a,
						 .bar = &bar };
			ASSERT_EQ(0, pthread_create(&t[i], NULL, regger_main, &rg[i]));
		}
		for (i = 0; i < THREADS; i++) {
			pthread_join(t[i], NULL);
			errs += rg[i].err != 0;
			enomem += rg[i].err == -ENOMEM;
		}
		off = pattern_check(a, CLEN, 60 + k, 0);
		if (off != PATTERN_OK) {
			bad++;
			TH_LOG("round %d: the CPU's bytes changed at %zu (page %zu): %#x, want %#x",
			       k, off, off / PAGE, a[off], pattern_byte(60 + k, off));
		}
	}
	TH_LOG("%d rounds x %d threads registering normal MRs (access %#x): %d failed (%d ENOMEM), "
	       "%d rounds with changed bytes", ROUNDS, THREADS, access, errs, enomem, bad);
	EXPECT_EQ(0, bad);
	pthread_barrier_destroy(&bar);
	munmap(a, CLEN);
}

/* Write pins (FOLL_WRITE), as an MR with local write access takes. */
TEST_F_TIMEOUT(mov, concurrent_normal_mrs_control, 120)
{
	normal_mrs(_metadata, self, ACC);
}

/* Read-only pins (no FOLL_WRITE): an MR without write access, as vamr pins for a read. */
TEST_F_TIMEOUT(mov, concurrent_normal_read_mrs_control, 120)
{
	normal_mrs(_metadata, self, 0);
}

/*
 * rdma-core 44's rxe provider has no ibv_advise_mr(); the uverbs command is
 * what newer providers send (exported for providers, IBVERBS_PRIVATE_34).
 */
int ibv_cmd_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
		      struct ibv_sge *sg_list, uint32_t num_sge);

/*
 * The rounds of one VA MR that run outside the process (rxe's responder, the
 * verify pass, an asynchronous prefetch) pinning the same fresh movable pages
 * at the same moment: each MADV_DONTNEED (or munmap + mmap) and CPU write is
 * followed at once by a prefetch (a work item) and a peer READ or WRITE, while the
 * verify pass swaps the new pages in. Before such rounds claimed their pages
 * (PinTurn, src/region/fill.rs), their migrations failed each other's (ENOMEM) and the
 * READ completed with a remote access error, the QP broken: rdma_remote's
 * madv_dontneed on the movable node, one run in three. Checked: every READ
 * and WRITE succeeds with the CPU's bytes, every page ends up pinned outside
 * the Movable zone, and nothing is left pinned after deregistration.
 */
#define RLEN (64 * PAGE)
#define RACE_ROUNDS 32
TEST_F_TIMEOUT(mov, device_rounds_take_turns, 180)
{
	uint8_t *a = map_anon(RLEN);
	struct vamr_counters c0, c;
	struct ibv_mr *mr;
	int k, st, failed = 0, wrong = 0, advised = 0;

	ASSERT_NE(NULL, a);
	fill(a, RLEN, 70);
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, a, RLEN, ACC | VAMR_ACCESS_VA, &mr));
	ASSERT_EQ(0, mr_counters(self->vfd, mr, &c0));
	for (k = 0; k < RACE_ROUNDS; k++) {
		struct ibv_sge sge = { .addr = (uintptr_t)a, .length = RLEN, .lkey = mr->lkey };
		uint64_t seed = 71 + k;

		/* MADV_DONTNEED lost most often before (suspect pins: the verify pass swaps). */
		if (k % 4 == 3) {
			ASSERT_EQ(0, remap_fixed(a, RLEN));
		} else {
			ASSERT_EQ(0, madvise(a, RLEN, MADV_DONTNEED));
		}
		fill(a, RLEN, seed);
		/* Asynchronous: a work item pins while the READ below arrives. */
		if (!ibv_cmd_advise_mr(self->pair.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1))
			advised++;
		st = k % 3 == 2 ? peer_write(self, mr, a, RLEN, seed + 100) : peer_read(self, mr, a, RLEN);
		if (st) {
			failed++;
			TH_LOG("round %d (%s, %s): completion status %d (%s)", k,
			       k % 4 == 3 ? "munmap+mmap" : "MADV_DONTNEED", k % 3 == 2 ? "WRITE" : "READ",
			       st, ibv_wc_status_str(st));
			ASSERT_EQ(0, rdma_pair_recover(&self->pair));
			continue;
		}
		if (k % 3 == 2 ? pattern_check(a, RLEN, seed + 100, 0) != PATTERN_OK
			       : pattern_check(self->buf, RLEN, seed, 0) != PATTERN_OK) {
			wrong++;
			TH_LOG("round %d: wrong bytes", k);
		}
	}
	ASSERT_EQ(0, mr_counters(self->vfd, mr, &c));
	TH_LOG("%d rounds: %d failed, %d wrong, %d prefetches; repin_retries %llu, "
	       "on-demand %llu, swapped %llu, movable after %ld", RACE_ROUNDS, failed, wrong,
	       advised, (unsigned long long)(c.repin_retries - c0.repin_retries),
	       (unsigned long long)(c.ondemand_repins - c0.ondemand_repins),
	       (unsigned long long)(c.pins_swapped - c0.pins_swapped),
	       count_movable(a, RLEN / PAGE));
	EXPECT_EQ(0, failed);
	EXPECT_EQ(0, wrong);
	/* The prefetch leg ran every round (a work item pinning beside the responder). */
	EXPECT_EQ(RACE_ROUNDS, advised);
	/* One round lost to its own migration per batch, plus one (before the claims: 57-177). */
	EXPECT_GE(RETRIES_PER_BATCH * RACE_ROUNDS, c.repin_retries - c0.repin_retries);
	/* A last READ, alone: every page pinned, out of the zone. */
	ASSERT_EQ(0, peer_read(self, mr, a, RLEN));
	ASSERT_EQ(0, mr_counters(self->vfd, mr, &c));
	EXPECT_EQ(RLEN / PAGE, c.pages_pinned);
	if (self->zone)
		EXPECT_EQ(0, count_movable(a, RLEN / PAGE));
	ASSERT_EQ(0, ibv_dereg_mr(mr));
	EXPECT_EQ(self->vmpin0, vamr_vmpin_kb());
	munmap(a, RLEN);
}

/*
 * A migration that fails: page 5 of 64 is also held by a pipe (vmsplice
 * without reading: the pipe buffer keeps a page reference, so migrate_pages()
 * gives up on it and GUP returns ENOMEM). Registration fails with ENOMEM and
 * leaves nothing pinned or charged; an access of a VA MR to such a page
 * (pinned on demand) gives an error completion, and the next one, after the
 * pipe let go, the CPU's bytes. Each check waits for a bounded time: no
 * endless retry.
 */
TEST_F(mov, migration_fails)
{
	size_t n = 64, len = n * PAGE;
	uint8_t *a = map_anon(len);
	struct vamr_stats g0, g1;
	struct vamr_counters c;
	struct ibv_mr *mr;
	struct iovec iov;
	int p[2], ret;
	uint32_t h = 0;
	double t0;

	ASSERT_NE(NULL, a);
	fill(a, len, 41);
	if (!self->zone || !pfn_movable(pfn_of(a + 5 * PAGE)))
		SKIP(goto out, "page not in the Movable zone: its pin migrates nothing");
	ASSERT_EQ(0, pipe(p));
	iov = (struct iovec){ .iov_base = a + 5 * PAGE, .iov_len = PAGE };
	ASSERT_EQ((ssize_t)PAGE, vmsplice(p[1], &iov, 1, 0));
	ASSERT_EQ(0, vamr_stats(self->vfd, VAMR_STATS_GLOBAL, &g0));

	t0 = mono_s();
	ret = vamr_register(self->vfd, a, len, VRW, 1, &h);
	TH_LOG("register with a held page: %s in %.1f ms", strerror(-ret), (mono_s() - t0) * 1e3);
	EXPECT_EQ(-ENOMEM, ret);
	if (!ret)
		vamr_unregister(self->vfd, h);
	EXPECT_EQ(self->vmpin0, vamr_vmpin_kb());
	ASSERT_EQ(0, vamr_stats(self->vfd, VAMR_STATS_GLOBAL, &g1));
	EXPECT_EQ(g0.counters.regions, g1.counters.regions);
	EXPECT_EQ(g0.counters.pages_pinned, g1.counters.pages_pinned);
	/* rxe: the same errno from ibv_reg_mr(). */
	ret = rdma_pair_reg_mr(&self->pair, a, len, ACC | VAMR_ACCESS_VA, &mr);
	EXPECT_EQ(-ENOMEM, ret);
	if (!ret)
		ibv_dereg_mr(mr);
	EXPECT_EQ(self->vmpin0, vamr_vmpin_kb());
	close(p[0]);
	close(p[1]);

	/* An access: a VA MR over a hole, then fresh memory, one page held by a pipe. */
	munmap(a, len);
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, a, len, ACC | VAMR_ACCESS_VA, &mr));
	ASSERT_EQ(0, remap_fixed(a, len));
	fill(a, len, 42);
	ASSERT_EQ(0, pipe(p));
	iov = (struct iovec){ .iov_base = a + 5 * PAGE, .iov_len = PAGE };
	ASSERT_EQ((ssize_t)PAGE, vmsplice(p[1], &iov, 1, 0));
	if (!pfn_movable(pfn_of(a + 5 * PAGE))) {
		close(p[0]);
		close(p[1]);
		ibv_dereg_mr(mr);
		SKIP(goto out, "fresh page not in the Movable zone");
	}
	t0 = mono_s();
	ret = peer_read(self, mr, a + 5 * PAGE, 64);
	ASSERT_EQ(0, mr_counters(self->vfd, mr, &c));
	TH_LOG("READ of a held page: completion status %d in %.1f ms, repin_retries %llu", ret,
	       (mono_s() - t0) * 1e3, (unsigned long long)c.repin_retries);
	EXPECT_NE(0, ret);
	EXPECT_EQ(0u, c.pages_pinned);
	close(p[0]);
	close(p[1]);
	ASSERT_EQ(0, rdma_pair_recover(&self->pair));
	ASSERT_EQ(0, peer_read(self, mr, a, len));
	EXPECT_EQ(PATTERN_OK, pattern_check(self->buf, len, 42, 0));
	EXPECT_EQ(0, count_movable(a, n));
	ASSERT_EQ(0, ibv_dereg_mr(mr));
	EXPECT_EQ(self->vmpin0, vamr_vmpin_kb());
out:
	munmap(a, len);
}

TEST_HARNESS_MAIN
