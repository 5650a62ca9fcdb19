/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Forked children of a test: a report page shared with the parent, a child
 * run as another uid, waits with a timeout, the kernel stacks of a child that
 * is stuck, and the wait for a uid's counts to leave debugfs vamr/users.
 * Include sys_guard.h, mm_util.h and unpriv_util.h (and so rdma_pair.h) first.
 *
 * A report is any struct with the members `int step` (the child's first
 * failed check, 0 if none) and `char msg[]` (what failed).
 */
#ifndef VAMR_SELFTEST_CHILD_UTIL_H
#define VAMR_SELFTEST_CHILD_UTIL_H

#include <ctype.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHILD_USERS "/sys/kernel/debug/vamr/users"

/* In a child: unless @_cond, record @_step and the message in @_sh and exit with @_step. */
#define CHILD_CHECK(_sh, _step, _cond, _fmt, ...) do {					\
	if (!(_cond)) {									\
		(_sh)->step = (_step);							\
		snprintf((_sh)->msg, sizeof((_sh)->msg), _fmt, ##__VA_ARGS__);		\
		_exit(_step);								\
	}										\
} while (0)

/*
 * Forks a child that becomes @_uid (step 99 if it cannot) and runs
 * @_fn(@_sh), then exits 0; the pid (in the parent), or -1.
 */
#define CHILD_RUN_AS(_uid, _fn, _sh) ({							\
	pid_t _pid = fork();								\
											\
	if (_pid == 0) {								\
		CHILD_CHECK(_sh, 99, !become_uid(_uid), "cannot become uid %d", (int)(_uid)); \
		_fn(_sh);								\
		_exit(0);								\
	}										\
	_pid;										\
})

/* @len bytes of zeroed memory shared with the children forked after: the address, or NULL. */
static inline void *child_shared_new(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* Waits until *@flag is nonzero or @sec seconds passed; whether it was set. */
static inline bool child_wait_flag(int *flag, double sec)
{
	double t0 = mono_s();

	while (!__atomic_load_n(flag, __ATOMIC_ACQUIRE)) {
		if (mono_s() - t0 > sec)
			return false;
		usleep(10 * 1000);
	}
	return true;
}

/*
 * Prints the kernel stacks of @pid's threads as TAP comments (what a stuck
 * child waits on), and every task in D state to the kernel log (sysrq w).
 */
static inline void child_print_stacks(pid_t pid)
{
	char cmd[160];

	snprintf(cmd, sizeof(cmd),
		 "for t in /proc/%d/task/*; do echo \"$t:\"; cat $t/stack; done 2>&1 | sed 's/^/# /'",
		 (int)pid);
	fflush(stdout);
	sys_guard_write_file("/proc/sysrq-trigger", "w");
	if (system(cmd) < 0)
		printf("# cannot read the stacks of %d\n", (int)pid);
}

/*
 * Waits up to @sec for @pid: its exit status (128 + the signal if one ended
 * it), or -1 after the time, when the child is killed (its stacks printed
 * first when @stacks), or -1 at once when @pid is -1 (the fork failed).
 */
static inline int child_reap(pid_t pid, double sec, bool stacks)
{
	double t0 = mono_s();
	int status;

	if (pid < 0)
		return -1;
	while (waitpid(pid, &status, WNOHANG) == 0) {
		if (mono_s() - t0 > sec) {
			if (stacks) {
				printf("# child %d still runs after %.0f s:\n", (int)pid, sec);
				child_print_stacks(pid);
			}
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			return -1;
		}
		usleep(20 * 1000);
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/*
 * Whether @uid's entry in vamr/users is gone (nothing of it counted) within
 * @sec seconds (a fault request ends on its worker, after its process): 1, 0,
 * or -1 without the file.
 */
static inline int child_user_gone(uid_t uid, double sec)
{
	double t0 = mono_s();
	char line[512];

	for (;;) {
		FILE *f = fopen(CHILD_USERS, "re");
		int found = 0;

		if (!f)
			return -1;
		while (fgets(line, sizeof(line), f))
			found |= isdigit((unsigned char)line[0]) && strtoul(line, NULL, 10) == uid;
		fclose(f);
		if (!found)
			return 1;
		if (mono_s() - t0 > sec)
			return 0;
		usleep(20 * 1000);
	}
}

#endif /* VAMR_SELFTEST_CHILD_UTIL_H */
