// SPDX-License-Identifier: GPL-2.0

//! Per-process state shared by everything vamr keeps for one address space: the per-mm counts
//! of the objects under their limits (`src/limits.rs`), the budgets of work in flight, and the
//! verify queue.
//!
//! - **Limits.** [`MmState::counts`] holds what the mm has of each `limits::Object` (regions,
//!   `/dev/vamr` files, watches, event records), each at most its `max_*_per_mm` module
//!   parameter (`src/vamr_limits.c`); a `Charge` (`src/charge.rs`) holds a unit.
//!   `max_regions_per_mm` counts `/dev/vamr` regions and driver regions (VA MRs) together.
//!   With the watch limit it bounds the work one invalidation does in one process, which
//!   visits every region and watch group of the mm that overlaps the range.
//! - **Verify queue.** An invalidation that keeps the mapping does not unpin: it marks the
//!   affected pins *suspect* and queues the region here (no allocation: an intrusive list of
//!   the regions' [`VerifyEntry`]s, made at registration). One work item per mm then checks
//!   the suspect pins of every queued region against the page table ([`Verify`], implemented
//!   by `Region` in `src/region/verify.rs`), one pass per burst of invalidations.
//! - **Holders.** An [`MmRef`] holds the mm's entry in the registry: every region (its
//!   `MmSlot`), every `/dev/vamr` file and every charge holds one, so the counts live as long
//!   as anything they count.
//! - **One idle entry.** When the last holder of an mm goes, its entry (its [`MmState`]) is
//!   kept as the registry's one *idle* entry ([`IDLE_KEY`]), and the idle entry it replaces is
//!   freed if it has no holder: a process that registers and deregisters one MR at a time
//!   then neither allocates and frees its state nor takes the registry lock at
//!   deregistration. An idle entry holds its `mm_struct` (`mmgrab`, not the address space)
//!   until another mm's last holder goes, or the module unloads.

use crate::limits::{Budget, Counts};
use kernel::list::{AtomicTracker, List, ListArc, ListLinks, TryNewListArc};
use kernel::mm::{Mm, MmWithUser};
use kernel::new_spinlock;
use kernel::prelude::*;
use kernel::rbtree::RBTree;
use kernel::sync::atomic::{Acquire, Atomic, Full, Relaxed, Release};
use kernel::sync::{aref::ARef, Arc, ArcBorrow, LockedBy, SpinLock};
use kernel::time::{delay::fsleep, msecs_to_jiffies, Delta};
use kernel::workqueue::{impl_has_delayed_work, new_delayed_work, DelayedWork, WorkItem};

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
/// module until its regions are gone; every `/dev/vamr` file, and every events file, holds the
/// module), so every entry is idle, the one idle entry is freed
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
/// only with [`REGISTRY`] held; read without it by [`MmRef`]'s drop.
///
/// An entry with no holder is the idle one, or is on its way out: the drop that took its
/// count to 0 either sees its key here (and leaves it idle), or takes the lock and makes it
/// the idle entry. Both sides use full barriers (the count's decrement and the key's exchange
/// are `Full`, each before the other side's read): so when another mm's drop makes its own
/// entry idle and reads this entry's count as not 0, this entry's drop sees the new key and
/// takes the lock itself. At most one entry without a holder outlives the drop that emptied
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

/// What the verify work of an mm checks: a region with suspect pins (`src/region/verify.rs`).
pub(crate) trait Verify: Send + Sync {
    /// Checks the suspect pins against the page table of `mm`. Runs on the module's workqueue;
    /// may sleep; never faults memory in.
    fn verify(&self, mm: &MmWithUser);
}

/// A region's place in its mm's verify queue, made with the region ([`MmState::verify_entry`]).
///
/// # Invariants
///
/// The entry is in its state's `pending` list (it has a [`ListArc`]) exactly when `item` holds
/// what it queues, which that reference keeps alive until the verify work takes it out.
#[pin_data]
pub(crate) struct VerifyEntry {
    #[pin]
    links: ListLinks<0>,
    #[pin]
    track: AtomicTracker<0>,
    /// What the entry queues, while it is queued. Under its state's `pending` lock.
    item: LockedBy<Option<Arc<dyn Verify>>, List<VerifyEntry>>,
}

kernel::list::impl_list_arc_safe! {
    impl ListArcSafe<0> for VerifyEntry {
        tracked_by track: AtomicTracker;
    }
}

kernel::list::impl_list_item! {
    impl ListItem<0> for VerifyEntry {
        using ListLinks { self.links };
    }
}

/// State shared by the regions, files and watches of one mm.
///
/// # Invariants
///
/// An entry is in `pending` at most once (its `AtomicTracker`), and only while its region has
/// suspect pins or had them when it was queued.
#[pin_data(PinnedDrop)]
pub(crate) struct MmState {
    /// Live [`MmRef`]s of the mm: raised from 0 only with [`REGISTRY`] held, lowered without
    /// it.
    holders: Atomic<usize>,
    /// What the mm has of each `limits::Object`, each under its `max_*_per_mm` limit.
    counts: Counts,
    /// The address space (`mmgrab`), pinned for the verify pass with `mmget_not_zero`.
    mm: ARef<Mm>,
    /// Regions with suspect pins, waiting for the verify work. Lock rules: taken by the
    /// invalidate callback inside the region lock, so held only to push or pop one entry (no
    /// allocation, no sleeping, no reference to a queued item dropped). Order:
    /// `Region::inner` → `MmState::pending`.
    #[pin]
    pending: SpinLock<List<VerifyEntry>>,
    #[pin]
    work: DelayedWork<MmState>,
    /// What the mm has outstanding of each [`Budget`] (`BudgetCharge`s), indexed by the budget.
    charged: [Atomic<usize>; Budget::COUNT],
}

impl_has_delayed_work! {
    impl HasDelayedWork<Self> for MmState { self.work }
}

#[pinned_drop]
impl PinnedDrop for MmState {
    fn drop(self: Pin<&mut Self>) {
        // Nothing is queued by then (a pending pass holds a reference to the state); were
        // anything left, its entry's reference would keep its region forever.
        while self.pop().is_some() {}
        LIVE_STATES.fetch_sub(1, Release);
    }
}

impl MmState {
    /// A new entry of this mm's verify queue, for one region. Errors: `ENOMEM`. May sleep.
    pub(crate) fn verify_entry(&self) -> Result<Arc<VerifyEntry>> {
        Arc::pin_init(
            pin_init!(VerifyEntry {
                links <- ListLinks::new(),
                track <- AtomicTracker::new(),
                item: LockedBy::new(&self.pending, None),
            }),
            GFP_KERNEL_ACCOUNT,
        )
    }

    /// Queues `item` with its `entry` (made by [`MmState::verify_entry`] of this state) for the
    /// verify pass, and schedules the work [`VERIFY_DELAY_MS`] later. Any context, does not
    /// sleep or allocate (the invalidate callback calls it with the region lock held).
    pub(crate) fn queue<T: Verify + 'static>(
        self: &Arc<Self>,
        entry: &Arc<VerifyEntry>,
        item: ArcBorrow<'_, T>,
    ) {
        if let Some(listed) = ListArc::try_from_arc_borrow(entry.as_arc_borrow()) {
            let item: Arc<dyn Verify> = Arc::from(item);
            let mut pending = self.pending.lock();
            // INVARIANT: in the list, with what it queues.
            *listed.item.access_mut(&mut pending) = Some(item);
            pending.push_back(listed);
        }
        // Already pending (timer armed or work queued): that pass will see the region.
        // Arming the timer does not sleep or allocate.
        let delay = msecs_to_jiffies(VERIFY_DELAY_MS);
        let _ = crate::workqueue_get().enqueue_delayed(self.clone(), delay);
    }

    /// Takes the first entry out of the verify queue and returns what it queued (the
    /// reference the queue held). Any context; does not sleep.
    fn pop(&self) -> Option<Arc<dyn Verify>> {
        let mut pending = self.pending.lock();
        let entry = pending.pop_front()?;
        // INVARIANT: out of the list, without an item.
        let item = entry.item.access_mut(&mut pending).take();
        drop(pending);
        // The entry may be queued again from here.
        drop(entry);
        item
    }

    /// Takes one unit of `budget` for the mm: whether it did (false when the mm has
    /// [`Budget::limit`] outstanding already). For `BudgetCharge` only, which gives it back
    /// with [`MmState::uncharge`]. Any context; never sleeps.
    pub(crate) fn try_charge(&self, budget: Budget) -> bool {
        let count = &self.charged[budget as usize];
        if count.fetch_add(1, Relaxed) >= budget.limit() {
            count.fetch_sub(1, Relaxed);
            return false;
        }
        true
    }

    /// Gives back one unit of `budget` that [`MmState::try_charge`] took. Any context.
    pub(crate) fn uncharge(&self, budget: Budget) {
        self.charged[budget as usize].fetch_sub(1, Relaxed);
    }
}

impl WorkItem for MmState {
    type Pointer = Arc<MmState>;

    /// The verify pass of one mm: checks the suspect pins of the queued regions against the
    /// page table ([`Verify::verify`]). Runs on the module's workqueue; may sleep; never faults
    /// memory in. Bounded: [`VERIFY_PER_RUN`] regions, then it queues itself again.
    fn run(this: Arc<MmState>) {
        let mm = this.mm.mmget_not_zero();
        for _ in 0..VERIFY_PER_RUN {
            let Some(item) = this.pop() else {
                return;
            };
            // Without a user of the mm the process is exiting: `MMU_NOTIFY_RELEASE` drops
            // every pin.
            if let Some(mm) = &mm {
                item.verify(mm);
            }
        }
        if !this.pending.lock().is_empty() {
            let _ = crate::workqueue_get().enqueue(this);
        }
    }
}

/// A holder of an mm's entry in the registry, and so of its [`MmState`]: the counts of an mm
/// stay while anything it counts lives. Dropping the last one makes the entry the idle one.
///
/// # Invariants
///
/// `state.holders` counts this handle, and [`REGISTRY`]'s entry for `key` is `state` (an entry
/// with a holder is never removed), until the handle's drop takes its count back.
pub(crate) struct MmRef {
    /// The mm's address, as a key only (never dereferenced): `state` holds a reference to the
    /// mm, so the address is not reused while the handle lives.
    key: usize,
    state: Arc<MmState>,
}

impl MmRef {
    /// The handle of `mm`'s state, made on first use.
    ///
    /// Errors: `ENOMEM`. Process context, may sleep. Lock rules of [`REGISTRY`]: held only
    /// here, in `Drop` (only when the last holder of an mm that is not the idle one goes) and
    /// in [`wait_for_timers`], around a lookup and an insert or remove; never taken by the
    /// invalidate path, so allocating under it is fine; no entry is dropped under it.
    pub(crate) fn get(mm: &Mm) -> Result<Self> {
        let key = mm.as_raw() as usize;
        let mut guard = REGISTRY.lock();
        let tree = guard.get_or_insert_with(RBTree::new);
        if let Some(state) = tree.get(&key) {
            state.holders.add(1, Relaxed);
            // INVARIANT: the entry for `key` is `state`, which counts this handle.
            return Ok(MmRef {
                key,
                state: state.clone(),
            });
        }
        let state = Arc::pin_init(
            pin_init!(MmState {
                holders: Atomic::new(1),
                counts: Counts::new(),
                mm: ARef::from(mm),
                pending <- new_spinlock!(List::new(), "vamr_mm_pending"),
                work <- new_delayed_work!("vamr_mm_verify"),
                charged: [const { Atomic::new(0) }; Budget::COUNT],
            }),
            GFP_KERNEL_ACCOUNT,
        )?;
        // Counted once it exists; its `PinnedDrop` uncounts it.
        LIVE_STATES.add(1, Relaxed);
        tree.try_create_and_insert(key, state.clone(), GFP_KERNEL_ACCOUNT)?;
        // INVARIANT: the new entry for `key` is `state`, which counts this handle.
        Ok(MmRef { key, state })
    }

    /// The mm's shared state.
    pub(crate) fn state(&self) -> &Arc<MmState> {
        &self.state
    }

    /// What the mm has of each object (see `src/limits.rs`).
    pub(crate) fn counts(&self) -> &Counts {
        &self.state.counts
    }
}

impl Clone for MmRef {
    fn clone(&self) -> Self {
        // This handle keeps `holders` above 0: the entry stays, no lock needed.
        self.state.holders.add(1, Relaxed);
        // INVARIANT: counted just now; the entry is unchanged.
        MmRef {
            key: self.key,
            state: self.state.clone(),
        }
    }
}

impl Drop for MmRef {
    /// Gives the handle back. The entry of an mm whose last holder this was becomes the idle
    /// entry, and the previous idle entry is freed if it has no holder (see [`IDLE_KEY`]).
    /// Takes [`REGISTRY`] only when the entry is not the idle one already, so it may sleep.
    fn drop(&mut self) {
        // Full: ordered before the read of `IDLE_KEY` (see there).
        if self.state.holders.fetch_sub(1, Full) != 1 || IDLE_KEY.load(Relaxed) == self.key {
            return;
        }
        let removed = {
            let mut guard = REGISTRY.lock();
            let Some(tree) = guard.as_mut() else { return };
            // Still this mm's entry and still without a holder (a registration may have come
            // in meanwhile, or another mm's drop may have freed the entry)?
            let empty = |s: &Arc<MmState>| s.holders.load(Relaxed) == 0;
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
