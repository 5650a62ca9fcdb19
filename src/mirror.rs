// SPDX-License-Identifier: GPL-2.0

//! Mirrors: a VA range of one process mirrored into a device's own translation table, the
//! mirror API of `include/linux/vamr.h` (see `Documentation/vamr.rst`, "Mirror API").
//!
//! A hardware NIC does not ask vamr per access, as rxe does ([`crate::region`]): it DMAs to
//! the addresses its driver programmed into its table (mlx5 MTTs, irdma PBLs) until the driver
//! rewrites them. A [`Mirror`] gives such a driver the DMA addresses of what is mapped in its
//! range now, pinned and mapped on the driver's `struct device` (`dma_map_page()`), on request:
//! [`Mirror::populate`] (what the VMAs map) and [`Mirror::fault`] (a device access to entries
//! the driver does not have, as ODP's page-fault handler asks `hmm_range_fault()`). It follows
//! the mapping with its own `mmu_interval_notifier`; an invalidation of any kind first has the
//! driver zap its entries and fence its DMA ([`RawMirrorOps::invalidate`]), then unmaps and
//! unpins the pages of its range, as `umem_odp.c` unmaps an ODP MR's pages: the device's
//! entries are gone either way, so a mirror keeps no suspect pin to verify (unlike a region).
//! The driver checks the sequence number it got with the addresses under its own lock before
//! it programs them (`mmu_interval_read_retry()`, [`Mirror::retry`]).
//!
//! Lock order: `mmap_lock` (or reclaim) → [`Mirror::inner`] → the driver's invalidate lock
//! (taken by its callback) → the IOMMU's and DMA-API debug's locks (`dma_unmap_page()`).

mod c_api;
mod dma;
mod fault;

use crate::ffi;
use crate::limits::{Budget, User};
use crate::notifier::{
    impl_has_interval_notifier, Event, IntervalNotifier, InvalidateHandler, Range, SeqToken,
};
use crate::pin::{pin_user_range, resume_after_fault, PinMode, Pins, PIN_BATCH};
use crate::region::MmSlot;
use crate::region::{page_cover, PinnedVmCharge};
use core::ffi::c_void;
use core::mem::ManuallyDrop;
use core::ptr::NonNull;
use dma::{DevRef, DmaPin};
use fault::Faults;
use kernel::bindings;
use kernel::mm::MmWithUser;
use kernel::new_mutex;
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;
use kernel::sync::atomic::{Atomic, Relaxed};
use kernel::sync::{aref::ARef, Arc, Mutex};

/// How many times a round that lost a race with an invalidation is done again before the call
/// gives up with `EAGAIN` (the regions' `REPIN_ATTEMPTS`).
const ROUNDS: u32 = 16;

/// How many times in all a pin round whose long-term pin failed with `ENOMEM` (a failed
/// migration out of a movable zone, see the regions' `MIGRATE_ATTEMPTS`) is tried.
const MIGRATE_ATTEMPTS: u32 = 4;

/// Entries an invalidation or teardown unmaps between two rescheduling points (blockable
/// only): bounds how long a large mirror keeps the CPU on a kernel without preemption.
const UNMAP_CHUNK: usize = 512;

/// The table entry of a page that is not populated (`VAMR_MIRROR_NO_PAGE`, which is
/// `DMA_MAPPING_ERROR`: no mapping ever has it).
const NO_PAGE: bindings::dma_addr_t = !0;

/// The driver's invalidate callback (`struct vamr_mirror_ops`): `(priv, start, len, blockable)`,
/// 0 when its entries of the range are zapped and its DMA to them fenced, `-EAGAIN` when it
/// cannot do that without sleeping and `blockable` is false.
pub(crate) type InvalidateFn =
    unsafe extern "C" fn(priv_: *mut c_void, start: usize, len: usize, blockable: bool) -> i32;

/// `struct vamr_mirror_ops`, as declared in `include/linux/vamr.h` (layout asserted in
/// `src/vamr_glue.c`).
#[repr(C)]
pub(crate) struct RawMirrorOps {
    pub(crate) invalidate: Option<InvalidateFn>,
}

/// The driver's side of a mirror: its callback and the `priv` to call it with.
///
/// # Invariants
///
/// `invalidate(priv_, ..)` may be called from any thread until the mirror's teardown returned
/// (the contract of `vamr_mirror_create()`).
struct Driver {
    invalidate: InvalidateFn,
    priv_: *mut c_void,
}

// SAFETY: by the type invariant the callback may be called with `priv_` from any thread, and
// `priv_` is only ever passed back to it.
unsafe impl Send for Driver {}
// SAFETY: as for `Send`; `&Driver` only calls the callback.
unsafe impl Sync for Driver {}

/// The counters of a mirror, in the order of `struct vamr_mirror_counters`.
#[derive(Clone, Copy)]
enum Count {
    PagesMapped,
    Populates,
    DeviceFaults,
    PagesFilled,
    Invalidations,
    InvalidationsRefused,
    PagesUnmapped,
    Retries,
}

/// Number of [`Count`]s.
const COUNTS: usize = Count::Retries as usize + 1;

/// `struct vamr_mirror_counters`: its eight `__u64` fields, in [`Count`] order (size asserted
/// in `src/vamr_glue.c`).
#[repr(C)]
pub(crate) struct MirrorCountersRecord {
    counts: [u64; COUNTS],
}

/// A mirror's counters: relaxed atomics, a snapshot is not consistent across them.
struct Counters([Atomic<u64>; COUNTS]);

impl Counters {
    const fn new() -> Self {
        Counters([const { Atomic::new(0) }; COUNTS])
    }

    fn add(&self, c: Count, n: u64) {
        self.0[c as usize].add(n, Relaxed);
    }

    fn sub(&self, c: Count, n: u64) {
        self.0[c as usize].fetch_sub(n, Relaxed);
    }

    fn snapshot(&self) -> MirrorCountersRecord {
        MirrorCountersRecord {
            counts: core::array::from_fn(|i| self.0[i].load(Relaxed)),
        }
    }
}

/// The fields of a mirror under its [`Mirror::inner`] mutex.
///
/// # Invariants
///
/// `table` has one entry per page of the mirror until teardown empties it, which it does only
/// after setting `dead`: a user of the table that found `dead` clear may index it by page.
struct MirrorInner {
    /// One entry per page of the mirror: `None` when not populated.
    table: KVVec<Option<DmaPin>>,
    /// Set by `MMU_NOTIFY_RELEASE` (process exit) and teardown: nothing is populated any more.
    dead: bool,
    /// The mirror's slot under its mm's and its user's region limits, until teardown takes it.
    slot: Option<MmSlot>,
}

/// A VA range mirrored for a device.
///
/// # Invariants
///
/// - `[start, start + npages * PAGE_SIZE)` is page aligned and below `TASK_SIZE`; `npages`
///   pages are charged to `mm->pinned_vm`, and `inner.slot` holds one slot under the region
///   limits, from [`Mirror::create`] until [`Mirror::teardown`].
/// - The mirror lives in an [`Arc`] whose reference the C handle (`struct vamr_mirror *`) is,
///   until `vamr_mirror_destroy()` tears it down and drops that reference; `notifier` is
///   inserted over the range from creation until teardown.
/// - An entry of `inner.table` is `Some` only while its page is the page mapped at its VA: it
///   is committed under `inner` by a round that no invalidation began since the round's
///   `read_begin`, and every invalidate callback, under `inner` after its `set_seq`, calls the
///   driver's callback and then takes the entries of its range out (unmap, then unpin) before
///   it returns. An address handed to the driver with a sequence that
///   `mmu_interval_read_retry()` still accepts under the driver's lock is therefore mapped and
///   pinned until the driver's callback for its page returned.
/// - Every [`DmaPin`] of `inner.table` is mapped on the device `dev` holds, in the direction
///   `write` gives.
#[pin_data]
pub(crate) struct Mirror {
    /// The subscription over the range; holds the mm.
    #[pin]
    notifier: IntervalNotifier<Mirror>,
    /// The table and the state ([`MirrorInner`]). Taken by the invalidate callback, which runs
    /// under reclaim and with `mmap_lock` or folio locks held: while it is held, no
    /// `GFP_KERNEL` allocation, no GUP, no `mmap_lock`, no user copy, no unpin that sleeps.
    /// Held across the driver's callback.
    #[pin]
    inner: Mutex<MirrorInner>,
    dev: DevRef,
    driver: Driver,
    /// First byte of the range.
    start: usize,
    /// Pages of the range.
    npages: usize,
    /// The device may write: pins with `FOLL_WRITE`, mappings `DMA_BIDIRECTIONAL`.
    write: bool,
    counts: Counters,
    /// The fault requests of the owner's calls, and their cancellation.
    faults: Arc<Faults>,
}

impl_has_interval_notifier! {
    impl HasIntervalNotifier for Mirror { self.notifier }
}

impl InvalidateHandler for Mirror {
    /// Moves the sequence on, has the driver zap and fence the range, then unmaps and unpins
    /// its pages. Refuses (`false`) only a non-blockable invalidation, when the mirror lock is
    /// busy or the driver cannot proceed without sleeping (`-EAGAIN`); nothing is unmapped
    /// then.
    fn invalidate(&self, range: &Range<'_>, seq: &SeqToken<'_>) -> bool {
        let blockable = range.blockable();
        let mut inner = if blockable {
            self.inner.lock()
        } else {
            match self.inner.try_lock() {
                Some(g) => g,
                None => {
                    self.counts.add(Count::InvalidationsRefused, 1);
                    return false;
                }
            }
        };
        seq.set_seq();
        self.counts.add(Count::Invalidations, 1);
        let (a, b) = self.page_span(range.start(), range.end());
        if inner.dead || a >= b {
            return true;
        }
        // The driver first: no pin under the range goes before its entries are gone.
        if !self.driver_invalidate(a, b, blockable) {
            self.counts.add(Count::InvalidationsRefused, 1);
            return false;
        }
        self.unmap_range(&mut inner, a, b, blockable);
        if range.event() == Event::Release {
            inner.dead = true;
        }
        true
    }
}

/// Whether a driver already broke the callback's contract (warned once).
static BROKEN_DRIVER: Atomic<bool> = Atomic::new(false);

impl Mirror {
    /// Creates a mirror of `[addr, addr + len)` of current's mm for `dev` (see
    /// `vamr_mirror_create()` for the rules and errors). Process context of the owner; sleeps.
    ///
    /// # Safety
    ///
    /// `dev` is a valid device on which the caller holds a reference during the call; `driver`
    /// may be called as its invariant says until [`Mirror::teardown`] returned.
    unsafe fn create(
        dev: NonNull<bindings::device>,
        addr: usize,
        len: usize,
        write: bool,
        driver: Driver,
    ) -> Result<Arc<Mirror>> {
        if addr % PAGE_SIZE != 0 || len % PAGE_SIZE != 0 {
            return Err(EINVAL);
        }
        let (start, npages) = page_cover(addr, len)?;
        // SAFETY: reads `TASK_SIZE` of current, no preconditions.
        if start + npages * PAGE_SIZE > unsafe { ffi::vamr_task_size() } {
            return Err(EFAULT);
        }
        let current = kernel::current!();
        let mm = current.mm().ok_or(EFAULT)?;
        // The mirror counts as a region of the creating task's user and mm (`src/limits.rs`).
        let mm_slot = MmSlot::take(mm, &User::current()?)?;
        let charge = PinnedVmCharge::new(mm, npages)?;
        let table = new_table(npages)?;
        let faults = Arc::pin_init(Faults::new(ARef::from(&**mm)), GFP_KERNEL_ACCOUNT)?;
        // SAFETY: the caller's contract.
        let dev = unsafe { DevRef::get(dev) };
        let new = pin_init!(Mirror {
            notifier <- IntervalNotifier::new(ARef::from(&**mm)),
            inner <- new_mutex!(
                MirrorInner { table, dead: false, slot: Some(mm_slot) },
                "vamr_mirror_inner"
            ),
            dev,
            driver,
            start,
            npages,
            write,
            counts: Counters::new(),
            faults,
        });
        let mirror = Arc::pin_init(new, GFP_KERNEL_ACCOUNT)?;
        // INVARIANT: from here on the charge belongs to the mirror (returned by teardown).
        charge.commit();
        // Teach lockdep that the mirror lock, and the driver's lock under it, is taken inside
        // reclaim (by the invalidate callback), as `umem_odp.c` does.
        #[cfg(CONFIG_LOCKDEP)]
        {
            // SAFETY: `fs_reclaim_acquire`/`release` only annotate lockdep; paired here.
            unsafe { bindings::fs_reclaim_acquire(bindings::GFP_KERNEL) };
            drop(mirror.inner.lock());
            // SAFETY: pairs with the acquire above.
            unsafe { bindings::fs_reclaim_release(bindings::GFP_KERNEL) };
        }
        // SAFETY: `notifier` is the `HasIntervalNotifier` field of the mirror, pinned in its
        // `Arc`, which outlives teardown (which removes it).
        if let Err(e) = unsafe { mirror.notifier.insert(start, npages * PAGE_SIZE) } {
            mirror.teardown();
            return Err(e);
        }
        Ok(mirror)
    }

    /// Page index span `[a, b)` of the mirror overlapping the byte range `[s, e)`.
    fn page_span(&self, s: usize, e: usize) -> (usize, usize) {
        let end = self.start + self.npages * PAGE_SIZE;
        let (s, e) = (s.clamp(self.start, end), e.clamp(self.start, end));
        (
            (s - self.start) / PAGE_SIZE,
            (e - self.start).div_ceil(PAGE_SIZE),
        )
    }

    /// The page indexes `[a, a + n)` of the `n` pages from `addr`. Errors: `EINVAL` when
    /// `addr` is not page aligned, `n` is 0 or the pages are not all inside the mirror.
    fn index_range(&self, addr: usize, n: usize) -> Result<(usize, usize)> {
        if addr % PAGE_SIZE != 0 || n == 0 || addr < self.start {
            return Err(EINVAL);
        }
        let a = (addr - self.start) / PAGE_SIZE;
        match a.checked_add(n) {
            Some(b) if b <= self.npages => Ok((a, b)),
            _ => Err(EINVAL),
        }
    }

    /// Whether current runs in the mirror's address space (its owner's process context, where
    /// a fault may be waited for, killably).
    fn current_is_owner(&self) -> bool {
        let mine = self.notifier.mm().as_raw();
        matches!(kernel::current!().mm(), Some(mm) if core::ptr::eq(mm.as_raw(), mine))
    }

    /// Calls the driver's callback for pages `[a, b)`: whether it zapped and fenced them.
    /// Only a non-blockable invalidation may be refused; a driver that refuses a blockable one
    /// breaks its contract, which is reported once, and its pages go all the same (its DMA to
    /// them faults in the IOMMU). Called with `inner` held.
    fn driver_invalidate(&self, a: usize, b: usize, blockable: bool) -> bool {
        let start = self.start + a * PAGE_SIZE;
        let len = (b - a) * PAGE_SIZE;
        // SAFETY: the callback may be called with its `priv_` until teardown returned (the
        // `Driver` invariant), and teardown has not returned while the mirror is used.
        let ret = unsafe { (self.driver.invalidate)(self.driver.priv_, start, len, blockable) };
        if ret == 0 {
            return true;
        }
        if !blockable {
            return false;
        }
        if !BROKEN_DRIVER.xchg(true, Relaxed) {
            pr_warn!(
                "mirror: the driver refused a blockable invalidation ({ret}); unmapping anyway\n"
            );
        }
        true
    }

    /// Unmaps and unpins the populated pages of `[a, b)`, from inside an invalidate callback
    /// (`inner` is its held lock); a rescheduling point every [`UNMAP_CHUNK`] pages when
    /// `blockable`. Does not sleep otherwise.
    fn unmap_range(&self, inner: &mut MirrorInner, a: usize, b: usize, blockable: bool) {
        let end = b.min(inner.table.len());
        let mut n = 0;
        for k in a..end {
            if let Some(p) = inner.table[k].take() {
                p.release(&self.dev, self.write, true);
                n += 1;
            }
            if blockable && (k - a) % UNMAP_CHUNK == UNMAP_CHUNK - 1 {
                crate::pin::cond_resched();
            }
        }
        self.counts.sub(Count::PagesMapped, n);
        self.counts.add(Count::PagesUnmapped, n);
    }

    /// Tears the mirror down: no invalidate callback runs after it, the driver was told to drop
    /// the whole mirror, every page is unmapped and unpinned, the charge and the slot are
    /// returned. Idempotent (the slot marks the first call). Sleeps.
    fn teardown(&self) {
        // No call of the owner still waits for a fault request (none may run any more).
        self.faults.cancel();
        let inserted = self.notifier.remove();
        let (table, slot) = {
            let mut inner = self.inner.lock();
            let Some(slot) = inner.slot.take() else {
                return;
            };
            inner.dead = true;
            if inserted {
                self.driver_invalidate(0, self.npages, true);
            }
            (core::mem::take(&mut inner.table), slot)
        };
        let n = self.release_all(table);
        self.counts.sub(Count::PagesMapped, n);
        PinnedVmCharge::release(self.notifier.mm(), self.npages);
        // Last: may take the registry lock (sleeps), after the mirror lock.
        drop(slot);
    }

    /// Unmaps and unpins the pages of `v`, outside every lock (may sleep); returns how many.
    fn release_all(&self, v: KVVec<Option<DmaPin>>) -> u64 {
        let mut n = 0;
        for (k, p) in v.into_iter().enumerate() {
            if let Some(p) = p {
                p.release(&self.dev, self.write, false);
                n += 1;
            }
            if k % UNMAP_CHUNK == UNMAP_CHUNK - 1 {
                crate::pin::cond_resched();
            }
        }
        n
    }

    /// Pins and maps what the VMAs map in the pages of `out` from `addr`, and fills `out` with
    /// their addresses (see `vamr_mirror_populate()`). Returns the entries populated and the
    /// sequence.
    fn populate(&self, addr: usize, out: &mut [bindings::dma_addr_t]) -> Result<(usize, usize)> {
        self.counts.add(Count::Populates, 1);
        self.map_and_read(addr, out, false)
    }

    /// A device access to the pages of `out` from `addr`: pins and maps them, up to the first
    /// that cannot be (see `vamr_mirror_fault()`). Returns the entries populated from `addr` on
    /// (at least one) and the sequence.
    fn fault(&self, addr: usize, out: &mut [bindings::dma_addr_t]) -> Result<(usize, usize)> {
        self.counts.add(Count::DeviceFaults, 1);
        self.map_and_read(addr, out, true)
    }

    /// `mmu_interval_read_retry()` of the mirror (see `vamr_mirror_retry()`).
    fn retry(&self, seq: usize) -> bool {
        self.notifier.read_retry(seq)
    }

    /// The common part of [`Mirror::populate`] and [`Mirror::fault`] (`need`): under one
    /// sequence, fills the range, then reads its entries under the lock, and does both again
    /// when an invalidation began meanwhile (a pin round's own COW break or migration
    /// invalidates its pages once), [`ROUNDS`] times at most (then `EAGAIN`).
    fn map_and_read(
        &self,
        addr: usize,
        out: &mut [bindings::dma_addr_t],
        need: bool,
    ) -> Result<(usize, usize)> {
        let (a, b) = self.index_range(addr, out.len())?;
        let mm = self.notifier.mm().mmget_not_zero().ok_or(EFAULT)?;
        // Never waits inside GUP (nothing could end that wait): a fault that would wait is
        // delivered by a fault request, which the owner waits for cancellably.
        let mode = PinMode {
            write: self.write,
            nofault: false,
            may_wait: false,
        };
        for _ in 0..ROUNDS {
            if self.faults.cancelled() {
                return Err(ECANCELED);
            }
            let seq = self.notifier.read_begin();
            self.fill(&mm, a, b, need, mode)?;
            let inner = self.inner.lock();
            if inner.dead {
                return Err(EFAULT);
            }
            if self.notifier.read_retry(seq) {
                drop(inner);
                self.counts.add(Count::Retries, 1);
                continue;
            }
            let n = read_out(&inner.table[a..b], out, need);
            if need && n == 0 {
                return Err(EFAULT);
            }
            return Ok((n, seq));
        }
        Err(EAGAIN)
    }

    /// Pins and maps the pages of `[a, b)` that are not populated, batch by batch. Pages that
    /// cannot be pinned are skipped (a hole up to the next VMA, a VMA that refuses the access
    /// as a whole), unless `need`: then the call stops there, with `EFAULT` when that is page
    /// `a`. Errors: `EINTR` (fatal signal between batches), `EFAULT` (dead), those of
    /// [`Mirror::fill_batch`]. Sleeps; no lock held.
    fn fill(&self, mm: &MmWithUser, a: usize, b: usize, need: bool, mode: PinMode) -> Result {
        let mut idx = a;
        while idx < b {
            // SAFETY: no preconditions; reads current's pending signals.
            if unsafe { ffi::vamr_fatal_signal_pending() } {
                return Err(EINTR);
            }
            let Some((i, j)) = self.next_gap(idx, b)? else {
                return Ok(());
            };
            match self.fill_batch(mm, i, j, mode)? {
                Some(n) => idx = i + n,
                None if need && i == a => return Err(EFAULT),
                None if need => return Ok(()),
                None => {
                    let resume = resume_after_fault(mm, self.start + i * PAGE_SIZE, mode.write);
                    let next = resume.saturating_sub(self.start).div_ceil(PAGE_SIZE);
                    idx = next.clamp(i + 1, b);
                }
            }
        }
        Ok(())
    }

    /// The first run `[i, j)` of entries within `[idx, b)` that are not populated, at most
    /// [`PIN_BATCH`] long, or `None`. Errors: `EFAULT` when the mirror is dead.
    fn next_gap(&self, idx: usize, b: usize) -> Result<Option<(usize, usize)>> {
        let inner = self.inner.lock();
        if inner.dead {
            return Err(EFAULT);
        }
        let table = &inner.table[idx..b];
        let Some(i) = table.iter().position(Option::is_none) else {
            return Ok(None);
        };
        let run = table[i..]
            .iter()
            .take(PIN_BATCH)
            .take_while(|p| p.is_none());
        Ok(Some((idx + i, idx + i + run.count())))
    }

    /// One pin round over `[i, j)`: pins (from `i`, up to the first page that cannot be
    /// pinned), maps, and commits unless an invalidation began since its `read_begin`, else
    /// again ([`ROUNDS`] in all; a failed migration [`MIGRATE_ATTEMPTS`]). Returns the pages
    /// committed from `i`, or `None` when page `i` cannot be pinned (nothing mapped, the
    /// protection refuses the access). A fault that would wait is delivered by a fault request
    /// ([`Mirror::wait_for_fault`]) and the round done again. Errors: `EAGAIN` (lost every
    /// round, or a fault that would wait outside the owner's context), `ECANCELED`,
    /// `ENOMEM` (pin, mapping), `EINTR`, `EFAULT` (dead), other GUP errors.
    fn fill_batch(
        &self,
        mm: &MmWithUser,
        i: usize,
        j: usize,
        mode: PinMode,
    ) -> Result<Option<usize>> {
        let (va, n) = (self.start + i * PAGE_SIZE, j - i);
        let mut failed_migrations = 0;
        for _ in 0..ROUNDS {
            let seq = self.notifier.read_begin();
            let pins = match pin_user_range(mm, va, n, n, n, mode) {
                Ok(pins) => pins,
                Err(e) if e == EFAULT => return Ok(None),
                // A fault that would wait (a userfault, a FUSE READ, I/O).
                Err(e) if e == EBUSY => {
                    self.wait_for_fault(va)?;
                    continue;
                }
                Err(e) if e == ENOMEM && failed_migrations + 1 < MIGRATE_ATTEMPTS => {
                    failed_migrations += 1;
                    self.counts.add(Count::Retries, 1);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let got = pins.len();
            let mapped = self.map_pins(pins)?;
            if self.commit(i, mapped, seq)? {
                self.counts.add(Count::PagesFilled, got as u64);
                return Ok(Some(got));
            }
            self.counts.add(Count::Retries, 1);
        }
        Err(EAGAIN)
    }

    /// Has the fault at `va` that a pin round must not wait for delivered by a fault request,
    /// and waits for it: the owner only, cancellably. Errors: `EAGAIN` outside the owner's
    /// context (a work item: it does not wait) and past the bounds of fault requests (per mm
    /// and per user, `max_fault_requests_per_user`), `ECANCELED` (`vamr_mirror_cancel()`),
    /// `EINTR` (a signal), `EFAULT` (torn down), `ENOMEM`. Sleeps; no lock held.
    fn wait_for_fault(&self, va: usize) -> Result {
        if !self.current_is_owner() {
            return Err(EAGAIN);
        }
        Faults::wait_for(&self.faults, va, self.write, || {
            match &self.inner.lock().slot {
                Some(slot) => slot.charge(Budget::FaultRequests),
                None => Err(EFAULT),
            }
        })
    }

    /// Maps every pin of a round on the device, in order. Errors: `ENOMEM` (allocation, or a
    /// mapping failed: the device's DMA mask, the IOMMU's space); then nothing of the round is
    /// left mapped or pinned. Does not sleep but to allocate.
    fn map_pins(&self, pins: Pins) -> Result<KVVec<Option<DmaPin>>> {
        let mut out = KVVec::with_capacity(pins.len(), GFP_KERNEL_ACCOUNT)?;
        for pin in pins.into_pins() {
            let mut dma = 0;
            // SAFETY: `dev` holds a reference to the device and `pin` holds the page; `dma` is
            // a valid out pointer.
            let ret = unsafe {
                ffi::vamr_dma_map_page(self.dev.as_raw(), pin.as_ptr(), self.write, &mut dma)
            };
            if ret != 0 {
                // Not mapped: only unpinned. Those mapped before it are released; the rest of
                // the round is unpinned when the iterator is dropped.
                drop(pin);
                self.release_all(out);
                return Err(Error::from_errno(ret));
            }
            // INVARIANT: `dma` maps `pin`'s page on the mirror's device in its direction.
            let p = DmaPin {
                pin: ManuallyDrop::new(pin),
                dma,
            };
            // Cannot fail: room for every pin of the round. Were it to, it is released.
            if let Err(e) = out.push_within_capacity(Some(p)) {
                self.release_one(e.0);
            }
        }
        Ok(out)
    }

    /// Releases one entry that could not be stored.
    fn release_one(&self, p: Option<DmaPin>) {
        if let Some(p) = p {
            p.release(&self.dev, self.write, false);
        }
    }

    /// Commits the pages of `mapped` (from index `i` on) into the entries that are not
    /// populated, unless an invalidation began since the round's `read_begin` (`seq`): whether
    /// it committed. What is not committed (a stale round, entries populated meanwhile by
    /// another call) is unmapped and unpinned after the lock. Errors: `EFAULT` (dead).
    fn commit(&self, i: usize, mut mapped: KVVec<Option<DmaPin>>, seq: usize) -> Result<bool> {
        let n = mapped.len();
        let res = {
            let mut inner = self.inner.lock();
            if inner.dead {
                Err(EFAULT)
            } else if self.notifier.read_retry(seq) {
                Ok(false)
            } else {
                let mut c = 0;
                if let Some(slots) = inner.table.get_mut(i..i + n) {
                    for (slot, m) in slots.iter_mut().zip(mapped.iter_mut()) {
                        if slot.is_none() {
                            *slot = m.take();
                            c += 1;
                        }
                    }
                }
                self.counts.add(Count::PagesMapped, c);
                Ok(true)
            }
        };
        self.release_all(mapped);
        res
    }
}

/// Writes the addresses of `table`'s entries into `out` (same length), [`NO_PAGE`] for an
/// entry not populated, and returns how many are populated; with `need`, only the entries
/// before the first that is not (the rest are [`NO_PAGE`]).
fn read_out(table: &[Option<DmaPin>], out: &mut [bindings::dma_addr_t], need: bool) -> usize {
    let mut n = 0;
    let mut gap = false;
    for (o, p) in out.iter_mut().zip(table) {
        gap |= need && p.is_none();
        *o = match p {
            Some(p) if !gap => {
                n += 1;
                p.dma
            }
            _ => NO_PAGE,
        };
    }
    n
}

/// A table of `npages` entries, none populated; charged to the memory cgroup of current.
fn new_table(npages: usize) -> Result<KVVec<Option<DmaPin>>> {
    let flags = GFP_KERNEL_ACCOUNT | __GFP_NOWARN;
    let mut table = KVVec::with_capacity(npages, flags)?;
    for _ in 0..npages {
        table.push(None, flags)?;
    }
    Ok(table)
}

#[kunit_tests(vamr_kunit_mirror)]
mod tests {
    use super::*;

    #[test]
    fn read_out_marks_what_is_not_populated() {
        let table: [Option<DmaPin>; 3] = [None, None, None];
        let mut out = [0; 3];
        assert_eq!(read_out(&table, &mut out, false), 0);
        assert!(out.iter().all(|&d| d == NO_PAGE));
        assert_eq!(read_out(&table, &mut out, true), 0);
    }

    #[test]
    fn counters_follow_the_c_layout() {
        assert_eq!(core::mem::size_of::<MirrorCountersRecord>(), 64);
        assert_eq!(Count::PagesMapped as usize, 0);
        assert_eq!(Count::Invalidations as usize, 4);
        assert_eq!(Count::Retries as usize, COUNTS - 1);
    }
}
