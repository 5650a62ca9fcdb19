// SPDX-License-Identifier: GPL-2.0

//! [`KeyTable`]: the regions of a device by the index part of their MR key, in an
//! open-addressing hash table that allocates only when it grows or shrinks.
//!
//! Why not an `XArray`: a driver hands out MR indexes in sequence (rxe allocates them
//! cyclically over 2^18 indexes), so the few live MRs of a device sit at ever-moving indexes,
//! and an `XArray` with one entry allocates up to three nodes for each insert and frees them
//! (through RCU) at each erase: measured as the largest part of the fixed cost of registering
//! and deregistering a VA MR, beyond what a normal MR costs. This table reuses its slots:
//! inserting and erasing allocate nothing until the number of live entries doubles, or falls
//! to an eighth of the slots.

use kernel::prelude::*;

/// Slots of a new table, and the fewest a table shrinks to (1 KiB for a pointer-sized `T`).
pub(super) const MIN_SLOTS: usize = 64;

/// A map from `u32` indexes to values, with linear probing. Lookups, inserts and removals are
/// O(1) on average (the table is at most half full); an insert that finds the table half full
/// first doubles it, a removal that leaves it less than an eighth full halves it (both
/// `GFP_KERNEL`, so the owner's lock must allow sleeping). Not synchronised: the owner locks.
///
/// # Invariants
///
/// - `slots.len()` is a power of two, at least [`MIN_SLOTS`]; `live` slots are `Some`, and
///   `2 * live <= slots.len()`, so every probe sequence reaches an empty slot.
/// - An entry with index `i` sits in slot `home(i)` or after it (cyclically), with no empty
///   slot between `home(i)` and its slot; no two entries have the same index.
pub(super) struct KeyTable<T> {
    slots: KVVec<Option<(u32, T)>>,
    live: usize,
}

/// `len` empty slots.
fn empty_slots<T>(len: usize) -> Result<KVVec<Option<(u32, T)>>> {
    let mut slots = KVVec::with_capacity(len, GFP_KERNEL)?;
    for _ in 0..len {
        // Cannot fail: the capacity is there.
        slots.push_within_capacity(None).map_err(|_| ENOMEM)?;
    }
    Ok(slots)
}

impl<T> KeyTable<T> {
    /// An empty table of [`MIN_SLOTS`] slots. Errors: `ENOMEM`. May sleep.
    pub(super) fn new() -> Result<Self> {
        // INVARIANT: a power of two, all empty.
        Ok(KeyTable {
            slots: empty_slots(MIN_SLOTS)?,
            live: 0,
        })
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// The slot where the probe for `idx` starts (Fibonacci hashing: the top bits of the
    /// product, so that indexes in sequence spread over the table).
    fn home(&self, idx: u32) -> usize {
        let bits = self.slots.len().trailing_zeros();
        (u64::from(idx).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - bits)) as usize
    }

    /// The slot that holds `idx`, if any.
    fn find(&self, idx: u32) -> Option<usize> {
        let mask = self.mask();
        let mut pos = self.home(idx);
        loop {
            match &self.slots[pos] {
                None => return None,
                Some((k, _)) if *k == idx => return Some(pos),
                Some(_) => pos = (pos + 1) & mask,
            }
        }
    }

    /// The value under `idx`.
    pub(super) fn get(&self, idx: u32) -> Option<&T> {
        let pos = self.find(idx)?;
        self.slots[pos].as_ref().map(|(_, v)| v)
    }

    /// Number of entries.
    #[cfg(CONFIG_KUNIT)]
    pub(super) fn len(&self) -> usize {
        self.live
    }

    /// Number of slots.
    #[cfg(CONFIG_KUNIT)]
    pub(super) fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Puts `(idx, value)` in the first empty slot of its probe sequence; `idx` is not in the
    /// table and there is an empty slot.
    fn place(&mut self, idx: u32, value: T) {
        let mask = self.mask();
        let mut pos = self.home(idx);
        while self.slots[pos].is_some() {
            pos = (pos + 1) & mask;
        }
        self.slots[pos] = Some((idx, value));
    }

    /// Moves every entry into a table of `len` slots (a power of two, at least [`MIN_SLOTS`]
    /// and at least twice the entries). Errors: `ENOMEM` (the table is unchanged).
    fn resize(&mut self, len: usize) -> Result {
        let old = core::mem::replace(&mut self.slots, empty_slots(len)?);
        // INVARIANT: every entry is placed again by the probe rule of the new size.
        for (idx, value) in old.into_iter().flatten() {
            self.place(idx, value);
        }
        Ok(())
    }

    /// Adds `value` under `idx`. Errors (the value is handed back): `EEXIST` when `idx` is
    /// taken, `ENOMEM` when the table had to grow and could not. May sleep.
    pub(super) fn insert(&mut self, idx: u32, value: T) -> core::result::Result<(), (Error, T)> {
        if self.find(idx).is_some() {
            return Err((EEXIST, value));
        }
        if 2 * (self.live + 1) > self.slots.len() {
            if let Err(e) = self.resize(2 * self.slots.len()) {
                return Err((e, value));
            }
        }
        // INVARIANT: at most half full after the insert (grown above if needed).
        self.place(idx, value);
        self.live += 1;
        Ok(())
    }

    /// Takes the value under `idx` out if `pred` accepts it. May sleep (shrinking allocates;
    /// when that fails the table just stays larger).
    pub(super) fn remove(&mut self, idx: u32, pred: impl FnOnce(&T) -> bool) -> Option<T> {
        let mut hole = self.find(idx)?;
        if !self.slots[hole].as_ref().is_some_and(|(_, v)| pred(v)) {
            return None;
        }
        let (_, value) = self.slots[hole].take()?;
        self.live -= 1;
        // Backward-shift deletion: move later entries of the run into the hole when their
        // home is not after it, so that no probe sequence crosses an empty slot.
        let mask = self.mask();
        let mut pos = hole;
        loop {
            pos = (pos + 1) & mask;
            let home = match &self.slots[pos] {
                None => break,
                Some((k, _)) => self.home(*k),
            };
            if pos.wrapping_sub(home) & mask >= pos.wrapping_sub(hole) & mask {
                self.slots[hole] = self.slots[pos].take();
                hole = pos;
            }
        }
        if self.slots.len() > MIN_SLOTS && 8 * self.live < self.slots.len() {
            let _ = self.resize(self.slots.len() / 2);
        }
        Some(value)
    }
}

#[kunit_tests(vamr_kunit_keys)]
mod tests {
    use super::*;

    /// Inserts and removes many indexes in sequence (as a driver hands them out), growing
    /// and shrinking the table, and checks every lookup against the expected contents.
    #[test]
    fn sequential_indexes_grow_shrink_and_stay_found() -> Result {
        let mut t = KeyTable::<u32>::new()?;
        assert_eq!(t.slots(), MIN_SLOTS);
        for i in 1..=1000u32 {
            assert!(t.insert(i << 3, i).is_ok());
        }
        assert_eq!(t.len(), 1000);
        assert!(t.slots() >= 2000);
        assert!(matches!(t.insert(8, 0), Err((e, 0)) if e == EEXIST));
        for i in 1..=1000u32 {
            assert_eq!(t.get(i << 3), Some(&i));
            assert_eq!(t.get((i << 3) + 1), None);
        }
        // Remove the odd ones; a refusing predicate keeps an entry.
        assert_eq!(t.remove(8, |_| false), None);
        for i in (1..=1000u32).step_by(2) {
            assert_eq!(t.remove(i << 3, |v| *v == i), Some(i));
        }
        for i in 1..=1000u32 {
            let want = if i % 2 == 0 { Some(&i) } else { None };
            assert_eq!(t.get(i << 3), want);
        }
        for i in (2..=1000u32).step_by(2) {
            assert_eq!(t.remove(i << 3, |_| true), Some(i));
        }
        assert_eq!(t.len(), 0);
        assert_eq!(t.slots(), MIN_SLOTS);
        Ok(())
    }

    /// One live entry at a moving index, the pattern of one MR registered and deregistered in
    /// a loop: the table never grows, and stays consistent.
    #[test]
    fn one_entry_at_moving_indexes_reuses_the_slots() -> Result {
        let mut t = KeyTable::<u32>::new()?;
        assert!(t.insert(7, 7).is_ok());
        for i in 100..10_000u32 {
            assert!(t.insert(i, i).is_ok());
            assert_eq!(t.get(i), Some(&i));
            assert_eq!(t.remove(i, |_| true), Some(i));
            assert_eq!(t.get(i), None);
        }
        assert_eq!(t.get(7), Some(&7));
        assert_eq!(t.slots(), MIN_SLOTS);
        Ok(())
    }

    /// Entries whose probe sequences collide and wrap around the end of the table: removing
    /// any one keeps the others found (backward-shift deletion).
    #[test]
    fn colliding_runs_survive_removals() -> Result {
        let t0 = KeyTable::<u32>::new()?;
        // Indexes that hash to the last slots of a MIN_SLOTS table.
        let mut idx: KVec<u32> = KVec::new();
        let mut i = 0u32;
        while idx.len() < 20 {
            if t0.home(i) >= MIN_SLOTS - 3 {
                idx.push(i, GFP_KERNEL)?;
            }
            i += 1;
        }
        for skip in 0..idx.len() {
            let mut t = KeyTable::<u32>::new()?;
            for &k in idx.iter() {
                assert!(t.insert(k, k).is_ok());
            }
            assert_eq!(t.remove(idx[skip], |_| true), Some(idx[skip]));
            for (j, &k) in idx.iter().enumerate() {
                assert_eq!(t.get(k).copied(), (j != skip).then_some(k));
            }
        }
        Ok(())
    }
}
