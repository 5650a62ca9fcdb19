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
use kernel::prelude::*;
use kernel::sync::atomic::{Atomic, Relaxed};
use kernel::time::{Instant, Monotonic};
use kernel::uaccess::UserSliceReader;

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

/// Module-wide counters that `struct vamr_counters` does not carry: the cost of pinning, per
/// page, on the data path's slow path (an access that pins on demand,
/// `Region::pin_for_access`) and at registration (`Registration::insert_and_fill`), for the
/// benchmark, which compares the two. Kept in the same per-CPU array, after the kinds and the
/// invalidation kinds; read in debugfs (`vamr/access_pins`, [`debugfs_access_pins`]).
///
/// Two clocks: wall time (`ktime_get()`), which also counts the time the task waited for a
/// CPU, and the task's own CPU time ([`task_cpu_ns`]), which is the cost; read only while
/// debugfs `vamr/pin_clocks` is 1 ([`RoundClock`]), so the time counters cover the rounds that
/// ran while it was.
#[derive(Clone, Copy)]
pub(crate) enum Extra {
    /// Nanoseconds of wall time spent in on-demand pin rounds of accesses, from the decision
    /// to pin to the round's end (window, GUP, commit).
    AccessPinNs,
    /// Pages those rounds pinned (committed).
    AccessPinPages,
    /// Nanoseconds of CPU time of the tasks running those rounds, in them.
    AccessPinCpuNs,
    /// Nanoseconds of wall time spent in registrations' pin rounds (GUP and commit).
    RegPinNs,
    /// Pages those rounds pinned.
    RegPinPages,
    /// Nanoseconds of CPU time of the registering tasks, in those rounds.
    RegPinCpuNs,
    /// On-demand slow paths of accesses counted in the three `AccessPin*` counters, each of
    /// one or more pin rounds (up to `ROUND_MAX` pages; the pages per slow path tell its fixed
    /// cost from its cost per page).
    AccessPinRounds,
}

/// Whether pin rounds read the clocks behind the time counters of [`Extra`] (0 or 1): debugfs
/// `vamr/pin_clocks`, 0 at load. The clocks cost a pin round four reads (`ktime_get()` and
/// [`task_cpu_ns`], at its start and end), about 4 µs of a 4 KiB registration under TCG: a
/// benchmark turns them on around what it measures, nobody else pays for them. The page and
/// round counts are kept either way.
static PIN_CLOCKS: Atomic<u32> = Atomic::new(0);

/// The clocks of one pin round, for the time counters of [`Extra`]: read at the round's start
/// by [`RoundClock::start`] when debugfs `vamr/pin_clocks` is 1, else not at all.
pub(crate) struct RoundClock(Option<(Instant<Monotonic>, u64)>);

impl RoundClock {
    /// Starts the clocks of a round (when they are on). Any context, does not sleep.
    pub(crate) fn start() -> Self {
        if PIN_CLOCKS.load(Relaxed) == 0 {
            return RoundClock(None);
        }
        RoundClock(Some((Instant::now(), task_cpu_ns())))
    }

    /// Adds the wall time since [`RoundClock::start`] to `ns` and the task's CPU time since
    /// then to `cpu_ns` (when the clocks were on at the start). Any context, does not sleep.
    pub(crate) fn add_to(&self, ns: Extra, cpu_ns: Extra) {
        if let Some((t0, c0)) = self.0 {
            extra_add(ns, t0.elapsed().as_nanos().max(0) as u64);
            extra_add(cpu_ns, task_cpu_ns().wrapping_sub(c0));
        }
    }
}

/// debugfs `vamr/pin_clocks`, read: `0` or `1`.
pub(crate) fn debugfs_pin_clocks_show(
    _: &(),
    f: &mut kernel::fmt::Formatter<'_>,
) -> kernel::fmt::Result {
    writeln!(f, "{}", PIN_CLOCKS.load(Relaxed))
}

/// debugfs `vamr/pin_clocks`, written: `0` (off) or `1` (on), optionally followed by a newline.
/// Errors: `EINVAL` for anything else (or more than 8 bytes), `EFAULT` from the copy. Process
/// context (the user copy may fault).
pub(crate) fn debugfs_pin_clocks_store(_: &(), r: &mut UserSliceReader) -> Result {
    let mut buf = [0u8; 8];
    let n = r.len();
    if n == 0 || n > buf.len() {
        return Err(EINVAL);
    }
    r.read_slice(&mut buf[..n])?;
    let on = match &buf[..n] {
        b"0" | b"0\n" => 0,
        b"1" | b"1\n" => 1,
        _ => return Err(EINVAL),
    };
    PIN_CLOCKS.store(on, Relaxed);
    Ok(())
}

/// Where the [`Extra`] counters start in the per-CPU array.
const EXTRA_BASE: usize = Kind::COUNT + Event::COUNT;
const _: () = assert!(EXTRA_BASE + (Extra::AccessPinRounds as usize) < 32);

/// Adds `n` to the module-wide counter `e`. Any context.
pub(crate) fn extra_add(e: Extra, n: u64) {
    global_add(EXTRA_BASE + e as usize, n);
}

/// The module-wide counter `e`, summed over the CPUs.
fn extra_sum(e: Extra) -> u64 {
    // SAFETY: no preconditions; sums a per-CPU array, `idx` checked in C.
    unsafe { ffi::vamr_global_sum((EXTRA_BASE + e as usize) as u32) }
}

/// CPU time of the current task so far, in nanoseconds (what the scheduler's
/// `task_sched_runtime()` computes for a running task; see `vamr_task_cpu_ns()` in
/// `src/vamr_glue.c`). Only differences between two reads by the same task mean something.
/// Any context, does not sleep.
pub(crate) fn task_cpu_ns() -> u64 {
    // SAFETY: no preconditions; reads current's scheduler clock with IRQs disabled.
    unsafe { ffi::vamr_task_cpu_ns() }
}

/// The text of debugfs `vamr/access_pins`, the [`Extra`] counters since the module was loaded
/// (a reader takes differences): `pages`, `ns` (wall) and `cpu_ns` of the on-demand pin rounds
/// of accesses, then `reg_pages`, `reg_ns` and `reg_cpu_ns` of registrations' pin rounds, then
/// `rounds`, the number of on-demand rounds of accesses counted in the first three.
pub(crate) fn debugfs_access_pins(
    _: &(),
    f: &mut kernel::fmt::Formatter<'_>,
) -> kernel::fmt::Result {
    writeln!(f, "pages {}", extra_sum(Extra::AccessPinPages))?;
    writeln!(f, "ns {}", extra_sum(Extra::AccessPinNs))?;
    writeln!(f, "cpu_ns {}", extra_sum(Extra::AccessPinCpuNs))?;
    writeln!(f, "reg_pages {}", extra_sum(Extra::RegPinPages))?;
    writeln!(f, "reg_ns {}", extra_sum(Extra::RegPinNs))?;
    writeln!(f, "reg_cpu_ns {}", extra_sum(Extra::RegPinCpuNs))?;
    writeln!(f, "rounds {}", extra_sum(Extra::AccessPinRounds))
}

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
