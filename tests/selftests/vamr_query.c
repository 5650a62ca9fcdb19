// SPDX-License-Identifier: GPL-2.0
/*
 * /dev/vamr basics: the QUERY ioctl and bad ioctl input.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kselftest_harness.h"
#include "../../include/uapi/misc/vamr.h"

FIXTURE(vamr_dev)
{
	int fd;
};

FIXTURE_SETUP(vamr_dev)
{
	self->fd = open("/dev/vamr", O_RDWR | O_CLOEXEC);
	if (self->fd < 0 && errno == ENOENT)
		SKIP(return, "/dev/vamr not present (vamr.ko not loaded)");
	ASSERT_LE(0, self->fd);
}

FIXTURE_TEARDOWN(vamr_dev)
{
	if (self->fd >= 0)
		close(self->fd);
}

/* QUERY reports this header's ABI version, PAGE_SIZE and only known features. */
TEST_F(vamr_dev, query_reports_abi_and_page_size)
{
	struct vamr_query q;

	memset(&q, 0xa5, sizeof(q));
	q.flags = 0;
	q.reserved = 0;
	ASSERT_EQ(0, ioctl(self->fd, VAMR_IOC_QUERY, &q));
	EXPECT_EQ((__u32)VAMR_ABI_VERSION, q.abi_version);
	EXPECT_EQ((__u32)sysconf(_SC_PAGESIZE), q.page_size);
	EXPECT_EQ(0ull, q.features & ~VAMR_FEATURES_KNOWN);
	EXPECT_EQ(0u, q.flags);
	EXPECT_EQ(0u, q.reserved);
}

/* Nonzero flags or reserved fields are refused, and nothing is written back. */
TEST_F(vamr_dev, query_rejects_flags_and_reserved)
{
	struct vamr_query q = { .flags = 1 };

	EXPECT_EQ(-1, ioctl(self->fd, VAMR_IOC_QUERY, &q));
	EXPECT_EQ(EINVAL, errno);
	EXPECT_EQ(0u, q.abi_version);

	memset(&q, 0, sizeof(q));
	q.reserved = 0x80000000u;
	EXPECT_EQ(-1, ioctl(self->fd, VAMR_IOC_QUERY, &q));
	EXPECT_EQ(EINVAL, errno);
	EXPECT_EQ(0u, q.abi_version);
}

/* A pointer to nothing, to a read-only page, or into the kernel: EFAULT. */
TEST_F(vamr_dev, query_bad_pointer_is_efault)
{
	long page = sysconf(_SC_PAGESIZE);
	void *ro;

	EXPECT_EQ(-1, ioctl(self->fd, VAMR_IOC_QUERY, NULL));
	EXPECT_EQ(EFAULT, errno);

	EXPECT_EQ(-1, ioctl(self->fd, VAMR_IOC_QUERY, (void *)0xffffffff81000000ul));
	EXPECT_EQ(EFAULT, errno);

	/* Readable (the request is valid) but not writable (the reply is not). */
	ro = mmap(NULL, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, ro);
	EXPECT_EQ(-1, ioctl(self->fd, VAMR_IOC_QUERY, ro));
	EXPECT_EQ(EFAULT, errno);
	munmap(ro, page);

	/* The structure ends beyond the last mapped byte. */
	char *two = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, two);
	ASSERT_EQ(0, munmap(two + page, page));
	EXPECT_EQ(-1, ioctl(self->fd, VAMR_IOC_QUERY, two + page - 8));
	EXPECT_EQ(EFAULT, errno);
	munmap(two, page);
}

/* Commands the device does not know: ENOTTY, also for a wrong size encoding. */
TEST_F(vamr_dev, unknown_ioctl_is_enotty)
{
	struct vamr_query q = { 0 };

	EXPECT_EQ(-1, ioctl(self->fd, _IOWR(VAMR_IOCTL_TYPE, 0x7f, struct vamr_query), &q));
	EXPECT_EQ(ENOTTY, errno);
	EXPECT_EQ(-1, ioctl(self->fd, _IOWR(VAMR_IOCTL_TYPE, 0x00, __u64), &q));
	EXPECT_EQ(ENOTTY, errno);
	EXPECT_EQ(-1, ioctl(self->fd, _IO('T', 0x01), 0));
	EXPECT_EQ(ENOTTY, errno);
}

/* Each open file is independent, and many can be open at once. */
TEST_F(vamr_dev, many_opens)
{
	int fds[64];
	unsigned int i;

	for (i = 0; i < 64; i++) {
		struct vamr_query q = { 0 };

		fds[i] = open("/dev/vamr", O_RDWR | O_CLOEXEC);
		ASSERT_LE(0, fds[i]);
		ASSERT_EQ(0, ioctl(fds[i], VAMR_IOC_QUERY, &q));
		ASSERT_EQ((__u32)VAMR_ABI_VERSION, q.abi_version);
	}
	for (i = 0; i < 64; i++)
		ASSERT_EQ(0, close(fds[i]));
}

TEST_HARNESS_MAIN
