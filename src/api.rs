// SPDX-License-Identifier: GPL-2.0

//! The in-kernel C API of `include/linux/vamr.h`, for RDMA drivers.
//!
//! Each function is a thin `extern "C"` shell over [`crate::region::Region`]; `src/vamr_glue.c` exports them
//! with `EXPORT_SYMBOL_GPL`. A `struct vamr_region *` handed to C is a [`Registration`] turned
//! into a raw pointer to its region ([`Registration::into_raw`]: the region's own `Arc`, no
//! allocation besides the region's); destroying it takes the registration back, which tears the
//! region down, then drops its reference. The contract of each function (context, errors,
//! units) is documented in the header.
//!
//! A driver announces each RDMA device that offers VA MRs (`vamr_device_add()`, see
//! [`crate::rdma_devices`]) with its own MR lookup, through which a process asks
//! (`VAMR_IOC_MR_QUERY`) whether its MR got VA semantics; regions it creates on a device
//! (`vamr_region_create_on()`) carry the MR key as their cookie.

use crate::rdma_devices::{Device, RawOps};
use crate::region::{AtomicOp, Prefetch, Region, Registration};
use crate::uapi;
use core::ffi::{c_void, CStr};
use kernel::error::from_err_ptr;
use kernel::ffi::c_char;
use kernel::prelude::*;
use kernel::str::CStrExt;
use kernel::sync::Arc;

/// `struct vamr_region`, as seen from C: a [`Registration`] made raw by
/// [`Registration::into_raw`], that is, a pointer to the [`Region`].
type RawRegion = *mut c_void;

/// `struct vamr_device`, as seen from C: an opaque pointer from [`Arc::into_raw`] of a
/// [`Device`].
type RawDevice = *const c_void;

/// Borrows the region behind a C region pointer.
///
/// # Safety
///
/// `region` must come from [`vamr_region_create`] or [`vamr_region_create_on`] and not have
/// been destroyed.
unsafe fn registration<'a>(region: RawRegion) -> &'a Region {
    // SAFETY: per the contract, `region` came from `Registration::into_raw` and its
    // registration (which holds a reference to the region) was not taken back.
    unsafe { &*region.cast::<Region>() }
}

/// Registers a region of `current->mm`, with `cookie` as its cookie.
fn create(addr: usize, len: usize, access: u32, cookie: u64) -> Result<RawRegion> {
    if access & !uapi::ACCESS_KNOWN != 0 {
        return Err(EINVAL);
    }
    let current = kernel::current!();
    let mm = current.mm().ok_or(EFAULT)?;
    let write = access & uapi::ACCESS_WRITE != 0;
    let access = crate::region::Access { write };
    // The region counts for the registering task's user (see `src/limits.rs`).
    let user = crate::limits::User::current()?;
    let reg = Region::register(mm, &user, addr, len, access, cookie, 0, None)?;
    Ok(reg.into_raw().cast_mut().cast())
}

/// Announces an RDMA device that offers VA MRs; see `include/linux/vamr.h`.
#[no_mangle]
extern "C" fn vamr_device_add(
    name: *const c_char,
    ib_index: u32,
    access_va: u64,
    ops: *const RawOps,
    priv_: *mut c_void,
) -> RawDevice {
    if name.is_null() || ops.is_null() {
        return EINVAL.to_ptr();
    }
    // SAFETY: a non-NULL `ops` points to a `struct vamr_device_ops` (the header's contract);
    // only the function pointer is copied.
    let Some(find_mr) = (unsafe { (*ops).find_mr }) else {
        return EINVAL.to_ptr();
    };
    // SAFETY: the caller passes a NUL-terminated string (the header's contract).
    let name = unsafe { CStr::from_char_ptr(name) }.to_bytes();
    // SAFETY: the header's contract: `find_mr` may be called with `priv_` from process context
    // until `vamr_device_remove()` returned.
    match unsafe { Device::add(name, ib_index, access_va, find_mr, priv_) } {
        Ok(dev) => Arc::into_raw(dev).cast(),
        Err(e) => e.to_ptr(),
    }
}

/// Takes a device back; see `include/linux/vamr.h`.
#[no_mangle]
extern "C" fn vamr_device_remove(dev: RawDevice) {
    if let Ok(p) = from_err_ptr(dev.cast_mut()) {
        if !p.is_null() {
            // SAFETY: `p` came from `Arc::into_raw` in `vamr_device_add`, and the caller gives
            // up that reference (the header's contract).
            let dev = unsafe { Arc::<Device>::from_raw(p.cast::<Device>()) };
            Device::remove(&dev);
        }
    }
}

/// Registers a region on a device; see `include/linux/vamr.h`.
#[no_mangle]
extern "C" fn vamr_region_create_on(
    dev: RawDevice,
    addr: usize,
    len: usize,
    access: u32,
    key: u32,
) -> RawRegion {
    // The device is only named: its driver's `find_mr` hands the region to queries, vamr keeps
    // no list of a device's regions (see `crate::rdma_devices`).
    if dev.is_null() {
        return EINVAL.to_ptr();
    }
    match create(addr, len, access, u64::from(key)) {
        Ok(p) => p,
        Err(e) => e.to_ptr(),
    }
}

/// Registers `[addr, addr + len)` of `current->mm`; see `include/linux/vamr.h`.
#[no_mangle]
extern "C" fn vamr_region_create(addr: usize, len: usize, access: u32, cookie: u64) -> RawRegion {
    match create(addr, len, access, cookie) {
        Ok(p) => p,
        Err(e) => e.to_ptr(),
    }
}

/// Destroys a region; see `include/linux/vamr.h`.
#[no_mangle]
extern "C" fn vamr_region_destroy(region: RawRegion) {
    // The header's contract: `region` is live and the caller gives it up.
    if let Ok(p) = from_err_ptr(region) {
        if !p.is_null() {
            // `p` came from `Registration::into_raw` in `create`, and the caller gives it up,
            // so it is taken back once; dropping the registration tears the region down, then
            // drops its reference (which frees the region unless a query holds one).
            // SAFETY: as just said.
            drop(unsafe { Registration::from_raw(p.cast::<Region>()) });
        }
    }
}

/// Copies from a region into a kernel buffer; see `include/linux/vamr.h`.
#[no_mangle]
extern "C" fn vamr_region_read(region: RawRegion, addr: usize, buf: *mut u8, len: usize) -> i32 {
    if buf.is_null() || len == 0 || len > isize::MAX as usize {
        return EINVAL.to_errno();
    }
    // SAFETY: the caller passes a live region and a kernel buffer valid for writing `len` bytes
    // that nothing else accesses during the call (the header's contract).
    let (reg, buf) = unsafe {
        (
            registration(region),
            core::slice::from_raw_parts_mut(buf, len),
        )
    };
    match reg.read_into(addr, buf) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// Copies a kernel buffer into a region; see `include/linux/vamr.h`.
#[no_mangle]
extern "C" fn vamr_region_write(region: RawRegion, addr: usize, buf: *const u8, len: usize) -> i32 {
    if buf.is_null() || len == 0 || len > isize::MAX as usize {
        return EINVAL.to_errno();
    }
    // SAFETY: the caller passes a live region and a kernel buffer valid for reading `len` bytes
    // that is not written during the call (the header's contract).
    let (reg, buf) = unsafe { (registration(region), core::slice::from_raw_parts(buf, len)) };
    match reg.write_from(addr, buf) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// 8-byte atomic on a region; see `include/linux/vamr.h`.
#[no_mangle]
extern "C" fn vamr_region_atomic(
    region: RawRegion,
    addr: usize,
    op: u32,
    compare: u64,
    swap: u64,
    orig: *mut u64,
) -> i32 {
    let op = match op {
        uapi::ATOMIC_CMP_SWAP => AtomicOp::CmpSwap { compare, swap },
        uapi::ATOMIC_FETCH_ADD => AtomicOp::FetchAdd { add: compare },
        uapi::ATOMIC_WRITE => AtomicOp::Write { value: swap },
        _ => return EINVAL.to_errno(),
    };
    // SAFETY: the caller passes a live region (the header's contract).
    let reg = unsafe { registration(region) };
    match reg.atomic(addr, op) {
        Ok(old) => {
            if !orig.is_null() {
                // SAFETY: a non-NULL `orig` points to a writable `u64` (the header's contract).
                unsafe { orig.write(old) };
            }
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// Pins the pages of a range as an `ibv_advise_mr()` advice asks; see `include/linux/vamr.h`.
#[no_mangle]
extern "C" fn vamr_region_prefetch(
    region: RawRegion,
    addr: usize,
    len: usize,
    flags: u32,
) -> isize {
    let how = match Prefetch::from_flags(flags) {
        Ok(how) => how,
        Err(e) => return e.to_errno() as isize,
    };
    // SAFETY: the caller passes a live region (the header's contract).
    let reg = unsafe { registration(region) };
    match reg.prefetch(addr, len, how) {
        Ok(n) => n as isize,
        Err(e) => e.to_errno() as isize,
    }
}

/// Queues a prefetch of a range as an asynchronous `ibv_advise_mr()` advice asks; see
/// `include/linux/vamr.h`.
#[no_mangle]
extern "C" fn vamr_region_prefetch_async(
    region: RawRegion,
    addr: usize,
    len: usize,
    flags: u32,
) -> i32 {
    let how = match Prefetch::from_flags(flags) {
        Ok(how) => how,
        Err(e) => return e.to_errno(),
    };
    // SAFETY: the caller passes a live region (the header's contract).
    let reg = unsafe { registration(region) };
    match reg.prefetch_async(addr, len, how) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// Stops every long operation on a region; see `include/linux/vamr.h`.
#[no_mangle]
extern "C" fn vamr_region_cancel(region: RawRegion) {
    // SAFETY: the caller passes a live region (the header's contract).
    unsafe { registration(region) }.cancel();
}

/// Counters of a region; see `include/linux/vamr.h`.
#[no_mangle]
extern "C" fn vamr_region_stats(region: RawRegion, out: *mut uapi::CountersRecord) {
    // SAFETY: the caller passes a live region and a writable `struct vamr_counters` (the
    // header's contract); `uapi::CountersRecord` has its layout (checked by the KUnit suite).
    unsafe { out.write(registration(region).stats.snapshot()) };
}
