/* SPDX-License-Identifier: GPL-2.0 */
/* The kernel log as the selftests check it: what a test run printed there. */
#ifndef VAMR_SELFTEST_KMSG_UTIL_H
#define VAMR_SELFTEST_KMSG_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* /dev/kmsg positioned at its end (only records from now on), or -1. */
static inline int kmsg_open(void)
{
	int fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);

	if (fd >= 0)
		lseek(fd, 0, SEEK_END);
	return fd;
}

/*
 * Kernel log records since kmsg_open() that show a problem, each printed as a
 * TAP comment: a WARN, BUG or oops, a KASAN or lockdep report, list or
 * refcount corruption, rxe failing to clean an object up, a task that waited
 * too long. 0 when @fd is -1.
 */
static inline int kmsg_problems(int fd)
{
	static const char *const bad[] = { "WARNING", "BUG", "Oops", "general protection",
					   "list_del corruption", "refcount_t", "KASAN",
					   "circular locking", "rxe_cleanup", "cleanup failed",
					   "waiting for", "hung_task", "blocked for more", NULL };
	char rec[4096];
	int n = 0, i;

	if (fd < 0)
		return 0;
	for (;;) {
		ssize_t r = read(fd, rec, sizeof(rec) - 1);
		char *msg;

		if (r < 0) {
			if (errno == EPIPE || errno == EINTR)
				continue;
			break;
		}
		rec[r] = 0;
		msg = strchr(rec, ';');
		msg = msg ? msg + 1 : rec;
		for (i = 0; bad[i]; i++)
			if (strstr(msg, bad[i])) {
				printf("# kernel: %s", msg);
				n++;
				break;
			}
	}
	return n;
}

#endif
