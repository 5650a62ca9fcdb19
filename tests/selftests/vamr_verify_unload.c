// SPDX-License-Identifier: GPL-2.0
/*
 * vamr_verify_unload: a hostile-review reproducer (see vamr_attack.c): the
 * per-mm verify work is a delayed work item (VERIFY_DELAY, one jiffy) that
 * nothing cancels when the last region of the mm goes, and module exit only
 * destroy_workqueue()s, which drains queued work but not delayed work whose
 * timer has not fired. An invalidation right before the last region is
 * closed and the module unloaded leaves the timer armed: it then queues work
 * on a destroyed workqueue (a WARN in __queue_work(), or a use after free once
 * the workqueue is freed), and the work, its MmState and the mm it grabbed
 * are never released.
 *
 * The program unloads rdma_rxe and vamr_api_test (so that vamr can go),
 * loads and unloads vamr a few times with that sequence, and loads
 * everything back as the guest's set-up had it. It runs last (its name sorts
 * after the other vamr_* programs). Each round loads vamr.ko itself
 * (finit_module() of the file modprobe names; modprobe itself when that
 * fails) instead of starting modprobe, and vamr's KUnit suites do not run at
 * each load (KUnit's filter_glob parameter matches none of them meanwhile):
 * under TCG the processes and the suites cost more than the round. The last
 * load, which the guest's KUnit collection reads, runs them again. Whether a
 * round catches the timer depends on timing (close and unload within the
 * timer's 2 ms): the unfixed module showed it in round 6, 8 and 7 of three
 * runs, so ROUNDS is twice the latest of those.
 * VAMR_UNLOAD_ROUNDS sets the number of rounds (default ROUNDS).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "mm_util.h"
#include "vamr_lib.h"

#define PAGE 4096ul
#define ROUNDS 16
#define KUNIT_GLOB "/sys/module/kunit/parameters/filter_glob"

/* Kernel log lines since `fd` (/dev/kmsg, opened at its end) that report a WARN or BUG. */
static int kmsg_problems(int fd)
{
	char rec[2048];
	int n = 0;
	ssize_t r;

	while ((r = read(fd, rec, sizeof(rec) - 1)) > 0 || (r < 0 && errno == EPIPE)) {
		if (r <= 0)
			continue;
		rec[r] = 0;
		if (strstr(rec, "WARNING:") || strstr(rec, "BUG:") || strstr(rec, "Oops"))
			n++;
	}
	return n;
}

static int wait_for_path(const char *path, int ms)
{
	struct stat st;

	for (int i = 0; i < ms / 10; i++) {
		if (!stat(path, &st))
			return 0;
		usleep(10 * 1000);
	}
	return -1;
}

/* Write `val` (no newline: it would become part of the glob) to KUnit's filter_glob. */
static void kunit_glob_set(const char *val)
{
	int fd = open(KUNIT_GLOB, O_WRONLY | O_CLOEXEC);
	ssize_t r;

	if (fd < 0)
		return;
	r = write(fd, val, strlen(val));
	(void)r;	/* without the filter the suites merely run */
	close(fd);
}

/*
 * Keep vamr's KUnit suites from running at each load of the rounds; `old`
 * gets the value to put back (kunit_glob_restore), "" when there is no such
 * parameter.
 */
static void kunit_glob_off(char *old, size_t len)
{
	int fd = open(KUNIT_GLOB, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	old[0] = 0;
	if (fd < 0)
		return;
	n = read(fd, old, len - 1);
	close(fd);
	if (n <= 0)
		return;
	old[n] = 0;
	old[strcspn(old, "\n")] = 0;
	/* Unset reads "(null)"; a module's suites then run as with "*.*". */
	if (!old[0] || !strcmp(old, "(null)"))
		strcpy(old, "*.*");
	kunit_glob_set("vamr_verify_unload_runs_none");
}

static void kunit_glob_restore(const char *old)
{
	if (old[0])
		kunit_glob_set(old);
}

/*
 * The file modprobe would load for vamr (the last "insmod PATH" line of
 * modprobe --show-depends), into `path`; "" when there is none.
 */
static void vamr_ko_path(char *path, size_t len)
{
	char line[512];
	FILE *f = popen("modprobe --show-depends vamr 2>/dev/null", "r");

	path[0] = 0;
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *p = line, *end;

		if (strncmp(p, "insmod ", 7))
			continue;
		p += 7;
		end = p + strcspn(p, " \n");
		*end = 0;
		snprintf(path, len, "%s", p);
	}
	pclose(f);
}

/* Load vamr: finit_module() of `path`, or modprobe when that fails; 0 when loaded. */
static int load_vamr(const char *path)
{
	int fd = path[0] ? open(path, O_RDONLY | O_CLOEXEC) : -1;

	if (fd >= 0) {
		long r = syscall(SYS_finit_module, fd, "", 0);

		close(fd);
		if (!r)
			return 0;
	}
	return system("modprobe vamr");
}

/*
 * Put the modules back as scripts/guest/init set them up, /dev/vamr's mode
 * included: each load makes a new node, 0600 (the guest runs no udev, whose
 * rule gives it 0666), and the programs after this one use it unprivileged.
 */
static void reload_all(void)
{
	system("chmod 0666 /dev/vamr");
	if (system("modprobe rdma_rxe") || system("rdma link add rxe0 type rxe netdev lo"))
		return;
	system("for i in $(seq 1 50); do grep -qs 0000:0000:0000:0000:0000:ffff:7f00:0001 "
	       "/sys/class/infiniband/rxe0/ports/1/gids/* && break; sleep 0.1; done");
	system("modprobe vamr_api_test");
}

FIXTURE(unload) {};
FIXTURE_SETUP(unload) {}
FIXTURE_TEARDOWN(unload) {}

TEST_F_TIMEOUT(unload, timer_armed_at_module_exit, 240)
{
	int kmsg, problems = 0, rounds = 0, max_rounds = ROUNDS;
	const char *env = getenv("VAMR_UNLOAD_ROUNDS");
	char glob[256], ko[512];

	if (geteuid())
		SKIP(return, "needs root (module unload)");
	if (access("/sys/module/vamr", F_OK))
		SKIP(return, "vamr not loaded");
	kmsg = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	ASSERT_LE(0, kmsg);
	ASSERT_LE(0, lseek(kmsg, 0, SEEK_END));
	system("rdma link delete rxe0 2>/dev/null");
	system("rmmod vamr_api_test 2>/dev/null");
	if (system("rmmod rdma_rxe")) {
		reload_all();
		SKIP(return, "rdma_rxe cannot be unloaded");
	}
	if (env && atoi(env) > 0)
		max_rounds = atoi(env);
	kunit_glob_off(glob, sizeof(glob));
	vamr_ko_path(ko, sizeof(ko));
	TH_LOG("loading vamr with %s%s", ko[0] ? "finit_module() of " : "modprobe", ko);
	for (rounds = 0; rounds < max_rounds && !problems; rounds++) {
		uint8_t *p = map_anon(PAGE);
		uint32_t h;
		int fd;

		if (!access("/sys/module/vamr", F_OK) ||
		    (!load_vamr(ko) && !wait_for_path("/dev/vamr", 3000))) {
			fd = vamr_open();
		} else {
			fd = -1;
		}
		if (fd < 0 || !p) {
			TH_LOG("round %d: cannot load or open vamr", rounds);
			break;
		}
		memset(p, 0x5a, PAGE);
		if (vamr_register(fd, p, PAGE, VAMR_ACCESS_READ | VAMR_ACCESS_WRITE, 1, &h)) {
			close(fd);
			break;
		}
		/* Arms the verify work's one-jiffy timer... */
		mprotect(p, PAGE, PROT_READ);
		/* ...and the last region and the module go before it fires. */
		close(fd);
		if (syscall(SYS_delete_module, "vamr", O_NONBLOCK)) {
			TH_LOG("round %d: delete_module: %s", rounds, strerror(errno));
			munmap(p, PAGE);
			break;
		}
		munmap(p, PAGE);
		usleep(50 * 1000);	/* the timer has fired by now */
		problems = kmsg_problems(kmsg);
	}
	TH_LOG("%d round(s), %d kernel problem line(s)", rounds, problems);
	kunit_glob_restore(glob);
	if (access("/sys/module/vamr", F_OK))
		system("modprobe vamr");
	reload_all();
	EXPECT_EQ(0, problems) TH_LOG("a verify timer outlived vamr's workqueue");
	EXPECT_EQ(0, access("/dev/vamr", F_OK));
	close(kmsg);
}

TEST_HARNESS_MAIN
