// SPDX-License-Identifier: GPL-2.0
/*
 * vamrctl: look at vamr from the command line, through /dev/vamr and the uapi
 * header <misc/vamr.h> only. See Documentation/vamrctl.rst.
 *
 *   vamrctl caps               what the loaded module offers (VAMR_IOC_QUERY)
 *   vamrctl stats [--global]   counters: of a region of vamrctl's own, or module-wide
 *   vamrctl watch [--monitor] ADDR LEN
 *                              watch a range of vamrctl's own, remap it, print the events
 *   vamrctl mr-query KEY       look a key up among this process's VA-semantics MRs
 *   vamrctl va-mr [on|off|status]  rdma_rxe's va_mr switch (sysfs), and which
 *                              RDMA devices offer VA MRs
 *
 * Exit status: 0 success, 1 the operation failed, 2 usage error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <dirent.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <misc/vamr.h>

#ifndef VAMR_VERSION
#define VAMR_VERSION "unknown"
#endif

static const char *prog = "vamrctl";
static const char *dev_path = "/dev/vamr";

static void usage(FILE *f)
{
	fprintf(f,
"usage: vamrctl [--device PATH] COMMAND [ARGS]\n"
"\n"
"Commands:\n"
"  caps               ABI version, features and page size of the loaded vamr\n"
"                     module (VAMR_IOC_QUERY), and the module's version\n"
"  stats [--global] [--pages N]\n"
"                     counters of vamrctl's own regions: it registers one region\n"
"                     over N (default 4) pages of its own and prints its counters\n"
"                     (a region belongs to the process that registered it; no\n"
"                     process reads another's); --global: the module-wide\n"
"                     counters (VAMR_STATS_GLOBAL)\n"
"  watch [--monitor] ADDR LEN\n"
"                     map LEN bytes at ADDR in vamrctl (ADDR 0: anywhere),\n"
"                     register them, open an events file, then remap the range\n"
"                     step by step (touch, MADV_DONTNEED, mprotect, mmap over,\n"
"                     munmap) and print the events each step raises;\n"
"                     --monitor: watch them instead (VAMR_IOC_WATCH, nothing\n"
"                     pinned) and print the generation counter after each step\n"
"  mr-query KEY       look KEY (an lkey) up among the MRs with VA semantics of\n"
"                     the calling process (VAMR_IOC_MR_QUERY)\n"
"  va-mr [status|on|off]\n"
"                     the system-wide switch: rdma_rxe's va_mr parameter\n"
"                     (/sys/module/rdma_rxe/parameters/va_mr), which gives every\n"
"                     user MR that does not ask for ODP VA semantics from its\n"
"                     next registration on; on/off set it (root), status (the\n"
"                     default) prints it and the RDMA devices with VA MRs\n"
"                     (/sys/class/infiniband/<dev>/vamr_access). Fails, saying\n"
"                     so, when the loaded rdma_rxe has no such parameter\n"
"\n"
"Options:\n"
"  --device PATH      the vamr device (default /dev/vamr)\n"
"  -h, --help         this text\n"
"  -V, --version      vamrctl's version\n"
"\n"
"Numbers may be decimal or 0x-prefixed hexadecimal. Exit status: 0 success,\n"
"1 the operation failed, 2 usage error. See Documentation/vamrctl.rst.\n");
}

/* "EACCES" for EACCES, or the number. */
static const char *errname(int err)
{
	static char buf[16];
	const char *n = strerrorname_np(err);

	if (n)
		return n;
	snprintf(buf, sizeof(buf), "errno %d", err);
	return buf;
}

/* "vamrctl: WHAT: strerror (ENAME)[: hint]" on stderr. */
static void error_msg(const char *what, int err, const char *hint)
{
	fprintf(stderr, "%s: %s: %s (%s)%s%s\n", prog, what, strerror(err), errname(err),
		hint ? ": " : "", hint ? hint : "");
}

static int usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "%s: ", prog);
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'vamrctl --help'.\n");
	return 2;
}

/*
 * A decimal or 0x-prefixed hexadecimal number, digits only: no sign, no
 * blank in front (strtoull alone takes " -18446744073709551615" for 1).
 */
static int parse_u64(const char *s, uint64_t *v)
{
	char *end;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	*v = strtoull(s, &end, 0);
	return errno || *end ? -1 : 0;
}

static int open_dev(void)
{
	int fd = open(dev_path, O_RDWR | O_CLOEXEC);
	const char *hint = NULL;
	char what[256];

	if (fd >= 0)
		return fd;
	if (errno == ENOENT)
		hint = "is the vamr module loaded? (modprobe vamr)";
	else if (errno == EACCES || errno == EPERM)
		hint = "the device is not open to this user; install udev/60-vamr.rules "
		       "(make install) or ask the administrator";
	else if (errno == ENODEV || errno == ENXIO)
		hint = "the device node exists but no driver answers; is the vamr module loaded?";
	snprintf(what, sizeof(what), "cannot open %s", dev_path);
	error_msg(what, errno, hint);
	return -1;
}

static int do_ioctl(int fd, unsigned long cmd, void *arg, const char *name)
{
	const char *hint = NULL;

	if (!ioctl(fd, cmd, arg))
		return 0;
	if (errno == ENOTTY)
		hint = "not a vamr device, or a module too old for this vamrctl";
	error_msg(name, errno, hint);
	return -1;
}

static const char *const kind_names[VAMR_EVENT_COUNT] = {
	[VAMR_EVENT_UNMAP] = "unmap",
	[VAMR_EVENT_CLEAR] = "clear",
	[VAMR_EVENT_PROTECTION_VMA] = "protection_vma",
	[VAMR_EVENT_PROTECTION_PAGE] = "protection_page",
	[VAMR_EVENT_SOFT_DIRTY] = "soft_dirty",
	[VAMR_EVENT_RELEASE] = "release",
	[VAMR_EVENT_MIGRATE] = "migrate",
	[VAMR_EVENT_EXCLUSIVE] = "exclusive",
};

static void print_counters(const struct vamr_counters *c)
{
	int i;

	printf("pages_pinned                   %" PRIu64 "\n", (uint64_t)c->pages_pinned);
	printf("regions                        %" PRIu64 "\n", (uint64_t)c->regions);
	for (i = 0; i < VAMR_EVENT_COUNT; i++) {
		char label[48];

		snprintf(label, sizeof(label), "invalidations.%s", kind_names[i]);
		printf("%-29s  %" PRIu64 "\n", label, (uint64_t)c->invalidations[i]);
	}
	printf("invalidations_refused          %" PRIu64 "\n", (uint64_t)c->invalidations_refused);
	printf("pages_unpinned                 %" PRIu64 "\n", (uint64_t)c->pages_unpinned);
	printf("pins_swapped                   %" PRIu64 "\n", (uint64_t)c->pins_swapped);
	printf("pins_kept                      %" PRIu64 "\n", (uint64_t)c->pins_kept);
	printf("ondemand_repins                %" PRIu64 "\n", (uint64_t)c->ondemand_repins);
	printf("repin_retries                  %" PRIu64 "\n", (uint64_t)c->repin_retries);
	printf("access_faults                  %" PRIu64 "\n", (uint64_t)c->access_faults);
	printf("fault_requests                 %" PRIu64 "\n", (uint64_t)c->fault_requests);
	printf("bytes_read                     %" PRIu64 "\n", (uint64_t)c->bytes_read);
	printf("bytes_written                  %" PRIu64 "\n", (uint64_t)c->bytes_written);
}

/* The loaded module's version (MODULE_VERSION), from sysfs. */
static void module_version(char *buf, size_t size)
{
	FILE *f = fopen("/sys/module/vamr/version", "r");

	snprintf(buf, size, "unknown");
	if (!f)
		return;
	if (fgets(buf, size, f))
		buf[strcspn(buf, "\n")] = 0;
	fclose(f);
}

static int cmd_caps(int argc, char **argv)
{
	static const struct { uint64_t bit; const char *name; } features[] = {
		{ VAMR_FEATURE_REGIONS, "regions" },
		{ VAMR_FEATURE_ATOMICS, "atomics" },
		{ VAMR_FEATURE_PREFETCH, "prefetch" },
		{ VAMR_FEATURE_EVENTS, "events" },
		{ VAMR_FEATURE_MR_QUERY, "mr_query" },
#ifdef VAMR_FEATURE_DEVICES
		{ VAMR_FEATURE_DEVICES, "devices" },
#endif
		{ VAMR_FEATURE_WATCH, "watch" },
		{ VAMR_FEATURE_EVENTS_RING, "events_ring" },
	};
	struct vamr_query q = { 0 };
	char modver[64];
	size_t i;
	int fd, ret = 0;

	if (argc > 1)
		return usage_error("caps: unexpected argument '%s'", argv[1]);
	fd = open_dev();
	if (fd < 0)
		return 1;
	if (do_ioctl(fd, VAMR_IOC_QUERY, &q, "VAMR_IOC_QUERY")) {
		close(fd);
		return 1;
	}
	module_version(modver, sizeof(modver));
	printf("module_version  %s\n", modver);
	printf("vamrctl_version %s\n", VAMR_VERSION);
	printf("abi_version     %u%s\n", q.abi_version,
	       q.abi_version == VAMR_ABI_VERSION ? "" : " (vamrctl was built for another ABI version)");
	printf("page_size       %u\n", q.page_size);
	printf("features        0x%" PRIx64, (uint64_t)q.features);
	for (i = 0; i < sizeof(features) / sizeof(features[0]); i++)
		if (q.features & features[i].bit)
			printf(" %s", features[i].name);
	if (q.features & ~(uint64_t)VAMR_FEATURES_KNOWN)
		printf(" unknown:0x%" PRIx64, (uint64_t)(q.features & ~(uint64_t)VAMR_FEATURES_KNOWN));
	printf("\n");
	printf("access_va       0x%x (the ibv_reg_mr() access bit asking for VA semantics)\n",
	       VAMR_ACCESS_VA);
#ifdef VAMR_IOC_DEVICE
	if (q.features & VAMR_FEATURE_DEVICES) {
		for (i = 0;; i++) {
			struct vamr_device_info d = { .pos = i };

			if (ioctl(fd, VAMR_IOC_DEVICE, &d)) {
				/* ENOENT: past the last device. Anything else: the list is cut. */
				if (errno != ENOENT) {
					error_msg("VAMR_IOC_DEVICE", errno, NULL);
					ret = 1;
				}
				break;
			}
			printf("device          %s index %u access_va 0x%" PRIx64 "\n", d.name,
			       d.ib_index, (uint64_t)d.access_va);
		}
	}
#endif
	close(fd);
	return ret;
}

static int cmd_stats(int argc, char **argv)
{
	struct vamr_stats st = { 0 };
	uint64_t pages = 4;
	long psize = sysconf(_SC_PAGESIZE);
	int global = 0, fd, i, ret = 1;
	struct vamr_register r = { 0 };
	void *buf = MAP_FAILED;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--global")) {
			global = 1;
		} else if (!strcmp(argv[i], "--pages") && i + 1 < argc) {
			if (parse_u64(argv[++i], &pages) || !pages || pages > (1u << 20))
				return usage_error("stats: bad page count '%s'", argv[i]);
		} else {
			return usage_error("stats: unexpected argument '%s'", argv[i]);
		}
	}
	fd = open_dev();
	if (fd < 0)
		return 1;
	if (global) {
		st.handle = VAMR_STATS_GLOBAL;
		if (do_ioctl(fd, VAMR_IOC_STATS, &st, "VAMR_IOC_STATS (global)"))
			goto out;
		printf("scope                  global\n");
		print_counters(&st.counters);
		ret = 0;
		goto out;
	}
	buf = mmap(NULL, pages * psize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED) {
		error_msg("mmap", errno, NULL);
		goto out;
	}
	r.addr = (uintptr_t)buf;
	r.len = pages * psize;
	r.access = VAMR_ACCESS_READ | VAMR_ACCESS_WRITE;
	if (ioctl(fd, VAMR_IOC_REGISTER, &r)) {
		error_msg("VAMR_IOC_REGISTER", errno,
			  errno == ENOMEM ? "RLIMIT_MEMLOCK (ulimit -l) too small for the pages?" : NULL);
		goto out;
	}
	st.handle = r.handle;
	if (do_ioctl(fd, VAMR_IOC_STATS, &st, "VAMR_IOC_STATS"))
		goto out;
	printf("scope                  own (one region of %" PRIu64 " pages at 0x%" PRIx64
	       ", handle %u)\n", pages, (uint64_t)r.addr, r.handle);
	printf("generation                     %" PRIu64 "\n", (uint64_t)st.generation);
	print_counters(&st.counters);
	ret = 0;
out:
	close(fd);
	if (buf != MAP_FAILED)
		munmap(buf, pages * psize);
	return ret;
}

/* Print every event queued now (waiting up to wait_ms for the first); count them. */
static int drain_events(int efd, int wait_ms, uint64_t *total, uint64_t *lost)
{
	struct pollfd p = { .fd = efd, .events = POLLIN };
	struct vamr_event ev[16];
	uint32_t k;
	ssize_t n;
	int i;

	if (poll(&p, 1, wait_ms) < 0) {
		error_msg("poll on the events file", errno, NULL);
		return -1;
	}
	for (;;) {
		n = read(efd, ev, sizeof(ev));
		if (n < 0) {
			if (errno == EAGAIN)
				return 0;
			error_msg("read from the events file", errno, NULL);
			return -1;
		}
		if (n == 0)
			return 0;
		for (i = 0; i < n / (ssize_t)sizeof(ev[0]); i++) {
			if (ev[i].kind == VAMR_EVENT_OVERFLOW) {
				printf("  event gen=%" PRIu64 " kind=overflow lost=%" PRIu64
				       " (drop every cached entry)\n",
				       (uint64_t)ev[i].generation, (uint64_t)ev[i].len);
				*lost += ev[i].len;
				continue;
			}
			k = ev[i].kind & ~VAMR_EVENT_WATCH;
			printf("  event gen=%" PRIu64 " kind=%s%s addr=0x%" PRIx64 " len=%" PRIu64
			       " %s=%u cookie=0x%" PRIx64 "\n",
			       (uint64_t)ev[i].generation,
			       ev[i].kind & VAMR_EVENT_WATCH ? "watch:" : "",
			       k < VAMR_EVENT_COUNT ? kind_names[k] : "unknown",
			       (uint64_t)ev[i].addr, (uint64_t)ev[i].len,
			       ev[i].kind & VAMR_EVENT_WATCH ? "slot" : "handle", ev[i].handle,
			       (uint64_t)ev[i].cookie);
			(*total)++;
		}
	}
}

static int cmd_watch(int argc, char **argv)
{
	long psize = sysconf(_SC_PAGESIZE);
	struct vamr_events_open eo = { .flags = VAMR_EVENTS_NONBLOCK | VAMR_EVENTS_CLOEXEC };
	struct vamr_register r = { 0 };
	struct vamr_watch w = { 0 };
	struct vamr_stats st = { 0 };
	uint64_t addr, len, pages, total = 0, lost = 0;
	const uint64_t *gens = MAP_FAILED;
	char *buf = MAP_FAILED;
	int fd, flags, step = 0, ret = 1, monitor = 0;
	uint64_t i;

	if (argc > 1 && !strcmp(argv[1], "--monitor")) {
		monitor = 1;
		argc--;
		argv++;
	}
	if (argc != 3)
		return usage_error("%s", "watch: needs ADDR and LEN (ADDR 0: anywhere)");
	if (parse_u64(argv[1], &addr) || addr % psize)
		return usage_error("watch: ADDR '%s' is not a page-aligned number", argv[1]);
	if (parse_u64(argv[2], &len) || !len || len > (1ULL << 32))
		return usage_error("watch: LEN '%s' is not a number from 1 to 4 GiB", argv[2]);
	pages = (len + psize - 1) / psize;
	len = pages * psize;

	fd = open_dev();
	if (fd < 0)
		return 1;
	flags = MAP_PRIVATE | MAP_ANONYMOUS | (addr ? MAP_FIXED_NOREPLACE : 0);
	buf = mmap((void *)(uintptr_t)addr, len, PROT_READ | PROT_WRITE, flags, -1, 0);
	if (buf == MAP_FAILED || (addr && (uintptr_t)buf != addr)) {
		error_msg("mmap of the watched range", buf == MAP_FAILED ? errno : EEXIST,
			  addr ? "ADDR is taken or not usable in vamrctl's address space" : NULL);
		if (buf != MAP_FAILED)
			munmap(buf, len);
		buf = MAP_FAILED;
		goto out;
	}
	if (do_ioctl(fd, VAMR_IOC_EVENTS_OPEN, &eo, "VAMR_IOC_EVENTS_OPEN"))
		goto out;
	if (monitor) {
		/* Monitor mode: a watch pins nothing; its counter is in a read-only page. */
		gens = mmap(NULL, VAMR_WATCH_MAP_LEN, PROT_READ, MAP_SHARED, fd, 0);
		if (gens == MAP_FAILED) {
			error_msg("mmap of the generation counters", errno,
				  errno == ENODEV ? "vamr without monitor mode?" : NULL);
			goto out;
		}
		w.addr = (uintptr_t)buf;
		w.len = len;
		w.cookie = 0x7661;
		if (do_ioctl(fd, VAMR_IOC_WATCH, &w, "VAMR_IOC_WATCH"))
			goto out;
		printf("watch: 0x%" PRIx64 "-0x%" PRIx64 " (%" PRIu64 " pages), slot %u, cookie 0x%"
		       PRIx64 ", events fd %d, generation %" PRIu64 " (monitor mode: nothing pinned)\n",
		       (uint64_t)w.addr, (uint64_t)(w.addr + len), pages, w.slot,
		       (uint64_t)w.cookie, eo.fd, (uint64_t)w.generation);
	}
	r.addr = (uintptr_t)buf;
	r.len = len;
	r.cookie = 0x7661;
	r.access = VAMR_ACCESS_READ | VAMR_ACCESS_WRITE;
	if (monitor) {
		/* no region */
	} else if (ioctl(fd, VAMR_IOC_REGISTER, &r)) {
		error_msg("VAMR_IOC_REGISTER", errno,
			  errno == ENOMEM ? "RLIMIT_MEMLOCK (ulimit -l) too small for LEN?" : NULL);
		goto out;
	}
	if (!monitor)
		printf("watch: 0x%" PRIx64 "-0x%" PRIx64 " (%" PRIu64 " pages), handle %u, cookie 0x%"
		       PRIx64 ", events fd %d\n", (uint64_t)r.addr, (uint64_t)(r.addr + len), pages,
		       r.handle, (uint64_t)r.cookie, eo.fd);

#define STEP(desc) do { printf("step %d: %s\n", ++step, desc); fflush(stdout); } while (0)
#define EVENTS() do { \
		if (drain_events(eo.fd, 200, &total, &lost)) \
			goto out; \
		if (monitor) \
			printf("  generation %" PRIu64 "\n", \
			       __atomic_load_n(&gens[w.slot], __ATOMIC_ACQUIRE)); \
		fflush(stdout); \
	} while (0)
	STEP(monitor ? "watch" : "register");
	EVENTS();
	STEP("write every page");
	for (i = 0; i < pages; i++)
		buf[i * psize] = 1;
	EVENTS();
	STEP("madvise(MADV_DONTNEED) page 0");
	if (madvise(buf, psize, MADV_DONTNEED))
		error_msg("madvise", errno, NULL);
	EVENTS();
	if (pages > 1) {
		STEP("mprotect(PROT_READ) page 1");
		if (mprotect(buf + psize, psize, PROT_READ))
			error_msg("mprotect", errno, NULL);
		EVENTS();
	}
	if (pages > 2) {
		STEP("mmap(MAP_FIXED) a new page over page 2");
		if (mmap(buf + 2 * psize, psize, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
			error_msg("mmap", errno, NULL);
		EVENTS();
	}
	st.handle = r.handle;
	if (!monitor && !ioctl(fd, VAMR_IOC_STATS, &st))
		printf("region: generation %" PRIu64 ", pages_pinned %" PRIu64 "\n",
		       (uint64_t)st.generation, (uint64_t)st.counters.pages_pinned);
	STEP("munmap the range");
	munmap(buf, len);
	buf = MAP_FAILED;
	EVENTS();
	printf("watch: %" PRIu64 " events, %" PRIu64 " lost\n", total, lost);
	ret = 0;
out:
	if (buf != MAP_FAILED)
		munmap(buf, len);
	if (gens != MAP_FAILED)
		munmap((void *)gens, VAMR_WATCH_MAP_LEN);
	close(fd);
	return ret;
}

static int cmd_mr_query(int argc, char **argv)
{
	struct vamr_mr_query q = { 0 };
	uint64_t key;
	int fd, i, ret = 1;
	char what[64];

	if (argc < 2)
		return usage_error("%s", "mr-query: needs KEY");
	if (parse_u64(argv[1], &key) || key > UINT32_MAX)
		return usage_error("mr-query: KEY '%s' is not a 32-bit number", argv[1]);
	q.key = key;
	for (i = 2; i < argc; i++) {
#ifdef VAMR_FEATURE_DEVICES
		uint64_t idx;

		if (!strcmp(argv[i], "--ib-index") && i + 1 < argc) {
			if (parse_u64(argv[++i], &idx) || idx > UINT32_MAX)
				return usage_error("mr-query: bad device index '%s'", argv[i]);
			q.ib_index = idx;
			continue;
		}
#endif
		return usage_error("mr-query: unexpected argument '%s'", argv[i]);
	}
	fd = open_dev();
	if (fd < 0)
		return 1;
	snprintf(what, sizeof(what), "VAMR_IOC_MR_QUERY key 0x%x", q.key);
	if (ioctl(fd, VAMR_IOC_MR_QUERY, &q)) {
		error_msg(what, errno,
			  errno == ENOENT ? "no MR with VA semantics under this key in this process "
					    "(a normal MR, another process's MR or no MR: the query "
					    "answers only for the caller's own MRs)" : NULL);
		goto out;
	}
	printf("key                    0x%x\n", q.key);
	printf("addr                   0x%" PRIx64 "\n", (uint64_t)q.addr);
	printf("len                            %" PRIu64 "\n", (uint64_t)q.len);
	print_counters(&q.counters);
	ret = 0;
out:
	close(fd);
	return ret;
}

static const char *va_mr_param = "/sys/module/rdma_rxe/parameters/va_mr";

/*
 * The RDMA devices and whether each offers VA MRs: "device NAME
 * vamr_access=0x..." or "device NAME vamr_access=none (normal MRs only)".
 */
static void print_va_devices(void)
{
	const char *base = "/sys/class/infiniband";
	struct dirent *de;
	int n = 0;
	DIR *d;

	d = opendir(base);
	if (d) {
		while ((de = readdir(d))) {
			char path[512], buf[32] = "";
			FILE *f;

			if (de->d_name[0] == '.')
				continue;
			n++;
			snprintf(path, sizeof(path), "%s/%s/vamr_access", base, de->d_name);
			f = fopen(path, "r");
			if (f && fgets(buf, sizeof(buf), f)) {
				buf[strcspn(buf, "\n")] = 0;
				printf("device %s vamr_access=%s\n", de->d_name, buf);
			} else {
				printf("device %s vamr_access=none (normal MRs only)\n", de->d_name);
			}
			if (f)
				fclose(f);
		}
		closedir(d);
	}
	if (!n)
		printf("device none (no RDMA device)\n");
}

static int cmd_va_mr(int argc, char **argv)
{
	const char *op = argc > 1 ? argv[1] : "status";
	char buf[16] = "";
	FILE *f;

	if (argc > 2)
		return usage_error("va-mr: unexpected argument '%s'", argv[2]);
	if (strcmp(op, "status") && strcmp(op, "on") && strcmp(op, "off"))
		return usage_error("va-mr: '%s' is not on, off or status", op);
	if (access("/sys/module/rdma_rxe", F_OK)) {
		fprintf(stderr, "%s: va-mr: rdma_rxe is not loaded (modprobe rdma_rxe va_mr=1 "
			"loads it with the switch on)\n", prog);
		return 1;
	}
	if (access(va_mr_param, F_OK)) {
		fprintf(stderr, "%s: va-mr: the loaded rdma_rxe has no va_mr parameter (no %s): "
			"it is the stock rdma_rxe or one without vamr's patches/rxe; MRs get no VA "
			"semantics from it\n", prog, va_mr_param);
		print_va_devices();
		return 1;
	}
	if (strcmp(op, "status")) {
		f = fopen(va_mr_param, "w");
		if (!f || fputs(!strcmp(op, "on") ? "1\n" : "0\n", f) == EOF || fclose(f)) {
			int err = errno;

			error_msg("va-mr: cannot write /sys/module/rdma_rxe/parameters/va_mr", err,
				  err == EACCES || err == EPERM ? "only root can change it" : NULL);
			return 1;
		}
	}
	f = fopen(va_mr_param, "r");
	if (!f || !fgets(buf, sizeof(buf), f)) {
		error_msg("va-mr: cannot read /sys/module/rdma_rxe/parameters/va_mr", errno, NULL);
		if (f)
			fclose(f);
		return 1;
	}
	fclose(f);
	printf("va_mr %s\n", buf[0] == 'Y' || buf[0] == '1' ? "on" : "off");
	printf("applies to user MRs without ODP registered from now on; MRs registered before "
	       "keep what they got\n");
	print_va_devices();
	return 0;
}

static int run(int argc, char **argv);

/*
 * Everything vamrctl prints on stdout must get there: a write error (a full
 * disk, a closed pipe reader's EPIPE aside, which kills it) turns the exit
 * status into 1, with a message, instead of a silent success.
 */
int main(int argc, char **argv)
{
	int ret = run(argc, argv);
	int err = fflush(stdout) ? errno : 0;

	if (ferror(stdout)) {
		error_msg("write error on standard output", err ? err : EIO, NULL);
		if (ret == 0)
			ret = 1;
	}
	return ret;
}

static int run(int argc, char **argv)
{
	int i = 1;

	while (i < argc && argv[i][0] == '-') {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(argv[i], "-V") || !strcmp(argv[i], "--version")) {
			printf("vamrctl %s (uapi ABI %d)\n", VAMR_VERSION, VAMR_ABI_VERSION);
			return 0;
		} else if (!strcmp(argv[i], "--device")) {
			if (i + 1 >= argc)
				return usage_error("option '%s' needs a PATH", argv[i]);
			dev_path = argv[i + 1];
			i += 2;
		} else {
			return usage_error("unknown option '%s'", argv[i]);
		}
	}
	if (i >= argc) {
		usage(stderr);
		return 2;
	}
	argc -= i;
	argv += i;
	if (!strcmp(argv[0], "caps"))
		return cmd_caps(argc, argv);
	if (!strcmp(argv[0], "stats"))
		return cmd_stats(argc, argv);
	if (!strcmp(argv[0], "watch"))
		return cmd_watch(argc, argv);
	if (!strcmp(argv[0], "mr-query"))
		return cmd_mr_query(argc, argv);
	if (!strcmp(argv[0], "va-mr"))
		return cmd_va_mr(argc, argv);
	if (!strcmp(argv[0], "help")) {
		usage(stdout);
		return 0;
	}
	return usage_error("unknown command '%s'", argv[0]);
}
