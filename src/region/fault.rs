// SPDX-License-Identifier: GPL-2.0

//! Fault requests: a userfault needed by an access that must not wait on it itself (a device
//! task, which nothing could wake if the process never answers) is delivered from the module's
//! workqueue, while the access waits, cancellably (see `Documentation/vamr.rst`, "Pinning").

use super::{Region, RegionInner};
use crate::stats::Kind;
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;
use kernel::sync::atomic::{Acquire, Full, Relaxed};
use kernel::sync::{Arc, ArcBorrow, MutexGuard};
use kernel::workqueue::{impl_has_work, new_work, Work, WorkItem};

/// A fault delivered from the module's workqueue on behalf of an access that must not wait
/// on a userfault itself (see [`Region::wait_for_fault`]).
#[pin_data]
struct FaultRequest {
    region: Arc<Region>,
    /// The page to fault in (page aligned).
    va: usize,
    write: bool,
    #[pin]
    work: Work<FaultRequest>,
}

impl_has_work! {
    impl HasWork<Self> for FaultRequest { self.work }
}

impl WorkItem for FaultRequest {
    type Pointer = Pin<KBox<FaultRequest>>;

    /// Faults the page in, waiting for the userfaultfd handler if needed (or until the
    /// process closes its userfaultfd), then wakes the waiting access. Holds the region (not
    /// its registration) and, while faulting, a user reference on the mm.
    fn run(this: Pin<KBox<FaultRequest>>) {
        let region = &this.region;
        if !region.cancelled.load(Acquire) {
            if let Some(mm) = region.mm().mmget_not_zero() {
                // Failures are seen by the access, which pins again.
                let _ = crate::pin::fault_in(&mm, this.va, this.write);
            }
        }
        let mut inner = region.pages.lock();
        inner.fault_pending = false;
        inner.faults_done += 1;
        region.fault_done.notify_all();
    }
}

impl Region {
    /// Whether current runs in the region's address space (the owner's process context, where
    /// waiting for a fault, a userfault included, is killable and safe).
    pub(super) fn current_is_owner(&self) -> bool {
        matches!(kernel::current!().mm(), Some(mm) if core::ptr::eq(mm.as_raw(), self.mm().as_raw()))
    }

    /// Delivers the fault at page `idx` (for writing when `write`) from a work item and waits
    /// until it was handled, for an access that must not wait on a userfault itself (a device
    /// task: nothing could wake it if the process never answers). A region has at most one
    /// request outstanding: an access that finds one waits for it, then pins again (and asks
    /// for its own page if it is still missing). So the requests waiting for a handler are at
    /// most one per region, on a queue of their own that holds up nothing else.
    ///
    /// The wait ends when the request finished (success or not: the caller pins again), or
    /// with `ECANCELED` when the region is cancelled (deregistration), `EFAULT` when it is dead,
    /// `EINTR` when the caller has a signal pending (a process; device tasks get none). The
    /// request holds a reference to the region and the mm; if the handler never answers it
    /// ends when the process closes its userfaultfd (at exit at the latest). Sleeps
    /// interruptibly.
    pub(super) fn wait_for_fault(&self, idx: usize, write: bool) -> Result {
        let va = self.start + idx * PAGE_SIZE;
        let (ticket, ask) = {
            let mut inner = self.pages.lock();
            let ask = !inner.fault_pending;
            inner.fault_pending = true;
            (inner.faults_done, ask)
        };
        if ask {
            // SAFETY: `self` lives in an `Arc` (type invariant) and the caller holds a reference
            // to the registration (it is accessing the region), so the count is not zero.
            let region: Arc<Region> = unsafe { ArcBorrow::from_raw(self) }.into();
            let request = KBox::pin_init(
                pin_init!(FaultRequest {
                    region,
                    va,
                    write,
                    work <- new_work!("vamr_fault_request"),
                }),
                GFP_KERNEL,
            );
            let request = match request {
                Ok(request) => request,
                Err(e) => {
                    // Counted as finished: accesses that joined this request meanwhile
                    // wait for `faults_done` to move, and pin again (asking themselves).
                    let mut inner = self.pages.lock();
                    inner.fault_pending = false;
                    inner.faults_done += 1;
                    self.fault_done.notify_all();
                    return Err(e);
                }
            };
            // A fresh box is never queued already: enqueueing it cannot fail.
            crate::fault_workqueue_get().enqueue(request);
            self.stats.add(Kind::FaultRequests, 1);
            crate::trace::fault_request(self.start, va, write);
        }
        let mut inner = self.pages.lock();
        self.wait_fault_done(&mut inner, |inner| inner.faults_done != ticket)
    }

    /// Sleeps on [`Region::fault_done`] (the `pages` lock held by `inner` is released while
    /// asleep) until `ready` holds: the wait of an access for a fault request, and of a pin
    /// round for pages another round pins (`PinTurn`). Errors: `EFAULT` once the region is dead,
    /// `ECANCELED` once it is cancelled (`Region::cancel` wakes the wait), `EINTR` on a signal.
    pub(super) fn wait_fault_done(
        &self,
        inner: &mut MutexGuard<'_, RegionInner>,
        ready: impl Fn(&RegionInner) -> bool,
    ) -> Result {
        // Counted in before `cancelled` is read (Full), so that `cancel` wakes this wait (see
        // `Region::fault_waiters`).
        self.fault_waiters.fetch_add(1, Full);
        let res = loop {
            if ready(inner) {
                break Ok(());
            }
            if inner.dead {
                break Err(EFAULT);
            }
            if self.cancelled.load(Acquire) {
                break Err(ECANCELED);
            }
            if self.fault_done.wait_interruptible(inner) {
                break Err(EINTR);
            }
        };
        self.fault_waiters.fetch_sub(1, Relaxed);
        res
    }
}
