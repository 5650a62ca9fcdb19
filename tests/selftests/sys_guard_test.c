// SPDX-License-Identifier: GPL-2.0
/*
 * sys_guard_test: the settings that tests change through sys_guard.h come
 * back however the test ends: killed the way the harness kills a test that
 * timed out (SIGKILL to its whole process group), or on the normal path, and
 * then the guardian does not write stale values over later changes.
 *
 * The knobs: vm.swappiness (no effect on these tests while changed) and the
 * mode of a scratch file.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "sys_guard.h"

#define SWAPPINESS "/proc/sys/vm/swappiness"

static long read_num(const char *path)
{
	char buf[32] = "";
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	return n > 0 ? strtol(buf, NULL, 10) : -1;
}

static int mode_of(const char *path)
{
	struct stat st;

	return stat(path, &st) ? -1 : (int)(st.st_mode & 07777);
}

/* Polls up to 3 s for @path's number to be @want. */
static int wait_num(const char *path, long want)
{
	for (int i = 0; i < 300; i++) {
		if (read_num(path) == want)
			return 0;
		usleep(10 * 1000);
	}
	return -1;
}

FIXTURE(guard) {
	char file[64];
	long swappiness;
};

FIXTURE_SETUP(guard)
{
	int fd;

	if (geteuid())
		SKIP(return, "needs root (a sysctl)");
	self->swappiness = read_num(SWAPPINESS);
	ASSERT_LE(0, self->swappiness);
	snprintf(self->file, sizeof(self->file), "/tmp/sys_guard_test.%d", getpid());
	fd = open(self->file, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	ASSERT_LE(0, fd);
	close(fd);
	ASSERT_EQ(0, chmod(self->file, 0600));
}

FIXTURE_TEARDOWN(guard)
{
	char num[32];
	int fd;

	if (self->swappiness < 0)
		return;
	snprintf(num, sizeof(num), "%ld\n", self->swappiness);
	fd = open(SWAPPINESS, O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (write(fd, num, strlen(num)) < 0)
			perror(SWAPPINESS);
		close(fd);
	}
	unlink(self->file);
}

/* A process in a group of its own changes both, then the group is SIGKILLed. */
TEST_F(guard, restored_after_group_kill)
{
	long other = self->swappiness == 17 ? 18 : 17;
	char num[32], c;
	int sync[2], status;
	pid_t pid;

	snprintf(num, sizeof(num), "%ld\n", other);
	ASSERT_EQ(0, pipe(sync));
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		setpgid(0, 0);
		close(sync[0]);
		if (sys_guard_set(SWAPPINESS, num) || sys_guard_chmod(self->file, 0644) ||
		    write(sync[1], "x", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(sync[1]);
	ASSERT_EQ(1, read(sync[0], &c, 1));
	close(sync[0]);
	EXPECT_EQ(other, read_num(SWAPPINESS));
	EXPECT_EQ(0644, mode_of(self->file));
	ASSERT_EQ(0, kill(-pid, SIGKILL));
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	EXPECT_TRUE(WIFSIGNALED(status));
	EXPECT_EQ(0, wait_num(SWAPPINESS, self->swappiness))
		TH_LOG("swappiness %ld, want %ld", read_num(SWAPPINESS), self->swappiness);
	for (int i = 0; i < 300 && mode_of(self->file) != 0600; i++)
		usleep(10 * 1000);
	EXPECT_EQ(0600, mode_of(self->file));
}

/*
 * The normal path: sys_guard_restore() puts both back at once; a value set
 * afterwards by hand stays after the process exits (the guardian forgot).
 */
TEST_F(guard, restore_then_exit_keeps_later_values)
{
	long other = self->swappiness == 17 ? 18 : 17, later = other + 2;
	char num[32];
	int status, fd;
	pid_t pid;

	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		snprintf(num, sizeof(num), "%ld\n", other);
		if (sys_guard_set(SWAPPINESS, num) || sys_guard_chmod(self->file, 0644))
			_exit(1);
		if (read_num(SWAPPINESS) != other || mode_of(self->file) != 0644)
			_exit(2);
		sys_guard_restore();
		if (read_num(SWAPPINESS) != self->swappiness || mode_of(self->file) != 0600)
			_exit(3);
		snprintf(num, sizeof(num), "%ld\n", later);
		fd = open(SWAPPINESS, O_WRONLY | O_CLOEXEC);
		if (fd < 0 || write(fd, num, strlen(num)) != (ssize_t)strlen(num))
			_exit(4);
		close(fd);
		_exit(0);
	}
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_EQ(0, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	/* Give a guardian that would wrongly restore the time to do it. */
	usleep(300 * 1000);
	EXPECT_EQ(later, read_num(SWAPPINESS));
	EXPECT_EQ(0600, mode_of(self->file));
}

TEST_HARNESS_MAIN
