// SPDX-License-Identifier: GPL-2.0
/*
 * va_mr_preload_probe: registrations the way middleware makes them (many
 * threads at once, several devices, fork, exec, every registration entry
 * point, invalid flags), for va_mr_preload.sh, which runs it with and without
 * libvamr-preload.so and compares. A helper (built into OUT/helpers/), not a
 * test of its own. It never asks for VA semantics itself (except where a case
 * says so): whatever VA MRs it gets come from the preload library.
 *
 * Output on stdout, one fact per line:
 *   mr <label> <dev> va=yes|no            an MR and whether vamr knows it as a
 *                                         VA MR (VAMR_IOC_MR_QUERY of its lkey)
 *   case <name> OK va=yes|no              a registration that succeeded
 *   case <name> ERR <ENAME>               one that failed, with its errno
 *   errno <label> <ENAME|0>               errno after a successful registration
 *                                         (set to EHWPOISON before it)
 *   child <label> ...                     what a forked child reported
 *
 * usage: va_mr_preload_probe MODE ARGS
 *   reg DEV...               one MR per device (ibv_reg_mr), errno check
 *   threads N DEV...         N threads, released at once, each registers 4 MRs
 *                            on DEV[i % ndev] (ibv_reg_mr and ibv_reg_mr_iova2
 *                            alternating): the first registrations of every
 *                            device race
 *   fork-first DEV           the device is opened, then fork(): the child
 *                            registers first, then the parent
 *   fork-during-log DEV      a thread's first registration is held in its
 *                            stderr write (a full pipe) while the main thread
 *                            forks; the child registers (10 s alarm: a lock
 *                            the writing thread held stays locked in the child)
 *   vfork DEV                register, vfork()+execve("/bin/true"), register
 *   entry DEV                every registration entry point and flag case
 *   untouched DEV            only entry points the library must not wrap
 *                            (ibv_reg_dmabuf_mr, ibv_alloc_mw)
 * Exit status: 0 when the mode ran (whatever the cases' results), 1 on a
 * set-up failure, 4 when a device is missing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rdma_pair.h"

#define MAX_DEVS 4
#define MAX_THREADS 64
#define BUF_PAGES 1
/* IB_UVERBS_ACCESS_FLUSH_PERSISTENT (not named by libibverbs 44). */
#define ACCESS_FLUSH_PERSISTENT (1u << 9)

struct dev {
	const char *name;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
};

static struct dev devs[MAX_DEVS];
static int ndevs;
static size_t buf_len;
static struct ibv_device **dev_list;

static const char *ename(int err)
{
	static __thread char buf[16];
	const char *n = err ? strerrorname_np(err) : "0";

	if (n)
		return n;
	snprintf(buf, sizeof(buf), "errno%d", err);
	return buf;
}

static void *new_buf(void)
{
	void *p = mmap(NULL, buf_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	memset(p, 0x5a, buf_len);
	return p;
}

/*
 * Whether vamr knows @mr as a VA MR of this process. One /dev/vamr file per
 * process, opened at the first query (a forked child opens its own: the
 * query answers for the caller's mm).
 */
static int vamr_fd = -1;
static pid_t vamr_fd_pid;

static const char *is_va(const struct ibv_mr *mr)
{
	struct vamr_mr_query q = vamr_mr_query_of(mr);
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	int fd;

	pthread_mutex_lock(&lock);
	if (vamr_fd < 0 || vamr_fd_pid != getpid()) {
		vamr_fd = open("/dev/vamr", O_RDWR | O_CLOEXEC);
		vamr_fd_pid = getpid();
	}
	fd = vamr_fd;
	pthread_mutex_unlock(&lock);
	if (fd < 0)
		return "no";
	return ioctl(fd, VAMR_IOC_MR_QUERY, &q) == 0 && q.len == mr->length ? "yes" : "no";
}

static int open_dev(struct dev *d)
{
	int i;

	for (i = 0; dev_list && dev_list[i]; i++) {
		if (strcmp(ibv_get_device_name(dev_list[i]), d->name))
			continue;
		d->ctx = ibv_open_device(dev_list[i]);
		if (!d->ctx)
			return -errno;
		d->pd = ibv_alloc_pd(d->ctx);
		return d->pd ? 0 : -errno;
	}
	return -ENODEV;
}

static void open_devs(int argc, char **argv)
{
	int i, ret;

	dev_list = ibv_get_device_list(NULL);
	for (i = 0; i < argc && i < MAX_DEVS; i++) {
		devs[i].name = argv[i];
		ret = open_dev(&devs[i]);
		if (ret) {
			printf("# cannot open %s: %s\n", argv[i], strerror(-ret));
			exit(ret == -ENODEV ? 4 : 1);
		}
	}
	ndevs = i;
	if (!ndevs) {
		fprintf(stderr, "va_mr_preload_probe: no device named\n");
		exit(1);
	}
}

/* mode reg: one MR per device; errno must come back as it was. */
static int mode_reg(void)
{
	struct ibv_mr *mr;
	int i, err;

	for (i = 0; i < ndevs; i++) {
		errno = EHWPOISON;
		mr = ibv_reg_mr(devs[i].pd, new_buf(), buf_len,
				IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		err = errno;
		if (!mr) {
			printf("mr reg %s ERR %s\n", devs[i].name, ename(err));
			continue;
		}
		printf("mr reg %s va=%s\n", devs[i].name, is_va(mr));
		printf("errno reg-%s %s\n", devs[i].name, ename(err));
	}
	return 0;
}

/* mode threads */
static pthread_barrier_t barrier;
static struct {
	pthread_t tid;
	int idx;
	char out[4][96];
} threads[MAX_THREADS];

static void *thread_fn(void *arg)
{
	int idx = *(int *)arg, k;
	struct dev *d = &devs[idx % ndevs];
	void *bufs[4];

	for (k = 0; k < 4; k++)
		bufs[k] = new_buf();
	pthread_barrier_wait(&barrier);
	for (k = 0; k < 4; k++) {
		struct ibv_mr *mr;

		if (k & 1)
			mr = ibv_reg_mr_iova2(d->pd, bufs[k], buf_len, (uintptr_t)bufs[k],
					      IBV_ACCESS_LOCAL_WRITE);
		else
			mr = ibv_reg_mr(d->pd, bufs[k], buf_len, IBV_ACCESS_LOCAL_WRITE);
		if (!mr)
			snprintf(threads[idx].out[k], sizeof(threads[idx].out[k]),
				 "mr thread%d.%d %s ERR %s", idx, k, d->name, ename(errno));
		else
			snprintf(threads[idx].out[k], sizeof(threads[idx].out[k]),
				 "mr thread%d.%d %s va=%s", idx, k, d->name, is_va(mr));
	}
	return NULL;
}

static int mode_threads(int n)
{
	int i, k;

	if (n < 1 || n > MAX_THREADS)
		return 1;
	pthread_barrier_init(&barrier, NULL, n);
	for (i = 0; i < n; i++) {
		threads[i].idx = i;
		if (pthread_create(&threads[i].tid, NULL, thread_fn, &threads[i].idx))
			return 1;
	}
	for (i = 0; i < n; i++)
		pthread_join(threads[i].tid, NULL);
	for (i = 0; i < n; i++)
		for (k = 0; k < 4; k++)
			printf("%s\n", threads[i].out[k]);
	return 0;
}

/* A child: register on @d (a context of its own), report through @fd. */
static void child_register(struct dev *d, int fd, const char *label)
{
	struct dev own = { .name = d->name };
	struct ibv_mr *mr;
	char line[128];
	int n;

	alarm(10);
	if (open_dev(&own)) {
		n = snprintf(line, sizeof(line), "child %s open-failed\n", label);
	} else {
		mr = ibv_reg_mr(own.pd, new_buf(), buf_len, IBV_ACCESS_LOCAL_WRITE);
		if (mr)
			n = snprintf(line, sizeof(line), "child %s va=%s\n", label, is_va(mr));
		else
			n = snprintf(line, sizeof(line), "child %s ERR %s\n", label, ename(errno));
	}
	if (write(fd, line, n) != n)
		_exit(1);
	_exit(0);
}

/* Wait for child @pid; its report from @rfd, or how it ended. */
static void reap_child(pid_t pid, int rfd, const char *label)
{
	char line[128];
	ssize_t n;
	int st;

	n = read(rfd, line, sizeof(line) - 1);
	waitpid(pid, &st, 0);
	if (n > 0) {
		line[n] = 0;
		fputs(line, stdout);
	} else if (WIFSIGNALED(st)) {
		printf("child %s killed by %s%s\n", label, sigabbrev_np(WTERMSIG(st)) ?: "?",
		       WTERMSIG(st) == SIGALRM ? " (hung for 10 s)" : "");
	} else {
		printf("child %s exit %d without a report\n", label, WEXITSTATUS(st));
	}
}

static int mode_fork_first(void)
{
	struct ibv_mr *mr;
	int p[2];
	pid_t pid;

	if (pipe(p))
		return 1;
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		close(p[0]);
		child_register(&devs[0], p[1], "first");
	}
	close(p[1]);
	reap_child(pid, p[0], "first");
	close(p[0]);
	mr = ibv_reg_mr(devs[0].pd, new_buf(), buf_len, IBV_ACCESS_LOCAL_WRITE);
	printf("mr parent-after-child %s va=%s\n", devs[0].name, mr ? is_va(mr) : "ERR");
	return 0;
}

/* mode fork-during-log */
static volatile pid_t writer_tid;
static const char *volatile writer_va = "none";

static void *writer_fn(void *arg)
{
	struct ibv_mr *mr;

	(void)arg;
	writer_tid = (pid_t)syscall(SYS_gettid);
	mr = ibv_reg_mr(devs[0].pd, new_buf(), buf_len, IBV_ACCESS_LOCAL_WRITE);
	writer_va = mr ? is_va(mr) : "ERR";
	return NULL;
}

/* Whether thread @tid is blocked in write(2, ...). */
static int in_stderr_write(pid_t tid)
{
	char path[64], buf[128];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	/* "1 0x2 ...": write (x86-64 syscall 1) on fd 2. */
	return !strncmp(buf, "1 0x2 ", 6);
}

static int mode_fork_during_log(void)
{
	int saved_err, pe[2], p[2], i, blocked = 0;
	char junk[4096], drained[65536];
	size_t got = 0;
	pthread_t t;
	pid_t pid;
	ssize_t n;

	/* stderr: a pipe filled to the brim, nobody reading it yet. */
	saved_err = dup(2);
	if (saved_err < 0 || pipe2(pe, O_CLOEXEC) || pipe(p))
		return 1;
	fcntl(pe[1], F_SETFL, O_NONBLOCK);
	memset(junk, 'j', sizeof(junk));
	while (write(pe[1], junk, sizeof(junk)) > 0)
		;
	while (write(pe[1], junk, 1) > 0)
		;
	fcntl(pe[1], F_SETFL, 0);
	dup2(pe[1], 2);
	fflush(NULL);
	if (pthread_create(&t, NULL, writer_fn, NULL))
		return 1;
	/* Until the writer's first registration is stuck in its stderr line. */
	for (i = 0; i < 1000 && !blocked; i++) {
		if (writer_tid && in_stderr_write(writer_tid))
			blocked = 1;
		else
			usleep(5000);
	}
	printf("# writer blocked in its stderr write: %s\n", blocked ? "yes" : "no (not held)");
	/* (Not fflush(NULL): the writer holds stderr's stdio lock.) */
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		dup2(null, 2);
		close(p[0]);
		child_register(&devs[0], p[1], "during-log");
	}
	close(p[1]);
	/* Let the writer finish: drain its stderr while the child works. */
	fcntl(pe[0], F_SETFL, O_NONBLOCK);
	for (;;) {
		n = read(pe[0], junk, sizeof(junk));
		if (n > 0) {
			for (i = 0; i < n; i++)
				if (junk[i] != 'j' && got < sizeof(drained) - 1)
					drained[got++] = junk[i];
			continue;
		}
		if (!strcmp(writer_va, "none")) {
			usleep(2000);
			continue;
		}
		break;
	}
	pthread_join(t, NULL);
	dup2(saved_err, 2);
	drained[got] = 0;
	/* The writer's line(s), on the real stderr again. */
	fputs(drained, stderr);
	printf("mr writer %s va=%s\n", devs[0].name, writer_va);
	reap_child(pid, p[0], "during-log");
	return 0;
}

static int mode_vfork(char **envp)
{
	char *argv[] = { "/bin/true", NULL };
	struct ibv_mr *mr;
	pid_t pid;
	int st;

	mr = ibv_reg_mr(devs[0].pd, new_buf(), buf_len, IBV_ACCESS_LOCAL_WRITE);
	printf("mr before-vfork %s va=%s\n", devs[0].name, mr ? is_va(mr) : "ERR");
	fflush(NULL);
	pid = vfork();
	if (pid == 0) {
		execve(argv[0], argv, envp);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return 1;
	printf("vfork-exec-true exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : 128);
	mr = ibv_reg_mr(devs[0].pd, new_buf(), buf_len, IBV_ACCESS_LOCAL_WRITE);
	printf("mr after-vfork %s va=%s\n", devs[0].name, mr ? is_va(mr) : "ERR");
	return 0;
}

static void report(const char *name, struct ibv_mr *mr, int err)
{
	if (mr)
		printf("case %s OK va=%s\n", name, is_va(mr));
	else
		printf("case %s ERR %s\n", name, ename(err));
	fflush(stdout);
}

/* The exported ibv_reg_mr itself, bypassing the inline wrapper. */
static struct ibv_mr *reg_exported(struct ibv_pd *pd, void *a, size_t len, unsigned int access)
{
	return (ibv_reg_mr)(pd, a, len, (int)access);
}

static int mode_entry(void)
{
	const unsigned int lw = IBV_ACCESS_LOCAL_WRITE;
	const unsigned int lrw = lw | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_pd *pd = devs[0].pd;
	volatile unsigned int var = lw;
	struct ibv_mr *mr, *mr2;
	static const struct {
		const char *name;
		unsigned int access;
	} flag_cases[] = {
		/* Invalid: the same errno with and without the library. */
		{ "remote_write_without_local_write", IBV_ACCESS_REMOTE_WRITE },
		{ "remote_atomic_without_local_write", IBV_ACCESS_REMOTE_ATOMIC },
		{ "unknown_bit_15", IBV_ACCESS_LOCAL_WRITE | (1u << 15) },
		{ "zero_based", IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED },
		{ "flush_persistent", IBV_ACCESS_LOCAL_WRITE | ACCESS_FLUSH_PERSISTENT },
		{ "odp_with_va_bit", IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND | VAMR_ACCESS_VA },
		/* Valid. */
		{ "mw_bind", IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND },
		{ "hugetlb_flag", IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_HUGETLB },
		{ "remote_atomic", IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC },
	};
	size_t i;
	void *b;
	int ret;

	/* The entry points, valid flags. */
	b = new_buf();
	mr = ibv_reg_mr(pd, b, buf_len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	report("reg_mr_macro_const", mr, errno);
	mr = ibv_reg_mr(pd, new_buf(), buf_len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
	report("reg_mr_macro_optional_bit", mr, errno);
	mr = ibv_reg_mr(pd, new_buf(), buf_len, var);
	report("reg_mr_macro_variable", mr, errno);
	mr = reg_exported(pd, new_buf(), buf_len, lrw);
	report("reg_mr_exported", mr, errno);
	b = new_buf();
	mr = ibv_reg_mr_iova(pd, b, buf_len, 0x10000, IBV_ACCESS_LOCAL_WRITE);
	report("reg_mr_iova_macro_const", mr, errno);
	b = new_buf();
	mr = (ibv_reg_mr_iova)(pd, b, buf_len, 0x20000, (int)var);
	report("reg_mr_iova_exported", mr, errno);
	b = new_buf();
	mr = ibv_reg_mr_iova2(pd, b, buf_len, (uintptr_t)b, lrw);
	report("reg_mr_iova2", mr, errno);
	mr = ibv_reg_mr(pd, new_buf(), buf_len, IBV_ACCESS_LOCAL_WRITE | VAMR_ACCESS_VA);
	report("reg_mr_already_va", mr, errno);

	/* ODP stays ODP. */
	mr = ibv_reg_mr(pd, new_buf(), buf_len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
	report("odp_reg_mr_macro_const", mr, errno);
	b = new_buf();
	mr = ibv_reg_mr_iova2(pd, b, buf_len, (uintptr_t)b, lw | IBV_ACCESS_ON_DEMAND);
	report("odp_reg_mr_iova2", mr, errno);

	/* Valid for a normal MR: iovas that end exactly at 2^64, and that wrap. */
	b = new_buf();
	mr = ibv_reg_mr_iova2(pd, b, buf_len, 0 - (uint64_t)buf_len, lw);
	report("iova2_ends_at_2_64", mr, errno);
	b = new_buf();
	mr = ibv_reg_mr_iova2(pd, b, buf_len, 0 - (uint64_t)buf_len / 2, lw);
	report("iova2_wraps_past_2_64", mr, errno);

	/* Flag cases, through both exported entry points. */
	for (i = 0; i < sizeof(flag_cases) / sizeof(flag_cases[0]); i++) {
		char name[96];

		b = new_buf();
		mr = reg_exported(pd, b, buf_len, flag_cases[i].access);
		snprintf(name, sizeof(name), "%s_exported", flag_cases[i].name);
		report(name, mr, errno);
		b = new_buf();
		mr = ibv_reg_mr_iova2(pd, b, buf_len, (uintptr_t)b, flag_cases[i].access);
		snprintf(name, sizeof(name), "%s_iova2", flag_cases[i].name);
		report(name, mr, errno);
	}

	/* Length 0. */
	mr = reg_exported(pd, new_buf(), 0, lw);
	report("length_0", mr, errno);

	/*
	 * ibv_rereg_mr is not wrapped: on an MR the library made a VA MR, a
	 * change of translation or access is refused (EOPNOTSUPP,
	 * va-mr-for-jobs.rst "Other differences"), a PD change is not.
	 */
	mr = ibv_reg_mr(pd, new_buf(), buf_len, IBV_ACCESS_LOCAL_WRITE);
	if (mr) {
		errno = 0;
		ret = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, new_buf(), buf_len, 0);
		printf("case rereg_translation %s %s va=%s\n", ret ? "ERR" : "OK",
		       ret ? ename(errno) : "-", is_va(mr));
		errno = 0;
		ret = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
		printf("case rereg_access %s %s va=%s\n", ret ? "ERR" : "OK",
		       ret ? ename(errno) : "-", is_va(mr));
	}
	/* Deregistration of a library-made VA MR. */
	mr2 = ibv_reg_mr(pd, new_buf(), buf_len, IBV_ACCESS_LOCAL_WRITE);
	ret = mr2 ? ibv_dereg_mr(mr2) : -1;
	printf("case dereg %s\n", ret ? "ERR" : "OK");
	return 0;
}

static int mode_untouched(void)
{
	struct ibv_pd *pd = devs[0].pd;
	struct ibv_mw *mw;
	struct ibv_mr *mr;
	int fd;

	/* A file that is no dma-buf: whatever libibverbs and the driver answer. */
	fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	mr = ibv_reg_dmabuf_mr(pd, 0, buf_len, 0, fd, IBV_ACCESS_LOCAL_WRITE);
	report("reg_dmabuf_mr", mr, errno);
	close(fd);
	mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	printf("case alloc_mw %s\n", mw ? "OK" : ename(errno));
	return 0;
}

int main(int argc, char **argv, char **envp)
{
	const char *mode;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 3) {
		fprintf(stderr, "usage: va_mr_preload_probe MODE [N] DEV...\n");
		return 2;
	}
	mode = argv[1];
	buf_len = BUF_PAGES * (size_t)sysconf(_SC_PAGESIZE);
	if (!strcmp(mode, "threads")) {
		if (argc < 4)
			return 2;
		open_devs(argc - 3, argv + 3);
		return mode_threads(atoi(argv[2]));
	}
	open_devs(argc - 2, argv + 2);
	if (!strcmp(mode, "reg"))
		return mode_reg();
	if (!strcmp(mode, "fork-first"))
		return mode_fork_first();
	if (!strcmp(mode, "fork-during-log"))
		return mode_fork_during_log();
	if (!strcmp(mode, "vfork"))
		return mode_vfork(envp);
	if (!strcmp(mode, "entry"))
		return mode_entry();
	if (!strcmp(mode, "untouched"))
		return mode_untouched();
	fprintf(stderr, "va_mr_preload_probe: unknown mode %s\n", mode);
	return 2;
}
