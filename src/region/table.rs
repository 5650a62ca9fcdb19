// SPDX-License-Identifier: GPL-2.0

//! The pins of a region: its pin table (under `Region::table`) and the charge of its pages to
//! `mm->pinned_vm`.
//!
//! `Region::table`: super::Region

use super::RegionInner;
use crate::ffi;
use crate::pin::PinnedPage;
use core::ops::Deref;
use kernel::bindings;
use kernel::mm::Mm;
use kernel::new_spinlock;
use kernel::prelude::*;
use kernel::sync::lock::spinlock::SpinLockGuard;
use kernel::sync::{MutexGuard, SpinLock};

/// One pinned page of a region: the pin, whose owner's mark is the *suspect* flag (set by
/// an invalidation over the page: the mapping may have changed, so accesses do not use the pin
/// until the verify pass, or an access that pins again, checked it against the page table).
/// One word ([`PinnedPage`]): 8 bytes per page of the region; `repr(transparent)`, so that
/// teardown can hand the table to [`crate::pin::unpin_table`] as `Option<PinnedPage>` slots.
#[repr(transparent)]
pub(super) struct PagePin {
    pub(super) page: PinnedPage,
}

impl PagePin {
    /// A table entry for a new pin, not suspect.
    pub(super) fn new(mut page: PinnedPage) -> Self {
        page.set_mark(false);
        PagePin { page }
    }

    /// Whether an invalidation made the pin suspect (see above).
    pub(super) fn suspect(&self) -> bool {
        self.page.marked()
    }

    /// Makes the pin suspect, or clears that once it was checked.
    pub(super) fn set_suspect(&mut self, on: bool) {
        self.page.set_mark(on);
    }

    /// Whether an access (a write when `write`) may use the pin as it is.
    pub(super) fn usable(&self, write: bool) -> bool {
        !self.suspect() && (!write || self.page.writable())
    }
}

// `unpin_all` passes the slots as `Option<PinnedPage>`s (`PagePin` is `repr(transparent)`).
const _: () =
    assert!(core::mem::size_of::<Option<PagePin>>() == core::mem::size_of::<Option<PinnedPage>>());

/// The pin table of a region, under `Region::table`: one entry per page of the region;
/// `None` is an absent page; used as a slice (`Deref`). A `KVVec`: 8 bytes per page, so large
/// regions need more than kmalloc gives. A pin may be a read pin even in a writable region
/// (read prefetch, on-demand read); writes need a write pin and upgrade. Teardown empties it
/// (an access that then looks a page up finds nothing and takes the slow path, which sees the
/// region dead).
#[derive(Default)]
pub(super) struct PinTable(KVVec<Option<PagePin>>);

impl core::ops::Deref for PinTable {
    type Target = [Option<PagePin>];

    fn deref(&self) -> &[Option<PagePin>] {
        &self.0
    }
}

impl core::ops::DerefMut for PinTable {
    fn deref_mut(&mut self) -> &mut [Option<PagePin>] {
        &mut self.0
    }
}

impl PinTable {
    /// Unpins every pin of the table, which it consumes (teardown), dirtying the pages pinned
    /// for writing; returns the number of pins released. Frees the table. Sleeps (folio locks,
    /// rescheduling points), so no lock may be held.
    pub(super) fn unpin_all(self) -> usize {
        let (ptr, len, cap) = self.0.into_raw_parts();
        // `into_raw_parts` gave the vector up without dropping its slots; a `PagePin` is a
        // transparent `PinnedPage`, so the slots are `Option<PinnedPage>`.
        // SAFETY: `ptr` holds `len` initialized slots, now ours, given up to the call.
        let n = unsafe { crate::pin::unpin_table(ptr.cast(), len) };
        // SAFETY: the allocation `into_raw_parts` returned, with its capacity; length 0, so
        // the slots (no longer valid) are neither read nor dropped, only freed.
        drop(unsafe { KVVec::<Option<PagePin>>::from_raw_parts(ptr, 0, cap) });
        n
    }
}

/// Most slots an invalidation visits per hold of `Region::table`: bounds the time a run of
/// the data path waits for it (the invalidation itself has not returned until it visited all).
pub(super) const TABLE_CHUNK: usize = 4096;

/// A pin table of `npages` absent pages, charged to the memory cgroup of current.
pub(super) fn new_table(npages: usize) -> Result<PinTable> {
    let flags = GFP_KERNEL_ACCOUNT | __GFP_NOWARN;
    let mut pins = KVVec::with_capacity(npages, flags)?;
    for _ in 0..npages {
        pins.push(None, flags)?;
    }
    Ok(PinTable(pins))
}

/// A charge of pages to `mm->pinned_vm`, refunded on drop unless committed.
pub(crate) struct PinnedVmCharge<'a> {
    mm: &'a Mm,
    npages: usize,
}

impl<'a> PinnedVmCharge<'a> {
    /// Charges `npages` to `mm->pinned_vm`. Errors: `ENOMEM` when the total would exceed
    /// `RLIMIT_MEMLOCK` of current and current lacks `CAP_IPC_LOCK` (the check of
    /// `ib_umem_get()` in drivers/infiniband/core/umem.c).
    pub(crate) fn new(mm: &'a Mm, npages: usize) -> Result<Self> {
        // SAFETY: `mm` is a valid mm (we hold a reference).
        let total = unsafe { ffi::vamr_pinned_vm_add(mm.as_raw(), npages as isize) };
        let charge = PinnedVmCharge { mm, npages };
        // SAFETY: no preconditions; reads current's rlimit.
        let limit = unsafe { ffi::vamr_memlock_limit_pages() };
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
    pub(crate) fn commit(self) {
        core::mem::forget(self);
    }

    /// Returns a committed charge of `npages` to `mm`.
    pub(crate) fn release(mm: &Mm, npages: usize) {
        // SAFETY: `mm` is a valid mm (we hold a reference).
        unsafe { ffi::vamr_pinned_vm_sub(mm.as_raw(), npages as isize) };
    }
}

impl Drop for PinnedVmCharge<'_> {
    fn drop(&mut self) {
        Self::release(self.mm, self.npages);
    }
}

/// A region's pin table behind its spinlock, with the lock rule as a type: the data path reads
/// the slots with [`TableLock::read`] (shared access only), and a writer must show the guard of
/// the region lock ([`super::Region::inner`]) to [`TableLock::write`], so that every slot
/// changes with both locks held (the [`super::Region`] invariants).
///
/// Lock rules: held for at most `TABLE_CHUNK` slots or one run of an access; nothing that
/// sleeps, allocates or faults runs under it, and no pin is released under it. Innermost:
/// nothing is taken under it.
#[pin_data]
pub(super) struct TableLock {
    #[pin]
    lock: SpinLock<PinTable>,
}

impl TableLock {
    /// The lock over `table`.
    pub(super) fn new(table: PinTable) -> impl PinInit<Self> {
        pin_init!(TableLock {
            lock <- new_spinlock!(table, "vamr_region_table"),
        })
    }

    /// Locks the table for reading (the data path, a look for gaps).
    pub(super) fn read(&self) -> TableRead<'_> {
        TableRead(self.lock.lock())
    }

    /// Locks the table for writing; `_inner` is the held region lock.
    pub(super) fn write(
        &self,
        _inner: &MutexGuard<'_, RegionInner>,
    ) -> SpinLockGuard<'_, PinTable> {
        self.lock.lock()
    }
}

/// The table locked for reading: shared access to the slots (see [`TableLock::read`]).
pub(super) struct TableRead<'a>(SpinLockGuard<'a, PinTable>);

impl Deref for TableRead<'_> {
    type Target = PinTable;

    fn deref(&self) -> &PinTable {
        &self.0
    }
}
