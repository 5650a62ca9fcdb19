/* SPDX-License-Identifier: GPL-2.0 */
/*
 * vamr in-kernel API: memory regions with virtual-address semantics, for RDMA
 * drivers (rdma_rxe is the first consumer).
 *
 * A region is a user VA range of one process whose pinned pages always are the
 * pages mapped there now: vamr watches it with an mmu_interval_notifier; an
 * invalidation stops accesses to the pages it covers, and a verify pass then
 * keeps the pins whose page is still mapped, replaces those whose page changed
 * and drops those whose page is gone (never faulting memory in); absent pages
 * are pinned by the next access that needs them. A driver copies to and from a region by user
 * VA, never by page list, so it cannot reach pages the process no longer maps.
 * See Documentation/vamr.rst. For a driver whose device DMAs through a table
 * of its own, the mirror API (vamr_mirror_*(), below) gives that table VA
 * semantics.
 *
 * All functions are exported with EXPORT_SYMBOL_GPL. Units: bytes and user
 * virtual addresses. Unless said otherwise a function may sleep (process or
 * work-item context, no spinlock held) and takes the region's internal lock,
 * which the kernel also takes under memory reclaim: do not call these with a
 * lock held that is taken around a GFP_KERNEL allocation.
 */
#ifndef _LINUX_VAMR_H
#define _LINUX_VAMR_H

#include <linux/types.h>
#include <uapi/misc/vamr.h>

struct vamr_region;
struct vamr_device;

/**
 * struct vamr_device_ops - how vamr finds the MRs of an announced device
 * @find_mr: look up the MR whose key is @key, for VAMR_IOC_MR_QUERY.
 *
 * @find_mr(@priv, @key, @visit, @arg): @priv is the value given to
 * vamr_device_add(). When the device has a live MR for @key (by the key's
 * index part, @key >> 8, or by the whole key: vamr compares the whole key
 * with the region's own and checks the calling process itself) and that MR
 * has a region, @find_mr calls @visit(region, @arg) once, *while it holds the
 * MR* so that the region is not destroyed before @visit returns, and returns
 * 0; else it returns -ENOENT without calling @visit (any nonzero return is
 * taken as -ENOENT, and a region visited then is let go). @visit takes vamr's own
 * reference to the region and does not sleep; the driver's reference may go
 * as soon as @visit returned (a query that races with vamr_region_destroy()
 * only reads the region's range and counters through its reference; it
 * reaches no page and the region's memory goes with that reference).
 *
 * Context: process context (the ioctl of any process that opened /dev/vamr),
 * with a vamr mutex of the device held, so calls for one device are
 * serialised; may sleep. It must not call vamr_device_add() or
 * vamr_device_remove(). Hand @visit only regions of this device's MRs.
 */
struct vamr_device_ops {
	int (*find_mr)(void *priv, u32 key,
		       void (*visit)(struct vamr_region *region, void *arg), void *arg);
};

/**
 * vamr_device_add - announce an RDMA device that offers MRs with VA semantics
 * @name: the device's name (struct ib_device's), NUL-terminated; at most
 *        VAMR_DEVICE_NAME_MAX - 1 bytes are kept.
 * @ib_index: struct ib_device.index, the device's stable identifier.
 * @access_va: the MR access flag (ibv_reg_mr()) that asks this device for VA
 *             semantics (rdma_rxe: VAMR_ACCESS_VA).
 * @ops: the device's MR lookup; @ops->find_mr is required. vamr keeps a copy
 *       of the function pointer, not @ops.
 * @priv: passed to @ops->find_mr; must stay valid until vamr_device_remove()
 *        returned.
 *
 * From then on VAMR_IOC_DEVICE lists the device, so that programs can check
 * before they register, and VAMR_IOC_MR_QUERY finds the device's VA MRs
 * through @ops->find_mr (vamr keeps no table of them: registering and
 * deregistering an MR costs no lookup structure). Call after
 * ib_register_device() (which sets the index). Process context; sleeps.
 *
 * Return: a handle for vamr_region_create_on() and vamr_device_remove(), or
 * ERR_PTR(-EINVAL) (NULL or empty name, @access_va 0, NULL @ops or
 * @ops->find_mr), ERR_PTR(-EEXIST) (@ib_index announced already),
 * ERR_PTR(-ENOMEM).
 */
struct vamr_device *vamr_device_add(const char *name, u32 ib_index, u64 access_va,
				    const struct vamr_device_ops *ops, void *priv);

/**
 * vamr_device_remove - take a device's announcement back
 * @dev: from vamr_device_add(); not used again by the caller. NULL and error
 *       pointers are ignored.
 *
 * The device is no longer listed, and VAMR_IOC_MR_QUERY no longer finds its
 * MRs (-ENOENT). When it returns, no call of the device's find_mr is running
 * and none will start: the driver may free what @priv points to. Its regions
 * stay valid until destroyed. Process context; sleeps (waits for a find_mr
 * call in progress).
 */
void vamr_device_remove(struct vamr_device *dev);

/**
 * vamr_region_create_on - vamr_region_create() for an MR of an announced device
 * @dev: from vamr_device_add(), not removed.
 * @addr, @len, @access: as for vamr_region_create().
 * @key: the MR's key on @dev (rdma_rxe: the lkey), an IB key: its index part
 *       (@key >> 8) is unique among the device's live MRs, the low 8 bits
 *       are the consumer's key byte; the cookie of the region is @key.
 *
 * As vamr_region_create() with @key as the cookie: the region that @dev's
 * find_mr hands to VAMR_IOC_MR_QUERY for @key. VAMR_IOC_MR_QUERY answers
 * only when the region's key equals the queried key and the region belongs
 * to the calling process.
 *
 * Return: as vamr_region_create(), and ERR_PTR(-EINVAL) for a NULL @dev.
 */
struct vamr_region *vamr_region_create_on(struct vamr_device *dev, unsigned long addr,
					  size_t len, u32 access, u32 key);

/**
 * vamr_region_create - register [addr, addr + len) of current->mm
 * @addr: first byte, any alignment.
 * @len: bytes, > 0.
 * @access: VAMR_ACCESS_* (VAMR_ACCESS_WRITE: pin for writing, FOLL_WRITE).
 * @cookie: the driver's value for the region, reported in its events. Use
 *          vamr_region_create_on() for MRs that VAMR_IOC_MR_QUERY must find.
 *
 * Pins what is mapped now (holes stay absent), charges the covering pages to
 * current->mm->pinned_vm against RLIMIT_MEMLOCK unless CAP_IPC_LOCK (as
 * ib_umem_get() does) and starts following the mapping. Process context of
 * the task owning the memory (e.g. a uverbs reg_mr); sleeps.
 *
 * Pages of a VMA whose protection refuses the access are skipped a VMA at a
 * time and stay absent (an access to them fails).
 *
 * Return: the region, or ERR_PTR(-EINVAL) (len 0, overflow, unknown access
 * bits), ERR_PTR(-EFAULT) (beyond TASK_SIZE, or no mm), ERR_PTR(-ENOMEM)
 * (RLIMIT_MEMLOCK, allocation), ERR_PTR(-ENOSPC) (the process has
 * max_regions_per_mm regions, a module parameter), ERR_PTR(-EINTR) (fatal
 * signal while pinning).
 */
struct vamr_region *vamr_region_create(unsigned long addr, size_t len, u32 access, u64 cookie);

/**
 * vamr_region_destroy - unregister a region and release it
 * @region: from vamr_region_create(); not used again by the caller.
 *
 * Cancels the region (see vamr_region_cancel()), stops following the mapping
 * (waits for a running invalidation and for pin rounds in progress, each
 * bounded by one batch), unpins every page and returns the pinned_vm charge.
 * Sleeps. May be called after the owning process exited.
 *
 * Lifetime rule for a region of an announced device: destroy it only when its
 * device's find_mr can no longer hand it to @visit, and no such call is in
 * progress (rdma_rxe: in rxe_mr_cleanup(), after the MR left the pool's index
 * and its last reference was dropped). Frees the region, unless a
 * VAMR_IOC_MR_QUERY still holds its own reference (then that query frees it).
 */
void vamr_region_destroy(struct vamr_region *region);

/**
 * vamr_region_read - copy from a region into a kernel buffer
 * @region: the region.
 * @addr: user VA of the first byte, inside the registered range.
 * @buf: kernel buffer of @len bytes.
 * @len: bytes, > 0; any alignment, may cross pages.
 *
 * Copies through the current pins, pinning absent pages on demand (one page
 * per on-demand pin, so the call is bounded by @len).
 * Return: 0; -EINVAL (outside the range), -EFAULT (nothing mapped at a page,
 * or its protection forbids the access, or the process exited), -ECANCELED
 * (after vamr_region_cancel()), -EAGAIN (invalidations kept racing),
 * -ENOMEM. On error part may have been copied.
 */
int vamr_region_read(struct vamr_region *region, unsigned long addr, void *buf, size_t len);

/**
 * vamr_region_write - copy a kernel buffer into a region
 * As vamr_region_read(), in the other direction; -EACCES when the region was
 * created without VAMR_ACCESS_WRITE.
 */
int vamr_region_write(struct vamr_region *region, unsigned long addr, const void *buf,
		      size_t len);

/**
 * vamr_region_atomic - 8-byte atomic on a region
 * @region: the region (created with VAMR_ACCESS_WRITE).
 * @addr: user VA, 8-byte aligned, inside the registered range.
 * @op: VAMR_ATOMIC_CMP_SWAP, VAMR_ATOMIC_FETCH_ADD (adds @compare) or
 *      VAMR_ATOMIC_WRITE (stores @swap).
 * @compare: compare value or addend.
 * @swap: value stored.
 * @orig: out: the value found before the operation.
 *
 * Atomic with respect to other vamr atomics and CPU atomics on the word.
 * Return: 0; -EINVAL (op, alignment, range), -EACCES, -EFAULT, -EAGAIN.
 */
int vamr_region_atomic(struct vamr_region *region, unsigned long addr, u32 op, u64 compare,
		       u64 swap, u64 *orig);

/**
 * vamr_region_prefetch - pin the pages of a range now, as ibv_advise_mr() asks
 * @region: the region.
 * @addr: first byte, inside the registered range.
 * @len: bytes, > 0.
 * @flags: VAMR_PREFETCH_* (include/uapi/misc/vamr.h), the semantics of the
 *         advice on an ODP MR: 0 = IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH (pin
 *         for reading, faulting pages in); VAMR_PREFETCH_WRITE = ..._WRITE
 *         (pin for writing, breaking COW); VAMR_PREFETCH_NO_FAULT =
 *         ..._NO_FAULT (pin only the pages present now, for reading; never
 *         faults).
 *
 * So that the next access finds them pinned. Bounded: pins in batches of at
 * most 512 pages, skips holes and VMAs whose protection refuses the access a
 * VMA at a time, and stops at the next batch after vamr_region_cancel() or a
 * fatal signal of the calling task. A fault that would wait (a userfault, a
 * page lock held by I/O) is delivered from vamr's fault workqueue: called by
 * the process that owns the region, the call waits for it, interruptibly,
 * until vamr_region_cancel() at the latest; from any other context (a work
 * item) it does not wait and returns what was pinned. Process context or work
 * item; sleeps; no lock held.
 * Return: pages newly pinned (>= 0); -EINVAL (range, flags), -EACCES (WRITE
 * on a read-only region), -EFAULT (nothing pinnable, not with NO_FAULT),
 * -ECANCELED, -EINTR (signal), -EAGAIN (the process has 16 fault requests
 * outstanding), -ENOMEM.
 */
long vamr_region_prefetch(struct vamr_region *region, unsigned long addr, size_t len, u32 flags);

/**
 * vamr_region_prefetch_async - queue a prefetch, as an asynchronous advice asks
 * @region: the region.
 * @addr: first byte, inside the registered range.
 * @len: bytes, > 0.
 * @flags: VAMR_PREFETCH_*, as for vamr_region_prefetch().
 *
 * For ibv_advise_mr() without IB_UVERBS_ADVISE_MR_FLAG_FLUSH: checks the
 * range and the access now, then runs vamr_region_prefetch() from a work item
 * on vamr's own workqueue (which never waits on user space: a fault that
 * would wait is requested and the advice ends there) and returns at once.
 * The work holds the region's memory, not its registration:
 * vamr_region_destroy() does not wait for it. Bounded: at most 4 queued per
 * region and 64 per process; past them the advice is dropped (0 returned).
 * Process context; may sleep (allocates).
 * Return: 0 (queued or dropped); -EINVAL (range, flags), -EACCES (WRITE on a
 * read-only region), -ECANCELED, -EFAULT (region dead), -ENOMEM.
 */
int vamr_region_prefetch_async(struct vamr_region *region, unsigned long addr, size_t len,
			       u32 flags);

/**
 * vamr_region_cancel - stop every long operation on a region
 * @region: the region.
 *
 * Marks the region cancelled: prefetches, on-demand pins and copies in
 * progress stop at their next batch or page with -ECANCELED, and every later
 * access fails with -ECANCELED. Call it at the start of deregistration,
 * before waiting for users of the MR to drop their references, so that the
 * wait is short. The region stays valid until vamr_region_destroy(), which
 * cancels too. Process context; may sleep briefly (it takes the region lock
 * to wake accesses that wait for a fault request).
 */
void vamr_region_cancel(struct vamr_region *region);

/**
 * vamr_region_stats - counters of a region
 * @region: the region.
 * @out: filled with a snapshot. Any context; does not sleep.
 */
void vamr_region_stats(struct vamr_region *region, struct vamr_counters *out);

/*
 * Mirror API: a VA range mirrored into a device's own translation table.
 *
 * For a driver whose device DMAs through a table it programs itself (mlx5
 * MTTs, irdma PBLs, ...) instead of asking vamr per access. vamr pins what is
 * mapped in the range, maps each page for the driver's device
 * (dma_map_page()) and hands the driver the DMA addresses with a sequence
 * number; it follows the mapping with an mmu_interval_notifier, and before
 * it drops or replaces any pin under the range it calls the driver's
 * ops->invalidate(), which zaps the table entries and fences the device's DMA
 * to them; only then does vamr dma_unmap and unpin. A device access to an
 * entry the driver zapped comes back as a device fault (vamr_mirror_fault()),
 * which pins what is mapped now and repopulates. See
 * Documentation/vamr.rst, "Mirror API".
 *
 * The device must be DMA-coherent and its mappings must not bounce (swiotlb):
 * vamr never calls dma_sync_*(), since the process uses the pages while they
 * are mapped, as for every RDMA MR (ib_umem_get()). Behind an IOMMU that
 * translates, or with a DMA mask that reaches all memory, x86 devices are.
 *
 * Units: bytes and user virtual addresses; every address and length of this
 * part is PAGE_SIZE aligned. Table entries: one dma_addr_t per page, for the
 * whole page (offset 0, PAGE_SIZE bytes).
 *
 * The sequence rule (mmu_interval_read_begin()/_retry() as in
 * Documentation/mm/hmm.rst): vamr_mirror_populate() and vamr_mirror_fault()
 * return a sequence number @seq with the addresses. The driver then takes the
 * lock its ops->invalidate() takes, calls vamr_mirror_retry(@seq) under it,
 * and programs its table from the addresses only when that returns false;
 * when it returns true an invalidation began since the addresses were read
 * (they may be unmapped by now): it drops the lock and asks again. vamr calls
 * ops->invalidate() after it has moved the sequence on and before it unmaps,
 * so an entry programmed under the lock with a current @seq is either zapped
 * by that callback or was never programmed.
 *
 * Lock rules for the driver: the lock ops->invalidate() takes is taken under
 * memory reclaim and under mmap_lock (the callback runs from the mm's
 * notifiers; lockdep is told so when the mirror is created). While holding
 * it, do not allocate with GFP_KERNEL, fault, copy from or to user memory,
 * take mmap_lock or call any vamr_mirror_*() function but
 * vamr_mirror_retry(); never call vamr_mirror_populate(),
 * vamr_mirror_fault() or vamr_mirror_destroy() with it held.
 */
struct device;
struct vamr_mirror;

/* The table entry of a page that vamr did not populate (a hole, or beyond what a fault pinned). */
#define VAMR_MIRROR_NO_PAGE ((dma_addr_t)~0ULL)

/**
 * struct vamr_mirror_ops - what vamr asks of a driver that mirrors a VA range
 * @invalidate: stop every device access to [@start, @start + @len).
 *
 * @invalidate(@priv, @start, @len, @blockable): @priv is the value given to
 * vamr_mirror_create(); @start and @len are page aligned and lie inside the
 * mirror. When it returns 0, the driver's table has no entry left for those
 * pages (zapped) and no DMA of the device to them is in flight or will start
 * (fenced: waited for, or stopped); vamr then unmaps and unpins them, so a
 * later device access to them faults in the IOMMU or, without one, reaches a
 * page that may already be someone else's. With @blockable it may sleep (take
 * a mutex, wait for the device) and must return 0. Without @blockable (the OOM
 * reaper) it must not sleep: when it cannot zap and fence without sleeping
 * (its lock is busy, DMA is in flight) it returns -EAGAIN, and vamr then
 * leaves the pages mapped and pinned and refuses the invalidation (the mm
 * retries later). Called with vamr's mirror lock held, after the sequence
 * moved on (see above): also for ranges the driver never programmed, at
 * process exit for the whole mirror, and from vamr_mirror_destroy() for the
 * whole mirror. Context: see the lock rules above.
 */
struct vamr_mirror_ops {
	int (*invalidate)(void *priv, unsigned long start, unsigned long len, bool blockable);
};

/**
 * struct vamr_mirror_counters - counters of a mirror (vamr_mirror_stats())
 * @pages_mapped: pages pinned and mapped for the device now.
 * @populates: vamr_mirror_populate() calls.
 * @device_faults: vamr_mirror_fault() calls.
 * @pages_filled: pages pinned and mapped by those calls, in all.
 * @invalidations: invalidate callbacks that reached the mirror (every event).
 * @invalidations_refused: non-blockable ones refused (mirror lock busy, or
 *                         the driver's -EAGAIN).
 * @pages_unmapped: pages unmapped and unpinned by invalidations.
 * @retries: rounds that lost a race with an invalidation and were done again.
 */
struct vamr_mirror_counters {
	__u64 pages_mapped;
	__u64 populates;
	__u64 device_faults;
	__u64 pages_filled;
	__u64 invalidations;
	__u64 invalidations_refused;
	__u64 pages_unmapped;
	__u64 retries;
};

/**
 * vamr_mirror_create - mirror [addr, addr + len) of current->mm for a device
 * @dev: the device that DMAs (dma_map_page() is done on it; coherent, no
 *       bouncing: see above); vamr holds a reference (get_device()) until
 *       vamr_mirror_destroy() returned. The driver destroys its mirrors
 *       before its device is unbound.
 * @addr: first byte, PAGE_SIZE aligned.
 * @len: bytes, > 0, PAGE_SIZE aligned.
 * @access: VAMR_ACCESS_* (VAMR_ACCESS_READ is implied): with
 *          VAMR_ACCESS_WRITE the device may write (pages pinned with
 *          FOLL_WRITE, mapped DMA_BIDIRECTIONAL), without it it only reads
 *          (DMA_TO_DEVICE).
 * @ops: @ops->invalidate is required; vamr keeps a copy of the pointer.
 * @priv: passed to @ops->invalidate; valid until vamr_mirror_destroy()
 *        returned.
 *
 * Nothing is pinned yet: vamr_mirror_populate() and vamr_mirror_fault() pin
 * and map. The whole range is charged to current->mm->pinned_vm against
 * RLIMIT_MEMLOCK unless CAP_IPC_LOCK (as ib_umem_get()), and the mirror counts
 * as one region of the process and of the user (max_regions_per_mm,
 * max_regions_per_user). Process context of the task owning the memory (a
 * uverbs reg_mr, an ioctl); sleeps.
 *
 * Return: the mirror, or ERR_PTR(-EINVAL) (alignment, len 0, overflow,
 * unknown @access bits, NULL @dev, @ops or @ops->invalidate),
 * ERR_PTR(-EFAULT) (beyond TASK_SIZE, no mm), ERR_PTR(-ENOMEM)
 * (RLIMIT_MEMLOCK, allocation), ERR_PTR(-ENOSPC) (the region limits).
 */
struct vamr_mirror *vamr_mirror_create(struct device *dev, unsigned long addr, size_t len,
				       u32 access, const struct vamr_mirror_ops *ops, void *priv);

/**
 * vamr_mirror_destroy - stop mirroring and release everything
 * @mirror: from vamr_mirror_create(); not used again. NULL and error
 *          pointers are ignored.
 *
 * Stops following the mapping (waits for a running invalidate callback),
 * calls @ops->invalidate for the whole mirror (blockable), then unmaps and
 * unpins every page, returns the pinned_vm charge and the device reference.
 * No other call on @mirror may run during or after it. Process context;
 * sleeps; the driver's invalidate lock must not be held. May be called after
 * the owning process exited.
 */
void vamr_mirror_destroy(struct vamr_mirror *mirror);

/**
 * vamr_mirror_cancel - end every wait of the mirror's calls, before destroying it
 * @mirror: the mirror.
 *
 * A vamr_mirror_populate() or vamr_mirror_fault() of the owner that waits for
 * a fault of user space (a userfaultfd handler, a FUSE server, I/O) returns
 * -ECANCELED at once, and every later one fails so. Call it at the start of
 * deregistration, before waiting for the driver's calls on @mirror to return
 * (vamr_mirror_destroy() must not run concurrently with them), so that the
 * wait is short whatever user space does. The fault itself is still
 * delivered from vamr's workqueue until its handler answers or closes; it
 * holds no part of the mirror, the device or the driver.
 * vamr_mirror_destroy() cancels too. Process context; sleeps briefly (a
 * mutex); the driver's invalidate lock may be held.
 */
void vamr_mirror_cancel(struct vamr_mirror *mirror);

/**
 * vamr_mirror_populate - pin and map what is mapped in a range now
 * @mirror: the mirror.
 * @addr: first byte, PAGE_SIZE aligned, inside the mirror.
 * @len: bytes, > 0, PAGE_SIZE aligned, inside the mirror.
 * @dma: out: @len / PAGE_SIZE entries, the DMA address of each page, or
 *       VAMR_MIRROR_NO_PAGE for a page that is not populated (a hole, a VMA
 *       whose protection refuses the access, VM_IO/VM_PFNMAP).
 * @seq: out: the sequence number to check with vamr_mirror_retry() before
 *       programming the table from @dma.
 *
 * Pins (faulting in, as registration pins, in batches of 512 pages) the pages
 * the VMAs map and maps them for the device; pages populated already keep
 * their pin and address. A fault that would wait on user space (userfaultfd,
 * a FUSE READ, I/O) is never waited for inside GUP: vamr delivers it from its
 * fault workqueue, and in the owner's context the call waits for that,
 * interruptibly, until vamr_mirror_cancel() at the latest (bounded: 16 such
 * requests per process, max_fault_requests_per_user per user, then
 * -EAGAIN); from another context (a work item) the call fails with -EAGAIN
 * instead. Process context or work item; sleeps; the driver's invalidate
 * lock must not be held.
 *
 * Return: the number of entries of @dma that are populated (>= 0), or
 * -EINVAL (range, alignment), -EFAULT (the process exited), -EINTR (a
 * signal while waiting for a fault, a fatal one while pinning), -ECANCELED
 * (after vamr_mirror_cancel()), -ENOMEM (pinning, mapping: the device's DMA
 * mask or the IOMMU's space), -EAGAIN (invalidations kept racing for 16
 * rounds, a fault that would wait outside the owner's context, or the bounds
 * of fault requests: the caller may try again).
 */
long vamr_mirror_populate(struct vamr_mirror *mirror, unsigned long addr, size_t len,
			  dma_addr_t *dma, unsigned long *seq);

/**
 * vamr_mirror_fault - a device access to entries that are not populated
 * @mirror: the mirror.
 * @addr: first byte of the access's pages, PAGE_SIZE aligned, inside the mirror.
 * @len: bytes, > 0, PAGE_SIZE aligned, inside the mirror.
 * @dma: out: @len / PAGE_SIZE entries, as for vamr_mirror_populate().
 * @seq: out: as for vamr_mirror_populate().
 *
 * As vamr_mirror_populate() (counted as a device fault), but every page from
 * @addr on is needed: the call stops at the first page that cannot be pinned
 * (its entry and those after it are VAMR_MIRROR_NO_PAGE) and fails when that
 * is the first one; the driver's access then fails there (a QP error, an
 * access error completion). Context: as vamr_mirror_populate().
 *
 * Return: the number of entries from @addr on that are populated (>= 1), or
 * -EFAULT (nothing mapped at @addr or its protection refuses the access, or
 * the process exited), and the errors of vamr_mirror_populate().
 */
long vamr_mirror_fault(struct vamr_mirror *mirror, unsigned long addr, size_t len,
		       dma_addr_t *dma, unsigned long *seq);

/**
 * vamr_mirror_retry - whether addresses read with @seq may be stale
 * @mirror: the mirror.
 * @seq: from vamr_mirror_populate() or vamr_mirror_fault().
 *
 * mmu_interval_read_retry(): true when an invalidation of the mirror began
 * since @seq was read. Call it with the lock that @ops->invalidate takes
 * held, and program the table only when it returns false. Any context; does
 * not sleep, takes no lock.
 */
bool vamr_mirror_retry(struct vamr_mirror *mirror, unsigned long seq);

/**
 * vamr_mirror_stats - counters of a mirror
 * @mirror: the mirror.
 * @out: filled with a snapshot. Any context; does not sleep.
 */
void vamr_mirror_stats(struct vamr_mirror *mirror, struct vamr_mirror_counters *out);

#endif /* _LINUX_VAMR_H */
