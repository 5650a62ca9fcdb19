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
//! - Accesses (copy, atomics) go through valid pins under the region lock, so an invalidation
//!   waits for an access in flight and an access never touches a page after its invalidation.

use crate::events::EventQueue;
use crate::mm_state::{MmSlot, MmState};
use crate::notifier::{Event, IntervalNotifier, InvalidateHandler, Mapped, Range, SeqToken};
use crate::pin::{pin_user_range, resume_after_fault, PinMode, PinnedPage, PIN_BATCH};
use crate::stats::{Counters, Kind};
use crate::uapi;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use kernel::bindings;
use kernel::mm::{Mm, MmWithUser};
use kernel::page::{BorrowedPage, PAGE_SIZE};
use kernel::prelude::*;
use kernel::list::{AtomicTracker, ListLinks, TryNewListArc};
use kernel::sync::{aref::ARef, Arc, ArcBorrow, CondVar, Mutex};
use kernel::workqueue::{impl_has_work, new_work, Work, WorkItem};
use kernel::{new_condvar, new_mutex};

// Pointers to C structs only; see `src/notifier.rs`. Declarations: src/vamr_glue.h.
#[allow(improper_ctypes)]
extern "C" {
    fn vamr_memlock_limit_pages() -> usize;
    fn vamr_task_size() -> usize;
    fn vamr_fatal_signal_pending() -> bool;
    fn vamr_pinned_vm_add(mm: *mut bindings::mm_struct, npages: isize) -> i64;
    fn vamr_pinned_vm_sub(mm: *mut bindings::mm_struct, npages: isize);
}

/// Access the region allows (`VAMR_ACCESS_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Access {
    /// The region may be written: pages are pinned with `FOLL_WRITE` (breaking COW) and marked
    /// dirty when unpinned.
    pub(crate) write: bool,
}

/// How many times a re-pin round is retried after racing with an invalidation before the pages
/// are left absent (to be pinned on the next access).
const REPIN_ATTEMPTS: u32 = 16;

/// Why pages are being pinned (for the counters).
#[derive(Clone, Copy, PartialEq, Eq)]
enum PinCause {
    Register,
    /// The verify pass found another page mapped in place of a suspect pin's.
    Verify,
    /// A prefetch: pages that cannot be pinned are skipped.
    OnDemand,
    /// An access: pins from its current page to the end of the access, and stops at the first
    /// page that cannot be pinned (the access fails there).
    Access,
}

/// One pinned page of a region.
struct PagePin {
    page: PinnedPage,
    /// Set by an invalidation over the page: the mapping may have changed, so accesses do not
    /// use the pin until the verify pass (or an access that pins again) checked it against the
    /// page table.
    suspect: bool,
}

impl PagePin {
    /// Whether an access (a write when `write`) may use the pin as it is.
    fn usable(&self, write: bool) -> bool {
        !self.suspect && (!write || self.page.writable())
    }
}

/// Direction of a copy.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    /// From the region into a buffer.
    Read,
    /// From a buffer into the region.
    Write,
}

/// The buffer side of one page copy.
///
/// The pointer must be valid for the length of the copy (reads for `Write`, writes for `Read`)
/// and must not point into the page itself.
#[derive(Clone, Copy)]
enum PageIo {
    /// Copy out of the page into this buffer.
    Read(*mut u8),
    /// Copy from this buffer into the page.
    Write(*const u8),
}

/// An 8-byte atomic operation on a region (the IB atomic verbs plus ATOMIC_WRITE).
#[derive(Clone, Copy)]
pub(crate) enum AtomicOp {
    /// Compare-and-swap: if the value equals `compare`, store `swap`.
    CmpSwap { compare: u64, swap: u64 },
    /// Fetch-and-add.
    FetchAdd { add: u64 },
    /// Store, atomically (IB ATOMIC_WRITE).
    Write { value: u64 },
}

/// What a prefetch asks for (`VAMR_PREFETCH_*`, the advice of `ibv_advise_mr()`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Prefetch {
    /// Pin for writing (`..._PREFETCH_WRITE`); otherwise for reading.
    pub(crate) write: bool,
    /// Pin only pages present in the page table, never fault (`..._PREFETCH_NO_FAULT`).
    pub(crate) nofault: bool,
}

impl Prefetch {
    /// Decodes `VAMR_PREFETCH_*` flags. Errors: `EINVAL` for unknown bits, or WRITE together
    /// with NO_FAULT (a no-fault prefetch pins for reading only, as ODP's snapshot does).
    pub(crate) fn from_flags(flags: u32) -> Result<Self> {
        if flags & !uapi::PREFETCH_KNOWN != 0 || flags == uapi::PREFETCH_KNOWN {
            return Err(EINVAL);
        }
        Ok(Prefetch {
            write: flags & uapi::PREFETCH_WRITE != 0,
            nofault: flags & uapi::PREFETCH_NO_FAULT != 0,
        })
    }
}

/// Page state of a region, under [`Region::pages`].
struct Slots {
    /// One entry per page of the region; `None` is an absent page. A `KVVec`: 16 bytes per
    /// page, so large regions need more than kmalloc gives. A pin may be a read pin even in a
    /// writable region (read prefetch, on-demand read); writes need a write pin and upgrade.
    pins: KVVec<Option<PagePin>>,
    /// [`Region::fill`] calls in progress. Teardown waits (on [`Region::idle`]) until it is 0,
    /// so that no pin round outlives the region's registration.
    fills: usize,
    /// Page index range `[a, b)` that holds every suspect pin; empty when `a >= b`.
    suspect: (usize, usize),
    /// Set by teardown and by `MMU_NOTIFY_RELEASE`: nothing is pinned any more.
    dead: bool,
    /// Fault requests finished so far (see [`Region::wait_for_fault`]); waiters sleep on
    /// [`Region::fault_done`] until it moves.
    faults_done: u64,
}

/// A registered VA range with virtual-address semantics.
///
/// # Invariants
///
/// - `[start, start + npages * PAGE_SIZE)` is the page-aligned cover of the registered byte
///   range `[addr, addr + len)`, below `TASK_SIZE`; `npages` pages are charged to
///   `mm->pinned_vm` until [`Region::teardown`].
/// - `notifier` is inserted over the page range from [`Region::register`] until
///   [`Region::teardown`]; the region lives in an [`Arc`] and is not freed before teardown
///   (a [`Registration`] owns one reference and tears down in its `Drop`).
/// - A pin in `pages.pins` that is not suspect holds the page mapped at its VA since the last
///   invalidation of that VA; an invalidation marks the pins it covers suspect (or drops them)
///   before it returns, and no access uses a suspect pin: so no page is touched after the
///   invalidation that covered it returned, until the page table was read again and showed the
///   same page at the VA. Every suspect pin lies in `pages.suspect`, and the region is then
///   queued on its mm's verify queue (or the pass that will clear it is running).
/// - Nothing is faulted in except by an access, a prefetch or registration (the verify pass
///   only reads the page table and pins pages that are present).
/// - Every long operation is bounded: pin rounds take at most [`PIN_BATCH`] pages, skip a VMA
///   that refuses the access in one step, and check for cancellation and fatal signals between
///   rounds; when [`Region::teardown`] returns, no [`Region::fill`] runs and no pin is left.
///
/// [`PIN_BATCH`]: crate::pin::PIN_BATCH
#[pin_data]
pub(crate) struct Region {
    #[pin]
    notifier: IntervalNotifier,
    /// The pins. Lock rules: taken by the invalidate callback, which can run under reclaim and
    /// with `mmap_lock` or folio locks held, so while holding it: no `GFP_KERNEL` allocation, no
    /// GUP, no `mmap_lock`, no user copies (they may fault), nothing that sleeps for long. It is
    /// held only around the commit of pins and around the copy or atomic on one page.
    #[pin]
    pages: Mutex<Slots>,
    /// Signalled when `pages.fills` drops to 0 (teardown waits on it).
    #[pin]
    idle: CondVar,
    /// Signalled when a fault request finished and when the region is cancelled.
    #[pin]
    fault_done: CondVar,
    /// Membership in the mm's verify queue ([`MmState`]).
    #[pin]
    verify_links: ListLinks<0>,
    #[pin]
    verify_track: AtomicTracker<0>,
    /// State shared with the other regions of the mm (verify queue).
    mm_state: Arc<MmState>,
    /// The address space (`mmgrab` reference: keeps `struct mm_struct`, not the mappings).
    mm: ARef<Mm>,
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
    /// Set once by teardown.
    torn_down: AtomicBool,
    /// Set by [`Region::cancel`] (deregistration) and teardown: every long operation (pin
    /// rounds, prefetch, on-demand pins, copies) stops at its next batch or page with
    /// `ECANCELED`, and no new one starts.
    cancelled: AtomicBool,
    /// Invalidation count that touched this region (all kinds), for events generation.
    generation: AtomicU64,
    /// Per-region counters.
    pub(crate) stats: Counters,
}

// SAFETY: `notifier_offset` is the offset of the `notifier` field, and regions live pinned in an
// `Arc` from before the notifier is inserted until after it is removed (type invariants).
unsafe impl InvalidateHandler for Region {
    fn notifier_offset() -> usize {
        core::mem::offset_of!(Region, notifier)
    }

    fn invalidate(&self, range: &Range<'_>, seq: &SeqToken<'_>) -> bool {
        let mut slots = if range.blockable() {
            self.pages.lock()
        } else {
            match self.pages.try_lock() {
                Some(g) => g,
                None => {
                    self.stats.add(Kind::InvalidationsRefused, 1);
                    return false;
                }
            }
        };
        seq.set_seq();
        let event = range.event();
        self.stats.invalidation(event);
        self.generation.fetch_add(1, Ordering::Relaxed);
        let first = range.start().max(self.addr);
        let end = range.end().min(self.addr + self.len);
        if let (Some(events), true) = (&self.events, first < end) {
            events.push(uapi::Event {
                addr: first as u64,
                len: (end - first) as u64,
                cookie: self.cookie,
                generation: 0,
                handle: self.handle,
                kind: event.index() as u32,
            });
        }

        let (a, b) = self.page_span(range.start(), range.end());
        if !event.mapping_survives() {
            // The pages leave the VA for good (munmap, process exit): unpin now.
            let mut dropped = 0u64;
            for slot in &mut slots.pins[a..b] {
                if let Some(pin) = slot.take() {
                    pin.page.release_in_invalidation();
                    dropped += 1;
                }
            }
            self.stats.add(Kind::PagesUnpinned, dropped);
            self.stats.sub(Kind::PagesPinned, dropped);
            if event == Event::Release {
                slots.dead = true;
                slots.suspect = (0, 0);
            }
            return true;
        }
        // The mapping may stay as it is (a page-table split, write protection, a failed
        // migration) or change: stop accesses now, keep the pins, and let the verify pass
        // decide. Our pin keeps each old page allocated meanwhile.
        let mut marked = false;
        for pin in slots.pins[a..b].iter_mut().flatten() {
            pin.suspect = true;
            marked = true;
        }
        if marked && !slots.dead {
            let (sa, sb) = slots.suspect;
            slots.suspect = if sa < sb {
                (sa.min(a), sb.max(b))
            } else {
                (a, b)
            };
            // SAFETY: `self` lives in an `Arc` (type invariant); it is not dead, so teardown has
            // not run and the `Registration` still holds a reference: the count is not zero.
            let this = unsafe { ArcBorrow::from_raw(self) };
            self.mm_state.queue(this);
        }
        true
    }
}

kernel::list::impl_list_arc_safe! {
    impl ListArcSafe<0> for Region {
        tracked_by verify_track: AtomicTracker;
    }
}

kernel::list::impl_list_item! {
    impl ListItem<0> for Region {
        using ListLinks { self.verify_links };
    }
}

impl Region {
    /// Registers `[addr, addr + len)` of `mm` (the caller's own address space).
    ///
    /// `addr` and `len` need no alignment (the pages covering them are pinned). Holes (unmapped
    /// pages) are allowed and stay absent until mapped and accessed.
    ///
    /// Errors: `EINVAL` when `len` is 0 or `addr + len` overflows; `ENOSPC` when `mm` has
    /// `max_regions_per_mm` regions already (module parameter); `EFAULT` when the range
    /// reaches beyond `TASK_SIZE` (kernel addresses); `ENOMEM` when the charge to
    /// `mm->pinned_vm` would exceed `RLIMIT_MEMLOCK` without `CAP_IPC_LOCK` (the rule of
    /// `ib_umem_get()`), or on allocation failure; `EINTR` when a fatal signal interrupts the
    /// initial pin. Process context of the owner of `mm`; sleeps. Pages of a VMA that refuses
    /// the access (`PROT_NONE`, read-only for a writable region, `VM_IO`/`VM_PFNMAP`) are
    /// skipped a VMA at a time and stay absent.
    pub(crate) fn register(
        mm: &MmWithUser,
        addr: usize,
        len: usize,
        access: Access,
        cookie: u64,
        handle: u32,
        events: Option<Arc<EventQueue>>,
    ) -> Result<Registration> {
        let (start, npages) = page_cover(addr, len)?;
        let mm_slot = MmSlot::take(mm)?;
        let mm_state = mm_slot.state().clone();
        // SAFETY: reads `TASK_SIZE` of current, no preconditions.
        if start + npages * PAGE_SIZE > unsafe { vamr_task_size() } {
            return Err(EFAULT);
        }
        let charge = PinnedVmCharge::new(mm, npages)?;

        let flags = GFP_KERNEL_ACCOUNT | __GFP_NOWARN;
        let mut pins = KVVec::with_capacity(npages, flags)?;
        for _ in 0..npages {
            pins.push(None, flags)?;
        }
        let region = Arc::pin_init(
            pin_init!(Region {
                notifier <- IntervalNotifier::new(),
                pages <- new_mutex!(
                    Slots { pins, fills: 0, suspect: (0, 0), dead: false, faults_done: 0 },
                    "vamr_region_pages"
                ),
                idle <- new_condvar!("vamr_region_idle"),
                fault_done <- new_condvar!("vamr_region_fault_done"),
                verify_links <- ListLinks::new(),
                verify_track <- AtomicTracker::new(),
                mm_state,
                mm: ARef::from(&**mm),
                addr,
                len,
                start,
                npages,
                access,
                cookie,
                handle,
                events,
                torn_down: AtomicBool::new(false),
                cancelled: AtomicBool::new(false),
                generation: AtomicU64::new(0),
                stats: Counters::new(),
            }),
            GFP_KERNEL,
        )?;
        // From here on the charge belongs to the region (released by teardown).
        charge.commit();
        // Teach lockdep that the region lock is taken inside reclaim (by the invalidate
        // callback), so that any allocation under it is reported at once, as umem_odp.c does.
        #[cfg(CONFIG_LOCKDEP)]
        {
            // SAFETY: `fs_reclaim_acquire`/`release` only annotate lockdep; paired here.
            unsafe { bindings::fs_reclaim_acquire(bindings::GFP_KERNEL) };
            drop(region.pages.lock());
            // SAFETY: pairs with the acquire above.
            unsafe { bindings::fs_reclaim_release(bindings::GFP_KERNEL) };
        }
        region.stats.add(Kind::Regions, 1);
        let reg = Registration {
            region,
            _slot: mm_slot,
        };
        let region = &reg.region;
        // The `Registration` keeps the Arc-pinned region alive until teardown removes the notifier.
        // SAFETY: `notifier` is at `notifier_offset()` of that region; `region.mm` grabs the mm
        // for the region's whole life.
        unsafe {
            region
                .notifier
                .insert::<Region>(region.mm.as_raw(), start, npages * PAGE_SIZE)?
        };
        // Holes, and pages whose pin lost a race with an invalidation, stay absent and are
        // pinned on demand; other errors (EINTR, ENOMEM, EHWPOISON) fail the registration.
        match region.fill(mm, 0, npages, PinCause::Register, region.registration_mode()) {
            Ok(_) | Err(EFAULT) => Ok(reg),
            Err(e) => Err(e),
        }
    }

    /// The registered byte range `(addr, len)`.
    pub(crate) fn range(&self) -> (usize, usize) {
        (self.addr, self.len)
    }

    /// The cookie given at registration.
    pub(crate) fn cookie(&self) -> u64 {
        self.cookie
    }

    /// Whether the region belongs to the address space `mm`.
    pub(crate) fn is_of(&self, mm: &Mm) -> bool {
        core::ptr::eq(self.mm.as_raw(), mm.as_raw())
    }

    /// Number of invalidations that overlapped the region so far.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
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

    /// The pin mode of registration: for writing when the region is
    /// writable, as `ib_umem_get()` pins a writable MR.
    fn registration_mode(&self) -> PinMode {
        PinMode {
            write: self.access.write,
            nofault: false,
            owner: true,
        }
    }

    /// Stops every long operation on the region (see the `cancelled` field). Idempotent, does
    /// not sleep; the region stays registered until [`Region::teardown`].
    pub(crate) fn cancel(&self) {
        self.cancelled.store(true, Ordering::Release);
        // Wake accesses waiting for a fault request (they check `cancelled` under the lock).
        let _guard = self.pages.lock();
        self.fault_done.notify_all();
    }

    /// Whether current runs in the region's address space (the owner's process context, where
    /// waiting for a fault, a userfault included, is killable and safe).
    fn current_is_owner(&self) -> bool {
        matches!(kernel::current!().mm(), Some(mm) if core::ptr::eq(mm.as_raw(), self.mm.as_raw()))
    }

    /// Delivers the fault at page `idx` (for writing when `write`) from a work item and waits
    /// until it was handled, for an access that must not wait on a userfault itself (a device
    /// task: nothing could wake it if the process never answers). The wait ends when the
    /// request finished (success or not: the caller pins again), or with `ECANCELED` when the
    /// region is cancelled (deregistration), or `EFAULT` when it is dead. The request holds a
    /// reference to the region and the mm; if the handler never answers it ends when the
    /// process closes its userfaultfd (at exit at the latest). Sleeps.
    fn wait_for_fault(&self, idx: usize, write: bool) -> Result {
        // SAFETY: `self` lives in an `Arc` (type invariant) and the caller holds a reference to
        // the registration (it is accessing the region), so the count is not zero.
        let region: Arc<Region> = unsafe { ArcBorrow::from_raw(self) }.into();
        let va = self.start + idx * PAGE_SIZE;
        let ticket = self.pages.lock().faults_done;
        let request = KBox::pin_init(
            pin_init!(FaultRequest {
                region,
                va,
                write,
                work <- new_work!("vamr_fault_request"),
            }),
            GFP_KERNEL,
        )?;
        let _ = crate::workqueue_get().enqueue(request);
        self.stats.add(Kind::FaultRequests, 1);
        let mut slots = self.pages.lock();
        while slots.faults_done == ticket {
            if slots.dead {
                return Err(EFAULT);
            }
            if self.cancelled.load(Ordering::Acquire) {
                return Err(ECANCELED);
            }
            self.fault_done.wait(&mut slots);
        }
        Ok(())
    }

    /// `ECANCELED` once [`Region::cancel`] ran; `EINTR` when current has a fatal signal.
    fn check_interrupted(&self) -> Result {
        if self.cancelled.load(Ordering::Acquire) {
            return Err(ECANCELED);
        }
        // SAFETY: no preconditions; reads current's pending signals.
        if unsafe { vamr_fatal_signal_pending() } {
            return Err(EINTR);
        }
        Ok(())
    }

    /// The next run `[i, j)` within `[idx, end)` of slots that a pin round in `mode` must fill
    /// (absent, suspect, or a read pin where `mode` writes), or `None` when there is none.
    /// Errors: `EFAULT` when the region is dead.
    fn next_gap(&self, idx: usize, end: usize, mode: PinMode) -> Result<Option<(usize, usize)>> {
        let slots = self.pages.lock();
        if slots.dead {
            return Err(EFAULT);
        }
        let needs = |p: &Option<PagePin>| match p {
            None => true,
            Some(pin) => !pin.usable(mode.write),
        };
        let Some(i) = (idx..end).find(|&i| needs(&slots.pins[i])) else {
            return Ok(None);
        };
        let j = (i..end).find(|&j| !needs(&slots.pins[j])).unwrap_or(end);
        Ok(Some((i, j)))
    }

    /// Pins the pages of `[first, first + count)` that `mode` needs (absent ones, and read pins
    /// when `mode` writes), batch by batch, following the `mmu_interval_read_begin()` /
    /// `mmu_interval_read_retry()` protocol: pin without the lock, commit a batch under the
    /// lock only if no invalidation began since its `read_begin`, else drop it and pin it again
    /// ([`REPIN_ATTEMPTS`] times, then leave it absent). Pages that cannot be pinned are
    /// skipped: holes and VMAs that refuse the access a VMA at a time, other pages one by one
    /// (see [`resume_after_fault`]).
    ///
    /// Bounded: each round pins at most `PIN_BATCH` pages, and between rounds the call stops
    /// with `ECANCELED` once the region is cancelled and with `EINTR` on a fatal signal.
    ///
    /// Returns the number of pages committed. Errors: `EFAULT` when nothing was committed and
    /// a page failed with it, or the region is dead; `ECANCELED`, `EINTR`, `ENOMEM` and other
    /// GUP errors. Sleeps; the region lock must not be held.
    fn fill(
        &self,
        mm: &MmWithUser,
        first: usize,
        count: usize,
        cause: PinCause,
        mode: PinMode,
    ) -> Result<usize> {
        let _active = FillGuard::enter(self)?;
        let end = first + count;
        let mut idx = first;
        let mut committed = 0;
        let mut faulted = false;
        'pages: while idx < end {
            self.check_interrupted()?;
            let Some((gap, gap_end)) = self.next_gap(idx, end, mode)? else {
                break;
            };
            idx = gap;
            for _ in 0..REPIN_ATTEMPTS {
                let seq = self.notifier.read_begin();
                let va = self.start + idx * PAGE_SIZE;
                let pins = match pin_user_range(mm, va, gap_end - idx, mode) {
                    Ok(pins) => pins,
                    Err(e) if e == EFAULT && cause == PinCause::Access => {
                        // The access fails at this page; what was pinned before it stays.
                        if committed == 0 && idx == first {
                            self.stats.add(Kind::AccessFaults, 1);
                            return Err(EFAULT);
                        }
                        break 'pages;
                    }
                    Err(e) if e == EFAULT => {
                        // Skip the page, the hole after it up to the next VMA, or the whole
                        // VMA when its protection refuses the access.
                        faulted = true;
                        let resume = resume_after_fault(mm, va, mode.write);
                        let next = resume.saturating_sub(self.start).div_ceil(PAGE_SIZE);
                        idx = next.clamp(idx + 1, end);
                        continue 'pages;
                    }
                    Err(e) => return Err(e),
                };
                let n = pins.len();
                match self.commit(idx, pins, seq)? {
                    Some(c) => {
                        committed += c;
                        idx += n;
                        continue 'pages;
                    }
                    None => {
                        self.stats.add(Kind::RepinRetries, 1);
                        self.check_interrupted()?;
                    }
                }
            }
            // Invalidations kept winning: leave this batch absent (pinned on demand later).
            idx += 1;
        }
        match cause {
            PinCause::Verify => self.stats.add(Kind::PinsSwapped, committed as u64),
            PinCause::OnDemand | PinCause::Access => {
                self.stats.add(Kind::OnDemandRepins, committed as u64)
            }
            PinCause::Register => {}
        }
        if committed == 0 && faulted {
            return Err(EFAULT);
        }
        Ok(committed)
    }

    /// The verify pass of the region, run by its mm's verify work (see [`MmState`]): checks
    /// every suspect pin against the page table, a batch of [`PIN_BATCH`] pages at a time, and
    /// keeps it (the same page is mapped; a write pin whose page is no longer mapped writable
    /// loses its write permission), replaces it (another page is present: pinned with
    /// `FOLL_NOFAULT`) or unpins it (nothing present: the process released the page, which
    /// stays released). Never faults memory in and never waits for a userfault. Bounded as
    /// [`Region::fill`]; stops when the region is cancelled. May sleep.
    pub(crate) fn verify(&self, mm: &MmWithUser) {
        let Ok(_active) = FillGuard::enter(self) else {
            return;
        };
        let (a, b) = {
            let mut slots = self.pages.lock();
            core::mem::take(&mut slots.suspect)
        };
        let mut i = a;
        while i < b {
            if self.cancelled.load(Ordering::Acquire) {
                return;
            }
            let j = (i + PIN_BATCH).min(b);
            if self.verify_batch(mm, i, j).is_err() {
                return;
            }
            i = j;
        }
    }

    /// Verifies the suspect pins of `[i, j)` (at most [`PIN_BATCH`] pages): see
    /// [`Region::verify`]. Errors: `EFAULT` (dead), `ENOMEM`, `ECANCELED`, `EINTR`.
    fn verify_batch(&self, mm: &MmWithUser, i: usize, j: usize) -> Result {
        let n = j - i;
        let mut pfns = KVec::from_elem(0usize, n, GFP_KERNEL)?;
        // Unpinned after the lock is released; room for every pin of the batch.
        let mut gone: KVec<PinnedPage> = KVec::with_capacity(n, GFP_KERNEL)?;
        let mut attempts = 0;
        let (kept, swap) = loop {
            attempts += 1;
            let seq = self.notifier.read_begin();
            let snap = self.notifier.snapshot(seq, self.start + i * PAGE_SIZE, &mut pfns);
            let mut slots = self.pages.lock();
            if slots.dead {
                return Err(EFAULT);
            }
            let stale = match snap {
                Ok(()) => self.notifier.read_retry(seq),
                Err(EBUSY) => true,
                // Cannot read the page table: treat every suspect pin as gone.
                Err(_) => {
                    pfns.iter_mut().for_each(|p| *p = 0);
                    false
                }
            };
            if stale && attempts < REPIN_ATTEMPTS {
                drop(slots);
                self.stats.add(Kind::RepinRetries, 1);
                continue;
            }
            let mut kept = 0u64;
            // First and last index + 1 of the pins replaced by another present page.
            let mut swap = (usize::MAX, 0);
            for k in i..j {
                let Some(pin) = &mut slots.pins[k] else {
                    continue;
                };
                if !pin.suspect {
                    continue;
                }
                let mapped = if stale {
                    // Invalidations kept racing: nothing is known, drop the pin.
                    Mapped::Nothing
                } else {
                    Mapped::from_hmm_pfn(pfns[k - i])
                };
                match mapped {
                    Mapped::Page { page, write } if page == pin.page.as_ptr() => {
                        pin.suspect = false;
                        if !write {
                            pin.page.forbid_writes();
                        }
                        kept += 1;
                    }
                    other => {
                        if let Some(old) = slots.pins[k].take() {
                            // Cannot fail: `gone` has room for every pin of the batch.
                            let _ = gone.push_within_capacity(old.page);
                        }
                        if matches!(other, Mapped::Page { .. }) {
                            swap = (swap.0.min(k), k + 1);
                        }
                    }
                }
            }
            break (kept, swap);
        };
        let dropped = gone.len() as u64;
        drop(gone);
        self.stats.add(Kind::PinsKept, kept);
        self.stats.add(Kind::PagesUnpinned, dropped);
        self.stats.sub(Kind::PagesPinned, dropped);
        if swap.0 < swap.1 {
            // Pin the pages mapped now in place of the old ones, without faulting: what is not
            // present stays absent and is pinned by the next access that needs it.
            let mode = PinMode {
                write: self.access.write,
                nofault: true,
                owner: false,
            };
            match self.fill(mm, swap.0, swap.1 - swap.0, PinCause::Verify, mode) {
                Ok(_) | Err(EFAULT) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Commits `pins` (the pages from index `idx` on) into the absent slots, in place of
    /// suspect pins, and in place of read pins when they are write pins, unless an invalidation
    /// began since `read_begin` returned `seq` (then every pin of the round is the page mapped
    /// now). Returns the number committed, or `None` when the round must be retried. Pins not
    /// committed, and the pins replaced, are dropped after the lock is released. Errors:
    /// `EFAULT` (dead region), `ENOMEM`.
    fn commit(&self, idx: usize, mut pins: KVec<PinnedPage>, seq: usize) -> Result<Option<usize>> {
        // Room for the duplicates, allocated before the lock (no allocation under it).
        let mut extra: KVec<PinnedPage> = KVec::with_capacity(pins.len(), GFP_KERNEL)?;
        let mut slots = self.pages.lock();
        if slots.dead {
            drop(slots);
            return Err(EFAULT);
        }
        if self.notifier.read_retry(seq) {
            drop(slots);
            return Ok(None);
        }
        let mut committed = 0;
        let mut added = 0u64;
        for (i, pin) in pins.drain_all().enumerate() {
            let slot = &mut slots.pins[idx + i];
            match slot {
                None => {
                    *slot = Some(PagePin {
                        page: pin,
                        suspect: false,
                    });
                    committed += 1;
                    added += 1;
                }
                Some(old) if old.suspect || (pin.writable() && !old.page.writable()) => {
                    // The new pin is the page mapped now (no invalidation began since `seq`):
                    // it replaces a suspect pin, or a read pin when it is a write pin. Cannot
                    // fail: `extra` has room for every pin.
                    let _ = extra.push_within_capacity(core::mem::replace(&mut old.page, pin));
                    old.suspect = false;
                    committed += 1;
                }
                Some(_) => {
                    // Pinned meanwhile by someone else: keep theirs. Cannot fail, as above.
                    let _ = extra.push_within_capacity(pin);
                }
            }
        }
        drop(slots);
        self.stats.add(Kind::PagesPinned, added);
        // `extra` is dropped (unpinned) here, outside the lock.
        Ok(Some(committed))
    }

    /// Runs `f` on the pinned page with index `idx`, pinning it on demand first (for writing
    /// when `write`, upgrading a read pin) together with the pages of the same access up to
    /// index `last` (at most [`PIN_BATCH`] in one GUP call), with the region lock held (so no
    /// invalidation can unpin it meanwhile). `f` must not sleep, allocate or touch user
    /// memory.
    ///
    /// Errors: `EFAULT` when nothing is mapped there, the protection forbids the access, or the
    /// region is dead (process exit); `ECANCELED` once the region is cancelled (deregistration);
    /// `EAGAIN` when invalidations keep winning.
    fn with_page<R>(
        &self,
        idx: usize,
        last: usize,
        write: bool,
        f: impl FnOnce(NonNull<bindings::page>) -> R,
    ) -> Result<R> {
        for _ in 0..REPIN_ATTEMPTS {
            {
                let slots = self.pages.lock();
                if slots.dead {
                    return Err(EFAULT);
                }
                if self.cancelled.load(Ordering::Acquire) {
                    return Err(ECANCELED);
                }
                match &slots.pins[idx] {
                    Some(pin) if pin.usable(write) => {
                        // A pinned page pointer is never NULL.
                        let page = NonNull::new(pin.page.as_ptr()).ok_or(EFAULT)?;
                        return Ok(f(page));
                    }
                    _ => {}
                }
            }
            let mm = self.mm.mmget_not_zero().ok_or(EFAULT)?;
            let mode = PinMode {
                write,
                nofault: false,
                owner: self.current_is_owner(),
            };
            let count = (last + 1 - idx).min(PIN_BATCH);
            let pinned = self.fill(&mm, idx, count, PinCause::Access, mode);
            drop(mm);
            if pinned == Err(EBUSY) {
                // A userfault that this context must not wait for: a work item delivers it
                // to the handler, and this access waits for it, cancellably.
                self.wait_for_fault(idx, write)?;
                continue;
            }
            pinned?;
        }
        Err(EAGAIN)
    }

    /// Checks that `[va, va + len)` lies inside the registered byte range and returns the
    /// offset of `va` from `start`. Errors: `EINVAL` (outside, overflow, or `len` 0).
    fn offset_of(&self, va: usize, len: usize) -> Result<usize> {
        let end = va.checked_add(len).ok_or(EINVAL)?;
        if len == 0 || va < self.addr || end > self.addr + self.len {
            return Err(EINVAL);
        }
        Ok(va - self.start)
    }

    /// Moves `n` bytes between the pinned page `idx` (from byte `in_page`) and `io`'s buffer,
    /// under the region lock, pinning the page on demand first (with the rest of the access, up
    /// to page `last`). Errors: see [`Region::with_page`].
    ///
    /// The callers split copies at page boundaries, so `[in_page, in_page + n)` lies in the
    /// page. User space and devices may access the page at the same time; as for every copy to
    /// or from user memory, that is outside Rust's model (no Rust reference to it exists).
    fn page_io(&self, idx: usize, last: usize, in_page: usize, n: usize, io: PageIo) -> Result {
        let write = matches!(io, PageIo::Write(_));
        self.with_page(idx, last, write, |page| {
            // SAFETY: the region lock (held inside `with_page`) keeps the page pinned; the range
            // lies in it and `io` points to `n` bytes (`PageIo` contract); see above for races.
            unsafe {
                let page = BorrowedPage::from_raw(page);
                match io {
                    PageIo::Read(dst) => page.read_raw(dst, in_page, n),
                    PageIo::Write(src) => page.write_raw(src, in_page, n),
                }
            }
        })?
    }

    /// Checks a copy of `len` bytes at `va` and calls `step(idx, last, in_page, done, n)` for
    /// each page-bounded piece, in order (`last` is the index of the copy's last page); then
    /// counts the bytes. Errors: `EINVAL` (range outside
    /// the region), `EACCES` (write to a read-only region), and those of `step`.
    fn walk(
        &self,
        va: usize,
        len: usize,
        dir: Dir,
        mut step: impl FnMut(usize, usize, usize, usize, usize) -> Result,
    ) -> Result {
        if dir == Dir::Write && !self.access.write {
            return Err(EACCES);
        }
        let mut off = self.offset_of(va, len)?;
        let last = (off + len - 1) / PAGE_SIZE;
        let mut done = 0;
        while done < len {
            let in_page = off % PAGE_SIZE;
            let n = (PAGE_SIZE - in_page).min(len - done);
            step(off / PAGE_SIZE, last, in_page, done, n)?;
            done += n;
            off += n;
        }
        match dir {
            Dir::Read => self.stats.add(Kind::BytesRead, len as u64),
            Dir::Write => self.stats.add(Kind::BytesWritten, len as u64),
        }
        Ok(())
    }

    /// Copies `len` bytes between the region at `va` and a buffer the caller cannot touch under
    /// a lock (user memory), through a page-sized bounce buffer. Any alignment and length.
    ///
    /// For each page-bounded piece, `chunk(bounce)` moves data between `bounce` and the
    /// caller's buffer, in order: for [`Dir::Write`] it fills `bounce` before the page is
    /// written, for [`Dir::Read`] it consumes `bounce` after the page was read. It runs without
    /// the region lock and may sleep or fault.
    ///
    /// Errors: `EINVAL` (range outside the region), `EACCES` (write to a read-only region),
    /// `EFAULT`, `ECANCELED` (see [`Region::with_page`]), `EINTR` (fatal signal), `ENOMEM`, and
    /// the errors of `chunk`. On error some bytes may have been copied. Sleeps.
    pub(crate) fn copy_bounced(
        &self,
        va: usize,
        len: usize,
        dir: Dir,
        mut chunk: impl FnMut(&mut [u8]) -> Result,
    ) -> Result {
        let mut bounce = KVec::<u8>::from_elem(0u8, PAGE_SIZE.min(len.max(1)), GFP_KERNEL)?;
        self.walk(va, len, dir, |idx, last, in_page, _done, n| {
            // A copy for user space may span a large region: stop on cancellation and on a
            // fatal signal between pages.
            self.check_interrupted()?;
            let buf = &mut bounce[..n];
            if dir == Dir::Write {
                chunk(buf)?;
            }
            let io = match dir {
                Dir::Read => PageIo::Read(buf.as_mut_ptr()),
                Dir::Write => PageIo::Write(buf.as_ptr()),
            };
            self.page_io(idx, last, in_page, n, io)?;
            if dir == Dir::Read {
                chunk(buf)?;
            }
            Ok(())
        })
    }

    /// Copies from the region at `va` into the kernel buffer `buf` (`buf.len()` bytes), straight
    /// from the pinned pages. Errors and context: as [`Region::copy_bounced`].
    pub(crate) fn read_into(&self, va: usize, buf: &mut [u8]) -> Result {
        let ptr = buf.as_mut_ptr();
        self.walk(va, buf.len(), Dir::Read, |idx, last, in_page, done, n| {
            // `done + n <= buf.len()`: `walk` splits exactly `buf.len()` bytes.
            self.page_io(idx, last, in_page, n, PageIo::Read(ptr.wrapping_add(done)))
        })
    }

    /// Copies the kernel buffer `buf` into the region at `va`, straight into the pinned pages.
    /// Errors and context: as [`Region::copy_bounced`].
    pub(crate) fn write_from(&self, va: usize, buf: &[u8]) -> Result {
        let ptr = buf.as_ptr();
        self.walk(va, buf.len(), Dir::Write, |idx, last, in_page, done, n| {
            // `done + n <= buf.len()`: `walk` splits exactly `buf.len()` bytes.
            self.page_io(idx, last, in_page, n, PageIo::Write(ptr.wrapping_add(done)))
        })
    }

    /// Performs an 8-byte atomic at `va` (8-byte aligned, inside the region) and returns the
    /// value found before it (for [`AtomicOp::Write`]: the value overwritten).
    ///
    /// Errors: `EINVAL` (misaligned or outside), `EACCES` (read-only region), `EFAULT` (see
    /// [`Region::with_page`]). Sleeps (may pin on demand); the atomic itself runs under the
    /// region lock.
    pub(crate) fn atomic(&self, va: usize, op: AtomicOp) -> Result<u64> {
        if va % 8 != 0 {
            return Err(EINVAL);
        }
        if !self.access.write {
            return Err(EACCES);
        }
        let off = self.offset_of(va, 8)?;
        let old = self.with_page(off / PAGE_SIZE, off / PAGE_SIZE, true, |page| {
            // Nothing between the map and the matching `kunmap_local` sleeps or maps a page.
            // SAFETY: the region lock (held inside `with_page`) keeps the page pinned.
            let base = unsafe { bindings::kmap_local_page(page.as_ptr()) };
            // `off` is 8-byte aligned (checked above), so the word lies within the mapped page.
            // SAFETY: valid and aligned for an `AtomicU64`; other users of the word (user space,
            // devices) use machine accesses, as with any shared user memory.
            let word = unsafe {
                core::sync::atomic::AtomicU64::from_ptr(
                    base.cast::<u8>().add(off % PAGE_SIZE).cast::<u64>(),
                )
            };
            let old = match op {
                AtomicOp::CmpSwap { compare, swap } => {
                    match word.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                        Ok(v) | Err(v) => v,
                    }
                }
                AtomicOp::FetchAdd { add } => word.fetch_add(add, Ordering::SeqCst),
                AtomicOp::Write { value } => word.swap(value, Ordering::SeqCst),
            };
            // SAFETY: `base` came from the `kmap_local_page` above, on this CPU, and is unmapped
            // exactly once.
            unsafe { bindings::kunmap_local(base) };
            old
        })?;
        self.stats.add(Kind::BytesWritten, 8);
        Ok(old)
    }

    /// Pins the pages of `[va, va + len)` now, as `how` asks (the semantics of
    /// `ibv_advise_mr()` on an ODP MR): for reading, faulting pages in; for writing, faulting and
    /// breaking COW; or, with `nofault`, only the pages present in the page table, for reading.
    /// Returns the pages newly pinned (or upgraded to write pins).
    ///
    /// Errors: as [`Region::copy_bounced`]'s range checks; `EACCES` for a write prefetch of a
    /// read-only region; without `nofault`, `EFAULT` when no page of the range is pinned as
    /// asked afterwards (nothing mapped, or the protection refuses the access); `ECANCELED`, `EINTR`, `ENOMEM`. Sleeps;
    /// bounded as [`Region::fill`].
    pub(crate) fn prefetch(&self, va: usize, len: usize, how: Prefetch) -> Result<usize> {
        if how.write && !self.access.write {
            return Err(EACCES);
        }
        let off = self.offset_of(va, len)?;
        let (a, b) = (off / PAGE_SIZE, (off + len).div_ceil(PAGE_SIZE));
        let mm = self.mm.mmget_not_zero().ok_or(EFAULT)?;
        let mode = PinMode {
            write: how.write,
            nofault: how.nofault,
            owner: self.current_is_owner(),
        };
        let pinned = match self.fill(&mm, a, b - a, PinCause::OnDemand, mode) {
            Ok(n) => n,
            Err(EFAULT) => 0,
            Err(e) => return Err(e),
        };
        if how.nofault {
            return Ok(pinned);
        }
        let slots = self.pages.lock();
        let usable = |p: &Option<PagePin>| matches!(p, Some(pin) if pin.usable(how.write));
        if slots.dead || !slots.pins[a..b].iter().any(usable) {
            return Err(EFAULT);
        }
        Ok(pinned)
    }

    /// Tears the region down: no invalidation runs after it, no pin round runs after it, every
    /// pin is dropped, the `pinned_vm` charge is returned. Idempotent. Sleeps (waits for running
    /// invalidations and for pin rounds in progress, each bounded by one batch).
    fn teardown(&self) {
        if self.torn_down.swap(true, Ordering::AcqRel) {
            return;
        }
        // Stop long operations, then mark dead: from now on invalidations neither queue work
        // nor keep pages, and no pin round starts.
        self.cancel();
        self.pages.lock().dead = true;
        self.notifier.remove();
        let pins = {
            let mut slots = self.pages.lock();
            // Wait for pin rounds in progress: each ends within one batch once it sees the
            // region cancelled (see `fill`), and its uncommitted pins are dropped before it
            // leaves, so none outlives the registration.
            while slots.fills > 0 {
                self.idle.wait(&mut slots);
            }
            slots.suspect = (0, 0);
            core::mem::take(&mut slots.pins)
        };
        let dropped = pins.iter().filter(|p| p.is_some()).count();
        crate::pin::unpin_all(pins.into_iter().flatten().map(|p| p.page));
        self.stats.sub(Kind::PagesPinned, dropped as u64);
        self.stats.sub(Kind::Regions, 1);
        PinnedVmCharge::release(&self.mm, self.npages);
    }
}

/// A fault delivered from the module's workqueue on behalf of an access that must not wait
/// on a userfault itself (see [`Region::wait_for_fault`]).
#[pin_data]
struct FaultRequest {
    region: Arc<Region>,
    /// The page to fault in (page aligned).
    va: usize,
    write: bool,
    #[pin]
    work: Work<FaultRequest>,
}

impl_has_work! {
    impl HasWork<Self> for FaultRequest { self.work }
}

impl WorkItem for FaultRequest {
    type Pointer = Pin<KBox<FaultRequest>>;

    /// Faults the page in, waiting for the userfaultfd handler if needed (or until the
    /// process closes its userfaultfd), then wakes the waiting access. Holds the region (not
    /// its registration) and, while faulting, a user reference on the mm.
    fn run(this: Pin<KBox<FaultRequest>>) {
        let region = &this.region;
        if !region.cancelled.load(Ordering::Acquire) {
            if let Some(mm) = region.mm.mmget_not_zero() {
                // Failures are seen by the access, which pins again.
                let _ = crate::pin::fault_in(&mm, this.va, this.write);
            }
        }
        let mut slots = region.pages.lock();
        slots.faults_done += 1;
        region.fault_done.notify_all();
    }
}

/// One [`Region::fill`] in progress, counted in `Slots::fills`.
struct FillGuard<'a>(&'a Region);

impl<'a> FillGuard<'a> {
    /// Counts a pin round in. Errors: `EFAULT` when the region is dead, `ECANCELED` when it is
    /// cancelled (teardown sets both before it waits, so no round starts after that).
    fn enter(region: &'a Region) -> Result<Self> {
        let mut slots = region.pages.lock();
        if slots.dead {
            return Err(EFAULT);
        }
        if region.cancelled.load(Ordering::Acquire) {
            return Err(ECANCELED);
        }
        slots.fills += 1;
        Ok(FillGuard(region))
    }
}

impl Drop for FillGuard<'_> {
    fn drop(&mut self) {
        let mut slots = self.0.pages.lock();
        slots.fills -= 1;
        if slots.fills == 0 {
            self.0.idle.notify_all();
        }
    }
}

/// The owning handle of a registered region: dropping it tears the region down (while the
/// region's reference count is still held, see the [`Region`] invariants), then gives back
/// the region's slot under the per-process limit.
pub(crate) struct Registration {
    region: Arc<Region>,
    _slot: MmSlot,
}

impl Registration {
    /// Another reference to the region, for an access that must not hold the caller's lock.
    pub(crate) fn region(&self) -> Arc<Region> {
        self.region.clone()
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

/// A charge of pages to `mm->pinned_vm`, refunded on drop unless committed.
struct PinnedVmCharge<'a> {
    mm: &'a Mm,
    npages: usize,
}

impl<'a> PinnedVmCharge<'a> {
    /// Charges `npages` to `mm->pinned_vm`. Errors: `ENOMEM` when the total would exceed
    /// `RLIMIT_MEMLOCK` of current and current lacks `CAP_IPC_LOCK` (the check of
    /// `ib_umem_get()` in drivers/infiniband/core/umem.c).
    fn new(mm: &'a Mm, npages: usize) -> Result<Self> {
        // SAFETY: `mm` is a valid mm (we hold a reference).
        let total = unsafe { vamr_pinned_vm_add(mm.as_raw(), npages as isize) };
        let charge = PinnedVmCharge { mm, npages };
        // SAFETY: no preconditions; reads current's rlimit.
        let limit = unsafe { vamr_memlock_limit_pages() };
        if total as u64 > limit as u64 {
            // SAFETY: `capable()` may be called from process context with any capability.
            let privileged = unsafe { bindings::capable(bindings::CAP_IPC_LOCK as i32) };
            if !privileged {
                return Err(ENOMEM);
            }
        }
        Ok(charge)
    }

    /// Keeps the charge (it will be returned with [`PinnedVmCharge::release`]).
    fn commit(self) {
        core::mem::forget(self);
    }

    /// Returns a committed charge of `npages` to `mm`.
    fn release(mm: &Mm, npages: usize) {
        // SAFETY: `mm` is a valid mm (we hold a reference).
        unsafe { vamr_pinned_vm_sub(mm.as_raw(), npages as isize) };
    }
}

impl Drop for PinnedVmCharge<'_> {
    fn drop(&mut self) {
        Self::release(self.mm, self.npages);
    }
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
