/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Two descriptors passed over a UNIX socket (SCM_RIGHTS), with one byte of
 * data: a child hands its /dev/vamr and events files to another process.
 */
#ifndef VAMR_SELFTEST_SCM_UTIL_H
#define VAMR_SELFTEST_SCM_UTIL_H

#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

/* Sends @fd1 and @fd2 over @sock; 0 or -1. */
static inline int send_fds(int sock, int fd1, int fd2)
{
	char buf[CMSG_SPACE(2 * sizeof(int))] = { 0 };
	char byte = 'x';
	struct iovec iov = { &byte, 1 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = buf,
			    .msg_controllen = sizeof(buf) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);

	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(2 * sizeof(int));
	memcpy(CMSG_DATA(c), (int[]){ fd1, fd2 }, 2 * sizeof(int));
	return sendmsg(sock, &m, 0) == 1 ? 0 : -1;
}

/* Receives what send_fds() sent: exactly two descriptors; 0 or -1. */
static inline int recv_fds(int sock, int *fd1, int *fd2)
{
	char buf[CMSG_SPACE(2 * sizeof(int))];
	char byte;
	struct iovec iov = { &byte, 1 };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = buf,
			    .msg_controllen = sizeof(buf) };
	struct cmsghdr *c;
	int fds[2];

	if (recvmsg(sock, &m, 0) != 1)
		return -1;
	c = CMSG_FIRSTHDR(&m);
	if (!c || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(2 * sizeof(int)))
		return -1;
	memcpy(fds, CMSG_DATA(c), sizeof(fds));
	*fd1 = fds[0];
	*fd2 = fds[1];
	return 0;
}

#endif /* VAMR_SELFTEST_SCM_UTIL_H */
