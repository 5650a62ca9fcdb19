// SPDX-License-Identifier: GPL-2.0

//! Fault requests: a fault that a pin round must not wait for itself (every round but
//! registration's: a userfault nobody answers, a page lock held by I/O, a swap-in) is delivered
//! from the module's fault workqueue, while the access waits for it cancellably, so that
//! deregistration always ends the wait (see `Documentation/vamr.rst`, "Pinning").

use super::{Region, RegionError, RegionInner, RegionResult};
use crate::charge::BudgetCharge;
use crate::limits::Budget;
use crate::stats::Kind;
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;
use kernel::sync::atomic::{Acquire, Full, Relaxed};
use kernel::sync::{Arc, ArcBorrow, CondVar, MutexGuard};
use kernel::workqueue::{impl_has_work, new_work, Work, WorkItem};

/// A fault delivered from the module's fault workqueue on behalf of an access that must not
/// wait for it itself (see [`Region::wait_for_fault`]).
#[pin_data]
struct FaultRequest {
    region: Arc<Region>,
    /// The page to fault in (page aligned).
    va: usize,
    write: bool,
    /// The request's unit of [`Budget::FaultRequests`] of the mm and of the region's user,
    /// given back when it ends.
    _charge: BudgetCharge,
    #[pin]
    work: Work<FaultRequest>,
}

impl_has_work! {
    impl HasWork<Self> for FaultRequest { self.work }
}

impl WorkItem for FaultRequest {
    type Pointer = Pin<KBox<FaultRequest>>;

    /// Faults the page in, waiting for the userfaultfd handler or the I/O if needed (or until
    /// the process closes its userfaultfd), then wakes the waiting accesses. Holds the region
    /// (not its registration: teardown does not wait for it) and, while faulting, a user
    /// reference on the mm.
    fn run(this: Pin<KBox<FaultRequest>>) {
        let region = &this.region;
        if !region.cancelled.load(Acquire) {
            if let Some(mm) = region.mm().mmget_not_zero() {
                // Failures are seen by the access, which pins again.
                let _ = crate::pin::fault_in(&mm, this.va, this.write);
            }
        }
        let mut inner = region.inner.lock();
        inner.fault_pending = false;
        inner.faults_done += 1;
        region.fault_done.notify_all();
    }
}

impl Region {
    /// Whether current runs in the region's address space (the owner's process context, where
    /// a wait is interruptible by the process's own signals).
    pub(super) fn current_is_owner(&self) -> bool {
        matches!(kernel::current!().mm(), Some(mm) if core::ptr::eq(mm.as_raw(), self.mm().as_raw()))
    }

    /// Takes one unit of `budget` for the region's mm and its user (`MmSlot::charge`).
    /// Errors: `Dead` once the region is dead; `EAGAIN` past the mm's or the user's bound.
    /// Takes the region lock; does not sleep otherwise.
    pub(super) fn charge(&self, budget: Budget) -> RegionResult<BudgetCharge> {
        Self::charge_locked(&self.inner.lock(), budget)
    }

    /// As [`Region::charge`], with the region lock held.
    fn charge_locked(inner: &RegionInner, budget: Budget) -> RegionResult<BudgetCharge> {
        match &inner.slot {
            Some(slot) if !inner.dead => Ok(slot.charge(budget)?),
            _ => Err(RegionError::Dead),
        }
    }

    /// Has the fault at page `idx` (for writing when `write`) delivered from a work item
    /// unless a request of the region is outstanding already (one per region at a time), and
    /// returns the ticket to wait for ([`RegionInner::faults_done`] moves past it when the
    /// outstanding request ends). Does not wait.
    ///
    /// Errors: `EAGAIN` when the mm has [`Budget::FaultRequests`]'s bound of requests
    /// outstanding, or the region's user its `max_fault_requests_per_user`; `Dead` once the
    /// region is dead; `ENOMEM`. Sleeps (allocates).
    pub(super) fn request_fault(&self, idx: usize, write: bool) -> RegionResult<u64> {
        let va = self.start + idx * PAGE_SIZE;
        let (ticket, charge) = {
            let mut inner = self.inner.lock();
            if inner.dead || inner.slot.is_none() {
                return Err(RegionError::Dead);
            }
            if inner.fault_pending {
                return Ok(inner.faults_done);
            }
            // Charged before the request is marked pending: past a bound nobody joined it.
            let charge = Self::charge_locked(&inner, Budget::FaultRequests)?;
            inner.fault_pending = true;
            (inner.faults_done, charge)
        };
        // SAFETY: `self` lives in an `Arc` (type invariant) and the caller holds a reference
        // to the region (it is accessing it), so the count is not zero.
        let region: Arc<Region> = unsafe { ArcBorrow::from_raw(self) }.into();
        let request = KBox::pin_init(
            pin_init!(FaultRequest {
                region,
                va,
                write,
                _charge: charge,
                work <- new_work!("vamr_fault_request"),
            }),
            GFP_KERNEL_ACCOUNT,
        );
        let request = match request {
            Ok(request) => request,
            Err(e) => {
                // Counted as finished: accesses that joined this request meanwhile wait for
                // `faults_done` to move, and pin again (asking themselves).
                let mut inner = self.inner.lock();
                inner.fault_pending = false;
                inner.faults_done += 1;
                self.fault_done.notify_all();
                return Err(e.into());
            }
        };
        // A fresh box is never queued already: enqueueing it cannot fail.
        crate::fault_workqueue_get().enqueue(request);
        self.stats.add(Kind::FaultRequests, 1);
        crate::trace::fault_request(self.start, va, write);
        Ok(ticket)
    }

    /// Delivers the fault at page `idx` (for writing when `write`) from a work item
    /// ([`Region::request_fault`]) and waits until it was handled. An access that finds a
    /// request outstanding waits for it, then pins again (and asks for its own page if it is
    /// still missing).
    ///
    /// The wait ends when the request finished (success or not: the caller pins again), or
    /// with `Cancelled` when the region is cancelled (deregistration), `Dead` when it is
    /// dead, `Interrupted` when the caller has a signal pending (a process; device tasks get none).
    /// A device task (the caller is not the owner process) counts against the
    /// [`Budget::DeviceWaits`] of the mm and of the region's user while it waits: past
    /// either bound, `EAGAIN` at once. Other
    /// errors: as [`Region::request_fault`]. If the handler never answers, the request ends
    /// when the process closes its userfaultfd (at exit at the latest); the wait ends at
    /// cancellation in any case. Sleeps interruptibly.
    pub(super) fn wait_for_fault(&self, idx: usize, write: bool) -> RegionResult {
        let _waiting = if self.current_is_owner() {
            None
        } else {
            Some(self.charge(Budget::DeviceWaits)?)
        };
        let ticket = self.request_fault(idx, write)?;
        let mut inner = self.inner.lock();
        self.wait_on(&self.fault_done, &mut inner, |inner| {
            inner.faults_done != ticket
        })
    }

    /// Sleeps on `cond` (the region lock held by `inner` is released while asleep) until
    /// `ready` holds: the wait of an access for a fault request ([`Region::fault_done`]), and
    /// of a pin round for pages another round pins ([`Region::claim_free`], `PinTurn`). Errors: `Dead` once the region is dead,
    /// `Cancelled` once it is cancelled (`Region::cancel` wakes the wait), `Interrupted` on a
    /// signal ([`RegionError`]).
    pub(super) fn wait_on(
        &self,
        cond: &CondVar,
        inner: &mut MutexGuard<'_, RegionInner>,
        ready: impl Fn(&RegionInner) -> bool,
    ) -> RegionResult {
        // Counted in before `cancelled` is read (Full), so that `cancel` wakes this wait (see
        // `Region::fault_waiters`).
        self.fault_waiters.fetch_add(1, Full);
        let res = loop {
            if ready(inner) {
                break Ok(());
            }
            // Cancelled first: teardown after a deregistration sets both.
            if self.cancelled.load(Acquire) {
                break Err(RegionError::Cancelled);
            }
            if inner.dead {
                break Err(RegionError::Dead);
            }
            if cond.wait_interruptible(inner) {
                break Err(RegionError::Interrupted);
            }
        };
        self.fault_waiters.fetch_sub(1, Relaxed);
        res
    }
}
