// SPDX-License-Identifier: GPL-2.0

//! RDMA devices that offer VA MRs, announced by their drivers (`vamr_device_add()`), each with
//! its driver regions by key.
//!
//! A program lists the devices with `VAMR_IOC_DEVICE` before it registers (discovery), and finds
//! its own MR's region with `VAMR_IOC_MR_QUERY` by device and key: one `XArray` lookup, O(1) in
//! the number of MRs, answered only for the caller's address space.

use crate::region::Region;
use crate::uapi;
use kernel::mm::Mm;
use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::xarray::{AllocKind, XArray};

/// An RDMA device whose driver offers VA MRs through vamr.
///
/// # Invariants
///
/// `name` is NUL-terminated (its last byte is 0).
#[pin_data]
pub(crate) struct Device {
    /// `struct ib_device.index`: the stable identifier of the device.
    ib_index: u32,
    /// The `ibv_reg_mr()` access flag that asks this device for VA semantics.
    access_va: u64,
    /// The device's name at announcement.
    name: [u8; uapi::DEVICE_NAME_MAX],
    /// The device's regions by the index part of their key ([`key_index`]). Lock rules: the XArray's own
    /// spinlock, held only to look up, store or erase one entry (storing may drop it to
    /// allocate); never taken by the invalidate path, and no region lock is taken under it.
    #[pin]
    regions: XArray<Arc<Region>>,
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

impl Device {
    /// Announces a device: `name` (at most [`uapi::DEVICE_NAME_MAX`] - 1 bytes are kept),
    /// `ib_index`, and the access flag `access_va` that asks it for VA MRs. Errors: `EEXIST`
    /// when a device with `ib_index` is announced already, `EINVAL` for an empty name or a zero
    /// `access_va`, `ENOMEM`. Process context; sleeps.
    pub(crate) fn add(name: &[u8], ib_index: u32, access_va: u64) -> Result<Arc<Device>> {
        if name.is_empty() || access_va == 0 {
            return Err(EINVAL);
        }
        let mut buf = [0u8; uapi::DEVICE_NAME_MAX];
        let n = name.len().min(buf.len() - 1);
        buf[..n].copy_from_slice(&name[..n]);
        // INVARIANT: at most `DEVICE_NAME_MAX - 1` bytes were copied into a zeroed array.
        let dev = Arc::pin_init(
            pin_init!(Device {
                ib_index,
                access_va,
                name: buf,
                regions <- XArray::new(AllocKind::Alloc),
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

    /// Takes the device out of the list: it is no longer listed, and its regions can no longer
    /// be found (the driver destroys them before it removes the device). Idempotent.
    pub(crate) fn remove(this: &Arc<Device>) {
        let taken = {
            let mut guard = DEVICES.lock();
            let Some(list) = guard.as_mut() else {
                return;
            };
            match list.iter().position(|d| Arc::ptr_eq(d, this)) {
                Some(i) => list.remove(i).ok(),
                None => None,
            }
        };
        drop(taken);
    }

    /// Lists `region` under `key` (at [`key_index`]). Errors: `EEXIST` when that index is
    /// taken (a driver bug: the index parts of live MRs' keys are unique per device),
    /// `ENOMEM`. Sleeps.
    pub(crate) fn insert(&self, key: u32, region: Arc<Region>) -> Result {
        let mut regions = self.regions.lock();
        if regions.get(key_index(key)).is_some() {
            return Err(EEXIST);
        }
        regions
            .store(key_index(key), region, GFP_KERNEL)
            .map(|_| ())
            .map_err(|e| e.error)
    }

    /// Unlists the region under `key` if it is `region`; returns the list's reference (to be
    /// dropped by the caller, outside any lock).
    pub(crate) fn erase(&self, key: u32, region: &Arc<Region>) -> Option<Arc<Region>> {
        let mut regions = self.regions.lock();
        match regions.get(key_index(key)) {
            Some(r) if core::ptr::eq(&*r, &**region) => regions.remove(key_index(key)),
            _ => None,
        }
    }
}

/// The region of `mm` that device `ib_index` listed under `key`. `None` for a missing device
/// or key and for a region of another address space alike. O(number of devices) + O(1).
pub(crate) fn find_region(ib_index: u32, key: u32, mm: &Mm) -> Option<Arc<Region>> {
    let dev = {
        let guard = DEVICES.lock();
        guard
            .as_ref()?
            .iter()
            .find(|d| d.ib_index == ib_index)?
            .clone()
    };
    let regions = dev.regions.lock();
    let region: Arc<Region> = regions.get(key_index(key))?.into();
    drop(regions);
    // A driver region's cookie is its full key: another key byte is another (missing) MR.
    (region.cookie() == u64::from(key) && region.is_of(mm)).then_some(region)
}

/// Where a device lists the region of MR key `key`: the key's index part, `key >> 8`. An IB
/// L_Key/R_Key is an index, unique among a device's live MRs, and an 8-bit key that the
/// consumer may change (IBTA: the low 8 bits; `ibv_inc_rkey()`); rxe builds its keys that way
/// (`index << 8 | key`). Indexing by the index part keeps the XArray dense for a driver that
/// hands out indexes in sequence, so registering and deregistering MRs reuses its nodes
/// instead of allocating and freeing one per MR.
fn key_index(key: u32) -> usize {
    (key >> 8) as usize
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
