// SPDX-License-Identifier: GPL-2.0

//! Per-process state shared by every region of one address space: the region count under
//! the `max_regions_per_mm` limit, and the verify queue.
//!
//! - **Limit.** At most `max_regions_per_mm` regions (module parameter, declared in
//!   `src/vamr_glue.c`) may be registered in one address space, `/dev/vamr` regions and
//!   driver regions (VA MRs) together. It bounds the work one invalidation does in one
//!   process, which visits every region of the mm that overlaps the range.
//! - **Verify queue.** An invalidation that keeps the mapping does not unpin: it marks the
//!   affected pins *suspect* and queues the region here (no allocation: an intrusive list).
//!   One work item per mm then checks the suspect pins of every queued region against the
//!   page table, one pass per burst of invalidations (see `Region::verify`).

use crate::region::Region;
use kernel::list::{List, ListArc};
use kernel::mm::Mm;
use kernel::new_spinlock;
use kernel::prelude::*;
use kernel::rbtree::RBTree;
use kernel::sync::atomic::{Acquire, Atomic, Relaxed, Release};
use kernel::sync::{aref::ARef, Arc, ArcBorrow, SpinLock};
use kernel::time::{delay::fsleep, msecs_to_jiffies, Delta};
use kernel::workqueue::{impl_has_delayed_work, new_delayed_work, DelayedWork, WorkItem};

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

/// Most regions one run of the verify work handles before it queues itself again, so that
/// one run is bounded even while the process keeps invalidating.
const VERIFY_PER_RUN: usize = 64;

/// How long (milliseconds, rounded up to a jiffy) the verify work waits before its pass, after
/// the first invalidation of a burst queued it: the system call that caused it (munmap,
/// mprotect, madvise) finishes first and its other invalidations join the same pass instead of
/// contending for `mmap_lock` with it. A delayed work item: the invalidation arms a timer and
/// wakes no worker, so the system call does not pay for a wakeup (an IPI to another CPU) it
/// does not need. The timer cannot outlive the module: see [`wait_for_timers`].
const VERIFY_DELAY_MS: u32 = 2;

/// Live [`MmState`]s. A pending verify timer holds a reference to its `MmState`, so when this
/// is 0 no timer of the module is armed (see [`wait_for_timers`]).
static LIVE_STATES: Atomic<usize> = Atomic::new(0);

/// Waits until every [`MmState`] is gone, which means no verify timer is armed any more.
/// Called at module exit, after `/dev/vamr` is gone and before the workqueue is destroyed: no
/// region exists then (a driver using the in-kernel API holds the module until its regions
/// are gone), so no new timer is armed, and each armed one fires within [`VERIFY_DELAY_MS`]
/// plus a jiffy, queues its work, whose pass finds nothing and drops the last reference.
/// Bounded by that delay and one pass. Sleeps.
pub(crate) fn wait_for_timers() {
    while LIVE_STATES.load(Acquire) != 0 {
        fsleep(Delta::from_millis(1));
    }
}

/// One entry of [`REGISTRY`]: the regions of an mm and its shared state.
struct Entry {
    regions: usize,
    state: Arc<MmState>,
}

kernel::sync::global_lock! {
    // SAFETY: initialized by `init` in module init, before `/dev/vamr` exists and before any
    // symbol of the in-kernel API can be called.
    unsafe(uninit) static REGISTRY: Mutex<Option<RBTree<usize, Entry>>> = None;
}

/// Initializes the registry. Called once, from module init.
pub(crate) fn init() {
    // SAFETY: called once, at module init, before any use of the lock.
    unsafe { REGISTRY.init() };
}

/// Frees the registry at module exit (every region is gone by then).
pub(crate) fn clear() {
    let old = REGISTRY.lock().take();
    drop(old);
}

/// State shared by the regions of one mm.
///
/// # Invariants
///
/// A region is in `pending` at most once (its `AtomicTracker`), and only while it has suspect
/// pins or had them when it was queued.
#[pin_data(PinnedDrop)]
pub(crate) struct MmState {
    /// The address space (`mmgrab`), pinned for the verify pass with `mmget_not_zero`.
    mm: ARef<Mm>,
    /// Regions with suspect pins, waiting for the verify work. Lock rules: taken by the
    /// invalidate callback inside the region lock, so held only to push or pop one entry (no
    /// allocation, no sleeping). Order: `Region::pages` → `MmState::pending`.
    #[pin]
    pending: SpinLock<List<Region>>,
    #[pin]
    work: DelayedWork<MmState>,
}

impl_has_delayed_work! {
    impl HasDelayedWork<Self> for MmState { self.work }
}

#[pinned_drop]
impl PinnedDrop for MmState {
    fn drop(self: Pin<&mut Self>) {
        LIVE_STATES.fetch_sub(1, Release);
    }
}

impl MmState {
    /// Queues `region` for the verify pass and schedules the work [`VERIFY_DELAY_MS`] later.
    /// Any context, does not sleep or allocate (the invalidate callback calls it with the
    /// region lock held).
    pub(crate) fn queue(self: &Arc<Self>, region: ArcBorrow<'_, Region>) {
        if let Some(item) = ListArc::try_from_arc_borrow(region) {
            self.pending.lock().push_back(item);
        }
        // Already pending (timer armed or work queued): that pass will see the region.
        // Arming the timer does not sleep or allocate.
        let delay = msecs_to_jiffies(VERIFY_DELAY_MS);
        let _ = crate::workqueue_get().enqueue_delayed(self.clone(), delay);
    }
}

impl WorkItem for MmState {
    type Pointer = Arc<MmState>;

    /// The verify pass of one mm: checks the suspect pins of the queued regions against the
    /// page table (`Region::verify`). Runs on the module's workqueue; may sleep; never faults
    /// memory in. Bounded: [`VERIFY_PER_RUN`] regions, then it queues itself again.
    fn run(this: Arc<MmState>) {
        let mm = this.mm.mmget_not_zero();
        for _ in 0..VERIFY_PER_RUN {
            let Some(item) = this.pending.lock().pop_front() else {
                return;
            };
            let region: Arc<Region> = item.into_arc();
            // Without a user of the mm the process is exiting: `MMU_NOTIFY_RELEASE` drops
            // every pin.
            if let Some(mm) = &mm {
                region.verify(mm);
            }
        }
        if !this.pending.lock().is_empty() {
            let _ = crate::workqueue_get().enqueue(this);
        }
    }
}

/// One region counted against its mm's limit, holding the mm's shared state; dropping it
/// gives the slot back.
///
/// # Invariants
///
/// [`REGISTRY`] holds an entry for `key` whose count includes this slot and whose state is
/// `state`.
pub(crate) struct MmSlot {
    /// The mm's address, as a key only (never dereferenced): the region that owns the slot
    /// holds a reference to the mm, so the address is not reused while the slot lives.
    key: usize,
    state: Arc<MmState>,
}

impl MmSlot {
    /// Takes a slot for one more region of `mm`.
    ///
    /// Errors: `ENOSPC` when `mm` already has `max_regions_per_mm` regions; `ENOMEM`. Process
    /// context, may sleep. Lock rules of [`REGISTRY`]: held only here and in `Drop`, around a
    /// lookup and an insert or remove; never taken by the invalidate path, so allocating under
    /// it is fine.
    pub(crate) fn take(mm: &Mm) -> Result<Self> {
        let key = mm.as_raw() as usize;
        let max = max_regions_per_mm();
        let mut guard = REGISTRY.lock();
        let tree = guard.get_or_insert_with(RBTree::new);
        if let Some(entry) = tree.get_mut(&key) {
            if entry.regions >= max {
                return Err(ENOSPC);
            }
            entry.regions += 1;
            // INVARIANT: the entry for `key` counts this slot.
            return Ok(MmSlot {
                key,
                state: entry.state.clone(),
            });
        }
        if max == 0 {
            return Err(ENOSPC);
        }
        let state = Arc::pin_init(
            pin_init!(MmState {
                mm: ARef::from(mm),
                pending <- new_spinlock!(List::new(), "vamr_mm_pending"),
                work <- new_delayed_work!("vamr_mm_verify"),
            }),
            GFP_KERNEL,
        )?;
        // Counted once it exists; its `PinnedDrop` uncounts it.
        LIVE_STATES.add(1, Relaxed);
        tree.try_create_and_insert(
            key,
            Entry {
                regions: 1,
                state: state.clone(),
            },
            GFP_KERNEL,
        )?;
        // INVARIANT: the new entry for `key` counts this slot.
        Ok(MmSlot { key, state })
    }

    /// The mm's shared state.
    pub(crate) fn state(&self) -> &Arc<MmState> {
        &self.state
    }
}

impl Drop for MmSlot {
    fn drop(&mut self) {
        let removed = {
            let mut guard = REGISTRY.lock();
            let Some(tree) = guard.as_mut() else { return };
            let last = match tree.get_mut(&self.key) {
                Some(entry) => {
                    entry.regions -= 1;
                    entry.regions == 0
                }
                // Unreachable by the type invariant.
                None => false,
            };
            if last {
                tree.remove(&self.key)
            } else {
                None
            }
        };
        // The entry's state reference goes after the lock.
        drop(removed);
    }
}
