// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_special: a table of "special" mappings under a VA region, over both
 * interfaces: a /dev/vamr region (VAMR_IOC_REGISTER, VAMR_IOC_ACCESS,
 * VAMR_IOC_ATOMIC) and a VA MR on rxe (ibv_reg_mr(VAMR_ACCESS_VA), then the
 * peer QP's RDMA READ, RDMA WRITE and ATOMIC fetch-add), each registered
 * read-only and read-write.
 *
 * Rows: the vdso, [vvar], [vvar_vclock], PROT_NONE anonymous memory (before
 * and after registration), read-only private and shared file mappings,
 * sealed memfds (F_SEAL_WRITE, F_SEAL_FUTURE_WRITE) mapped read-only, the
 * gap below the stack, a shmem file truncated under the mapping (accesses
 * past EOF), /dev/zero private and shared, hugetlb, guard pages
 * (MADV_GUARD_INSTALL, before and after registration), and anonymous memory
 * made read-only after registration.
 *
 * The expected outcome of each row is what ib_umem_get() / ODP would allow:
 *  - a registration may be refused (any errno) unless the memory is ordinary
 *    and the access asked for is allowed on it;
 *  - a read of memory the process can read returns exactly the bytes the CPU
 *    sees; a writable region over read-only memory may fail reads too (its
 *    pins are write pins, as ib_umem_get()'s and ODP's are); reads of memory
 *    the CPU cannot read (PROT_NONE, holes, guard pages, past EOF, VM_PFNMAP)
 *    fail and return no data; the vdso and [vvar] may be refused or read;
 *  - a write or an atomic lands exactly where the CPU looks when the region
 *    is writable and so is the memory; otherwise it fails and changes
 *    nothing (checked through the CPU, the file, or by making the memory
 *    visible again afterwards).
 *
 * Each row prints "# special: <row> <iface> | reg .. | read .. | write .. |
 * atomic .." at once, and the whole table is printed again at the end as TAP
 * diagnostics. A column marked '!' is not the expected outcome.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "mm_util.h"
#include "pattern.h"
#include "rdma_pair.h"
#include "vamr_lib.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

#define PAGE 4096ul
#define BUF_LEN (64ul << 10)
#define ACC_RW (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)
#define ACC_RO IBV_ACCESS_REMOTE_READ
#define ADDEND 0x0000000300000105ull
#define POISON_SEED 0xdeadull
/* Below the stack: past the 64 KiB in which GUP warns with a stack dump. */
#define STACK_GAP_OFF (128ul << 10)

/* Columns, for marking the one whose outcome is wrong. */
#define COL_REG (1u << 0)
#define COL_READ (1u << 1)
#define COL_WRITE (1u << 2)
#define COL_ATOMIC (1u << 3)

/* An operation that did not run (registration refused or not reached). */
#define NOT_RUN (-100000)
/* rxe: a work completion status is reported as WC_BASE + status, none as -errno. */
#define WC_BASE 1000

enum iface { IF_VAMR, IF_RXE };

FIXTURE(special)
{
	int vfd;			/* /dev/vamr */
	struct rdma_pair pair;
	bool open;
	uint8_t *src, *dst;		/* write source, read destination (rxe: normal MRs) */
	uint8_t *snap;			/* the CPU's bytes before an operation */
	struct ibv_mr *src_mr, *dst_mr;
	struct ibv_mr *mr;		/* rxe: the VA MR under test */
	uint32_t handle;		/* vamr: the region under test */
	bool have_region;
	void *maps[4];			/* mappings made by the row, unmapped in teardown */
	size_t map_len[4];
	int nmaps;
	int fds[4];
	int nfds;
};

FIXTURE_VARIANT(special)
{
	enum iface iface;
	bool write;		/* the region / MR allows writes and atomics */
	const char *name;
};

FIXTURE_VARIANT_ADD(special, vamr_ro) { .iface = IF_VAMR, .write = false, .name = "vamr-ro" };
FIXTURE_VARIANT_ADD(special, vamr_rw) { .iface = IF_VAMR, .write = true, .name = "vamr-rw" };
FIXTURE_VARIANT_ADD(special, rxe_ro) { .iface = IF_RXE, .write = false, .name = "rxe-ro" };
FIXTURE_VARIANT_ADD(special, rxe_rw) { .iface = IF_RXE, .write = true, .name = "rxe-rw" };

/* --- the table, shared by the test children, printed by the parent at exit --- */

struct entry {
	char row[28], iface[10];
	char col[4][24];
	unsigned int wrong;
};

static struct table {
	int n;
	struct entry e[128];
} *table;
static pid_t main_pid;

static void __attribute__((constructor)) table_init(void)
{
	void *p = mmap(NULL, sizeof(*table), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	table = p == MAP_FAILED ? NULL : p;
	main_pid = getpid();
}

static void __attribute__((destructor)) table_print(void)
{
	static const char *const hdr[] = { "reg", "read", "write", "atomic" };
	bool *done;
	int i, j, c;

	if (!table || getpid() != main_pid || !table->n)
		return;
	done = calloc(table->n, sizeof(*done));
	if (!done)
		return;
	printf("# special mappings under VA regions: ok, an errno (/dev/vamr), or the work\n");
	printf("# completion status (rxe); '-' not run; '!' not the expected outcome\n");
	printf("# %-24s %-8s", "row", "iface");
	for (c = 0; c < 4; c++)
		printf(" | %-14s", hdr[c]);
	printf("\n");
	/* Grouped by row, in the order the rows first ran. */
	for (i = 0; i < table->n; i++) {
		if (done[i])
			continue;
		for (j = i; j < table->n; j++) {
			struct entry *e = &table->e[j];

			if (done[j] || strcmp(e->row, table->e[i].row))
				continue;
			done[j] = true;
			printf("# %-24s %-8s", e->row, e->iface);
			for (c = 0; c < 4; c++) {
				char cell[32];

				snprintf(cell, sizeof(cell), "%s%s", e->col[c],
					 e->wrong & (1u << c) ? "!" : "");
				printf(" | %-14s", cell);
			}
			printf("\n");
		}
	}
	fflush(stdout);
	free(done);
}

/* --- fixture --- */

FIXTURE_SETUP(special)
{
	const char *dev = rdma_pair_default_dev();
	int rc;

	self->vfd = vamr_open();
	if (self->vfd == -ENOENT)
		SKIP(return, "/dev/vamr not present");
	ASSERT_LE(0, self->vfd);
	self->src = mmap(NULL, BUF_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	self->dst = mmap(NULL, BUF_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	self->snap = mmap(NULL, BUF_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, self->src);
	ASSERT_NE(MAP_FAILED, self->dst);
	ASSERT_NE(MAP_FAILED, self->snap);
	if (variant->iface != IF_RXE)
		return;
	rc = rdma_pair_open(&self->pair, dev);
	if (rc == -ENODEV)
		SKIP(return, "RDMA device %s not present", dev);
	ASSERT_EQ(0, rc) TH_LOG("rdma_pair_open: %s", strerror(-rc));
	self->open = true;
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, self->src, BUF_LEN, ACC_RW, &self->src_mr));
	ASSERT_EQ(0, rdma_pair_reg_mr(&self->pair, self->dst, BUF_LEN, ACC_RW, &self->dst_mr));
}

FIXTURE_TEARDOWN(special)
{
	int i;

	if (self->mr)
		ibv_dereg_mr(self->mr);
	if (self->have_region)
		vamr_unregister(self->vfd, self->handle);
	if (self->src_mr)
		ibv_dereg_mr(self->src_mr);
	if (self->dst_mr)
		ibv_dereg_mr(self->dst_mr);
	if (self->open)
		rdma_pair_close(&self->pair);
	if (self->vfd >= 0)
		close(self->vfd);
	for (i = 0; i < self->nmaps; i++)
		munmap(self->maps[i], self->map_len[i]);
	for (i = 0; i < self->nfds; i++)
		close(self->fds[i]);
	if (self->src && self->src != MAP_FAILED)
		munmap(self->src, BUF_LEN);
	if (self->dst && self->dst != MAP_FAILED)
		munmap(self->dst, BUF_LEN);
	if (self->snap && self->snap != MAP_FAILED)
		munmap(self->snap, BUF_LEN);
}

/* Keep a mapping / a descriptor of the row until teardown. */
static void *track_map(FIXTURE_DATA(special) *self, void *p, size_t len)
{
	if (p == MAP_FAILED || self->nmaps == 4)
		return p;
	self->maps[self->nmaps] = p;
	self->map_len[self->nmaps++] = len;
	return p;
}

static int track_fd(FIXTURE_DATA(special) *self, int fd)
{
	if (fd >= 0 && self->nfds < 4)
		self->fds[self->nfds++] = fd;
	return fd;
}

/* The VMA of /proc/self/maps whose path is exactly @name ("[vdso]"). */
static bool find_vma_named(const char *name, uintptr_t *start, uintptr_t *end)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	bool found = false;

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		size_t n = strlen(line), k = strlen(name);

		if (n && line[n - 1] == '\n')
			line[--n] = 0;
		if (n >= k && !strcmp(line + n - k, name) && line[n - k - 1] == ' ')
			found = sscanf(line, "%lx-%lx", start, end) == 2;
	}
	fclose(f);
	return found;
}

/* Whether no page of [p, p + len) is mapped (mincore fails with ENOMEM on each). */
static bool all_unmapped(void *p, size_t len)
{
	unsigned char v;
	size_t off;

	for (off = 0; off < len; off += PAGE)
		if (mincore((uint8_t *)p + off, PAGE, &v) == 0 || errno != ENOMEM)
			return false;
	return true;
}

/* --- one row --- */

enum rd {
	RD_MUST,	/* the memory is readable: a read returns exactly the CPU's bytes */
	RD_MAY,		/* a read may fail or return exactly the CPU's bytes */
	RD_NEVER,	/* the CPU cannot read it either: a read fails, returns nothing */
};

struct row {
	const char *name;
	void *reg;		/* the registered range */
	size_t reg_len;
	uint8_t *win;		/* read and write window, inside the range */
	size_t win_len;
	uint64_t *word;		/* atomic target, 8-byte aligned, outside the window */
	bool cpu_visible;	/* the CPU can read win and word now */
	bool writable;		/* the process can write the memory */
	bool special;		/* vdso/vvar: registration may be refused, reads may fail */
	bool registered;	/* the row registered the range itself (reg_rc set) */
	enum rd read;		/* for a read-only region */
	uint64_t seed;		/* pattern of the write */
	/* results: 0, an errno (vamr), WC_BASE + status (rxe), -errno, or NOT_RUN */
	int reg_rc, read_rc, write_rc, atomic_rc;
	unsigned int wrong;	/* COL_* whose outcome is not the expected one */
	bool write_must, read_must_fail;
};

/* Record a check of column @col: a failed one marks the column and the test. */
#define CHECK(r, col, cond, fmt, ...)                                                  \
	do {                                                                           \
		bool __ok = (cond);                                                    \
		if (!__ok) {                                                           \
			(r)->wrong |= (col);                                           \
			TH_LOG("%s %s: " fmt, (r)->name, variant->name, ##__VA_ARGS__); \
		}                                                                      \
		EXPECT_TRUE(__ok);                                                     \
	} while (0)

static const char *wc_name(int st)
{
	switch (st) {
	case IBV_WC_SUCCESS: return "ok";
	case IBV_WC_LOC_PROT_ERR: return "LOC_PROT_ERR";
	case IBV_WC_LOC_QP_OP_ERR: return "LOC_QP_OP_ERR";
	case IBV_WC_WR_FLUSH_ERR: return "WR_FLUSH_ERR";
	case IBV_WC_REM_INV_REQ_ERR: return "REM_INV_REQ_ERR";
	case IBV_WC_REM_ACCESS_ERR: return "REM_ACCESS_ERR";
	case IBV_WC_REM_OP_ERR: return "REM_OP_ERR";
	case IBV_WC_RETRY_EXC_ERR: return "RETRY_EXC_ERR";
	default: return NULL;
	}
}

static void render(char *out, size_t n, int rc)
{
	const char *s;

	if (rc == NOT_RUN)
		snprintf(out, n, "-");
	else if (rc == 0)
		snprintf(out, n, "ok");
	else if (rc >= WC_BASE && (s = wc_name(rc - WC_BASE)))
		snprintf(out, n, "%s", s);
	else if (rc >= WC_BASE)
		snprintf(out, n, "wc%d", rc - WC_BASE);
	else if (rc < 0)
		snprintf(out, n, "no-wc:%s", strerrorname_np(-rc) ?: "?");
	else
		snprintf(out, n, "%s", strerrorname_np(rc) ?: "?");
}

/* Register the range; 0 or a positive errno. */
static int reg_target(struct __test_metadata *_metadata, FIXTURE_DATA(special) *self,
		      const FIXTURE_VARIANT(special) *variant, void *addr, size_t len)
{
	int rc;

	if (variant->iface == IF_VAMR) {
		rc = vamr_register(self->vfd, addr, len,
				   VAMR_ACCESS_READ | (variant->write ? VAMR_ACCESS_WRITE : 0),
				   0x5bec1a1, &self->handle);
		self->have_region = !rc;
		return -rc;
	}
	rc = rdma_pair_reg_mr(&self->pair, addr, len,
			      (variant->write ? ACC_RW : ACC_RO) | VAMR_ACCESS_VA, &self->mr);
	if (!rc) {
		struct vamr_mr_query q = vamr_mr_query_of(self->mr);

		/* A normal MR here would make the whole row meaningless. */
		EXPECT_EQ(0, vamr_ioctl(self->vfd, VAMR_IOC_MR_QUERY, &q))
			TH_LOG("the MR has no VA semantics: is the patched rdma_rxe loaded?");
	}
	return -rc;
}

/* After an error completion: bring the QPs back for the next operation. */
static int rxe_status(struct __test_metadata *_metadata, FIXTURE_DATA(special) *self, int st)
{
	if (st == IBV_WC_SUCCESS)
		return 0;
	EXPECT_EQ(0, rdma_pair_recover(&self->pair));
	return st < 0 ? st : WC_BASE + st;
}

/* Read len bytes at @at into self->dst. */
static int op_read(struct __test_metadata *_metadata, FIXTURE_DATA(special) *self,
		   const FIXTURE_VARIANT(special) *variant, const void *at, size_t len)
{
	if (variant->iface == IF_VAMR)
		return -vamr_read(self->vfd, self->handle, at, self->dst, len);
	return rxe_status(_metadata, self,
			  rdma_pair_read_sync(&self->pair, 0, self->dst, self->dst_mr->lkey,
					      (uintptr_t)at, self->mr->rkey, len, 0));
}

/* Write len bytes of self->src to @at. */
static int op_write(struct __test_metadata *_metadata, FIXTURE_DATA(special) *self,
		    const FIXTURE_VARIANT(special) *variant, void *at, size_t len)
{
	if (variant->iface == IF_VAMR)
		return -vamr_write(self->vfd, self->handle, at, self->src, len);
	return rxe_status(_metadata, self,
			  rdma_pair_write_sync(&self->pair, 0, self->src, self->src_mr->lkey,
					       (uintptr_t)at, self->mr->rkey, len, 0));
}

/* Fetch-and-add @add at @at; *old gets the value before. */
static int op_fadd(struct __test_metadata *_metadata, FIXTURE_DATA(special) *self,
		   const FIXTURE_VARIANT(special) *variant, uint64_t *at, uint64_t add,
		   uint64_t *old)
{
	int rc;

	if (variant->iface == IF_VAMR)
		return -vamr_atomic(self->vfd, self->handle, at, VAMR_ATOMIC_FETCH_ADD, add, 0, old);
	*(uint64_t *)self->dst = 0;
	rc = rxe_status(_metadata, self,
			rdma_pair_fetch_add_sync(&self->pair, 0, (uint64_t *)self->dst,
						 self->dst_mr->lkey, (uintptr_t)at,
						 self->mr->rkey, add, 0));
	*old = *(uint64_t *)self->dst;
	return rc;
}

/*
 * Register the row's range, then read the window, write it and fetch-add the
 * word, checking every outcome against what the row's memory allows; see the
 * comment at the top. Checks that need the row's own knowledge (memory the
 * CPU cannot read now) are left to the row, which then calls row_done().
 */
static void run_row(struct __test_metadata *_metadata, FIXTURE_DATA(special) *self,
		    const FIXTURE_VARIANT(special) *variant, struct row *r)
{
	enum rd rd = r->read;
	bool reg_must;
	uint64_t before = 0, old = 0;
	size_t bad;

	ASSERT_GE(BUF_LEN, r->win_len);
	if (!r->registered)
		r->reg_rc = NOT_RUN;
	r->read_rc = r->write_rc = r->atomic_rc = NOT_RUN;
	/* A writable region's pins are write pins: over read-only memory they fail. */
	if (rd == RD_MUST && (r->special || (variant->write && !r->writable)))
		rd = RD_MAY;
	reg_must = rd == RD_MUST;
	r->write_must = variant->write && r->writable;
	r->read_must_fail = rd == RD_NEVER;

	if (r->cpu_visible)
		memcpy(self->snap, r->win, r->win_len);
	if (!r->registered)
		r->reg_rc = reg_target(_metadata, self, variant, r->reg, r->reg_len);
	CHECK(r, COL_REG, !r->reg_rc || !reg_must, "registration refused: %s",
	      strerror(r->reg_rc));
	if (r->reg_rc)
		return;

	/* Read: the destination is poisoned first, so returned data shows. */
	pattern_fill(self->dst, r->win_len, POISON_SEED, 0);
	r->read_rc = op_read(_metadata, self, variant, r->win, r->win_len);
	CHECK(r, COL_READ, r->read_rc >= 0, "no completion");
	if (!r->read_rc) {
		CHECK(r, COL_READ, rd != RD_NEVER, "a read of memory the CPU cannot read succeeded");
		if (r->cpu_visible) {
			CHECK(r, COL_READ, !memcmp(self->dst, r->win, r->win_len),
			      "the read returned other bytes than the CPU sees");
		}
	} else {
		CHECK(r, COL_READ, rd != RD_MUST, "the read failed");
		if (rd == RD_NEVER) {
			bad = pattern_check(self->dst, r->win_len, POISON_SEED, 0);
			CHECK(r, COL_READ, bad == PATTERN_OK,
			      "the failed read returned data (byte %zu)", bad);
		}
	}

	/* Write. */
	pattern_fill(self->src, r->win_len, r->seed, 0);
	r->write_rc = op_write(_metadata, self, variant, r->win, r->win_len);
	CHECK(r, COL_WRITE, r->write_rc >= 0, "no completion");
	CHECK(r, COL_WRITE, !r->write_rc == r->write_must, "the write %s",
	      r->write_rc ? "failed" : "succeeded");
	if (r->cpu_visible) {
		if (!r->write_rc) {
			bad = pattern_check(r->win, r->win_len, r->seed, 0);
			CHECK(r, COL_WRITE, bad == PATTERN_OK,
			      "the CPU does not see the written bytes (byte %zu)", bad);
		} else {
			CHECK(r, COL_WRITE, !memcmp(self->snap, r->win, r->win_len),
			      "the refused write changed what the CPU sees");
		}
	}

	/* Atomic fetch-and-add. */
	if (r->cpu_visible)
		before = *r->word;
	r->atomic_rc = op_fadd(_metadata, self, variant, r->word, ADDEND, &old);
	CHECK(r, COL_ATOMIC, r->atomic_rc >= 0, "no completion");
	CHECK(r, COL_ATOMIC, !r->atomic_rc == r->write_must, "the atomic %s",
	      r->atomic_rc ? "failed" : "succeeded");
	if (r->cpu_visible) {
		if (!r->atomic_rc) {
			CHECK(r, COL_ATOMIC, old == before && *r->word == before + ADDEND,
			      "fetch-add: %#llx -> %#llx, returned %#llx",
			      (unsigned long long)before, (unsigned long long)*r->word,
			      (unsigned long long)old);
		} else {
			CHECK(r, COL_ATOMIC, *r->word == before,
			      "the refused atomic changed the word: %#llx -> %#llx",
			      (unsigned long long)before, (unsigned long long)*r->word);
		}
	}

	/* Writable memory: what the CPU writes now is what a read returns (VA semantics). */
	if (r->writable && r->cpu_visible) {
		pattern_fill(r->win, r->win_len, r->seed + 1, 0);
		pattern_fill(self->dst, r->win_len, POISON_SEED, 0);
		CHECK(r, COL_READ, !op_read(_metadata, self, variant, r->win, r->win_len),
		      "a read after a CPU write failed");
		bad = pattern_check(self->dst, r->win_len, r->seed + 1, 0);
		CHECK(r, COL_READ, bad == PATTERN_OK,
		      "a read after a CPU write did not return its bytes (byte %zu)", bad);
	}
}

/*
 * For memory the CPU could not see during the operations: @win_now/@word_now
 * are what it sees now that it can look, @win_exp/@word_exp what must be there
 * (the operations were refused).
 */
static void check_untouched(struct __test_metadata *_metadata,
			    const FIXTURE_VARIANT(special) *variant, struct row *r,
			    const uint8_t *win_now, const uint8_t *win_exp,
			    uint64_t word_now, uint64_t word_exp)
{
	size_t i;

	for (i = 0; i < r->win_len && win_now[i] == win_exp[i]; i++)
		;
	CHECK(r, COL_WRITE, i == r->win_len, "the window changed (byte %zu)", i);
	CHECK(r, COL_ATOMIC, word_now == word_exp, "the word changed: %#llx, expected %#llx",
	      (unsigned long long)word_now, (unsigned long long)word_exp);
}

/* Print the row's line and record it for the final table. */
static void row_done(const FIXTURE_VARIANT(special) *variant, struct row *r)
{
	int rc[4] = { r->reg_rc, r->read_rc, r->write_rc, r->atomic_rc };
	struct entry e = { .wrong = r->wrong };
	int c;

	snprintf(e.row, sizeof(e.row), "%s", r->name);
	snprintf(e.iface, sizeof(e.iface), "%s", variant->name);
	for (c = 0; c < 4; c++)
		render(e.col[c], sizeof(e.col[c]), rc[c]);
	printf("# special: %s %s | reg %s%s | read %s%s | write %s%s | atomic %s%s\n",
	       e.row, e.iface, e.col[0], e.wrong & COL_REG ? "!" : "",
	       e.col[1], e.wrong & COL_READ ? "!" : "", e.col[2], e.wrong & COL_WRITE ? "!" : "",
	       e.col[3], e.wrong & COL_ATOMIC ? "!" : "");
	fflush(stdout);
	if (table) {
		int i = __atomic_fetch_add(&table->n, 1, __ATOMIC_RELAXED);

		if (i < (int)(sizeof(table->e) / sizeof(table->e[0])))
			table->e[i] = e;
		else
			table->n = sizeof(table->e) / sizeof(table->e[0]);
	}
}

/* --- the rows --- */

/* The vdso text: ordinary pages, read-only for the process (and shared by all). */
TEST_F(special, vdso)
{
	uintptr_t s, e;
	struct row r = { .name = "vdso", .cpu_visible = true, .special = true,
			 .read = RD_MAY, .seed = 1 };

	if (!find_vma_named("[vdso]", &s, &e))
		SKIP(return, "no [vdso] in /proc/self/maps");
	ASSERT_LE(2 * PAGE, e - s);
	r.reg = (void *)s;
	r.reg_len = e - s;
	/* The end of the image (section headers): far from the code and the ELF header. */
	r.win = (uint8_t *)e - PAGE - 600;
	r.win_len = PAGE + 500;
	r.word = (uint64_t *)((e - 64) & ~7ul);
	run_row(_metadata, self, variant, &r);
	row_done(variant, &r);
}

/*
 * [vvar]: the vDSO data pages (VM_MIXEDMAP; remote faults refused). The time
 * data changes all the time: the window is a 256-byte chunk that holds zeros
 * and stays so (padding), found by looking at it three times.
 */
TEST_F(special, vvar)
{
	struct row r = { .name = "vvar", .cpu_visible = true, .special = true,
			 .read = RD_MAY, .seed = 2 };
	uint8_t *shot[3], *chunk = NULL, *data = NULL;
	uintptr_t s, e;
	size_t len, off;
	int i;

	if (!find_vma_named("[vvar]", &s, &e))
		SKIP(return, "no [vvar] in /proc/self/maps");
	len = e - s;
	for (i = 0; i < 3; i++) {
		shot[i] = malloc(len);
		ASSERT_NE(NULL, shot[i]);
		memcpy(shot[i], (void *)s, len);
		usleep(20000);
	}
	for (off = len - 256; !chunk && off + 256 > 256; off -= 256) {
		bool zero = true;
		size_t k;

		for (k = 0; k < 256 && zero; k++)
			zero = !shot[0][off + k] && !shot[1][off + k] && !shot[2][off + k] &&
			       !((uint8_t *)s)[off + k];
		if (zero)
			chunk = (uint8_t *)s + off;
	}
	/* And a 64-byte chunk of data that holds still (not zeros), for a read. */
	for (off = 0; !data && off + 64 <= len; off += 64) {
		bool still = true, nonzero = false;
		size_t k;

		for (k = 0; k < 64 && still; k++) {
			still = shot[0][off + k] == shot[1][off + k] &&
				shot[0][off + k] == shot[2][off + k];
			nonzero |= shot[0][off + k] != 0;
		}
		if (still && nonzero)
			data = (uint8_t *)s + off;
	}
	for (i = 0; i < 3; i++)
		free(shot[i]);
	if (!chunk)
		SKIP(return, "no stable chunk of zeros in [vvar]");
	r.reg = (void *)s;
	r.reg_len = len;
	r.word = (uint64_t *)chunk;
	r.win = chunk + 8;
	r.win_len = 248;
	run_row(_metadata, self, variant, &r);
	/*
	 * Zeros do not show which page a read came from: where reads are allowed,
	 * one of real data must return it (compared when it held still meanwhile).
	 */
	if (!r.read_rc && !data)
		TH_LOG("no [vvar] data held still: the read of real data is not checked");
	if (!r.read_rc && data) {
		uint8_t before[64], after[64];
		int rc;

		memcpy(before, data, 64);
		rc = op_read(_metadata, self, variant, data, 64);
		memcpy(after, data, 64);
		if (!rc && !memcmp(before, after, 64))
			CHECK(&r, COL_READ, !memcmp(self->dst, before, 64),
			      "a read of [vvar] data returned other bytes than the CPU sees");
		else
			TH_LOG("vvar data read: rc %d, %s", rc,
			       memcmp(before, after, 64) ? "changed meanwhile" : "not compared");
	}
	row_done(variant, &r);
}

/* [vvar_vclock]: VM_IO | VM_PFNMAP; nothing to pin, and no CPU view without a pvclock. */
TEST_F(special, vvar_vclock)
{
	struct row r = { .name = "vvar_vclock", .read = RD_NEVER, .seed = 3 };
	uintptr_t s, e;

	if (!find_vma_named("[vvar_vclock]", &s, &e))
		SKIP(return, "no [vvar_vclock] in /proc/self/maps");
	r.reg = (void *)s;
	r.reg_len = e - s;
	r.win = (uint8_t *)s + 100;
	r.win_len = 200;
	r.word = (uint64_t *)(s + 512);
	run_row(_metadata, self, variant, &r);
	row_done(variant, &r);
}

/* PROT_NONE anonymous memory holding data, before (or after) the registration. */
static void prot_none_row(struct __test_metadata *_metadata, FIXTURE_DATA(special) *self,
			  const FIXTURE_VARIANT(special) *variant, bool after_reg)
{
	size_t len = 4 * PAGE;
	uint8_t *a = track_map(self, mmap(NULL, len, PROT_READ | PROT_WRITE,
					  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), len);
	struct row r = { .name = after_reg ? "prot_none_after_reg" : "prot_none",
			 .read = RD_NEVER, .seed = after_reg ? 5 : 4 };
	uint64_t word_exp;

	ASSERT_NE(MAP_FAILED, a);
	pattern_fill(a, len, 40, 0);
	r.reg = a;
	r.reg_len = len;
	r.win = a + PAGE + 100;
	r.win_len = PAGE + 200;
	r.word = (uint64_t *)(a + 3 * PAGE + 64);
	memcpy(&word_exp, r.word, 8);
	if (after_reg) {
		/* Registered while readable, then taken away: the pins must go. */
		r.reg_rc = reg_target(_metadata, self, variant, a, len);
		ASSERT_EQ(0, r.reg_rc);
		r.registered = true;
	}
	ASSERT_EQ(0, mprotect(a, len, PROT_NONE));
	run_row(_metadata, self, variant, &r);
	/* Make it visible again: the data must be what was there before. */
	ASSERT_EQ(0, mprotect(a, len, PROT_READ));
	pattern_fill(self->snap, r.win_len, 40, r.win - a);
	check_untouched(_metadata, variant, &r, r.win, self->snap, *r.word, word_exp);
	row_done(variant, &r);
}

TEST_F(special, prot_none)
{
	prot_none_row(_metadata, self, variant, false);
}

TEST_F(special, prot_none_after_reg)
{
	prot_none_row(_metadata, self, variant, true);
}

/* A tmpfs file of @len bytes holding pattern @seed, opened read-only; -1 on error. */
static int ro_file(size_t len, uint64_t seed)
{
	char path[] = "/tmp/rdma_special.XXXXXX";
	uint8_t *buf = malloc(len);
	int fd = mkstemp(path), ro = -1;

	if (fd >= 0 && buf) {
		pattern_fill(buf, len, seed, 0);
		if (pwrite(fd, buf, len, 0) == (ssize_t)len)
			ro = open(path, O_RDONLY | O_CLOEXEC);
	}
	if (fd >= 0) {
		unlink(path);
		close(fd);
	}
	free(buf);
	return ro;
}

/* After refused writes: the file itself (page cache, pread) still holds its pattern. */
static void check_file(struct __test_metadata *_metadata, FIXTURE_DATA(special) *self,
		       const FIXTURE_VARIANT(special) *variant, struct row *r, int fd,
		       uint8_t *map, uint64_t seed)
{
	size_t off = r->win - map, woff = (uint8_t *)r->word - map;
	uint64_t w = 0, wexp;

	ASSERT_EQ((ssize_t)r->win_len, pread(fd, self->dst, r->win_len, off));
	ASSERT_EQ(8, pread(fd, &w, 8, woff));
	pattern_fill(self->snap, r->win_len, seed, off);
	pattern_fill(&wexp, 8, seed, woff);
	check_untouched(_metadata, variant, r, self->dst, self->snap, w, wexp);
}

static void ro_file_row(struct __test_metadata *_metadata, FIXTURE_DATA(special) *self,
			const FIXTURE_VARIANT(special) *variant, bool shared)
{
	size_t len = 4 * PAGE;
	int fd = track_fd(self, ro_file(len, 50));
	struct row r = { .name = shared ? "ro_shared_file" : "ro_private_file",
			 .cpu_visible = true, .read = RD_MUST, .seed = shared ? 7 : 6 };
	uint8_t *a;

	ASSERT_LE(0, fd);
	a = track_map(self, mmap(NULL, len, PROT_READ, shared ? MAP_SHARED : MAP_PRIVATE, fd, 0),
		      len);
	ASSERT_NE(MAP_FAILED, a);
	r.reg = a;
	r.reg_len = len;
	r.win = a + PAGE - 100;
	r.win_len = 2 * PAGE + 200;
	r.word = (uint64_t *)(a + 3 * PAGE + 256);
	run_row(_metadata, self, variant, &r);
	check_file(_metadata, self, variant, &r, fd, a, 50);
	row_done(variant, &r);
}

TEST_F(special, ro_private_file)
{
	ro_file_row(_metadata, self, variant, false);
}

TEST_F(special, ro_shared_file)
{
	ro_file_row(_metadata, self, variant, true);
}

/*
 * A sealed memfd mapped read-only. F_SEAL_WRITE: no writable mapping may
 * exist. F_SEAL_FUTURE_WRITE: one made before the seal stays writable (and is
 * kept here); new ones cannot be writable.
 */
static void memfd_sealed_row(struct __test_metadata *_metadata, FIXTURE_DATA(special) *self,
			     const FIXTURE_VARIANT(special) *variant, bool future)
{
	size_t len = 4 * PAGE;
	int fd = track_fd(self, memfd_create("rdma_special", MFD_ALLOW_SEALING | MFD_CLOEXEC));
	struct row r = { .name = future ? "memfd_seal_future_write" : "memfd_seal_write",
			 .cpu_visible = true, .read = RD_MUST, .seed = future ? 9 : 8 };
	uint8_t *a, *w = NULL;

	ASSERT_LE(0, fd);
	ASSERT_EQ(0, ftruncate(fd, len));
	if (future) {
		w = track_map(self, mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), len);
		ASSERT_NE(MAP_FAILED, w);
		pattern_fill(w, len, 60, 0);
		ASSERT_EQ(0, fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SHRINK | F_SEAL_GROW));
		/* The seal holds: no new writable shared mapping. */
		ASSERT_EQ(MAP_FAILED, mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
	} else {
		pattern_fill(self->snap, len, 60, 0);
		ASSERT_EQ((ssize_t)len, pwrite(fd, self->snap, len, 0));
		ASSERT_EQ(0, fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW));
	}
	a = track_map(self, mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0), len);
	ASSERT_NE(MAP_FAILED, a);
	r.reg = a;
	r.reg_len = len;
	r.win = a + 2 * PAGE - 300;
	r.win_len = PAGE + 700;
	r.word = (uint64_t *)(a + 40);
	run_row(_metadata, self, variant, &r);
	check_file(_metadata, self, variant, &r, fd, a, 60);
	row_done(variant, &r);
}

TEST_F(special, memfd_seal_write)
{
	memfd_sealed_row(_metadata, self, variant, false);
}

TEST_F(special, memfd_seal_future_write)
{
	memfd_sealed_row(_metadata, self, variant, true);
}

/*
 * The gap below the stack: unmapped, and GUP never grows the stack. 128 KiB
 * below its start (inside the 1 MiB stack guard gap), beyond the 64 KiB in
 * which GUP prints "GUP no longer grows the stack" with a stack dump (once an
 * hour), which the runner would count as a kernel problem.
 */
TEST_F(special, stack_gap)
{
	struct row r = { .name = "stack_gap", .read = RD_NEVER, .seed = 10 };
	uintptr_t s, e, s2, e2;
	uint8_t *g;

	if (!find_vma_named("[stack]", &s, &e))
		SKIP(return, "no [stack] in /proc/self/maps");
	g = (uint8_t *)s - STACK_GAP_OFF - 4 * PAGE;
	if (!all_unmapped(g, 4 * PAGE))
		SKIP(return, "something is mapped %lu KiB below the stack", STACK_GAP_OFF >> 10);
	r.reg = g;
	r.reg_len = 4 * PAGE;
	r.win = g + PAGE + 100;
	r.win_len = PAGE;
	r.word = (uint64_t *)(g + 3 * PAGE + 8);
	run_row(_metadata, self, variant, &r);
	/* Still a gap, and the stack did not grow into it. */
	CHECK(&r, COL_WRITE | COL_ATOMIC, all_unmapped(g, 4 * PAGE), "the gap got mapped");
	ASSERT_TRUE(find_vma_named("[stack]", &s2, &e2));
	CHECK(&r, COL_WRITE | COL_ATOMIC, s2 > (uintptr_t)g + 4 * PAGE,
	      "the stack grew down to %#lx", (unsigned long)s2);
	row_done(variant, &r);
}

/* A shmem file truncated to half under a registered shared mapping: accesses past EOF. */
TEST_F(special, shmem_truncated)
{
	size_t len = 8 * PAGE, eof = 4 * PAGE;
	int fd = track_fd(self, memfd_create("rdma_special", MFD_CLOEXEC));
	struct row r = { .name = "shmem_truncated", .read = RD_NEVER, .seed = 11 };
	uint8_t *a;
	size_t bad;
	int rc;

	ASSERT_LE(0, fd);
	ASSERT_EQ(0, ftruncate(fd, len));
	a = track_map(self, mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), len);
	ASSERT_NE(MAP_FAILED, a);
	pattern_fill(a, len, 70, 0);
	r.reg = a;
	r.reg_len = len;
	r.win = a + 5 * PAGE + 100;
	r.win_len = PAGE;
	r.word = (uint64_t *)(a + 7 * PAGE + 64);
	/* Registered over the whole file, then truncated: the pins past EOF must go. */
	r.reg_rc = reg_target(_metadata, self, variant, a, len);
	ASSERT_EQ(0, r.reg_rc);
	r.registered = true;
	ASSERT_EQ(0, ftruncate(fd, eof));
	run_row(_metadata, self, variant, &r);
	/* Before EOF the region still reads what the CPU sees. */
	rc = op_read(_metadata, self, variant, a + PAGE + 10, 2 * PAGE);
	CHECK(&r, COL_READ, !rc, "a read before EOF failed (%d)", rc);
	CHECK(&r, COL_READ, !memcmp(self->dst, a + PAGE + 10, 2 * PAGE),
	      "a read before EOF returned other bytes than the CPU sees");
	bad = pattern_check(a, eof, 70, 0);
	CHECK(&r, COL_WRITE | COL_ATOMIC, bad == PATTERN_OK, "data before EOF changed (byte %zu)",
	      bad);
	/* Grown again, the truncated part holds zeros: nothing was written there. */
	ASSERT_EQ(0, ftruncate(fd, len));
	memset(self->snap, 0, r.win_len);
	check_untouched(_metadata, variant, &r, r.win, self->snap, *r.word, 0);
	row_done(variant, &r);
}

/* /dev/zero: private (anonymous memory) and shared (a shmem object), never touched before. */
static void devzero_row(struct __test_metadata *_metadata, FIXTURE_DATA(special) *self,
			const FIXTURE_VARIANT(special) *variant, bool shared)
{
	size_t len = 4 * PAGE;
	int fd = track_fd(self, open("/dev/zero", O_RDWR | O_CLOEXEC));
	struct row r = { .name = shared ? "devzero_shared" : "devzero_private",
			 .cpu_visible = true, .writable = true, .read = RD_MUST,
			 .seed = shared ? 13 : 12 };
	uint8_t *a;

	ASSERT_LE(0, fd);
	a = track_map(self, mmap(NULL, len, PROT_READ | PROT_WRITE,
				 shared ? MAP_SHARED : MAP_PRIVATE, fd, 0), len);
	ASSERT_NE(MAP_FAILED, a);
	r.reg = a;
	r.reg_len = len;
	r.win = a + PAGE - 100;
	r.win_len = 2 * PAGE + 300;
	r.word = (uint64_t *)(a + 3 * PAGE + 128);
	run_row(_metadata, self, variant, &r);
	row_done(variant, &r);
}

TEST_F(special, devzero_private)
{
	devzero_row(_metadata, self, variant, false);
}

TEST_F(special, devzero_shared)
{
	devzero_row(_metadata, self, variant, true);
}

/* A 2 MiB hugetlb page; accesses at odd offsets across its 4 KiB subpages. */
TEST_F(special, hugetlb)
{
	size_t len = 2ul << 20;
	struct row r = { .name = "hugetlb", .cpu_visible = true, .writable = true,
			 .read = RD_MUST, .seed = 14 };
	uint8_t *a = mmap(NULL, len, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);

	if (a == MAP_FAILED)
		SKIP(return, "no free 2 MiB huge page (mmap MAP_HUGETLB: %s)", strerror(errno));
	track_map(self, a, len);
	pattern_fill(a, len, 80, 0);
	r.reg = a;
	r.reg_len = len;
	r.win = a + (1ul << 20) - 100;
	r.win_len = 2 * PAGE + 200;
	r.word = (uint64_t *)(a + (1ul << 20) + 3 * PAGE + 8);
	run_row(_metadata, self, variant, &r);
	row_done(variant, &r);
}

/*
 * Guard pages (MADV_GUARD_INSTALL) in the middle of anonymous memory holding
 * data, installed before the registration, or after it (the zap must drop the
 * pins, and the eager re-pin must not keep the install from finishing).
 */
static void guard_row(struct __test_metadata *_metadata, FIXTURE_DATA(special) *self,
		      const FIXTURE_VARIANT(special) *variant, bool after_reg)
{
	size_t len = 4 * PAGE;
	uint8_t *a = track_map(self, mmap(NULL, len, PROT_READ | PROT_WRITE,
					  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), len);
	struct row r = { .name = after_reg ? "guard_pages_after_reg" : "guard_pages",
			 .read = RD_NEVER, .seed = after_reg ? 16 : 15 };
	size_t bad;

	ASSERT_NE(MAP_FAILED, a);
	pattern_fill(a, len, 90, 0);
	r.reg = a;
	r.reg_len = len;
	r.win = a + PAGE + 100;
	r.win_len = PAGE;
	r.word = (uint64_t *)(a + 2 * PAGE + 64);
	if (after_reg) {
		r.reg_rc = reg_target(_metadata, self, variant, a, len);
		ASSERT_EQ(0, r.reg_rc);
		r.registered = true;
	}
	if (madvise(a + PAGE, 2 * PAGE, MADV_GUARD_INSTALL)) {
		if (errno == EINVAL)
			SKIP(return, "MADV_GUARD_INSTALL not supported (EINVAL)");
		ASSERT_EQ(0, errno);
	}
	run_row(_metadata, self, variant, &r);
	/* The pages around the guards keep their data; the guarded ones come back empty. */
	bad = pattern_check(a, PAGE, 90, 0);
	CHECK(&r, COL_WRITE | COL_ATOMIC, bad == PATTERN_OK, "page 0 changed (byte %zu)", bad);
	bad = pattern_check(a + 3 * PAGE, PAGE, 90, 3 * PAGE);
	CHECK(&r, COL_WRITE | COL_ATOMIC, bad == PATTERN_OK, "page 3 changed (byte %zu)", bad);
	ASSERT_EQ(0, madvise(a + PAGE, 2 * PAGE, MADV_GUARD_REMOVE));
	memset(self->snap, 0, r.win_len);
	check_untouched(_metadata, variant, &r, r.win, self->snap, *r.word, 0);
	row_done(variant, &r);
}

TEST_F(special, guard_pages)
{
	guard_row(_metadata, self, variant, false);
}

TEST_F(special, guard_pages_after_reg)
{
	guard_row(_metadata, self, variant, true);
}

/*
 * Writable anonymous memory made read-only (mprotect) after the registration:
 * the region follows the mapping as it is now, as ODP does, so writes and
 * atomics must fail from then on and change nothing; reads stay allowed.
 */
TEST_F(special, mprotect_ro_after_reg)
{
	size_t len = 4 * PAGE;
	uint8_t *a = track_map(self, mmap(NULL, len, PROT_READ | PROT_WRITE,
					  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), len);
	struct row r = { .name = "mprotect_ro_after_reg", .cpu_visible = true, .read = RD_MUST,
			 .seed = 17 };

	ASSERT_NE(MAP_FAILED, a);
	pattern_fill(a, len, 100, 0);
	r.reg = a;
	r.reg_len = len;
	r.win = a + 100;
	r.win_len = 2 * PAGE;
	r.word = (uint64_t *)(a + 3 * PAGE + 8);
	r.reg_rc = reg_target(_metadata, self, variant, a, len);
	ASSERT_EQ(0, r.reg_rc);
	r.registered = true;
	ASSERT_EQ(0, mprotect(a, len, PROT_READ));
	run_row(_metadata, self, variant, &r);
	CHECK(&r, COL_WRITE | COL_ATOMIC, pattern_check(a, len, 100, 0) == PATTERN_OK,
	      "the read-only memory changed");
	row_done(variant, &r);
}

/*
 * Discovery before registration: the patched rxe (and siw: the test guest
 * runs this test with VAMR_IBDEV=siw0 as well) announces its device to vamr
 * (VAMR_IOC_DEVICE, by kernel device index and name, with the access flag)
 * and in sysfs (vamr_access), and VAMR_IOC_MR_QUERY finds a VA MR by that
 * index and its lkey, and by nothing else.
 */
TEST(device_announced)
{
	char path[256], text[32] = { 0 };
	struct rdma_pair p;
	struct vamr_device_info d;
	struct vamr_mr_query q;
	struct ibv_mr *mr = NULL;
	uint8_t *a;
	int vfd, idx, fd, found = 0;
	const char *name;

	if (rdma_pair_open(&p, NULL))
		SKIP(return, "no RDMA device");
	vfd = vamr_open();
	ASSERT_LE(0, vfd);
	name = ibv_get_device_name(p.ctx->device);
	idx = ibv_get_device_index(p.ctx->device);
	ASSERT_LE(0, idx);
	for (d = (struct vamr_device_info){ 0 }; !vamr_ioctl(vfd, VAMR_IOC_DEVICE, &d); d.pos++) {
		if (d.ib_index != (uint32_t)idx)
			continue;
		found++;
		EXPECT_STREQ(name, d.name);
		EXPECT_EQ(VAMR_ACCESS_VA, d.access_va);
		d = (struct vamr_device_info){ .pos = d.pos };
	}
	EXPECT_EQ(1, found);
	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/vamr_access", name);
	fd = open(path, O_RDONLY);
	ASSERT_LE(0, fd) TH_LOG("%s: %s", path, strerror(errno));
	ASSERT_LT(0, read(fd, text, sizeof(text) - 1));
	close(fd);
	EXPECT_EQ(VAMR_ACCESS_VA, strtoul(text, NULL, 0)) TH_LOG("vamr_access: %s", text);
	a = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, a);
	ASSERT_EQ(0, rdma_pair_reg_mr(&p, a, PAGE, IBV_ACCESS_LOCAL_WRITE | VAMR_ACCESS_VA, &mr));
	q = vamr_mr_query_of(mr);
	EXPECT_EQ((uint32_t)idx, q.ib_index);
	ASSERT_EQ(0, vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q));
	EXPECT_EQ((uintptr_t)a, q.addr);
	q = vamr_mr_query_of(mr);
	q.ib_index = idx + 1;
	EXPECT_EQ(-ENOENT, vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q));
	q = vamr_mr_query_of(mr);
	ibv_dereg_mr(mr);
	EXPECT_EQ(-ENOENT, vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q));
	close(vfd);
	rdma_pair_close(&p);
	munmap(a, PAGE);
}

/*
 * Observability: `rdma res show mr -dd` shows the driver attribute va (on for
 * a VA MR, off for a normal one) and a VA MR's vamr counters, which follow
 * what happens to the MR.
 */
static int rdma_res_mr_line(uint32_t lkey, char *line, size_t size)
{
	char want[32];
	FILE *f = popen("rdma -dd res show mr 2>&1", "r");
	int found = -1;

	if (!f)
		return -1;
	snprintf(want, sizeof(want), "lkey 0x%x ", lkey);
	/* An MR's entry: its line, and the indented lines after it (driver attributes). */
	while (fgets(line, size, f))
		if (strstr(line, want)) {
			size_t n = strlen(line);

			found = 0;
			while (n + 1 < size && fgets(line + n, size - n, f) && line[n] == ' ')
				n += strlen(line + n);
			line[n] = 0;
			break;
		}
	while (fgetc(f) != EOF)
		;
	pclose(f);
	return found;
}

TEST(rdma_res_shows_va_attributes)
{
	struct ibv_mr *va = NULL, *normal = NULL;
	char line[1024];
	struct rdma_pair p;
	uint8_t *a;

	if (rdma_pair_open(&p, NULL))
		SKIP(return, "no RDMA device");
	a = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, a);
	memset(a, 1, 4 * PAGE);
	ASSERT_EQ(0, rdma_pair_reg_mr(&p, a, 2 * PAGE, IBV_ACCESS_LOCAL_WRITE | VAMR_ACCESS_VA, &va));
	ASSERT_EQ(0, rdma_pair_reg_mr(&p, a + 2 * PAGE, 2 * PAGE, IBV_ACCESS_LOCAL_WRITE, &normal));
	ASSERT_EQ(0, rdma_res_mr_line(va->lkey, line, sizeof(line)));
	EXPECT_NE(NULL, strstr(line, "va on")) TH_LOG("%s", line);
	EXPECT_NE(NULL, strstr(line, "pages_pinned 2 ")) TH_LOG("%s", line);
	EXPECT_NE(NULL, strstr(line, "invalidations 0 ")) TH_LOG("%s", line);
	/* One page released: one invalidation, and the verify pass drops its pin. */
	ASSERT_EQ(0, madvise(a, PAGE, MADV_DONTNEED));
	for (int i = 0; i < 200; i++) {
		ASSERT_EQ(0, rdma_res_mr_line(va->lkey, line, sizeof(line)));
		if (strstr(line, "pages_pinned 1 "))
			break;
		usleep(10000);
	}
	EXPECT_NE(NULL, strstr(line, "pages_pinned 1 ")) TH_LOG("%s", line);
	EXPECT_NE(NULL, strstr(line, "invalidations 1 ")) TH_LOG("%s", line);
	EXPECT_NE(NULL, strstr(line, "pages_unpinned 1 ")) TH_LOG("%s", line);
	ASSERT_EQ(0, rdma_res_mr_line(normal->lkey, line, sizeof(line)));
	EXPECT_NE(NULL, strstr(line, "va off")) TH_LOG("%s", line);
	EXPECT_EQ(NULL, strstr(line, "pages_pinned")) TH_LOG("%s", line);
	ibv_dereg_mr(va);
	ibv_dereg_mr(normal);
	rdma_pair_close(&p);
	munmap(a, 4 * PAGE);
}

TEST_HARNESS_MAIN
