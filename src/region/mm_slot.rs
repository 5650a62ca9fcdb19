// SPDX-License-Identifier: GPL-2.0

//! A region's place in its address space's shared state (`src/mm_state.rs`): its unit under
//! the region limits, its entry in the verify queue, and the budgets of its work in flight.

use super::Region;
use crate::charge::{BudgetCharge, Charge};
use crate::limits::{Budget, Object, User};
use crate::mm_state::{MmRef, VerifyEntry};
use kernel::mm::Mm;
use kernel::prelude::*;
use kernel::sync::{Arc, ArcBorrow};

/// One region counted against its mm's and its user's limits (`max_regions_per_mm`,
/// `max_regions_per_user`), holding the mm's shared state and the region's entry in its verify
/// queue; dropping it gives the slot back.
///
/// # Invariants
///
/// `verify` is an entry of the verify queue of `charge`'s mm.
pub(crate) struct MmSlot {
    charge: Charge,
    verify: Arc<VerifyEntry>,
}

impl MmSlot {
    /// Takes a slot for one more region of `mm`, created by `user`.
    ///
    /// Errors: `ENOSPC` when `mm` already has `max_regions_per_mm` regions or `user` has
    /// `max_regions_per_user`; `ENOMEM`. Process context, may sleep (see [`MmRef::get`]).
    pub(crate) fn take(mm: &Mm, user: &User) -> Result<Self> {
        let mm = MmRef::get(mm)?;
        let charge = Charge::take(&mm, user, Object::Regions, 1)?;
        let verify = mm.state().verify_entry()?;
        // INVARIANT: made by the state of `charge`'s mm.
        Ok(MmSlot { charge, verify })
    }

    /// Queues `region`, the region of this slot, for its mm's verify pass (see
    /// [`crate::mm_state::MmState::queue`]). Any context; does not sleep or allocate.
    pub(crate) fn queue(&self, region: ArcBorrow<'_, Region>) {
        self.charge.mm().state().queue(&self.verify, region);
    }

    /// Takes one unit of `budget` for the region's mm and for its user (who registered it).
    /// Errors: `EAGAIN` when the mm has [`Budget::limit`] outstanding already, or the user
    /// [`crate::limits::budget_limit`] (nothing is taken then). Any context; does not sleep.
    pub(crate) fn charge(&self, budget: Budget) -> Result<BudgetCharge> {
        BudgetCharge::take(self.charge.mm(), self.charge.user(), budget)
    }
}
