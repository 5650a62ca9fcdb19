/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * vamr: RDMA memory regions with virtual-address semantics.
 *
 * User-space ABI of the /dev/vamr misc device.
 *
 * Every ioctl argument is a fixed-size structure; reserved fields and
 * unknown flag bits must be zero on input, otherwise the ioctl fails with
 * EINVAL. Sizes and offsets are the same on 32- and 64-bit user space.
 *
 * Everything a file holds (the file, its regions, watches and event ring)
 * counts against limits per process and per user (the uid that opened the
 * file), module parameters under /sys/module/vamr/parameters/ (see
 * Documentation/vamr.rst, "Security"); past one, the call that would create
 * more fails with ENOSPC: open() past max_files_per_mm (default 256) or
 * max_files_per_user (1024), or when its ring of VAMR_EVENTS_RING_DEFAULT
 * records would pass max_event_records_per_mm (262144) or
 * max_event_records_per_user (1048576).
 */
#ifndef _UAPI_MISC_VAMR_H
#define _UAPI_MISC_VAMR_H

#include <linux/ioctl.h>
#include <linux/types.h>

/* ABI version reported by VAMR_IOC_QUERY; bumped on incompatible change. */
#define VAMR_ABI_VERSION 4

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

/* REGISTER, UNREGISTER, ACCESS and STATS: regions with VA semantics. */
#define VAMR_FEATURE_REGIONS (1ULL << 0)
/* VAMR_IOC_ATOMIC: 8-byte atomics on a region. */
#define VAMR_FEATURE_ATOMICS (1ULL << 1)
/* VAMR_IOC_PREFETCH. */
#define VAMR_FEATURE_PREFETCH (1ULL << 2)

/* VAMR_IOC_EVENTS_OPEN: a read()/poll() channel of invalidation records. */
#define VAMR_FEATURE_EVENTS (1ULL << 3)

/* VAMR_IOC_MR_QUERY: find a driver's VA-semantics MR by key. */
#define VAMR_FEATURE_MR_QUERY (1ULL << 4)
/* VAMR_IOC_DEVICE: the RDMA devices that offer VA MRs, before registering. */
#define VAMR_FEATURE_DEVICES (1ULL << 5)
/*
 * Monitor mode: VAMR_IOC_WATCH, VAMR_IOC_UNWATCH, VAMR_IOC_WATCH_SYNC and the
 * read-only generation counters mapped with mmap() on the /dev/vamr file.
 */
#define VAMR_FEATURE_WATCH (1ULL << 6)
/* VAMR_IOC_EVENTS_OPEN_EX: events with a configurable ring size. */
#define VAMR_FEATURE_EVENTS_RING (1ULL << 7)

/* Mask of every feature bit this header defines. */
#define VAMR_FEATURES_KNOWN \
	(VAMR_FEATURE_REGIONS | VAMR_FEATURE_ATOMICS | VAMR_FEATURE_PREFETCH | \
	 VAMR_FEATURE_EVENTS | VAMR_FEATURE_MR_QUERY | VAMR_FEATURE_DEVICES | \
	 VAMR_FEATURE_WATCH | VAMR_FEATURE_EVENTS_RING)

/*
 * MR access flag of the uverbs extension: ask ibv_reg_mr() for an MR with
 * virtual-address semantics. It lies in the uverbs optional access range
 * (IB_UVERBS_ACCESS_OPTIONAL_FIRST..LAST): libibverbs passes it through, the
 * core accepts it, and a driver that does not know it ignores it and makes a
 * normal MR. Before registering, VAMR_IOC_DEVICE (or the device's sysfs
 * attribute /sys/class/infiniband/<dev>/vamr_access, which rdma_rxe patched
 * for vamr provides) tells whether a device honours it; after, use
 * VAMR_IOC_MR_QUERY to learn which kind of MR you got.
 */
#define VAMR_ACCESS_VA (1u << 29)

/* Access bits of a region (struct vamr_register.access). */
#define VAMR_ACCESS_READ (1u << 0)  /* the region may be read (always implied) */
#define VAMR_ACCESS_WRITE (1u << 1) /* the region may be written: pins with FOLL_WRITE */
#define VAMR_ACCESS_KNOWN (VAMR_ACCESS_READ | VAMR_ACCESS_WRITE)

/**
 * struct vamr_register - argument of VAMR_IOC_REGISTER
 * @addr: in: first byte of the range, any alignment.
 * @len: in: length in bytes, > 0; addr + len must not overflow nor pass TASK_SIZE.
 * @cookie: in: opaque value of the caller, reported in invalidation events.
 * @access: in: VAMR_ACCESS_* bits.
 * @flags: in: must be 0.
 * @handle: out: the region's handle, valid for this open file only.
 * @reserved: in: must be 0.
 *
 * Pins what is mapped in the range now (holes stay absent) and follows the
 * mapping from then on. The covering pages are charged to the caller's
 * locked memory (RLIMIT_MEMLOCK, as ibv_reg_mr does) until UNREGISTER or close.
 * Pages whose pin fails (holes, a protection that forbids the access, a lost
 * race with an invalidation) stay absent and are pinned on demand.
 * Errors: EINVAL (len 0, overflow, unknown access bits or flags, reserved),
 * EFAULT (range beyond TASK_SIZE, or bad argument pointer), ENOMEM
 * (RLIMIT_MEMLOCK exceeded without CAP_IPC_LOCK, or no memory), EPERM
 * (caller's mm is not the opener's), EINTR (fatal signal while pinning),
 * ENOSPC (65536 regions on this file, or the process has max_regions_per_mm
 * regions, default 8192, or the opener's uid max_regions_per_user, default
 * 65536: module parameters), EHWPOISON and other pin errors.
 */
struct vamr_register {
	__u64 addr;
	__u64 len;
	__u64 cookie;
	__u32 access;
	__u32 flags;
	__u32 handle;
	__u32 reserved;
};

/**
 * struct vamr_handle_arg - argument of VAMR_IOC_UNREGISTER
 * @handle: in: a handle returned by VAMR_IOC_REGISTER on this open file.
 * @flags: in: must be 0.
 * Errors: ENOENT (no such region on this file), EINVAL (flags), EPERM (caller's
 * mm is not the opener's; closing the file always releases everything).
 */
struct vamr_handle_arg {
	__u32 handle;
	__u32 flags;
};

#define VAMR_ACCESS_OP_READ 0  /* copy from the region into buf */
#define VAMR_ACCESS_OP_WRITE 1 /* copy from buf into the region */

/**
 * struct vamr_access - argument of VAMR_IOC_ACCESS
 * @addr: in: first byte to access, inside the registered range.
 * @len: in: bytes, > 0; [addr, addr + len) inside the registered range.
 * @buf: in: user buffer of len bytes: destination (READ) or source (WRITE).
 * @handle: in: the region.
 * @op: in: VAMR_ACCESS_OP_*.
 *
 * Copies through the region's current pins, the path a device takes,
 * pinning absent pages on demand.
 * Errors: ENOENT (handle), EINVAL (op, range), EACCES (WRITE on a region
 * without VAMR_ACCESS_WRITE), EFAULT (nothing mapped at a page of the range,
 * or its protection forbids the access, or buf is bad), EPERM (other mm),
 * EAGAIN (invalidations of a page kept racing with the access: retry),
 * ECANCELED (the region was unregistered while the copy ran), ENOMEM, EINTR.
 * On error part of the range may have been copied.
 */
struct vamr_access {
	__u64 addr;
	__u64 len;
	__u64 buf;
	__u32 handle;
	__u32 op;
};

#define VAMR_ATOMIC_CMP_SWAP 0  /* if (*addr == compare) *addr = swap */
#define VAMR_ATOMIC_FETCH_ADD 1 /* *addr += compare */
#define VAMR_ATOMIC_WRITE 2     /* *addr = swap */

/**
 * struct vamr_atomic - argument of VAMR_IOC_ATOMIC
 * @addr: in: 8-byte aligned address inside the registered range.
 * @compare: in: compare value (CMP_SWAP) or addend (FETCH_ADD).
 * @swap: in: value stored (CMP_SWAP, WRITE).
 * @result: out: the value found before the operation.
 * @handle: in: the region.
 * @op: in: VAMR_ATOMIC_*.
 * Errors: as VAMR_IOC_ACCESS; EINVAL also for a misaligned addr.
 */
struct vamr_atomic {
	__u64 addr;
	__u64 compare;
	__u64 swap;
	__u64 result;
	__u32 handle;
	__u32 op;
};

/**
 * struct vamr_prefetch - argument of VAMR_IOC_PREFETCH
 * @addr: in: first byte, inside the registered range.
 * @len: in: bytes, > 0.
 * @handle: in: the region.
 * @flags: in: VAMR_PREFETCH_* bits, the advice of ibv_advise_mr():
 *         0 pins for reading (IBV_ADVISE_MR_ADVICE_PREFETCH), faulting
 *         pages in; VAMR_PREFETCH_WRITE pins for writing, breaking COW
 *         (..._PREFETCH_WRITE; EACCES on a read-only region);
 *         VAMR_PREFETCH_NO_FAULT pins only pages present in the page table,
 *         for reading, and never faults (..._PREFETCH_NO_FAULT).
 * @pages: out: pages newly pinned.
 * @reserved: in: must be 0.
 * Errors: as VAMR_IOC_ACCESS; EINVAL for unknown flags or both flags;
 * EFAULT (without NO_FAULT) only when no page of the range is pinned
 * afterwards; ECANCELED when the region is being unregistered; EINTR on a
 * fatal signal. Pages of a VMA whose protection forbids the access are
 * skipped a VMA at a time.
 */
#define VAMR_PREFETCH_WRITE (1U << 0)
#define VAMR_PREFETCH_NO_FAULT (1U << 1)
#define VAMR_PREFETCH_KNOWN (VAMR_PREFETCH_WRITE | VAMR_PREFETCH_NO_FAULT)

struct vamr_prefetch {
	__u64 addr;
	__u64 len;
	__u32 handle;
	__u32 flags;
	__u32 pages;
	__u32 reserved;
};

/* Invalidation kinds, the index into struct vamr_counters.invalidations. */
enum vamr_event_kind {
	VAMR_EVENT_UNMAP = 0,      /* munmap */
	VAMR_EVENT_CLEAR,          /* MADV_DONTNEED, truncate, hole punch, mremap source,
				    * page-table splits, compaction and NUMA migration,
				    * THP collapse, KSM, COW */
	VAMR_EVENT_PROTECTION_VMA, /* mprotect */
	VAMR_EVENT_PROTECTION_PAGE,/* write protection: fork, KSM */
	VAMR_EVENT_SOFT_DIRTY,
	VAMR_EVENT_RELEASE,        /* process exit */
	VAMR_EVENT_MIGRATE,        /* migration to and from device memory */
	VAMR_EVENT_EXCLUSIVE,      /* device-exclusive access, and any other */
	VAMR_EVENT_COUNT,
};

/**
 * struct vamr_counters - statistics of one region, or of all of them
 * @pages_pinned: pages pinned now.
 * @regions: live regions (1 for a region).
 * @invalidations: invalidations by enum vamr_event_kind.
 * @invalidations_refused: non-blockable invalidations refused (lock busy).
 * @pages_unpinned: pins released because the page left the VA: munmap, or
 *                  the verify pass found another page or none mapped there.
 * @pins_swapped: pins the verify pass took for another page present at the
 *                VA after an invalidation (never faulting it in).
 * @ondemand_repins: pages pinned on demand by an access or a prefetch.
 * @repin_retries: pin or verify rounds thrown away because an invalidation
 *                 raced.
 * @access_faults: accesses that found nothing mapped (EFAULT).
 * @bytes_read: bytes copied out of regions.
 * @bytes_written: bytes copied into regions, atomics included.
 * @pins_kept: pins the verify pass kept after an invalidation because the
 *             same page was still mapped at the VA (a page-table split,
 *             write protection, a failed migration...).
 * @fault_requests: faults that an access which must not wait on a userfault
 *                  itself (a device task) had delivered from a work item.
 */
struct vamr_counters {
	__u64 pages_pinned;
	__u64 regions;
	__u64 invalidations[VAMR_EVENT_COUNT];
	__u64 invalidations_refused;
	__u64 pages_unpinned;
	__u64 pins_swapped;
	__u64 ondemand_repins;
	__u64 repin_retries;
	__u64 access_faults;
	__u64 bytes_read;
	__u64 bytes_written;
	__u64 pins_kept;
	__u64 fault_requests;
};

/* struct vamr_event.kind of the record that reports lost records. */
#define VAMR_EVENT_OVERFLOW 0xffffu
/*
 * struct vamr_event.kind of a monitor-mode record (a watch, not a region):
 * VAMR_EVENT_WATCH | enum vamr_event_kind (VAMR_EVENT_UNMAP, VAMR_EVENT_CLEAR,
 * VAMR_EVENT_RELEASE or VAMR_EVENT_MIGRATE; see VAMR_IOC_WATCH).
 */
#define VAMR_EVENT_WATCH 0x10000u

/**
 * struct vamr_event - one record read from an events file
 * @addr: first byte of the region (or watch) that was invalidated (inside
 *        the registered range).
 * @len: bytes invalidated from addr; for VAMR_EVENT_OVERFLOW, the number of
 *       records lost because the queue was full (drop every cached entry, or
 *       with watches recheck every generation counter: they stay exact).
 * @cookie: the cookie given to VAMR_IOC_REGISTER or VAMR_IOC_WATCH (0 for
 *          OVERFLOW).
 * @generation: the file's record counter: 1 for the first record, +1 for
 *              every record, delivered or lost.
 * @handle: the region, or the watch's slot for VAMR_EVENT_WATCH records
 *          (0 for OVERFLOW).
 * @kind: enum vamr_event_kind; VAMR_EVENT_WATCH | enum vamr_event_kind for
 *        a watch; or VAMR_EVENT_OVERFLOW.
 *
 * One record is queued for every invalidation that overlaps a region of the
 * /dev/vamr file, whatever the region's pins, so that a user-space
 * registration cache stays coherent for MRs on any device.
 */
struct vamr_event {
	__u64 addr;
	__u64 len;
	__u64 cookie;
	__u64 generation;
	__u32 handle;
	__u32 kind;
};

#define VAMR_EVENTS_NONBLOCK (1u << 0) /* the events file is O_NONBLOCK */
#define VAMR_EVENTS_CLOEXEC (1u << 1)  /* the events file descriptor is O_CLOEXEC */

/**
 * struct vamr_events_open - argument of VAMR_IOC_EVENTS_OPEN
 * @flags: in: VAMR_EVENTS_*.
 * @fd: out: a new file descriptor; read() returns whole struct vamr_event
 *      records, at most len / sizeof(struct vamr_event) (EINVAL for a
 *      buffer smaller than one), blocking unless O_NONBLOCK (EAGAIN). A
 *      record leaves the queue only once it is copied: a fault part-way
 *      returns the bytes of the records copied (EFAULT if none) and the rest
 *      stay queued. Once the /dev/vamr file is released or its process has
 *      exited, read() returns 0 when nothing is queued. poll() reports
 *      EPOLLIN while records are queued, EPOLLHUP from then on.
 *      Every events file of one /dev/vamr file reads the same queue.
 * Errors: EINVAL (flags), EPERM (another address space), EMFILE, ENOMEM.
 */
struct vamr_events_open {
	__u32 flags;
	__s32 fd;
};

/* Records of an events ring: default and largest size. */
#define VAMR_EVENTS_RING_DEFAULT 512
#define VAMR_EVENTS_RING_MAX 65536

/**
 * struct vamr_events_open_ex - argument of VAMR_IOC_EVENTS_OPEN_EX
 * @flags: in: VAMR_EVENTS_*.
 * @fd: out: a new events file descriptor, as for VAMR_IOC_EVENTS_OPEN.
 * @ring: in: 0 to keep the ring as it is, or its new size in records,
 *        1..VAMR_EVENTS_RING_MAX; out: the ring's size now.
 * @reserved: in: must be 0.
 *
 * VAMR_IOC_EVENTS_OPEN with a ring size. The ring belongs to the /dev/vamr
 * file (every events file of it reads the same ring; it starts with
 * VAMR_EVENTS_RING_DEFAULT records). Resizing keeps the queued records, the
 * oldest first; those that do not fit count as lost (one VAMR_EVENT_OVERFLOW
 * record reports them). The ring's memory is charged to the caller's memory
 * cgroup.
 * Errors: EINVAL (flags, reserved, @ring above VAMR_EVENTS_RING_MAX), EPERM
 * (another address space), ENOSPC (the new size would pass
 * max_event_records_per_mm or max_event_records_per_user: the ring stays as
 * it was), EMFILE, ENOMEM.
 */
struct vamr_events_open_ex {
	__u32 flags;
	__s32 fd;
	__u32 ring;
	__u32 reserved;
};

/* Most watches on one /dev/vamr file; slots are 0..VAMR_WATCH_MAX-1. */
#define VAMR_WATCH_MAX 4096
/*
 * Bytes of the generation counters: one __u64 per slot, at byte offset
 * slot * 8 of the mapping that mmap(NULL, VAMR_WATCH_MAP_LEN, PROT_READ,
 * MAP_SHARED, fd, 0) of the /dev/vamr file returns. The mapping is
 * read-only and not executable: PROT_WRITE or PROT_EXEC fails with EACCES,
 * and mprotect() cannot add them.
 * Errors of mmap(): EACCES (writable or executable), EINVAL (offset or length past
 * VAMR_WATCH_MAP_LEN rounded up to the page size), EPERM (another address
 * space), ENOMEM.
 */
#define VAMR_WATCH_MAP_LEN (VAMR_WATCH_MAX * 8)

/**
 * struct vamr_watch - argument of VAMR_IOC_WATCH
 * @addr: in: first byte of the range to watch, any alignment.
 * @len: in: bytes, > 0; addr + len must not overflow nor pass TASK_SIZE.
 * @cookie: in: opaque value of the caller, reported in the watch's events.
 * @flags: in: must be 0.
 * @slot: out: the watch's slot: its generation counter is the slot-th __u64
 *        of the counter mapping, and UNWATCH and WATCH_SYNC take it.
 * @generation: out: the counter's value once every invalidation of the
 *              range that had begun is complete (as VAMR_IOC_WATCH_SYNC).
 *
 * Monitor mode: watches [addr, addr + len) of the caller's address space
 * without pinning anything and without a locked-memory charge (works with
 * RLIMIT_MEMLOCK 0). Whenever the mapping under the range changes, before
 * the page tables change, the watch's generation counter grows and one
 * VAMR_EVENT_WATCH record is queued on the file's events ring. "The mapping
 * changes" means an invalidation of kind VAMR_EVENT_UNMAP (munmap, mremap,
 * mmap MAP_FIXED over it), VAMR_EVENT_CLEAR (MADV_DONTNEED, hole punch,
 * truncate, COW, swap-out, migration, THP collapse, KSM merge),
 * VAMR_EVENT_MIGRATE (device memory) or VAMR_EVENT_RELEASE (exit): the
 * events after which the page at an address may be another one. Protection
 * changes (mprotect, fork's write protection, soft-dirty, device-exclusive)
 * keep the page and are not reported. Faulting memory in is no change.
 * Counters never decrease and survive UNWATCH (which bumps the counter once
 * more), so a slot reused by a later watch never shows a value a cache saw
 * for an earlier one.
 * Errors: EINVAL (len 0, overflow, flags), EFAULT (range beyond TASK_SIZE or
 * bad argument pointer), ENOSPC (VAMR_WATCH_MAX watches on this file, or
 * the process has max_watches_per_mm, default 4096, or the opener's uid
 * max_watches_per_user, default 65536: module parameters), EPERM
 * (caller's mm is not the opener's), ENOMEM, EINTR (fatal signal).
 */
struct vamr_watch {
	__u64 addr;
	__u64 len;
	__u64 cookie;
	__u32 flags;
	__u32 slot;
	__u64 generation;
};

/**
 * struct vamr_watch_sync - argument of VAMR_IOC_WATCH_SYNC
 * @slot: in: a slot returned by VAMR_IOC_WATCH on this file.
 * @flags: in: must be 0.
 * @generation: out: the watch's counter once every invalidation of its
 *              range that had begun is complete.
 *
 * Read the counter this way, not from the mapping, before (re)registering
 * an MR over the range: an invalidation that has bumped the counter may
 * still be changing the page tables, and an MR registered meanwhile could
 * pin the old pages under the new value.
 * Errors: ENOENT (no such watch), EINVAL (flags), EPERM (other mm), EINTR.
 */
struct vamr_watch_sync {
	__u32 slot;
	__u32 flags;
	__u64 generation;
};

/**
 * struct vamr_mr_query - argument of VAMR_IOC_MR_QUERY
 * @key: in: the lkey of an MR of the calling process.
 * @flags: in: must be 0.
 * @ib_index: in: the RDMA device's index (struct vamr_device_info.ib_index;
 *            ibv_query_device_ex() does not give it: read
 *            /sys/class/infiniband/<dev>/... or list devices with
 *            VAMR_IOC_DEVICE, which gives name and index together).
 * @reserved: in: must be 0.
 * @addr: out: first byte of the MR's VA range.
 * @len: out: bytes.
 * @counters: out: the region's counters.
 *
 * Finds the MR with VA semantics that device @ib_index registered through
 * vamr under @key (rdma_rxe: the lkey) in the caller's address space. Any
 * /dev/vamr file can ask; an MR of another process, a key of another device,
 * a normal MR (a driver that ignored VAMR_ACCESS_VA), a deregistered MR, an
 * MR whose index now has another key byte, a device removed and a missing key
 * all get the same answer. The device's driver finds the MR in its own MR
 * table (rdma_rxe: its MR pool, O(1) in the number of MRs).
 * Errors: ENOENT (as just said), EINVAL (flags or reserved).
 */
struct vamr_mr_query {
	__u32 key;
	__u32 flags;
	__u32 ib_index;
	__u32 reserved;
	__u64 addr;
	__u64 len;
	struct vamr_counters counters;
};

/* Length of struct vamr_device_info.name, NUL included (IB_DEVICE_NAME_MAX). */
#define VAMR_DEVICE_NAME_MAX 64

/**
 * struct vamr_device_info - argument of VAMR_IOC_DEVICE
 * @pos: in: 0, 1, 2, ...: which device to describe, in the order the drivers
 *       announced them.
 * @flags: in: must be 0.
 * @ib_index: out: the RDMA device's index (struct ib_device.index, as
 *            `rdma dev` prints it before the name).
 * @reserved: out: 0.
 * @access_va: out: the ibv_reg_mr() access flag that asks this device for an
 *             MR with VA semantics (VAMR_ACCESS_VA for rdma_rxe).
 * @name: out: the device's name when the driver announced it, NUL-terminated
 *        (a later rename is not seen; @ib_index is the stable identifier).
 *
 * Lists the RDMA devices whose driver offers VA MRs through vamr, so that a
 * program can check before it registers. Readable by anyone who can open
 * /dev/vamr. Errors: ENOENT (@pos past the last device), EINVAL (flags).
 */
struct vamr_device_info {
	__u32 pos;
	__u32 flags;
	__u32 ib_index;
	__u32 reserved;
	__u64 access_va;
	char name[VAMR_DEVICE_NAME_MAX];
};

#define VAMR_STATS_GLOBAL 0xffffffffu

/**
 * struct vamr_stats - argument of VAMR_IOC_STATS
 * @handle: in: a region, or VAMR_STATS_GLOBAL for the whole module.
 * @flags: in: must be 0.
 * @generation: out: invalidations that overlapped the region (0 for global).
 * @counters: out.
 * Errors: ENOENT (handle), EINVAL (flags), EPERM (the caller is not in the
 * address space that opened the file, as for every region ioctl).
 */
struct vamr_stats {
	__u32 handle;
	__u32 flags;
	__u64 generation;
	struct vamr_counters counters;
};

/*
 * VAMR_IOC_QUERY - report the ABI version and the features.
 * Errors: EFAULT (bad pointer), EINVAL (nonzero flags or reserved).
 */
#define VAMR_IOC_QUERY _IOWR(VAMR_IOCTL_TYPE, 0x00, struct vamr_query)
#define VAMR_IOC_REGISTER _IOWR(VAMR_IOCTL_TYPE, 0x01, struct vamr_register)
#define VAMR_IOC_UNREGISTER _IOW(VAMR_IOCTL_TYPE, 0x02, struct vamr_handle_arg)
#define VAMR_IOC_ACCESS _IOW(VAMR_IOCTL_TYPE, 0x03, struct vamr_access)
#define VAMR_IOC_ATOMIC _IOWR(VAMR_IOCTL_TYPE, 0x04, struct vamr_atomic)
#define VAMR_IOC_PREFETCH _IOWR(VAMR_IOCTL_TYPE, 0x05, struct vamr_prefetch)
#define VAMR_IOC_STATS _IOWR(VAMR_IOCTL_TYPE, 0x06, struct vamr_stats)
#define VAMR_IOC_EVENTS_OPEN _IOWR(VAMR_IOCTL_TYPE, 0x07, struct vamr_events_open)
#define VAMR_IOC_MR_QUERY _IOWR(VAMR_IOCTL_TYPE, 0x08, struct vamr_mr_query)
#define VAMR_IOC_DEVICE _IOWR(VAMR_IOCTL_TYPE, 0x09, struct vamr_device_info)
#define VAMR_IOC_EVENTS_OPEN_EX _IOWR(VAMR_IOCTL_TYPE, 0x07, struct vamr_events_open_ex)
#define VAMR_IOC_WATCH _IOWR(VAMR_IOCTL_TYPE, 0x0a, struct vamr_watch)
/* VAMR_IOC_UNWATCH: handle is the slot. Errors: ENOENT, EINVAL (flags), EPERM. */
#define VAMR_IOC_UNWATCH _IOW(VAMR_IOCTL_TYPE, 0x0b, struct vamr_handle_arg)
#define VAMR_IOC_WATCH_SYNC _IOWR(VAMR_IOCTL_TYPE, 0x0c, struct vamr_watch_sync)

#endif /* _UAPI_MISC_VAMR_H */
