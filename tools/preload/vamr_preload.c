// SPDX-License-Identifier: GPL-2.0
/*
 * libvamr-preload.so: MRs with virtual-address semantics for programs that
 * cannot be changed (MPI libraries, UCX, libfabric), one process at a time:
 *
 *     LD_PRELOAD=/usr/local/lib/libvamr-preload.so ./program
 *
 * It interposes the two exported libibverbs entry points that ibv_reg_mr()
 * and ibv_reg_mr_iova2() reach (rdma-core 44, <infiniband/verbs.h>):
 *
 *   ibv_reg_mr@IBVERBS_1.1   what the ibv_reg_mr() macro calls when its access
 *                            argument is a constant without optional bits
 *   ibv_reg_mr_iova2         what the macro calls otherwise, and the API of
 *                            that name (UCX 1.13 registers through it)
 *
 * and adds the device's VA access flag (VAMR_ACCESS_VA, as announced in
 * /sys/class/infiniband/<dev>/vamr_access) to the access flags, except for MRs
 * that ask for IBV_ACCESS_ON_DEMAND (ODP, left alone) or for
 * IBV_ACCESS_FLUSH_PERSISTENT, and MRs whose iovas wrap past 2^64 (both of
 * which a VA MR refuses: the same exceptions as rdma_rxe's va_mr parameter, so
 * that the library never makes a registration fail). Nothing else is touched:
 * ibv_reg_dmabuf_mr(), ibv_reg_dm_mr(), ibv_rereg_mr() and memory windows pass
 * by. libibverbs 44 implements ibv_reg_mr() and ibv_reg_mr_iova() as tail
 * calls to ibv_reg_mr_iova2 through its own PLT, so a registration through
 * ibv_reg_mr_iova() (the iova variant of ibv_reg_mr()) reaches the
 * ibv_reg_mr_iova2 wrapper too and gets the flag as well.
 *
 * On a device without the vamr_access attribute (the stock rdma_rxe, any other
 * driver) it adds nothing and says so: the program goes on with normal MRs.
 * One line on stderr per device and process, at its first registration, either
 * way (a child forked after the parent's first registration on a device does
 * not repeat it):
 *
 *   vamr-preload: rxe0: MRs get virtual-address semantics (access flag 0x20000000, ...)
 *   vamr-preload: rxe0: no VA MRs on this device (no /sys/class/infiniband/rxe0/vamr_access): registering normal MRs
 *
 * and, when the attribute is there but cannot be read or holds something else
 * than one access flag, normal MRs too and a line that says so:
 *
 *   vamr-preload: rxe0: cannot read /sys/class/infiniband/rxe0/vamr_access (Permission denied): registering normal MRs
 *   vamr-preload: rxe0: /sys/class/infiniband/rxe0/vamr_access says 'junk', not an access flag: registering normal MRs
 *
 * Threads and fork: the first registrations of many threads at once log one
 * line per device; no lock is held while the library reads sysfs or writes
 * its line, and fork() takes the one lock it has around the fork
 * (pthread_atfork), so a child never inherits it locked. errno after a
 * wrapper is what the real function left (the library's own look at sysfs
 * does not leak into it).
 *
 * Private dlopen: UCX loads libibverbs as a dependency of a transport module
 * that it dlopen()s with RTLD_LOCAL. The module's calls still reach these
 * wrappers (the global scope, where LD_PRELOAD puts them, is searched first),
 * but dlsym(RTLD_NEXT) does not see a library of a local scope; the real
 * functions are then looked up in the libibverbs.so.1 already loaded
 * (dlopen(RTLD_NOLOAD)).
 *
 * Environment: VAMR_PRELOAD_QUIET=1 silences the per-device lines (errors are
 * still printed). This library has no dependency on libibverbs itself, so it
 * loads nothing into processes that do no RDMA (mpirun, ssh, shells).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define PREFIX "vamr-preload: "
/* IB_UVERBS_ACCESS_FLUSH_PERSISTENT, which libibverbs 44's enum does not name. */
#define ACCESS_FLUSH_PERSISTENT (1u << 9)
#define MAX_DEVICES 32

typedef struct ibv_mr *(*reg_mr_fn)(struct ibv_pd *, void *, size_t, int);
typedef struct ibv_mr *(*reg_mr_iova2_fn)(struct ibv_pd *, void *, size_t, uint64_t,
					  unsigned int);

static reg_mr_fn real_reg_mr;
static reg_mr_iova2_fn real_reg_mr_iova2;

/*
 * The devices seen so far, by kernel name (a struct ibv_device may be freed
 * and its address reused once the process closed the device), and their VA
 * access flag (0: none).
 * Locking: dev_lock guards devs[] and ndevs; an entry never changes once added.
 * It is held for the lookup and the insertion only, never across a read of
 * sysfs or a write to stderr (either may block: a full pipe), and taken around
 * fork() (atfork_prepare()/atfork_parent()/atfork_child()), so that another
 * thread cannot hold it while a child is made: the child would inherit it
 * locked, by a thread that does not exist there, and hang at its first
 * registration.
 */
static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	char name[IBV_SYSFS_NAME_MAX];
	unsigned int access_va;
} devs[MAX_DEVICES];
static int ndevs;

static void atfork_prepare(void)
{
	pthread_mutex_lock(&dev_lock);
}

static void atfork_parent(void)
{
	pthread_mutex_unlock(&dev_lock);
}

static void atfork_child(void)
{
	pthread_mutex_unlock(&dev_lock);
}

/* At load: the fork handlers (no other work, nothing loaded). */
__attribute__((constructor)) static void vamr_preload_init(void)
{
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

static int quiet(void)
{
	const char *q = getenv("VAMR_PRELOAD_QUIET");

	return q && *q && strcmp(q, "0");
}

/*
 * The real function @name@@@version: the next definition after this library in
 * the global scope, else the one of the libibverbs.so.1 that is loaded (a
 * private dlopen put it in a local scope that RTLD_NEXT does not search).
 * NULL when neither has it.
 */
static void *find_real(const char *name, const char *version)
{
	void *fn = dlvsym(RTLD_NEXT, name, version);
	void *h;

	if (!fn)
		fn = dlsym(RTLD_NEXT, name);
	if (fn)
		return fn;
	h = dlopen("libibverbs.so.1", RTLD_NOLOAD | RTLD_LAZY);
	if (!h)
		return NULL;
	fn = dlvsym(h, name, version);
	if (!fn)
		fn = dlsym(h, name);
	/* The reference dlopen() took is dropped; the library stays loaded. */
	dlclose(h);
	return fn;
}

static void *resolve(void **slot, const char *name, const char *version)
{
	void *fn = __atomic_load_n(slot, __ATOMIC_ACQUIRE);

	if (fn)
		return fn;
	fn = find_real(name, version);
	if (!fn) {
		fprintf(stderr, PREFIX "cannot find the real %s in libibverbs.so.1: %s\n", name,
			dlerror() ?: "not loaded");
		return NULL;
	}
	__atomic_store_n(slot, fn, __ATOMIC_RELEASE);
	return fn;
}

/*
 * The access flag in /sys/class/infiniband/<dev>/vamr_access, or 0; @msg gets
 * the line to print about the device (without the "vamr-preload: <dev>: "
 * prefix): VA MRs, no such attribute, an attribute that cannot be read, or one
 * that holds something else than one access flag; *@error is set in the last
 * two cases (a present attribute that could not be used).
 */
static unsigned int read_access_va(const struct ibv_device *device, char *msg, size_t len,
				   int *error)
{
	char path[IBV_SYSFS_PATH_MAX + 16];
	char buf[32], shown[32];
	unsigned long v;
	char *end;
	ssize_t n;
	size_t i;
	int fd;

	*error = 1;
	snprintf(path, sizeof(path), "%s/vamr_access", device->ibdev_path);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 && (errno == ENOENT || errno == ENOTDIR)) {
		snprintf(msg, len, "no VA MRs on this device (no %s): registering normal MRs", path);
		*error = 0;
		return 0;
	}
	if (fd < 0) {
		snprintf(msg, len, "cannot read %s (%s): registering normal MRs", path,
			 strerror(errno));
		return 0;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	if (n < 0) {
		snprintf(msg, len, "cannot read %s (%s): registering normal MRs", path,
			 strerror(errno));
		close(fd);
		return 0;
	}
	close(fd);
	buf[n] = 0;
	errno = 0;
	v = strtoul(buf, &end, 0);
	while (*end == '\n' || *end == ' ')
		end++;
	if (errno || end == buf || *end || v == 0 || v > 0xffffffffUL || (v & (v - 1))) {
		/* What it holds, printable and short. */
		for (i = 0; i < (size_t)n && i < sizeof(shown) - 1 && buf[i] != '\n'; i++)
			shown[i] = buf[i] >= 0x20 && buf[i] < 0x7f ? buf[i] : '?';
		shown[i] = 0;
		snprintf(msg, len, "%s says '%s', not an access flag: registering normal MRs",
			 path, shown);
		return 0;
	}
	snprintf(msg, len, "MRs get virtual-address semantics (access flag 0x%lx, added to "
		 "ibv_reg_mr and ibv_reg_mr_iova2; ODP MRs left alone)", v);
	*error = 0;
	return (unsigned int)v;
}

/* The known access flag of @name, or -1 when it is not in devs[] (dev_lock held). */
static long lookup_locked(const char *name)
{
	int i;

	for (i = 0; i < ndevs; i++)
		if (!strcmp(devs[i].name, name))
			return devs[i].access_va;
	return -1;
}

/*
 * The VA access flag of @pd's device, 0 when it has none; the first call per
 * device in the process prints the line about it. The attribute is read
 * without dev_lock held: threads that meet a new device at once may all read
 * it, the one that adds it to devs[] prints the line.
 */
static unsigned int device_access_va(struct ibv_pd *pd)
{
	const struct ibv_device *device;
	char msg[IBV_SYSFS_PATH_MAX + 160];
	int added = 0, error;
	unsigned int access_va;
	long known;

	if (!pd || !pd->context || !pd->context->device)
		return 0;
	device = pd->context->device;
	pthread_mutex_lock(&dev_lock);
	known = lookup_locked(device->name);
	pthread_mutex_unlock(&dev_lock);
	if (known >= 0)
		return (unsigned int)known;

	/* A present attribute that could not be used is an error: said even when quiet. */
	access_va = read_access_va(device, msg, sizeof(msg), &error);

	pthread_mutex_lock(&dev_lock);
	known = lookup_locked(device->name);
	if (known >= 0) {
		access_va = (unsigned int)known;
	} else if (ndevs < MAX_DEVICES) {
		/* (Past MAX_DEVICES devices the attribute is read at every
		 * registration, and not logged.)
		 */
		snprintf(devs[ndevs].name, sizeof(devs[ndevs].name), "%s", device->name);
		devs[ndevs].access_va = access_va;
		ndevs++;
		added = 1;
	}
	pthread_mutex_unlock(&dev_lock);
	if (added && (error || !quiet()))
		fprintf(stderr, PREFIX "%s: %s\n", device->name, msg);
	return access_va;
}

/*
 * @access with the VA flag of @pd's device added, when the MR may have it: not
 * for ODP, persistent flush or iovas that wrap past 2^64 (VA MRs refuse
 * those; rdma_rxe's va_mr parameter makes the same exceptions).
 */
static unsigned int with_va(struct ibv_pd *pd, unsigned int access, uint64_t iova, size_t length)
{
	if (access & (IBV_ACCESS_ON_DEMAND | ACCESS_FLUSH_PERSISTENT))
		return access;
	if (length && iova + (length - 1) < iova)
		return access;
	return access | device_access_va(pd);
}

/* <infiniband/verbs.h> makes ibv_reg_mr a macro over __ibv_reg_mr(). */
#undef ibv_reg_mr
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	/* What the caller had (the look-ups below may change it). */
	int saved_errno = errno;
	reg_mr_fn fn = resolve((void **)&real_reg_mr, "ibv_reg_mr", "IBVERBS_1.1");
	unsigned int a;

	if (!fn) {
		errno = ENOSYS;
		return NULL;
	}
	a = with_va(pd, (unsigned int)access, (uintptr_t)addr, length);
	/* The real function then leaves what it leaves. */
	errno = saved_errno;
	return fn(pd, addr, length, (int)a);
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				unsigned int access)
{
	int saved_errno = errno;
	reg_mr_iova2_fn fn = resolve((void **)&real_reg_mr_iova2, "ibv_reg_mr_iova2",
				     "IBVERBS_1.8");
	unsigned int a;

	if (!fn) {
		errno = ENOSYS;
		return NULL;
	}
	a = with_va(pd, access, iova, length);
	errno = saved_errno;
	return fn(pd, addr, length, iova, a);
}
