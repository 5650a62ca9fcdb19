// SPDX-License-Identifier: GPL-2.0
/*
 * vamr's trace events (src/vamr_trace.h), instantiated here, and the
 * functions the Rust code calls to emit them (tracepoints are static inlines
 * and macros that Rust cannot reach). Each wrapper costs a call and a static
 * branch when its event is disabled. Any context; they do not sleep.
 */
#define CREATE_TRACE_POINTS
#include "vamr_trace.h"

#include "vamr_glue.h"

void vamr_trace_register(unsigned long start, unsigned long npages, bool write,
			 unsigned long pinned, int err)
{
	trace_vamr_register(start, npages, write, pinned, err);
}

void vamr_trace_invalidate(unsigned long start, unsigned long range_start,
			   unsigned long range_end, unsigned int event, unsigned long marked,
			   unsigned long dropped, bool blockable)
{
	trace_vamr_invalidate(start, range_start, range_end, event, marked, dropped, blockable);
}

void vamr_trace_verify(unsigned long start, unsigned long first, unsigned long npages,
		       unsigned long kept, unsigned long swapped, unsigned long dropped)
{
	trace_vamr_verify(start, first, npages, kept, swapped, dropped);
}

void vamr_trace_repin(unsigned long start, unsigned long va, unsigned long npages,
		      unsigned long pinned, bool write, bool access)
{
	trace_vamr_repin(start, va, npages, pinned, write, access);
}

void vamr_trace_fault_request(unsigned long start, unsigned long va, bool write)
{
	trace_vamr_fault_request(start, va, write);
}

void vamr_trace_access_error(unsigned long start, unsigned long va, unsigned long len,
			     bool write, int err)
{
	trace_vamr_access_error(start, va, len, write, err);
}
