// SPDX-License-Identifier: GPL-2.0

//! Asynchronous prefetch (`ibv_advise_mr()` without `IB_UVERBS_ADVISE_MR_FLAG_FLUSH`): the
//! advice runs as a work item on the module's workqueue, bounded per region, per address
//! space and per user, and never waits on user space (a fault that would wait becomes a fault
//! request, and the advice ends there).

use super::{Prefetch, Region, RegionError, RegionResult};
use crate::charge::BudgetCharge;
use crate::limits::Budget;
use kernel::prelude::*;
use kernel::sync::{Arc, ArcBorrow};
use kernel::workqueue::{impl_has_work, new_work, Work, WorkItem};

/// Most asynchronous prefetches queued or running per region; past it
/// [`Region::prefetch_async`] drops the advice. Four cover a registration cache that
/// advises the same MR for several buffers in a row; more would only queue the same pages.
pub(crate) const PREFETCHES_PER_REGION: usize = 4;

/// One asynchronous prefetch, queued on the module's workqueue.
#[pin_data]
struct PrefetchWork {
    /// The region (not its registration: teardown does not wait for the work, whose pin
    /// rounds stop at cancellation, and which then finds the region dead).
    region: Arc<Region>,
    va: usize,
    len: usize,
    how: Prefetch,
    /// The advice's unit of [`Budget::Prefetches`] of the mm and of the region's user, given
    /// back when it ends.
    _charge: BudgetCharge,
    #[pin]
    work: Work<PrefetchWork>,
}

impl_has_work! {
    impl HasWork<Self> for PrefetchWork { self.work }
}

impl WorkItem for PrefetchWork {
    type Pointer = Pin<KBox<PrefetchWork>>;

    /// Pins what the advice asks (best effort: errors are dropped, as ODP's asynchronous
    /// prefetch drops them), then gives its units back.
    fn run(this: Pin<KBox<PrefetchWork>>) {
        let _ = this.region.prefetch(this.va, this.len, this.how);
        this.region.inner.lock().prefetches -= 1;
    }
}

impl Region {
    /// Queues a prefetch of `[va, va + len)` as `how` asks, to run on the module's workqueue,
    /// and returns at once. The range and the access are checked here; what the work item
    /// pins later is best effort (as [`Region::prefetch`] from a work item: no wait on user
    /// space).
    ///
    /// Past [`PREFETCHES_PER_REGION`] or the [`Budget::Prefetches`] of the mm or of the
    /// region's user (`max_prefetches_per_user`) the advice is dropped.
    /// Errors: as [`Region::prefetch`]'s checks (`EINVAL`, `EACCES`);
    /// `ECANCELED` once the region is cancelled; `EFAULT` once it is dead; `ENOMEM`. Process
    /// context; may sleep (allocates); takes the region lock.
    pub(crate) fn prefetch_async(&self, va: usize, len: usize, how: Prefetch) -> RegionResult {
        if how.write && !self.access.write {
            return Err(EACCES.into());
        }
        self.offset_of(va, len)?;
        self.check_interrupted()?;
        // Past a bound the advice is dropped, not failed: asynchronous advice is best effort
        // (ODP's may fail silently too), and callers that advise in a loop must not see errors.
        let charge = match self.charge(Budget::Prefetches) {
            Ok(charge) => charge,
            Err(RegionError::Dead) => return Err(RegionError::Dead),
            Err(_) => return Ok(()),
        };
        {
            let mut inner = self.inner.lock();
            if inner.prefetches >= PREFETCHES_PER_REGION {
                return Ok(());
            }
            inner.prefetches += 1;
        }
        // SAFETY: `self` lives in an `Arc` (type invariant) and the caller holds a reference
        // to the registration, so the count is not zero.
        let region: Arc<Region> = unsafe { ArcBorrow::from_raw(self) }.into();
        let work = KBox::pin_init(
            pin_init!(PrefetchWork {
                region,
                va,
                len,
                how,
                _charge: charge,
                work <- new_work!("vamr_prefetch"),
            }),
            GFP_KERNEL_ACCOUNT,
        );
        match work {
            // A fresh box is never queued already: enqueueing it cannot fail.
            Ok(work) => {
                crate::workqueue_get().enqueue(work);
                Ok(())
            }
            Err(e) => {
                self.inner.lock().prefetches -= 1;
                Err(e.into())
            }
        }
    }
}
