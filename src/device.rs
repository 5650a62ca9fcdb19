// SPDX-License-Identifier: GPL-2.0

//! `/dev/vamr`: the misc device's file operations and ioctl dispatch.
//!
//! Each open file owns a table of regions, addressed by handles that are only meaningful on
//! that file. The regions belong to the address space that opened the file: ioctls that create
//! or use regions from another mm (a child after fork, a process the fd was passed to) fail
//! with `EPERM`.

use crate::events::EventQueue;
use crate::region::{self, AtomicOp, Dir, Region, Registration};
use crate::stats;
use crate::uapi;
use kernel::fs::File;
use kernel::ioctl::_IOC_SIZE;
use kernel::miscdevice::{MiscDevice, MiscDeviceRegistration};
use kernel::mm::Mm;
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::{aref::ARef, Arc, Mutex};
use kernel::uaccess::{UserPtr, UserSlice, UserSliceReader};

/// Most regions one open file may hold.
const MAX_REGIONS: usize = 1 << 16;

/// State of one open file of `/dev/vamr`.
///
/// # Invariants
///
/// Every region in `regions` was registered in `mm`.
#[pin_data]
pub(crate) struct VamrFile {
    /// The opener's address space (`mmgrab`).
    mm: ARef<Mm>,
    /// Regions by handle (the index); `None` is a free handle. Lock rules: held only to look
    /// up, insert or take out an entry; never across pinning, copies or region teardown (those
    /// sleep and take the region lock). Allocating under it is fine: the invalidate path never
    /// takes it.
    #[pin]
    regions: Mutex<KVec<Option<Registration>>>,
    /// Invalidation records of this file's regions (read through events files).
    events: Arc<EventQueue>,
}

#[vtable]
impl MiscDevice for VamrFile {
    type Ptr = Pin<KBox<Self>>;

    /// Opens `/dev/vamr` for the caller's address space. Process context, may sleep.
    /// Errors: `EINVAL` for a task without an mm (kernel thread), `ENOMEM`.
    fn open(_file: &File, _misc: &MiscDeviceRegistration<Self>) -> Result<Pin<KBox<Self>>> {
        let current = kernel::current!();
        let mm = current.mm().ok_or(EINVAL)?;
        KBox::try_pin_init(
            try_pin_init!(VamrFile {
                mm: ARef::from(&**mm),
                regions <- new_mutex!(KVec::new(), "vamr_file_regions"),
                events: EventQueue::new()?,
            }),
            GFP_KERNEL,
        )
    }

    /// Dispatches an ioctl. Process context, may sleep.
    ///
    /// Errors: `ENOTTY` for an unknown command, otherwise those of the command (see
    /// `include/uapi/misc/vamr.h`).
    fn ioctl(me: Pin<&VamrFile>, _file: &File, cmd: u32, arg: usize) -> Result<isize> {
        let user = UserSlice::new(UserPtr::from_addr(arg), _IOC_SIZE(cmd));
        match cmd {
            uapi::IOC_QUERY => me.query(user),
            uapi::IOC_REGISTER => me.register(user),
            uapi::IOC_UNREGISTER => me.unregister(user),
            uapi::IOC_ACCESS => me.access(user),
            uapi::IOC_ATOMIC => me.atomic(user),
            uapi::IOC_PREFETCH => me.prefetch(user),
            uapi::IOC_STATS => me.stats(user),
            uapi::IOC_EVENTS_OPEN => me.events_open(user),
            uapi::IOC_MR_QUERY => me.mr_query(user),
            _ => Err(ENOTTY),
        }
    }
}

impl VamrFile {
    /// `EPERM` unless the caller runs in the opener's address space.
    fn check_mm(&self) -> Result {
        match kernel::current!().mm() {
            Some(mm) if core::ptr::eq(mm.as_raw(), self.mm.as_raw()) => Ok(()),
            _ => Err(EPERM),
        }
    }

    /// The region with `handle`. Errors: `ENOENT`.
    fn lookup(&self, handle: u32) -> Result<Arc<Region>> {
        let regions = self.regions.lock();
        match regions.get(handle as usize) {
            Some(Some(reg)) => Ok(reg.region()),
            _ => Err(ENOENT),
        }
    }

    /// `VAMR_IOC_QUERY`. Errors: `EFAULT`, `EINVAL` (see [`uapi::Query::answer`]).
    fn query(&self, user: UserSlice) -> Result<isize> {
        let (mut reader, mut writer) = user.reader_writer();
        let request: uapi::Query = reader.read()?;
        writer.write(&uapi::Query::answer(&request)?)?;
        Ok(0)
    }

    /// `VAMR_IOC_REGISTER`. Errors: see `struct vamr_register`; `ENOSPC` past [`MAX_REGIONS`].
    fn register(&self, user: UserSlice) -> Result<isize> {
        let (mut reader, mut writer) = user.reader_writer();
        let mut req: uapi::Register = reader.read()?;
        if req.flags != 0 || req.reserved != 0 || req.access & !uapi::ACCESS_KNOWN != 0 {
            return Err(EINVAL);
        }
        self.check_mm()?;
        let current = kernel::current!();
        let mm = current.mm().ok_or(EPERM)?;
        let addr = usize::try_from(req.addr).map_err(|_| EINVAL)?;
        let len = usize::try_from(req.len).map_err(|_| EINVAL)?;
        let access = region::Access {
            write: req.access & uapi::ACCESS_WRITE != 0,
        };
        let reg = Region::register(mm, addr, len, access, req.cookie, Some(self.events.clone()))?;

        let handle = {
            let mut regions = self.regions.lock();
            let handle = match regions.iter().position(|r| r.is_none()) {
                Some(free) => {
                    regions[free] = Some(reg);
                    free
                }
                None if regions.len() < MAX_REGIONS => {
                    if let Err(e) = regions.reserve(1, GFP_KERNEL) {
                        drop(regions);
                        drop(reg);
                        return Err(e.into());
                    }
                    // Cannot fail: room was reserved.
                    let _ = regions.push_within_capacity(Some(reg));
                    regions.len() - 1
                }
                None => {
                    drop(regions);
                    drop(reg);
                    return Err(ENOSPC);
                }
            };
            handle
        };
        req.handle = handle as u32;
        if let Some(Some(reg)) = self.regions.lock().get(handle) {
            reg.set_handle(req.handle);
        }
        if let Err(e) = writer.write(&req) {
            // The caller cannot learn the handle: undo.
            let reg = self.regions.lock()[handle].take();
            drop(reg);
            return Err(e);
        }
        Ok(0)
    }

    /// `VAMR_IOC_UNREGISTER`. Tears the region down (unpins everything, returns the
    /// `pinned_vm` charge). Errors: `ENOENT`, `EINVAL` (flags), `EFAULT`.
    fn unregister(&self, user: UserSlice) -> Result<isize> {
        let req: uapi::HandleArg = user.reader().read()?;
        if req.flags != 0 {
            return Err(EINVAL);
        }
        let reg = {
            let mut regions = self.regions.lock();
            match regions.get_mut(req.handle as usize) {
                Some(slot) => slot.take().ok_or(ENOENT)?,
                None => return Err(ENOENT),
            }
        };
        // Teardown sleeps: outside the table lock.
        drop(reg);
        Ok(0)
    }

    /// `VAMR_IOC_ACCESS`: copies between the region and the caller's buffer, the way a device
    /// does. Errors: see `struct vamr_access`.
    fn access(&self, user: UserSlice) -> Result<isize> {
        let req: uapi::Access = user.reader().read()?;
        let dir = match req.op {
            uapi::ACCESS_OP_READ => Dir::Read,
            uapi::ACCESS_OP_WRITE => Dir::Write,
            _ => return Err(EINVAL),
        };
        self.check_mm()?;
        let region = self.lookup(req.handle)?;
        let addr = usize::try_from(req.addr).map_err(|_| EINVAL)?;
        let len = usize::try_from(req.len).map_err(|_| EINVAL)?;
        let buf = UserSlice::new(UserPtr::from_addr(req.buf as usize), len);
        match dir {
            Dir::Read => {
                let mut writer = buf.writer();
                region.copy_bounced(addr, len, dir, |chunk| writer.write_slice(chunk))?;
            }
            Dir::Write => {
                let mut reader: UserSliceReader = buf.reader();
                region.copy_bounced(addr, len, dir, |chunk| reader.read_slice(chunk))?;
            }
        }
        Ok(0)
    }

    /// `VAMR_IOC_ATOMIC`. Errors: see `struct vamr_atomic`.
    fn atomic(&self, user: UserSlice) -> Result<isize> {
        let (mut reader, mut writer) = user.reader_writer();
        let mut req: uapi::Atomic = reader.read()?;
        let op = match req.op {
            uapi::ATOMIC_CMP_SWAP => AtomicOp::CmpSwap {
                compare: req.compare,
                swap: req.swap,
            },
            uapi::ATOMIC_FETCH_ADD => AtomicOp::FetchAdd { add: req.compare },
            uapi::ATOMIC_WRITE => AtomicOp::Write { value: req.swap },
            _ => return Err(EINVAL),
        };
        self.check_mm()?;
        let region = self.lookup(req.handle)?;
        let addr = usize::try_from(req.addr).map_err(|_| EINVAL)?;
        req.result = region.atomic(addr, op)?;
        writer.write(&req)?;
        Ok(0)
    }

    /// `VAMR_IOC_PREFETCH`. Errors: see `struct vamr_prefetch`.
    fn prefetch(&self, user: UserSlice) -> Result<isize> {
        let (mut reader, mut writer) = user.reader_writer();
        let mut req: uapi::Prefetch = reader.read()?;
        if req.flags != 0 || req.reserved != 0 {
            return Err(EINVAL);
        }
        self.check_mm()?;
        let region = self.lookup(req.handle)?;
        let addr = usize::try_from(req.addr).map_err(|_| EINVAL)?;
        let len = usize::try_from(req.len).map_err(|_| EINVAL)?;
        req.pages = region.prefetch(addr, len)? as u32;
        writer.write(&req)?;
        Ok(0)
    }

    /// `VAMR_IOC_EVENTS_OPEN`. Errors: see `struct vamr_events_open`.
    fn events_open(&self, user: UserSlice) -> Result<isize> {
        let (mut reader, mut writer) = user.reader_writer();
        let mut req: uapi::EventsOpen = reader.read()?;
        if req.flags & !(uapi::EVENTS_NONBLOCK | uapi::EVENTS_CLOEXEC) != 0 {
            return Err(EINVAL);
        }
        let nonblock = req.flags & uapi::EVENTS_NONBLOCK != 0;
        let cloexec = req.flags & uapi::EVENTS_CLOEXEC != 0;
        req.fd = self.events.open_file(nonblock, cloexec)?;
        // The descriptor is installed; if the reply cannot be written the caller still owns it
        // (as with any fd-returning call whose result copy fails).
        writer.write(&req)?;
        Ok(0)
    }

    /// `VAMR_IOC_MR_QUERY`: a driver's VA-semantics MR of the caller's process, by key.
    /// Errors: see `struct vamr_mr_query`.
    fn mr_query(&self, user: UserSlice) -> Result<isize> {
        let (mut reader, mut writer) = user.reader_writer();
        let mut req: uapi::MrQuery = reader.read()?;
        if req.flags != 0 {
            return Err(EINVAL);
        }
        let current = kernel::current!();
        let mm = current.mm().ok_or(ENOENT)?;
        let region = crate::api::find_driver_region(mm, req.key).ok_or(ENOENT)?;
        let (addr, len) = region.range();
        req.addr = addr as u64;
        req.len = len as u64;
        req.counters = region.stats.snapshot();
        writer.write(&req)?;
        Ok(0)
    }

    /// `VAMR_IOC_STATS`. Errors: see `struct vamr_stats`.
    fn stats(&self, user: UserSlice) -> Result<isize> {
        let (mut reader, mut writer) = user.reader_writer();
        let mut req: uapi::Stats = reader.read()?;
        if req.flags != 0 {
            return Err(EINVAL);
        }
        if req.handle == uapi::STATS_GLOBAL {
            req.generation = 0;
            req.counters = stats::GLOBAL.snapshot();
        } else {
            let region = self.lookup(req.handle)?;
            req.generation = region.generation();
            req.counters = region.stats.snapshot();
        }
        writer.write(&req)?;
        Ok(0)
    }
}
