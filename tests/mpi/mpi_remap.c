// SPDX-License-Identifier: GPL-2.0
/*
 * mpi_remap: the registration-cache hazard with unmodified middleware.
 *
 * Two ranks (one per node). For N iterations rank 0 sends a large message
 * (rendezvous: UCX moves it with RDMA through registrations it caches by
 * address) from its send buffer to rank 1's receive buffer, rank 1 checks
 * every byte (position-dependent and tagged with the iteration), and then
 * both ranks release their buffer and map it again at the same address the
 * way custom allocators, language runtimes and JITs do, with raw system calls
 * that libc-level memory hooks (UCX's ucm) do not see:
 *   after even iterations: syscall(SYS_munmap) + syscall(SYS_mmap, MAP_FIXED)
 *   after odd iterations:  syscall(SYS_madvise, MADV_DONTNEED)
 * With normal MRs the cached registration still points at the old pages, so
 * from the second iteration on the receiver gets bytes that are not the
 * sender's current ones (or they land where the receiver cannot see them).
 * With VA MRs the registration follows the address and every byte is right.
 *
 * Registration counts: this program interposes ibv_reg_mr_iova2, ibv_reg_mr
 * and ibv_dereg_mr (it is linked with --export-dynamic, so UCX's IB transport,
 * which libibverbs reaches through a private dlopen, binds to these first) and
 * forwards to the next definition (an LD_PRELOAD library, if any) or to
 * libibverbs itself. Debian's UCX 1.13 is built without statistics
 * (--enable-stats) and with --disable-logging (its rcache's trace messages are
 * compiled out), so the calls are counted here.
 *
 * usage: mpi_remap [iterations [MiB]]      (default 6 iterations, 4 MiB)
 * Prints per iteration the wrong bytes rank 1 saw, then one line
 *   mpi_remap: iterations N wrong_iterations W wrong_bytes B reg R0/R1 dereg D0/D1
 * (R0/R1: registrations of rank 0 / rank 1). Exit status 0 when every byte of
 * every iteration was right, 3 when some were wrong, 1 on other errors.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

struct ibv_pd;
struct ibv_mr;

static unsigned long n_reg, n_dereg;
/*
 * Inside ibv_reg_mr(): libibverbs 44 implements it as a call of
 * ibv_reg_mr_iova2 through its own PLT, which reaches our ibv_reg_mr_iova2
 * again; that nested call is the same registration and is not counted twice.
 */
static __thread int in_reg_mr;

/* The definition after ours (a preload library), else libibverbs' own. */
static void *next_sym(const char *name)
{
	void *f = dlsym(RTLD_NEXT, name);
	void *h;

	if (f)
		return f;
	h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (!h)
		return NULL;
	f = dlsym(h, name);
	dlclose(h);
	return f;
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				unsigned int access);
struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				unsigned int access)
{
	static struct ibv_mr *(*real)(struct ibv_pd *, void *, size_t, uint64_t, unsigned int);

	if (!real)
		real = next_sym("ibv_reg_mr_iova2");
	if (!real)
		return NULL;
	if (!in_reg_mr)
		__atomic_add_fetch(&n_reg, 1, __ATOMIC_RELAXED);
	return real(pd, addr, length, iova, access);
}

/* libibverbs' ABI symbol behind the ibv_reg_mr() macro of 1.1-era callers. */
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access);
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	static struct ibv_mr *(*real)(struct ibv_pd *, void *, size_t, int);
	struct ibv_mr *mr;

	if (!real)
		real = next_sym("ibv_reg_mr");
	if (!real)
		return NULL;
	__atomic_add_fetch(&n_reg, 1, __ATOMIC_RELAXED);
	in_reg_mr++;
	mr = real(pd, addr, length, access);
	in_reg_mr--;
	return mr;
}

int ibv_dereg_mr(struct ibv_mr *mr);
int ibv_dereg_mr(struct ibv_mr *mr)
{
	static int (*real)(struct ibv_mr *);

	if (!real)
		real = next_sym("ibv_dereg_mr");
	if (!real)
		return -1;
	__atomic_add_fetch(&n_dereg, 1, __ATOMIC_RELAXED);
	return real(mr);
}

/* Byte at @pos in iteration @it: never the same as in the iteration before. */
static inline uint8_t pattern(unsigned int it, size_t pos)
{
	return (uint8_t)((pos ^ (pos >> 8) ^ (pos >> 16)) + 37u * it + 1u);
}

static void die(const char *what)
{
	perror(what);
	MPI_Abort(MPI_COMM_WORLD, 1);
	exit(1);
}

/* Release the buffer and map fresh memory at the same address, behind libc. */
static void remap(void *buf, size_t len, unsigned int it)
{
	if (it % 2 == 0) {
		void *p;

		if (syscall(SYS_munmap, buf, len))
			die("munmap");
		p = (void *)syscall(SYS_mmap, buf, len, PROT_READ | PROT_WRITE,
				    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
		if (p != buf)
			die("mmap MAP_FIXED");
	} else {
		if (syscall(SYS_madvise, buf, len, MADV_DONTNEED))
			die("madvise");
	}
}

int main(int argc, char **argv)
{
	unsigned int iters = argc > 1 ? (unsigned int)atoi(argv[1]) : 6;
	size_t len = (argc > 2 ? (size_t)atoi(argv[2]) : 4) << 20;
	unsigned long wrong_total = 0, wrong_iters = 0;
	unsigned long counts[2], all[4];
	int rank, size;
	unsigned int it;
	uint8_t *buf;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size != 2) {
		if (rank == 0)
			fprintf(stderr, "mpi_remap: needs 2 ranks, got %d\n", size);
		MPI_Finalize();
		return 1;
	}
	buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED)
		die("mmap");
	if (rank == 0) {
		char host[64] = "";

		gethostname(host, sizeof(host));
		printf("mpi_remap: rank 0 on %s, %u iterations of %zu MiB\n", host, iters, len >> 20);
	}
	for (it = 0; it < iters; it++) {
		unsigned long wrong = 0, stale = 0, zero = 0;
		size_t i;

		if (rank == 0) {
			for (i = 0; i < len; i++)
				buf[i] = pattern(it, i);
			MPI_Send(buf, (int)len, MPI_BYTE, 1, (int)it, MPI_COMM_WORLD);
		} else {
			memset(buf, 0xee, len);
			MPI_Recv(buf, (int)len, MPI_BYTE, 0, (int)it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			for (i = 0; i < len; i++) {
				if (buf[i] == pattern(it, i))
					continue;
				wrong++;
				if (it > 0 && buf[i] == pattern(it - 1, i))
					stale++;
				else if (buf[i] == 0xee)
					zero++;
			}
			printf("mpi_remap: iteration %u (%s): %s, %lu wrong byte(s)"
			       " (%lu of the previous iteration, %lu never written)\n",
			       it, it == 0 ? "first use" :
			       (it - 1) % 2 == 0 ? "after munmap+mmap" : "after MADV_DONTNEED",
			       wrong ? "WRONG" : "right", wrong, stale, zero);
			fflush(stdout);
			wrong_total += wrong;
			wrong_iters += wrong != 0;
		}
		MPI_Barrier(MPI_COMM_WORLD);
		remap(buf, len, it);
	}
	counts[0] = n_reg;
	counts[1] = n_dereg;
	MPI_Gather(counts, 2, MPI_UNSIGNED_LONG, all, 2, MPI_UNSIGNED_LONG, 0, MPI_COMM_WORLD);
	MPI_Bcast(&wrong_iters, 1, MPI_UNSIGNED_LONG, 1, MPI_COMM_WORLD);
	MPI_Bcast(&wrong_total, 1, MPI_UNSIGNED_LONG, 1, MPI_COMM_WORLD);
	if (rank == 0) {
		printf("mpi_remap: iterations %u wrong_iterations %lu wrong_bytes %lu reg %lu/%lu dereg %lu/%lu\n",
		       iters, wrong_iters, wrong_total, all[0], all[2], all[1], all[3]);
		fflush(stdout);
	}
	MPI_Finalize();
	return wrong_iters ? 3 : 0;
}
