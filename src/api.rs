// SPDX-License-Identifier: GPL-2.0

//! The in-kernel C API of `include/linux/vamr.h`, for RDMA drivers.
//!
//! Each function is a thin `extern "C"` shell over [`Region`]; `src/vamr_glue.c` exports them
//! with `EXPORT_SYMBOL_GPL`. A `struct vamr_region *` handed to C is a [`Registration`] in a
//! `KBox`: destroying it tears the region down. The contract of each function (context,
//! errors, units) is documented in the header.
//!
//! Regions made through this API are also listed in [`DRIVER_REGIONS`], so that a process can
//! ask (`VAMR_IOC_MR_QUERY`) whether its MR with a given key got VA semantics.

use crate::region::{AtomicOp, Prefetch, Region, Registration};
use crate::uapi;
use core::ffi::c_void;
use kernel::error::from_err_ptr;
use kernel::mm::Mm;
use kernel::prelude::*;
use kernel::rbtree::RBTree;
use kernel::sync::Arc;

/// Driver regions by cookie (the driver's MR key); a key may repeat across devices and
/// processes, so each entry holds the (few) regions with that key.
type Registry = RBTree<u64, KVec<Arc<Region>>>;

kernel::sync::global_lock! {
    // SAFETY: initialized by `init_registry` in module init, before `/dev/vamr` exists and
    // before any symbol of the API can be called (consumers load after vamr.ko's init).
    unsafe(uninit) static DRIVER_REGIONS: Mutex<Option<Registry>> = None;
}

/// Initializes [`DRIVER_REGIONS`]. Called once, from module init.
pub(crate) fn init_registry() {
    // SAFETY: called once, at module init, before any use of the lock.
    unsafe { DRIVER_REGIONS.init() };
}

/// The driver region of `mm` whose cookie (a driver's MR key) is `key`, if any. `O(log n)`
/// in the number of keys.
///
/// Lock rules of [`DRIVER_REGIONS`]: held only to add, remove or look up an entry; never taken
/// by the invalidate path, so allocating under it is fine.
pub(crate) fn find_driver_region(mm: &Mm, key: u32) -> Option<Arc<Region>> {
    let guard = DRIVER_REGIONS.lock();
    guard
        .as_ref()?
        .get(&u64::from(key))?
        .iter()
        .find(|r| r.is_of(mm))
        .cloned()
}

/// Frees the table at module exit (every region is gone by then: consumers unload first).
pub(crate) fn clear_registry() {
    let old = DRIVER_REGIONS.lock().take();
    drop(old);
}

/// Adds `region` to [`DRIVER_REGIONS`] under its cookie. Errors: `ENOMEM`.
fn registry_add(region: Arc<Region>) -> Result {
    let key = region.cookie();
    let mut guard = DRIVER_REGIONS.lock();
    let tree = guard.get_or_insert_with(RBTree::new);
    if let Some(list) = tree.get_mut(&key) {
        return list.push(region, GFP_KERNEL).map_err(Into::into);
    }
    let mut list = KVec::with_capacity(1, GFP_KERNEL)?;
    list.push(region, GFP_KERNEL)?;
    tree.try_create_and_insert(key, list, GFP_KERNEL)?;
    Ok(())
}

/// Takes `region` out of [`DRIVER_REGIONS`]; returns the registry's reference to it.
fn registry_remove(region: &Arc<Region>) -> Option<Arc<Region>> {
    let key = region.cookie();
    let mut guard = DRIVER_REGIONS.lock();
    let tree = guard.as_mut()?;
    let list = tree.get_mut(&key)?;
    let i = list.iter().position(|r| Arc::ptr_eq(r, region))?;
    let taken = list.remove(i).ok();
    if list.is_empty() {
        // The last region with this key: the entry goes.
        drop(tree.remove_node(&key));
    }
    taken
}

/// `struct vamr_region`, as seen from C: an opaque pointer to a boxed [`Registration`].
type RawRegion = *mut c_void;

/// Borrows the registration behind a C region pointer.
///
/// # Safety
///
/// `region` must come from [`vamr_region_create`] and not have been destroyed.
unsafe fn registration<'a>(region: RawRegion) -> &'a Registration {
    // SAFETY: per the contract, `region` is a live `KBox<Registration>` turned into a raw
    // pointer by `vamr_region_create`.
    unsafe { &*region.cast::<Registration>() }
}

/// Registers `[addr, addr + len)` of `current->mm`; see `include/linux/vamr.h`.
#[no_mangle]
extern "C" fn vamr_region_create(addr: usize, len: usize, access: u32, cookie: u64) -> RawRegion {
    let create = || -> Result<RawRegion> {
        if access & !uapi::ACCESS_KNOWN != 0 {
            return Err(EINVAL);
        }
        let current = kernel::current!();
        let mm = current.mm().ok_or(EFAULT)?;
        let write = access & uapi::ACCESS_WRITE != 0;
        let access = crate::region::Access { write };
        let reg = Region::register(mm, addr, len, access, cookie, 0, None)?;
        let region = reg.region();
        let boxed = KBox::new(reg, GFP_KERNEL)?;
        registry_add(region)?;
        Ok(KBox::into_raw(boxed).cast())
    };
    match create() {
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
            // SAFETY: `p` came from `KBox::into_raw` in `vamr_region_create`, and the caller
            // gives up its only reference; dropping the registration tears the region down.
            let reg = unsafe { KBox::from_raw(p.cast::<Registration>()) };
            let listed = registry_remove(&reg.region());
            // Teardown sleeps: after the registry lock is released.
            drop(reg);
            drop(listed);
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

/// Stops every long operation on a region; see `include/linux/vamr.h`.
#[no_mangle]
extern "C" fn vamr_region_cancel(region: RawRegion) {
    // SAFETY: the caller passes a live region (the header's contract).
    unsafe { registration(region) }.cancel();
}

/// Counters of a region; see `include/linux/vamr.h`.
#[no_mangle]
extern "C" fn vamr_region_stats(region: RawRegion, out: *mut uapi::Counters) {
    // SAFETY: the caller passes a live region and a writable `struct vamr_counters` (the
    // header's contract); `uapi::Counters` has its layout (checked by the KUnit suite).
    unsafe { out.write(registration(region).stats.snapshot()) };
}
