/* SPDX-License-Identifier: GPL-2.0 */
/*
 * System settings that a test changes for itself (sysctls, sysfs knobs and
 * module parameters, file modes, the guest's swap) and that must come back
 * however the test ends.
 *
 * A test that writes /proc/sys/vm/nr_hugepages or turns swap off and then
 * fails an ASSERT, or is killed by the harness's timeout (which SIGKILLs the
 * test's whole process group, so no cleanup code of the test runs), would
 * otherwise leave the guest changed for every program after it: less free
 * memory, no swap, KSM scanning. The next program then fails for a reason
 * that is not its own.
 *
 * sys_guard_set() tells a guardian the file's old content before writing the
 * new one. The guardian is a small shell, started with posix_spawn() (no
 * copy of the test's memory, so no effect on its pins) in a session of its
 * own (out of the harness's process-group kill), with nothing inherited but
 * the read end of a pipe as its standard input. Only the test process holds
 * the write end (close-on-exec; its forks hold it too). When the last holder
 * is gone (end of file), the guardian writes every saved value back, newest
 * first, and turns saved swap devices on again. sys_guard_restore() does the
 * same at once from the test itself (the normal path) and tells the
 * guardian to forget them.
 *
 * Protocol, one line per record (each written whole: less than PIPE_BUF):
 * "w PATH VALUE" (write VALUE and a newline to PATH), "m PATH MODE" (chmod,
 * octal), "s PATH" (swapon), "p" (drop the newest record), "c" (drop all).
 * Limits: PATH without white space, VALUE one line (the first line of the
 * file is saved), at most SYS_GUARD_MAX records per process. Call these from
 * the test process, not from its forks: a fork shares the guardian, and its
 * sys_guard_restore() would clear the parent's records there.
 */
#ifndef VAMR_SELFTEST_SYS_GUARD_H
#define VAMR_SELFTEST_SYS_GUARD_H

/* POSIX_SPAWN_SETSID, posix_spawn_file_actions_addclosefrom_np() (glibc 2.34). */
#ifndef _GNU_SOURCE
#error "define _GNU_SOURCE before the first #include"
#endif

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/swap.h>
#include <unistd.h>

#define SYS_GUARD_MAX 16
#define SYS_GUARD_LINE 256

extern char **environ;

/* The guardian: reads records until end of file, then applies what is left, newest first. */
static const char sys_guard_script[] =
	"n=0\n"
	"while IFS= read -r line; do\n"
	"  case $line in\n"
	"  c) n=0 ;;\n"
	"  p) [ $n -gt 0 ] && n=$((n - 1)) ;;\n"
	"  ?\\ *) n=$((n + 1)); eval \"r$n=\\$line\" ;;\n"
	"  esac\n"
	"done\n"
	"while [ $n -gt 0 ]; do\n"
	"  eval \"line=\\$r$n\"; op=${line%% *}; rest=${line#? }; path=${rest%% *}\n"
	"  val=${rest#\"$path\"}; val=${val# }\n"
	"  case $op in\n"
	"  w) printf '%s\\n' \"$val\" >\"$path\" ;;\n"
	"  m) chmod \"$val\" \"$path\" ;;\n"
	"  s) swapon \"$path\" ;;\n"
	"  esac\n"
	"  n=$((n - 1))\n"
	"done\n";

static struct {
	int wfd;			/* write end of the guardian's pipe; 0: no guardian yet */
	int n;
	char rec[SYS_GUARD_MAX][SYS_GUARD_LINE];
} sys_guard;

static inline int sys_guard_write_file(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t len = strlen(s), w;

	if (fd < 0)
		return -1;
	w = write(fd, s, len);
	close(fd);
	return w == len ? 0 : -1;
}

/* Applies one record in this process (the normal path). */
static inline void sys_guard_apply(const char *rec)
{
	char path[SYS_GUARD_LINE], val[SYS_GUARD_LINE + 1] = "";

	if (sscanf(rec + 2, "%255s", path) != 1)
		return;
	snprintf(val, sizeof(val), "%s\n", rec + 2 + strlen(path) + (rec[2 + strlen(path)] == ' '));
	if (rec[0] == 'w')
		sys_guard_write_file(path, val);
	else if (rec[0] == 'm')
		chmod(path, strtoul(val, NULL, 8));
	else if (rec[0] == 's')
		swapon(path, 0);
}

/* Starts the guardian (once per process): 0, or -1 with errno. */
static inline int sys_guard_start(void)
{
	char *argv[] = { "sh", "-c", (char *)sys_guard_script, NULL };
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	int fds[2], err;
	pid_t pid;

	if (sys_guard.wfd > 0)
		return 0;
	if (pipe(fds))
		return -1;
	fcntl(fds[1], F_SETFD, FD_CLOEXEC);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fds[0], 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	/* Nothing else: an inherited file (/dev/vamr, a QP's) would outlive the test's close(). */
	posix_spawn_file_actions_addclosefrom_np(&fa, 3);
	posix_spawnattr_init(&attr);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
	err = posix_spawn(&pid, "/bin/sh", &fa, &attr, argv, environ);
	posix_spawnattr_destroy(&attr);
	posix_spawn_file_actions_destroy(&fa);
	close(fds[0]);
	if (err) {
		close(fds[1]);
		errno = err;
		return -1;
	}
	sys_guard.wfd = fds[1];
	return 0;
}

static inline int sys_guard_send(const char *line)
{
	char buf[SYS_GUARD_LINE + 1];
	int len = snprintf(buf, sizeof(buf), "%s\n", line);

	return write(sys_guard.wfd, buf, len) == len ? 0 : -1;
}

/* Saves record "OP PATH VALUE" with the guardian and here: 0, or -1 with errno. */
static inline int sys_guard_save(char op, const char *path, const char *val)
{
	char *rec = sys_guard.rec[sys_guard.n];

	if (sys_guard.n >= SYS_GUARD_MAX || strpbrk(path, " \t\n") ||
	    snprintf(rec, SYS_GUARD_LINE, "%c %s %s", op, path, val) >= SYS_GUARD_LINE) {
		errno = E2BIG;
		return -1;
	}
	if (sys_guard_start() || sys_guard_send(rec))
		return -1;
	sys_guard.n++;
	return 0;
}

/* Forgets the newest record (its change did not happen); keeps errno, the caller's error. */
static inline void sys_guard_pop(void)
{
	int err = errno;

	sys_guard.n--;
	sys_guard_send("p");
	errno = err;
}

/*
 * Writes value to the file at path (a sysctl, sysfs knob or module
 * parameter), its old content (first line) saved first so that it comes back
 * however the process ends: 0, or -1 with errno (nothing written when the old
 * content cannot be read or saved).
 */
static inline int sys_guard_set(const char *path, const char *value)
{
	char old[SYS_GUARD_LINE] = "";
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t got;

	if (fd < 0)
		return -1;
	got = read(fd, old, sizeof(old) - 1);
	close(fd);
	if (got < 0)
		return -1;
	old[got] = '\0';
	old[strcspn(old, "\n")] = '\0';
	if (sys_guard_save('w', path, old))
		return -1;
	if (sys_guard_write_file(path, value)) {
		sys_guard_pop();
		return -1;
	}
	return 0;
}

/* chmod(path, mode), the old mode to be set again at the end: 0, or -1 with errno. */
static inline int sys_guard_chmod(const char *path, mode_t mode)
{
	char old[16];
	struct stat st;

	if (stat(path, &st))
		return -1;
	snprintf(old, sizeof(old), "%o", st.st_mode & 07777);
	if (sys_guard_save('m', path, old))
		return -1;
	if (chmod(path, mode)) {
		sys_guard_pop();
		return -1;
	}
	return 0;
}

/* Turns the swap device at path off, to be turned on again at the end: 0, or -1 with errno. */
static inline int sys_guard_swapoff(const char *path)
{
	if (sys_guard_save('s', path, ""))
		return -1;
	if (swapoff(path)) {
		/* It was not on: nothing to turn on again. */
		sys_guard_pop();
		return -1;
	}
	return 0;
}

/* Restores every saved setting now, newest first, and tells the guardian they are done. */
static inline void sys_guard_restore(void)
{
	while (sys_guard.n > 0)
		sys_guard_apply(sys_guard.rec[--sys_guard.n]);
	if (sys_guard.wfd > 0)
		sys_guard_send("c");
}

#endif
