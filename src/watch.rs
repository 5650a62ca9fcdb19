// SPDX-License-Identifier: GPL-2.0

//! Monitor mode: watches over VA ranges that pin nothing, with generation counters a process
//! maps read-only.
//!
//! A [`Watch`] watches a byte range of the opener's address space. When the mapping under the
//! range changes ([`counts`]), an invalidate callback bumps the watch's `u64` counter in the
//! file's [`Generations`] pages, then queues a `VAMR_EVENT_WATCH` record on the file's events
//! ring. User space maps the pages read-only (`mmap` of `/dev/vamr`, see `device.rs`) and
//! checks a cached MR with one load.
//!
//! Bounded cost. The watches of one file over the same range are the members of one
//! [`WatchGroup`], which owns the one `mmu_interval_notifier` of that range: one invalidation
//! calls one callback per group that overlaps it, whatever the number of watches, and that
//! callback does one atomic add per member and queues their records as one batch, writing at
//! most the room left in the ring (the rest count as lost, in one step). A process has at most
//! `max_watches_per_mm` watches (`src/limits.rs`), hence at most that many groups; together
//! with `max_regions_per_mm` this bounds the callbacks one invalidation of the process runs.
//!
//! Which invalidations count. A registration cache of *normal* (pinned) MRs must drop an MR
//! when the page at an address of it may no longer be the page the MR pinned. kdreg2 (the
//! libfabric cache monitor) and the 2009 ummunotify proposal report every invalidation of the
//! range, whatever its reason (mmu notifiers had no event kinds in 2009; kdreg2's
//! `invalidate_range_end` does not look at `range->event`). Since kernel 4.19 the event kind
//! tells more: `UNMAP`, `CLEAR` (MADV_DONTNEED, COW, swap-out, migration, THP collapse, KSM),
//! `MIGRATE` (device memory) and `RELEASE` can leave another page (or none) at the address, so
//! they count. `PROTECTION_VMA` (mprotect), `PROTECTION_PAGE` (fork's COW set-up, KSM's
//! write-protect step), `SOFT_DIRTY` and `EXCLUSIVE` keep the page mapped where it was, so an
//! MR over it stays right; reporting them (as kdreg2 does) only costs a re-registration, and
//! after mprotect(PROT_READ) a re-registration with write access would even fail. A page a
//! long-term pin holds is not replaced without one of the counted events (KSM and fork leave
//! pinned pages alone; a migration is a `CLEAR` first).
//!
//! Nothing of vamr causes events: a watch pins nothing and faults nothing in.

use crate::charge::Charge;
use crate::events::EventQueue;
use crate::ffi;
use crate::notifier::{
    impl_has_interval_notifier, Event, IntervalNotifier, InvalidateHandler, Range, SeqToken,
};
use crate::uapi;
use kernel::bindings;
use kernel::list::{List, ListArc, ListLinks};
use kernel::mm::virt::{VmaMixedMap, VmaNew};
use kernel::mm::Mm;
use kernel::new_spinlock;
use kernel::page::{Page, PAGE_SIZE};
use kernel::prelude::*;
use kernel::sync::atomic::{Acquire, Atomic, Full};
use kernel::sync::{aref::ARef, Arc, SpinLock};

mod set;
pub(crate) use set::WatchSet;

/// Pages of the generation counters (one `u64` per slot, [`uapi::WATCH_MAX`] slots).
pub(crate) const GEN_PAGES: usize = uapi::WATCH_MAP_LEN.div_ceil(PAGE_SIZE);

/// Counters per page.
const PER_PAGE: usize = PAGE_SIZE / 8;

/// Whether an invalidation of kind `event` changes the mapping for monitor mode (see the module
/// documentation for the choice and its sources).
pub(crate) fn counts(event: Event) -> bool {
    matches!(
        event,
        Event::Unmap | Event::Clear | Event::Migrate | Event::Release
    )
}

/// The generation counters of one `/dev/vamr` file: [`GEN_PAGES`] zeroed pages, mapped
/// read-only into the opener's address space and written only by the kernel.
///
/// # Invariants
///
/// `addrs[i]` is the kernel address (`page_address`) of `pages[i]`, a lowmem page owned by
/// `pages` for the life of `self`, and `addrs.len() == pages.len() == GEN_PAGES`.
pub(crate) struct Generations {
    pages: KVec<Page>,
    addrs: KVec<usize>,
}

impl Generations {
    /// Allocates zeroed counter pages, charged to the caller's memory cgroup. Errors: `ENOMEM`.
    /// May sleep.
    pub(crate) fn new() -> Result<Arc<Self>> {
        let mut pages = KVec::with_capacity(GEN_PAGES, GFP_KERNEL_ACCOUNT)?;
        let mut addrs = KVec::with_capacity(GEN_PAGES, GFP_KERNEL_ACCOUNT)?;
        for _ in 0..GEN_PAGES {
            // No __GFP_HIGHMEM: the page has a permanent kernel address.
            let page = Page::alloc_page(GFP_KERNEL_ACCOUNT | __GFP_ZERO)?;
            // SAFETY: `page` is a valid, allocated lowmem page.
            let addr = unsafe { ffi::vamr_page_address(page.as_ptr()) } as usize;
            pages.push(page, GFP_KERNEL_ACCOUNT)?;
            addrs.push(addr, GFP_KERNEL_ACCOUNT)?;
        }
        // INVARIANT: every page has its address at the same index.
        Ok(Arc::new(Generations { pages, addrs }, GFP_KERNEL_ACCOUNT)?)
    }

    /// The counter of `slot` (< [`uapi::WATCH_MAX`], else panics on the index).
    fn counter(&self, slot: usize) -> &Atomic<u64> {
        let base = self.addrs[slot / PER_PAGE];
        let ptr = (base + (slot % PER_PAGE) * 8) as *mut u64;
        // The page is only accessed atomically by the kernel (user space maps it read-only).
        // SAFETY: `ptr` is 8-byte aligned in a page `self` owns (type invariant): valid as long.
        unsafe { Atomic::from_ptr(ptr) }
    }

    /// The counter of `slot` now (acquire).
    pub(crate) fn load(&self, slot: usize) -> u64 {
        self.counter(slot).load(Acquire)
    }

    /// Adds one to the counter of `slot`, fully ordered: the new value is visible before any
    /// later store of this CPU (the page-table change that follows the invalidate callback).
    /// Any context.
    pub(crate) fn bump(&self, slot: usize) {
        self.counter(slot).fetch_add(1u64, Full);
    }

    /// The page at `index` (< [`GEN_PAGES`]).
    pub(crate) fn page(&self, index: usize) -> Option<&Page> {
        self.pages.get(index)
    }
}

/// The VMA operations of a counter mapping: a `fault` handler, nothing else.
///
/// # Invariants
///
/// Holds only function pointers (`uffd_ops` is null) and is never written.
#[repr(transparent)]
struct CounterVmOps(bindings::vm_operations_struct);

// SAFETY: an immutable table of function pointers (and a null pointer): nothing to race on.
unsafe impl Sync for CounterVmOps {}

/// `vm_ops` of every counter mapping.
static COUNTER_VM_OPS: CounterVmOps = CounterVmOps(bindings::vm_operations_struct {
    fault: Some(counter_fault),
    ..pin_init::zeroed()
});

/// Makes `vma`, being set up by `mmap` of a `/dev/vamr` file at page offset `pgoff`, a
/// read-only mapping of the counter pages `[pgoff, pgoff + pages)` of `gens` (`pages` is the
/// VMA's length), and maps them. The caller checked the protections and the range.
///
/// What the process can do to it: `mremap` moves it but cannot grow it (`VM_DONTEXPAND`:
/// `EFAULT`); a child of `fork` does not get it (`VM_DONTCOPY`, and `VM_MIXEDMAP` is
/// `VM_SPECIAL`, so `MADV_DOFORK` is `EINVAL`); a page it drops (`MADV_DONTNEED`, also
/// `MADV_DONTNEED_LOCKED`) is mapped again by [`counter_fault`] at the next access. Moves and
/// splits (`munmap` or `mremap` of a part) keep each page's file offset, so every part keeps
/// showing its own counters.
///
/// Errors: `EINVAL` (past the counters), `ENOMEM`. Under `mmap_lock` (write); may sleep.
///
/// # Safety
///
/// `gens` must stay alive (and at the same address) until the file that `vma` maps is released:
/// the VMA and every part of it hold a reference on that file, so none of them exists then.
pub(crate) unsafe fn map_counters(vma: &VmaNew, gens: &Arc<Generations>, pgoff: usize) -> Result {
    let pages = (vma.end() - vma.start()) / PAGE_SIZE;
    vma.set_dontexpand();
    vma.set_dontcopy();
    let raw = vma.as_ptr();
    // What `counter_fault` requires: the table is static, and `gens` outlives every part of
    // SAFETY: the VMA (the caller's guarantee); `f_op->mmap` may set `vm_ops`, `vm_private_data`.
    unsafe {
        (*raw).vm_ops = &COUNTER_VM_OPS.0;
        (*raw).vm_private_data = Arc::as_ptr(gens).cast_mut().cast();
    }
    let vma = vma.set_mixedmap();
    for i in 0..pages {
        let page = gens.page(pgoff + i).ok_or(EINVAL)?;
        vma.vm_insert_page(vma.start() + i * PAGE_SIZE, page)?;
    }
    Ok(())
}

/// `vm_operations_struct.fault` of a counter mapping: maps the counter page at the faulting
/// page offset again (after the process dropped it), read-only like the rest of the VMA.
///
/// Returns `VM_FAULT_NOPAGE` once the page is mapped (also when a racing fault mapped it
/// first), `VM_FAULT_OOM` if no page table could be allocated, `VM_FAULT_SIGBUS` for an offset
/// past the counters (not reachable: [`map_counters`]' caller checked the range, and the VMA
/// cannot grow). Context: the fault path or GUP, with `mmap_lock` or the VMA's lock held for
/// reading (without `map_pages`, a fault under the VMA lock is retried under `mmap_lock`);
/// takes the page-table lock, allocates page tables (may sleep).
///
/// # Safety
///
/// `vmf` is a fault on a VMA that [`map_counters`] set up, as the fault path passes it.
unsafe extern "C" fn counter_fault(vmf: *mut bindings::vm_fault) -> bindings::vm_fault_t {
    // SAFETY: `vmf` is valid for the call (the caller's guarantee); the fault path sets these
    // fields before calling the handler and does not change them during it.
    let (raw, pgoff, address) = unsafe {
        let f = &(*vmf).__bindgen_anon_1;
        (f.vma, f.pgoff, f.address)
    };
    // SAFETY: `raw` is a counter VMA, valid and locked for the call; `map_counters` set its
    // `vm_private_data` to counters that outlive it.
    let gens = unsafe { &*(*raw).vm_private_data.cast::<Generations>() };
    let Some(page) = gens.page(pgoff) else {
        return bindings::vm_fault_reason_VM_FAULT_SIGBUS;
    };
    // `VM_MIXEDMAP` stays set (`mprotect` and `madvise` keep `VM_SPECIAL` flags), so
    // SAFETY: `map_counters` set it; the fault path holds the VMA's or `mmap_lock` until we return.
    let vma = unsafe { VmaMixedMap::from_raw(raw) };
    match vma.vm_insert_page(address, page) {
        Ok(()) => bindings::vm_fault_reason_VM_FAULT_NOPAGE,
        // A racing fault mapped the page first.
        Err(e) if e == EBUSY => bindings::vm_fault_reason_VM_FAULT_NOPAGE,
        Err(e) if e == ENOMEM => bindings::vm_fault_reason_VM_FAULT_OOM,
        Err(_) => bindings::vm_fault_reason_VM_FAULT_SIGBUS,
    }
}

/// Checks a watch's range `[addr, addr + len)` and returns its end. Errors: `EINVAL` (len 0 or
/// overflow), `EFAULT` (past `TASK_SIZE`).
pub(crate) fn check_range(addr: usize, len: usize) -> Result<usize> {
    let end = addr.checked_add(len).ok_or(EINVAL)?;
    if len == 0 {
        return Err(EINVAL);
    }
    // SAFETY: no preconditions.
    if end > unsafe { ffi::vamr_task_size() } {
        return Err(EFAULT);
    }
    Ok(end)
}

/// The watches of one file over one byte range `[start, end)`: one interval notifier for all
/// of them, so that an invalidation calls one callback per group, not per watch. The callback
/// bumps the counter of every member and queues their records as one batch
/// ([`EventQueue::push_many`], which writes at most the ring's room).
///
/// # Invariants
///
/// `notifier` is inserted over `[start, end)` from [`WatchGroup::new`] until drop. `members`
/// holds the watches of the group that have not been stopped, `count` of them; each is a
/// watch of this group (its `group` is `self`).
#[pin_data(PinnedDrop)]
pub(crate) struct WatchGroup {
    #[pin]
    notifier: IntervalNotifier<WatchGroup>,
    /// Orders `set_seq` and the counter bumps (invalidate) against [`Watch::sync`]'s read, and
    /// guards the member list. Lock rules: a spinlock taken in the invalidate callback; held
    /// around `set_seq`, the bumps and the batch of records (the ring's lock is taken under
    /// it), a member's insertion or removal, and the read in `sync`; no allocation under it.
    #[pin]
    members: SpinLock<Members>,
    start: usize,
    end: usize,
    gens: Arc<Generations>,
    events: Arc<EventQueue>,
}

/// The live watches of a group.
struct Members {
    list: List<Watch>,
    count: usize,
}

impl_has_interval_notifier! {
    impl HasIntervalNotifier for WatchGroup { self.notifier }
}

impl WatchGroup {
    /// A group over `[start, end)` of `mm` (checked by [`check_range`]), with no member yet;
    /// inserts its notifier.
    ///
    /// Errors: `ENOMEM`. Process context, may sleep; takes `mmap_lock` for writing if `mm` has
    /// no notifier yet, so the caller must not hold a lock that the mmap path takes.
    pub(crate) fn new(
        mm: &Mm,
        start: usize,
        end: usize,
        gens: Arc<Generations>,
        events: Arc<EventQueue>,
    ) -> Result<Arc<WatchGroup>> {
        let group = Arc::pin_init(
            pin_init!(WatchGroup {
                notifier <- IntervalNotifier::new(ARef::from(mm)),
                members <- new_spinlock!(
                    Members { list: List::new(), count: 0 },
                    "vamr_watch_group"
                ),
                start,
                end,
                gens,
                events,
            }),
            GFP_KERNEL_ACCOUNT,
        )?;
        // SAFETY: `notifier` is the `HasIntervalNotifier` field of `group`, pinned in the
        // `Arc`; the drop of `WatchGroup` removes it before the memory goes.
        unsafe { group.notifier.insert(start, end - start)? };
        // INVARIANT: inserted over `[start, end)` until drop; no member.
        Ok(group)
    }

    /// The range `[start, end)`.
    pub(crate) fn range(&self) -> (usize, usize) {
        (self.start, self.end)
    }
}

impl InvalidateHandler for WatchGroup {
    /// Bumps every member's counter and queues their records when the event [`counts`]. Never
    /// sleeps or allocates; never refuses. Work: one atomic add per member and at most the
    /// ring's free room in records.
    fn invalidate(&self, range: &Range<'_>, seq: &SeqToken<'_>) -> bool {
        let event = range.event();
        let members = self.members.lock();
        seq.set_seq();
        if !counts(event) {
            return true;
        }
        for w in members.list.iter() {
            self.gens.bump(w.index);
        }
        let start = range.start().max(self.start);
        let end = range.end().min(self.end);
        let records = members.list.iter().map(|w| uapi::EventRecord {
            addr: start as u64,
            len: end.saturating_sub(start) as u64,
            cookie: w.cookie,
            generation: 0,
            // Below `WATCH_MAX` (type invariant of `Watch`).
            handle: w.index as u32,
            kind: uapi::EVENT_WATCH | event.index() as u32,
        });
        self.events.push_many(members.count, records);
        true
    }
}

#[pinned_drop]
impl PinnedDrop for WatchGroup {
    /// Removes the notifier (waits for a running callback). No member is left: each holds a
    /// reference to the group. Sleeps.
    fn drop(self: Pin<&mut Self>) {
        self.notifier.remove();
    }
}

/// One watch: a member of the [`WatchGroup`] of its range, whose callback bumps counter
/// `index` of the file's [`Generations`] and queues records with `cookie` on the file's
/// events ring.
///
/// # Invariants
///
/// `index` (the slot) is below [`uapi::WATCH_MAX`] and belongs to this watch in its file's
/// table while it lives. The watch is in `group`'s member list (and in no other list) from
/// [`Watch::new`] until [`Watch::stop`]; the list's reference keeps it alive meanwhile, so
/// every watch is stopped before it is freed.
#[pin_data]
pub(crate) struct Watch {
    #[pin]
    links: ListLinks,
    group: Arc<WatchGroup>,
    cookie: u64,
    index: usize,
    /// This watch under `max_watches_per_mm` and `max_watches_per_user`.
    _charge: Charge,
}

kernel::list::impl_list_arc_safe! {
    impl ListArcSafe<0> for Watch { untracked; }
}

kernel::list::impl_list_item! {
    impl ListItem<0> for Watch {
        using ListLinks { self.links };
    }
}

impl Watch {
    /// Creates a watch in slot `index` with `cookie`, holding `charge`, and adds it to `group`.
    ///
    /// Errors: `ENOSPC` (`index` not below [`uapi::WATCH_MAX`]), `ENOMEM`. Process context,
    /// may sleep (allocates, charged to the caller's memory cgroup).
    pub(crate) fn new(
        group: &Arc<WatchGroup>,
        cookie: u64,
        index: usize,
        charge: Charge,
    ) -> Result<Arc<Watch>> {
        if index >= uapi::WATCH_MAX {
            return Err(ENOSPC);
        }
        let item = ListArc::pin_init(
            try_pin_init!(Watch {
                links <- ListLinks::new(),
                group: group.clone(),
                cookie,
                index,
                _charge: charge,
            }? Error),
            GFP_KERNEL_ACCOUNT,
        )?;
        let watch = item.clone_arc();
        let mut members = group.members.lock();
        members.list.push_back(item);
        members.count += 1;
        // INVARIANT: in its group's list until `stop`.
        Ok(watch)
    }

    /// The slot (its index in the file's watch table and in the counters).
    pub(crate) fn slot(&self) -> usize {
        self.index
    }

    /// The group of the watch.
    pub(crate) fn group(&self) -> &Arc<WatchGroup> {
        &self.group
    }

    /// The counter once every invalidation of the range that had begun is complete: waits for
    /// running invalidations (`mmu_interval_read_begin`), reads the counter, and retries if
    /// another invalidation began meanwhile. Errors: `EINTR` on a fatal signal between retries.
    /// Process context, sleeps; must not be called with the group's lock held.
    pub(crate) fn sync(&self) -> Result<u64> {
        let group = &self.group;
        loop {
            let seq = group.notifier.read_begin();
            {
                let _guard = group.members.lock();
                let generation = group.gens.load(self.index);
                // `set_seq` precedes the bumps under the lock: a bump seen above means a
                // retry here.
                if !group.notifier.read_retry(seq) {
                    return Ok(generation);
                }
            }
            // SAFETY: no preconditions.
            if unsafe { ffi::vamr_fatal_signal_pending() } {
                return Err(EINTR);
            }
        }
    }

    /// Ends the watch: takes it out of its group (under the group's lock, so no callback
    /// touches it afterwards), then bumps the counter once more, so that a later watch in the
    /// same slot never shows a value seen for this one. Idempotent: only the call that took it
    /// out bumps, so once it returned nothing of this watch touches the slot again
    /// (`VAMR_IOC_UNWATCH` frees the slot only then, even if a `VAMR_IOC_WATCH_SYNC` still
    /// holds a reference). Never sleeps (but dropping the watch later may: the caller must
    /// drop its references in process context).
    pub(crate) fn stop(&self) {
        let removed = {
            let mut members = self.group.members.lock();
            // SAFETY: a watch is only ever in its own group's list (type invariant).
            let removed = unsafe { members.list.remove(self) };
            if removed.is_some() {
                members.count -= 1;
            }
            removed
        };
        if removed.is_some() {
            self.group.gens.bump(self.index);
        }
        // The list's reference goes after the lock (it may not be the last one, but the
        // group's may).
        drop(removed);
    }
}

#[kunit_tests(vamr_kunit_watch)]
mod tests {
    use super::*;

    #[test]
    fn mapping_changes_count_protection_changes_do_not() {
        for e in [Event::Unmap, Event::Clear, Event::Migrate, Event::Release] {
            assert!(counts(e));
        }
        for e in [
            Event::ProtectionVma,
            Event::ProtectionPage,
            Event::SoftDirty,
            Event::Exclusive,
        ] {
            assert!(!counts(e));
        }
    }

    #[test]
    fn counters_start_at_zero_grow_and_are_separate() {
        let g = Generations::new().unwrap();
        assert_eq!(g.pages.len(), GEN_PAGES);
        for slot in [0, 1, PER_PAGE - 1, PER_PAGE, uapi::WATCH_MAX - 1] {
            assert_eq!(g.load(slot), 0);
        }
        g.bump(PER_PAGE);
        g.bump(PER_PAGE);
        g.bump(uapi::WATCH_MAX - 1);
        assert_eq!(g.load(PER_PAGE), 2);
        assert_eq!(g.load(PER_PAGE - 1), 0);
        assert_eq!(g.load(PER_PAGE + 1), 0);
        assert_eq!(g.load(uapi::WATCH_MAX - 1), 1);
    }
}
