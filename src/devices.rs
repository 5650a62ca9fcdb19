// SPDX-License-Identifier: GPL-2.0

//! RDMA devices that offer VA MRs, announced by their drivers (`vamr_device_add()`), each with
//! its driver regions by key.
//!
//! A program lists the devices with `VAMR_IOC_DEVICE` before it registers (discovery), and finds
//! its own MR's region with `VAMR_IOC_MR_QUERY` by device and key: one hash-table lookup
//! ([`keys::KeyTable`]), O(1) in the number of MRs, answered only for the caller's address space.

use crate::region::Region;
use crate::uapi;
use kernel::mm::Mm;
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::{Arc, Mutex};

mod keys;
use keys::KeyTable;

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
    /// The device's regions by the index part of their key ([`key_index`]). Lock rules: held
    /// only to look up, insert or remove one entry (which may allocate with `GFP_KERNEL` when
    /// the table grows or shrinks); never taken by the invalidate path; no region lock is taken
    /// under it and no region reference is dropped under it.
    #[pin]
    regions: Mutex<KeyTable<Arc<Region>>>,
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
        let table = KeyTable::new()?;
        let dev = Arc::pin_init(
            pin_init!(Device {
                ib_index,
                access_va,
                name: buf,
                regions <- new_mutex!(table, "vamr_device_regions"),
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
        let res = self.regions.lock().insert(key_index(key), region);
        // A refused reference is dropped here, after the lock.
        res.map_err(|(e, _region)| e)
    }

    /// Unlists the region under `key` if it is `region`; returns the list's reference (to be
    /// dropped by the caller, outside any lock).
    pub(crate) fn erase(&self, key: u32, region: &Region) -> Option<Arc<Region>> {
        let mut regions = self.regions.lock();
        regions.remove(key_index(key), |r| core::ptr::eq(&**r, region))
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
    let region = dev.regions.lock().get(key_index(key))?.clone();
    // A driver region's cookie is its full key: another key byte is another (missing) MR.
    (region.cookie() == u64::from(key) && region.is_of(mm)).then_some(region)
}

/// Where a device lists the region of MR key `key`: the key's index part, `key >> 8`. An IB
/// L_Key/R_Key is an index, unique among a device's live MRs, and an 8-bit key that the
/// consumer may change (IBTA: the low 8 bits; `ibv_inc_rkey()`); rxe builds its keys that way
/// (`index << 8 | key`).
fn key_index(key: u32) -> u32 {
    key >> 8
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
