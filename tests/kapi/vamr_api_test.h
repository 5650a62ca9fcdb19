/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/* ABI of /dev/vamr_api_test (tests/kapi/vamr_api_test.c); shared with the selftest. */
#ifndef VAMR_API_TEST_H
#define VAMR_API_TEST_H

#include <linux/ioctl.h>
#include <linux/types.h>

struct vamr_api_test_arg {
	__u64 addr;
	__u64 len;
	__u64 buf;
	__u64 compare;
	__u64 swap;
	__u64 result;
	__u32 access;
	__u32 op;
};

/*
 * The module announces itself to vamr as an RDMA device with this index (far
 * above any real one) and regions are created on it with the key given in
 * CREATE's compare field, so that VAMR_IOC_MR_QUERY finds them.
 */
#define VAMR_API_TEST_IB_INDEX 0x7ffffff0u
#define VAMR_API_TEST_ACCESS_VA (1u << 29)

#define VAMR_API_TEST_CREATE _IOW('v', 0xe0, struct vamr_api_test_arg)
#define VAMR_API_TEST_DESTROY _IO('v', 0xe1)
#define VAMR_API_TEST_READ _IOW('v', 0xe2, struct vamr_api_test_arg)
#define VAMR_API_TEST_WRITE _IOW('v', 0xe3, struct vamr_api_test_arg)
#define VAMR_API_TEST_ATOMIC _IOWR('v', 0xe4, struct vamr_api_test_arg)
#define VAMR_API_TEST_PREFETCH _IOWR('v', 0xe5, struct vamr_api_test_arg)
#define VAMR_API_TEST_STATS _IOR('v', 0xe6, struct vamr_counters)
/* vamr_region_cancel(); the region stays until DESTROY. */
#define VAMR_API_TEST_CANCEL _IO('v', 0xe7)
/*
 * vamr_device_remove() of the module's device, and vamr_device_add() again
 * (-EEXIST when announced). Regions stay; while removed, VAMR_IOC_MR_QUERY
 * does not find them and CREATE with a key fails with -ENODEV.
 */
#define VAMR_API_TEST_DEVICE_REMOVE _IO('v', 0xe8)
#define VAMR_API_TEST_DEVICE_ADD _IO('v', 0xe9)

#endif
