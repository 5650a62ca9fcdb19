// SPDX-License-Identifier: GPL-2.0

//! A small safe layer over `mmu_interval_notifier` (`include/linux/mmu_notifier.h`).
//!
//! [`IntervalNotifier`] is the C subscription embedded in an owner that must stay pinned while it
//! is inserted. The owner implements [`InvalidateHandler`]; [`IntervalNotifier::ops`] builds the
//! C ops table that forwards `invalidate` to it. The static inlines of the C header are reached
//! through `src/vamr_glue.c`.

use core::marker::PhantomData;
use kernel::bindings;
use kernel::prelude::*;
use kernel::sync::atomic::{Acquire, Atomic, Full, Release};
use kernel::types::Opaque;

// The kernel's own `bindings` crate allows `improper_ctypes` for these types too: they are
// only passed by pointer. Declarations: src/vamr_glue.h.
#[allow(improper_ctypes)]
extern "C" {
    fn vamr_mmu_interval_set_seq(sub: *mut bindings::mmu_interval_notifier, cur_seq: usize);
    fn vamr_mmu_interval_read_retry(sub: *mut bindings::mmu_interval_notifier, seq: usize) -> bool;
    fn vamr_mmu_notifier_range_blockable(range: *const bindings::mmu_notifier_range) -> bool;
    fn vamr_snapshot(
        sub: *mut bindings::mmu_interval_notifier,
        seq: usize,
        start: usize,
        npages: usize,
        hmm_pfns: *mut usize,
    ) -> i32;
    fn vamr_hmm_pfn_page(hmm_pfn: usize, write: *mut bool) -> *mut bindings::page;
}

/// What a page-table snapshot found at one page (see [`IntervalNotifier::snapshot`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mapped {
    /// Nothing usable is mapped (hole, not present, swapped out, special mapping).
    Nothing,
    /// This page is mapped; `write` when the mapping allows writing.
    Page {
        page: *mut bindings::page,
        write: bool,
    },
}

impl Mapped {
    /// Decodes one `hmm_pfns` entry filled by [`IntervalNotifier::snapshot`].
    pub(crate) fn from_hmm_pfn(hmm_pfn: usize) -> Mapped {
        let mut write = false;
        // SAFETY: only decodes the bits of `hmm_pfn`; `write` is a valid out pointer.
        let page = unsafe { vamr_hmm_pfn_page(hmm_pfn, &mut write) };
        if page.is_null() {
            Mapped::Nothing
        } else {
            Mapped::Page { page, write }
        }
    }
}

/// Why the mapping under a range changes (`enum mmu_notifier_event`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// munmap(): the VMA is going away (`MMU_NOTIFY_UNMAP`).
    Unmap,
    /// Pages are zapped but the VMA stays: MADV_DONTNEED, truncate, hole punch, mremap's
    /// source, ... (`MMU_NOTIFY_CLEAR`).
    Clear,
    /// mprotect() of a VMA (`MMU_NOTIFY_PROTECTION_VMA`).
    ProtectionVma,
    /// Write protection of pages: fork's COW set-up, KSM, ... (`MMU_NOTIFY_PROTECTION_PAGE`).
    ProtectionPage,
    /// Soft-dirty tracking reset (`MMU_NOTIFY_SOFT_DIRTY`).
    SoftDirty,
    /// The address space is torn down at process exit (`MMU_NOTIFY_RELEASE`).
    Release,
    /// Page migration, including compaction and THP collapse (`MMU_NOTIFY_MIGRATE`).
    Migrate,
    /// Device-exclusive access to pages (`MMU_NOTIFY_EXCLUSIVE`).
    Exclusive,
}

impl Event {
    /// Number of event kinds (for per-kind counters).
    pub(crate) const COUNT: usize = Event::Exclusive as usize + 1;

    fn from_raw(raw: bindings::mmu_notifier_event) -> Event {
        match raw {
            bindings::mmu_notifier_event_MMU_NOTIFY_UNMAP => Event::Unmap,
            bindings::mmu_notifier_event_MMU_NOTIFY_CLEAR => Event::Clear,
            bindings::mmu_notifier_event_MMU_NOTIFY_PROTECTION_VMA => Event::ProtectionVma,
            bindings::mmu_notifier_event_MMU_NOTIFY_PROTECTION_PAGE => Event::ProtectionPage,
            bindings::mmu_notifier_event_MMU_NOTIFY_SOFT_DIRTY => Event::SoftDirty,
            bindings::mmu_notifier_event_MMU_NOTIFY_RELEASE => Event::Release,
            bindings::mmu_notifier_event_MMU_NOTIFY_MIGRATE => Event::Migrate,
            // MMU_NOTIFY_EXCLUSIVE and anything a later kernel adds: the mapping stays.
            _ => Event::Exclusive,
        }
    }

    /// Index of the event kind in `0..COUNT`, the order of `struct vamr_stats.invalidations`.
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// Whether the mapping may survive the event, so that pins are kept as suspect and verified
    /// afterwards; `Unmap` and `Release` take the pages away from the VA for good.
    pub(crate) fn mapping_survives(self) -> bool {
        !matches!(self, Event::Unmap | Event::Release)
    }
}

/// One invalidation, as passed to [`InvalidateHandler::invalidate`].
pub(crate) struct Range<'a> {
    raw: &'a bindings::mmu_notifier_range,
}

impl Range<'_> {
    /// First byte of the invalidated range (page aligned).
    pub(crate) fn start(&self) -> usize {
        self.raw.start
    }

    /// One past the last byte of the invalidated range (page aligned).
    pub(crate) fn end(&self) -> usize {
        self.raw.end
    }

    /// The reason for the invalidation.
    pub(crate) fn event(&self) -> Event {
        Event::from_raw(self.raw.event)
    }

    /// Whether the handler may sleep (`mmu_notifier_range_blockable()`). When it is false the
    /// handler must not sleep and may refuse the invalidation (return `false`), as the OOM
    /// reaper expects.
    pub(crate) fn blockable(&self) -> bool {
        // SAFETY: `self.raw` is a valid range for the lifetime of `self`.
        unsafe { vamr_mmu_notifier_range_blockable(self.raw) }
    }
}

/// Proof handed to the handler that the sequence may be set: only valid during `invalidate`.
pub(crate) struct SeqToken<'a> {
    sub: *mut bindings::mmu_interval_notifier,
    cur_seq: usize,
    _p: PhantomData<&'a ()>,
}

impl SeqToken<'_> {
    /// `mmu_interval_set_seq()`: marks readers that began before this invalidation as stale.
    /// Must be called with the lock that [`IntervalNotifier::read_retry`] callers hold.
    pub(crate) fn set_seq(&self) {
        // SAFETY: `sub` is the inserted subscription this invalidation is delivered to; it stays
        // valid during the callback, which is the lifetime of `self`.
        unsafe { vamr_mmu_interval_set_seq(self.sub, self.cur_seq) };
    }
}

/// The owner of an [`IntervalNotifier`].
///
/// # Safety
///
/// `notifier_offset()` must return the byte offset of the owner's `IntervalNotifier` field, and
/// the owner must stay pinned (not move, not be freed) while the notifier is inserted.
pub(crate) unsafe trait InvalidateHandler: Sized + Send + Sync {
    /// `offset_of!(Self, <notifier field>)`.
    fn notifier_offset() -> usize;

    /// The mapping of `range` (which overlaps the subscription) is about to change. Must call
    /// `seq.set_seq()` under the handler's lock, and must not touch the old pages after
    /// returning `true`. Returns `false` only when `range.blockable()` is false and the work
    /// would need to sleep. Context: may sleep when blockable; runs under reclaim, so it must not
    /// allocate with `GFP_KERNEL` nor take a lock that is held around such an allocation.
    fn invalidate(&self, range: &Range<'_>, seq: &SeqToken<'_>) -> bool;
}

/// An `mmu_interval_notifier` subscription over one VA range of an `mm`.
///
/// # Invariants
///
/// `inserted` is true exactly while `inner` is in the mm's interval tree (between a successful
/// [`IntervalNotifier::insert`] and [`IntervalNotifier::remove`]); it is changed only by those
/// two, which the owner calls once each and not concurrently.
#[pin_data]
pub(crate) struct IntervalNotifier {
    #[pin]
    inner: Opaque<bindings::mmu_interval_notifier>,
    inserted: Atomic<bool>,
    /// Set once by a successful `insert`, never cleared.
    was_inserted: Atomic<bool>,
}

// SAFETY: the C subscription is only touched through the kernel's mmu_interval_* functions,
// which are thread safe; `inserted` is atomic.
unsafe impl Send for IntervalNotifier {}
// SAFETY: as above; `&self` methods only call thread-safe kernel functions.
unsafe impl Sync for IntervalNotifier {}

struct OpsTable<H>(PhantomData<H>);

impl<H: InvalidateHandler> OpsTable<H> {
    const OPS: bindings::mmu_interval_notifier_ops = bindings::mmu_interval_notifier_ops {
        invalidate: Some(Self::invalidate),
        invalidate_start: None,
        invalidate_finish: None,
    };

    /// # Safety
    ///
    /// Called by the mm core with an inserted subscription of an `H` (see
    /// [`IntervalNotifier::insert`]) and a valid range. By `insert`'s contract, `sub` is the
    /// `inner` field (`Opaque` is `repr(transparent)`) of an `IntervalNotifier` that is the field
    /// at `H::notifier_offset()` of a live, pinned `H`, valid until `remove` returns, and
    /// `remove` waits for running callbacks.
    unsafe extern "C" fn invalidate(
        sub: *mut bindings::mmu_interval_notifier,
        range: *const bindings::mmu_notifier_range,
        cur_seq: usize,
    ) -> bool {
        // SAFETY: per this function's contract, stepping back by the two field offsets from `sub`
        // stays inside a live `H` that outlives the callback.
        let owner = unsafe {
            let notifier: *mut IntervalNotifier = kernel::container_of!(
                sub.cast::<Opaque<bindings::mmu_interval_notifier>>(),
                IntervalNotifier,
                inner
            );
            &*notifier.byte_sub(H::notifier_offset()).cast::<H>()
        };
        // SAFETY: the mm core passes a valid range that lives for the call.
        let raw = unsafe { &*range };
        let range = Range { raw };
        let seq = SeqToken {
            sub,
            cur_seq,
            _p: PhantomData,
        };
        owner.invalidate(&range, &seq)
    }
}

impl IntervalNotifier {
    /// A subscription that is not inserted yet.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            inner <- Opaque::uninit(),
            inserted: Atomic::new(false),
            was_inserted: Atomic::new(false),
        })
    }

    /// Inserts the subscription over `[start, start + len)` of `mm`, delivering invalidations to
    /// `H::invalidate` of the owner that embeds `self`.
    ///
    /// Errors: those of `mmu_interval_notifier_insert()` (`ENOMEM`). Process context, may sleep;
    /// takes `mmap_lock` for writing briefly if the mm has no notifier subscription yet.
    ///
    /// # Safety
    ///
    /// `self` must be the field at `H::notifier_offset()` of a pinned `H`, which must stay valid
    /// until [`IntervalNotifier::remove`] returns; `mm` must be a valid mm with a reference
    /// (`mmgrab`) held for as long as `self` lives.
    pub(crate) unsafe fn insert<H: InvalidateHandler>(
        &self,
        mm: *mut bindings::mm_struct,
        start: usize,
        len: usize,
    ) -> Result {
        let this = self;
        // SAFETY: `inner` is pinned memory owned by us; `mm` is valid per the caller; the ops
        // table is a `const` promoted to a static.
        let ret = unsafe {
            bindings::mmu_interval_notifier_insert(
                this.inner.get(),
                mm,
                start,
                len,
                &OpsTable::<H>::OPS,
            )
        };
        kernel::error::to_result(ret)?;
        this.inserted.store(true, Release);
        this.was_inserted.store(true, Release);
        Ok(())
    }

    /// Removes the subscription. On return no `invalidate` call runs or will run. No-op when not
    /// inserted. Process context, may sleep (waits for running invalidations); must not be
    /// called from `invalidate` itself.
    pub(crate) fn remove(&self) {
        if self.inserted.xchg(false, Full) {
            // SAFETY: `inner` was inserted (type invariant) and the swap makes this the only
            // removal.
            unsafe { bindings::mmu_interval_notifier_remove(self.inner.get()) };
        }
    }

    /// `mmu_interval_read_begin()`: starts a read-side critical section; waits (sleeps) for a
    /// running invalidation of the range to finish. Returns the sequence for
    /// [`IntervalNotifier::read_retry`]. Must not be called with the handler's lock held.
    ///
    /// After [`IntervalNotifier::remove`] the call is harmless but meaningless (the owner must
    /// then discard what it read, e.g. by checking its own "dead" state under its lock).
    /// Returns 0 without calling into the kernel if the subscription was never inserted.
    pub(crate) fn read_begin(&self) -> usize {
        if !self.was_inserted.load(Acquire) {
            return 0;
        }
        // Inserted or removed since, `inner.mm` is the mm the owner grabs for `self`'s whole life
        // (the `insert` contract), and its notifier subscriptions live until the mm is freed.
        // SAFETY: so the call reads valid memory whether or not `inner` is still inserted.
        unsafe { bindings::mmu_interval_read_begin(self.inner.get()) as usize }
    }

    /// Reads the page table over `[start, start + out.len() * PAGE_SIZE)` without faulting
    /// anything in and without taking page references (`hmm_range_fault()` with no request
    /// flags), filling `out` with one `hmm_pfns` entry per page (decode with
    /// [`Mapped::from_hmm_pfn`]). `seq` comes from [`IntervalNotifier::read_begin`].
    ///
    /// Errors: `EBUSY` when an invalidation began since `read_begin` returned `seq` (retry);
    /// `EFAULT` when the subscription was never inserted; other errors of `hmm_range_fault()`.
    /// Takes `mmap_lock` for reading; may sleep. The caller must hold a user reference on the
    /// mm (`mmget`), and must still check [`IntervalNotifier::read_retry`] under its lock
    /// before it uses the result.
    pub(crate) fn snapshot(&self, seq: usize, start: usize, out: &mut [usize]) -> Result {
        if !self.was_inserted.load(Acquire) {
            return Err(EFAULT);
        }
        let (sub, n, pfns) = (self.inner.get(), out.len(), out.as_mut_ptr());
        // SAFETY: `inner` was inserted: its `mm` is grabbed for `self`'s life (`insert`'s
        // contract) and the caller holds a user reference on it; `pfns` has room for `n`.
        let ret = unsafe { vamr_snapshot(sub, seq, start, n, pfns) };
        kernel::error::to_result(ret)
    }

    /// `mmu_interval_read_retry()`: true when an invalidation began since `read_begin` returned
    /// `seq`. Must be called with the lock the handler holds around `set_seq()`.
    /// Always true for a subscription that was never inserted.
    pub(crate) fn read_retry(&self, seq: usize) -> bool {
        if !self.was_inserted.load(Acquire) {
            return true;
        }
        // SAFETY: `insert` initialized `inner`; this only reads its `invalidate_seq` field.
        unsafe { vamr_mmu_interval_read_retry(self.inner.get(), seq) }
    }
}

#[kunit_tests(vamr_kunit_notifier)]
mod tests {
    use super::*;

    /// Every `enum mmu_notifier_event` value maps to its kind, and the kind's index is the
    /// position the UAPI gives it (`enum vamr_event_kind`): the counters and event records
    /// depend on both.
    #[test]
    fn event_from_raw_maps_every_kernel_event() {
        let table = [
            (
                bindings::mmu_notifier_event_MMU_NOTIFY_UNMAP,
                Event::Unmap,
                0,
            ),
            (
                bindings::mmu_notifier_event_MMU_NOTIFY_CLEAR,
                Event::Clear,
                1,
            ),
            (
                bindings::mmu_notifier_event_MMU_NOTIFY_PROTECTION_VMA,
                Event::ProtectionVma,
                2,
            ),
            (
                bindings::mmu_notifier_event_MMU_NOTIFY_PROTECTION_PAGE,
                Event::ProtectionPage,
                3,
            ),
            (
                bindings::mmu_notifier_event_MMU_NOTIFY_SOFT_DIRTY,
                Event::SoftDirty,
                4,
            ),
            (
                bindings::mmu_notifier_event_MMU_NOTIFY_RELEASE,
                Event::Release,
                5,
            ),
            (
                bindings::mmu_notifier_event_MMU_NOTIFY_MIGRATE,
                Event::Migrate,
                6,
            ),
            (
                bindings::mmu_notifier_event_MMU_NOTIFY_EXCLUSIVE,
                Event::Exclusive,
                7,
            ),
        ];
        for (raw, kind, index) in table {
            assert_eq!(Event::from_raw(raw), kind);
            assert_eq!(kind.index(), index);
        }
        assert_eq!(Event::COUNT, table.len());
        // A value a later kernel might add is counted as EXCLUSIVE (the mapping stays).
        assert_eq!(Event::from_raw(0xfff), Event::Exclusive);
    }
}
