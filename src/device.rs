// SPDX-License-Identifier: GPL-2.0

//! `/dev/vamr`: the misc device's file operations and ioctl dispatch.
//!
//! Each open file owns a table of regions, addressed by handles that are only meaningful on
//! that file. The regions belong to the address space that opened the file: ioctls that create
//! or use regions from another mm (a child after fork, a process the fd was passed to) fail
//! with `EPERM`.
//!
//! What a file holds counts for the file's address space and for the user who opened it
//! (`src/limits.rs`): the file itself and its event ring from `open()`, each region and each
//! watch from its creation, until each goes (at the latest when the file is released).

use crate::events::{self, EventQueue};
use crate::limits::{Charge, Object, User};
use crate::mm_state::MmRef;
use crate::region::{self, AtomicOp, Dir, Prefetch, Region, Registration};
use crate::stats;
use crate::uapi;
use crate::watch::{self, Generations, Watch, WatchGroup};
use kernel::fs::File;
use kernel::id_pool::IdPool;
use kernel::ioctl::_IOC_SIZE;
use kernel::miscdevice::{MiscDevice, MiscDeviceRegistration};
use kernel::mm::virt::VmaNew;
use kernel::mm::Mm;
use kernel::new_mutex;
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;
use kernel::rbtree::RBTree;
use kernel::sync::{aref::ARef, Arc, Mutex};
use kernel::uaccess::{UserPtr, UserSlice, UserSliceReader};

/// Most handles one open file may hand out (the per-process `max_regions_per_mm` limit is
/// usually lower).
const MAX_REGIONS: usize = 1 << 16;

/// An entry of a file's region table; the index is the handle.
enum Slot {
    /// A free handle.
    Free,
    /// Taken by a `VAMR_IOC_REGISTER` in progress (so its events carry the handle already).
    Reserved,
    /// A registered region.
    Live(Registration),
}

/// A file's region table: handles are indexes into `slots`, allocated from `ids`.
///
/// # Invariants
///
/// A handle's bit is set in `ids` exactly when `slots[handle]` is not [`Slot::Free`].
struct Table {
    slots: KVec<Slot>,
    ids: IdPool,
}

/// An entry of a file's watch table; the index is the slot.
enum WatchSlot {
    /// A free slot.
    Free,
    /// Taken by a `VAMR_IOC_WATCH` in progress.
    Reserved,
    /// A watch.
    Live(Arc<Watch>),
}

/// A file's watches, by slot (lowest free slot first), at most [`uapi::WATCH_MAX`], and the
/// groups they are members of, by range (`src/watch.rs`).
///
/// # Invariants
///
/// Each live watch in `slots` is a member of the group `groups` holds for its range, and is
/// counted by that entry's `users`, which also counts each `VAMR_IOC_WATCH` in progress that
/// joined the group; an entry with no user is removed.
struct Watches {
    slots: KVec<WatchSlot>,
    groups: RBTree<(usize, usize), GroupEntry>,
}

/// A group of a file's [`Watches`] and the count of its users.
struct GroupEntry {
    group: Arc<WatchGroup>,
    users: usize,
}

impl Watches {
    /// Joins the group over `[start, end)` if there is one (one more user).
    fn join_existing(&mut self, start: usize, end: usize) -> Option<Arc<WatchGroup>> {
        let entry = self.groups.get_mut(&(start, end))?;
        entry.users += 1;
        Some(entry.group.clone())
    }

    /// Leaves `group` (one user less); returns its entry's reference when that was the last
    /// user, for the caller to drop after the lock (the group's drop sleeps).
    fn leave(&mut self, group: &Arc<WatchGroup>) -> Option<Arc<WatchGroup>> {
        let key = group.range();
        let entry = self.groups.get_mut(&key)?;
        if !Arc::ptr_eq(&entry.group, group) {
            return None;
        }
        entry.users -= 1;
        if entry.users > 0 {
            return None;
        }
        self.groups.remove(&key).map(|e| e.group)
    }
}

impl Drop for Watches {
    /// Stops every watch (a watch is in its group's member list, which holds a reference to
    /// it, until stopped); the groups, and with them their notifiers, go after. Sleeps.
    fn drop(&mut self) {
        for slot in self.slots.iter() {
            if let WatchSlot::Live(w) = slot {
                w.stop();
            }
        }
    }
}

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
    /// Regions by handle (the index). Lock rules: held only to look up, reserve, insert or
    /// take out an entry; never across pinning, copies or region teardown (those sleep and take
    /// the region lock). Allocating under it is fine: the invalidate path never takes it.
    #[pin]
    regions: Mutex<Table>,
    /// Invalidation records of this file's regions and watches (read through events files).
    events: Arc<EventQueue>,
    /// Monitor-mode watches by slot. Lock rules: held only to look up, reserve, insert or take
    /// out an entry (allocating is fine); never across notifier insertion or removal (they take
    /// `mmap_lock`, and the mmap path takes `gens` under it).
    #[pin]
    watches: Mutex<Watches>,
    /// The generation counters of the watches, allocated by the first `VAMR_IOC_WATCH` or
    /// `mmap`, then never replaced or taken out: the counter mappings' VMAs point at them
    /// (see [`watch::map_counters`]). Lock rules: a leaf lock, taken under `mmap_lock` by
    /// `mmap`; allocates under it.
    #[pin]
    gens: Mutex<Option<Arc<Generations>>>,
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
        KBox::try_pin_init(
            try_pin_init!(VamrFile {
                mm: ARef::from(&**mm),
                user,
                charge,
                regions <- new_mutex!(
                    Table { slots: KVec::new(), ids: IdPool::new() },
                    "vamr_file_regions"
                ),
                events: EventQueue::new(Some(&**mm), Some(records))?,
                watches <- new_mutex!(
                    Watches { slots: KVec::new(), groups: RBTree::new() },
                    "vamr_file_watches"
                ),
                gens <- new_mutex!(None, "vamr_file_gens"),
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
        let gens = me.generations()?;
        // `gens` is the file's counters, kept by `me.gens` until the file is released (set once,
        // never replaced), and every part of `vma` holds a reference on this file (`vm_file`):
        // SAFETY: so `gens` outlives the mapping, as `map_counters` requires.
        unsafe { watch::map_counters(vma, &gens, pgoff) }
    }
}

impl VamrFile {
    /// The file's generation counters, allocated on first use. Errors: `ENOMEM`. May sleep.
    fn generations(&self) -> Result<Arc<Generations>> {
        let mut gens = self.gens.lock();
        if let Some(g) = gens.as_ref() {
            return Ok(g.clone());
        }
        let g = Generations::new()?;
        *gens = Some(g.clone());
        Ok(g)
    }

    /// The watch in `slot`. Errors: `ENOENT`.
    fn watch_of(&self, slot: u32) -> Result<Arc<Watch>> {
        let watches = self.watches.lock();
        match watches.slots.get(slot as usize) {
            Some(WatchSlot::Live(w)) => Ok(w.clone()),
            _ => Err(ENOENT),
        }
    }

    /// Reserves the lowest free slot. Errors: `ENOSPC` past [`uapi::WATCH_MAX`], `ENOMEM`.
    fn reserve_slot(&self) -> Result<usize> {
        let mut watches = self.watches.lock();
        let slot = match watches
            .slots
            .iter()
            .position(|s| matches!(s, WatchSlot::Free))
        {
            Some(slot) => slot,
            None if watches.slots.len() < uapi::WATCH_MAX => {
                watches.slots.push(WatchSlot::Free, GFP_KERNEL_ACCOUNT)?;
                watches.slots.len() - 1
            }
            None => return Err(ENOSPC),
        };
        watches.slots[slot] = WatchSlot::Reserved;
        Ok(slot)
    }

    /// The group of the file's watches over `[start, end)`, joined (one more user): the
    /// existing one, or a new one. Errors: `ENOMEM`. Process context, sleeps (a new group's
    /// notifier insertion may take `mmap_lock`: without the table lock).
    fn join(&self, start: usize, end: usize) -> Result<Arc<WatchGroup>> {
        if let Some(group) = self.watches.lock().join_existing(start, end) {
            return Ok(group);
        }
        let gens = self.generations()?;
        let group = WatchGroup::new(&self.mm, start, end, gens, self.events.clone())?;
        let mut watches = self.watches.lock();
        if let Some(existing) = watches.join_existing(start, end) {
            // Another thread made the group meanwhile: ours goes (after the lock).
            drop(watches);
            drop(group);
            return Ok(existing);
        }
        let entry = GroupEntry {
            group: group.clone(),
            users: 1,
        };
        watches
            .groups
            .try_create_and_insert((start, end), entry, GFP_KERNEL_ACCOUNT)?;
        Ok(group)
        // On error the table lock goes before the group.
    }

    /// Leaves `group` (see [`Watches::leave`]); a group left without a user goes after the
    /// table lock. Sleeps.
    fn leave(&self, group: &Arc<WatchGroup>) {
        let last = self.watches.lock().leave(group);
        drop(last);
    }

    /// A watch in `slot` over `[addr, end)` with `cookie`, holding `charge`: a member of the
    /// file's group of that range. Errors: `ENOMEM`. Sleeps.
    fn make_watch(
        &self,
        addr: usize,
        end: usize,
        cookie: u64,
        slot: usize,
        charge: Charge,
    ) -> Result<Arc<Watch>> {
        let group = self.join(addr, end)?;
        Watch::new(&group, cookie, slot, charge).inspect_err(|_| self.leave(&group))
    }

    /// Ends `watch` ([`Watch::stop`]) and leaves its group. Sleeps.
    fn end_watch(&self, watch: &Watch) {
        watch.stop();
        self.leave(watch.group());
    }

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
        let slot = self.reserve_slot()?;
        let made = self
            .make_watch(addr, end, req.cookie, slot, charge)
            .and_then(|w| {
                req.slot = slot as u32;
                // Publish the slot before the watch: a caller that cannot learn it never
                // used it.
                let published = w.sync().and_then(|g| {
                    req.generation = g;
                    writer.write(&req)
                });
                match published {
                    Ok(()) => Ok(w),
                    Err(e) => {
                        self.end_watch(&w);
                        Err(e)
                    }
                }
            });
        let mut watches = self.watches.lock();
        match made {
            Ok(w) => {
                watches.slots[slot] = WatchSlot::Live(w);
                Ok(0)
            }
            Err(e) => {
                watches.slots[slot] = WatchSlot::Free;
                Err(e)
            }
        }
        // On error the watch (if made) was ended and dropped, with its charge, before the
        // lock.
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
        let slot = req.handle as usize;
        let watch = {
            let mut watches = self.watches.lock();
            match watches.slots.get_mut(slot) {
                Some(s @ WatchSlot::Live(_)) => match core::mem::replace(s, WatchSlot::Reserved) {
                    WatchSlot::Live(w) => w,
                    _ => return Err(ENOENT),
                },
                _ => return Err(ENOENT),
            }
        };
        // The slot stays reserved until the watch has ended, even if a `VAMR_IOC_WATCH_SYNC`
        // on it still holds a reference: so no later watch of the slot sees a bump or a
        // record of this one. A group left without a watch goes outside the table lock.
        self.end_watch(&watch);
        self.watches.lock().slots[slot] = WatchSlot::Free;
        drop(watch);
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
        let w = self.watch_of(req.slot)?;
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
        let regions = self.regions.lock();
        match regions.slots.get(handle as usize) {
            Some(Slot::Live(reg)) => Ok(reg.region()),
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
        let handle = self.reserve_handle()?;
        req.handle = handle as u32;
        let events = Some(self.events.clone());
        let reg = Region::register(
            mm, &self.user, addr, len, access, req.cookie, req.handle, events,
        );
        // Publish the handle before the region: if the caller cannot learn it, nothing else
        // can have used it (the slot is reserved), so undoing is simple.
        let result = reg.and_then(|reg| writer.write(&req).map(|()| reg));
        let mut regions = self.regions.lock();
        match result {
            Ok(reg) => {
                regions.slots[handle] = Slot::Live(reg);
                Ok(0)
            }
            Err(e) => {
                regions.slots[handle] = Slot::Free;
                regions.ids.release_id(handle);
                Err(e)
            }
        }
        // On error the registration (if any) was dropped, and torn down, before the lock.
    }

    /// Reserves a free handle: the lowest free one, from the file's ID pool (binder's
    /// `IdPool` pattern: the bitmap grows outside the lock). Errors: `ENOSPC` past
    /// [`MAX_REGIONS`], `ENOMEM`.
    fn reserve_handle(&self) -> Result<usize> {
        let mut regions = self.regions.lock();
        loop {
            if let Some(id) = regions.ids.find_unused_id(0) {
                let id = id.as_usize();
                if id >= MAX_REGIONS {
                    return Err(ENOSPC);
                }
                while regions.slots.len() <= id {
                    regions.slots.push(Slot::Free, GFP_KERNEL_ACCOUNT)?;
                }
                // INVARIANT: the bit is set together with the slot leaving `Free`.
                regions.ids.find_unused_id(id).ok_or(ENOSPC)?.acquire();
                regions.slots[id] = Slot::Reserved;
                return Ok(id);
            }
            let request = regions.ids.grow_request().ok_or(ENOSPC)?;
            drop(regions);
            let resizer = request.realloc(GFP_KERNEL_ACCOUNT)?;
            regions = self.regions.lock();
            regions.ids.grow(resizer);
        }
    }

    /// `VAMR_IOC_UNREGISTER`. Tears the region down (unpins everything, returns the
    /// `pinned_vm` charge). Errors: `ENOENT`, `EINVAL` (flags), `EFAULT`, `EPERM` (other mm).
    fn unregister(&self, user: UserSlice) -> Result<isize> {
        let req: uapi::HandleArg = user.reader().read()?;
        if req.flags != 0 {
            return Err(EINVAL);
        }
        self.check_mm()?;
        let reg = {
            let mut regions = self.regions.lock();
            let h = req.handle as usize;
            match regions.slots.get_mut(h) {
                Some(slot @ Slot::Live(_)) => {
                    let live = core::mem::replace(slot, Slot::Free);
                    regions.ids.release_id(h);
                    live
                }
                _ => return Err(ENOENT),
            }
        };
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
