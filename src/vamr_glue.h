/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Functions of src/vamr_glue.c called from the Rust side of vamr.ko. The
 * Rust declarations (src/ffi.rs) must match these.
 */
#ifndef _VAMR_GLUE_H
#define _VAMR_GLUE_H

#include <linux/types.h>

struct mm_struct;
struct page;
struct mmu_interval_notifier;
struct mmu_notifier_range;
struct workqueue_struct;
struct file;
struct poll_table_struct;
struct device;

void vamr_mmu_interval_set_seq(struct mmu_interval_notifier *sub, unsigned long cur_seq);
bool vamr_mmu_interval_read_retry(struct mmu_interval_notifier *sub, unsigned long seq);
bool vamr_mmu_notifier_range_blockable(const struct mmu_notifier_range *range);
int vamr_snapshot(struct mmu_interval_notifier *sub, unsigned long seq, unsigned long start,
		  unsigned long npages, unsigned long *hmm_pfns);
struct page *vamr_hmm_pfn_page(unsigned long hmm_pfn, bool *write);
int vamr_lockless_context(struct mm_struct *mm);
long vamr_pin_fast(struct mm_struct *mm, unsigned long start, unsigned long npages,
		   unsigned int gup_flags, struct page **pages, bool adopt);
long vamr_pin_remote(struct mm_struct *mm, unsigned long start, unsigned long npages,
		     unsigned long uffd_max, unsigned int gup_flags, struct page **pages);
int vamr_fault_in(struct mm_struct *mm, unsigned long addr, bool write);
unsigned long vamr_memlock_limit_pages(void);
unsigned long vamr_task_size(void);
void *vamr_page_address(struct page *page);
bool vamr_fatal_signal_pending(void);
void vamr_cond_resched(void);
void vamr_global_add(unsigned int idx, u64 n);
u64 vamr_global_sum(unsigned int idx);
struct workqueue_struct *vamr_alloc_workqueue(const char *name);
s64 vamr_pinned_vm_add(struct mm_struct *mm, long npages);
void vamr_pinned_vm_sub(struct mm_struct *mm, long npages);

/* The DMA mappings of mirrors (src/mirror.rs). */
int vamr_dma_map_page(struct device *dev, struct page *page, bool write, u64 *dma);
void vamr_dma_unmap_page(struct device *dev, u64 dma, bool write);

/* The events file: glue in vamr_glue.c, logic in src/events.rs. */
struct file *vamr_events_file(void *queue, bool nonblock, bool cloexec, int *fd);
void vamr_events_install(int fd, struct file *file);
void vamr_events_discard(int fd, struct file *file);
ssize_t vamr_events_read(void *queue, char __user *buf, size_t len, bool nonblock);
/* vamr_events_poll() answer bits: records queued, the queue is hung up. */
#define VAMR_EVENTS_POLL_IN (1u << 0)
#define VAMR_EVENTS_POLL_HUP (1u << 1)
unsigned int vamr_events_poll(void *queue, struct file *file, struct poll_table_struct *pt);
bool vamr_mm_exited(struct mm_struct *mm);
void vamr_events_release(void *queue);

extern const u32 vamr_c_abi_version;
extern const u64 vamr_c_features_known;
extern const u32 vamr_c_access_known;
extern const u32 vamr_c_event_count;
extern const u32 vamr_c_ioc[14];
extern const u32 vamr_c_watch_consts[5];

/* src/vamr_trace.c: emit vamr's trace events (see src/vamr_trace.h). */
void vamr_trace_register(unsigned long start, unsigned long npages, bool write,
			 unsigned long pinned, int err);
void vamr_trace_invalidate(unsigned long start, unsigned long range_start,
			   unsigned long range_end, unsigned int event, unsigned long marked,
			   unsigned long dropped, bool blockable);
void vamr_trace_verify(unsigned long start, unsigned long first, unsigned long npages,
		       unsigned long kept, unsigned long swapped, unsigned long dropped);
void vamr_trace_repin(unsigned long start, unsigned long va, unsigned long npages,
		      unsigned long pinned, bool write, bool access);
void vamr_trace_fault_request(unsigned long start, unsigned long va, bool write);
void vamr_trace_access_error(unsigned long start, unsigned long va, unsigned long len,
			     bool write, int err);

#endif /* _VAMR_GLUE_H */
