// SPDX-License-Identifier: GPL-2.0
/*
 * vamr_hostile_mem: regions and VA MRs over memory of unusual kinds:
 *
 *  - memfd_secret (secretmem): nothing is pinned, every access fails with
 *    EFAULT, and secret pages mapped over registered memory are never read
 *    through the region or the MR;
 *  - MAP_DROPPABLE memory, mseal()ed ranges, MADV_DONTNEED on droppable;
 *  - io_uring fixed buffers over the range of a region, then munmap + mmap:
 *    io_uring keeps its old pages, the region follows the new ones.
 *
 * Data is position dependent (pattern.h) and checked byte by byte; VmPin and
 * the module-wide counters are checked where pins or charges are involved.
 */
#define _GNU_SOURCE
#include "kselftest_harness.h"
#include "hostile_util.h"

/* ---------------------------------------------------------------------- */
/* 2. memfd_secret                                                        */
/* ---------------------------------------------------------------------- */

/* A secretmem mapping of len bytes (MAP_SHARED), its fd in *fdp; NULL and errno if none. */
static uint8_t *map_secret(size_t len, void *at, int *fdp)
{
	int fd = syscall(__NR_memfd_secret, 0);
	void *p;

	if (fd < 0)
		return NULL;
	if (ftruncate(fd, len)) {
		close(fd);
		return NULL;
	}
	p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_SHARED | (at ? MAP_FIXED : 0), fd, 0);
	if (p == MAP_FAILED) {
		close(fd);
		return NULL;
	}
	*fdp = fd;
	return p;
}

/*
 * A region over secretmem: GUP refuses the pages, so registration pins
 * nothing (the range is a hole to vamr, as PROT_NONE memory is) and every
 * access, prefetch and atomic fails with EFAULT; VmPin holds the cover's
 * charge while registered, then comes back; no pin is taken or leaked.
 */
TEST(secretmem_region)
{
	const size_t len = 4 * PAGE;
	struct vamr_counters c0;
	struct vamr_stats s;
	uint8_t *sec, tmp[PAGE];
	uint64_t word;
	uint32_t h, pages = 0;
	int fd, sfd, ret;
	long pin0;

	sec = map_secret(len, NULL, &sfd);
	if (!sec)
		SKIP(return, "memfd_secret: %s", strerror(errno));
	pattern_fill(sec, len, 0x5e, 0);
	fd = vamr_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, gcounters(fd, &c0));
	pin0 = vamr_vmpin_kb();
	ret = vamr_register(fd, sec, len, RW, 1, &h);
	if (ret) {
		/* A refusal is clean too: nothing charged, nothing pinned. */
		EXPECT_EQ(-EFAULT, ret);
		EXPECT_EQ(pin0, vamr_vmpin_kb());
	} else {
		ASSERT_EQ(0, vamr_stats(fd, h, &s));
		EXPECT_EQ(0ull, s.counters.pages_pinned);
		EXPECT_EQ(pin0 + (long)(len / 1024), vamr_vmpin_kb());
		memset(tmp, 0, sizeof(tmp));
		EXPECT_EQ(-EFAULT, vamr_read(fd, h, sec, tmp, PAGE));
		EXPECT_EQ(-EFAULT, vamr_read(fd, h, sec + 100, tmp, 200));
		EXPECT_EQ(-EFAULT, vamr_write(fd, h, sec, tmp, PAGE));
		EXPECT_EQ(-EFAULT, vamr_atomic(fd, h, sec, VAMR_ATOMIC_FETCH_ADD, 1, 0, &word));
		ret = vamr_prefetch(fd, h, sec, len, &pages);
		EXPECT_TRUE(ret == -EFAULT || (ret == 0 && pages == 0));
		/* Nothing was copied out of, or into, the secret pages. */
		EXPECT_EQ(PATTERN_OK, pattern_check(sec, len, 0x5e, 0));
		ASSERT_EQ(0, vamr_stats(fd, h, &s));
		EXPECT_EQ(0ull, s.counters.pages_pinned);
		EXPECT_EQ(0, vamr_unregister(fd, h));
	}
	EXPECT_EQ(pin0, vamr_vmpin_kb());
	EXPECT_GCOUNTERS_BACK(fd, &c0);
	munmap(sec, len);
	close(sfd);
	close(fd);
}

/*
 * Registered normal memory (a /dev/vamr region and a VA MR) replaced by a
 * secretmem mapping at the same address (mmap MAP_FIXED of the memfd_secret
 * file) over the middle pages: the secret bytes are never read through the
 * region or the MR (EFAULT, error completion, nothing delivered), the pages
 * around them still work, and once ordinary memory is mapped there again
 * both follow it.
 */
TEST(secretmem_replaces_registered_memory)
{
	const size_t len = 8 * PAGE;
	uint8_t *buf = map_anon(len), *land, *sec, tmp[PAGE], two[PAGE + 1];
	struct rdma_pair p = { 0 };
	struct ibv_mr *mr = NULL, *lmr = NULL;
	struct vamr_counters c0;
	int fd, sfd, err, rc;
	bool rdma;
	uint32_t h;
	size_t i;

	ASSERT_NE(NULL, buf);
	fd = vamr_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, gcounters(fd, &c0));
	rc = syscall(__NR_memfd_secret, 0);
	if (rc < 0)
		SKIP(return, "memfd_secret: %s", strerror(errno));
	close(rc);
	rdma = rdma_pair_open(&p, NULL) == 0;
	land = map_anon(len);
	ASSERT_NE(NULL, land);
	pattern_fill(buf, len, 0x61, 0);
	ASSERT_EQ(0, vamr_register(fd, buf, len, RW, 1, &h));
	if (rdma) {
		ASSERT_EQ(0, rdma_pair_reg_mr(&p, buf, len, ACC | VAMR_ACCESS_VA, &mr));
		ASSERT_EQ(0, rdma_pair_reg_mr(&p, land, len, ACC, &lmr));
		ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_read_sync(&p, 0, land, lmr->lkey,
							      (uintptr_t)buf, mr->rkey, len, 0));
		ASSERT_EQ(PATTERN_OK, pattern_check(land, len, 0x61, 0));
	}
	sec = map_secret(2 * PAGE, buf + 3 * PAGE, &sfd);
	ASSERT_EQ(buf + 3 * PAGE, sec);
	pattern_fill(sec, 2 * PAGE, 0x5f, 0);

	/* The secret pages: EFAULT, alone, at an offset, or in a longer read. */
	memset(tmp, 0, sizeof(tmp));
	EXPECT_EQ(-EFAULT, vamr_read(fd, h, sec, tmp, PAGE));
	EXPECT_EQ(-EFAULT, vamr_read(fd, h, sec + PAGE + 17, tmp, 300));
	for (i = 0; i < sizeof(tmp); i++)
		if (tmp[i])
			break;
	EXPECT_EQ(sizeof(tmp), i);
	/* A read from the page before: that page may be copied, no byte of the next. */
	memset(two, 0, sizeof(two));
	EXPECT_EQ(-EFAULT, vamr_read(fd, h, buf + 2 * PAGE, two, PAGE + 1));
	EXPECT_EQ(0, two[PAGE]);
	EXPECT_EQ(-EFAULT, vamr_write(fd, h, sec, tmp, 64));
	EXPECT_EQ(PATTERN_OK, pattern_check(sec, 2 * PAGE, 0x5f, 0));
	/* Around them the region works. */
	EXPECT_EQ(PATTERN_OK, region_check(fd, h, buf, 3 * PAGE, 0x61, 0, &err));
	EXPECT_EQ(PATTERN_OK, region_check(fd, h, buf + 5 * PAGE, 3 * PAGE, 0x61, 5 * PAGE, &err));
	if (rdma) {
		memset(land, 0xa5, len);
		rc = rdma_pair_read_sync(&p, 0, land, lmr->lkey, (uintptr_t)sec, mr->rkey,
					 2 * PAGE, 0);
		EXPECT_NE(IBV_WC_SUCCESS, rc);
		for (i = 0; i < len; i++)
			if (land[i] != 0xa5)
				break;
		EXPECT_EQ(len, i);
		ASSERT_EQ(0, rdma_pair_recover(&p));
		rc = rdma_pair_write_sync(&p, 0, land, lmr->lkey, (uintptr_t)sec + 8, mr->rkey,
					  64, 0);
		EXPECT_NE(IBV_WC_SUCCESS, rc);
		EXPECT_EQ(PATTERN_OK, pattern_check(sec, 2 * PAGE, 0x5f, 0));
		ASSERT_EQ(0, rdma_pair_recover(&p));
		ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_read_sync(&p, 0, land, lmr->lkey,
							      (uintptr_t)buf + 5 * PAGE, mr->rkey,
							      3 * PAGE, 0));
		EXPECT_EQ(PATTERN_OK, pattern_check(land, 3 * PAGE, 0x61, 5 * PAGE));
	}
	/* Ordinary memory again: both follow it. */
	ASSERT_EQ(0, remap_fixed(sec, 2 * PAGE));
	close(sfd);
	pattern_fill(buf + 3 * PAGE, 2 * PAGE, 0x62, 0);
	EXPECT_EQ(PATTERN_OK, region_check(fd, h, buf + 3 * PAGE, 2 * PAGE, 0x62, 0, &err));
	if (rdma) {
		ASSERT_EQ(IBV_WC_SUCCESS, rdma_pair_read_sync(&p, 0, land, lmr->lkey,
							      (uintptr_t)buf + 3 * PAGE, mr->rkey,
							      2 * PAGE, 0));
		EXPECT_EQ(PATTERN_OK, pattern_check(land, 2 * PAGE, 0x62, 0));
		ibv_dereg_mr(mr);
		ibv_dereg_mr(lmr);
		rdma_pair_close(&p);
	}
	EXPECT_EQ(0, vamr_unregister(fd, h));
	EXPECT_GCOUNTERS_BACK(fd, &c0);
	close(fd);
}

/* ---------------------------------------------------------------------- */
/* 3. MAP_DROPPABLE, mseal                                                */
/* ---------------------------------------------------------------------- */

/*
 * A region over MAP_DROPPABLE memory: accesses see the CPU's bytes, a write
 * through the region is seen by the CPU, MADV_DONTNEED (and MADV_PAGEOUT,
 * under which the kernel may drop droppable pages) leave the region seeing
 * what the CPU sees, and the pins and VmPin come back.
 */
TEST(droppable_region)
{
	const size_t len = 16 * PAGE;
	struct vamr_counters c0, c;
	uint8_t *buf, *tmp = malloc(len);
	int fd, err;
	uint32_t h;
	long pin0;

	buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_DROPPABLE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED)
		SKIP(return, "MAP_DROPPABLE: %s", strerror(errno));
	fd = vamr_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, gcounters(fd, &c0));
	pin0 = vamr_vmpin_kb();
	pattern_fill(buf, len, 0x71, 0);
	ASSERT_EQ(0, vamr_register(fd, buf, len, RW, 1, &h));
	EXPECT_EQ(pin0 + (long)(len / 1024), vamr_vmpin_kb());
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.pages_pinned + len / PAGE, c.pages_pinned);
	EXPECT_EQ(PATTERN_OK, region_check(fd, h, buf, len, 0x71, 0, &err));
	pattern_fill(tmp, 3 * PAGE, 0x72, 0);
	ASSERT_EQ(0, vamr_write(fd, h, buf + PAGE + 5, tmp, 3 * PAGE));
	EXPECT_EQ(PATTERN_OK, pattern_check(buf + PAGE + 5, 3 * PAGE, 0x72, 0));

	/*
	 * DONTNEED: zeros for the CPU and for the region (read at once); then the
	 * CPU's new bytes, read after the verify pass swapped the pins for them.
	 */
	ASSERT_EQ(0, madvise(buf + 4 * PAGE, 4 * PAGE, MADV_DONTNEED));
	EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, h, buf, len, &err));
	EXPECT_EQ(0, buf[4 * PAGE]);
	ASSERT_EQ(0, madvise(buf + 12 * PAGE, 4 * PAGE, MADV_DONTNEED));
	/* New pages at once, before the verify pass (2 ms later) looks. */
	touch_pages(buf + 12 * PAGE, 4);
	pattern_fill(buf + 4 * PAGE, 4 * PAGE, 0x73, 0);
	pattern_fill(buf + 12 * PAGE, 4 * PAGE, 0x75, 0);
	usleep(50000);
	EXPECT_EQ(PATTERN_OK, region_check(fd, h, buf + 12 * PAGE, 4 * PAGE, 0x75, 0, &err));
	EXPECT_EQ(PATTERN_OK, region_check(fd, h, buf + 4 * PAGE, 4 * PAGE, 0x73, 0, &err));
	/* PAGEOUT: droppable pages not pinned may go; the region agrees with the CPU. */
	madvise(buf, len, MADV_PAGEOUT);
	EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, h, buf, len, &err));
	pattern_fill(tmp, len, 0x74, 0);
	ASSERT_EQ(0, vamr_write(fd, h, buf, tmp, len));
	EXPECT_EQ(PATTERN_OK, pattern_check(buf, len, 0x74, 0));

	EXPECT_EQ(0, vamr_unregister(fd, h));
	EXPECT_EQ(pin0, vamr_vmpin_kb());
	EXPECT_GCOUNTERS_BACK(fd, &c0);
	munmap(buf, len);
	free(tmp);
	close(fd);
}

/*
 * mseal()ed memory cannot be unmapped, remapped or reprotected: a region
 * over it (registered before or after the seal) keeps working through every
 * refused attempt, follows MADV_DONTNEED where the kernel allows it on sealed
 * writable memory, and unregisters with VmPin back.
 */
TEST(mseal_region)
{
	const size_t len = 8 * PAGE;
	uint8_t *buf = map_anon(len), *tmp = malloc(len);
	struct vamr_counters c0;
	uint32_t h, h2;
	int fd, err, ret;
	long pin0;
	void *p;

	ASSERT_NE(NULL, buf);
	fd = vamr_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, gcounters(fd, &c0));
	pin0 = vamr_vmpin_kb();
	pattern_fill(buf, len, 0x81, 0);
	ASSERT_EQ(0, vamr_register(fd, buf, len, RW, 1, &h));
	ret = syscall(__NR_mseal, buf, len, 0);
	if (ret && (errno == ENOSYS || errno == EINVAL)) {
		vamr_unregister(fd, h);
		SKIP(return, "mseal: %s", strerror(errno));
	}
	ASSERT_EQ(0, ret);
	ASSERT_EQ(0, vamr_register(fd, buf + PAGE, 2 * PAGE, VAMR_ACCESS_READ, 2, &h2));
	EXPECT_EQ(pin0 + (long)(len / 1024 + 2 * PAGE / 1024), vamr_vmpin_kb());

	/* Every attempt to change the mapping is refused; the region does not notice. */
	EXPECT_EQ(-1, munmap(buf, len));
	EXPECT_EQ(EPERM, errno);
	p = mmap(buf, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(MAP_FAILED, mremap(buf, PAGE, 2 * PAGE, 0));
	EXPECT_EQ(-1, mprotect(buf, PAGE, PROT_READ));
	EXPECT_EQ(PATTERN_OK, region_check(fd, h, buf, len, 0x81, 0, &err));
	EXPECT_EQ(PATTERN_OK, region_check(fd, h2, buf + PAGE, 2 * PAGE, 0x81, PAGE, &err));
	pattern_fill(tmp, len, 0x82, 0);
	ASSERT_EQ(0, vamr_write(fd, h, buf, tmp, len));
	EXPECT_EQ(PATTERN_OK, pattern_check(buf, len, 0x82, 0));
	EXPECT_EQ(PATTERN_OK, region_check(fd, h2, buf + PAGE, 2 * PAGE, 0x82, PAGE, &err));

	/*
	 * DONTNEED of sealed writable anonymous memory: allowed or not, the
	 * region agrees with the CPU, read at once (zeros) and after the CPU
	 * wrote the released pages and the verify pass swapped the pins.
	 */
	ret = madvise(buf + 5 * PAGE, 2 * PAGE, MADV_DONTNEED);
	EXPECT_TRUE(ret == 0 || errno == EPERM);
	EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, h, buf, len, &err));
	ret = madvise(buf + 2 * PAGE, 2 * PAGE, MADV_DONTNEED);
	EXPECT_TRUE(ret == 0 || errno == EPERM);
	touch_pages(buf + 2 * PAGE, 2);
	pattern_fill(buf + 2 * PAGE, 2 * PAGE, 0x83, 0);
	usleep(50000);
	EXPECT_EQ(PATTERN_OK, region_check(fd, h, buf + 2 * PAGE, 2 * PAGE, 0x83, 0, &err));
	EXPECT_EQ(PATTERN_OK, region_check(fd, h2, buf + 2 * PAGE, PAGE, 0x83, 0, &err));
	EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, h, buf, len, &err));
	EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, h2, buf + PAGE, 2 * PAGE, &err));

	EXPECT_EQ(0, vamr_unregister(fd, h2));
	EXPECT_EQ(0, vamr_unregister(fd, h));
	EXPECT_EQ(pin0, vamr_vmpin_kb());
	EXPECT_GCOUNTERS_BACK(fd, &c0);
	free(tmp);
	close(fd);
}

/* ---------------------------------------------------------------------- */
/* 4. io_uring fixed buffers                                              */
/* ---------------------------------------------------------------------- */

struct uring {
	int fd;
	unsigned int *sq_tail, *sq_mask, *sq_array, *cq_head, *cq_tail, *cq_mask;
	struct io_uring_sqe *sqes;
	struct io_uring_cqe *cqes;
};

static int uring_open(struct uring *u)
{
	struct io_uring_params p;
	uint8_t *sq, *cq;

	memset(&p, 0, sizeof(p));
	u->fd = syscall(__NR_io_uring_setup, 4, &p);
	if (u->fd < 0)
		return -errno;
	sq = mmap(NULL, p.sq_off.array + p.sq_entries * sizeof(unsigned int),
		  PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, u->fd, IORING_OFF_SQ_RING);
	cq = mmap(NULL, p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe),
		  PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, u->fd, IORING_OFF_CQ_RING);
	u->sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_POPULATE, u->fd, IORING_OFF_SQES);
	if (sq == MAP_FAILED || cq == MAP_FAILED || u->sqes == MAP_FAILED)
		return -ENOMEM;
	u->sq_tail = (unsigned int *)(sq + p.sq_off.tail);
	u->sq_mask = (unsigned int *)(sq + p.sq_off.ring_mask);
	u->sq_array = (unsigned int *)(sq + p.sq_off.array);
	u->cq_head = (unsigned int *)(cq + p.cq_off.head);
	u->cq_tail = (unsigned int *)(cq + p.cq_off.tail);
	u->cq_mask = (unsigned int *)(cq + p.cq_off.ring_mask);
	u->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
	return 0;
}

/*
 * Gives up CAP_IPC_LOCK (after raising RLIMIT_MEMLOCK to 64 MiB), so that
 * io_uring charges its pins as it does for an ordinary user: to the mm's
 * pinned_vm (and the user's locked_vm). 0 or -errno.
 */
static int drop_cap_ipc_lock(void)
{
	struct __user_cap_header_struct hd = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2];
	struct rlimit rl = { 64ul << 20, 64ul << 20 };

	if (setrlimit(RLIMIT_MEMLOCK, &rl) || syscall(SYS_capget, &hd, d))
		return -errno;
	d[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
	d[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
	return syscall(SYS_capset, &hd, d) ? -errno : 0;
}

/* One fixed-buffer read or write (op) of len bytes at addr, buffer 0, file offset 0. */
static int uring_fixed(struct uring *u, int op, int fd, void *addr, unsigned int len)
{
	unsigned int tail = *u->sq_tail, head;
	struct io_uring_sqe *sqe = &u->sqes[tail & *u->sq_mask];
	int res;

	memset(sqe, 0, sizeof(*sqe));
	sqe->opcode = op;
	sqe->fd = fd;
	sqe->addr = (uintptr_t)addr;
	sqe->len = len;
	sqe->off = 0;
	sqe->buf_index = 0;
	u->sq_array[tail & *u->sq_mask] = tail & *u->sq_mask;
	__atomic_store_n(u->sq_tail, tail + 1, __ATOMIC_RELEASE);
	if (syscall(__NR_io_uring_enter, u->fd, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0)
		return -errno;
	head = *u->cq_head;
	if (head == __atomic_load_n(u->cq_tail, __ATOMIC_ACQUIRE))
		return -EAGAIN;
	res = u->cqes[head & *u->cq_mask].res;
	__atomic_store_n(u->cq_head, head + 1, __ATOMIC_RELEASE);
	return res;
}

/*
 * io_uring fixed buffers (IORING_REGISTER_BUFFERS, a long-term pin of their
 * own, charged to pinned_vm too for a user without CAP_IPC_LOCK, which the
 * test drops) over the range of a region, then munmap +
 * mmap of part of it: io_uring keeps its old pages (a WRITE_FIXED sends the
 * old bytes), the region follows the new ones (the CPU's bytes), a
 * READ_FIXED lands in the old pages, not in what the CPU or the region see;
 * VmPin is both charges, then comes back as each pinner lets go.
 */
TEST(io_uring_fixed_buffers)
{
	const size_t len = 16 * PAGE;
	uint8_t *buf = map_anon(len), *tmp = malloc(len);
	struct vamr_counters c0, c;
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct uring u;
	int fd, mfd, err, ret;
	uint32_t h;
	long pin0, pin1;

	ASSERT_NE(NULL, buf);
	fd = vamr_open();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, gcounters(fd, &c0));
	pin0 = vamr_vmpin_kb();
	pattern_fill(buf, len, 0x91, 0);
	ASSERT_EQ(0, drop_cap_ipc_lock());
	ret = uring_open(&u);
	if (ret == -ENOSYS || ret == -EPERM)
		SKIP(return, "io_uring disabled (%d)", ret);
	ASSERT_EQ(0, ret);
	ASSERT_EQ(0, vamr_register(fd, buf, len / 2, RW, 1, &h));
	ASSERT_EQ(0, syscall(__NR_io_uring_register, u.fd, IORING_REGISTER_BUFFERS, &iov, 1));
	pin1 = vamr_vmpin_kb();
	/* io_uring charges its 16 pages as well (the region 8). */
	EXPECT_EQ(pin0 + (long)(len / 1024 + len / 2 / 1024), pin1);
	ASSERT_EQ(0, vamr_unregister(fd, h));
	/* Now the whole range, registered over io_uring's pins. */
	ASSERT_EQ(0, vamr_register(fd, buf, len, RW, 1, &h));
	EXPECT_EQ(pin1 + (long)(len / 2 / 1024), vamr_vmpin_kb());
	ASSERT_EQ(0, gcounters(fd, &c));
	EXPECT_EQ(c0.pages_pinned + len / PAGE, c.pages_pinned);
	EXPECT_EQ(PATTERN_OK, region_check(fd, h, buf, len, 0x91, 0, &err));

	/* munmap + mmap of pages 4..11, other bytes. */
	ASSERT_EQ(0, munmap(buf + 4 * PAGE, 8 * PAGE));
	ASSERT_EQ(0, remap_fixed(buf + 4 * PAGE, 8 * PAGE));
	pattern_fill(buf + 4 * PAGE, 8 * PAGE, 0x92, 4 * PAGE);
	/* The region: the new pages. */
	EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, h, buf, len, &err));
	EXPECT_EQ(PATTERN_OK, region_check(fd, h, buf + 4 * PAGE, 8 * PAGE, 0x92, 4 * PAGE, &err));
	/* io_uring: its old pages, whole. */
	mfd = memfd_create("vamr_hostile_uring", MFD_CLOEXEC);
	ASSERT_LE(0, mfd);
	ASSERT_EQ((int)len, uring_fixed(&u, IORING_OP_WRITE_FIXED, mfd, buf, len));
	ASSERT_EQ((ssize_t)len, pread(mfd, tmp, len, 0));
	EXPECT_EQ(PATTERN_OK, pattern_check(tmp, len, 0x91, 0));
	/* A READ_FIXED lands in io_uring's old pages: neither the CPU nor the region see it. */
	pattern_fill(tmp, len, 0x93, 0);
	ASSERT_EQ((ssize_t)len, pwrite(mfd, tmp, len, 0));
	ASSERT_EQ((int)len, uring_fixed(&u, IORING_OP_READ_FIXED, mfd, buf, len));
	EXPECT_EQ(PATTERN_OK, pattern_check(buf + 4 * PAGE, 8 * PAGE, 0x92, 4 * PAGE));
	EXPECT_EQ(PATTERN_OK, region_check(fd, h, buf + 4 * PAGE, 8 * PAGE, 0x92, 4 * PAGE, &err));
	/* Outside the remap both share the pages: the READ_FIXED's bytes, for both. */
	EXPECT_EQ(PATTERN_OK, pattern_check(buf, 4 * PAGE, 0x93, 0));
	EXPECT_EQ(PATTERN_OK, region_check(fd, h, buf, 4 * PAGE, 0x93, 0, &err));
	EXPECT_EQ(PATTERN_OK, region_matches_cpu(fd, h, buf, len, &err));

	/* Each lets go: VmPin back step by step (io_uring's charge is pin1 less the 8 pages). */
	EXPECT_EQ(0, vamr_unregister(fd, h));
	EXPECT_EQ(pin1 - (long)(len / 2 / 1024), vamr_vmpin_kb());
	ASSERT_EQ(0, syscall(__NR_io_uring_register, u.fd, IORING_UNREGISTER_BUFFERS, NULL, 0));
	EXPECT_EQ(pin0, vamr_vmpin_kb());
	EXPECT_GCOUNTERS_BACK(fd, &c0);
	close(u.fd);
	close(mfd);
	free(tmp);
	close(fd);
}

TEST_HARNESS_MAIN
