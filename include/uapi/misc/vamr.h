/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * vamr: RDMA memory regions with virtual-address semantics.
 *
 * User-space ABI of the /dev/vamr misc device.
 *
 * Every ioctl argument is a fixed-size structure; reserved fields and
 * unknown flag bits must be zero on input, otherwise the ioctl fails with
 * EINVAL. Sizes and offsets are the same on 32- and 64-bit user space.
 */
#ifndef _UAPI_MISC_VAMR_H
#define _UAPI_MISC_VAMR_H

#include <linux/ioctl.h>
#include <linux/types.h>

/* ABI version reported by VAMR_IOC_QUERY; bumped on incompatible change. */
#define VAMR_ABI_VERSION 1

/* ioctl type byte; unassigned in Documentation/userspace-api/ioctl/ioctl-number.rst. */
#define VAMR_IOCTL_TYPE 0xBB

/**
 * struct vamr_query - argument of VAMR_IOC_QUERY
 * @abi_version: out: VAMR_ABI_VERSION of the loaded module.
 * @flags: in: must be 0.
 * @features: out: VAMR_FEATURE_* bits the loaded module implements.
 * @page_size: out: the kernel's PAGE_SIZE in bytes, the pinning granule.
 * @reserved: in: must be 0; out: 0.
 */
struct vamr_query {
	__u32 abi_version;
	__u32 flags;
	__u64 features;
	__u32 page_size;
	__u32 reserved;
};

/*
 * Feature bits of struct vamr_query.features. A bit is set only when the
 * loaded module implements the feature; user space must check before use.
 * Bits not defined here are reserved and reported as 0.
 */

/* Mask of every feature bit this header defines. */
#define VAMR_FEATURES_KNOWN 0ULL

/*
 * VAMR_IOC_QUERY - report the ABI version and the features.
 * Errors: EFAULT (bad pointer), EINVAL (nonzero flags or reserved).
 */
#define VAMR_IOC_QUERY _IOWR(VAMR_IOCTL_TYPE, 0x00, struct vamr_query)

#endif /* _UAPI_MISC_VAMR_H */
