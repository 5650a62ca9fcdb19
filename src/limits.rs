// SPDX-License-Identifier: GPL-2.0

//! The per-process region limit: at most `max_regions_per_mm` regions (module parameter) may
//! be registered in one address space, counting both `/dev/vamr` regions and driver regions
//! (VA MRs). It bounds what one process can make the kernel do inside an invalidation, which
//! visits every region of the mm that overlaps the range (see `Documentation/vamr.rst`,
//! "Security").

use kernel::mm::Mm;
use kernel::prelude::*;
use kernel::rbtree::RBTree;

kernel::sync::global_lock! {
    // SAFETY: initialized by `init` in module init, before `/dev/vamr` exists and before any
    // symbol of the in-kernel API can be called.
    unsafe(uninit) static COUNTS: Mutex<Option<RBTree<usize, usize>>> = None;
}

/// Initializes the counter table. Called once, from module init.
pub(crate) fn init() {
    // SAFETY: called once, at module init, before any use of the lock.
    unsafe { COUNTS.init() };
}

extern "C" {
    fn vamr_max_regions_per_mm() -> u32;
}

/// The limit in force: the `max_regions_per_mm` module parameter, declared in
/// `src/vamr_glue.c` so that it shows in sysfs and can be changed at run time (the Rust
/// `module!` parameters have no sysfs file). A lower value applies to new registrations only.
pub(crate) fn max_regions_per_mm() -> usize {
    // SAFETY: no preconditions; reads an `unsigned int` with `READ_ONCE`.
    unsafe { vamr_max_regions_per_mm() as usize }
}

/// One region counted against its mm's limit; dropping it gives the slot back.
///
/// # Invariants
///
/// `COUNTS` holds an entry for `mm` whose count includes this slot.
pub(crate) struct MmSlot {
    /// The mm's address, as a key only (never dereferenced): the region that owns the slot
    /// holds a reference to the mm, so the address is not reused while the slot lives.
    mm: usize,
}

impl MmSlot {
    /// Takes a slot for one more region of `mm`.
    ///
    /// Errors: `ENOSPC` when `mm` already has `max_regions_per_mm` regions; `ENOMEM`. Process
    /// context, may sleep. Lock rules of `COUNTS`: held only here and in `Drop`, around a
    /// lookup and an insert or remove; never taken by the invalidate path, so allocating under
    /// it is fine.
    pub(crate) fn take(mm: &Mm) -> Result<Self> {
        let key = mm.as_raw() as usize;
        let mut guard = COUNTS.lock();
        let tree = guard.get_or_insert_with(RBTree::new);
        if let Some(n) = tree.get_mut(&key) {
            if *n >= max_regions_per_mm() {
                return Err(ENOSPC);
            }
            *n += 1;
        } else {
            if max_regions_per_mm() == 0 {
                return Err(ENOSPC);
            }
            tree.try_create_and_insert(key, 1, GFP_KERNEL)?;
        }
        // INVARIANT: the entry for `key` counts this slot.
        Ok(MmSlot { mm: key })
    }
}

impl Drop for MmSlot {
    fn drop(&mut self) {
        let mut guard = COUNTS.lock();
        let Some(tree) = guard.as_mut() else { return };
        let last = match tree.get_mut(&self.mm) {
            Some(n) => {
                *n -= 1;
                *n == 0
            }
            // Unreachable by the type invariant.
            None => false,
        };
        if last {
            let _ = tree.remove(&self.mm);
        }
    }
}
