// SPDX-License-Identifier: GPL-2.0

//! A small safe layer over `mmu_interval_notifier` (`include/linux/mmu_notifier.h`).
//!
//! [`IntervalNotifier<H>`] is the C subscription, with a reference to its mm, embedded in an
//! owner `H` that must stay pinned while it is inserted. The owner names the field with
//! [`impl_has_interval_notifier!`] (as `kernel::workqueue::impl_has_work!` names a `Work`) and
//! implements [`InvalidateHandler`]; the C ops table of `H` forwards `invalidate` to it. The
//! static inlines of the C header are reached through `src/vamr_glue.c`.

use crate::ffi;
use core::marker::PhantomData;
use kernel::bindings;
use kernel::mm::Mm;
use kernel::prelude::*;
use kernel::sync::aref::ARef;
use kernel::sync::atomic::{Acquire, Atomic, Full, Release};
use kernel::types::Opaque;

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
        let page = unsafe { ffi::vamr_hmm_pfn_page(hmm_pfn, &mut write) };
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
        unsafe { ffi::vamr_mmu_notifier_range_blockable(self.raw) }
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
        unsafe { ffi::vamr_mmu_interval_set_seq(self.sub, self.cur_seq) };
    }
}

/// Declares that a type embeds an [`IntervalNotifier<Self>`], the way
/// [`kernel::workqueue::impl_has_work!`] declares a `Work` field:
///
/// ```ignore
/// impl_has_interval_notifier! {
///     impl HasIntervalNotifier for Region { self.notifier }
/// }
/// ```
///
/// The implementation only compiles if the named field is an `IntervalNotifier<Self>`, so the
/// owner offset it derives cannot be wrong.
macro_rules! impl_has_interval_notifier {
    ($(impl HasIntervalNotifier for $self:ty { self.$field:ident })*) => {$(
        // SAFETY: `container_of!` steps back by the offset of `$field`, and only compiles if
        // `$field` is an `IntervalNotifier<$self>` field of `$self`.
        unsafe impl $crate::notifier::HasIntervalNotifier for $self {
            #[inline]
            unsafe fn notifier_container_of(
                ptr: *mut $crate::notifier::IntervalNotifier<Self>,
            ) -> *mut Self {
                // SAFETY: the caller promises that `ptr` points at the `$field` field of a
                // `Self`, so stepping back by its offset stays in that `Self`.
                unsafe { ::kernel::container_of!(ptr, Self, $field) }
            }
        }
    )*};
}
pub(crate) use impl_has_interval_notifier;

/// A type that embeds an [`IntervalNotifier<Self>`].
///
/// Implement it with [`impl_has_interval_notifier!`].
///
/// # Safety
///
/// [`HasIntervalNotifier::notifier_container_of`] must return the `Self` whose
/// `IntervalNotifier<Self>` field `ptr` points at.
pub(crate) unsafe trait HasIntervalNotifier: Sized {
    /// The `Self` that contains the notifier at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` must point at the `IntervalNotifier<Self>` field of a `Self`.
    unsafe fn notifier_container_of(ptr: *mut IntervalNotifier<Self>) -> *mut Self;
}

/// The owner of an [`IntervalNotifier<Self>`]: receives its invalidations.
pub(crate) trait InvalidateHandler: HasIntervalNotifier + Send + Sync {
    /// The mapping of `range` (which overlaps the subscription) is about to change. Must call
    /// `seq.set_seq()` under the handler's lock, and must not touch the old pages after
    /// returning `true`. Returns `false` only when `range.blockable()` is false and the work
    /// would need to sleep. Context: may sleep when blockable; runs under reclaim, so it must not
    /// allocate with `GFP_KERNEL` nor take a lock that is held around such an allocation.
    fn invalidate(&self, range: &Range<'_>, seq: &SeqToken<'_>) -> bool;
}

/// An `mmu_interval_notifier` subscription over one VA range of an `mm`, embedded in an `H`
/// that receives its invalidations.
///
/// # Invariants
///
/// - `inserted` is true exactly while `inner` is in the interval tree of `mm` (between a
///   successful [`IntervalNotifier::insert`] and [`IntervalNotifier::remove`]); it is changed
///   only by those two, which the owner calls once each and not concurrently.
/// - `was_inserted` is set once `inner` was inserted, and never cleared: from then on
///   `inner.mm` is `mm`, which `self` keeps grabbed (`mmgrab`) for its whole life.
#[pin_data]
pub(crate) struct IntervalNotifier<H> {
    #[pin]
    inner: Opaque<bindings::mmu_interval_notifier>,
    /// The address space (`mmgrab` reference: keeps `struct mm_struct`, not the mappings).
    mm: ARef<Mm>,
    inserted: Atomic<bool>,
    was_inserted: Atomic<bool>,
    _owner: PhantomData<fn(&H)>,
}

// SAFETY: the C subscription is only touched through the kernel's mmu_interval_* functions,
// which are thread safe; the flags are atomic and `ARef<Mm>` is `Send`.
unsafe impl<H> Send for IntervalNotifier<H> {}
// SAFETY: as above; `&self` methods only call thread-safe kernel functions.
unsafe impl<H> Sync for IntervalNotifier<H> {}

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
    /// `inner` field (`Opaque` is `repr(transparent)`) of an `IntervalNotifier<H>` embedded in a
    /// live, pinned `H`, valid until `remove` returns, and `remove` waits for running callbacks.
    unsafe extern "C" fn invalidate(
        sub: *mut bindings::mmu_interval_notifier,
        range: *const bindings::mmu_notifier_range,
        cur_seq: usize,
    ) -> bool {
        // SAFETY: per this function's contract, `sub` is the `inner` field of an
        // `IntervalNotifier<H>` field of a live `H` that outlives the callback.
        let owner = unsafe {
            let notifier: *mut IntervalNotifier<H> = kernel::container_of!(
                sub.cast::<Opaque<bindings::mmu_interval_notifier>>(),
                IntervalNotifier<H>,
                inner
            );
            &*H::notifier_container_of(notifier)
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

impl<H: InvalidateHandler> IntervalNotifier<H> {
    /// A subscription over a range of `mm`, not inserted yet.
    pub(crate) fn new(mm: ARef<Mm>) -> impl PinInit<Self> {
        // INVARIANT: not inserted.
        pin_init!(Self {
            inner <- Opaque::uninit(),
            mm,
            inserted: Atomic::new(false),
            was_inserted: Atomic::new(false),
            _owner: PhantomData,
        })
    }

    /// Inserts the subscription over `[start, start + len)` of its mm, delivering invalidations
    /// to `H::invalidate` of the owner that embeds `self`.
    ///
    /// Errors: those of `mmu_interval_notifier_insert()` (`ENOMEM`). Process context, may sleep;
    /// takes `mmap_lock` for writing briefly if the mm has no notifier subscription yet.
    ///
    /// # Safety
    ///
    /// `self` must be the [`HasIntervalNotifier`] field of a pinned `H`, which must stay valid
    /// until [`IntervalNotifier::remove`] returns.
    pub(crate) unsafe fn insert(&self, start: usize, len: usize) -> Result {
        // SAFETY: `inner` is pinned memory owned by us; `mm` is valid (we hold a reference);
        // the ops table is a `const` promoted to a static.
        let ret = unsafe {
            bindings::mmu_interval_notifier_insert(
                self.inner.get(),
                self.mm.as_raw(),
                start,
                len,
                &OpsTable::<H>::OPS,
            )
        };
        kernel::error::to_result(ret)?;
        // INVARIANT: `inner` is in the interval tree of `mm`, which `self` grabs.
        self.inserted.store(true, Release);
        self.was_inserted.store(true, Release);
        Ok(())
    }
}

impl<H> IntervalNotifier<H> {
    /// The address space of the subscription.
    pub(crate) fn mm(&self) -> &Mm {
        &self.mm
    }

    /// Removes the subscription. On return no `invalidate` call runs or will run. No-op when not
    /// inserted (any more); returns whether this call removed it. Process context, may sleep (waits for running invalidations); must not be
    /// called from `invalidate` itself.
    pub(crate) fn remove(&self) -> bool {
        // INVARIANT: the exchange clears `inserted` and makes this call the one removal.
        if self.inserted.xchg(false, Full) {
            // SAFETY: `inner` was inserted (type invariant) and the exchange makes this the only
            // removal.
            unsafe { bindings::mmu_interval_notifier_remove(self.inner.get()) };
            return true;
        }
        false
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
        // Inserted or removed since, `inner.mm` is `self.mm`, grabbed for `self`'s whole life
        // (type invariant), and its notifier subscriptions live until the mm is freed.
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
        // SAFETY: `inner` was inserted: its `mm` is `self.mm`, grabbed for `self`'s life (type
        // invariant), and the caller holds a user reference on it; `pfns` has room for `n`.
        let ret = unsafe { ffi::vamr_snapshot(sub, seq, start, n, pfns) };
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
        unsafe { ffi::vamr_mmu_interval_read_retry(self.inner.get(), seq) }
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
