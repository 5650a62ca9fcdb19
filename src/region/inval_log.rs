// SPDX-License-Identifier: GPL-2.0

//! The pin-round protocol: how a pin round (or a page-table snapshot) of a region learns
//! whether what it read is still the page mapped now, and the log of invalidation ranges it
//! reads for that (see `Documentation/vamr.rst`, "Pinning").
//!
//! - **Invalidations** ([`Region::log_invalidation`], under the region's `inner` lock):
//!   `mmu_interval_set_seq()`, then the page range goes into the [`InvalLog`] under the
//!   region's count of invalidations (its `generation`), then the count moves on (Release).
//! - **A round** reads the count (Acquire), then `mmu_interval_read_begin()`
//!   ([`Region::round_begin`]), pins or reads without the lock, and commits under `inner` only
//!   if it is not stale ([`Region::round_stale`]); a stale one drops what it read and tries
//!   again, at most [`REPIN_ATTEMPTS`] times.
//!
//! `mmu_interval_read_retry()` answers for the whole interval notifier, that is the whole
//! region: while a process remaps 64 KiB of a 16 MiB region every millisecond, a round that
//! pins a batch of 512 pages somewhere else loses nearly every time, and the access that needed
//! it ends up pinning one page per round. An invalidation changes the page table only inside its
//! own range (the contract of `mmu_notifier_invalidate_range_start()`), so pins of pages outside
//! every range that invalidated the region since the round's `mmu_interval_read_begin()` are
//! the pages mapped now, exactly as if no invalidation had happened: a round that lost the
//! `mmu_interval_read_retry()` race only to invalidations of *other* pages of the region still
//! commits.

use super::{Region, RegionInner};
use crate::notifier::SeqToken;
use kernel::sync::atomic::{Acquire, Relaxed, Release};

/// How many times a re-pin round is retried after racing with an invalidation before the pages
/// are left absent (to be pinned on the next access).
pub(super) const REPIN_ATTEMPTS: u32 = 16;

/// Invalidations remembered. A pin round overlapped by more invalidations of its region than
/// this retries whatever their ranges were (the plain `mmu_interval_read_retry()` rule).
pub(super) const INVAL_LOG_LEN: usize = 16;

/// The page index ranges `[a, b)` of a region's last [`INVAL_LOG_LEN`] invalidations, by
/// number: invalidation number `k` (the region's count of invalidations before it, the
/// region's `generation`) sits in slot `k % INVAL_LOG_LEN`. Lives under the region's `inner`
/// lock, which the invalidate callback holds while it records and a commit holds while it
/// checks.
///
/// # Invariants
///
/// When the owner has counted `n` invalidations, slot `k % INVAL_LOG_LEN` holds the range of
/// invalidation `k` for every `k` in `n.saturating_sub(INVAL_LOG_LEN as u64)..n`.
pub(super) struct InvalLog {
    ranges: [(usize, usize); INVAL_LOG_LEN],
}

impl InvalLog {
    /// An empty log (no invalidation counted yet).
    pub(super) const fn new() -> Self {
        InvalLog {
            ranges: [(0, 0); INVAL_LOG_LEN],
        }
    }

    /// Records the page range `[a, b)` of invalidation number `k`; the owner counts it (`k + 1`
    /// invalidations) before anyone checks again.
    pub(super) fn record(&mut self, k: u64, a: usize, b: usize) {
        self.ranges[(k % INVAL_LOG_LEN as u64) as usize] = (a, b);
    }

    /// Whether an invalidation numbered `since` or later, of the `now` counted so far, covered a
    /// page of `[a, b)`; also true when some of them are no longer remembered (more than
    /// [`INVAL_LOG_LEN`]), and when `since > now` (a count from another region: be safe).
    pub(super) fn touched(&self, since: u64, now: u64, a: usize, b: usize) -> bool {
        if since > now || now - since > INVAL_LOG_LEN as u64 {
            return true;
        }
        (since..now).any(|k| {
            let (x, y) = self.ranges[(k % INVAL_LOG_LEN as u64) as usize];
            x < b && a < y
        })
    }
}

/// A pin round's start ([`Region::round_begin`]): the notifier sequence of its
/// `mmu_interval_read_begin()` and the region's invalidation count just before it.
#[derive(Clone, Copy)]
pub(super) struct Round {
    seq: usize,
    since: u64,
}

impl Round {
    /// The notifier sequence (for `hmm_range_fault()`).
    pub(super) fn seq(&self) -> usize {
        self.seq
    }
}

impl Region {
    /// The invalidation side of the protocol, for the invalidate callback of the page range
    /// `[a, b)`: `set_seq`, then the range into the log under the region's count, then the
    /// count one up (Release). `inner` is the held `inner` lock. Does not sleep or allocate.
    pub(super) fn log_invalidation(
        &self,
        inner: &mut RegionInner,
        seq: &SeqToken<'_>,
        a: usize,
        b: usize,
    ) {
        seq.set_seq();
        // Only invalidations change `generation`, under `inner`: this is its value.
        let k = self.generation.load(Relaxed);
        inner.inval_log.record(k, a, b);
        // Release: a pin round that reads the new count (Acquire, `Region::round_begin`)
        // before its `read_begin` also sees `set_seq` above, so that `read_begin` waits for
        // this invalidation to end (see `Region::round_stale`).
        self.generation.store(k + 1, Release);
    }

    /// Starts a pin round (or a page-table snapshot): the region's invalidation count, then
    /// `mmu_interval_read_begin()`, in that order (see [`Region::round_stale`]). May sleep (it
    /// waits for an invalidation of the region in progress to end).
    pub(super) fn round_begin(&self) -> Round {
        // Acquire, paired with the Release of the invalidate callback: if this load sees an
        // invalidation counted, `read_begin` below sees its `set_seq` and waits for its end.
        let since = self.generation.load(Acquire);
        let seq = self.notifier.read_begin();
        Round { seq, since }
    }

    /// Whether what a round started with [`Region::round_begin`] read of pages `[a, b)` (pins
    /// or a snapshot) may be out of date: an invalidation of the region began since its
    /// `read_begin` (`mmu_interval_read_retry()`) *and* one of those counted since covered a
    /// page of `[a, b)` or is no longer remembered ([`InvalLog`]). An invalidation changes the
    /// page table only inside its own range, and the rest were either over before `read_begin`
    /// returned (it waited for them: their count was seen, so their `set_seq` was) or are in
    /// the log; so when this is false, every page read is the page mapped now. `inner` is the
    /// held `inner` lock, under which invalidations record their ranges and count.
    pub(super) fn round_stale(
        &self,
        inner: &RegionInner,
        round: Round,
        a: usize,
        b: usize,
    ) -> bool {
        self.notifier.read_retry(round.seq)
            && inner
                .inval_log
                .touched(round.since, self.generation.load(Relaxed), a, b)
    }
}

#[kernel::prelude::kunit_tests(vamr_kunit_inval_log)]
mod tests {
    use super::*;

    #[test]
    fn only_overlapping_ranges_since_the_round_count() {
        let mut log = InvalLog::new();
        log.record(0, 100, 116);
        log.record(1, 300, 316);
        // Nothing since: nothing touched.
        assert!(!log.touched(2, 2, 0, 1000));
        // Invalidation 1 only: [300, 316).
        assert!(!log.touched(1, 2, 0, 300));
        assert!(log.touched(1, 2, 0, 301));
        assert!(log.touched(1, 2, 315, 316));
        assert!(!log.touched(1, 2, 316, 1000));
        // Invalidation 0 counts from round count 0 on, not from 1.
        assert!(log.touched(0, 2, 110, 111));
        assert!(!log.touched(1, 2, 110, 111));
    }

    #[test]
    fn forgotten_or_foreign_counts_are_touched() {
        let mut log = InvalLog::new();
        let n = INVAL_LOG_LEN as u64 + 1;
        for k in 0..n {
            log.record(k, 0, 1);
        }
        // All remembered ones miss [5, 6), but one more happened than the log holds.
        assert!(log.touched(0, n, 5, 6));
        assert!(!log.touched(1, n, 5, 6));
        // A count from the future is not trusted.
        assert!(log.touched(n + 1, n, 5, 6));
        // Slots are reused by number: the newest overwrote invalidation 0's slot.
        log.record(n, 5, 6);
        assert!(log.touched(n, n + 1, 5, 6));
        assert!(!log.touched(n, n + 1, 6, 7));
    }
}
