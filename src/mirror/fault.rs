// SPDX-License-Identifier: GPL-2.0

//! A mirror's fault requests: a fault that a pin round of a mirror must not wait for itself
//! (a userfault nobody answers, a FUSE READ, a page lock held by I/O) is delivered from the
//! module's fault workqueue, while the owner's `vamr_mirror_populate()` or
//! `vamr_mirror_fault()` waits for it cancellably ([`Faults::cancel`], which
//! `vamr_mirror_cancel()` and `vamr_mirror_destroy()` call), as a region's accesses do
//! (`src/region/fault.rs`). A request holds this state and the mm, nothing of the driver's:
//! the mirror, its device and its callback go at destroy even while a request still waits.

use crate::charge::BudgetCharge;
use kernel::mm::Mm;
use kernel::prelude::*;
use kernel::sync::atomic::{Acquire, Atomic, Release};
use kernel::sync::{aref::ARef, Arc, CondVar, Mutex};
use kernel::workqueue::{impl_has_work, new_work, Work, WorkItem};
use kernel::{new_condvar, new_mutex};

/// The requests of a mirror, under [`Faults::lock`].
struct Tickets {
    /// A request is queued or running (one per mirror at a time).
    pending: bool,
    /// Requests ended so far: a waiter waits for it to move past the value it saw.
    done: u64,
}

/// The fault requests of one mirror and their waiters.
#[pin_data]
pub(super) struct Faults {
    #[pin]
    lock: Mutex<Tickets>,
    /// Notified (under `lock`) when a request ends and at cancellation.
    #[pin]
    ended: CondVar,
    /// Set once by [`Faults::cancel`]: no wait lasts, no request faults any more.
    cancelled: Atomic<bool>,
    /// The mirror's mm (a grab: a request takes a user reference only while it faults).
    mm: ARef<Mm>,
}

/// One fault delivered from the fault workqueue.
#[pin_data]
struct Request {
    faults: Arc<Faults>,
    /// The page to fault in (page aligned).
    va: usize,
    write: bool,
    /// Its unit of `Budget::FaultRequests` of the mm and the user, given back when it ends.
    _charge: BudgetCharge,
    #[pin]
    work: Work<Request>,
}

impl_has_work! {
    impl HasWork<Self> for Request { self.work }
}

impl WorkItem for Request {
    type Pointer = Pin<KBox<Request>>;

    /// Faults the page in, waiting for the userfaultfd handler, the FUSE server or the I/O
    /// (until the process closes its userfaultfd or the server answers), unless cancelled
    /// meanwhile; then wakes the waiters, which pin again.
    fn run(this: Pin<KBox<Request>>) {
        let f = &this.faults;
        if !f.cancelled.load(Acquire) {
            if let Some(mm) = f.mm.mmget_not_zero() {
                // Failures are seen by the caller, which pins again.
                let _ = crate::pin::fault_in(&mm, this.va, this.write);
            }
        }
        let mut t = f.lock.lock();
        t.pending = false;
        t.done += 1;
        f.ended.notify_all();
    }
}

impl Faults {
    /// The state of a new mirror of `mm`.
    pub(super) fn new(mm: ARef<Mm>) -> impl PinInit<Self> {
        pin_init!(Faults {
            lock <- new_mutex!(Tickets { pending: false, done: 0 }, "vamr_mirror_faults"),
            ended <- new_condvar!("vamr_mirror_fault_ended"),
            cancelled: Atomic::new(false),
            mm,
        })
    }

    /// Whether [`Faults::cancel`] was called.
    pub(super) fn cancelled(&self) -> bool {
        self.cancelled.load(Acquire)
    }

    /// Ends every wait (`ECANCELED`) and refuses every later one. Sleeps briefly (the lock).
    pub(super) fn cancel(&self) {
        self.cancelled.store(true, Release);
        // Under the lock: a waiter reads `cancelled` under it before it sleeps.
        let _t = self.lock.lock();
        self.ended.notify_all();
    }

    /// Has the fault at `va` delivered from a work item (unless a request is outstanding:
    /// then joins it) and waits until a request ended; the caller pins again. `charge` takes
    /// the request's budget unit (called only when a request is queued).
    ///
    /// Errors: `ECANCELED` (cancelled before or during the wait), `EINTR` (a signal of the
    /// caller), `EAGAIN` (from `charge`: the mm's or the user's bound of fault requests),
    /// `ENOMEM`. Sleeps interruptibly; call with no lock held.
    pub(super) fn wait_for(
        this: &Arc<Self>,
        va: usize,
        write: bool,
        charge: impl FnOnce() -> Result<BudgetCharge>,
    ) -> Result {
        let mut t = this.lock.lock();
        let ticket = t.done;
        if !t.pending && !this.cancelled() {
            let charge = charge()?;
            let request = KBox::pin_init(
                pin_init!(Request {
                    faults: this.clone(),
                    va,
                    write,
                    _charge: charge,
                    work <- new_work!("vamr_mirror_fault_request"),
                }),
                GFP_KERNEL_ACCOUNT,
            )?;
            t.pending = true;
            // A fresh box is never queued already: enqueueing it cannot fail.
            crate::fault_workqueue_get().enqueue(request);
        }
        loop {
            if t.done != ticket {
                return Ok(());
            }
            if this.cancelled() {
                return Err(ECANCELED);
            }
            if this.ended.wait_interruptible(&mut t) {
                return Err(EINTR);
            }
        }
    }
}
