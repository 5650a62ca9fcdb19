// SPDX-License-Identifier: GPL-2.0

//! A region: a user VA range of one mm whose pinned pages always are the pages mapped there now.
//!
//! See `Documentation/vamr.rst` for the semantics. In short:
//!
//! - [`Region::register`] pins what is mapped with `FOLL_LONGTERM` (holes stay absent), charges
//!   the range to `mm->pinned_vm` and inserts an `mmu_interval_notifier` over it.
//! - An invalidation stops accesses to the affected pages at once but keeps their pins: it
//!   marks them *suspect* (munmap and process exit unpin at once). The mm's verify work then
//!   compares each suspect pin with the page table, without faulting (`hmm_range_fault()` with
//!   no request flags): the same page keeps its pin, another page present is pinned in its
//!   place, nothing present unpins. Nothing is ever faulted in the background; absent pages
//!   are pinned by the first access that needs them.
//! - Accesses (copy, atomics) go through valid pins under the region's pin-table spinlock, taken
//!   once per run of up to [`io::RUN_PAGES`] pages (one packet), never per page and never
//!   sleeping: an invalidation marks the pins it covers under that lock, so it waits for a run
//!   in flight and no access touches a page after the invalidation that covered it returned.

use crate::events::EventQueue;
use crate::ffi;
use crate::limits::User;
use crate::notifier::{
    impl_has_interval_notifier, Event, IntervalNotifier, InvalidateHandler, Range, SeqToken,
};
use crate::pin::{PinMode, PinnedPage};
use crate::stats::{Counters, Kind};
use crate::trace;
use crate::uapi;
use kernel::mm::{Mm, MmWithUser};
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;
use kernel::sync::atomic::{Acquire, Atomic, Full, Relaxed};
use kernel::sync::{aref::ARef, Arc, ArcBorrow, CondVar, Mutex, MutexGuard};
use kernel::{new_condvar, new_mutex};

/// Access the region allows (`VAMR_ACCESS_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Access {
    /// The region may be written: pages are pinned with `FOLL_WRITE` (breaking COW) and marked
    /// dirty when unpinned.
    pub(crate) write: bool,
}

/// How user space and the events name a region (given at registration, reported in events).
struct Tag {
    cookie: u64,
    handle: u32,
    events: Option<Arc<EventQueue>>,
}

/// The fields of a region that its [`Region::inner`] mutex protects, as binder's `ProcessInner`
/// is the part of a `Process` under its lock.
///
/// The pin table has a lock of its own ([`Region::table`], a spinlock, for the data path), but
/// every writer of the table holds this lock too (see the [`Region`] invariants).
struct RegionInner {
    /// [`Region::fill`] calls in progress (but registration's own, which ends before the
    /// region is handed out). Teardown waits (on [`Region::idle`]) until it is 0, so that no
    /// pin round outlives the region's registration.
    fills: usize,
    /// Page index range `[a, b)` that holds every suspect pin; empty when `a >= b`.
    suspect: (usize, usize),
    /// Set by teardown and by `MMU_NOTIFY_RELEASE`: nothing is pinned any more.
    dead: bool,
    /// Fault requests finished so far (see [`Region::wait_for_fault`]); waiters sleep on
    /// [`Region::fault_done`] until it moves.
    faults_done: u64,
    /// A fault request of this region is queued or running (at most one at a time).
    fault_pending: bool,
    /// Asynchronous prefetches of this region queued or running (see `advice.rs`), at most
    /// `advice::PREFETCHES_PER_REGION`.
    prefetches: usize,
    /// The page ranges `[a, b)` that pin rounds of this region (but registration's) are
    /// pinning now (see `PinTurn`): no two overlap, so that two rounds never pin the same
    /// pages at the same moment (their migrations out of a movable zone would fail each
    /// other). A round whose pages overlap one waits on [`Region::claim_free`]. At most one
    /// claim per such round in progress.
    pinning: PinClaims,
    /// The page ranges of the latest invalidations, numbered by [`Region::generation`] (see
    /// [`InvalLog`]): a pin round commits unless one of those since its start covered its pages.
    inval_log: InvalLog,
    /// The region's slot under its mm's and its user's region limits (`max_regions_per_mm`,
    /// `max_regions_per_user`), from registration until
    /// [`Region::teardown`] takes it out (and gives it back after the lock); it holds the mm's
    /// shared state (`MmState`: the verify queue), which the region needs only while it is
    /// not dead.
    slot: Option<MmSlot>,
}

mod advice;
mod claims;
mod error;
mod fault;
mod fill;
mod inval_log;
mod io;
mod mm_slot;
mod table;
mod verify;

use claims::PinClaims;
pub(crate) use error::{RegionError, RegionResult};
pub(crate) use fill::Prefetch;
use fill::{FillGuard, PinCause};
use inval_log::{InvalLog, REPIN_ATTEMPTS};
pub(crate) use io::{AtomicOp, Dir};
pub(crate) use mm_slot::MmSlot;
pub(crate) use table::PinnedVmCharge;
use table::{PinTable, TableLock, TABLE_CHUNK};

/// A registered VA range with virtual-address semantics.
///
/// # Invariants
///
/// - `[start, start + npages * PAGE_SIZE)` is the page-aligned cover of the registered byte
///   range `[addr, addr + len)`, below `TASK_SIZE`; `npages` pages are charged to
///   `mm->pinned_vm`, and `inner.slot` holds one slot under the mm's and the user's region limits, until
///   [`Region::teardown`].
/// - `notifier` is inserted over the page range from [`Region::register`] until
///   [`Region::teardown`]; the region lives in an [`Arc`] and is not freed before teardown:
///   its [`Registration`] owns one reference and tears down in its `Drop` before it gives
///   that reference up (a registration handed to C as a `struct vamr_region *` with
///   [`Registration::into_raw`] is the same reference; `vamr_region_destroy()` takes it back
///   with [`Registration::from_raw`] and drops it). Other references (the verify queue, an
///   access in progress, a `VAMR_IOC_MR_QUERY`) may outlive teardown; they only keep the
///   memory, never a pin, the charge or the slot.
/// - A pin in `table` that is not suspect holds the page mapped at its VA since the last
///   invalidation of that VA; an invalidation marks the pins it covers suspect (or takes them
///   out) under `table` before it returns, and an access copies only through pins it found
///   usable under `table`, holding it for the copy: so no page is touched after the
///   invalidation that covered it returned, until the page table was read again and showed the
///   same page at the VA. Slots of `table` change only with both `inner` and `table` held.
///   Every suspect pin lies in `pages.suspect`, and the region is then queued on its mm's
///   verify queue (or the pass that will clear it is running).
/// - `generation` counts the invalidate callbacks that reached the region; each records its
///   page range in `inner.inval_log` under the number it had before, and stores the new count
///   (Release) after its `set_seq`, all under `inner` ([`Region::log_invalidation`], the
///   [`InvalLog`] invariants).
/// - Nothing is faulted in except by an access, a prefetch or registration (the verify pass
///   only reads the page table and pins pages that are present).
/// - Every long operation is bounded: pin rounds take at most [`PIN_BATCH`] pages, skip a VMA
///   that refuses the access in one step, and check for cancellation and fatal signals between
///   rounds; when [`Region::teardown`] returns, no [`Region::fill`] runs and no pin is left.
///
/// [`PIN_BATCH`]: crate::pin::PIN_BATCH
///
/// # Lock order
///
/// Written here once (`Documentation/vamr.rst`, "Locking", has the module-wide order):
/// `mmap_lock` (or reclaim) → [`Region::inner`] → one of [`Region::table`], the events ring
/// (`EventQueue`'s spinlock, an invalidation pushes its record), the mm's verify queue
/// (`MmState::pending`), or the folio/mapping locks of `set_page_dirty()` when an invalidation
/// unpins. `table` is innermost: nothing is taken under it.
#[pin_data]
pub(crate) struct Region {
    /// The subscription over `[start, start + npages * PAGE_SIZE)`; holds the mm.
    #[pin]
    notifier: IntervalNotifier<Region>,
    /// Bookkeeping ([`RegionInner`]: fills, suspect range, death, fault requests, claims, the
    /// invalidation log). Lock rules: taken by the invalidate callback, which can run under
    /// reclaim and with `mmap_lock` or folio locks held, so while holding it: no `GFP_KERNEL`
    /// allocation, no GUP, no `mmap_lock`, no user copies (they may fault), nothing that
    /// sleeps for long. Every writer of [`Region::table`] shows its guard
    /// ([`TableLock::write`]): it serialises invalidations, commits, the verify pass and
    /// teardown. The outermost lock of the region (see the lock order above).
    #[pin]
    inner: Mutex<RegionInner>,
    /// The pins ([`PinTable`]) behind their spinlock ([`TableLock`]: its lock rules). The data
    /// path's read side: an access takes only this lock, once per run of up to
    /// [`io::RUN_PAGES`] pages, and copies through the pins it finds usable while holding it;
    /// so it never sleeps and touches no shared line but the region's own.
    #[pin]
    table: TableLock,
    /// Signalled when `inner.fills` drops to 0 in a dead region (teardown, the only waiter,
    /// marks the region dead before it waits).
    #[pin]
    idle: CondVar,
    /// Signalled when a fault request finished (`RegionInner::faults_done` moved), and when
    /// the region is cancelled.
    #[pin]
    fault_done: CondVar,
    /// Signalled when a pin round gives its claim back (`RegionInner::pinning`), and when the
    /// region is cancelled.
    #[pin]
    claim_free: CondVar,
    /// Accesses waiting on `fault_done` (see [`Region::wait_for_fault`]) and pin rounds waiting
    /// on `claim_free` for pages another round pins (see `PinTurn`). A waiter counts
    /// itself in, with a full barrier, before it reads `cancelled`; [`Region::cancel`] sets
    /// `cancelled`, with a full barrier, before it reads this count, and wakes the waiters
    /// (under the `inner` lock) only when it is not 0: so either the waiter sees `cancelled`,
    /// or `cancel` sees the waiter, and a deregistration with nobody waiting takes no lock.
    fault_waiters: Atomic<u32>,
    /// First registered byte.
    addr: usize,
    /// Registered length in bytes (> 0).
    len: usize,
    /// First byte of the first page.
    start: usize,
    /// Pages covered.
    npages: usize,
    access: Access,
    /// User cookie given at registration, reported in events.
    cookie: u64,
    /// The handle user space knows the region by, reported in events.
    handle: u32,
    /// Where invalidation records go (the owning file's queue); `None` for regions created
    /// through the in-kernel API.
    events: Option<Arc<EventQueue>>,
    /// Set by [`Region::cancel`] (deregistration) and teardown: every long operation (pin
    /// rounds, prefetch, on-demand pins, copies) stops at its next batch or page with
    /// `ECANCELED`, and no new one starts.
    cancelled: Atomic<bool>,
    /// Invalidations that reached this region (all kinds): the generation of events and
    /// queries, and the numbering of [`RegionInner::inval_log`]. Written only by the invalidate
    /// callback, under `inner`, with Release after its `set_seq` (see `Region::round_begin`).
    generation: Atomic<u64>,
    /// Per-region counters.
    pub(crate) stats: Counters,
}

impl_has_interval_notifier! {
    impl HasIntervalNotifier for Region { self.notifier }
}

impl InvalidateHandler for Region {
    /// Records the invalidation (the log that pin rounds check, the event for the owning
    /// file), then unpins the range when its pages leave the VA for good and marks its pins
    /// suspect otherwise (the verify pass decides). Fails (`false`) only when the invalidation
    /// is not blockable and the region lock is taken.
    fn invalidate(&self, range: &Range<'_>, seq: &SeqToken<'_>) -> bool {
        let mut inner = if range.blockable() {
            self.inner.lock()
        } else {
            match self.inner.try_lock() {
                Some(g) => g,
                None => {
                    self.stats.add(Kind::InvalidationsRefused, 1);
                    return false;
                }
            }
        };
        let event = range.event();
        self.stats.invalidation(event);
        let (a, b) = self.page_span(range.start(), range.end());
        self.log_invalidation(&mut inner, seq, a, b);
        self.push_event(range, event);
        let r = (range.start(), range.end());
        if !event.mapping_survives() {
            let dropped = self.unpin_now(&inner, a, b, range.blockable());
            trace::invalidate(self.start, r, event, 0, dropped, range.blockable());
            if event == Event::Release {
                inner.dead = true;
                inner.suspect = (0, 0);
            }
            return true;
        }
        let marked = self.mark_suspect(&inner, a, b, range.blockable());
        trace::invalidate(self.start, r, event, marked, 0, range.blockable());
        if marked > 0 && !inner.dead {
            self.queue_suspect(&mut inner, a, b);
        }
        true
    }
}

impl Region {
    /// Reports an invalidation of `range` (its part inside the registered bytes) to the
    /// owning file's event queue, if any. Does not sleep or allocate.
    fn push_event(&self, range: &Range<'_>, event: Event) {
        let first = range.start().max(self.addr);
        let end = range.end().min(self.addr + self.len);
        if let (Some(events), true) = (&self.events, first < end) {
            events.push(uapi::EventRecord {
                addr: first as u64,
                len: (end - first) as u64,
                cookie: self.cookie,
                generation: 0,
                handle: self.handle,
                kind: event.index() as u32,
            });
        }
    }

    /// The pages of slots `[a, b)` leave the VA for good (munmap, process exit): unpins them
    /// now, taking the pins out of the table a few at a time and releasing them outside its
    /// lock. Returns the pins dropped. Called by the invalidate callback with `inner` held;
    /// a resched point per chunk when `blockable`.
    fn unpin_now(
        &self,
        inner: &MutexGuard<'_, RegionInner>,
        a: usize,
        b: usize,
        blockable: bool,
    ) -> usize {
        let mut dropped = 0;
        let mut idx = a;
        while idx < b {
            let mut out: [Option<PinnedPage>; 32] = [const { None }; 32];
            let mut n = 0;
            {
                let mut table = self.table.write(inner);
                let stop = b.min(idx + TABLE_CHUNK).min(table.len());
                while idx < stop && n < out.len() {
                    if let Some(pin) = table[idx].take() {
                        out[n] = Some(pin.page);
                        n += 1;
                    }
                    idx += 1;
                }
                if idx >= table.len() {
                    // The end of the table, or emptied by teardown: nothing left.
                    idx = b;
                }
            }
            for pin in out.iter_mut().filter_map(Option::take) {
                pin.release_in_invalidation();
                dropped += 1;
            }
            // A user sizes this loop (a region of millions of pages): a resched point per
            // batch where the invalidation may sleep, as `inner` is a mutex. A non-blockable
            // one (the OOM reaper) runs through without, as ODP's does.
            if blockable {
                crate::pin::cond_resched();
            }
        }
        self.stats.add(Kind::PagesUnpinned, dropped as u64);
        self.stats.sub(Kind::PagesPinned, dropped as u64);
        dropped
    }

    /// The mapping of slots `[a, b)` may stay as it is (a page-table split, write protection,
    /// a failed migration) or change: marks their pins suspect, which stops accesses through
    /// them now and keeps the pins (each old page stays allocated) for the verify pass to
    /// decide. Returns the pins marked. Called by the invalidate callback with `inner` held;
    /// a resched point per chunk when `blockable`.
    fn mark_suspect(
        &self,
        inner: &MutexGuard<'_, RegionInner>,
        a: usize,
        b: usize,
        blockable: bool,
    ) -> usize {
        let mut marked = 0;
        let mut idx = a;
        while idx < b {
            let end = b.min(idx + TABLE_CHUNK);
            let mut table = self.table.write(inner);
            if let Some(chunk) = table.get_mut(idx..end) {
                for pin in chunk.iter_mut().flatten() {
                    pin.set_suspect(true);
                    marked += 1;
                }
            }
            drop(table);
            idx = end;
            if blockable {
                crate::pin::cond_resched();
            }
        }
        marked
    }

    /// Widens the suspect range to cover `[a, b)` and queues the region on its mm's verify
    /// queue. `inner` is the held `inner` lock of a region that is not dead. Does not sleep or
    /// allocate (the invalidate callback calls it).
    fn queue_suspect(&self, inner: &mut RegionInner, a: usize, b: usize) {
        let (sa, sb) = inner.suspect;
        inner.suspect = if sa < sb {
            (sa.min(a), sb.max(b))
        } else {
            (a, b)
        };
        // A region that is not dead has not been torn down, so its `Registration` still holds
        // a reference (the `Region` invariants: it lives in an `Arc`).
        // SAFETY: `self` is in an `Arc` whose count is not zero.
        let this = unsafe { ArcBorrow::from_raw(self) };
        // Not dead, so not torn down: the slot, and with it the mm's state, is still here.
        if let Some(slot) = &inner.slot {
            slot.queue(this);
        }
    }
}

impl Region {
    /// Registers `[addr, addr + len)` of `mm` (the caller's own address space).
    ///
    /// `addr` and `len` need no alignment (the pages covering them are pinned). Holes (unmapped
    /// pages) are allowed and stay absent until mapped and accessed.
    ///
    /// `user` is who the region counts for (`src/limits.rs`): the opener of the `/dev/vamr`
    /// file, or the registering task for a VA MR.
    ///
    /// Errors: `EINVAL` when `len` is 0 or `addr + len` overflows; `ENOSPC` when `mm` has
    /// `max_regions_per_mm` regions already, or `user` has `max_regions_per_user` (module
    /// parameters); `EFAULT` when the range
    /// reaches beyond `TASK_SIZE` (kernel addresses); `ENOMEM` when the charge to
    /// `mm->pinned_vm` would exceed `RLIMIT_MEMLOCK` without `CAP_IPC_LOCK` (the rule of
    /// `ib_umem_get()`), or on allocation failure; `EINTR` when a fatal signal interrupts the
    /// initial pin. Process context of the owner of `mm`; sleeps. Pages of a VMA that refuses
    /// the access (`PROT_NONE`, read-only for a writable region, `VM_IO`/`VM_PFNMAP`) are
    /// skipped a VMA at a time and stay absent.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn register(
        mm: &MmWithUser,
        user: &User,
        addr: usize,
        len: usize,
        access: Access,
        cookie: u64,
        handle: u32,
        events: Option<Arc<EventQueue>>,
    ) -> Result<Registration> {
        let (start, npages) = page_cover(addr, len)?;
        let mm_slot = MmSlot::take(mm, user)?;
        // SAFETY: reads `TASK_SIZE` of current, no preconditions.
        if start + npages * PAGE_SIZE > unsafe { ffi::vamr_task_size() } {
            return Err(EFAULT);
        }
        let charge = PinnedVmCharge::new(mm, npages)?;
        let tag = Tag {
            cookie,
            handle,
            events,
        };
        let mm_ref = ARef::from(&**mm);
        let new = Region::new(
            mm_ref,
            mm_slot,
            addr,
            len,
            access,
            tag,
            table::new_table(npages)?,
        );
        let region = Arc::pin_init(new, GFP_KERNEL_ACCOUNT)?;
        // INVARIANT: from here on the charge of the `npages` pages and the slot belong to the
        // region (returned by teardown).
        charge.commit();
        // Teach lockdep that the region lock is taken inside reclaim (by the invalidate
        // callback), so that any allocation under it is reported at once, as umem_odp.c does.
        #[cfg(CONFIG_LOCKDEP)]
        {
            // SAFETY: `fs_reclaim_acquire`/`release` only annotate lockdep; paired here.
            unsafe { kernel::bindings::fs_reclaim_acquire(kernel::bindings::GFP_KERNEL) };
            drop(region.inner.lock());
            // SAFETY: pairs with the acquire above.
            unsafe { kernel::bindings::fs_reclaim_release(kernel::bindings::GFP_KERNEL) };
        }
        region.stats.add(Kind::Regions, 1);
        let reg = Registration { region };
        // On failure, dropping `reg` tears the region down.
        reg.insert_and_fill(mm)?;
        Ok(reg)
    }

    /// A region of `mm` over `[addr, addr + len)` with the pin table `table` (one absent slot
    /// per page of the cover) and its slot `mm_slot` under the mm's limit, not inserted: see
    /// [`Registration::insert_and_fill`].
    fn new(
        mm: ARef<Mm>,
        mm_slot: MmSlot,
        addr: usize,
        len: usize,
        access: Access,
        tag: Tag,
        table: PinTable,
    ) -> impl PinInit<Self> {
        let start = addr - addr % PAGE_SIZE;
        let npages = table.len();
        pin_init!(Region {
            notifier <- IntervalNotifier::new(mm),
            inner <- new_mutex!(
                RegionInner {
                    fills: 0,
                    suspect: (0, 0),
                    dead: false,
                    faults_done: 0,
                    fault_pending: false,
                    prefetches: 0,
                    pinning: PinClaims::new(),
                    inval_log: InvalLog::new(),
                    slot: Some(mm_slot),
                },
                "vamr_region_inner"
            ),
            table <- TableLock::new(table),
            idle <- new_condvar!("vamr_region_idle"),
            fault_done <- new_condvar!("vamr_region_fault_done"),
            claim_free <- new_condvar!("vamr_region_claim_free"),
            addr,
            len,
            start,
            npages,
            access,
            cookie: tag.cookie,
            handle: tag.handle,
            events: tag.events,
            cancelled: Atomic::new(false),
            fault_waiters: Atomic::new(0),
            generation: Atomic::new(0),
            stats: Counters::new(),
        })
    }

    /// The registered byte range `(addr, len)`.
    pub(crate) fn range(&self) -> (usize, usize) {
        (self.addr, self.len)
    }

    /// The address space of the region.
    fn mm(&self) -> &Mm {
        self.notifier.mm()
    }

    /// Whether the region belongs to the address space `mm`.
    pub(crate) fn is_of(&self, mm: &Mm) -> bool {
        core::ptr::eq(self.mm().as_raw(), mm.as_raw())
    }

    /// Number of invalidations that overlapped the region so far.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Relaxed)
    }

    /// Page index span `[a, b)` of the region overlapping the byte range `[s, e)`.
    fn page_span(&self, s: usize, e: usize) -> (usize, usize) {
        let end = self.start + self.npages * PAGE_SIZE;
        let s = s.clamp(self.start, end);
        let e = e.clamp(self.start, end);
        (
            (s - self.start) / PAGE_SIZE,
            (e - self.start).div_ceil(PAGE_SIZE),
        )
    }

    /// The cookie given at registration (a driver region's MR key).
    pub(crate) fn cookie(&self) -> u64 {
        self.cookie
    }

    /// The pin mode of registration: for writing when the region is writable, as
    /// `ib_umem_get()` pins a writable MR; waiting for faults (killably) when it runs in the
    /// owner's context, where nothing can deregister a region not handed out yet.
    fn registration_mode(&self) -> PinMode {
        PinMode {
            write: self.access.write,
            nofault: false,
            may_wait: self.current_is_owner(),
        }
    }

    /// Stops every long operation on the region (see the `cancelled` field). Idempotent; takes
    /// the region lock only when an access waits for a fault request (to wake it), so it may
    /// sleep; the region stays registered until [`Region::teardown`].
    pub(crate) fn cancel(&self) {
        // Full: the store is ordered before the load of `fault_waiters` (see there).
        self.cancelled.xchg(true, Full);
        if self.fault_waiters.load(Relaxed) != 0 {
            // Wake the waits for a fault request or a claim (they check `cancelled` under the
            // lock).
            let _guard = self.inner.lock();
            self.fault_done.notify_all();
            self.claim_free.notify_all();
        }
    }

    /// [`RegionError::Cancelled`] once [`Region::cancel`] ran; [`RegionError::Interrupted`]
    /// when current has a fatal signal.
    fn check_interrupted(&self) -> RegionResult {
        if self.cancelled.load(Acquire) {
            return Err(RegionError::Cancelled);
        }
        // SAFETY: no preconditions; reads current's pending signals.
        if unsafe { ffi::vamr_fatal_signal_pending() } {
            return Err(RegionError::Interrupted);
        }
        Ok(())
    }

    /// Tears the region down: no invalidation runs after it, no pin round runs after it, every
    /// pin is dropped, the `pinned_vm` charge and the slot under the mm's limit are returned.
    /// Idempotent (the slot, taken out under the lock, marks the first call). Sleeps (waits for
    /// running invalidations and for pin rounds in progress, each bounded by one batch).
    fn teardown(&self) {
        // Stop long operations, then mark dead: from now on invalidations neither queue work
        // nor keep pages, no pin round starts and none commits (`commit` checks `dead` under
        // the lock), so the pins can be taken out in the same hold of the lock; an
        // invalidation that still runs before the notifier is removed finds an empty table.
        // A driver cancels at the start of deregistration (`vamr_region_cancel()`): then the
        // flag is set and the waiters were woken by that call (or see the flag, see
        // `fault_waiters`), so a second exchange with a full barrier would only cost.
        if !self.cancelled.load(Acquire) {
            self.cancel();
        }
        let (pins, slot) = {
            let mut inner = self.inner.lock();
            // The slot is there until the first teardown takes it.
            let Some(slot) = inner.slot.take() else {
                return;
            };
            inner.dead = true;
            // Wait for pin rounds in progress: each ends within one batch once it sees the
            // region cancelled (see `fill`), and its uncommitted pins are dropped before it
            // leaves, so none outlives the registration. `FillGuard` wakes `idle` for a dead
            // region only.
            while inner.fills > 0 {
                self.idle.wait(&mut inner);
            }
            inner.suspect = (0, 0);
            (core::mem::take(&mut *self.table.write(&inner)), slot)
        };
        self.notifier.remove();
        let dropped = pins.unpin_all();
        self.stats.sub(Kind::PagesPinned, dropped as u64);
        self.stats.sub(Kind::Regions, 1);
        PinnedVmCharge::release(self.mm(), self.npages);
        // Last: may take the registry lock (sleeps), after the region lock.
        drop(slot);
    }
}

/// The owning handle of a registered region: dropping it tears the region down (while its
/// reference to the region is still held, see the [`Region`] invariants), then gives that
/// reference up. No allocation of its own: it is the region's [`Arc`], and the handle the C
/// API hands out is that same pointer ([`Registration::into_raw`]).
pub(crate) struct Registration {
    region: Arc<Region>,
}

impl Registration {
    /// The registration as a raw pointer to its region, for C (`struct vamr_region *`): the
    /// registration's reference goes with it, and nothing is torn down. Turn it back with
    /// [`Registration::from_raw`], once.
    pub(crate) fn into_raw(self) -> *const Region {
        let this = core::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again, so its `region` is moved out once.
        let region = unsafe { core::ptr::read(&this.region) };
        Arc::into_raw(region)
    }

    /// Takes back a registration given to C.
    ///
    /// # Safety
    ///
    /// `ptr` comes from [`Registration::into_raw`] and is taken back at most once.
    pub(crate) unsafe fn from_raw(ptr: *const Region) -> Registration {
        // SAFETY: `ptr` is the reference `into_raw` gave up (the contract), taken back once.
        let region = unsafe { Arc::from_raw(ptr) };
        Registration { region }
    }

    /// Another reference to the region, for an access that must not hold the caller's lock.
    pub(crate) fn region(&self) -> Arc<Region> {
        self.region.clone()
    }

    /// The second step of [`Region::register`]: inserts the notifier over the page cover, then
    /// pins what is mapped there. Called once, by `register`; on error the caller drops `self`,
    /// which tears the region down. Errors: `ENOMEM`, `EINTR`, `EHWPOISON` and other GUP
    /// errors but `EFAULT`. Sleeps.
    fn insert_and_fill(&self, mm: &MmWithUser) -> Result {
        let region = &self.region;
        // The region lives pinned in an `Arc`; `self` keeps it alive until its `Drop` tears the
        // region down, which removes the notifier.
        // SAFETY: `notifier` is the region's `HasIntervalNotifier` field; pinned, outlives insert.
        unsafe {
            region
                .notifier
                .insert(region.start, region.npages * PAGE_SIZE)?
        };
        // INVARIANT: the notifier is inserted over the page cover until teardown.
        // Holes, and pages whose pin lost a race with an invalidation, stay absent and are
        // pinned on demand; other errors (EINTR, ENOMEM, EHWPOISON) fail the registration.
        let mode = region.registration_mode();
        let filled = region.fill(mm, 0, region.npages, PinCause::Register, mode);
        let (pinned, err) = match filled {
            Ok(n) => (n, 0),
            Err(e) => (0, e.to_errno()),
        };
        trace::register(region.start, region.npages, mode.write, pinned, err);
        match filled {
            Ok(_) | Err(RegionError::NoPage) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

impl core::ops::Deref for Registration {
    type Target = Region;
    fn deref(&self) -> &Region {
        &self.region
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.region.teardown();
    }
}

/// The page cover `(start, npages)` of `[addr, addr + len)`. Errors: `EINVAL` for `len` 0 or an
/// overflowing range.
pub(crate) fn page_cover(addr: usize, len: usize) -> Result<(usize, usize)> {
    if len == 0 {
        return Err(EINVAL);
    }
    let end = addr.checked_add(len).ok_or(EINVAL)?;
    let end = end.checked_next_multiple_of(PAGE_SIZE).ok_or(EINVAL)?;
    let start = addr - addr % PAGE_SIZE;
    Ok((start, (end - start) / PAGE_SIZE))
}

#[kunit_tests(vamr_kunit_region)]
mod tests {
    use super::*;

    #[test]
    fn page_cover_of_unaligned_ranges() {
        let p = PAGE_SIZE;
        assert_eq!(page_cover(0x1000, 1), Ok((0x1000, 1)));
        assert_eq!(page_cover(0x1000, p), Ok((0x1000, 1)));
        assert_eq!(page_cover(0x1fff, 2), Ok((0x1000, 2)));
        assert_eq!(page_cover(0x1001, p), Ok((0x1000, 2)));
        assert_eq!(page_cover(0x1000, 3 * p + 1), Ok((0x1000, 4)));
    }

    #[test]
    fn page_cover_rejects_empty_and_overflowing() {
        assert_eq!(page_cover(0x1000, 0), Err(EINVAL));
        assert_eq!(page_cover(usize::MAX - 10, 100), Err(EINVAL));
        // The end rounds up past the top of the address space.
        assert_eq!(page_cover(usize::MAX - 10, 5), Err(EINVAL));
    }

    #[test]
    fn only_unmap_and_release_drop_pins_at_once() {
        assert!(!Event::Unmap.mapping_survives());
        assert!(!Event::Release.mapping_survives());
        for e in [
            Event::Clear,
            Event::ProtectionVma,
            Event::ProtectionPage,
            Event::SoftDirty,
            Event::Migrate,
            Event::Exclusive,
        ] {
            assert!(e.mapping_survives());
        }
        assert_eq!(Event::Exclusive.index(), Event::COUNT - 1);
    }
}
