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
 * IBV_ACCESS_FLUSH_PERSISTENT (which a VA MR refuses). Nothing else is touched:
 * ibv_reg_dmabuf_mr(), ibv_reg_dm_mr(), ibv_rereg_mr() and memory windows pass
 * by. libibverbs 44 implements ibv_reg_mr() and ibv_reg_mr_iova() as tail
 * calls to ibv_reg_mr_iova2 through its own PLT, so a registration through
 * ibv_reg_mr_iova() (the iova variant of ibv_reg_mr()) reaches the
 * ibv_reg_mr_iova2 wrapper too and gets the flag as well.
 *
 * On a device without the vamr_access attribute (the stock rdma_rxe, any other
 * driver) it adds nothing and says so: the program goes on with normal MRs.
 * One line on stderr per device, at its first registration, either way:
 *
 *   vamr-preload: rxe0: MRs get virtual-address semantics (access flag 0x20000000, ...)
 *   vamr-preload: rxe0: no VA MRs on this device (no /sys/class/infiniband/rxe0/vamr_access): registering normal MRs
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
 */
static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	char name[IBV_SYSFS_NAME_MAX];
	unsigned int access_va;
} devs[MAX_DEVICES];
static int ndevs;

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

/* The access flag in /sys/class/infiniband/<dev>/vamr_access, or 0. */
static unsigned int read_access_va(const struct ibv_device *device, char *path, size_t len)
{
	char buf[32];
	unsigned long v;
	char *end;
	ssize_t n;
	int fd;

	snprintf(path, len, "%s/vamr_access", device->ibdev_path);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	errno = 0;
	v = strtoul(buf, &end, 0);
	if (errno || end == buf || v == 0 || v > 0xffffffffUL || (v & (v - 1)))
		return 0;
	return (unsigned int)v;
}

/* The VA access flag of @pd's device, 0 when it has none; the first call per
 * device logs which. */
static unsigned int device_access_va(struct ibv_pd *pd)
{
	const struct ibv_device *device;
	unsigned int access_va;
	char path[IBV_SYSFS_PATH_MAX + 16];
	int i;

	if (!pd || !pd->context || !pd->context->device)
		return 0;
	device = pd->context->device;
	pthread_mutex_lock(&dev_lock);
	for (i = 0; i < ndevs; i++) {
		if (!strcmp(devs[i].name, device->name)) {
			access_va = devs[i].access_va;
			pthread_mutex_unlock(&dev_lock);
			return access_va;
		}
	}
	access_va = read_access_va(device, path, sizeof(path));
	/* (Past MAX_DEVICES devices the attribute is read at every
	 * registration, and not logged.)
	 */
	if (ndevs < MAX_DEVICES) {
		snprintf(devs[ndevs].name, sizeof(devs[ndevs].name), "%s", device->name);
		devs[ndevs].access_va = access_va;
		ndevs++;
		if (quiet())
			goto out;
		if (access_va)
			fprintf(stderr,
				PREFIX "%s: MRs get virtual-address semantics (access flag 0x%x, "
				"added to ibv_reg_mr and ibv_reg_mr_iova2; ODP MRs left alone)\n",
				device->name, access_va);
		else
			fprintf(stderr,
				PREFIX "%s: no VA MRs on this device (no %s): registering normal MRs\n",
				device->name, path);
	}
out:
	pthread_mutex_unlock(&dev_lock);
	return access_va;
}

/* @access with the VA flag of @pd's device added, when the MR may have it. */
static unsigned int with_va(struct ibv_pd *pd, unsigned int access)
{
	if (access & (IBV_ACCESS_ON_DEMAND | ACCESS_FLUSH_PERSISTENT))
		return access;
	return access | device_access_va(pd);
}

/* <infiniband/verbs.h> makes ibv_reg_mr a macro over __ibv_reg_mr(). */
#undef ibv_reg_mr
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	reg_mr_fn fn = resolve((void **)&real_reg_mr, "ibv_reg_mr", "IBVERBS_1.1");

	if (!fn) {
		errno = ENOSYS;
		return NULL;
	}
	return fn(pd, addr, length, (int)with_va(pd, (unsigned int)access));
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				unsigned int access)
{
	reg_mr_iova2_fn fn = resolve((void **)&real_reg_mr_iova2, "ibv_reg_mr_iova2",
				     "IBVERBS_1.8");

	if (!fn) {
		errno = ENOSYS;
		return NULL;
	}
	return fn(pd, addr, length, iova, with_va(pd, access));
}
