/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * The ioctls of vamr_mirror_edu (tests/mirror/vamr_mirror_edu.c), shared by
 * the driver and its selftests. /dev/vamr_mirror_edu, one mirror per open
 * file; every call but INFO comes from the process that created the mirror.
 */
#ifndef _VAMR_MIRROR_EDU_H
#define _VAMR_MIRROR_EDU_H

#include <linux/ioctl.h>
#include <linux/types.h>

/* The most bytes one transfer moves: the edu device's buffer. */
#define VAMR_MIRROR_EDU_XFER_MAX 4096

/*
 * MIRROR: mirror [addr, addr + len) of the caller (page aligned) through
 * vamr_mirror_create(), VAMR_ACCESS_* in access (VAMR_ACCESS_WRITE = 2: the
 * device may write), at most 4 GiB (-EINVAL); one at a time per file (-EBUSY). POPULATE: vamr_mirror_populate()
 * of [addr, addr + len) and the device table programmed from it; result: the
 * pages populated.
 */
struct vamr_mirror_edu_range {
	__u64 addr;
	__u64 len;
	__u32 access;
	__u32 reserved;
	__s64 result;
};

/*
 * WRITE: the device writes the len bytes at buf (caller memory, read by the
 * CPU) into the mirrored VAs [addr, addr + len); READ: the device reads
 * [addr, addr + len) and the bytes land in buf. Any alignment, len 1 to
 * VAMR_MIRROR_EDU_XFER_MAX; the device translates addr through its table, an
 * entry it has not got is a device fault (vamr_mirror_fault()).
 */
struct vamr_mirror_edu_xfer {
	__u64 addr;
	__u64 len;
	__u64 buf;
};

/*
 * The driver's counts for the file, then vamr_mirror_stats() of its mirror
 * (struct vamr_mirror_counters, field by field).
 */
struct vamr_mirror_edu_stats {
	__u64 device_faults;	/* vamr_mirror_fault() calls */
	__u64 invalidations;	/* ops->invalidate() calls */
	__u64 zapped;		/* table entries zapped by them */
	__u64 dmas;		/* DMA transfers through the mirror */
	__u64 seq_retries;	/* vamr_mirror_retry() said retry */
	__u64 entries;		/* table entries valid now */
	/* struct vamr_mirror_counters */
	__u64 pages_mapped;
	__u64 populates;
	__u64 mirror_faults;
	__u64 pages_filled;
	__u64 mirror_invalidations;
	__u64 invalidations_refused;
	__u64 pages_unmapped;
	__u64 retries;
};

/* INFO: the device. */
struct vamr_mirror_edu_info {
	__u32 iommu;		/* 1: DMA goes through an IOMMU translation (not identity) */
	__u32 dma_bits;		/* the DMA mask set on the device */
	__u32 skip_zap;		/* the break check is on (module parameter skip_zap) */
	__u32 reserved;
	char name[32];		/* the PCI device, dev_name() */
};

#define VAMR_MIRROR_EDU_MAGIC 0xed
#define VAMR_MIRROR_EDU_MIRROR _IOW(VAMR_MIRROR_EDU_MAGIC, 1, struct vamr_mirror_edu_range)
#define VAMR_MIRROR_EDU_POPULATE _IOWR(VAMR_MIRROR_EDU_MAGIC, 2, struct vamr_mirror_edu_range)
#define VAMR_MIRROR_EDU_WRITE _IOW(VAMR_MIRROR_EDU_MAGIC, 3, struct vamr_mirror_edu_xfer)
#define VAMR_MIRROR_EDU_READ _IOW(VAMR_MIRROR_EDU_MAGIC, 4, struct vamr_mirror_edu_xfer)
#define VAMR_MIRROR_EDU_STATS _IOR(VAMR_MIRROR_EDU_MAGIC, 5, struct vamr_mirror_edu_stats)
#define VAMR_MIRROR_EDU_INFO _IOR(VAMR_MIRROR_EDU_MAGIC, 6, struct vamr_mirror_edu_info)
/*
 * UNMIRROR: destroy the file's mirror (vamr_mirror_cancel(), then
 * vamr_mirror_destroy() once the file's other calls returned); another
 * MIRROR may follow. -ENODEV without a mirror.
 */
#define VAMR_MIRROR_EDU_UNMIRROR _IO(VAMR_MIRROR_EDU_MAGIC, 7)

#endif
