// SPDX-License-Identifier: GPL-2.0

//! The outcomes of region operations that are not plain errnos: a region dead or cancelled,
//! a page that cannot be pinned, a fault that must be delivered by a fault request. They are
//! told apart inside the module and become an errno only at its interfaces (`src/api.rs`,
//! `src/device.rs`), through [`From`] or [`RegionError::to_errno`].

use kernel::prelude::*;

/// Why a region operation did not complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RegionError {
    /// The region was torn down, or its address space released (`EFAULT` at the interfaces).
    Dead,
    /// The region was cancelled: deregistration began (`ECANCELED`).
    Cancelled,
    /// The calling task has a (fatal) signal pending (`EINTR`).
    Interrupted,
    /// The page an access needs cannot be pinned: nothing mapped there, or the protection
    /// refuses the access (`EFAULT`).
    NoPage,
    /// A fault that this pin round must not wait for itself (a userfault, a page lock held by
    /// I/O): the caller delivers it with a fault request (`src/region/fault.rs`). Never leaves
    /// the region module on purpose; `EAGAIN` if it does.
    NeedsFault,
    /// Any other error, with its errno (bad arguments, allocation, GUP, the bounds).
    Errno(Error),
}

/// The result of a region operation.
pub(crate) type RegionResult<T = ()> = core::result::Result<T, RegionError>;

impl RegionError {
    /// The errno the interfaces report for it (see the variants).
    pub(crate) fn to_errno(self) -> i32 {
        Error::from(self).to_errno()
    }

    /// The outcome of a failed pin round (`crate::pin::pin_user_range`'s error).
    pub(crate) fn from_pin(e: Error) -> Self {
        if e == EFAULT {
            RegionError::NoPage
        } else if e == EBUSY {
            RegionError::NeedsFault
        } else if e == EINTR {
            RegionError::Interrupted
        } else {
            RegionError::Errno(e)
        }
    }
}

impl From<Error> for RegionError {
    fn from(e: Error) -> Self {
        RegionError::Errno(e)
    }
}

impl From<RegionError> for Error {
    fn from(e: RegionError) -> Self {
        match e {
            RegionError::Dead | RegionError::NoPage => EFAULT,
            RegionError::Cancelled => ECANCELED,
            RegionError::Interrupted => EINTR,
            RegionError::NeedsFault => EAGAIN,
            RegionError::Errno(e) => e,
        }
    }
}

impl From<kernel::alloc::AllocError> for RegionError {
    fn from(_: kernel::alloc::AllocError) -> Self {
        RegionError::Errno(ENOMEM)
    }
}
