/* SPDX-License-Identifier: GPL-2.0 */
/*
 * vamr's trace events (tracefs: events/vamr/). They report what vamr does to
 * a region's pins: registration, invalidations (range, kind, pins marked
 * suspect or dropped), the verify pass (pins kept, swapped, dropped), pins
 * taken on demand, fault requests and failed accesses. A region is named by
 * the first byte of its page cover (start) in its process. Emitted through
 * the wrappers of src/vamr_trace.c, which the Rust code calls.
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM vamr

#if !defined(_VAMR_TRACE_H) || defined(TRACE_HEADER_MULTI_READ)
#define _VAMR_TRACE_H

#include <linux/tracepoint.h>

/* enum mmu_notifier_event, as vamr's Event::index() numbers it. */
#define show_vamr_event(e)						\
	__print_symbolic(e, { 0, "UNMAP" }, { 1, "CLEAR" },		\
			 { 2, "PROTECTION_VMA" }, { 3, "PROTECTION_PAGE" },	\
			 { 4, "SOFT_DIRTY" }, { 5, "RELEASE" },		\
			 { 6, "MIGRATE" }, { 7, "EXCLUSIVE" })

TRACE_EVENT(vamr_register,
	TP_PROTO(unsigned long start, unsigned long npages, bool write, unsigned long pinned,
		 int err),
	TP_ARGS(start, npages, write, pinned, err),
	TP_STRUCT__entry(
		__field(unsigned long, start)
		__field(unsigned long, npages)
		__field(bool, write)
		__field(unsigned long, pinned)
		__field(int, err)
	),
	TP_fast_assign(
		__entry->start = start;
		__entry->npages = npages;
		__entry->write = write;
		__entry->pinned = pinned;
		__entry->err = err;
	),
	TP_printk("start=0x%lx npages=%lu %s pinned=%lu err=%d", __entry->start,
		  __entry->npages, __entry->write ? "rw" : "ro", __entry->pinned, __entry->err)
);

TRACE_EVENT(vamr_invalidate,
	TP_PROTO(unsigned long start, unsigned long range_start, unsigned long range_end,
		 unsigned int event, unsigned long marked, unsigned long dropped, bool blockable),
	TP_ARGS(start, range_start, range_end, event, marked, dropped, blockable),
	TP_STRUCT__entry(
		__field(unsigned long, start)
		__field(unsigned long, range_start)
		__field(unsigned long, range_end)
		__field(unsigned int, event)
		__field(unsigned long, marked)
		__field(unsigned long, dropped)
		__field(bool, blockable)
	),
	TP_fast_assign(
		__entry->start = start;
		__entry->range_start = range_start;
		__entry->range_end = range_end;
		__entry->event = event;
		__entry->marked = marked;
		__entry->dropped = dropped;
		__entry->blockable = blockable;
	),
	TP_printk("start=0x%lx range=0x%lx-0x%lx event=%s suspect=%lu dropped=%lu%s",
		  __entry->start, __entry->range_start, __entry->range_end,
		  show_vamr_event(__entry->event), __entry->marked, __entry->dropped,
		  __entry->blockable ? "" : " nonblock")
);

TRACE_EVENT(vamr_verify,
	TP_PROTO(unsigned long start, unsigned long first, unsigned long npages, unsigned long kept,
		 unsigned long swapped, unsigned long dropped),
	TP_ARGS(start, first, npages, kept, swapped, dropped),
	TP_STRUCT__entry(
		__field(unsigned long, start)
		__field(unsigned long, first)
		__field(unsigned long, npages)
		__field(unsigned long, kept)
		__field(unsigned long, swapped)
		__field(unsigned long, dropped)
	),
	TP_fast_assign(
		__entry->start = start;
		__entry->first = first;
		__entry->npages = npages;
		__entry->kept = kept;
		__entry->swapped = swapped;
		__entry->dropped = dropped;
	),
	TP_printk("start=0x%lx pages=0x%lx+%lu kept=%lu swapped=%lu dropped=%lu",
		  __entry->start, __entry->first, __entry->npages, __entry->kept,
		  __entry->swapped, __entry->dropped)
);

TRACE_EVENT(vamr_repin,
	TP_PROTO(unsigned long start, unsigned long va, unsigned long npages,
		 unsigned long pinned, bool write, bool access),
	TP_ARGS(start, va, npages, pinned, write, access),
	TP_STRUCT__entry(
		__field(unsigned long, start)
		__field(unsigned long, va)
		__field(unsigned long, npages)
		__field(unsigned long, pinned)
		__field(bool, write)
		__field(bool, access)
	),
	TP_fast_assign(
		__entry->start = start;
		__entry->va = va;
		__entry->npages = npages;
		__entry->pinned = pinned;
		__entry->write = write;
		__entry->access = access;
	),
	TP_printk("start=0x%lx va=0x%lx npages=%lu pinned=%lu %s %s", __entry->start,
		  __entry->va, __entry->npages, __entry->pinned, __entry->write ? "write" : "read",
		  __entry->access ? "access" : "prefetch")
);

TRACE_EVENT(vamr_fault_request,
	TP_PROTO(unsigned long start, unsigned long va, bool write),
	TP_ARGS(start, va, write),
	TP_STRUCT__entry(
		__field(unsigned long, start)
		__field(unsigned long, va)
		__field(bool, write)
	),
	TP_fast_assign(
		__entry->start = start;
		__entry->va = va;
		__entry->write = write;
	),
	TP_printk("start=0x%lx va=0x%lx %s", __entry->start, __entry->va,
		  __entry->write ? "write" : "read")
);

TRACE_EVENT(vamr_access_error,
	TP_PROTO(unsigned long start, unsigned long va, unsigned long len, bool write, int err),
	TP_ARGS(start, va, len, write, err),
	TP_STRUCT__entry(
		__field(unsigned long, start)
		__field(unsigned long, va)
		__field(unsigned long, len)
		__field(bool, write)
		__field(int, err)
	),
	TP_fast_assign(
		__entry->start = start;
		__entry->va = va;
		__entry->len = len;
		__entry->write = write;
		__entry->err = err;
	),
	TP_printk("start=0x%lx va=0x%lx len=%lu %s err=%d", __entry->start, __entry->va,
		  __entry->len, __entry->write ? "write" : "read", __entry->err)
);

#endif /* _VAMR_TRACE_H */

/* This part must be outside the include guard. */
#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE vamr_trace
#include <trace/define_trace.h>
