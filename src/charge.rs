// SPDX-License-Identifier: GPL-2.0

//! Charges: what one object, or one piece of work in flight, holds against the bounds of its
//! address space and of its user (`src/limits.rs`), given back when dropped.
//!
//! A [`Charge`] holds `n` units of one [`Object`] (`ENOSPC` past a limit); a [`BudgetCharge`]
//! one unit of a [`Budget`] (`EAGAIN` past a bound). Each holds the handles of both counters it
//! counts on (an [`MmRef`] or the mm's state, and a [`User`]), so the counts live as long as
//! anything they count.

use crate::limits::{Budget, Object, User};
use crate::mm_state::{MmRef, MmState};
use kernel::prelude::*;
use kernel::sync::Arc;

/// `n` units of one [`Object`], counted for an address space and for a user; dropping it gives
/// them back (any context that may sleep: the handles it holds may be the last ones).
///
/// # Invariants
///
/// `mm`'s count of `object` and `user`'s count of `object` each include `n` for this charge.
pub(crate) struct Charge {
    mm: MmRef,
    user: User,
    object: Object,
    n: usize,
}

impl Charge {
    /// Takes `n` units of `object` for `mm` and `user`. Errors: `ENOSPC` when either would
    /// pass its limit (nothing is taken then). Any context; never sleeps.
    pub(crate) fn take(mm: &MmRef, user: &User, object: Object, n: usize) -> Result<Charge> {
        if !mm.counts().try_add(object, n, object.limit(false)) {
            return Err(ENOSPC);
        }
        if !user.counts().try_add(object, n, object.limit(true)) {
            mm.counts().sub(object, n);
            return Err(ENOSPC);
        }
        // INVARIANT: both counts include `n` now.
        Ok(Charge {
            mm: mm.clone(),
            user: user.clone(),
            object,
            n,
        })
    }

    /// Makes the charge `n` units: takes the difference, or gives it back. Errors: `ENOSPC`
    /// when growing would pass a limit (the charge stays as it was). Any context; never
    /// sleeps (a spinlock may be held).
    pub(crate) fn resize(&mut self, n: usize) -> Result {
        let object = self.object;
        if n > self.n {
            let more = n - self.n;
            if !self.mm.counts().try_add(object, more, object.limit(false)) {
                return Err(ENOSPC);
            }
            if !self.user.counts().try_add(object, more, object.limit(true)) {
                self.mm.counts().sub(object, more);
                return Err(ENOSPC);
            }
        } else {
            self.mm.counts().sub(object, self.n - n);
            self.user.counts().sub(object, self.n - n);
        }
        // INVARIANT: both counts include the new `n` instead of the old one.
        self.n = n;
        Ok(())
    }

    /// The address space the charge counts for.
    pub(crate) fn mm(&self) -> &MmRef {
        &self.mm
    }

    /// The user the charge counts for.
    pub(crate) fn user(&self) -> &User {
        &self.user
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.mm.counts().sub(self.object, self.n);
        self.user.counts().sub(self.object, self.n);
    }
}

/// One unit of a [`Budget`] of an mm and of a user, given back when dropped, from any context
/// that may sleep (a work item holds it until it ends; the user handle it holds may be the
/// user's last one, see [`User`]).
///
/// # Invariants
///
/// `state`'s count of `budget` and `user`'s count of `budget` each count this charge until it
/// is dropped.
pub(crate) struct BudgetCharge {
    state: Arc<MmState>,
    user: User,
    budget: Budget,
}

impl BudgetCharge {
    /// Takes one unit of `budget` for `mm` and for `user`. Errors: `EAGAIN` when the mm has
    /// [`Budget::limit`] outstanding already, or the user [`crate::limits::budget_limit`]
    /// (nothing is taken then). Any context; does not sleep.
    pub(crate) fn take(mm: &MmRef, user: &User, budget: Budget) -> Result<BudgetCharge> {
        let state = mm.state();
        if !state.try_charge(budget) {
            return Err(EAGAIN);
        }
        if !user.try_charge(budget) {
            state.uncharge(budget);
            return Err(EAGAIN);
        }
        // INVARIANT: counted above, for the mm and for the user.
        Ok(BudgetCharge {
            state: state.clone(),
            user: user.clone(),
            budget,
        })
    }
}

impl Drop for BudgetCharge {
    fn drop(&mut self) {
        self.state.uncharge(self.budget);
        self.user.uncharge(self.budget);
    }
}
