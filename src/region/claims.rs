// SPDX-License-Identifier: GPL-2.0

//! The page ranges that a region's pin rounds outside the owner's context are pinning now
//! (see `PinTurn` in fill.rs and `Documentation/vamr.rst`, "Pinning"): two long-term pins of
//! the same page at the same moment fail each other's migration out of a movable zone, so a
//! round waits while its batch overlaps another's claim, and only then.

use kernel::prelude::*;

/// The claimed page index ranges `[a, b)` of a region, no two overlapping. Lives under the
/// region's `inner` lock; it never allocates there (an invalidation takes that lock under
/// reclaim): room is made with [`PinClaims::make_room`] from a vector allocated without it.
pub(super) struct PinClaims {
    ranges: KVec<(usize, usize)>,
}

impl PinClaims {
    /// No claim.
    pub(super) const fn new() -> Self {
        PinClaims {
            ranges: KVec::new(),
        }
    }

    /// Whether `[a, b)` shares a page with a claim.
    pub(super) fn overlaps(&self, a: usize, b: usize) -> bool {
        self.ranges.iter().any(|&(x, y)| x < b && a < y)
    }

    /// The end of the unclaimed run of `[a, b)` that starts at `a` (`a` itself unclaimed): `b`,
    /// or the first page of a claim inside the range.
    pub(super) fn free_end(&self, a: usize, b: usize) -> usize {
        self.ranges
            .iter()
            .filter(|&&(x, _)| a < x && x < b)
            .fold(b, |end, &(x, _)| end.min(x))
    }

    /// The capacity a vector must have to hold one more claim, or `None` when there is room.
    pub(super) fn room_wanted(&self) -> Option<usize> {
        let cap = self.ranges.capacity();
        (self.ranges.len() == cap).then(|| (cap * 2).max(4))
    }

    /// Moves the claims into `more` when it is larger; returns the vector to free (after the
    /// lock, or under it: freeing neither allocates nor sleeps).
    pub(super) fn make_room(&mut self, mut more: KVec<(usize, usize)>) -> KVec<(usize, usize)> {
        if more.capacity() <= self.ranges.capacity() {
            return more;
        }
        for &claim in self.ranges.iter() {
            // Cannot fail: `more` is larger than the claims.
            let _ = more.push_within_capacity(claim);
        }
        core::mem::swap(&mut self.ranges, &mut more);
        more
    }

    /// Claims `[a, b)`. Errors: `ENOMEM` when there is no room ([`PinClaims::room_wanted`]);
    /// `EBUSY` when it overlaps a claim.
    pub(super) fn claim(&mut self, a: usize, b: usize) -> Result {
        if self.overlaps(a, b) {
            return Err(EBUSY);
        }
        self.ranges.push_within_capacity((a, b)).map_err(|_| ENOMEM)
    }

    /// Gives back the claim `[a, b)`; returns whether it was there.
    pub(super) fn release(&mut self, a: usize, b: usize) -> bool {
        let Some(i) = self.ranges.iter().position(|&c| c == (a, b)) else {
            return false;
        };
        let last = self.ranges.len() - 1;
        self.ranges.swap(i, last);
        self.ranges.pop();
        true
    }
}

#[kernel::prelude::kunit_tests(vamr_kunit_pin_claims)]
mod tests {
    use super::*;

    fn with_room(claims: &mut PinClaims) {
        while let Some(want) = claims.room_wanted() {
            let more = KVec::with_capacity(want, GFP_KERNEL).unwrap();
            drop(claims.make_room(more));
        }
    }

    #[test]
    fn only_overlapping_batches_conflict() {
        let mut c = PinClaims::new();
        with_room(&mut c);
        assert_eq!(c.claim(0, 512), Ok(()));
        // The next batch of the same round, and another round's pages further on.
        assert!(!c.overlaps(512, 1024));
        with_room(&mut c);
        assert_eq!(c.claim(512, 1024), Ok(()));
        with_room(&mut c);
        assert_eq!(c.claim(4096, 4100), Ok(()));
        // One shared page is enough to wait.
        assert!(c.overlaps(511, 512));
        assert!(c.overlaps(1023, 2000));
        assert!(c.overlaps(100, 101));
        assert!(c.overlaps(0, usize::MAX));
        assert!(!c.overlaps(1024, 4096));
        with_room(&mut c);
        assert_eq!(c.claim(4099, 4200), Err(EBUSY));
        // Given back: that range is free again, the others are still held.
        assert!(c.release(0, 512));
        assert!(!c.release(0, 512));
        assert!(!c.overlaps(0, 512));
        assert!(c.overlaps(600, 601));
        with_room(&mut c);
        assert_eq!(c.claim(0, 512), Ok(()));
    }

    #[test]
    fn a_batch_is_cut_at_the_next_claim() {
        let mut c = PinClaims::new();
        with_room(&mut c);
        assert_eq!(c.claim(100, 200), Ok(()));
        with_room(&mut c);
        assert_eq!(c.claim(300, 301), Ok(()));
        // Free up to the first claim inside; the whole range when none starts inside.
        assert_eq!(c.free_end(0, 512), 100);
        assert_eq!(c.free_end(96, 100), 100);
        assert_eq!(c.free_end(200, 512), 300);
        assert_eq!(c.free_end(250, 301), 300);
        assert_eq!(c.free_end(301, 512), 512);
        assert_eq!(c.free_end(0, 1), 1);
        // What is left before the claim can be claimed; one page more cannot.
        with_room(&mut c);
        assert_eq!(c.claim(0, c.free_end(0, 512)), Ok(()));
        with_room(&mut c);
        assert_eq!(c.claim(200, 301), Err(EBUSY));
    }

    #[test]
    fn room_is_made_outside_and_claims_kept() {
        let mut c = PinClaims::new();
        // No allocation under the lock: without room a claim fails.
        assert!(c.room_wanted().is_some());
        assert_eq!(c.claim(0, 1), Err(ENOMEM));
        for i in 0..40 {
            with_room(&mut c);
            assert_eq!(c.claim(2 * i, 2 * i + 1), Ok(()));
        }
        for i in 0..40 {
            assert!(c.overlaps(2 * i, 2 * i + 1));
            assert!(!c.overlaps(2 * i + 1, 2 * i + 2));
        }
        // A smaller vector is handed back untouched.
        let small = KVec::with_capacity(1, GFP_KERNEL).unwrap();
        let back = c.make_room(small);
        assert_eq!(back.capacity(), 1);
        assert!(c.overlaps(78, 79));
    }
}
