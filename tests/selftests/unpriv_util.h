/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What a test needs to run a child as an ordinary user: the uverbs device of
 * the pair's RDMA device, and device files and "/" opened up for others
 * (modes come back with sys_guard_restore()). Include sys_guard.h and
 * rdma_pair.h first.
 */
#ifndef VAMR_SELFTEST_UNPRIV_UTIL_H
#define VAMR_SELFTEST_UNPRIV_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* /dev/infiniband/uverbsN of the pair's device, or "" */
static inline void uverbs_path(char *path, size_t len)
{
	const char *dev = rdma_pair_default_dev();
	char p[128], name[64];
	int i, fd, n;

	path[0] = 0;
	for (i = 0; i < 16; i++) {
		snprintf(p, sizeof(p), "/sys/class/infiniband_verbs/uverbs%d/ibdev", i);
		fd = open(p, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		n = read(fd, name, sizeof(name) - 1);
		close(fd);
		if (n <= 0)
			continue;
		name[n] = 0;
		name[strcspn(name, "\n")] = 0;
		if (!strcmp(name, dev)) {
			snprintf(path, len, "/dev/infiniband/uverbs%d", i);
			return;
		}
	}
}

/* Make @path usable by anyone (its mode comes back with sys_guard_restore()); 0 or -errno. */
static inline int dev_open_up(const char *path)
{
	struct stat st;

	if (stat(path, &st))
		return -errno;
	if ((st.st_mode & 0006) == 0006)
		return 0;
	return sys_guard_chmod(path, 0666) ? -errno : 0;
}

/* An initramfs root can be 0700: let others through "/" (as dev_open_up()). */
static inline int root_open_up(void)
{
	struct stat st;

	if (stat("/", &st))
		return -errno;
	if ((st.st_mode & 0005) == 0005)
		return 0;
	return sys_guard_chmod("/", (st.st_mode & 07777) | 0055) ? -errno : 0;
}

/* Drops to uid/gid @uid, no supplementary groups (so no capabilities left); 0 or -errno. */
static inline int become_uid(uid_t uid)
{
	if (setgroups(0, NULL) || setresgid(uid, uid, uid) || setresuid(uid, uid, uid))
		return -errno;
	return geteuid() == uid ? 0 : -EPERM;
}

#endif /* VAMR_SELFTEST_UNPRIV_UTIL_H */
