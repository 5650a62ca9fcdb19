// SPDX-License-Identifier: GPL-2.0

//! The verify pass of a region: after an invalidation marked pins suspect, check them against
//! the page table without faulting, and keep, replace or drop each (see `Documentation/vamr.rst`,
//! "Verify pass"). Run by the mm's verify work ([`crate::mm_state::MmState`]), as its
//! [`Verify`].

use super::{FillGuard, PinCause, Region, RegionError, RegionInner, RegionResult, REPIN_ATTEMPTS};
use crate::mm_state::Verify;
use crate::notifier::Mapped;
use crate::pin::{PinMode, PinnedPage, PIN_BATCH};
use crate::stats::Kind;
use kernel::mm::MmWithUser;
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;
use kernel::sync::atomic::Acquire;
use kernel::sync::MutexGuard;

impl Verify for Region {
    /// The verify pass of the region, run by its mm's verify work (`MmState`): checks
    /// every suspect pin against the page table, a batch of [`PIN_BATCH`] pages at a time, and
    /// keeps it (the same page is mapped; a write pin whose page is no longer mapped writable
    /// loses its write permission), replaces it (another page is present: pinned with
    /// `FOLL_NOFAULT`) or unpins it (nothing present: the process released the page, which
    /// stays released). Never faults memory in and never waits for a userfault. Bounded as
    /// [`Region::fill`]; stops when the region is cancelled. May sleep.
    fn verify(&self, mm: &MmWithUser) {
        let Ok(_active) = FillGuard::enter(self) else {
            return;
        };
        let (a, b) = {
            let mut inner = self.inner.lock();
            core::mem::take(&mut inner.suspect)
        };
        let mut i = a;
        while i < b {
            if self.cancelled.load(Acquire) {
                return;
            }
            let j = (i + PIN_BATCH).min(b);
            if let Err(e) = self.verify_batch(mm, i, j) {
                // A dead region has nothing left to verify; otherwise (`ENOMEM`) the pins not
                // yet verified stay suspect: put their range back and queue the region again,
                // so that pages the process released are not kept pinned until an access.
                if e != RegionError::Dead {
                    self.requeue_suspect(i, b);
                }
                return;
            }
            i = j;
        }
    }
}

impl Region {
    /// Puts `[i, b)` back into the suspect range and queues the region for another pass.
    fn requeue_suspect(&self, i: usize, b: usize) {
        let mut inner = self.inner.lock();
        if !inner.dead {
            self.queue_suspect(&mut inner, i, b);
        }
    }

    /// Verifies the suspect pins of `[i, j)` (at most [`PIN_BATCH`] pages): see
    /// [`Verify::verify`]. Three steps: a snapshot of the page table (taken again while
    /// invalidations race with it), the classification of each suspect pin against it under
    /// the region lock, then the pins of the pages mapped now. Errors: `Dead`, `ENOMEM`,
    /// `Cancelled`, `Interrupted`.
    fn verify_batch(&self, mm: &MmWithUser, i: usize, j: usize) -> RegionResult {
        let n = j - i;
        let mut pfns = KVec::from_elem(0usize, n, GFP_KERNEL_ACCOUNT)?;
        // Unpinned after the lock is released; room for every pin of the batch.
        let mut gone: KVec<PinnedPage> = KVec::with_capacity(n, GFP_KERNEL_ACCOUNT)?;
        let mut attempts = 0;
        let (kept, swap) = loop {
            attempts += 1;
            let round = self.round_begin();
            let snap = self
                .notifier
                .snapshot(round.seq(), self.start + i * PAGE_SIZE, &mut pfns);
            let inner = self.inner.lock();
            if inner.dead {
                return Err(RegionError::Dead);
            }
            let stale = match snap {
                Ok(()) => self.round_stale(&inner, round, i, j),
                Err(EBUSY) => true,
                // Cannot read the page table: treat every suspect pin as gone.
                Err(_) => {
                    pfns.iter_mut().for_each(|p| *p = 0);
                    false
                }
            };
            if stale && attempts < REPIN_ATTEMPTS {
                drop(inner);
                self.stats.add(Kind::RepinRetries, 1);
                continue;
            }
            // Invalidations kept racing: nothing is known, every suspect pin is dropped.
            let outcome = self.classify(
                &inner,
                i,
                j,
                if stale { None } else { Some(&pfns) },
                &mut gone,
            );
            drop(inner);
            break outcome;
        };
        let dropped = gone.len() as u64;
        drop(gone);
        self.stats.add(Kind::PinsKept, kept);
        self.stats.add(Kind::PagesUnpinned, dropped);
        self.stats.sub(Kind::PagesPinned, dropped);
        let swapped = self.swap_in(mm, swap)?;
        let released = (dropped as usize).saturating_sub(swapped);
        let va = self.start + i * PAGE_SIZE;
        crate::trace::verify(self.start, va, n, kept as usize, swapped, released);
        Ok(())
    }

    /// Classifies the suspect pins of slots `[i, j)` against the page table's `pfns` (`None`:
    /// unknown, every suspect pin goes): keeps a pin whose page is still mapped there (taking
    /// its write permission away when the page is no longer mapped writable), moves the others
    /// into `gone` (room for every pin of the range) to be unpinned by the caller. Returns the
    /// pins kept and the span `[first, last + 1)` of those replaced by another present page
    /// (`(usize::MAX, 0)` for none). The caller holds `inner`; at most `PIN_BATCH` slots under
    /// the table lock.
    fn classify(
        &self,
        inner: &MutexGuard<'_, RegionInner>,
        i: usize,
        j: usize,
        pfns: Option<&KVec<usize>>,
        gone: &mut KVec<PinnedPage>,
    ) -> (u64, (usize, usize)) {
        let mut kept = 0u64;
        let mut swap = (usize::MAX, 0);
        let mut table = self.table.write(inner);
        for k in i..j {
            let Some(pin) = &mut table[k] else {
                continue;
            };
            if !pin.suspect() {
                continue;
            }
            let mapped = pfns.map_or(Mapped::Nothing, |p| Mapped::from_hmm_pfn(p[k - i]));
            match mapped {
                Mapped::Page { page, write } if page == pin.page.as_ptr() => {
                    pin.set_suspect(false);
                    if !write {
                        pin.page.forbid_writes();
                    }
                    kept += 1;
                }
                other => {
                    if let Some(old) = table[k].take() {
                        // Cannot fail: `gone` has room for every pin of the range.
                        let _ = gone.push_within_capacity(old.page);
                    }
                    if matches!(other, Mapped::Page { .. }) {
                        swap = (swap.0.min(k), k + 1);
                    }
                }
            }
        }
        (kept, swap)
    }

    /// Pins the pages mapped now in slots `[swap.0, swap.1)` in place of the old ones, without
    /// faulting: what is not present stays absent, pinned by the next access that needs it.
    /// Returns the pages pinned. Errors: as [`Region::fill`] but `NoPage` (nothing pinned).
    fn swap_in(&self, mm: &MmWithUser, swap: (usize, usize)) -> RegionResult<usize> {
        if swap.0 >= swap.1 {
            return Ok(0);
        }
        let mode = PinMode {
            write: self.access.write,
            nofault: true,
            may_wait: false,
        };
        match self.fill(mm, swap.0, swap.1 - swap.0, PinCause::Verify, mode) {
            Ok(n) => Ok(n),
            Err(RegionError::NoPage) => Ok(0),
            Err(e) => Err(e),
        }
    }
}
