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
//! - **One idle entry.** When the last region of an mm goes, its entry (its [`MmState`], which
//!   counts the regions) is kept as the registry's one *idle* entry ([`IDLE_KEY`]), and the
//!   idle entry it replaces is freed if it has no region: a process that registers and
//!   deregisters one MR at a time then neither allocates and frees its state nor takes the
//!   registry lock at deregistration. An idle entry holds its `mm_struct` (`mmgrab`, not the
//!   address space) until another mm's last region goes, or the module unloads.

use crate::region::Region;
use kernel::list::{List, ListArc};
use kernel::mm::Mm;
use kernel::new_spinlock;
use kernel::prelude::*;
use kernel::rbtree::RBTree;
use kernel::sync::atomic::{Acquire, Atomic, Full, Relaxed, Release};
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

/// Frees the idle entry, then waits until every [`MmState`] is gone, which means no verify
/// timer is armed any more. Called at module exit, after `/dev/vamr` is gone and before the
/// workqueue is destroyed: no region exists then (a driver using the in-kernel API holds the
/// module until its regions are gone), so every entry is idle, the one idle entry is freed
/// here, no new timer is armed, and each armed one fires within [`VERIFY_DELAY_MS`] plus a
/// jiffy, queues its work, whose pass finds nothing and drops the last reference. Bounded by
/// that delay and one pass. Sleeps.
pub(crate) fn wait_for_timers() {
    let all = REGISTRY.lock().take();
    drop(all);
    IDLE_KEY.store(0, Relaxed);
    while LIVE_STATES.load(Acquire) != 0 {
        fsleep(Delta::from_millis(1));
    }
}

kernel::sync::global_lock! {
    // SAFETY: initialized by `init` in module init, before `/dev/vamr` exists and before any
    // symbol of the in-kernel API can be called.
    unsafe(uninit) static REGISTRY: Mutex<Option<RBTree<usize, Arc<MmState>>>> = None;
}

/// The key of the idle entry of [`REGISTRY`] (see the module documentation), 0 for none. Written
/// only with [`REGISTRY`] held; read without it by [`MmSlot`]'s drop.
///
/// An entry with no region is the idle one, or is on its way out: the drop that took its
/// count to 0 either sees its key here (and leaves it idle), or takes the lock and makes it
/// the idle entry. Both sides use full barriers (the count's decrement and the key's exchange
/// are `Full`, each before the other side's read): so when another mm's drop makes its own
/// entry idle and reads this entry's count as not 0, this entry's drop sees the new key and
/// takes the lock itself. At most one entry without a region outlives the drop that emptied
/// it.
static IDLE_KEY: Atomic<usize> = Atomic::new(0);

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
    /// Regions of the mm ([`MmSlot`]s): raised only with [`REGISTRY`] held, lowered without it.
    regions: Atomic<usize>,
    /// The address space (`mmgrab`), pinned for the verify pass with `mmget_not_zero`.
    mm: ARef<Mm>,
    /// Regions with suspect pins, waiting for the verify work. Lock rules: taken by the
    /// invalidate callback inside the region lock, so held only to push or pop one entry (no
    /// allocation, no sleeping). Order: `Region::inner` → `MmState::pending`.
    #[pin]
    pending: SpinLock<List<Region>>,
    #[pin]
    work: DelayedWork<MmState>,
    /// What the mm has outstanding of each [`Budget`] ([`Charge`]s), indexed by the budget.
    charged: [Atomic<usize>; Budget::COUNT],
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
/// `state.regions` counts this slot, and [`REGISTRY`]'s entry for `key` is `state` (an entry
/// that counts a region is never removed), until the slot's drop takes its count back.
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
    /// context, may sleep. Lock rules of [`REGISTRY`]: held only here, in `Drop` (only when
    /// the last region of an mm that is not the idle one goes) and in [`wait_for_timers`],
    /// around a lookup and an insert or remove; never taken by the invalidate path, so
    /// allocating under it is fine; no entry is dropped under it.
    pub(crate) fn take(mm: &Mm) -> Result<Self> {
        let key = mm.as_raw() as usize;
        let max = max_regions_per_mm();
        let mut guard = REGISTRY.lock();
        let tree = guard.get_or_insert_with(RBTree::new);
        if let Some(state) = tree.get(&key) {
            // Drops may lower the count meanwhile, never raise it (that takes the lock).
            if state.regions.load(Relaxed) >= max {
                return Err(ENOSPC);
            }
            state.regions.add(1, Relaxed);
            // INVARIANT: the entry for `key` is `state`, which counts this slot.
            return Ok(MmSlot {
                key,
                state: state.clone(),
            });
        }
        if max == 0 {
            return Err(ENOSPC);
        }
        let state = Arc::pin_init(
            pin_init!(MmState {
                regions: Atomic::new(1),
                mm: ARef::from(mm),
                pending <- new_spinlock!(List::new(), "vamr_mm_pending"),
                work <- new_delayed_work!("vamr_mm_verify"),
                charged: [const { Atomic::new(0) }; Budget::COUNT],
            }),
            GFP_KERNEL,
        )?;
        // Counted once it exists; its `PinnedDrop` uncounts it.
        LIVE_STATES.add(1, Relaxed);
        tree.try_create_and_insert(key, state.clone(), GFP_KERNEL)?;
        // INVARIANT: the new entry for `key` is `state`, which counts this slot.
        Ok(MmSlot { key, state })
    }

    /// The mm's shared state.
    pub(crate) fn state(&self) -> &Arc<MmState> {
        &self.state
    }
}

impl Drop for MmSlot {
    /// Gives the slot back. The entry of an mm whose last region this was becomes the idle
    /// entry, and the previous idle entry is freed if it has no region (see [`IDLE_KEY`]).
    /// Takes [`REGISTRY`] only when the entry is not the idle one already.
    fn drop(&mut self) {
        // Full: ordered before the read of `IDLE_KEY` (see there).
        if self.state.regions.fetch_sub(1, Full) != 1 || IDLE_KEY.load(Relaxed) == self.key {
            return;
        }
        let removed = {
            let mut guard = REGISTRY.lock();
            let Some(tree) = guard.as_mut() else { return };
            // Still this mm's entry and still without a region (a registration may have come
            // in meanwhile, or another mm's drop may have freed the entry)?
            let empty = |s: &Arc<MmState>| s.regions.load(Relaxed) == 0;
            match tree.get(&self.key) {
                Some(s) if Arc::ptr_eq(s, &self.state) && empty(s) => {
                    // Full: ordered before the read of the old idle entry's count.
                    let old = IDLE_KEY.xchg(self.key, Full);
                    if old != self.key && tree.get(&old).is_some_and(empty) {
                        tree.remove(&old)
                    } else {
                        None
                    }
                }
                _ => None,
            }
        };
        // The old idle entry's state reference goes after the lock.
        drop(removed);
    }
}

/// Work that one address space may have outstanding at a time, each with its bound (see
/// `Documentation/vamr.rst`, "Security"): past it, the operation that would add one more fails
/// with `EAGAIN` (an asynchronous prefetch is dropped instead) rather than queueing or waiting, so that no process can make vamr's
/// or a driver's workqueue hold an unbounded amount of its blocked work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Budget {
    /// Fault requests queued or running on the fault workqueue (`src/region/fault.rs`).
    FaultRequests,
    /// Device tasks (work items of a driver, e.g. rdma_rxe's responder) asleep waiting for a
    /// fault request.
    DeviceWaits,
    /// Asynchronous prefetches (`vamr_region_prefetch_async()`) queued or running.
    Prefetches,
}

impl Budget {
    const COUNT: usize = 3;

    /// The bound per address space.
    pub(crate) const fn limit(self) -> usize {
        match self {
            Budget::FaultRequests => 16,
            Budget::DeviceWaits => 64,
            Budget::Prefetches => 64,
        }
    }
}

/// One unit of a [`Budget`] of an mm, given back when dropped (from any context: a work item
/// holds it until it ends).
///
/// # Invariants
///
/// `state.charged[budget]` counts this charge until it is dropped.
pub(crate) struct Charge {
    state: Arc<MmState>,
    budget: Budget,
}

impl MmState {
    /// Takes one unit of `budget`. Errors: `EAGAIN` when the mm has [`Budget::limit`]
    /// outstanding already. Any context; does not sleep.
    pub(crate) fn charge(self: &Arc<Self>, budget: Budget) -> Result<Charge> {
        let count = &self.charged[budget as usize];
        if count.fetch_add(1, Relaxed) >= budget.limit() {
            count.fetch_sub(1, Relaxed);
            return Err(EAGAIN);
        }
        // INVARIANT: counted above.
        Ok(Charge {
            state: self.clone(),
            budget,
        })
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.state.charged[self.budget as usize].fetch_sub(1, Relaxed);
    }
}
