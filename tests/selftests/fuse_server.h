/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A FUSE server of one regular file, on /dev/fuse directly (no libfuse): the
 * file's bytes are pattern_byte(seed, offset), and the server answers READ
 * requests or, while told to hang, keeps them unanswered. While a READ is
 * unanswered, the kernel holds the lock of the folio under I/O, so a fault on
 * that page (and any GUP of it that waits) waits for the server: the
 * "page lock held by I/O" of the wait tests.
 *
 * The opcodes and structures are those of <linux/fuse.h>; the server speaks
 * protocol 7.31 with max_readahead and max_pages 1 page, so that every read
 * of the file is one READ of one page. Requires CAP_SYS_ADMIN (mount(2)).
 */
#ifndef VAMR_SELFTEST_FUSE_SERVER_H
#define VAMR_SELFTEST_FUSE_SERVER_H

#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include "pattern.h"

#define FUSE_SERVER_FILE "f"
#define FUSE_SERVER_NODE 2
#define FUSE_SERVER_HELD 64

/*
 * One server, run by a thread of the test process. reads and answered are
 * read by the test (and by processes it forks when the struct lives in
 * MAP_SHARED memory) with __atomic builtins; lock (a thread mutex of the test
 * process) guards hang and the held READs.
 */
struct fuse_server {
	int fd;			/* /dev/fuse */
	char dir[64];		/* the mount point */
	char path[80];		/* dir/FUSE_SERVER_FILE */
	uint64_t size;		/* the file's size in bytes */
	uint64_t seed;
	pthread_mutex_t lock;
	int hang;		/* 1: keep READs unanswered (lock) */
	int reads;		/* READ requests received */
	int held_n;		/* READs kept unanswered, in held[] (lock) */
	uint64_t held[FUSE_SERVER_HELD][3];	/* unique, offset, size */
	int answered;		/* READs answered */
	int stop;
	unsigned int conn;	/* the connection's number in fusectl (minor of st_dev) */
	pthread_t thread;
	uint8_t buf[FUSE_MIN_READ_BUFFER + 65536];
};

static inline void fuse_server_attr(const struct fuse_server *s, uint64_t node,
				    struct fuse_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->ino = node;
	a->nlink = 1;
	a->blksize = 4096;
	if (node == FUSE_ROOT_ID) {
		a->mode = S_IFDIR | 0755;
	} else {
		a->mode = S_IFREG | 0444;
		a->size = s->size;
		a->blocks = (s->size + 511) / 512;
	}
}

/* Writes one reply: header plus @len bytes of @arg (a negative errno in @err). */
static inline int fuse_server_reply(struct fuse_server *s, uint64_t unique, int err,
				    const void *arg, size_t len)
{
	struct fuse_out_header h = { .len = sizeof(h) + len, .error = err, .unique = unique };
	struct iovec iov[2] = { { &h, sizeof(h) }, { (void *)arg, len } };

	return writev(s->fd, iov, len ? 2 : 1) < 0 ? -errno : 0;
}

/* Answers the READ @unique for @size bytes at @off with the file's bytes. */
static inline int fuse_server_read_reply(struct fuse_server *s, uint64_t unique, uint64_t off,
					 uint64_t size)
{
	uint8_t *data;
	size_t n;
	int ret;

	n = off >= s->size ? 0 : (size < s->size - off ? size : s->size - off);
	data = malloc(n ? n : 1);
	if (!data)
		return fuse_server_reply(s, unique, -ENOMEM, NULL, 0);
	pattern_fill(data, n, s->seed, off);
	ret = fuse_server_reply(s, unique, 0, data, n);
	free(data);
	__atomic_add_fetch(&s->answered, 1, __ATOMIC_RELEASE);
	return ret;
}

static inline void fuse_server_read(struct fuse_server *s, const struct fuse_in_header *in)
{
	const struct fuse_read_in *r = (const void *)(in + 1);
	bool held = false;

	pthread_mutex_lock(&s->lock);
	if (s->hang && s->held_n < FUSE_SERVER_HELD) {
		s->held[s->held_n][0] = in->unique;
		s->held[s->held_n][1] = r->offset;
		s->held[s->held_n][2] = r->size;
		s->held_n++;
		held = true;
	}
	pthread_mutex_unlock(&s->lock);
	__atomic_add_fetch(&s->reads, 1, __ATOMIC_RELEASE);
	if (!held)
		fuse_server_read_reply(s, in->unique, r->offset, r->size);
}

static inline void fuse_server_init(struct fuse_server *s, const struct fuse_in_header *in)
{
	const struct fuse_init_in *i = (const void *)(in + 1);
	struct fuse_init_out o = {
		.major = FUSE_KERNEL_VERSION, .minor = 31, .max_readahead = 4096,
		.flags = FUSE_MAX_PAGES, .max_background = 16, .congestion_threshold = 12,
		.max_write = 4096, .max_pages = 1,
	};

	if (i->major != FUSE_KERNEL_VERSION)
		o.minor = 0;
	fuse_server_reply(s, in->unique, 0, &o, sizeof(o));
}

/* Serves one request. */
static inline void fuse_server_one(struct fuse_server *s, const struct fuse_in_header *in)
{
	struct fuse_entry_out e = { .nodeid = FUSE_SERVER_NODE, .generation = 1,
				    .entry_valid = 3600, .attr_valid = 3600 };
	struct fuse_attr_out a = { .attr_valid = 3600 };
	struct fuse_open_out o = { .fh = 1, .open_flags = FOPEN_KEEP_CACHE };

	switch (in->opcode) {
	case FUSE_INIT:
		fuse_server_init(s, in);
		break;
	case FUSE_LOOKUP:
		if (in->nodeid != FUSE_ROOT_ID || strcmp((const char *)(in + 1), FUSE_SERVER_FILE)) {
			fuse_server_reply(s, in->unique, -ENOENT, NULL, 0);
			break;
		}
		fuse_server_attr(s, FUSE_SERVER_NODE, &e.attr);
		fuse_server_reply(s, in->unique, 0, &e, sizeof(e));
		break;
	case FUSE_GETATTR:
		fuse_server_attr(s, in->nodeid, &a.attr);
		fuse_server_reply(s, in->unique, 0, &a, sizeof(a));
		break;
	case FUSE_OPEN:
	case FUSE_OPENDIR:
		fuse_server_reply(s, in->unique, 0, &o, sizeof(o));
		break;
	case FUSE_READ:
		fuse_server_read(s, in);
		break;
	case FUSE_FLUSH:
	case FUSE_RELEASE:
	case FUSE_RELEASEDIR:
		fuse_server_reply(s, in->unique, 0, NULL, 0);
		break;
	case FUSE_FORGET:
	case FUSE_BATCH_FORGET:
	case FUSE_INTERRUPT:
		break;		/* no reply: an interrupted READ stays held */
	default:
		fuse_server_reply(s, in->unique, -ENOSYS, NULL, 0);
	}
}

static inline void *fuse_server_main(void *arg)
{
	struct fuse_server *s = arg;
	struct pollfd pfd = { .fd = s->fd, .events = POLLIN };

	while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
		ssize_t n;

		if (poll(&pfd, 1, 20) <= 0)
			continue;
		n = read(s->fd, s->buf, sizeof(s->buf));
		if (n < 0 && errno == ENODEV)
			break;		/* unmounted, or the connection aborted */
		if (n < (ssize_t)sizeof(struct fuse_in_header))
			continue;
		fuse_server_one(s, (const struct fuse_in_header *)s->buf);
	}
	return NULL;
}

/*
 * Mounts a server of a file of @size bytes under a new directory of /tmp and
 * starts its thread. 0, -ENODEV without FUSE, or a negative errno.
 */
static inline int fuse_server_start(struct fuse_server *s, uint64_t size, uint64_t seed)
{
	char opts[128];
	int ret;

	s->size = size;
	s->seed = seed;
	pthread_mutex_init(&s->lock, NULL);
	s->fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (s->fd < 0)
		return errno == ENOENT ? -ENODEV : -errno;
	snprintf(s->dir, sizeof(s->dir), "/tmp/vamr-fuse-XXXXXX");
	if (!mkdtemp(s->dir)) {
		ret = -errno;
		close(s->fd);
		return ret;
	}
	chmod(s->dir, 0755);
	snprintf(s->path, sizeof(s->path), "%s/%s", s->dir, FUSE_SERVER_FILE);
	snprintf(opts, sizeof(opts), "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other",
		 s->fd);
	if (mount("vamr-test", s->dir, "fuse", MS_NOSUID | MS_NODEV, opts)) {
		ret = errno == ENODEV ? -ENODEV : -errno;
		close(s->fd);
		rmdir(s->dir);
		return ret;
	}
	ret = -pthread_create(&s->thread, NULL, fuse_server_main, s);
	if (ret) {
		umount2(s->dir, MNT_DETACH);
		close(s->fd);
		rmdir(s->dir);
		return ret;
	}
	/* The connection's fusectl number (its GETATTR is answered by the thread). */
	{
		struct stat st;

		s->conn = stat(s->dir, &st) ? 0 : minor(st.st_dev);
	}
	return 0;
}

/* From now on keeps READs unanswered (@hang 1) or answers them, and then those held so far. */
static inline void fuse_server_hang(struct fuse_server *s, int hang)
{
	int i;

	pthread_mutex_lock(&s->lock);
	s->hang = hang;
	for (i = 0; !hang && i < s->held_n; i++)
		fuse_server_read_reply(s, s->held[i][0], s->held[i][1], s->held[i][2]);
	if (!hang)
		s->held_n = 0;
	pthread_mutex_unlock(&s->lock);
}

/* READs kept unanswered now. */
static inline int fuse_server_held(struct fuse_server *s)
{
	int n;

	pthread_mutex_lock(&s->lock);
	n = s->held_n;
	pthread_mutex_unlock(&s->lock);
	return n;
}

/*
 * Aborts the connection through fusectl (Documentation/filesystems/fuse.rst,
 * "Aborting a filesystem connection"): every request still waiting, and any
 * later one, ends with ECONNABORTED/ENOTCONN. Closing s->fd is not enough
 * when a forked child holds a copy of it: a request the dying child sends at
 * exit (FLUSH of a file it had open) would then wait for a server that is
 * gone, and the child would never be reaped.
 */
static inline void fuse_server_abort(struct fuse_server *s)
{
	const char *ctl = "/sys/fs/fuse/connections";
	char p[96];
	int fd;

	if (!s->conn)
		return;
	snprintf(p, sizeof(p), "%s/%u/abort", ctl, s->conn);
	if (access(p, F_OK))
		mount("fusectl", ctl, "fusectl", 0, NULL);
	fd = open(p, O_WRONLY);
	if (fd >= 0) {
		if (write(fd, "1", 1) != 1)
			perror("fuse_server_abort");
		close(fd);
	}
}

/* Answers what is held, unmounts, aborts the connection and stops the thread. */
static inline void fuse_server_stop(struct fuse_server *s)
{
	fuse_server_hang(s, 0);
	umount2(s->dir, MNT_DETACH);
	fuse_server_abort(s);
	__atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
	pthread_join(s->thread, NULL);
	close(s->fd);
	rmdir(s->dir);
}

#endif /* VAMR_SELFTEST_FUSE_SERVER_H */
