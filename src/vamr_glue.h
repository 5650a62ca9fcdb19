/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Functions of src/vamr_glue.c called from the Rust side of vamr.ko. The
 * Rust declarations (extern "C" blocks in src/*.rs) must match these.
 */
#ifndef _VAMR_GLUE_H
#define _VAMR_GLUE_H

#include <linux/types.h>

struct mm_struct;
struct mmu_interval_notifier;
struct mmu_notifier_range;
struct workqueue_struct;

void vamr_mmu_interval_set_seq(struct mmu_interval_notifier *sub, unsigned long cur_seq);
bool vamr_mmu_interval_read_retry(struct mmu_interval_notifier *sub, unsigned long seq);
bool vamr_mmu_notifier_range_blockable(const struct mmu_notifier_range *range);
unsigned long vamr_memlock_limit_pages(void);
unsigned long vamr_task_size(void);
struct workqueue_struct *vamr_alloc_workqueue(void);
s64 vamr_pinned_vm_add(struct mm_struct *mm, long npages);
void vamr_pinned_vm_sub(struct mm_struct *mm, long npages);

extern const u32 vamr_c_abi_version;
extern const u64 vamr_c_features_known;
extern const u32 vamr_c_access_known;
extern const u32 vamr_c_event_count;
extern const u32 vamr_c_ioc[7];
extern const u32 vamr_c_sizes[8];
extern const u32 vamr_c_offsets[6];

#endif /* _VAMR_GLUE_H */
