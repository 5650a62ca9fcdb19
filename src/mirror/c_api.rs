// SPDX-License-Identifier: GPL-2.0

//! The mirror API's C entry points (`include/linux/vamr.h`): argument checks and the
//! conversion between C pointers and [`Mirror`]; the work is in [`Mirror`]'s methods.

use super::{Driver, Mirror, MirrorCountersRecord, RawMirrorOps};
use crate::uapi;
use core::ffi::c_void;
use core::ptr::NonNull;
use kernel::bindings;
use kernel::error::from_err_ptr;
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;
use kernel::sync::Arc;

/// `struct vamr_mirror`, as seen from C: an [`Arc<Mirror>`] made raw by [`Arc::into_raw`].
type RawMirror = *const c_void;

/// Borrows the mirror behind a C mirror pointer.
///
/// # Safety
///
/// `m` comes from [`vamr_mirror_create`] and was not destroyed.
unsafe fn mirror<'a>(m: RawMirror) -> &'a Mirror {
    // SAFETY: per the contract `m` came from `Arc::into_raw` and that reference is still held.
    unsafe { &*m.cast::<Mirror>() }
}

/// Creates a mirror; see `include/linux/vamr.h`.
#[no_mangle]
extern "C" fn vamr_mirror_create(
    dev: *mut bindings::device,
    addr: usize,
    len: usize,
    access: u32,
    ops: *const RawMirrorOps,
    priv_: *mut c_void,
) -> RawMirror {
    let Some(dev) = NonNull::new(dev) else {
        return EINVAL.to_ptr();
    };
    if ops.is_null() || access & !uapi::ACCESS_KNOWN != 0 {
        return EINVAL.to_ptr();
    }
    // SAFETY: a non-NULL `ops` points to a `struct vamr_mirror_ops` (the header's contract);
    // only the function pointer is copied.
    let Some(invalidate) = (unsafe { (*ops).invalidate }) else {
        return EINVAL.to_ptr();
    };
    // INVARIANT: the header's contract: `invalidate` may be called with `priv_` until
    // `vamr_mirror_destroy()` returned.
    let driver = Driver { invalidate, priv_ };
    let write = access & uapi::ACCESS_WRITE != 0;
    // SAFETY: the caller passes a device it holds a reference to (the header's contract), and
    // `driver` keeps its invariant until teardown.
    match unsafe { Mirror::create(dev, addr, len, write, driver) } {
        Ok(m) => Arc::into_raw(m).cast(),
        Err(e) => e.to_ptr(),
    }
}

/// Destroys a mirror; see `include/linux/vamr.h`.
#[no_mangle]
extern "C" fn vamr_mirror_destroy(m: RawMirror) {
    if let Ok(p) = from_err_ptr(m.cast_mut()) {
        if !p.is_null() {
            // SAFETY: `p` came from `Arc::into_raw` in `vamr_mirror_create`, and the caller
            // gives that reference up (the header's contract): taken back once.
            let m = unsafe { Arc::<Mirror>::from_raw(p.cast::<Mirror>()) };
            m.teardown();
        }
    }
}

/// `vamr_mirror_populate()` and `vamr_mirror_fault()` (`need`).
fn map_call(
    m: RawMirror,
    addr: usize,
    len: usize,
    dma: *mut bindings::dma_addr_t,
    seq: *mut usize,
    need: bool,
) -> isize {
    if dma.is_null() || seq.is_null() || len == 0 || len % PAGE_SIZE != 0 {
        return EINVAL.to_errno() as isize;
    }
    // SAFETY: the caller passes a live mirror and `dma` with room for `len / PAGE_SIZE`
    // entries that nothing else accesses during the call (the header's contract).
    let (mirror, out) = unsafe {
        (
            mirror(m),
            core::slice::from_raw_parts_mut(dma, len / PAGE_SIZE),
        )
    };
    let res = if need {
        mirror.fault(addr, out)
    } else {
        mirror.populate(addr, out)
    };
    match res {
        Ok((n, s)) => {
            // SAFETY: `seq` is a writable `unsigned long` (the header's contract).
            unsafe { seq.write(s) };
            n as isize
        }
        Err(e) => e.to_errno() as isize,
    }
}

/// Ends the waits of a mirror's calls; see `include/linux/vamr.h`.
#[no_mangle]
extern "C" fn vamr_mirror_cancel(m: RawMirror) {
    // SAFETY: the caller passes a live mirror (the header's contract).
    unsafe { mirror(m) }.faults.cancel();
}

/// Pins and maps what is mapped in a range; see `include/linux/vamr.h`.
#[no_mangle]
extern "C" fn vamr_mirror_populate(
    m: RawMirror,
    addr: usize,
    len: usize,
    dma: *mut bindings::dma_addr_t,
    seq: *mut usize,
) -> isize {
    map_call(m, addr, len, dma, seq, false)
}

/// A device fault; see `include/linux/vamr.h`.
#[no_mangle]
extern "C" fn vamr_mirror_fault(
    m: RawMirror,
    addr: usize,
    len: usize,
    dma: *mut bindings::dma_addr_t,
    seq: *mut usize,
) -> isize {
    map_call(m, addr, len, dma, seq, true)
}

/// Whether addresses read with `seq` may be stale; see `include/linux/vamr.h`.
#[no_mangle]
extern "C" fn vamr_mirror_retry(m: RawMirror, seq: usize) -> bool {
    // SAFETY: the caller passes a live mirror (the header's contract).
    unsafe { mirror(m) }.retry(seq)
}

/// Counters of a mirror; see `include/linux/vamr.h`.
#[no_mangle]
extern "C" fn vamr_mirror_stats(m: RawMirror, out: *mut MirrorCountersRecord) {
    // SAFETY: the caller passes a live mirror and a writable `struct vamr_mirror_counters`,
    // whose layout `MirrorCountersRecord` has (asserted in `src/vamr_glue.c`).
    unsafe { out.write(mirror(m).counts.snapshot()) };
}
