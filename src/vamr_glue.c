// SPDX-License-Identifier: GPL-2.0
/*
 * vamr C glue: what the Rust side of the module cannot reach by itself.
 *
 * Rust cannot include the UAPI header, so the values the C compiler derives
 * from it (ioctl numbers, structure sizes and field offsets) are published
 * here and compared with the Rust definitions by the KUnit suite
 * (src/uapi.rs), so the two can never drift apart silently.
 */
#include <linux/build_bug.h>
#include <linux/stddef.h>
#include <linux/types.h>
#include <uapi/misc/vamr.h>

#include "vamr_glue.h"

/* Read by the Rust KUnit suite `vamr_uapi`; see src/uapi.rs. */
const u32 vamr_c_abi_version = VAMR_ABI_VERSION;
const u64 vamr_c_features_known = VAMR_FEATURES_KNOWN;
const u32 vamr_c_access_known = VAMR_ACCESS_KNOWN;
const u32 vamr_c_event_count = VAMR_EVENT_COUNT;
const u32 vamr_c_ioc[7] = {
	VAMR_IOC_QUERY, VAMR_IOC_REGISTER, VAMR_IOC_UNREGISTER, VAMR_IOC_ACCESS,
	VAMR_IOC_ATOMIC, VAMR_IOC_PREFETCH, VAMR_IOC_STATS,
};
const u32 vamr_c_sizes[8] = {
	sizeof(struct vamr_query), sizeof(struct vamr_register),
	sizeof(struct vamr_handle_arg), sizeof(struct vamr_access),
	sizeof(struct vamr_atomic), sizeof(struct vamr_prefetch),
	sizeof(struct vamr_stats), sizeof(struct vamr_counters),
};
const u32 vamr_c_offsets[6] = {
	offsetof(struct vamr_query, features),
	offsetof(struct vamr_register, handle),
	offsetof(struct vamr_access, handle),
	offsetof(struct vamr_atomic, result),
	offsetof(struct vamr_stats, counters),
	offsetof(struct vamr_counters, bytes_written),
};

/* The ABI must not depend on the user-space word size: no implicit padding. */
static_assert(sizeof(struct vamr_query) == 24);
static_assert(sizeof(struct vamr_register) == 40);
static_assert(sizeof(struct vamr_access) == 32);
static_assert(sizeof(struct vamr_atomic) == 40);
static_assert(sizeof(struct vamr_prefetch) == 32);
static_assert(sizeof(struct vamr_stats) == 16 + 8 * (10 + VAMR_EVENT_COUNT));

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

/* RLIMIT_MEMLOCK of current, in pages (the unit of mm->pinned_vm). */
unsigned long vamr_memlock_limit_pages(void)
{
	return rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT;
}

/*
 * The module's own workqueue for the eager re-pin work: destroying it at
 * module exit drains every queued work item before the code goes away.
 */
struct workqueue_struct *vamr_alloc_workqueue(void)
{
	return alloc_workqueue("vamr", WQ_UNBOUND, 0);
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
