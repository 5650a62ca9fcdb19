// SPDX-License-Identifier: GPL-2.0

//! Counters of a region, and of the whole module (`VAMR_IOC_STATS`).
//!
//! Each event is counted in the region's [`Counters`], with relaxed atomics (statistics, read
//! without a lock and not used to make decisions), and in the module-wide counters, which are
//! per CPU (`src/vamr_glue.c`): an event adds to its own CPU's counter with no atomic
//! operation and no cache line shared by the whole module; [`global_snapshot`] sums them.

use crate::ffi;
use crate::notifier::Event;
use crate::uapi;
use kernel::sync::atomic::{Atomic, Relaxed};

/// What is counted. Units: pages for the `*Pages`/`*Repins` kinds, bytes for `Bytes*`, events
/// otherwise.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    /// Pages pinned now (goes up and down).
    PagesPinned,
    /// Live regions (goes up and down).
    Regions,
    /// Invalidations that the handler refused because the range was not blockable.
    InvalidationsRefused,
    /// Pins released because the page left the VA (munmap, or the verify pass found another
    /// page or none).
    PagesUnpinned,
    /// Pins the verify pass took for another page present at the VA.
    PinsSwapped,
    /// Pages pinned on demand, by an access that found them absent.
    OnDemandRepins,
    /// Re-pin rounds thrown away because an invalidation raced with them.
    RepinRetries,
    /// Accesses that failed with `EFAULT` (nothing mapped, or the protection forbids it).
    AccessFaults,
    /// Bytes copied out of regions.
    BytesRead,
    /// Bytes copied into regions (including atomics).
    BytesWritten,
    /// Pins the verify pass kept (the same page was still mapped).
    PinsKept,
    /// Faults delivered from a work item for an access that could not wait on a userfault.
    FaultRequests,
}

impl Kind {
    /// Number of kinds.
    const COUNT: usize = Kind::FaultRequests as usize + 1;
}

// `struct vamr_counters` ([`uapi::CountersRecord`]) holds one `u64` per kind and one per
// invalidation kind ([`Counters::snapshot`] fills every field).
const _: () =
    assert!(core::mem::size_of::<uapi::CountersRecord>() == 8 * (Kind::COUNT + Event::COUNT));
// The per-CPU module-wide counters have room for every kind and invalidation kind.
const _: () = assert!(Kind::COUNT + Event::COUNT <= 32);

/// One set of counters.
pub(crate) struct Counters {
    by_kind: [Atomic<u64>; Kind::COUNT],
    invalidations: [Atomic<u64>; Event::COUNT],
}

/// Adds `n` (wrapping: a gauge goes down by its two's complement) to this CPU's module-wide
/// counter `idx` (a kind, or `Kind::COUNT` + an invalidation kind). Any context.
fn global_add(idx: usize, n: u64) {
    // SAFETY: no preconditions; `this_cpu_add` on a per-CPU array, `idx` checked in C.
    unsafe { ffi::vamr_global_add(idx as u32, n) };
}

/// A snapshot of the module-wide counters, summed over the CPUs, of every region of the module,
/// live or gone.
pub(crate) fn global_snapshot() -> uapi::CountersRecord {
    // SAFETY: no preconditions; sums a per-CPU array, `idx` checked in C.
    let sum = |idx: usize| unsafe { ffi::vamr_global_sum(idx as u32) };
    let mut inv = [0u64; Event::COUNT];
    for (i, dst) in inv.iter_mut().enumerate() {
        *dst = sum(Kind::COUNT + i);
    }
    to_uapi(|k| sum(k as usize), inv)
}

/// The UAPI layout of the counters `get` reads and the invalidation counts `inv`.
fn to_uapi(get: impl Fn(Kind) -> u64, inv: [u64; Event::COUNT]) -> uapi::CountersRecord {
    uapi::CountersRecord {
        pages_pinned: get(Kind::PagesPinned),
        regions: get(Kind::Regions),
        invalidations: inv,
        invalidations_refused: get(Kind::InvalidationsRefused),
        pages_unpinned: get(Kind::PagesUnpinned),
        pins_swapped: get(Kind::PinsSwapped),
        ondemand_repins: get(Kind::OnDemandRepins),
        repin_retries: get(Kind::RepinRetries),
        access_faults: get(Kind::AccessFaults),
        bytes_read: get(Kind::BytesRead),
        bytes_written: get(Kind::BytesWritten),
        pins_kept: get(Kind::PinsKept),
        fault_requests: get(Kind::FaultRequests),
    }
}

impl Counters {
    /// All zero.
    pub(crate) const fn new() -> Self {
        Counters {
            by_kind: [const { Atomic::new(0) }; Kind::COUNT],
            invalidations: [const { Atomic::new(0) }; Event::COUNT],
        }
    }

    /// Adds `n` to `kind` here and in the module-wide counters. Any context.
    pub(crate) fn add(&self, kind: Kind, n: u64) {
        self.by_kind[kind as usize].add(n, Relaxed);
        global_add(kind as usize, n);
    }

    /// Adds `n` bytes to `kind` ([`Kind::BytesRead`] or [`Kind::BytesWritten`]) here and in the
    /// module-wide counters. Any context.
    pub(crate) fn add_bytes(&self, kind: Kind, n: u64) {
        self.add(kind, n);
    }

    /// Subtracts `n` from `kind` (a gauge) here and in the module-wide counters. Any context.
    pub(crate) fn sub(&self, kind: Kind, n: u64) {
        self.by_kind[kind as usize].fetch_sub(n, Relaxed);
        global_add(kind as usize, n.wrapping_neg());
    }

    /// Counts one invalidation of kind `event`. Any context.
    pub(crate) fn invalidation(&self, event: Event) {
        self.invalidations[event.index()].add(1, Relaxed);
        global_add(Kind::COUNT + event.index(), 1);
    }

    /// Current value of `kind`.
    pub(crate) fn get(&self, kind: Kind) -> u64 {
        self.by_kind[kind as usize].load(Relaxed)
    }

    /// A snapshot in the UAPI layout.
    pub(crate) fn snapshot(&self) -> uapi::CountersRecord {
        let mut inv = [0u64; Event::COUNT];
        for (dst, src) in inv.iter_mut().zip(self.invalidations.iter()) {
            *dst = src.load(Relaxed);
        }
        to_uapi(|k| self.get(k), inv)
    }
}
