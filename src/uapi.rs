// SPDX-License-Identifier: GPL-2.0

//! The user-space ABI of `/dev/vamr`, mirrored from `include/uapi/misc/vamr.h`.
//!
//! The C header is the source of truth. The kernel's `bindings` crate does not cover
//! out-of-tree headers, so the layouts are written again here; the KUnit suite at the end of
//! this file compares every ioctl number, size and key offset with what the C compiler derived
//! from the header (published by `src/vamr_glue.c`), so a drift fails the suite at module load.

use crate::notifier;
use kernel::ioctl::{_IOW, _IOWR};
use kernel::prelude::*;
use kernel::transmute::{AsBytes, FromBytes};

/// ABI version reported by `VAMR_IOC_QUERY`; bumped on an incompatible change.
pub(crate) const ABI_VERSION: u32 = 3;

/// ioctl type byte (unassigned in `Documentation/userspace-api/ioctl/ioctl-number.rst`).
pub(crate) const IOCTL_TYPE: u32 = 0xBB;

/// `VAMR_FEATURE_REGIONS`: REGISTER, UNREGISTER, ACCESS and STATS.
pub(crate) const FEATURE_REGIONS: u64 = 1 << 0;
/// `VAMR_FEATURE_ATOMICS`: `VAMR_IOC_ATOMIC`.
pub(crate) const FEATURE_ATOMICS: u64 = 1 << 1;
/// `VAMR_FEATURE_PREFETCH`: `VAMR_IOC_PREFETCH`.
pub(crate) const FEATURE_PREFETCH: u64 = 1 << 2;
/// `VAMR_FEATURE_EVENTS`: `VAMR_IOC_EVENTS_OPEN`.
pub(crate) const FEATURE_EVENTS: u64 = 1 << 3;
/// `VAMR_FEATURE_MR_QUERY`: `VAMR_IOC_MR_QUERY`.
pub(crate) const FEATURE_MR_QUERY: u64 = 1 << 4;
/// `VAMR_FEATURE_DEVICES`: `VAMR_IOC_DEVICE`.
pub(crate) const FEATURE_DEVICES: u64 = 1 << 5;
/// Every feature bit this version of the ABI defines (`VAMR_FEATURES_KNOWN`).
pub(crate) const FEATURES_KNOWN: u64 = FEATURE_REGIONS
    | FEATURE_ATOMICS
    | FEATURE_PREFETCH
    | FEATURE_EVENTS
    | FEATURE_MR_QUERY
    | FEATURE_DEVICES;

/// `VAMR_DEVICE_NAME_MAX`: bytes of `struct vamr_device_info.name`, NUL included.
pub(crate) const DEVICE_NAME_MAX: usize = 64;

/// `VAMR_ACCESS_READ`.
pub(crate) const ACCESS_READ: u32 = 1 << 0;
/// `VAMR_ACCESS_WRITE`.
pub(crate) const ACCESS_WRITE: u32 = 1 << 1;
/// `VAMR_ACCESS_KNOWN`.
pub(crate) const ACCESS_KNOWN: u32 = ACCESS_READ | ACCESS_WRITE;

/// `VAMR_ACCESS_OP_READ`.
pub(crate) const ACCESS_OP_READ: u32 = 0;
/// `VAMR_ACCESS_OP_WRITE`.
pub(crate) const ACCESS_OP_WRITE: u32 = 1;

/// `VAMR_ATOMIC_CMP_SWAP`.
pub(crate) const ATOMIC_CMP_SWAP: u32 = 0;
/// `VAMR_ATOMIC_FETCH_ADD`.
pub(crate) const ATOMIC_FETCH_ADD: u32 = 1;
/// `VAMR_ATOMIC_WRITE`.
pub(crate) const ATOMIC_WRITE: u32 = 2;
/// `VAMR_PREFETCH_WRITE`: prefetch pins for writing.
pub(crate) const PREFETCH_WRITE: u32 = 1 << 0;
/// `VAMR_PREFETCH_NO_FAULT`: prefetch pins only present pages, never faults.
pub(crate) const PREFETCH_NO_FAULT: u32 = 1 << 1;
/// `VAMR_PREFETCH_KNOWN`.
pub(crate) const PREFETCH_KNOWN: u32 = PREFETCH_WRITE | PREFETCH_NO_FAULT;

/// `VAMR_EVENT_OVERFLOW`: `struct vamr_event.kind` of the lost-records report.
pub(crate) const EVENT_OVERFLOW: u32 = 0xffff;
/// `VAMR_EVENTS_NONBLOCK`.
pub(crate) const EVENTS_NONBLOCK: u32 = 1 << 0;
/// `VAMR_EVENTS_CLOEXEC`.
pub(crate) const EVENTS_CLOEXEC: u32 = 1 << 1;

/// `VAMR_STATS_GLOBAL`.
pub(crate) const STATS_GLOBAL: u32 = 0xffff_ffff;

/// Declares `repr(C)` plain-old-data ABI structures with their byte-transmute impls.
macro_rules! abi_struct {
    ($($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $f:ident : $t:ty),* $(,)? })*) => {$(
        $(#[$m])*
        ///
        /// # Invariants
        ///
        /// `repr(C)` with only `u32`/`u64` fields (or arrays and structs of them) laid out
        /// without padding, as the static asserts of `src/vamr_glue.c` and the KUnit suite check.
        #[repr(C)]
        #[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
        pub(crate) struct $name { $($(#[$fm])* pub(crate) $f: $t),* }

        // SAFETY: integer fields only and no padding (type invariant): every bit pattern is
        // valid, and there is no interior mutability.
        unsafe impl FromBytes for $name {}
        // SAFETY: integer fields only and no padding (type invariant): all bytes are initialized.
        unsafe impl AsBytes for $name {}
    )*};
}

abi_struct! {
    /// `struct vamr_query`.
    Query { abi_version: u32, flags: u32, features: u64, page_size: u32, reserved: u32 }
    /// `struct vamr_register`.
    Register { addr: u64, len: u64, cookie: u64, access: u32, flags: u32, handle: u32, reserved: u32 }
    /// `struct vamr_handle_arg`.
    HandleArg { handle: u32, flags: u32 }
    /// `struct vamr_access`.
    Access { addr: u64, len: u64, buf: u64, handle: u32, op: u32 }
    /// `struct vamr_atomic`.
    Atomic { addr: u64, compare: u64, swap: u64, result: u64, handle: u32, op: u32 }
    /// `struct vamr_prefetch`.
    Prefetch { addr: u64, len: u64, handle: u32, flags: u32, pages: u32, reserved: u32 }
    /// `struct vamr_counters`.
    Counters {
        pages_pinned: u64,
        regions: u64,
        invalidations: [u64; notifier::Event::COUNT],
        invalidations_refused: u64,
        pages_unpinned: u64,
        pins_swapped: u64,
        ondemand_repins: u64,
        repin_retries: u64,
        access_faults: u64,
        bytes_read: u64,
        bytes_written: u64,
        pins_kept: u64,
        fault_requests: u64,
    }
    /// `struct vamr_stats`.
    Stats { handle: u32, flags: u32, generation: u64, counters: Counters }
    /// `struct vamr_event`.
    Event { addr: u64, len: u64, cookie: u64, generation: u64, handle: u32, kind: u32 }
    /// `struct vamr_events_open`.
    EventsOpen { flags: u32, fd: i32 }
    /// `struct vamr_mr_query`.
    MrQuery {
        key: u32,
        flags: u32,
        ib_index: u32,
        reserved: u32,
        addr: u64,
        len: u64,
        counters: Counters,
    }
    /// `struct vamr_device_info` (`name` as two halves: `Default` exists for arrays of at
    /// most 32 elements).
    DeviceInfo {
        pos: u32,
        flags: u32,
        ib_index: u32,
        reserved: u32,
        access_va: u64,
        name: [[u8; DEVICE_NAME_MAX / 2]; 2],
    }
}

/// `VAMR_IOC_QUERY`.
pub(crate) const IOC_QUERY: u32 = _IOWR::<Query>(IOCTL_TYPE, 0x00);
/// `VAMR_IOC_REGISTER`.
pub(crate) const IOC_REGISTER: u32 = _IOWR::<Register>(IOCTL_TYPE, 0x01);
/// `VAMR_IOC_UNREGISTER`.
pub(crate) const IOC_UNREGISTER: u32 = _IOW::<HandleArg>(IOCTL_TYPE, 0x02);
/// `VAMR_IOC_ACCESS`.
pub(crate) const IOC_ACCESS: u32 = _IOW::<Access>(IOCTL_TYPE, 0x03);
/// `VAMR_IOC_ATOMIC`.
pub(crate) const IOC_ATOMIC: u32 = _IOWR::<Atomic>(IOCTL_TYPE, 0x04);
/// `VAMR_IOC_PREFETCH`.
pub(crate) const IOC_PREFETCH: u32 = _IOWR::<Prefetch>(IOCTL_TYPE, 0x05);
/// `VAMR_IOC_STATS`.
pub(crate) const IOC_STATS: u32 = _IOWR::<Stats>(IOCTL_TYPE, 0x06);
/// `VAMR_IOC_EVENTS_OPEN`.
pub(crate) const IOC_EVENTS_OPEN: u32 = _IOWR::<EventsOpen>(IOCTL_TYPE, 0x07);
/// `VAMR_IOC_MR_QUERY`.
pub(crate) const IOC_MR_QUERY: u32 = _IOWR::<MrQuery>(IOCTL_TYPE, 0x08);
/// `VAMR_IOC_DEVICE`.
pub(crate) const IOC_DEVICE: u32 = _IOWR::<DeviceInfo>(IOCTL_TYPE, 0x09);

impl DeviceInfo {
    /// Sets `name` from a NUL-terminated array of [`DEVICE_NAME_MAX`] bytes.
    pub(crate) fn set_name(&mut self, name: &[u8; DEVICE_NAME_MAX]) {
        let (a, b) = name.split_at(DEVICE_NAME_MAX / 2);
        self.name[0].copy_from_slice(a);
        self.name[1].copy_from_slice(b);
    }
}

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

#[kunit_tests(vamr_kunit_uapi)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    extern "C" {
        static vamr_c_abi_version: u32;
        static vamr_c_features_known: u64;
        static vamr_c_access_known: u32;
        static vamr_c_event_count: u32;
        static vamr_c_ioc: [u32; 10];
        static vamr_c_sizes: [u32; 12];
        static vamr_c_offsets: [u32; 8];
    }

    #[test]
    fn rust_abi_matches_c_header() {
        // SAFETY: these are `const` objects defined in `src/vamr_glue.c`, linked into this module
        // and never written; copying them out is a plain read of initialized memory.
        let (ver, known, access, events, ioc, sizes, offsets) = unsafe {
            (
                vamr_c_abi_version,
                vamr_c_features_known,
                vamr_c_access_known,
                vamr_c_event_count,
                vamr_c_ioc,
                vamr_c_sizes,
                vamr_c_offsets,
            )
        };
        assert_eq!(ver, ABI_VERSION);
        assert_eq!(known, FEATURES_KNOWN);
        assert_eq!(access, ACCESS_KNOWN);
        assert_eq!(events as usize, notifier::Event::COUNT);
        let rust_ioc = [
            IOC_QUERY,
            IOC_REGISTER,
            IOC_UNREGISTER,
            IOC_ACCESS,
            IOC_ATOMIC,
            IOC_PREFETCH,
            IOC_STATS,
            IOC_EVENTS_OPEN,
            IOC_MR_QUERY,
            IOC_DEVICE,
        ];
        assert_eq!(ioc, rust_ioc);
        let rust_sizes = [
            size_of::<Query>(),
            size_of::<Register>(),
            size_of::<HandleArg>(),
            size_of::<Access>(),
            size_of::<Atomic>(),
            size_of::<Prefetch>(),
            size_of::<Stats>(),
            size_of::<Counters>(),
            size_of::<Event>(),
            size_of::<EventsOpen>(),
            size_of::<MrQuery>(),
            size_of::<DeviceInfo>(),
        ];
        for (c, r) in sizes.iter().zip(rust_sizes.iter()) {
            assert_eq!(*c as usize, *r);
        }
        let rust_offsets = [
            offset_of!(Query, features),
            offset_of!(Register, handle),
            offset_of!(Access, handle),
            offset_of!(Atomic, result),
            offset_of!(Stats, counters),
            offset_of!(Counters, bytes_written),
            offset_of!(MrQuery, addr),
            offset_of!(DeviceInfo, name),
        ];
        for (c, r) in offsets.iter().zip(rust_offsets.iter()) {
            assert_eq!(*c as usize, *r);
        }
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
