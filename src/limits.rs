// SPDX-License-Identifier: GPL-2.0

//! Bounds on the objects a user creates through vamr, per address space and per user, and on
//! the work in flight they may have; the per-user counts.
//!
//! Every [`Object`] that user space can make vamr keep (regions, open `/dev/vamr` files,
//! monitor-mode watches, event-ring records) counts against two limits, module parameters of
//! `src/vamr_limits.c` (writable by root at run time; a lower value applies to new objects
//! only): one for the address space, kept in its `MmState` (`src/mm_state.rs`), and one for
//! the user, kept here. Past either, the operation that would create one more fails with
//! `ENOSPC`. A `Charge` (`src/charge.rs`) holds `n` units of one object on both counters and
//! gives them back when dropped; the object it stands for owns it, so close, unregister and
//! process exit return every unit.
//!
//! - **Which user.** The real uid (`kuid`) of the task that creates the object, as
//!   `struct user_struct` counts a user's processes and epoll watches: for everything a
//!   `/dev/vamr` file holds (the file itself, its regions, watches and event ring), the
//!   uid of the task that opened it, taken at `open()`; for a VA MR, the uid of the task
//!   that registers it (`vamr_region_create_on()` runs in `ibv_reg_mr()`'s context).
//! - **Per-user state.** One [`UserState`] per uid with a live [`User`] handle, in a tree
//!   under one mutex ([`USERS`]) taken only to look a user up (once per `/dev/vamr` open or
//!   VA MR registration) and to free the entry of a user whose last handle went. The counts
//!   themselves are atomics: charging and uncharging take no lock.
//! - **Memory.** Whatever a user's request allocates is charged to the caller's memory cgroup
//!   (`GFP_KERNEL_ACCOUNT`); these limits bound what one user can make vamr hold however its
//!   cgroups are set up, and with it the work of one invalidation (see the module
//!   documentation of `src/watch.rs`).
//!
//! Work in flight (fault requests, waiting device tasks, asynchronous prefetches) has budgets
//! of its own ([`Budget`], `EAGAIN` or a dropped advice; a `BudgetCharge` holds a unit):
//! constants per address space ([`Budget::limit`], counted in its `MmState`), and per user the
//! `max_*_per_user` parameters of `src/vamr_limits.c` ([`budget_limit`]), counted here too, in
//! the [`UserState`] of the region's user (who registered it), whoever's task does the work.

use crate::ffi;
use kernel::prelude::*;
use kernel::rbtree::RBTree;
use kernel::sync::atomic::{Atomic, Relaxed};
use kernel::sync::Arc;

/// The per-user bound of `budget` in force (`max_fault_requests_per_user`,
/// `max_device_waits_per_user`, `max_prefetches_per_user`). Any context.
pub(crate) fn budget_limit(budget: Budget) -> usize {
    // SAFETY: no preconditions; reads an `unsigned int` parameter with `READ_ONCE`.
    unsafe { ffi::vamr_budget_limit(budget as u32) as usize }
}

/// The per-user parameter's name of `budget`, as C declares it.
fn budget_name(budget: Budget) -> &'static CStr {
    // SAFETY: no preconditions; returns a static string for every known budget.
    let name = unsafe { ffi::vamr_budget_name(budget as u32) };
    if name.is_null() {
        return c"?";
    }
    // SAFETY: a NUL-terminated string literal of the C glue, which lives forever.
    unsafe { CStr::from_char_ptr(name) }
}

/// Adds `n` to `count` unless the sum would exceed `limit` (no overshoot, so an add that fails
/// never makes another one fail). Returns whether it added. Any context; never sleeps.
fn try_add_capped(count: &Atomic<usize>, n: usize, limit: usize) -> bool {
    let mut cur = count.load(Relaxed);
    loop {
        let Some(new) = cur.checked_add(n).filter(|&v| v <= limit) else {
            return false;
        };
        match count.cmpxchg(cur, new, Relaxed) {
            Ok(_) => return true,
            Err(seen) => cur = seen,
        }
    }
}

/// What a user can make vamr keep, each counted per address space and per user. The order is
/// that of `enum vamr_object` in `src/vamr_limits.h` (KUnit checks the parameter names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Object {
    /// Regions: `/dev/vamr` registrations and VA MRs together (`max_regions_per_mm`,
    /// `max_regions_per_user`).
    Regions,
    /// Open `/dev/vamr` files (`max_files_per_mm`, `max_files_per_user`).
    Files,
    /// Monitor-mode watches (`max_watches_per_mm`, `max_watches_per_user`).
    Watches,
    /// Records the event rings of `/dev/vamr` files hold, that is, the rings' sizes
    /// (`max_event_records_per_mm`, `max_event_records_per_user`).
    EventRecords,
}

impl Object {
    /// Number of objects.
    pub(crate) const COUNT: usize = 4;

    /// Every object, in index order.
    pub(crate) const ALL: [Object; Self::COUNT] = [
        Object::Regions,
        Object::Files,
        Object::Watches,
        Object::EventRecords,
    ];

    /// The limit in force per address space, or per user when `per_user`. Any context.
    pub(crate) fn limit(self, per_user: bool) -> usize {
        // SAFETY: no preconditions; reads an `unsigned int` parameter with `READ_ONCE`.
        unsafe { ffi::vamr_limit(self as u32, per_user) as usize }
    }

    /// The module parameter's name, as C declares it.
    fn param_name(self, per_user: bool) -> &'static CStr {
        // SAFETY: no preconditions; returns a static string for every known object.
        let name = unsafe { ffi::vamr_limit_name(self as u32, per_user) };
        if name.is_null() {
            return c"?";
        }
        // SAFETY: a NUL-terminated string literal of the C glue, which lives forever.
        unsafe { CStr::from_char_ptr(name) }
    }
}

/// Work that one address space, and one user over all its processes, may have outstanding at a
/// time, each with its bounds (see `Documentation/vamr.rst`, "Security"): [`Budget::limit`]
/// per mm, [`budget_limit`] (module parameters) per user. Past either, the operation
/// that would add one more fails with `EAGAIN` (an asynchronous prefetch is dropped instead)
/// rather than queueing or waiting, so that no process, and no user with many processes, can
/// make vamr's or a driver's workqueue hold an unbounded amount of its blocked work. The order
/// is that of `enum vamr_budget` in `src/vamr_limits.h` (KUnit checks the parameter names).
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
    /// Number of budgets.
    pub(crate) const COUNT: usize = 3;

    /// Every budget, in index order.
    pub(crate) const ALL: [Budget; Self::COUNT] = [
        Budget::FaultRequests,
        Budget::DeviceWaits,
        Budget::Prefetches,
    ];

    /// The bound per address space.
    pub(crate) const fn limit(self) -> usize {
        match self {
            Budget::FaultRequests => 16,
            Budget::DeviceWaits => 64,
            Budget::Prefetches => 64,
        }
    }
}

/// One counter per [`Object`].
pub(crate) struct Counts([Atomic<usize>; Object::COUNT]);

impl Counts {
    /// All zero.
    pub(crate) const fn new() -> Self {
        Counts([const { Atomic::new(0) }; Object::COUNT])
    }

    /// Adds `n` to the count of `object` unless the sum would exceed `limit` (no overshoot, so
    /// a charge that fails never makes another one fail). Returns whether it added. Any
    /// context; never sleeps.
    pub(crate) fn try_add(&self, object: Object, n: usize, limit: usize) -> bool {
        try_add_capped(&self.0[object as usize], n, limit)
    }

    /// Takes `n` back from the count of `object`. Any context.
    pub(crate) fn sub(&self, object: Object, n: usize) {
        self.0[object as usize].fetch_sub(n, Relaxed);
    }

    /// The count of `object` now.
    pub(crate) fn get(&self, object: Object) -> usize {
        self.0[object as usize].load(Relaxed)
    }
}

/// The counts of one user.
///
/// # Invariants
///
/// `holders` is the number of live [`User`] handles of this state; while it is not 0, the
/// entry of [`USERS`] for `uid` is this state. `work[b]` is the number of live budget charges
/// of `b` (`BudgetCharge`s) that hold a handle of this state, at most [`budget_limit`]
/// when each was taken.
struct UserState {
    uid: u32,
    holders: Atomic<usize>,
    counts: Counts,
    work: [Atomic<usize>; Budget::COUNT],
}

kernel::sync::global_lock! {
    // SAFETY: initialized by `init` in module init, before `/dev/vamr` exists and before any
    // symbol of the in-kernel API can be called.
    unsafe(uninit) static USERS: Mutex<Option<RBTree<u32, Arc<UserState>>>> = None;
}

/// Initializes the per-user table. Called once, from module init.
pub(crate) fn init() {
    // SAFETY: called once, at module init, before any use of the lock.
    unsafe { USERS.init() };
}

/// Frees the per-user table at module exit (no handle is left by then).
pub(crate) fn clear() {
    let old = USERS.lock().take();
    drop(old);
}

/// A handle on one user's counts. Cloning and dropping keep the count of handles; the entry of
/// a user goes with its last handle.
///
/// # Invariants
///
/// `state.holders` counts this handle.
pub(crate) struct User {
    state: Arc<UserState>,
}

impl User {
    /// The user of the current task (its real uid). Errors: `ENOMEM`. Process context, may
    /// sleep (takes [`USERS`]; allocates, charged to the caller's memory cgroup, the first
    /// time the user is seen).
    pub(crate) fn current() -> Result<User> {
        let uid = kernel::current!().uid().into_raw().val;
        User::of(uid)
    }

    /// The handle of `uid`. Errors: `ENOMEM`. Process context, may sleep. Lock rules of
    /// [`USERS`]: held only here and in `Drop`, around a lookup and an insert or remove; no
    /// other lock is taken under it.
    fn of(uid: u32) -> Result<User> {
        let mut guard = USERS.lock();
        let tree = guard.get_or_insert_with(RBTree::new);
        if let Some(state) = tree.get(&uid) {
            state.holders.add(1, Relaxed);
            // INVARIANT: counted just now; the entry for `uid` is `state`.
            return Ok(User {
                state: state.clone(),
            });
        }
        let state = Arc::new(
            UserState {
                uid,
                holders: Atomic::new(1),
                counts: Counts::new(),
                work: [const { Atomic::new(0) }; Budget::COUNT],
            },
            GFP_KERNEL_ACCOUNT,
        )?;
        tree.try_create_and_insert(uid, state.clone(), GFP_KERNEL_ACCOUNT)?;
        // INVARIANT: the new entry for `uid` is `state`, which counts this handle.
        Ok(User { state })
    }
}

impl User {
    /// Takes one unit of `budget` for the user: whether it did (false when the user has
    /// [`budget_limit`] outstanding already). For `BudgetCharge` only, which gives it back
    /// with [`User::uncharge`]. Any context; never sleeps.
    pub(crate) fn try_charge(&self, budget: Budget) -> bool {
        try_add_capped(&self.state.work[budget as usize], 1, budget_limit(budget))
    }

    /// Gives back one unit of `budget` that [`User::try_charge`] took. Any context.
    pub(crate) fn uncharge(&self, budget: Budget) {
        self.state.work[budget as usize].fetch_sub(1, Relaxed);
    }

    /// What the user has of each object (for `Charge` only, which takes and gives back).
    pub(crate) fn counts(&self) -> &Counts {
        &self.state.counts
    }
}

impl Clone for User {
    fn clone(&self) -> Self {
        // This handle keeps `holders` above 0, so the entry cannot go meanwhile.
        self.state.holders.add(1, Relaxed);
        // INVARIANT: counted just now.
        User {
            state: self.state.clone(),
        }
    }
}

impl Drop for User {
    /// Gives the handle back; the last one of a user frees its entry. Process context, may
    /// sleep (takes [`USERS`], only for the last handle).
    fn drop(&mut self) {
        if self.state.holders.fetch_sub(1, Relaxed) != 1 {
            return;
        }
        let uid = self.state.uid;
        let removed = {
            let mut guard = USERS.lock();
            let Some(tree) = guard.as_mut() else { return };
            // Still this user's entry and still without a handle (`of` may have handed out a
            // new one meanwhile, whose drop may even have removed the entry already)?
            match tree.get(&uid) {
                Some(s) if Arc::ptr_eq(s, &self.state) && s.holders.load(Relaxed) == 0 => {
                    tree.remove(&uid)
                }
                _ => None,
            }
        };
        // The entry's reference goes after the lock.
        drop(removed);
    }
}

/// debugfs `vamr/users` (mode 0400): one line per user with a live handle, `uid`, its count
/// of each object in [`Object`] order, then its work in flight of each [`Budget`] in order,
/// after a header line naming the per-user parameters. For the tests (nothing leaks when
/// everything is closed); root only, as debugfs is.
pub(crate) fn debugfs_users(_: &(), f: &mut kernel::fmt::Formatter<'_>) -> kernel::fmt::Result {
    write!(f, "uid")?;
    for object in Object::ALL {
        write!(f, " {}", object.param_name(true).to_str().unwrap_or("?"))?;
    }
    for budget in Budget::ALL {
        write!(f, " {}", budget_name(budget).to_str().unwrap_or("?"))?;
    }
    writeln!(f)?;
    let guard = USERS.lock();
    let Some(tree) = guard.as_ref() else {
        return Ok(());
    };
    for (uid, state) in tree.iter() {
        write!(f, "{uid}")?;
        for object in Object::ALL {
            write!(f, " {}", state.counts.get(object))?;
        }
        for work in &state.work {
            write!(f, " {}", work.load(Relaxed))?;
        }
        writeln!(f)?;
    }
    Ok(())
}

#[kunit_tests(vamr_kunit_limits)]
mod tests {
    use super::*;

    #[test]
    fn objects_match_the_c_parameters() {
        let names = [
            (
                Object::Regions,
                "max_regions_per_mm",
                "max_regions_per_user",
            ),
            (Object::Files, "max_files_per_mm", "max_files_per_user"),
            (
                Object::Watches,
                "max_watches_per_mm",
                "max_watches_per_user",
            ),
            (
                Object::EventRecords,
                "max_event_records_per_mm",
                "max_event_records_per_user",
            ),
        ];
        for (i, (object, mm, user)) in names.into_iter().enumerate() {
            assert_eq!(object as usize, i);
            assert_eq!(Object::ALL[i], object);
            assert_eq!(object.param_name(false).to_bytes(), mm.as_bytes());
            assert_eq!(object.param_name(true).to_bytes(), user.as_bytes());
        }
    }

    #[test]
    fn budgets_match_the_c_parameters() {
        let names = [
            (Budget::FaultRequests, "max_fault_requests_per_user"),
            (Budget::DeviceWaits, "max_device_waits_per_user"),
            (Budget::Prefetches, "max_prefetches_per_user"),
        ];
        assert_eq!(names.len(), Budget::COUNT);
        for (i, (budget, name)) in names.into_iter().enumerate() {
            assert_eq!(budget as usize, i);
            assert_eq!(Budget::ALL[i], budget);
            assert_eq!(budget_name(budget).to_bytes(), name.as_bytes());
        }
    }

    #[test]
    fn counts_stop_at_the_limit_without_overshoot() {
        let c = Counts::new();
        assert!(c.try_add(Object::Watches, 3, 4));
        assert!(!c.try_add(Object::Watches, 2, 4));
        assert_eq!(c.get(Object::Watches), 3);
        assert!(c.try_add(Object::Watches, 1, 4));
        assert!(!c.try_add(Object::Watches, 1, 4));
        assert!(!c.try_add(Object::Watches, usize::MAX, usize::MAX));
        assert_eq!(c.get(Object::Files), 0);
        c.sub(Object::Watches, 4);
        assert_eq!(c.get(Object::Watches), 0);
        assert!(!c.try_add(Object::Files, 1, 0));
    }

    #[test]
    fn a_users_handles_share_one_entry_until_the_last_goes() {
        // A uid no test process has: the entry is this test's alone.
        let uid = 0xfffe_0001;
        let a = User::of(uid).unwrap();
        let b = a.clone();
        let c = User::of(uid).unwrap();
        assert!(Arc::ptr_eq(&a.state, &c.state));
        assert_eq!(a.state.holders.load(Relaxed), 3);
        a.state.counts.try_add(Object::Files, 2, 10);
        drop(a);
        drop(c);
        assert_eq!(b.state.counts.get(Object::Files), 2);
        b.state.counts.sub(Object::Files, 2);
        drop(b);
        assert!(USERS.lock().as_ref().unwrap().get(&uid).is_none());
    }

    #[test]
    fn a_users_budget_stops_at_its_parameter() {
        let uid = 0xfffe_0002;
        let a = User::of(uid).unwrap();
        let b = User::of(uid).unwrap();
        let limit = budget_limit(Budget::FaultRequests);
        assert!(limit > 0);
        // Two handles (two processes) of one user share the budget.
        for i in 0..limit {
            assert!(if i % 2 == 0 { &a } else { &b }.try_charge(Budget::FaultRequests));
        }
        assert!(!b.try_charge(Budget::FaultRequests));
        assert!(a.try_charge(Budget::DeviceWaits));
        b.uncharge(Budget::FaultRequests);
        assert!(a.try_charge(Budget::FaultRequests));
        for _ in 0..limit {
            a.uncharge(Budget::FaultRequests);
        }
        a.uncharge(Budget::DeviceWaits);
        assert!(a.state.work.iter().all(|w| w.load(Relaxed) == 0));
    }
}
