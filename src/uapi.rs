// SPDX-License-Identifier: GPL-2.0

//! The user-space ABI of `/dev/vamr`, mirrored from `include/uapi/misc/vamr.h`.
//!
//! The C header is the source of truth. The kernel's `bindings` crate does not cover
//! out-of-tree headers, so the layouts are written again here; the KUnit suite at the end of
//! this file compares every number with what the C compiler derived from the header (published
//! by `src/vamr_glue.c`), so a drift fails the suite at module load.

use kernel::ioctl::_IOWR;
use kernel::prelude::*;
use kernel::transmute::{AsBytes, FromBytes};

/// ABI version reported by `VAMR_IOC_QUERY`; bumped on an incompatible change.
pub(crate) const ABI_VERSION: u32 = 1;

/// ioctl type byte (unassigned in `Documentation/userspace-api/ioctl/ioctl-number.rst`).
pub(crate) const IOCTL_TYPE: u32 = 0xBB;

/// Every feature bit this version of the ABI defines (`VAMR_FEATURES_KNOWN`).
pub(crate) const FEATURES_KNOWN: u64 = 0;

/// Argument of `VAMR_IOC_QUERY` (`struct vamr_query`).
///
/// # Invariants
///
/// Plain old data: 24 bytes, no padding, the same layout for 32- and 64-bit user space.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(crate) struct Query {
    /// Out: [`ABI_VERSION`].
    pub(crate) abi_version: u32,
    /// In: must be 0.
    pub(crate) flags: u32,
    /// Out: feature bits the module implements, a subset of [`FEATURES_KNOWN`].
    pub(crate) features: u64,
    /// Out: `PAGE_SIZE` in bytes, the pinning granule.
    pub(crate) page_size: u32,
    /// In: must be 0. Out: 0.
    pub(crate) reserved: u32,
}

// SAFETY: `Query` is `repr(C)` with only integer fields and no padding (4 + 4 + 8 + 4 + 4 bytes,
// every field naturally aligned), so every bit pattern is a valid value and it has no interior
// mutability.
unsafe impl FromBytes for Query {}
// SAFETY: `Query` is `repr(C)` with only integer fields and no padding (see above), so all of its
// bytes are initialized.
unsafe impl AsBytes for Query {}

/// `VAMR_IOC_QUERY`: report the ABI version and the features.
pub(crate) const IOC_QUERY: u32 = _IOWR::<Query>(IOCTL_TYPE, 0x00);

impl Query {
    /// Answers a `VAMR_IOC_QUERY` request.
    ///
    /// Returns `EINVAL` when `flags` or `reserved` of the request is nonzero (they are reserved
    /// for future extension, so a nonzero value means the caller expects semantics this version
    /// does not have). Pure computation: any context.
    pub(crate) fn answer(request: &Query) -> Result<Query> {
        if request.flags != 0 || request.reserved != 0 {
            return Err(EINVAL);
        }
        Ok(Query {
            abi_version: ABI_VERSION,
            flags: 0,
            features: FEATURES_KNOWN,
            // PAGE_SIZE is 4096 on x86_64 and at most 256 KiB anywhere: fits in u32.
            page_size: kernel::page::PAGE_SIZE as u32,
            reserved: 0,
        })
    }
}

#[kunit_tests(vamr_uapi)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    extern "C" {
        static vamr_c_abi_version: u32;
        static vamr_c_ioc_query: u32;
        static vamr_c_query_size: u32;
        static vamr_c_query_off_features: u32;
        static vamr_c_query_off_page_size: u32;
        static vamr_c_features_known: u64;
    }

    /// Reads one of the constants that `src/vamr_glue.c` derives from the C header.
    fn c_u32(value: &'static u32) -> u32 {
        *value
    }

    #[test]
    fn rust_abi_matches_c_header() {
        // SAFETY: these are `const` objects defined in `src/vamr_glue.c`, linked into this module
        // and never written; reading an initialized `u32`/`u64` through a shared reference is
        // sound.
        let (ver, ioc, size, off_features, off_page_size, known) = unsafe {
            (
                c_u32(&vamr_c_abi_version),
                c_u32(&vamr_c_ioc_query),
                c_u32(&vamr_c_query_size),
                c_u32(&vamr_c_query_off_features),
                c_u32(&vamr_c_query_off_page_size),
                vamr_c_features_known,
            )
        };
        assert_eq!(ver, ABI_VERSION);
        assert_eq!(ioc, IOC_QUERY);
        assert_eq!(size as usize, size_of::<Query>());
        assert_eq!(off_features as usize, offset_of!(Query, features));
        assert_eq!(off_page_size as usize, offset_of!(Query, page_size));
        assert_eq!(known, FEATURES_KNOWN);
    }

    #[test]
    fn query_answer_reports_version_and_page_size() {
        let reply = Query::answer(&Query::default()).unwrap();
        assert_eq!(reply.abi_version, ABI_VERSION);
        assert_eq!(reply.page_size as usize, kernel::page::PAGE_SIZE);
        assert_eq!(reply.features & !FEATURES_KNOWN, 0);
        assert_eq!(reply.flags, 0);
        assert_eq!(reply.reserved, 0);
    }

    #[test]
    fn query_rejects_nonzero_flags_and_reserved() {
        let flags = Query {
            flags: 1,
            ..Query::default()
        };
        assert_eq!(Query::answer(&flags), Err(EINVAL));
        let reserved = Query {
            reserved: 0x8000_0000,
            ..Query::default()
        };
        assert_eq!(Query::answer(&reserved), Err(EINVAL));
    }
}
