// SPDX-License-Identifier: GPL-2.0
/*
 * va_mr_remap: an unmodified normal-MR program, for va_mr_jobs.sh (not a test
 * of its own: built into OUT/helpers/, not run by the guest's test loop).
 *
 * It registers its buffers with plain ibv_reg_mr() (constant access flags,
 * so the exported ibv_reg_mr@IBVERBS_1.1 is called; --iova2: with
 * ibv_reg_mr_iova2(), as UCX does), asks for nothing of vamr, and then does
 * what custom allocators and runtimes do behind a registration cache: it
 * releases the buffer and maps it again at the same address with raw system
 * calls (munmap + mmap MAP_FIXED; madvise MADV_DONTNEED), writes new data
 * with the CPU, and lets the peer (the other QP of an rdma_pair) RDMA READ
 * it and RDMA WRITE new data into it. Every byte is checked against a
 * position-dependent pattern. Whether it comes out right depends only on
 * how the MR was made: with VA semantics (libvamr-preload.so, or rdma_rxe's
 * va_mr parameter) CORRECT, a normal MR STALE.
 *
 * Output, on stdout:
 *   va-mr <scenario> yes|no          the MR has VA semantics (VAMR_IOC_MR_QUERY;
 *                                    "no" too when /dev/vamr is missing)
 *   rdma-res-va <scenario> on|off|none|missing
 *                                    what `rdma -dd res show mr` says (va on/off;
 *                                    none: no such attribute, the stock rxe)
 *   outcome <scenario> <op> <OUTCOME>
 * scenario: munmap_mmap, dontneed; op: initial (READ before the remap), read,
 * write; OUTCOME: CORRECT, STALE (the old pages' bytes), CORRUPT (other
 * wrong bytes), WCERR (error completion), REGFAIL (registration failed).
 *
 * usage: va_mr_remap [--iova2] [--odp] [--after-reg FILE=VALUE]
 *   --odp        register with IBV_ACCESS_ON_DEMAND (ODP MRs must be left alone)
 *   --after-reg  after the first scenario's registration, write VALUE to FILE
 *                (va_mr_jobs.sh: switch rdma_rxe's va_mr parameter between the
 *                two registrations)
 * Exit status: 0 when every scenario ran (whatever its outcome), 1 on a set-up
 * failure, 4 when the RDMA device is missing.
 *
 * Also built as libva_mr_remap.so (entry va_mr_remap_main()) for
 * va_mr_dlopen, which dlopen()s it with RTLD_LOCAL the way UCX loads its IB
 * transport, so that libibverbs sits in a private scope.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pattern.h"
#include "rdma_pair.h"

#define NPAGES 4
#define TIMEOUT_MS 10000

static size_t buf_len;

/* CORRECT / STALE / CORRUPT for @len bytes at @buf against two seeds. */
static const char *judge(const void *buf, size_t len, uint64_t want, uint64_t old)
{
	if (pattern_check(buf, len, want, 0) == PATTERN_OK)
		return "CORRECT";
	if (pattern_check(buf, len, old, 0) == PATTERN_OK)
		return "STALE";
	return "CORRUPT";
}

/* Whether @mr has VA semantics, as vamr sees it. */
static const char *mr_is_va(const struct ibv_mr *mr)
{
	struct vamr_mr_query q = vamr_mr_query_of(mr);
	int fd = open("/dev/vamr", O_RDWR | O_CLOEXEC);
	int ret;

	if (fd < 0)
		return "no";
	ret = ioctl(fd, VAMR_IOC_MR_QUERY, &q);
	close(fd);
	return ret == 0 && q.len == buf_len ? "yes" : "no";
}

/*
 * What `rdma -dd res show mr` says of @mr (the -dd goes before the object:
 * after it, the driver attributes are not shown): "on" or "off" (its driver
 * attribute va, patches/rxe 0007), "none" when its entry has no such
 * attribute (the stock rxe), "missing" when no entry has @mr's lkey or the
 * tool cannot run. An entry is the line with the lkey and the indented
 * lines after it.
 */
static const char *res_va(const struct ibv_mr *mr)
{
	char line[512], key[32];
	const char *ans = "missing";
	int in_mr = 0;
	FILE *f;

	snprintf(key, sizeof(key), "lkey 0x%x ", mr->lkey);
	f = popen("rdma -dd res show mr 2>/dev/null", "r");
	if (!f)
		return ans;
	while (fgets(line, sizeof(line), f)) {
		if (line[0] != ' ' && line[0] != '\t') {
			in_mr = strstr(line, key) != NULL;
			if (in_mr)
				ans = "none";
		}
		if (!in_mr)
			continue;
		if (strstr(line, "va on"))
			ans = "on";
		else if (strstr(line, "va off"))
			ans = "off";
	}
	pclose(f);
	return ans;
}

static int write_file(const char *spec)
{
	char path[256];
	const char *eq = strchr(spec, '=');
	int fd, ok;

	if (!eq || (size_t)(eq - spec) >= sizeof(path))
		return -1;
	memcpy(path, spec, eq - spec);
	path[eq - spec] = 0;
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ok = write(fd, eq + 1, strlen(eq + 1)) == (ssize_t)strlen(eq + 1);
	close(fd);
	return ok ? 0 : -1;
}

/* The remap: raw system calls, which libc-level memory hooks do not see. */
static int remap(const char *scenario, void *addr, size_t len)
{
	if (!strcmp(scenario, "munmap_mmap")) {
		if (syscall(SYS_munmap, addr, len))
			return -1;
		return (void *)syscall(SYS_mmap, addr, len, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == addr ? 0 : -1;
	}
	return syscall(SYS_madvise, addr, len, MADV_DONTNEED) ? -1 : 0;
}

static struct ibv_mr *reg(struct rdma_pair *p, void *addr, size_t len, int iova2, int odp)
{
	if (iova2)
		return ibv_reg_mr_iova2(p->pd, addr, len, (uintptr_t)addr,
					IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					IBV_ACCESS_REMOTE_READ | (odp ? IBV_ACCESS_ON_DEMAND : 0));
	/* Constant flags: the ibv_reg_mr() macro calls the exported ibv_reg_mr. */
	if (odp)
		return ibv_reg_mr(p->pd, addr, len,
				  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				  IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ON_DEMAND);
	return ibv_reg_mr(p->pd, addr, len,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
}

static int scenario(struct rdma_pair *p, const char *name, uint64_t tag, int iova2, int odp,
		    const char *after_reg)
{
	const uint64_t seed_a = tag, seed_b = tag + 1, seed_c = tag + 2;
	uint8_t *target, *local;
	struct ibv_mr *mr, *lmr;
	const char *out;
	int st;

	target = mmap(NULL, buf_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	local = mmap(NULL, buf_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (target == MAP_FAILED || local == MAP_FAILED)
		return -1;
	pattern_fill(target, buf_len, seed_a, 0);
	memset(local, 0, buf_len);
	mr = reg(p, target, buf_len, iova2, odp);
	if (!mr) {
		printf("# ibv_reg_mr of the target failed: %s\n", strerror(errno));
		printf("outcome %s initial REGFAIL\noutcome %s read REGFAIL\noutcome %s write REGFAIL\n",
		       name, name, name);
		return 0;
	}
	if (after_reg && write_file(after_reg))
		printf("# --after-reg %s failed: %s\n", after_reg, strerror(errno));
	/* The requester's own buffer is never remapped: any MR will do. */
	lmr = reg(p, local, buf_len, iova2, 0);
	if (!lmr) {
		printf("# ibv_reg_mr of the local buffer failed: %s\n", strerror(errno));
		return -1;
	}
	printf("va-mr %s %s\n", name, mr_is_va(mr));
	printf("rdma-res-va %s %s\n", name, res_va(mr));

	/* Before the remap every kind of MR is right. */
	st = rdma_pair_read_sync(p, 0, local, lmr->lkey, (uintptr_t)target, mr->rkey, buf_len,
				 TIMEOUT_MS);
	printf("outcome %s initial %s\n", name, st ? "WCERR" : judge(local, buf_len, seed_a, 0));
	if (st)
		rdma_pair_recover(p);

	if (remap(name, target, buf_len)) {
		printf("# remap %s failed: %s\n", name, strerror(errno));
		return -1;
	}
	pattern_fill(target, buf_len, seed_b, 0);

	/* The peer reads what the CPU wrote into the new pages. */
	memset(local, 0, buf_len);
	st = rdma_pair_read_sync(p, 0, local, lmr->lkey, (uintptr_t)target, mr->rkey, buf_len,
				 TIMEOUT_MS);
	out = st ? "WCERR" : judge(local, buf_len, seed_b, seed_a);
	printf("outcome %s read %s\n", name, out);
	if (st)
		rdma_pair_recover(p);

	/* The peer writes; the CPU must see it in the new pages. */
	pattern_fill(local, buf_len, seed_c, 0);
	st = rdma_pair_write_sync(p, 0, local, lmr->lkey, (uintptr_t)target, mr->rkey, buf_len,
				  TIMEOUT_MS);
	out = st ? "WCERR" : judge(target, buf_len, seed_c, seed_b);
	printf("outcome %s write %s\n", name, out);
	if (st)
		rdma_pair_recover(p);

	fflush(stdout);
	ibv_dereg_mr(lmr);
	ibv_dereg_mr(mr);
	munmap(local, buf_len);
	munmap(target, buf_len);
	return 0;
}

int va_mr_remap_main(int argc, char **argv);

int va_mr_remap_main(int argc, char **argv)
{
	const char *after_reg = NULL;
	int iova2 = 0, odp = 0, i, ret;
	struct rdma_pair p;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--iova2")) {
			iova2 = 1;
		} else if (!strcmp(argv[i], "--odp")) {
			odp = 1;
		} else if (!strcmp(argv[i], "--after-reg") && i + 1 < argc) {
			after_reg = argv[++i];
		} else {
			fprintf(stderr, "usage: va_mr_remap [--iova2] [--odp] [--after-reg FILE=VALUE]\n");
			return 2;
		}
	}
	buf_len = NPAGES * (size_t)sysconf(_SC_PAGESIZE);
	ret = rdma_pair_open(&p, NULL);
	if (ret) {
		printf("# rdma_pair_open: %s\n", strerror(-ret));
		return ret == -ENODEV ? 4 : 1;
	}
	if (scenario(&p, "munmap_mmap", 0x1000, iova2, odp, after_reg) ||
	    scenario(&p, "dontneed", 0x2000, iova2, odp, NULL)) {
		rdma_pair_close(&p);
		return 1;
	}
	rdma_pair_close(&p);
	return 0;
}

#ifndef VA_MR_REMAP_LIBRARY
int main(int argc, char **argv)
{
	return va_mr_remap_main(argc, argv);
}
#endif
