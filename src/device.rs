// SPDX-License-Identifier: GPL-2.0

//! `/dev/vamr`: the misc device's file operations and ioctl dispatch.
//!
//! Each open file owns a table of regions, addressed by handles that are only meaningful on
//! that file (`src/handles.rs`), and its monitor-mode watches (`src/watch/set.rs`). The regions belong to the address space that opened the file: ioctls that create
//! or use regions from another mm (a child after fork, a process the fd was passed to) fail
//! with `EPERM`.
//!
//! What a file holds counts for the file's address space and for the user who opened it
//! (`src/limits.rs`): the file itself and its event ring from `open()`, each region and each
//! watch from its creation, until each goes (at the latest when the file is released).

use crate::charge::Charge;
use crate::events::{self, EventQueue};
use crate::handles::HandleTable;
use crate::limits::{Object, User};
use crate::mm_state::MmRef;
use crate::region::{self, AtomicOp, Dir, Prefetch, Region, Registration};
use crate::stats;
use crate::uapi;
use crate::watch::{self, WatchSet};
use kernel::fs::File;
use kernel::ioctl::_IOC_SIZE;
use kernel::miscdevice::{MiscDevice, MiscDeviceRegistration};
use kernel::mm::virt::VmaNew;
use kernel::mm::Mm;
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;
use kernel::sync::{aref::ARef, Arc};
use kernel::uaccess::{UserPtr, UserSlice, UserSliceReader};

/// Most handles one open file may hand out (the per-process `max_regions_per_mm` limit is
/// usually lower).
const MAX_REGIONS: usize = 1 << 16;

/// State of one open file of `/dev/vamr`.
///
/// # Invariants
///
/// Every region in `regions` and every watch in `watches` was made in `mm`.
#[pin_data]
pub(crate) struct VamrFile {
    /// The opener's address space (`mmgrab`).
    mm: ARef<Mm>,
    /// The opener: every object of the file counts for this user.
    user: User,
    /// The file under `max_files_per_mm` and `max_files_per_user`; its [`MmRef`] is the one
    /// the file's other charges are taken on.
    charge: Charge,
    /// Regions by handle (see [`HandleTable`] for its lock rules: never held across pinning,
    /// copies or region teardown).
    #[pin]
    regions: HandleTable<Registration, MAX_REGIONS>,
    /// Invalidation records of this file's regions and watches (read through events files).
    events: Arc<EventQueue>,
    /// Monitor-mode watches by slot, their groups and their generation counters.
    #[pin]
    watches: WatchSet,
}

#[vtable]
impl MiscDevice for VamrFile {
    type Ptr = Pin<KBox<Self>>;

    /// Opens `/dev/vamr` for the caller's address space, counted for it and for the caller's
    /// user, with an event ring of `VAMR_EVENTS_RING_DEFAULT` records. Process context, may
    /// sleep. Errors: `EINVAL` for a task without an mm (kernel thread), `ENOSPC` (the
    /// process or the user has `max_files_per_mm` or `max_files_per_user` files open, or the
    /// ring would pass `max_event_records_per_mm` or `_per_user`), `ENOMEM`.
    fn open(_file: &File, _misc: &MiscDeviceRegistration<Self>) -> Result<Pin<KBox<Self>>> {
        let current = kernel::current!();
        let mm = current.mm().ok_or(EINVAL)?;
        let user = User::current()?;
        let mm_ref = MmRef::get(mm)?;
        let charge = Charge::take(&mm_ref, &user, Object::Files, 1)?;
        let records = Charge::take(&mm_ref, &user, Object::EventRecords, events::QUEUE_RECORDS)?;
        let queue = EventQueue::new(Some(&**mm), Some(records))?;
        KBox::try_pin_init(
            try_pin_init!(VamrFile {
                mm: ARef::from(&**mm),
                user,
                charge,
                regions <- HandleTable::new(c"vamr_file_regions", kernel::static_lock_class!()),
                events: queue.clone(),
                watches <- WatchSet::new(mm, queue),
            }),
            GFP_KERNEL_ACCOUNT,
        )
    }

    /// Releases the file: ends its regions and watches, then hangs its event queue up (its
    /// events files report `EPOLLHUP` and end once drained; blocked readers wake). Process
    /// context, sleeps.
    fn release(device: Pin<KBox<Self>>, _file: &File) {
        let events = device.events.clone();
        // No record is queued after this: the regions' and watches' notifiers are gone.
        drop(device);
        events.hang_up();
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
            uapi::IOC_DEVICE => me.device_info(user),
            uapi::IOC_EVENTS_OPEN_EX => me.events_open_ex(user),
            uapi::IOC_WATCH => me.watch(user),
            uapi::IOC_UNWATCH => me.unwatch(user),
            uapi::IOC_WATCH_SYNC => me.watch_sync(user),
            _ => Err(ENOTTY),
        }
    }

    /// Maps the generation counters of monitor mode, read-only: `[pgoff, pgoff + pages)` of
    /// the [`watch::GEN_PAGES`] counter pages ([`watch::map_counters`]: a page the process
    /// drops is mapped again at the next access). Called under `mmap_lock` (write); may sleep.
    ///
    /// Errors: `EACCES` (a writable mapping), `EINVAL` (offset or length past the counters),
    /// `EPERM` (another address space), `ENOMEM`.
    fn mmap(me: Pin<&VamrFile>, _file: &File, vma: &VmaNew) -> Result {
        me.check_mm()?;
        // Counters are data to load: neither writable nor executable, now or after mprotect.
        if vma.writable() || vma.executable() {
            return Err(EACCES);
        }
        // Cannot fail: the mapping is neither writable nor executable.
        vma.try_clear_maywrite()?;
        vma.try_clear_mayexec()?;
        let pages = (vma.end() - vma.start()) / PAGE_SIZE;
        // SAFETY: `vma` is a valid VMA being set up; `vm_pgoff` is a plain field set by mmap.
        let pgoff = unsafe { (*vma.as_ptr()).vm_pgoff };
        let last = pgoff.checked_add(pages).ok_or(EINVAL)?;
        if last > watch::GEN_PAGES {
            return Err(EINVAL);
        }
        let gens = me.watches.generations()?;
        // `gens` is the file's counters, kept by `me.watches` until the file is released (set
        // once, never replaced), and every part of `vma` holds a reference on this file
        // (`vm_file`):
        // SAFETY: so `gens` outlives the mapping, as `map_counters` requires.
        unsafe { watch::map_counters(vma, &gens, pgoff) }
    }
}

impl VamrFile {
    /// `VAMR_IOC_WATCH`. Errors: see `struct vamr_watch`; `ENOSPC` also past
    /// `max_watches_per_mm` or `max_watches_per_user`.
    fn watch(&self, user: UserSlice) -> Result<isize> {
        let (mut reader, mut writer) = user.reader_writer();
        let mut req: uapi::WatchArg = reader.read()?;
        if req.flags != 0 || req.slot != 0 || req.generation != 0 {
            return Err(EINVAL);
        }
        self.check_mm()?;
        let addr = usize::try_from(req.addr).map_err(|_| EINVAL)?;
        let len = usize::try_from(req.len).map_err(|_| EINVAL)?;
        let end = watch::check_range(addr, len)?;
        let charge = Charge::take(self.charge.mm(), &self.user, Object::Watches, 1)?;
        self.watches.add(addr, end, req.cookie, charge, |w| {
            // Below `WATCH_MAX`: fits in u32.
            req.slot = w.slot() as u32;
            req.generation = w.sync()?;
            writer.write(&req)
        })?;
        Ok(0)
    }

    /// `VAMR_IOC_UNWATCH`: ends the watch (no callback touches it once this returns) and
    /// bumps its counter once more. Errors: `ENOENT`, `EINVAL` (flags), `EFAULT`, `EPERM`
    /// (other mm).
    fn unwatch(&self, user: UserSlice) -> Result<isize> {
        let req: uapi::HandleArg = user.reader().read()?;
        if req.flags != 0 {
            return Err(EINVAL);
        }
        self.check_mm()?;
        self.watches.remove(req.handle as usize)?;
        Ok(0)
    }

    /// `VAMR_IOC_WATCH_SYNC`. Errors: see `struct vamr_watch_sync`.
    fn watch_sync(&self, user: UserSlice) -> Result<isize> {
        let (mut reader, mut writer) = user.reader_writer();
        let mut req: uapi::WatchSync = reader.read()?;
        if req.flags != 0 {
            return Err(EINVAL);
        }
        self.check_mm()?;
        let w = self.watches.get(req.slot as usize)?;
        debug_assert_eq!(w.slot(), req.slot as usize);
        req.generation = w.sync()?;
        writer.write(&req)?;
        Ok(0)
    }

    /// `VAMR_IOC_EVENTS_OPEN_EX`. Errors: see `struct vamr_events_open_ex`.
    fn events_open_ex(&self, user: UserSlice) -> Result<isize> {
        let (mut reader, mut writer) = user.reader_writer();
        let mut req: uapi::EventsOpenEx = reader.read()?;
        if req.flags & !(uapi::EVENTS_NONBLOCK | uapi::EVENTS_CLOEXEC) != 0
            || req.reserved != 0
            || req.ring as usize > uapi::EVENTS_RING_MAX
        {
            return Err(EINVAL);
        }
        self.check_mm()?;
        if req.ring != 0 {
            self.events.resize(req.ring as usize)?;
        }
        // At most EVENTS_RING_MAX: fits in u32.
        req.ring = self.events.size() as u32;
        let nonblock = req.flags & uapi::EVENTS_NONBLOCK != 0;
        let cloexec = req.flags & uapi::EVENTS_CLOEXEC != 0;
        self.events.open_file(nonblock, cloexec, |fd| {
            req.fd = fd;
            writer.write(&req)
        })?;
        Ok(0)
    }

    /// `EPERM` unless the caller runs in the opener's address space.
    fn check_mm(&self) -> Result {
        match kernel::current!().mm() {
            Some(mm) if core::ptr::eq(mm.as_raw(), self.mm.as_raw()) => Ok(()),
            _ => Err(EPERM),
        }
    }

    /// The region with `handle`, for a caller in the opener's address space: every operation
    /// on a region goes through here, so none can skip the mm rule. Errors: `EPERM` (another
    /// address space, checked first), `ENOENT` (no such handle).
    fn region_of_caller(&self, handle: u32) -> Result<Arc<Region>> {
        self.check_mm()?;
        self.regions.get(handle as usize, Registration::region)
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
        let handle = self.regions.reserve()?;
        // Below `MAX_REGIONS`: fits in u32.
        req.handle = handle.handle() as u32;
        let events = Some(self.events.clone());
        let reg = Region::register(
            mm, &self.user, addr, len, access, req.cookie, req.handle, events,
        );
        // Publish the handle before the region: if the caller cannot learn it, nothing else
        // can have used it (it is reserved), so undoing is simple.
        let reg = reg.and_then(|reg| writer.write(&req).map(|()| reg))?;
        handle.fill(reg);
        Ok(0)
        // On error the registration (if any) was dropped, and torn down, before the handle
        // was freed.
    }

    /// `VAMR_IOC_UNREGISTER`. Tears the region down (unpins everything, returns the
    /// `pinned_vm` charge). Errors: `ENOENT`, `EINVAL` (flags), `EFAULT`, `EPERM` (other mm).
    fn unregister(&self, user: UserSlice) -> Result<isize> {
        let req: uapi::HandleArg = user.reader().read()?;
        if req.flags != 0 {
            return Err(EINVAL);
        }
        self.check_mm()?;
        let reg = self.regions.take(req.handle as usize)?;
        // Teardown sleeps: outside the table lock.
        drop(reg);
        Ok(0)
    }

    /// `VAMR_IOC_ACCESS`: copies between the region and the caller's buffer, the way a device
    /// does. Errors: see `struct vamr_access`.
    fn access(&self, user: UserSlice) -> Result<isize> {
        let req: uapi::AccessArg = user.reader().read()?;
        let dir = match req.op {
            uapi::ACCESS_OP_READ => Dir::Read,
            uapi::ACCESS_OP_WRITE => Dir::Write,
            _ => return Err(EINVAL),
        };
        let region = self.region_of_caller(req.handle)?;
        let addr = usize::try_from(req.addr).map_err(|_| EINVAL)?;
        let len = usize::try_from(req.len).map_err(|_| EINVAL)?;
        let buf = usize::try_from(req.buf).map_err(|_| EFAULT)?;
        let buf = UserSlice::new(UserPtr::from_addr(buf), len);
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
        let mut req: uapi::AtomicArg = reader.read()?;
        let op = match req.op {
            uapi::ATOMIC_CMP_SWAP => AtomicOp::CmpSwap {
                compare: req.compare,
                swap: req.swap,
            },
            uapi::ATOMIC_FETCH_ADD => AtomicOp::FetchAdd { add: req.compare },
            uapi::ATOMIC_WRITE => AtomicOp::Write { value: req.swap },
            _ => return Err(EINVAL),
        };
        let region = self.region_of_caller(req.handle)?;
        let addr = usize::try_from(req.addr).map_err(|_| EINVAL)?;
        req.result = region.atomic(addr, op)?;
        writer.write(&req)?;
        Ok(0)
    }

    /// `VAMR_IOC_PREFETCH`. Errors: see `struct vamr_prefetch`.
    fn prefetch(&self, user: UserSlice) -> Result<isize> {
        let (mut reader, mut writer) = user.reader_writer();
        let mut req: uapi::PrefetchArg = reader.read()?;
        if req.reserved != 0 {
            return Err(EINVAL);
        }
        let how = Prefetch::from_flags(req.flags)?;
        let region = self.region_of_caller(req.handle)?;
        let addr = usize::try_from(req.addr).map_err(|_| EINVAL)?;
        let len = usize::try_from(req.len).map_err(|_| EINVAL)?;
        req.pages = u32::try_from(region.prefetch(addr, len, how)?).unwrap_or(u32::MAX);
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
        self.check_mm()?;
        let nonblock = req.flags & uapi::EVENTS_NONBLOCK != 0;
        let cloexec = req.flags & uapi::EVENTS_CLOEXEC != 0;
        // The reply goes out before the descriptor is installed: a caller that cannot learn
        // the descriptor gets no file.
        self.events.open_file(nonblock, cloexec, |fd| {
            req.fd = fd;
            writer.write(&req)
        })?;
        Ok(0)
    }

    /// `VAMR_IOC_MR_QUERY`: a driver's VA-semantics MR of the caller's process, by device and
    /// key. Errors: see `struct vamr_mr_query`.
    fn mr_query(&self, user: UserSlice) -> Result<isize> {
        let (mut reader, mut writer) = user.reader_writer();
        let mut req: uapi::MrQuery = reader.read()?;
        if req.flags != 0 || req.reserved != 0 {
            return Err(EINVAL);
        }
        let current = kernel::current!();
        let mm = current.mm().ok_or(ENOENT)?;
        let region = crate::rdma_devices::find_region(req.ib_index, req.key, mm).ok_or(ENOENT)?;
        let (addr, len) = region.range();
        req.addr = addr as u64;
        req.len = len as u64;
        req.counters = region.stats.snapshot();
        writer.write(&req)?;
        Ok(0)
    }

    /// `VAMR_IOC_DEVICE`: the RDMA devices that offer VA MRs. Errors: see
    /// `struct vamr_device_info`.
    fn device_info(&self, user: UserSlice) -> Result<isize> {
        let (mut reader, mut writer) = user.reader_writer();
        let req: uapi::DeviceInfo = reader.read()?;
        if req.flags != 0 {
            return Err(EINVAL);
        }
        writer.write(&crate::rdma_devices::info(req.pos)?)?;
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
            self.check_mm()?;
            req.generation = 0;
            req.counters = stats::global_snapshot();
        } else {
            let region = self.region_of_caller(req.handle)?;
            req.generation = region.generation();
            req.counters = region.stats.snapshot();
        }
        writer.write(&req)?;
        Ok(0)
    }
}
