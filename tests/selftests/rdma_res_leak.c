// SPDX-License-Identifier: GPL-2.0
/*
 * rdma_res_leak: no user sees another user's VA MR details.
 *
 * `rdma res show mr` lists every process's MRs to any user (nldev: pid,
 * comm, mrlen, mrn, pdn); the keys (rkey, lkey) only to CAP_NET_ADMIN. The
 * patched rxe's driver attributes of an MR (drv_va, and a VA MR's vamr
 * counters: drv_pages_pinned, drv_invalidations, ...; patches/rxe 0007) tell
 * what its owner does with its memory, so they follow the keys.
 *
 * res_mr_counters_admin_only: uid 65533 registers a VA MR and a normal MR,
 * then drops pages of the VA MR (MADV_DONTNEED), remaps one (munmap + mmap)
 * and forks; its own VAMR_IOC_MR_QUERY counts the invalidations. uid 65534's
 * `rdma -dd res show mr` (a dump) and `... dev D mrn N` (a get) list both
 * MRs (pid, mrlen) with no key and no drv_ attribute at all; so does the
 * owner's own, unprivileged, listing. root sees drv_va on / off, and
 * drv_pages_pinned and drv_invalidations equal to what the owner's
 * MR_QUERY says, in the dump and in the get.
 *
 * other_interfaces_closed: the same victim; uid 65534 gets ENOENT from
 * VAMR_IOC_MR_QUERY for the victim's lkey (and from VAMR_IOC_STATS for a
 * handle of its own empty file), and EACCES from vamr's debugfs files and
 * from tracefs (vamr's events and the trace buffer), when they exist.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "mm_util.h"
#include "pattern.h"
#include "rdma_pair.h"
#include "sys_guard.h"
#include "unpriv_util.h"
#include "vamr_lib.h"
#include "child_util.h"

#define ATTACKER 65534
#define VICTIM 65533
#define PAGE 4096ul
#define VA_PAGES 8
#define NORMAL_PAGES 3
#define ACC (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#define OUT_MAX 16384
#define ENTRY_MAX 2048

/* The outputs the tests compare, each of one `rdma` run. */
enum { OUT_ATT_DUMP, OUT_ATT_GET, OUT_VIC_DUMP, OUT_COUNT };

/* Files only root may open (each checked if it exists). */
static const char *const root_only[] = {
	"/sys/kernel/debug/vamr/users",
	"/sys/kernel/tracing/trace",
	"/sys/kernel/tracing/trace_pipe",
	"/sys/kernel/tracing/events/vamr/enable",
	"/sys/kernel/tracing/events/vamr/vamr_invalidate/format",
	"/sys/kernel/debug/tracing/trace",
};
#define ROOT_ONLY (sizeof(root_only) / sizeof(root_only[0]))

/* What the children report, in shared memory. */
struct shared {
	int step;		/* first failed check of a child, 0 if none */
	char msg[256];
	int ready;		/* the victim's MRs are set up and quiet */
	int done;		/* the victim may exit */
	pid_t vpid;
	uint32_t va_lkey, normal_lkey, ib_index;
	struct vamr_counters va;	/* the victim's MR_QUERY of its VA MR, once quiet */
	uint32_t va_mrn;	/* the VA MR's mrn, as root's dump shows it */
	int rc[OUT_COUNT];	/* exit status of each rdma run */
	char out[OUT_COUNT][OUT_MAX];
	int mr_query_err;	/* the attacker's MR_QUERY of the victim's lkey: -errno */
	int stats_err;		/* its STATS of handle 0 of its own file: -errno */
	int open_err[ROOT_ONLY];	/* its open() of each root_only file: -errno, or 0 */
};

/*
 * Runs `rdma -dd res show mr [dev DEV mrn MRN]` (@mrn < 0: the dump) with
 * stdout and stderr into @out (NUL-terminated, truncated at @size); its exit
 * status, or -1 when it could not run.
 */
static int rdma_res_mr(long mrn, char *out, size_t size)
{
	char num[16];
	const char *dev = rdma_pair_default_dev();
	const char *argv[] = { "rdma", "-dd", "res", "show", "mr", "dev", dev, "mrn", num, NULL };
	size_t n = 0;
	int p[2], status;
	ssize_t r;
	pid_t pid;

	snprintf(num, sizeof(num), "%ld", mrn);
	if (mrn < 0)
		argv[5] = NULL;
	out[0] = 0;
	if (pipe2(p, O_CLOEXEC))
		return -1;
	pid = fork();
	if (pid == 0) {
		dup2(p[1], 1);
		dup2(p[1], 2);
		execvp("rdma", (char *const *)argv);
		_exit(127);
	}
	close(p[1]);
	while (pid > 0 && (r = read(p[0], out + n, size - 1 - n)) > 0)
		n += r;
	out[n] = 0;
	close(p[0]);
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/*
 * The next entry of `rdma res show mr` output at *@pos into @entry: its line
 * and the indented lines after it (driver attributes, when the tool puts them
 * on lines of their own), newlines turned into spaces and a space put before
 * and after, so that " NAME VALUE " finds any attribute. 0, or -1 at the end.
 */
static int next_entry(const char **pos, char *entry, size_t size)
{
	const char *s = *pos, *e = s;
	size_t n;

	if (!*s)
		return -1;
	do {
		e = strchrnul(e, '\n');
		if (*e)
			e++;
	} while (*e == ' ' || *e == '\t');
	n = e - s < (ptrdiff_t)size - 3 ? (size_t)(e - s) : size - 3;
	entry[0] = ' ';
	memcpy(entry + 1, s, n);
	entry[n + 1] = ' ';
	entry[n + 2] = 0;
	for (char *c = entry; *c; c++)
		if (*c == '\n' || *c == '\t')
			*c = ' ';
	*pos = e;
	return 0;
}

/* The unsigned value of attribute @name in @entry (" name VALUE "), or -1 when absent. */
static long long attr_of(const char *entry, const char *name)
{
	char key[64], *end;
	const char *at;
	long long v;

	snprintf(key, sizeof(key), " %s ", name);
	at = strstr(entry, key);
	if (!at)
		return -1;
	v = strtoll(at + strlen(key), &end, 0);
	return end == at + strlen(key) ? -1 : v;
}

/* The entries of @out with attribute @name equal to @value, into @entry (the last); their number. */
static int find_entries(const char *out, const char *name, long long value, char *entry)
{
	char e[ENTRY_MAX];
	const char *pos = out;
	int n = 0;

	while (!next_entry(&pos, e, sizeof(e)))
		if (attr_of(e, name) == value) {
			n++;
			strcpy(entry, e);
		}
	return n;
}

/* The number of entries of @out with attribute pid == @pid that contain @needle. */
static int entries_with(const char *out, pid_t pid, const char *needle)
{
	char e[ENTRY_MAX];
	const char *pos = out;
	int n = 0;

	while (!next_entry(&pos, e, sizeof(e)))
		if (attr_of(e, "pid") == pid && strstr(e, needle))
			n++;
	return n;
}

static uint64_t invalidations(const struct vamr_counters *c)
{
	uint64_t sum = 0;

	for (int i = 0; i < VAMR_EVENT_COUNT; i++)
		sum += c->invalidations[i];
	return sum;
}

/* MR_QUERY of @mr until two answers 300 ms apart are the same (at most 10 s): 0, or -errno. */
static int query_quiet(int vfd, struct ibv_mr *mr, struct vamr_counters *c)
{
	struct vamr_mr_query q = vamr_mr_query_of(mr), prev;
	double t0 = mono_s();

	if (vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q))
		return -errno;
	do {
		prev = q;
		usleep(300 * 1000);
		q = vamr_mr_query_of(mr);
		if (vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q))
			return -errno;
		if (!memcmp(&q.counters, &prev.counters, sizeof(q.counters))) {
			*c = q.counters;
			return 0;
		}
	} while (mono_s() - t0 < 10);
	return -ETIMEDOUT;
}

/*
 * The victim, uid 65533: a VA MR over 8 pages and a normal MR over 3; 2 pages
 * of the VA MR dropped, 1 remapped; its own `rdma` listing (a fork); its
 * counters once quiet; then it waits (MRs registered) until the parent is
 * done.
 */
static void victim(struct shared *sh)
{
	struct ibv_mr *va, *normal;
	struct rdma_pair p;
	uint8_t *a, *b;
	int vfd;

	CHILD_CHECK(sh, 1, !rdma_pair_open(&p, NULL), "rdma_pair_open as uid %d", VICTIM);
	a = map_anon(VA_PAGES * PAGE);
	b = map_anon(NORMAL_PAGES * PAGE);
	CHILD_CHECK(sh, 2, a && b, "mmap");
	CHILD_CHECK(sh, 3, !madvise(a, VA_PAGES * PAGE, MADV_NOHUGEPAGE), "MADV_NOHUGEPAGE");
	pattern_fill(a, VA_PAGES * PAGE, 31, 0);
	pattern_fill(b, NORMAL_PAGES * PAGE, 32, 0);
	CHILD_CHECK(sh, 4, !rdma_pair_reg_mr(&p, a, VA_PAGES * PAGE, ACC | VAMR_ACCESS_VA, &va),
		    "VA MR");
	CHILD_CHECK(sh, 5, !rdma_pair_reg_mr(&p, b, NORMAL_PAGES * PAGE, ACC, &normal),
		    "normal MR");
	vfd = vamr_open();
	CHILD_CHECK(sh, 6, vfd >= 0, "/dev/vamr: %s", strerror(-vfd));
	/* What the owner does with its memory: the side channel the counters would be. */
	CHILD_CHECK(sh, 7, !madvise(a, 2 * PAGE, MADV_DONTNEED), "MADV_DONTNEED");
	CHILD_CHECK(sh, 8, !remap_fixed(a + 5 * PAGE, PAGE), "munmap + mmap");
	/* Its own listing, before the counters settle: the fork write-protects too. */
	sh->vpid = getpid();
	sh->rc[OUT_VIC_DUMP] = rdma_res_mr(-1, sh->out[OUT_VIC_DUMP], OUT_MAX);
	CHILD_CHECK(sh, 9, !query_quiet(vfd, va, &sh->va), "MR_QUERY of its own VA MR");
	CHILD_CHECK(sh, 10, invalidations(&sh->va) >= 2, "%llu invalidations",
		    (unsigned long long)invalidations(&sh->va));
	sh->va_lkey = va->lkey;
	sh->normal_lkey = normal->lkey;
	sh->ib_index = vamr_mr_query_of(va).ib_index;
	__atomic_store_n(&sh->ready, 1, __ATOMIC_RELEASE);
	CHILD_CHECK(sh, 11, child_wait_flag(&sh->done, 120), "never told to go");
	ibv_dereg_mr(va);
	ibv_dereg_mr(normal);
	rdma_pair_close(&p);
	close(vfd);
}

/* The attacker, uid 65534: `rdma -dd res show mr`, dump and get. */
static void attacker_rdma(struct shared *sh)
{
	sh->rc[OUT_ATT_DUMP] = rdma_res_mr(-1, sh->out[OUT_ATT_DUMP], OUT_MAX);
	sh->rc[OUT_ATT_GET] = rdma_res_mr(sh->va_mrn, sh->out[OUT_ATT_GET], OUT_MAX);
}

/* The attacker, uid 65534: /dev/vamr, debugfs and tracefs. */
static void attacker_files(struct shared *sh)
{
	struct vamr_mr_query q = { .key = sh->va_lkey, .ib_index = sh->ib_index };
	struct vamr_stats s;
	int vfd = vamr_open();

	CHILD_CHECK(sh, 21, vfd >= 0, "/dev/vamr: %s", strerror(-vfd));
	sh->mr_query_err = vamr_ioctl(vfd, VAMR_IOC_MR_QUERY, &q) ? -errno : 0;
	sh->stats_err = vamr_stats(vfd, 0, &s);
	for (size_t i = 0; i < ROOT_ONLY; i++) {
		int fd = open(root_only[i], O_RDONLY | O_CLOEXEC | O_NONBLOCK);

		sh->open_err[i] = fd < 0 ? -errno : 0;
		if (fd >= 0)
			close(fd);
	}
	close(vfd);
}

FIXTURE(leak)
{
	struct shared *sh;
	pid_t victim;
	char root_dump[OUT_MAX];
	char root_get[OUT_MAX];
	char va_entry[ENTRY_MAX];	/* root's view of the VA MR, in the dump */
};

/*
 * Opens the devices and "/" to others, checks the tool, starts the victim and
 * waits until its MRs are quiet; then root's own dump, which gives the VA
 * MR's mrn.
 */
FIXTURE_SETUP(leak)
{
	char uv[64];
	int n;

	self->victim = -1;
	self->sh = child_shared_new(sizeof(*self->sh));
	ASSERT_NE(NULL, self->sh);
	uverbs_path(uv, sizeof(uv));
	if (!uv[0] || access("/dev/vamr", F_OK))
		SKIP(return, "no %s or no /dev/vamr", rdma_pair_default_dev());
	if (rdma_res_mr(-1, self->root_dump, OUT_MAX))
		SKIP(return, "rdma res show mr does not run: %.200s", self->root_dump);
	ASSERT_EQ(0, dev_open_up(uv));
	ASSERT_EQ(0, dev_open_up("/dev/vamr"));
	ASSERT_EQ(0, root_open_up());
	self->victim = CHILD_RUN_AS(VICTIM, victim, self->sh);
	ASSERT_LT(0, self->victim);
	ASSERT_TRUE(child_wait_flag(&self->sh->ready, 60))
		TH_LOG("victim: step %d: %s", self->sh->step, self->sh->msg);
	ASSERT_EQ(0, rdma_res_mr(-1, self->root_dump, OUT_MAX));
	n = find_entries(self->root_dump, "lkey", self->sh->va_lkey, self->va_entry);
	ASSERT_EQ(1, n) TH_LOG("root's dump:\n%s", self->root_dump);
	ASSERT_EQ(self->sh->vpid, attr_of(self->va_entry, "pid"));
	self->sh->va_mrn = attr_of(self->va_entry, "mrn");
	ASSERT_EQ(0, rdma_res_mr(self->sh->va_mrn, self->root_get, OUT_MAX));
}

FIXTURE_TEARDOWN(leak)
{
	if (self->victim > 0) {
		__atomic_store_n(&self->sh->done, 1, __ATOMIC_RELEASE);
		child_reap(self->victim, 30, false);
	}
	sys_guard_restore();
	if (self->sh != MAP_FAILED)
		munmap(self->sh, sizeof(*self->sh));
}

/* @entry shows the VA MR's driver attributes, equal to the owner's own counters. */
static void check_admin_view(struct __test_metadata *_metadata, const char *entry,
			     const struct shared *sh)
{
	EXPECT_NE(NULL, strstr(entry, " drv_va on ")) TH_LOG("%s", entry);
	EXPECT_EQ((long long)sh->va.pages_pinned, attr_of(entry, "drv_pages_pinned"))
		TH_LOG("%s", entry);
	EXPECT_EQ((long long)invalidations(&sh->va), attr_of(entry, "drv_invalidations"))
		TH_LOG("%s", entry);
	EXPECT_EQ((long long)sh->va.pages_unpinned, attr_of(entry, "drv_pages_unpinned"))
		TH_LOG("%s", entry);
}

/* In @out, the victim's 2 MRs (by pid and mrlen), with no key and no driver attribute. */
static void check_hidden(struct __test_metadata *_metadata, const char *what, const char *out,
			 const struct shared *sh, int want)
{
	char va[32], normal[32];

	snprintf(va, sizeof(va), " mrlen %lu ", VA_PAGES * PAGE);
	snprintf(normal, sizeof(normal), " mrlen %lu ", NORMAL_PAGES * PAGE);
	EXPECT_EQ(1, entries_with(out, sh->vpid, va)) TH_LOG("%s:\n%s", what, out);
	EXPECT_EQ(want - 1, entries_with(out, sh->vpid, normal)) TH_LOG("%s:\n%s", what, out);
	EXPECT_EQ(0, entries_with(out, sh->vpid, "drv_")) TH_LOG("%s:\n%s", what, out);
	EXPECT_EQ(0, entries_with(out, sh->vpid, " lkey ")) TH_LOG("%s:\n%s", what, out);
	EXPECT_EQ(0, entries_with(out, sh->vpid, " rkey ")) TH_LOG("%s:\n%s", what, out);
}

TEST_F_TIMEOUT(leak, res_mr_counters_admin_only, 120)
{
	struct shared *sh = self->sh;
	char entry[ENTRY_MAX];
	int st;

	st = child_reap(CHILD_RUN_AS(ATTACKER, attacker_rdma, sh), 60, false);
	ASSERT_EQ(0, st) TH_LOG("attacker: step %d: %s", sh->step, sh->msg);
	TH_LOG("victim uid %d pid %d: VA MR lkey 0x%x mrn %u, %llu pages pinned, "
	       "%llu invalidations", VICTIM, sh->vpid, sh->va_lkey, sh->va_mrn,
	       (unsigned long long)sh->va.pages_pinned,
	       (unsigned long long)invalidations(&sh->va));
	TH_LOG("root's dump, the VA MR:%s", self->va_entry);

	/* root: everything, in the dump and in the get. */
	check_admin_view(_metadata, self->va_entry, sh);
	ASSERT_EQ(1, find_entries(self->root_dump, "lkey", sh->normal_lkey, entry))
		TH_LOG("%s", self->root_dump);
	EXPECT_NE(NULL, strstr(entry, " drv_va off ")) TH_LOG("%s", entry);
	EXPECT_EQ(-1, attr_of(entry, "drv_pages_pinned")) TH_LOG("%s", entry);
	ASSERT_EQ(1, find_entries(self->root_get, "mrn", sh->va_mrn, entry))
		TH_LOG("%s", self->root_get);
	check_admin_view(_metadata, entry, sh);

	/* uid 65534: the MRs, not their keys nor their driver attributes. */
	find_entries(sh->out[OUT_ATT_DUMP], "mrn", sh->va_mrn, entry);
	TH_LOG("uid %d's dump, the VA MR:%s", ATTACKER, entry);
	EXPECT_EQ(0, sh->rc[OUT_ATT_DUMP]);
	check_hidden(_metadata, "uid 65534's dump", sh->out[OUT_ATT_DUMP], sh, 2);
	EXPECT_EQ(0, sh->rc[OUT_ATT_GET]);
	EXPECT_EQ(1, find_entries(sh->out[OUT_ATT_GET], "mrn", sh->va_mrn, entry))
		TH_LOG("%s", sh->out[OUT_ATT_GET]);
	check_hidden(_metadata, "uid 65534's get", sh->out[OUT_ATT_GET], sh, 1);
	/* The owner, unprivileged, neither (it has VAMR_IOC_MR_QUERY). */
	EXPECT_EQ(0, sh->rc[OUT_VIC_DUMP]);
	check_hidden(_metadata, "uid 65533's own dump", sh->out[OUT_VIC_DUMP], sh, 2);
}

TEST_F_TIMEOUT(leak, other_interfaces_closed, 120)
{
	struct shared *sh = self->sh;
	int st, checked = 0;

	st = child_reap(CHILD_RUN_AS(ATTACKER, attacker_files, sh), 60, false);
	ASSERT_EQ(0, st) TH_LOG("attacker: step %d: %s", sh->step, sh->msg);
	EXPECT_EQ(-ENOENT, sh->mr_query_err);
	EXPECT_EQ(-ENOENT, sh->stats_err);
	for (size_t i = 0; i < ROOT_ONLY; i++) {
		if (access(root_only[i], F_OK))
			continue;
		checked++;
		EXPECT_EQ(-EACCES, sh->open_err[i]) TH_LOG("%s", root_only[i]);
	}
	TH_LOG("uid %d: MR_QUERY of uid %d's lkey: %s; %d root-only files refused",
	       ATTACKER, VICTIM, strerror(-sh->mr_query_err), checked);
	if (!access("/sys/kernel/debug/vamr", F_OK)) {
		EXPECT_LE(2, checked);
	} else {
		TH_LOG("debugfs is not mounted: vamr's files not checked");
	}
}

TEST_HARNESS_MAIN
