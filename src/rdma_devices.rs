// SPDX-License-Identifier: GPL-2.0

//! RDMA devices that offer VA MRs, announced by their drivers (`vamr_device_add()`), each with
//! the driver's own MR lookup.
//!
//! A program lists the devices with `VAMR_IOC_DEVICE` before it registers (discovery), and finds
//! its own MR's region with `VAMR_IOC_MR_QUERY` by device and key. vamr keeps no table of a
//! device's regions: the driver indexes its MRs already (rxe: its MR pool, by the key's index
//! part), so the query asks it ([`Device::find_mr`], the driver's `find_mr`), and registering
//! or deregistering an MR touches nothing here. The answer is given only for the caller's
//! address space, and only when the region's key is the whole key asked for.
//!
//! # Why a query cannot reach a freed region or a removed driver
//!
//! - **Query vs. deregistration.** The driver's `find_mr` hands a region to [`visit`] while it
//!   holds the MR (rxe: `rxe_pool_get_index()` takes a reference on a live, finalized MR; its
//!   deregistration first erases the index, then waits for the last reference, and destroys the
//!   region in `rxe_mr_cleanup()` after that). The header's lifetime rule makes every driver
//!   promise the same. So during [`visit`] the driver's handle, and with it the registration's
//!   reference to the region (see [`crate::region::Registration`]), is live, and `visit` takes
//!   a reference of its own. The query then reads the region (range, counters) through that
//!   reference; a deregistration that runs meanwhile tears the region down (the memory stays
//!   until the query drops its reference, and a torn-down region's range and counters are
//!   still sound to read). The region's cookie (the key it was created with) and its mm are
//!   immutable, so the key and owner checks are not raced either.
//! - **Query vs. an index reused with another key byte.** The driver may find a new MR at the
//!   old index; its region's cookie is the new key, which differs from the asked key in the key
//!   byte: `ENOENT`, as for a missing MR.
//! - **Query vs. device removal.** A query clones the [`Device`] from [`DEVICES`], then calls
//!   `find_mr` only under the device's `lookup` lock and only while `lookup` is `Some`.
//!   [`Device::remove`] takes the device out of the list, then sets `lookup` to `None` under
//!   that lock: when it returns, no `find_mr` runs (it would hold the lock) and none starts
//!   (it finds `None`), so the driver may free its `priv`. A query that cloned the device
//!   before gets `ENOENT`.

use crate::region::Region;
use crate::uapi;
use core::ffi::{c_int, c_void};
use kernel::mm::Mm;
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::{Arc, ArcBorrow, Mutex};

/// The `visit` callback of a driver's `find_mr` (C: `void (*)(struct vamr_region *, void *)`).
pub(crate) type VisitFn = unsafe extern "C" fn(region: *mut c_void, arg: *mut c_void);

/// A driver's `find_mr` (`struct vamr_device_ops`, `include/linux/vamr.h`).
pub(crate) type FindMrFn =
    unsafe extern "C" fn(priv_: *mut c_void, key: u32, visit: VisitFn, arg: *mut c_void) -> c_int;

/// `struct vamr_device_ops`, as declared in `include/linux/vamr.h`.
#[repr(C)]
pub(crate) struct RawOps {
    pub(crate) find_mr: Option<FindMrFn>,
}

/// A driver's MR lookup: its `find_mr` and the `priv` to call it with.
///
/// # Invariants
///
/// `find_mr(priv_, ..)` may be called, from any thread, until the [`Device`] holding this
/// lookup is removed (the contract of `vamr_device_add()`).
struct Lookup {
    find_mr: FindMrFn,
    priv_: *mut c_void,
}

// SAFETY: the driver's contract (`vamr_device_add()`) lets vamr call `find_mr` with `priv_`
// from any process context, so the pair may move between threads.
unsafe impl Send for Lookup {}

/// An RDMA device whose driver offers VA MRs through vamr.
///
/// # Invariants
///
/// `name` is NUL-terminated (its last byte is 0). `lookup` is `Some` until [`Device::remove`];
/// once it is `None` it stays so.
#[pin_data]
pub(crate) struct Device {
    /// `struct ib_device.index`: the stable identifier of the device.
    ib_index: u32,
    /// The `ibv_reg_mr()` access flag that asks this device for VA semantics.
    access_va: u64,
    /// The device's name at announcement.
    name: [u8; uapi::DEVICE_NAME_MAX],
    /// The driver's MR lookup, `None` once the device is removed. Lock rules: held across one
    /// call of the driver's `find_mr` (by [`Device::find_mr`]) and by [`Device::remove`] to
    /// clear it, so that no call runs or starts once `remove` returned; nothing of vamr is
    /// taken under it but what the driver's `find_mr` and [`visit`] take (`visit` takes no
    /// lock); not taken by the registration, deregistration or invalidate paths. No region
    /// reference is dropped under it.
    #[pin]
    lookup: Mutex<Option<Lookup>>,
}

kernel::sync::global_lock! {
    // SAFETY: initialized by `init` in module init, before `/dev/vamr` exists and before any
    // symbol of the API can be called (consumers load after vamr.ko's init).
    unsafe(uninit) static DEVICES: Mutex<Option<KVec<Arc<Device>>>> = None;
}

/// Initializes the device list. Called once, from module init.
pub(crate) fn init() {
    // SAFETY: called once, at module init, before any use of the lock.
    unsafe { DEVICES.init() };
}

/// Frees the list at module exit (consumers, which remove their devices, unload first).
pub(crate) fn clear() {
    let old = DEVICES.lock().take();
    drop(old);
}

/// Takes a reference of vamr's own to the region a driver's `find_mr` found.
///
/// # Safety
///
/// `region` is NULL or a live region handle (from `vamr_region_create_on()`/`_create()`, not
/// destroyed, and not destroyed before this returns: the driver holds its MR, the header's
/// lifetime rule); `arg` is the `&mut Option<Arc<Region>>` that [`Device::find_mr`] passed,
/// not otherwise accessed during the call.
unsafe extern "C" fn visit(region: *mut c_void, arg: *mut c_void) {
    if region.is_null() || arg.is_null() {
        return;
    }
    // SAFETY: per the contract `region` is a handle of a live registration, which holds a
    // reference to the region (`Registration::into_raw`), so the count is not 0 during the call.
    let region = unsafe { ArcBorrow::<Region>::from_raw(region.cast::<Region>()) };
    // SAFETY: `arg` is the caller's `Option<Arc<Region>>`, exclusively ours during the call.
    let found = unsafe { &mut *arg.cast::<Option<Arc<Region>>>() };
    // A second call (a driver bug) keeps the first answer; nothing is dropped here.
    if found.is_none() {
        *found = Some(region.into());
    }
}

impl Device {
    /// Announces a device: `name` (at most [`uapi::DEVICE_NAME_MAX`] - 1 bytes are kept),
    /// `ib_index`, the access flag `access_va` that asks it for VA MRs, and the driver's MR
    /// lookup `find_mr`/`priv_`. Errors: `EEXIST` when a device with `ib_index` is announced
    /// already, `EINVAL` for an empty name or a zero `access_va`, `ENOMEM`. Process context;
    /// sleeps.
    ///
    /// # Safety
    ///
    /// `find_mr(priv_, ..)` may be called, from any process context, until [`Device::remove`]
    /// returns (the contract of `vamr_device_add()`).
    pub(crate) unsafe fn add(
        name: &[u8],
        ib_index: u32,
        access_va: u64,
        find_mr: FindMrFn,
        priv_: *mut c_void,
    ) -> Result<Arc<Device>> {
        if name.is_empty() || access_va == 0 {
            return Err(EINVAL);
        }
        let mut buf = [0u8; uapi::DEVICE_NAME_MAX];
        let n = name.len().min(buf.len() - 1);
        buf[..n].copy_from_slice(&name[..n]);
        // INVARIANT: at most `DEVICE_NAME_MAX - 1` bytes were copied into a zeroed array; the
        // lookup is valid until removal (the safety contract).
        let dev = Arc::pin_init(
            pin_init!(Device {
                ib_index,
                access_va,
                name: buf,
                lookup <- new_mutex!(Some(Lookup { find_mr, priv_ }), "vamr_device_lookup"),
            }),
            GFP_KERNEL,
        )?;
        let mut guard = DEVICES.lock();
        let list = guard.get_or_insert_with(KVec::new);
        if list.iter().any(|d| d.ib_index == ib_index) {
            return Err(EEXIST);
        }
        list.push(dev.clone(), GFP_KERNEL)?;
        Ok(dev)
    }

    /// Takes the device out of the list and forgets the driver's lookup: when it returns, the
    /// device is no longer listed, no call of its `find_mr` runs and none will start. Idempotent.
    /// Sleeps (waits for a `find_mr` call in progress).
    pub(crate) fn remove(this: &Arc<Device>) {
        let taken = {
            let mut guard = DEVICES.lock();
            guard.as_mut().and_then(|list| {
                let i = list.iter().position(|d| Arc::ptr_eq(d, this))?;
                list.remove(i).ok()
            })
        };
        // INVARIANT: `None` from now on; the lock waits for a `find_mr` in progress.
        *this.lookup.lock() = None;
        drop(taken);
    }

    /// The region the driver finds for `key` (its `find_mr`), with a reference of our own;
    /// `None` when the device is removed or the driver finds none. Not checked: whose region
    /// it is and its whole key (see [`find_region`]). Process context; sleeps (the lock).
    fn find_mr(&self, key: u32) -> Option<Arc<Region>> {
        let mut found: Option<Arc<Region>> = None;
        let rc = {
            let guard = self.lookup.lock();
            let l = guard.as_ref()?;
            // The device is not removed (`lookup` is `Some` under the lock that `remove` takes
            // to clear it), so calling `find_mr` with `priv_` is allowed (the `Lookup`
            // invariants); `visit` and `&mut found` keep `visit`'s contract: `found` is not
            // touched by anything else until the call returns.
            // SAFETY: as just said.
            unsafe { (l.find_mr)(l.priv_, key, visit, (&raw mut found).cast()) }
        };
        // Dropped after the lock, if the driver found one but failed anyway.
        if rc != 0 {
            return None;
        }
        found
    }
}

/// The region of `mm` that device `ib_index` has for MR key `key`, found through the driver's
/// own MR table. `None` for a missing device or MR, a region under another key (an index
/// reused with another key byte) and a region of another address space alike. O(number of
/// devices) plus the driver's lookup (rxe: an `XArray` load).
pub(crate) fn find_region(ib_index: u32, key: u32, mm: &Mm) -> Option<Arc<Region>> {
    let dev = {
        let guard = DEVICES.lock();
        guard
            .as_ref()?
            .iter()
            .find(|d| d.ib_index == ib_index)?
            .clone()
    };
    let region = dev.find_mr(key)?;
    // A driver region's cookie is its full key: another key byte is another (missing) MR.
    // The region reference, if refused, is dropped here, outside every lock.
    (region.cookie() == u64::from(key) && region.is_of(mm)).then_some(region)
}

/// The answer of `VAMR_IOC_DEVICE` for the device at position `pos`. Errors: `ENOENT` past
/// the last device.
pub(crate) fn info(pos: u32) -> Result<uapi::DeviceInfo> {
    let guard = DEVICES.lock();
    let dev = guard
        .as_ref()
        .and_then(|l| l.get(pos as usize))
        .ok_or(ENOENT)?;
    let mut out = uapi::DeviceInfo {
        pos,
        ib_index: dev.ib_index,
        access_va: dev.access_va,
        ..Default::default()
    };
    out.set_name(&dev.name);
    Ok(out)
}
