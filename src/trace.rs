// SPDX-License-Identifier: GPL-2.0

//! vamr's trace events (`events/vamr/` in tracefs), defined in `src/vamr_trace.h` and emitted
//! through the C wrappers of `src/vamr_trace.c` (tracepoints are static inlines and macros,
//! out of Rust's reach). Each function costs a call and a static branch while its event is
//! disabled; any context, never sleeps. Addresses are user virtual addresses; a region is named
//! by the first byte of its page cover.

use crate::ffi;
use crate::notifier::Event;

/// A registration of `npages` pages from `start` ended: `pinned` pages pinned, `err` 0 or a
/// negative errno.
pub(crate) fn register(start: usize, npages: usize, write: bool, pinned: usize, err: i32) {
    // SAFETY: plain values; the wrapper only records them.
    unsafe { ffi::vamr_trace_register(start, npages, write, pinned, err) }
}

/// An invalidation of `[range_start, range_end)` of kind `event` over the region at `start`
/// marked `marked` pins suspect and unpinned `dropped`.
pub(crate) fn invalidate(
    start: usize,
    range: (usize, usize),
    event: Event,
    marked: usize,
    dropped: usize,
    blockable: bool,
) {
    // SAFETY: plain values; the wrapper only records them.
    unsafe {
        ffi::vamr_trace_invalidate(
            start,
            range.0,
            range.1,
            event.index() as u32,
            marked,
            dropped,
            blockable,
        )
    }
}

/// The verify pass checked `npages` pages from `first` of the region at `start`.
pub(crate) fn verify(
    start: usize,
    first: usize,
    npages: usize,
    kept: usize,
    swapped: usize,
    dropped: usize,
) {
    // SAFETY: plain values; the wrapper only records them.
    unsafe { ffi::vamr_trace_verify(start, first, npages, kept, swapped, dropped) }
}

/// An access (`access`) or a prefetch pinned `pinned` of `npages` pages from `va`.
pub(crate) fn repin(
    start: usize,
    va: usize,
    npages: usize,
    pinned: usize,
    write: bool,
    access: bool,
) {
    // SAFETY: plain values; the wrapper only records them.
    unsafe { ffi::vamr_trace_repin(start, va, npages, pinned, write, access) }
}

/// A fault request for the page at `va` was queued.
pub(crate) fn fault_request(start: usize, va: usize, write: bool) {
    // SAFETY: plain values; the wrapper only records them.
    unsafe { ffi::vamr_trace_fault_request(start, va, write) }
}

/// An access of `len` bytes at `va` failed with `err` (a negative errno).
pub(crate) fn access_error(start: usize, va: usize, len: usize, write: bool, err: i32) {
    // SAFETY: plain values; the wrapper only records them.
    unsafe { ffi::vamr_trace_access_error(start, va, len, write, err) }
}
