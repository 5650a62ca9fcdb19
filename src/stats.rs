// SPDX-License-Identifier: GPL-2.0

//! Counters of a region, and of the whole module (`VAMR_IOC_STATS`).
//!
//! Each event is counted in the region's [`Counters`] and in [`GLOBAL`], with relaxed atomics:
//! they are statistics, read without a lock and not used to make decisions. The byte counters
//! of the data path ([`Counters::add_bytes`]) are global per CPU instead, so that an access
//! dirties no cache line shared by the whole module; [`global_snapshot`] sums them.

use crate::notifier::Event;
use crate::uapi;
use kernel::sync::atomic::{Atomic, Relaxed};

// Declarations: src/vamr_glue.h.
extern "C" {
    fn vamr_global_bytes_add(idx: u32, n: u64);
    fn vamr_global_bytes_sum(idx: u32) -> u64;
}

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

// `struct vamr_counters` ([`uapi::Counters`]) holds one `u64` per kind and one per invalidation
// kind ([`Counters::snapshot`] fills every field).
const _: () = assert!(core::mem::size_of::<uapi::Counters>() == 8 * (Kind::COUNT + Event::COUNT));

/// One set of counters.
pub(crate) struct Counters {
    by_kind: [Atomic<u64>; Kind::COUNT],
    invalidations: [Atomic<u64>; Event::COUNT],
}

/// Counters over every region of the module, live or gone (but the byte counters: see
/// [`global_snapshot`]).
pub(crate) static GLOBAL: Counters = Counters::new();

/// A snapshot of the module-wide counters: [`GLOBAL`], with the per-CPU byte counters summed.
pub(crate) fn global_snapshot() -> uapi::Counters {
    let mut c = GLOBAL.snapshot();
    // SAFETY: no preconditions; sums a per-CPU array indexed 0 or 1.
    c.bytes_read = unsafe { vamr_global_bytes_sum(0) };
    // SAFETY: as above.
    c.bytes_written = unsafe { vamr_global_bytes_sum(1) };
    c
}

impl Counters {
    /// All zero.
    pub(crate) const fn new() -> Self {
        Counters {
            by_kind: [const { Atomic::new(0) }; Kind::COUNT],
            invalidations: [const { Atomic::new(0) }; Event::COUNT],
        }
    }

    /// Adds `n` to `kind` here and in [`GLOBAL`]. Any context.
    pub(crate) fn add(&self, kind: Kind, n: u64) {
        self.by_kind[kind as usize].add(n, Relaxed);
        GLOBAL.by_kind[kind as usize].add(n, Relaxed);
    }

    /// Adds `n` bytes to `kind` ([`Kind::BytesRead`] or [`Kind::BytesWritten`]) here and to this
    /// CPU's global byte counter (see the module documentation). Any context.
    pub(crate) fn add_bytes(&self, kind: Kind, n: u64) {
        self.by_kind[kind as usize].add(n, Relaxed);
        let idx = u32::from(matches!(kind, Kind::BytesWritten));
        // SAFETY: no preconditions; `this_cpu_add` on a per-CPU array indexed 0 or 1.
        unsafe { vamr_global_bytes_add(idx, n) };
    }

    /// Subtracts `n` from `kind` (a gauge) here and in [`GLOBAL`]. Any context.
    pub(crate) fn sub(&self, kind: Kind, n: u64) {
        self.by_kind[kind as usize].fetch_sub(n, Relaxed);
        GLOBAL.by_kind[kind as usize].fetch_sub(n, Relaxed);
    }

    /// Counts one invalidation of kind `event`. Any context.
    pub(crate) fn invalidation(&self, event: Event) {
        self.invalidations[event.index()].add(1, Relaxed);
        GLOBAL.invalidations[event.index()].add(1, Relaxed);
    }

    /// Current value of `kind`.
    pub(crate) fn get(&self, kind: Kind) -> u64 {
        self.by_kind[kind as usize].load(Relaxed)
    }

    /// A snapshot in the UAPI layout.
    pub(crate) fn snapshot(&self) -> uapi::Counters {
        let k = |kind: Kind| self.get(kind);
        let mut inv = [0u64; Event::COUNT];
        for (dst, src) in inv.iter_mut().zip(self.invalidations.iter()) {
            *dst = src.load(Relaxed);
        }
        uapi::Counters {
            pages_pinned: k(Kind::PagesPinned),
            regions: k(Kind::Regions),
            invalidations: inv,
            invalidations_refused: k(Kind::InvalidationsRefused),
            pages_unpinned: k(Kind::PagesUnpinned),
            pins_swapped: k(Kind::PinsSwapped),
            ondemand_repins: k(Kind::OnDemandRepins),
            repin_retries: k(Kind::RepinRetries),
            access_faults: k(Kind::AccessFaults),
            bytes_read: k(Kind::BytesRead),
            bytes_written: k(Kind::BytesWritten),
            pins_kept: k(Kind::PinsKept),
            fault_requests: k(Kind::FaultRequests),
        }
    }
}
