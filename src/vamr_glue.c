// SPDX-License-Identifier: GPL-2.0
/*
 * vamr C glue: what the Rust side of the module cannot reach by itself.
 *
 * Rust cannot include the UAPI header: the layouts src/uapi.rs declares are
 * asserted against the header below, at compile time, and the constants and
 * ioctl numbers the C compiler derives from it are published here and
 * compared with the Rust ones by the KUnit suite (src/uapi.rs), so the two
 * can never drift apart silently.
 */
#include <linux/build_bug.h>
#include <linux/stddef.h>
#include <linux/types.h>
#include <uapi/misc/vamr.h>

#include "vamr_glue.h"

/* Read by the Rust KUnit suite `vamr_kunit_uapi`; see src/uapi.rs. */
const u32 vamr_c_abi_version = VAMR_ABI_VERSION;
const u64 vamr_c_features_known = VAMR_FEATURES_KNOWN;
const u32 vamr_c_access_known = VAMR_ACCESS_KNOWN;
const u32 vamr_c_event_count = VAMR_EVENT_COUNT;
const u32 vamr_c_ioc[14] = {
	VAMR_IOC_QUERY, VAMR_IOC_REGISTER, VAMR_IOC_UNREGISTER, VAMR_IOC_ACCESS,
	VAMR_IOC_ATOMIC, VAMR_IOC_PREFETCH, VAMR_IOC_STATS, VAMR_IOC_EVENTS_OPEN,
	VAMR_IOC_MR_QUERY, VAMR_IOC_DEVICE, VAMR_IOC_EVENTS_OPEN_EX, VAMR_IOC_WATCH,
	VAMR_IOC_UNWATCH, VAMR_IOC_WATCH_SYNC,
};
const u32 vamr_c_watch_consts[5] = {
	VAMR_EVENT_WATCH, VAMR_EVENTS_RING_DEFAULT, VAMR_EVENTS_RING_MAX, VAMR_WATCH_MAX,
	VAMR_WATCH_MAP_LEN,
};
/*
 * The size of every structure and the offset of every field, as src/uapi.rs
 * declares and checks them at compile time (abi_struct!): the same numbers,
 * asserted here against the header. The ABI must not depend on the user-space
 * word size: no implicit padding.
 */
#define VAMR_SIZE(s, n) static_assert(sizeof(struct s) == (n))
#define VAMR_AT(s, f, n) static_assert(offsetof(struct s, f) == (n))

static_assert(VAMR_EVENT_COUNT == 8);

VAMR_SIZE(vamr_query, 24);
VAMR_AT(vamr_query, abi_version, 0);
VAMR_AT(vamr_query, flags, 4);
VAMR_AT(vamr_query, features, 8);
VAMR_AT(vamr_query, page_size, 16);
VAMR_AT(vamr_query, reserved, 20);

VAMR_SIZE(vamr_register, 40);
VAMR_AT(vamr_register, addr, 0);
VAMR_AT(vamr_register, len, 8);
VAMR_AT(vamr_register, cookie, 16);
VAMR_AT(vamr_register, access, 24);
VAMR_AT(vamr_register, flags, 28);
VAMR_AT(vamr_register, handle, 32);
VAMR_AT(vamr_register, reserved, 36);

VAMR_SIZE(vamr_handle_arg, 8);
VAMR_AT(vamr_handle_arg, handle, 0);
VAMR_AT(vamr_handle_arg, flags, 4);

VAMR_SIZE(vamr_access, 32);
VAMR_AT(vamr_access, addr, 0);
VAMR_AT(vamr_access, len, 8);
VAMR_AT(vamr_access, buf, 16);
VAMR_AT(vamr_access, handle, 24);
VAMR_AT(vamr_access, op, 28);

VAMR_SIZE(vamr_atomic, 40);
VAMR_AT(vamr_atomic, addr, 0);
VAMR_AT(vamr_atomic, compare, 8);
VAMR_AT(vamr_atomic, swap, 16);
VAMR_AT(vamr_atomic, result, 24);
VAMR_AT(vamr_atomic, handle, 32);
VAMR_AT(vamr_atomic, op, 36);

VAMR_SIZE(vamr_prefetch, 32);
VAMR_AT(vamr_prefetch, addr, 0);
VAMR_AT(vamr_prefetch, len, 8);
VAMR_AT(vamr_prefetch, handle, 16);
VAMR_AT(vamr_prefetch, flags, 20);
VAMR_AT(vamr_prefetch, pages, 24);
VAMR_AT(vamr_prefetch, reserved, 28);

VAMR_SIZE(vamr_counters, 160);
VAMR_AT(vamr_counters, pages_pinned, 0);
VAMR_AT(vamr_counters, regions, 8);
VAMR_AT(vamr_counters, invalidations, 16);
VAMR_AT(vamr_counters, invalidations_refused, 80);
VAMR_AT(vamr_counters, pages_unpinned, 88);
VAMR_AT(vamr_counters, pins_swapped, 96);
VAMR_AT(vamr_counters, ondemand_repins, 104);
VAMR_AT(vamr_counters, repin_retries, 112);
VAMR_AT(vamr_counters, access_faults, 120);
VAMR_AT(vamr_counters, bytes_read, 128);
VAMR_AT(vamr_counters, bytes_written, 136);
VAMR_AT(vamr_counters, pins_kept, 144);
VAMR_AT(vamr_counters, fault_requests, 152);

VAMR_SIZE(vamr_stats, 176);
VAMR_AT(vamr_stats, handle, 0);
VAMR_AT(vamr_stats, flags, 4);
VAMR_AT(vamr_stats, generation, 8);
VAMR_AT(vamr_stats, counters, 16);

VAMR_SIZE(vamr_event, 40);
VAMR_AT(vamr_event, addr, 0);
VAMR_AT(vamr_event, len, 8);
VAMR_AT(vamr_event, cookie, 16);
VAMR_AT(vamr_event, generation, 24);
VAMR_AT(vamr_event, handle, 32);
VAMR_AT(vamr_event, kind, 36);

VAMR_SIZE(vamr_events_open, 8);
VAMR_AT(vamr_events_open, flags, 0);
VAMR_AT(vamr_events_open, fd, 4);

VAMR_SIZE(vamr_events_open_ex, 16);
VAMR_AT(vamr_events_open_ex, flags, 0);
VAMR_AT(vamr_events_open_ex, fd, 4);
VAMR_AT(vamr_events_open_ex, ring, 8);
VAMR_AT(vamr_events_open_ex, reserved, 12);

VAMR_SIZE(vamr_watch, 40);
VAMR_AT(vamr_watch, addr, 0);
VAMR_AT(vamr_watch, len, 8);
VAMR_AT(vamr_watch, cookie, 16);
VAMR_AT(vamr_watch, flags, 24);
VAMR_AT(vamr_watch, slot, 28);
VAMR_AT(vamr_watch, generation, 32);

VAMR_SIZE(vamr_watch_sync, 16);
VAMR_AT(vamr_watch_sync, slot, 0);
VAMR_AT(vamr_watch_sync, flags, 4);
VAMR_AT(vamr_watch_sync, generation, 8);

VAMR_SIZE(vamr_mr_query, 192);
VAMR_AT(vamr_mr_query, key, 0);
VAMR_AT(vamr_mr_query, flags, 4);
VAMR_AT(vamr_mr_query, ib_index, 8);
VAMR_AT(vamr_mr_query, reserved, 12);
VAMR_AT(vamr_mr_query, addr, 16);
VAMR_AT(vamr_mr_query, len, 24);
VAMR_AT(vamr_mr_query, counters, 32);

static_assert(VAMR_DEVICE_NAME_MAX == 64);
VAMR_SIZE(vamr_device_info, 88);
VAMR_AT(vamr_device_info, pos, 0);
VAMR_AT(vamr_device_info, flags, 4);
VAMR_AT(vamr_device_info, ib_index, 8);
VAMR_AT(vamr_device_info, reserved, 12);
VAMR_AT(vamr_device_info, access_va, 16);
VAMR_AT(vamr_device_info, name, 24);

/* The uverbs extension bit must stay in the optional access range. */
#include <rdma/ib_user_ioctl_verbs.h>
static_assert(VAMR_ACCESS_VA >= IB_UVERBS_ACCESS_OPTIONAL_FIRST &&
	      VAMR_ACCESS_VA <= IB_UVERBS_ACCESS_OPTIONAL_LAST);

/*
 * Static inlines of <linux/mmu_notifier.h>, <linux/sched/signal.h> and
 * <linux/workqueue.h> that have no Rust binding. Each is a direct call of
 * the kernel function of the same name; their rules are the kernel's.
 */
#include <linux/mmu_notifier.h>
#include <linux/sched/signal.h>
#include <linux/workqueue.h>

void vamr_mmu_interval_set_seq(struct mmu_interval_notifier *sub, unsigned long cur_seq)
{
	mmu_interval_set_seq(sub, cur_seq);
}

bool vamr_mmu_interval_read_retry(struct mmu_interval_notifier *sub, unsigned long seq)
{
	return mmu_interval_read_retry(sub, seq);
}

bool vamr_mmu_notifier_range_blockable(const struct mmu_notifier_range *range)
{
	return mmu_notifier_range_blockable(range);
}

/*
 * The verify pass (src/region.rs): a snapshot of the page table over
 * [start, start + npages * PAGE_SIZE) of the notifier's mm that faults
 * nothing in and takes no page reference: hmm_range_fault() with no request
 * flags, as umem_odp.c's no-fault prefetch does. Fills @hmm_pfns (npages
 * entries). Returns 0, -EBUSY when an invalidation of the subscription began
 * since mmu_interval_read_begin() returned @seq, or another errno of
 * hmm_range_fault(). Takes mmap_lock for reading; the caller holds a
 * reference on the mm (mmget) and the notifier's memory (mmgrab).
 */
#include <linux/hmm.h>
#include <linux/mmap_lock.h>

int vamr_snapshot(struct mmu_interval_notifier *sub, unsigned long seq, unsigned long start,
		  unsigned long npages, unsigned long *hmm_pfns)
{
	struct hmm_range range = {
		.notifier = sub,
		.notifier_seq = seq,
		.start = start,
		.end = start + (npages << PAGE_SHIFT),
		.hmm_pfns = hmm_pfns,
		.default_flags = 0,
		.pfn_flags_mask = 0,
	};
	int ret;

	mmap_read_lock(sub->mm);
	ret = hmm_range_fault(&range);
	mmap_read_unlock(sub->mm);
	return ret;
}

/*
 * The page an entry of vamr_snapshot() maps, or NULL when nothing usable is
 * mapped there; *write tells whether it is mapped writable.
 */
struct page *vamr_hmm_pfn_page(unsigned long hmm_pfn, bool *write)
{
	if (!(hmm_pfn & HMM_PFN_VALID) || (hmm_pfn & HMM_PFN_ERROR))
		return NULL;
	*write = hmm_pfn & HMM_PFN_WRITE;
	return hmm_pfn_to_page(hmm_pfn);
}

/*
 * Shims for the pin rounds of src/pin.rs, which decides what to call (the
 * policy: which pages may fault, which path, when to wait); these only reach
 * what Rust cannot (static inlines, mmap_lock with GUP's 'locked' protocol,
 * current's flags).
 */
#include <linux/fs.h>
#include <linux/kthread.h>
#include <linux/string.h>
#include <linux/userfaultfd_k.h>

/*
 * How current may use lockless GUP on @mm: 1 in @mm's own context, 2 as a
 * kernel thread without an mm (it adopts @mm for the call, kthread_use_mm(),
 * as the USB gadget's f_fs does for its user copies), 0 not at all.
 */
int vamr_lockless_context(struct mm_struct *mm)
{
	if (mm == current->mm)
		return 1;
	if ((current->flags & PF_KTHREAD) && !current->mm)
		return 2;
	return 0;
}

/*
 * pin_user_pages_fast() of @npages pages from @start of @mm, adopting @mm
 * first when @adopt (vamr_lockless_context() returned 2). FOLL_NOWAIT, which
 * lockless GUP refuses, is dropped. Returns the pages pinned or an errno.
 */
long vamr_pin_fast(struct mm_struct *mm, unsigned long start, unsigned long npages,
		   unsigned int gup_flags, struct page **pages, bool adopt)
{
	long ret;

	if (adopt)
		kthread_use_mm(mm);
	ret = pin_user_pages_fast(start, npages, gup_flags & ~FOLL_NOWAIT, pages);
	if (adopt)
		kthread_unuse_mm(mm);
	return ret;
}

/*
 * Whether a fault in @vma may wait for a user-space server in a way that
 * FOLL_NOWAIT does not stop: a FUSE file's readahead sends its READ and waits
 * for the daemon's answer (uninterruptibly once the daemon has read it)
 * before the fault would give up on a locked folio. Such a fault is left to a
 * fault request (src/region/fault.rs) by callers that must not wait.
 * Caller holds mmap_lock.
 */
static bool vamr_vma_waits_on_server(struct vm_area_struct *vma)
{
	const char *fs;

	if (!vma->vm_file)
		return false;
	fs = file_inode(vma->vm_file)->i_sb->s_type->name;
	return !strcmp(fs, "fuse") || !strcmp(fs, "fuseblk");
}

/*
 * pin_user_pages_remote() of at most @npages pages from @start of @mm, under
 * mmap_lock (taken here, killably) and with a 'locked' argument, so that GUP
 * may drop the lock and retry (VM_FAULT_RETRY) and userfaultfd faults reach
 * their handler instead of failing with "FAULT_FLAG_ALLOW_RETRY missing".
 * The call stays within the VMA of @start, so that a batch that starts in an
 * ordinary VMA cannot run on into a userfaultfd one; in a userfaultfd-armed
 * VMA, unless FOLL_NOFAULT, it pins at most @uffd_max pages (0: none, returns
 * 0 without raising a userfault). With FOLL_NOWAIT a fault that would wait
 * ends the call with -EBUSY (GUP reports it as 0 pages); in a VMA whose faults
 * wait on a user-space server (vamr_vma_waits_on_server()) only present pages
 * are pinned then, and an absent first page is -EBUSY too. Returns the pages
 * pinned or an errno.
 */
long vamr_pin_remote(struct mm_struct *mm, unsigned long start, unsigned long npages,
		     unsigned long uffd_max, unsigned int gup_flags, struct page **pages)
{
	struct vm_area_struct *vma;
	bool present_only = false;
	int locked = 1;
	long ret;

	if (mmap_read_lock_killable(mm))
		return -EINTR;
	vma = vma_lookup(mm, start);
	if (vma) {
		npages = min(npages, (vma->vm_end - start) >> PAGE_SHIFT);
		if (userfaultfd_armed(vma) && !(gup_flags & FOLL_NOFAULT))
			npages = min(npages, uffd_max);
		present_only = (gup_flags & (FOLL_NOWAIT | FOLL_NOFAULT)) == FOLL_NOWAIT &&
			       vamr_vma_waits_on_server(vma);
	}
	if (!npages) {
		mmap_read_unlock(mm);
		return 0;
	}
	if (present_only)
		gup_flags |= FOLL_NOFAULT;
	ret = pin_user_pages_remote(mm, start, npages, gup_flags, pages, &locked);
	if (locked)
		mmap_read_unlock(mm);
	if ((ret == 0 && (gup_flags & FOLL_NOWAIT)) || (ret == -EFAULT && present_only))
		return -EBUSY;
	return ret;
}

/*
 * Fault the page at @addr in (for writing when @write), waiting for a
 * userfaultfd handler if there is one: fixup_user_fault() with retry, as
 * futexes do. Returns 0 or an errno.
 */
int vamr_fault_in(struct mm_struct *mm, unsigned long addr, bool write)
{
	bool unlocked = false;
	int ret;

	if (mmap_read_lock_killable(mm))
		return -EINTR;
	ret = fixup_user_fault(mm, addr, write ? FAULT_FLAG_WRITE : 0, &unlocked);
	mmap_read_unlock(mm);
	return ret;
}

/* RLIMIT_MEMLOCK of current, in pages (the unit of mm->pinned_vm). */
unsigned long vamr_memlock_limit_pages(void)
{
	return rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT;
}

/*
 * The module's own workqueue for the per-mm verify work: destroying it at
 * module exit drains every queued work item before the code goes away.
 */
struct workqueue_struct *vamr_alloc_workqueue(const char *name)
{
	return alloc_workqueue("%s", WQ_UNBOUND, 0, name);
}

/*
 * page_address(): the permanent kernel address of a page that is not in
 * high memory (the generation counters of monitor mode; src/watch.rs).
 */
void *vamr_page_address(struct page *page)
{
	return page_address(page);
}

/* TASK_SIZE of current: the end of the user address space, in bytes. */
unsigned long vamr_task_size(void)
{
	return TASK_SIZE;
}

/* mm->pinned_vm sits in an anonymous struct of mm_struct that bindgen names unstably. */
s64 vamr_pinned_vm_add(struct mm_struct *mm, long npages)
{
	return atomic64_add_return(npages, &mm->pinned_vm);
}

void vamr_pinned_vm_sub(struct mm_struct *mm, long npages)
{
	atomic64_sub(npages, &mm->pinned_vm);
}

/*
 * The events file (VAMR_IOC_EVENTS_OPEN): an anonymous-inode file whose
 * read, poll and release are implemented in Rust (src/events.rs). It lives
 * here because the Rust misc device abstraction has no poll operation and
 * anon_inode_getfd() has no binding. private_data is a reference to the
 * Rust event queue, taken by the caller and dropped by release.
 */
#include <linux/anon_inodes.h>
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/poll.h>

static ssize_t vamr_events_fop_read(struct file *file, char __user *buf, size_t len,
				    loff_t *ppos)
{
	return vamr_events_read(file->private_data, buf, len, file->f_flags & O_NONBLOCK);
}

static __poll_t vamr_events_fop_poll(struct file *file, poll_table *pt)
{
	unsigned int ready = vamr_events_poll(file->private_data, file, pt);

	return (ready & VAMR_EVENTS_POLL_IN ? EPOLLIN | EPOLLRDNORM : 0) |
	       (ready & VAMR_EVENTS_POLL_HUP ? EPOLLHUP : 0);
}

static int vamr_events_fop_release(struct inode *inode, struct file *file)
{
	vamr_events_release(file->private_data);
	return 0;
}

static const struct file_operations vamr_events_fops = {
	.owner = THIS_MODULE,
	.read = vamr_events_fop_read,
	.poll = vamr_events_fop_poll,
	.release = vamr_events_fop_release,
	.llseek = noop_llseek,
};

/*
 * Reserve a descriptor and create the events file for @queue (a counted
 * reference the file takes over); not installed yet, so that the caller can
 * first report the descriptor. Returns the file or an ERR_PTR (then the
 * reference is still the caller's).
 */
struct file *vamr_events_file(void *queue, bool nonblock, bool cloexec, int *fd)
{
	struct file *file;

	*fd = get_unused_fd_flags(cloexec ? O_CLOEXEC : 0);
	if (*fd < 0)
		return ERR_PTR(*fd);
	file = anon_inode_getfile("[vamr-events]", &vamr_events_fops, queue,
				  O_RDONLY | (nonblock ? O_NONBLOCK : 0));
	if (IS_ERR(file))
		put_unused_fd(*fd);
	return file;
}

/* Whether @mm's address space has exited (mm_users 0); @mm is mmgrab'd. */
bool vamr_mm_exited(struct mm_struct *mm)
{
	return atomic_read(&mm->mm_users) == 0;
}

void vamr_events_install(int fd, struct file *file)
{
	fd_install(fd, file);
}

/* Undo vamr_events_file(): the file's release drops the queue reference. */
void vamr_events_discard(int fd, struct file *file)
{
	put_unused_fd(fd);
	fput(file);
}

/* The in-kernel API (include/linux/vamr.h), implemented in src/api.rs. */
#include <linux/export.h>
#include <linux/vamr.h>

EXPORT_SYMBOL_GPL(vamr_device_add);
EXPORT_SYMBOL_GPL(vamr_device_remove);
EXPORT_SYMBOL_GPL(vamr_region_create);
EXPORT_SYMBOL_GPL(vamr_region_create_on);
EXPORT_SYMBOL_GPL(vamr_region_destroy);
EXPORT_SYMBOL_GPL(vamr_region_read);
EXPORT_SYMBOL_GPL(vamr_region_write);
EXPORT_SYMBOL_GPL(vamr_region_atomic);
EXPORT_SYMBOL_GPL(vamr_region_prefetch);
EXPORT_SYMBOL_GPL(vamr_region_prefetch_async);
EXPORT_SYMBOL_GPL(vamr_region_cancel);
EXPORT_SYMBOL_GPL(vamr_region_stats);

EXPORT_SYMBOL_GPL(vamr_mirror_create);
EXPORT_SYMBOL_GPL(vamr_mirror_destroy);
EXPORT_SYMBOL_GPL(vamr_mirror_cancel);
EXPORT_SYMBOL_GPL(vamr_mirror_populate);
EXPORT_SYMBOL_GPL(vamr_mirror_fault);
EXPORT_SYMBOL_GPL(vamr_mirror_retry);
EXPORT_SYMBOL_GPL(vamr_mirror_stats);

/*
 * The mirror API (src/mirror.rs): struct vamr_mirror_ops as RawMirrorOps (one
 * function pointer), struct vamr_mirror_counters as MirrorCountersRecord
 * (eight u64 in field order), VAMR_MIRROR_NO_PAGE as DMA_MAPPING_ERROR.
 */
#include <linux/dma-mapping.h>

static_assert(sizeof(struct vamr_mirror_ops) == sizeof(void *));
static_assert(offsetof(struct vamr_mirror_ops, invalidate) == 0);
static_assert(sizeof(struct vamr_mirror_counters) == 8 * sizeof(u64));
static_assert(offsetof(struct vamr_mirror_counters, invalidations) == 4 * sizeof(u64));
static_assert(offsetof(struct vamr_mirror_counters, retries) == 7 * sizeof(u64));
static_assert(VAMR_MIRROR_NO_PAGE == DMA_MAPPING_ERROR);
static_assert(sizeof(dma_addr_t) == sizeof(u64));

/*
 * dma_map_page() of a whole page for a mirror's device, checked with
 * dma_mapping_error() (a static inline, and what DMA-API debug wants called
 * after every map). The device may write when @write (DMA_BIDIRECTIONAL),
 * else only read (DMA_TO_DEVICE). Returns 0 with *@dma set, or -ENOMEM.
 */
int vamr_dma_map_page(struct device *dev, struct page *page, bool write, u64 *dma)
{
	dma_addr_t addr = dma_map_page(dev, page, 0, PAGE_SIZE,
				       write ? DMA_BIDIRECTIONAL : DMA_TO_DEVICE);

	if (dma_mapping_error(dev, addr))
		return -ENOMEM;
	*dma = addr;
	return 0;
}

/* dma_unmap_page() of a mapping of vamr_dma_map_page() (same @dev and @write). */
void vamr_dma_unmap_page(struct device *dev, u64 dma, bool write)
{
	dma_unmap_page(dev, dma, PAGE_SIZE, write ? DMA_BIDIRECTIONAL : DMA_TO_DEVICE);
}

/* src/rdma_devices.rs reads struct vamr_device_ops as RawOps: one function pointer. */
static_assert(sizeof(struct vamr_device_ops) == sizeof(void *));
static_assert(offsetof(struct vamr_device_ops, find_mr) == 0);

/* From the VERSION file at the top of the tree (Kbuild). */
#include <linux/module.h>

MODULE_VERSION(VAMR_VERSION);

/* The module parameters (the limits) are in src/vamr_limits.c. */

/* fatal_signal_pending(current): stop a long pin loop when the caller is being killed. */
bool vamr_fatal_signal_pending(void)
{
	return fatal_signal_pending(current);
}

/*
 * cond_resched() (a macro): the rescheduling point of loops a region's size
 * bounds (src/pin.rs, cond_resched(): teardown, large invalidations).
 */
void vamr_cond_resched(void)
{
	cond_resched();
}

/*
 * The module-wide counters (VAMR_STATS_GLOBAL), per CPU: an event adds to its
 * own CPU's counter (this_cpu_add(): no atomic operation, no shared cache
 * line); VAMR_IOC_STATS sums them. Gauges (pages pinned, regions) go down by
 * adding the two's complement, so the sum over the CPUs is the value. idx:
 * the counter's position in struct vamr_counters (src/stats.rs).
 */
#define VAMR_GLOBAL_COUNTERS 32
static DEFINE_PER_CPU(u64, vamr_global[VAMR_GLOBAL_COUNTERS]);

void vamr_global_add(unsigned int idx, u64 n)
{
	if (idx < VAMR_GLOBAL_COUNTERS)
		this_cpu_add(vamr_global[idx], n);
}

u64 vamr_global_sum(unsigned int idx)
{
	u64 sum = 0;
	int cpu;

	if (idx >= VAMR_GLOBAL_COUNTERS)
		return 0;
	for_each_possible_cpu(cpu)
		sum += per_cpu(vamr_global[idx], cpu);
	return sum;
}
