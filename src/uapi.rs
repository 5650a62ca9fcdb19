// SPDX-License-Identifier: GPL-2.0

//! The user-space ABI of `/dev/vamr`, mirrored from `include/uapi/misc/vamr.h`.
//!
//! The C header is the source of truth. The kernel's `bindings` crate does not cover
//! out-of-tree headers, so the layouts are written again here, with the size of every structure
//! and the offset of every field, checked at compile time (see `abi_struct!`); `src/vamr_glue.c`
//! asserts the same numbers against the header. The KUnit suite at the end of this file compares
//! the constants and ioctl numbers (which encode the sizes) with what the C compiler derived
//! from the header, published by `src/vamr_glue.c`.
//!
//! The Rust names are the C ones in CamelCase, with `Arg` for an ioctl argument and `Record`
//! for a record the kernel writes where the plain name would read as another type (`AtomicArg`
//! beside `kernel::sync::atomic::Atomic`, `EventRecord` beside `notifier::Event`).

use crate::notifier;
use kernel::ioctl::{_IOW, _IOWR};
use kernel::prelude::*;
use kernel::transmute::{AsBytes, FromBytes};

/// ABI version reported by `VAMR_IOC_QUERY`; bumped on an incompatible change.
pub(crate) const ABI_VERSION: u32 = 4;

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
/// `VAMR_FEATURE_WATCH`: monitor mode (WATCH, UNWATCH, WATCH_SYNC, the counter mapping).
pub(crate) const FEATURE_WATCH: u64 = 1 << 6;
/// `VAMR_FEATURE_EVENTS_RING`: `VAMR_IOC_EVENTS_OPEN_EX`.
pub(crate) const FEATURE_EVENTS_RING: u64 = 1 << 7;
/// Every feature bit this version of the ABI defines (`VAMR_FEATURES_KNOWN`).
pub(crate) const FEATURES_KNOWN: u64 = FEATURE_REGIONS
    | FEATURE_ATOMICS
    | FEATURE_PREFETCH
    | FEATURE_EVENTS
    | FEATURE_MR_QUERY
    | FEATURE_DEVICES
    | FEATURE_WATCH
    | FEATURE_EVENTS_RING;

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
/// `VAMR_EVENT_WATCH`: the bit of `struct vamr_event.kind` that marks a watch's record.
pub(crate) const EVENT_WATCH: u32 = 0x1_0000;
/// `VAMR_EVENTS_RING_DEFAULT`: records of a new events ring.
pub(crate) const EVENTS_RING_DEFAULT: usize = 512;
/// `VAMR_EVENTS_RING_MAX`: the largest events ring, in records.
pub(crate) const EVENTS_RING_MAX: usize = 65536;
/// `VAMR_WATCH_MAX`: most watches on one file.
pub(crate) const WATCH_MAX: usize = 4096;
/// `VAMR_WATCH_MAP_LEN`: bytes of the generation counters (one `u64` per slot).
pub(crate) const WATCH_MAP_LEN: usize = WATCH_MAX * 8;
/// `VAMR_EVENTS_NONBLOCK`.
pub(crate) const EVENTS_NONBLOCK: u32 = 1 << 0;
/// `VAMR_EVENTS_CLOEXEC`.
pub(crate) const EVENTS_CLOEXEC: u32 = 1 << 1;

/// `VAMR_STATS_GLOBAL`.
pub(crate) const STATS_GLOBAL: u32 = 0xffff_ffff;

/// Declares `repr(C)` plain-old-data ABI structures with their byte-transmute impls, and checks
/// at compile time that each has the size `= N` and every field the offset `@ N` (`field @ N: type`) that
/// `include/uapi/misc/vamr.h` gives it (`src/vamr_glue.c` asserts the same numbers against the
/// header with `static_assert`, so a drift on either side fails the build).
macro_rules! abi_struct {
    ($($(#[$m:meta])* $name:ident = $size:literal {
        $($(#[$fm:meta])* $f:ident @ $off:literal : $t:ty),* $(,)?
    })*) => {$(
        $(#[$m])*
        ///
        /// # Invariants
        ///
        /// `repr(C)` with only integer fields (or arrays and structs of them) laid out
        /// without padding, as the compile-time checks below and in `src/vamr_glue.c` ensure.
        #[repr(C)]
        #[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
        pub(crate) struct $name { $($(#[$fm])* pub(crate) $f: $t),* }

        const _: () = assert!(core::mem::size_of::<$name>() == $size);
        $(const _: () = assert!(core::mem::offset_of!($name, $f) == $off);)*

        // SAFETY: integer fields only and no padding (type invariant): every bit pattern is
        // valid, and there is no interior mutability.
        unsafe impl FromBytes for $name {}
        // SAFETY: integer fields only and no padding (type invariant): all bytes are initialized.
        unsafe impl AsBytes for $name {}
    )*};
}

// The offsets of `struct vamr_counters` below count `VAMR_EVENT_COUNT` (8) invalidation kinds.
const _: () = assert!(notifier::Event::COUNT == 8);

abi_struct! {
    /// `struct vamr_query`.
    Query = 24 {
        abi_version @ 0: u32,
        flags @ 4: u32,
        features @ 8: u64,
        page_size @ 16: u32,
        reserved @ 20: u32,
    }
    /// `struct vamr_register`.
    Register = 40 {
        addr @ 0: u64,
        len @ 8: u64,
        cookie @ 16: u64,
        access @ 24: u32,
        flags @ 28: u32,
        handle @ 32: u32,
        reserved @ 36: u32,
    }
    /// `struct vamr_handle_arg`.
    HandleArg = 8 { handle @ 0: u32, flags @ 4: u32 }
    /// `struct vamr_access`.
    AccessArg = 32 { addr @ 0: u64, len @ 8: u64, buf @ 16: u64, handle @ 24: u32, op @ 28: u32 }
    /// `struct vamr_atomic`.
    AtomicArg = 40 {
        addr @ 0: u64,
        compare @ 8: u64,
        swap @ 16: u64,
        result @ 24: u64,
        handle @ 32: u32,
        op @ 36: u32,
    }
    /// `struct vamr_prefetch`.
    PrefetchArg = 32 {
        addr @ 0: u64,
        len @ 8: u64,
        handle @ 16: u32,
        flags @ 20: u32,
        pages @ 24: u32,
        reserved @ 28: u32,
    }
    /// `struct vamr_counters`.
    CountersRecord = 160 {
        pages_pinned @ 0: u64,
        regions @ 8: u64,
        invalidations @ 16: [u64; notifier::Event::COUNT],
        invalidations_refused @ 80: u64,
        pages_unpinned @ 88: u64,
        pins_swapped @ 96: u64,
        ondemand_repins @ 104: u64,
        repin_retries @ 112: u64,
        access_faults @ 120: u64,
        bytes_read @ 128: u64,
        bytes_written @ 136: u64,
        pins_kept @ 144: u64,
        fault_requests @ 152: u64,
    }
    /// `struct vamr_stats`.
    Stats = 176 {
        handle @ 0: u32,
        flags @ 4: u32,
        generation @ 8: u64,
        counters @ 16: CountersRecord,
    }
    /// `struct vamr_event`.
    EventRecord = 40 {
        addr @ 0: u64,
        len @ 8: u64,
        cookie @ 16: u64,
        generation @ 24: u64,
        handle @ 32: u32,
        kind @ 36: u32,
    }
    /// `struct vamr_events_open`.
    EventsOpen = 8 { flags @ 0: u32, fd @ 4: i32 }
    /// `struct vamr_events_open_ex`.
    EventsOpenEx = 16 { flags @ 0: u32, fd @ 4: i32, ring @ 8: u32, reserved @ 12: u32 }
    /// `struct vamr_watch`.
    WatchArg = 40 {
        addr @ 0: u64,
        len @ 8: u64,
        cookie @ 16: u64,
        flags @ 24: u32,
        slot @ 28: u32,
        generation @ 32: u64,
    }
    /// `struct vamr_watch_sync`.
    WatchSync = 16 { slot @ 0: u32, flags @ 4: u32, generation @ 8: u64 }
    /// `struct vamr_mr_query`.
    MrQuery = 192 {
        key @ 0: u32,
        flags @ 4: u32,
        ib_index @ 8: u32,
        reserved @ 12: u32,
        addr @ 16: u64,
        len @ 24: u64,
        counters @ 32: CountersRecord,
    }
    /// `struct vamr_device_info` (`name` as two halves: `Default` exists for arrays of at
    /// most 32 elements).
    DeviceInfo = 88 {
        pos @ 0: u32,
        flags @ 4: u32,
        ib_index @ 8: u32,
        reserved @ 12: u32,
        access_va @ 16: u64,
        name @ 24: [[u8; DEVICE_NAME_MAX / 2]; 2],
    }
}

/// `VAMR_IOC_QUERY`.
pub(crate) const IOC_QUERY: u32 = _IOWR::<Query>(IOCTL_TYPE, 0x00);
/// `VAMR_IOC_REGISTER`.
pub(crate) const IOC_REGISTER: u32 = _IOWR::<Register>(IOCTL_TYPE, 0x01);
/// `VAMR_IOC_UNREGISTER`.
pub(crate) const IOC_UNREGISTER: u32 = _IOW::<HandleArg>(IOCTL_TYPE, 0x02);
/// `VAMR_IOC_ACCESS`.
pub(crate) const IOC_ACCESS: u32 = _IOW::<AccessArg>(IOCTL_TYPE, 0x03);
/// `VAMR_IOC_ATOMIC`.
pub(crate) const IOC_ATOMIC: u32 = _IOWR::<AtomicArg>(IOCTL_TYPE, 0x04);
/// `VAMR_IOC_PREFETCH`.
pub(crate) const IOC_PREFETCH: u32 = _IOWR::<PrefetchArg>(IOCTL_TYPE, 0x05);
/// `VAMR_IOC_STATS`.
pub(crate) const IOC_STATS: u32 = _IOWR::<Stats>(IOCTL_TYPE, 0x06);
/// `VAMR_IOC_EVENTS_OPEN`.
pub(crate) const IOC_EVENTS_OPEN: u32 = _IOWR::<EventsOpen>(IOCTL_TYPE, 0x07);
/// `VAMR_IOC_MR_QUERY`.
pub(crate) const IOC_MR_QUERY: u32 = _IOWR::<MrQuery>(IOCTL_TYPE, 0x08);
/// `VAMR_IOC_DEVICE`.
pub(crate) const IOC_DEVICE: u32 = _IOWR::<DeviceInfo>(IOCTL_TYPE, 0x09);
/// `VAMR_IOC_EVENTS_OPEN_EX` (the number of `VAMR_IOC_EVENTS_OPEN`, with a larger argument).
pub(crate) const IOC_EVENTS_OPEN_EX: u32 = _IOWR::<EventsOpenEx>(IOCTL_TYPE, 0x07);
/// `VAMR_IOC_WATCH`.
pub(crate) const IOC_WATCH: u32 = _IOWR::<WatchArg>(IOCTL_TYPE, 0x0a);
/// `VAMR_IOC_UNWATCH`.
pub(crate) const IOC_UNWATCH: u32 = _IOW::<HandleArg>(IOCTL_TYPE, 0x0b);
/// `VAMR_IOC_WATCH_SYNC`.
pub(crate) const IOC_WATCH_SYNC: u32 = _IOWR::<WatchSync>(IOCTL_TYPE, 0x0c);

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
    use crate::ffi;

    #[test]
    fn rust_abi_matches_c_header() {
        // SAFETY: these are `const` objects defined in `src/vamr_glue.c`, linked into this module
        // and never written; copying them out is a plain read of initialized memory.
        let (ver, known, access, events, ioc) = unsafe {
            (
                ffi::vamr_c_abi_version,
                ffi::vamr_c_features_known,
                ffi::vamr_c_access_known,
                ffi::vamr_c_event_count,
                ffi::vamr_c_ioc,
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
            IOC_EVENTS_OPEN_EX,
            IOC_WATCH,
            IOC_UNWATCH,
            IOC_WATCH_SYNC,
        ];
        // The ioctl numbers encode the sizes: this also compares every structure's size as each
        // compiler sees it (the offsets are checked at build time, see `abi_struct!`).
        assert_eq!(ioc, rust_ioc);
        // SAFETY: as above.
        let watch = unsafe { ffi::vamr_c_watch_consts };
        let rust_watch = [
            EVENT_WATCH,
            EVENTS_RING_DEFAULT as u32,
            EVENTS_RING_MAX as u32,
            WATCH_MAX as u32,
            WATCH_MAP_LEN as u32,
        ];
        assert_eq!(watch, rust_watch);
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
