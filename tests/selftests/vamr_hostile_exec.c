// SPDX-License-Identifier: GPL-2.0
/*
 * vamr_hostile_exec: exec with live regions. A /dev/vamr file and an events
 * file kept across execve() (no O_CLOEXEC), and vfork + exec. The old mm's
 * regions are dead, nothing of the old mm is reachable from the new one, new
 * registrations are of the caller's own mm or refused with EPERM, pinned_vm
 * (VmPin) of both mms and the module's counters come back.
 *
 * The tests run this program again as a helper (argv[1] == HELPER_ARG),
 * which checks what the new image can and cannot do with the descriptors it
 * inherited and exits 0, or with the line of its first failed check.
 */
#define _GNU_SOURCE
#include "kselftest_harness.h"
#include "hostile_util.h"

/* ---------------------------------------------------------------------- */
/* The exec'd helper                                                      */
/* ---------------------------------------------------------------------- */

/*
 * "dev": argv fd evfd addr len regions_before pinned_before (the module-wide
 * counts before the old image registered its two regions, with cookies 0x51
 * and 0x52).
 */
static int helper_dev(char **argv)
{
	int fd = harg(argv, 3), evfd = harg(argv, 4), fd2, err;
	uint8_t *old = (uint8_t *)(uintptr_t)harg(argv, 5);
	size_t len = harg(argv, 6), n;
	uint64_t regions0 = harg(argv, 7), pinned0 = harg(argv, 8);
	struct vamr_event ev[64];
	struct vamr_counters c;
	bool released[2] = { false, false };
	uint8_t *mine;
	uint32_t h;
	int i, nev;

	/* A new mm: nothing pinned, nothing charged. */
	HCHECK(vamr_vmpin_kb() == 0);
	mine = helper_map_at(old, len);
	HCHECK(mine);
	pattern_fill(mine, len, 0xe2, 0);
	helper_foreign_file(fd, mine, len);

	/* The old mm's exit released both regions: a RELEASE record for each. */
	nev = vamr_drain_events(evfd, ev, 64);
	HCHECK(nev > 0);
	for (i = 0; i < nev; i++)
		if (ev[i].kind == VAMR_EVENT_RELEASE && ev[i].cookie >= 0x51 && ev[i].cookie <= 0x52)
			released[ev[i].cookie - 0x51] = true;
	HCHECK(released[0] && released[1]);

	/*
	 * The old regions still exist (the inherited file holds them) but pin
	 * nothing: their pins went with the old mm.
	 */
	fd2 = vamr_open();
	HCHECK(fd2 >= 0);
	HCHECK(gcounters(fd2, &c) == 0);
	HCHECK(c.regions == regions0 + 2);
	HCHECK(c.pages_pinned == pinned0);

	/* The new image registers its own memory, at the old address if it could. */
	HCHECK(vamr_register(fd2, mine, len, RW, 7, &h) == 0);
	HCHECK(vamr_vmpin_kb() == (long)(len / 1024));
	n = region_check(fd2, h, mine, len, 0xe2, 0, &err);
	HCHECK(n == PATTERN_OK);
	HCHECK(gcounters(fd2, &c) == 0 && c.pages_pinned == pinned0 + len / PAGE);
	HCHECK(vamr_unregister(fd2, h) == 0);
	HCHECK(vamr_vmpin_kb() == 0);

	/* Closing the inherited file tears the old regions down (charges to the old mm). */
	HCHECK(close(fd) == 0);
	HCHECK(vamr_vmpin_kb() == 0);
	HCHECK(gcounters(fd2, &c) == 0);
	HCHECK(c.regions == regions0 && c.pages_pinned == pinned0);
	close(fd2);
	return 0;
}

/*
 * "vfork": argv fd ownfd holdfd addr len. Run by a vfork child after exec:
 * fd is the parent's file, ownfd one the child opened (in the parent's mm)
 * before exec. Both are another mm's now. Waits for holdfd to close.
 */
static int helper_vfork(char **argv)
{
	int fd = harg(argv, 3), own = harg(argv, 4), hold = harg(argv, 5);
	size_t len = harg(argv, 7);
	uint8_t *mine = helper_map_at((void *)(uintptr_t)harg(argv, 6), len), b;

	HCHECK(mine);
	HCHECK(vamr_vmpin_kb() == 0);
	helper_foreign_file(fd, mine, len);
	helper_foreign_file(own, mine, len);
	HCHECK(vamr_vmpin_kb() == 0);
	/* Hold the files until the parent has looked. */
	HCHECK(read(hold, &b, 1) == 0);
	return 0;
}

static int helper_main(int argc, char **argv)
{
	if (argc > 2 && !strcmp(argv[2], "dev") && argc == 9)
		return helper_dev(argv);
	if (argc > 2 && !strcmp(argv[2], "vfork") && argc == 8)
		return helper_vfork(argv);
	fprintf(stderr, "# helper: bad arguments\n");
	return 2;
}

/* ---------------------------------------------------------------------- */
/* 1. exec with live regions                                              */
/* ---------------------------------------------------------------------- */

/*
 * A process registers two regions through a /dev/vamr file without
 * O_CLOEXEC (and keeps its events file), then execs. The new image gets EPERM
 * for everything but QUERY on that file, sees a RELEASE record per region,
 * finds their pins gone while the regions themselves live on in the file,
 * registers its own memory through a file of its own (at the same address,
 * other bytes) with VmPin exact, and tears the old regions down by closing
 * the file. The module-wide counts come back to where they were.
 */
TEST(exec_with_live_regions)
{
	const size_t len = 8 * PAGE;
	struct vamr_counters c0;
	int fd, st;
	pid_t pid;

	fd = vamr_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, gcounters(fd, &c0));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct vamr_events_open eo = { .flags = VAMR_EVENTS_NONBLOCK };
		uint8_t *buf = map_anon(len);
		char a[6][32], self[64];
		uint32_t h1, h2;
		int vfd = open("/dev/vamr", O_RDWR), err;

		if (!buf || vfd < 0 || vamr_ioctl(vfd, VAMR_IOC_EVENTS_OPEN, &eo))
			_exit(3);
		pattern_fill(buf, len, 0xe1, 0);
		if (vamr_register(vfd, buf, len, RW, 0x51, &h1) ||
		    vamr_register(vfd, buf + PAGE, 3 * PAGE, VAMR_ACCESS_READ, 0x52, &h2))
			_exit(4);
		if (region_check(vfd, h1, buf, len, 0xe1, 0, &err) != PATTERN_OK ||
		    vamr_vmpin_kb() != (long)((len + 3 * PAGE) / 1024))
			_exit(5);
		snprintf(a[0], 32, "%d", vfd);
		snprintf(a[1], 32, "%d", eo.fd);
		snprintf(a[2], 32, "%#lx", (unsigned long)(uintptr_t)buf);
		snprintf(a[3], 32, "%zu", len);
		snprintf(a[4], 32, "%llu", (unsigned long long)c0.regions);
		snprintf(a[5], 32, "%llu", (unsigned long long)c0.pages_pinned);
		snprintf(self, sizeof(self), "/proc/self/exe");
		execl(self, "vamr_hostile_exec", HELPER_ARG, "dev", a[0], a[1], a[2], a[3], a[4], a[5],
		      (char *)NULL);
		_exit(6);
	}
	st = wait_exit(pid);
	ASSERT_EQ(0, st);
	EXPECT_GCOUNTERS_BACK(fd, &c0);
	close(fd);
}

/*
 * The vfork child of vfork_exec: registers buf through the parent's file fd,
 * buf2 through a file it opens itself (as descriptor 200), then execs the
 * helper with the arguments a. Raw system calls only: the parent's stack is
 * borrowed until the exec. Returns the child's pid (or -1).
 */
static pid_t vfork_register_exec(int fd, uint8_t *buf, size_t len, uint8_t *buf2, size_t len2,
				 int hold[2], char a[5][32], volatile int *rc1,
				 volatile uint32_t *h1, volatile int *rc2)
{
	struct vamr_register r = { .addr = (uintptr_t)buf, .len = len, .cookie = 1,
				   .access = RW };
	struct vamr_register r2 = { .addr = (uintptr_t)buf2, .len = len2, .cookie = 2,
				    .access = RW };
	pid_t pid = vfork();
	int own;

	if (pid)
		return pid;
	*rc1 = ioctl(fd, VAMR_IOC_REGISTER, &r);
	*h1 = r.handle;
	own = open("/dev/vamr", O_RDWR);
	if (own >= 0 && dup2(own, 200) == 200)
		*rc2 = ioctl(200, VAMR_IOC_REGISTER, &r2);
	close(hold[1]);
	execl("/proc/self/exe", "vamr_hostile_exec", HELPER_ARG, "vfork", a[0], a[1], a[2], a[3], a[4],
	      (char *)NULL);
	_exit(6);
}

/*
 * vfork + exec: the child shares the parent's mm until it execs, so its
 * registrations through the parent's file and through a file it opens
 * itself are regions of the parent's mm, charged to it. After the exec the
 * child gets EPERM on both files; the parent uses its region (the bytes it
 * sees, and follows a remap); the region in the child's file pins the
 * parent's memory, charged to the parent, until the child closes that file
 * (as a normal MR registered there would), and the parent's munmap drops
 * its pins meanwhile.
 */
TEST(vfork_exec)
{
	const size_t len = 8 * PAGE, len2 = 4 * PAGE;
	uint8_t *buf = map_anon(len), *buf2 = map_anon(len2);
	struct vamr_counters c0, c;
	volatile int rc1 = -1, rc2 = -1;
	volatile uint32_t h1 = ~0u;
	char a[5][32];
	int fd, hold[2], err, st;
	long pin0;
	pid_t pid;

	ASSERT_NE(NULL, buf);
	ASSERT_NE(NULL, buf2);
	pattern_fill(buf, len, 0xf1, 0);
	pattern_fill(buf2, len2, 0xf2, 0);
	fd = open("/dev/vamr", O_RDWR);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, pipe(hold));
	ASSERT_EQ(0, gcounters(fd, &c0));
	pin0 = vamr_vmpin_kb();
	snprintf(a[0], 32, "%d", fd);
	snprintf(a[1], 32, "%d", 200);
	snprintf(a[2], 32, "%d", hold[0]);
	snprintf(a[3], 32, "%#lx", (unsigned long)(uintptr_t)buf);
	snprintf(a[4], 32, "%zu", len);

	pid = vfork_register_exec(fd, buf, len, buf2, len2, hold, a, &rc1, &h1, &rc2);
	ASSERT_LE(0, pid);
	close(hold[0]);
	ASSERT_EQ(0, rc1);
	ASSERT_EQ(0, rc2);
	/* Both regions are of this mm and charged to it. */
	EXPECT_EQ(pin0 + (long)((len + len2) / 1024), vamr_vmpin_kb());
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.regions + 2, c.regions);
	EXPECT_EQ(c0.pages_pinned + (len + len2) / PAGE, c.pages_pinned);
	EXPECT_EQ(PATTERN_OK, region_check(fd, h1, buf, len, 0xf1, 0, &err));
	/* The region follows this mm: munmap + mmap, other bytes. */
	ASSERT_EQ(0, remap_fixed(buf + 2 * PAGE, 2 * PAGE));
	pattern_fill(buf + 2 * PAGE, 2 * PAGE, 0xf3, 0);
	EXPECT_EQ(PATTERN_OK, region_check(fd, h1, buf + 2 * PAGE, 2 * PAGE, 0xf3, 0, &err));
	EXPECT_EQ(PATTERN_OK, region_check(fd, h1, buf, 2 * PAGE, 0xf1, 0, &err));
	/* munmap of the range of the child's region drops its pins at once. */
	ASSERT_EQ(0, munmap(buf2, len2));
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.pages_pinned + len / PAGE, c.pages_pinned);
	/* Still charged until the child's file goes. */
	EXPECT_EQ(pin0 + (long)((len + len2) / 1024), vamr_vmpin_kb());
	close(hold[1]);
	st = wait_exit(pid);
	EXPECT_EQ(0, st);
	EXPECT_EQ(pin0 + (long)(len / 1024), vamr_vmpin_kb());
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.regions + 1, c.regions);
	EXPECT_EQ(0, vamr_unregister(fd, h1));
	EXPECT_EQ(pin0, vamr_vmpin_kb());
	EXPECT_GCOUNTERS_BACK(fd, &c0);
	close(fd);
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], HELPER_ARG))
		return helper_main(argc, argv);
	return test_harness_run(argc, argv);
}
