// SPDX-License-Identifier: GPL-2.0

//! Pin rounds of a region: pinning what an access, a prefetch, registration or the verify pass
//! needs, batch by batch, following the pin-round protocol of `inval_log.rs` (see
//! `Documentation/vamr.rst`, "Pinning").

use super::inval_log::{Round, REPIN_ATTEMPTS};
use super::table::{PagePin, TABLE_CHUNK};
use super::{Region, RegionError, RegionInner, RegionResult};
use crate::pin::{pin_user_range, resume_after_fault, PinMode, PinnedPage, Pins, PIN_BATCH};
use crate::stats::Kind;
use crate::uapi;
use kernel::mm::MmWithUser;
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;
use kernel::sync::atomic::{Acquire, Relaxed};

/// How many times a pin round whose long-term pin failed with `ENOMEM` is tried in all (the
/// first try included) before the error is returned. A long-term pin of a page in
/// ZONE_MOVABLE (or CMA) migrates the page first (`migrate_longterm_unpinnable_folios()`,
/// mm/gup.c), and that migration fails (`ENOMEM`) while another task holds a reference on the
/// page: in particular while another pin round has pinned the same page at the same moment
/// (GUP pins before it migrates, and keeps the folio isolated while it drains the LRU caches,
/// which sleeps), and two such rounds can keep failing each other's migrations. Within a
/// region an access and the verify pass, or two accesses, would do that to each other over the
/// same fresh pages (an access error, hence a QP error), so the region's pin rounds never pin
/// the same pages at once ([`PinTurn`]). What is left for these tries: registration's round (which
/// claims nothing) against the verify pass, other regions' rounds and other pinners (normal MRs over the same pages fail as
/// often among themselves: see `rdma_movable`'s controls). A page held for longer (a pipe
/// buffer after `vmsplice`) fails every try: each takes `migrate_pages()`' own retries
/// (10-50 ms under TCG for one page).
pub(super) const MIGRATE_ATTEMPTS: u32 = 4;

/// Why pages are being pinned (for the counters).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum PinCause {
    Register,
    /// The verify pass found another page mapped in place of a suspect pin's.
    Verify,
    /// A prefetch: pages that cannot be pinned are skipped.
    OnDemand,
    /// An access: pins from its current page to the end of the access (page index `until`
    /// excluded), faulting pages in up to index `fault_until` (the access and its
    /// [`AHEAD_PAGES`](super::io::AHEAD_PAGES)), and after that the pages already present,
    /// up to the call's end (`first + count`, at most `ROUND_MAX` pages); stops at the first
    /// page that cannot be pinned (the access fails there if it is its first page; at a later
    /// page of its own, in its next slow path). Pinning ahead never faults a
    /// userfaultfd-registered VMA (see [`pin_user_range`]).
    /// With `known_gap`, every slot of the round needs a pin as the caller last looked, so
    /// the first batch is not looked for again ([`Region::next_gap`]); a slot pinned meanwhile
    /// keeps its pin (see [`Region::commit`]).
    Access {
        until: usize,
        fault_until: usize,
        known_gap: bool,
    },
}

/// The policy of a [`Region::fill`] for its cause, computed from the cause alone: which
/// batches are known, what each batch must and may fault, which claims it waits for, where a
/// failure ends the call.
impl PinCause {
    /// Whether the batch from `idx` needs no look for its gap (registration's, and an access's
    /// first batch with `known_gap`).
    fn known_gap(self, idx: usize, first: usize) -> bool {
        match self {
            PinCause::Register => true,
            PinCause::Access { known_gap, .. } => known_gap && idx == first,
            _ => false,
        }
    }

    /// `(must, fault)` of the batch `[idx, gap_end)`: the pages that must be pinned (none past
    /// an access's own pages, so that its window raises no userfault) and those that may be
    /// faulted in (none past its window: present pages only).
    fn needs(self, idx: usize, gap_end: usize) -> (usize, usize) {
        match self {
            PinCause::Access {
                until, fault_until, ..
            } => {
                let must = until.saturating_sub(idx);
                (must, fault_until.saturating_sub(idx).max(must))
            }
            _ => (gap_end - idx, gap_end - idx),
        }
    }

    /// Whether page `idx` lies past an access's own pages (its window: an optimisation, so a
    /// failure there ends the call instead of failing it, and a claim there is not waited for).
    fn optional(self, idx: usize) -> bool {
        matches!(self, PinCause::Access { until, .. } if idx >= until)
    }

    /// Whether a batch that stopped short (at a page not present, or cut at the window's end)
    /// with page `idx` next ends the call: past an access's fault window, it does.
    fn ends_when_short(self, idx: usize) -> bool {
        matches!(self, PinCause::Access { fault_until, .. } if idx >= fault_until)
    }
}

/// How [`Region::fill`] goes on after a batch.
enum Next {
    /// With the next gap from `FillState::idx`.
    Gap,
    /// The call ends (what was committed stays).
    Stop,
}

/// The progress of one [`Region::fill`].
struct FillState {
    /// The end of the call's range (an access that lost races shrinks it to its own pages).
    end: usize,
    /// The next page to look at.
    idx: usize,
    /// Pages committed so far.
    committed: usize,
    /// A page failed with `EFAULT` and was skipped.
    faulted: bool,
}

/// What a prefetch asks for (`VAMR_PREFETCH_*`, the advice of `ibv_advise_mr()`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Prefetch {
    /// Pin for writing (`..._PREFETCH_WRITE`); otherwise for reading.
    pub(crate) write: bool,
    /// Pin only pages present in the page table, never fault (`..._PREFETCH_NO_FAULT`).
    pub(crate) nofault: bool,
}

impl Prefetch {
    /// Decodes `VAMR_PREFETCH_*` flags. Errors: `EINVAL` for unknown bits, or WRITE together
    /// with NO_FAULT (a no-fault prefetch pins for reading only, as ODP's snapshot does).
    pub(crate) fn from_flags(flags: u32) -> Result<Self> {
        if flags & !uapi::PREFETCH_KNOWN != 0 || flags == uapi::PREFETCH_KNOWN {
            return Err(EINVAL);
        }
        Ok(Prefetch {
            write: flags & uapi::PREFETCH_WRITE != 0,
            nofault: flags & uapi::PREFETCH_NO_FAULT != 0,
        })
    }
}

impl Region {
    /// The next run `[i, j)` within `[idx, end)` of slots that a pin round in `mode` must fill
    /// (absent, suspect, or a read pin where `mode` writes), or `None` when there is none.
    /// Errors: `Dead` when the region is dead.
    pub(super) fn next_gap(
        &self,
        idx: usize,
        end: usize,
        mode: PinMode,
    ) -> RegionResult<Option<(usize, usize)>> {
        let inner = self.inner.lock();
        if inner.dead {
            return Err(RegionError::Dead);
        }
        let needs = |p: &Option<PagePin>| match p {
            None => true,
            Some(pin) => !pin.usable(mode.write),
        };
        // At most `TABLE_CHUNK` slots per hold of the table lock; the run found is cut at
        // `PIN_BATCH` pages, the most one pin round takes.
        let mut from = idx;
        while from < end {
            let to = end.min(from + TABLE_CHUNK);
            let table = self.table.read();
            if let Some(i) = table[from..to].iter().position(needs) {
                let i = from + i;
                let cut = end.min(i + PIN_BATCH);
                let n = table[i..cut].iter().take_while(|p| needs(p)).count();
                return Ok(Some((i, i + n)));
            }
            drop(table);
            from = to;
        }
        Ok(None)
    }

    /// Pins the pages of `[first, first + count)` that `mode` needs (absent ones, and read pins
    /// when `mode` writes), batch by batch, following the `mmu_interval_read_begin()` /
    /// `mmu_interval_read_retry()` protocol: pin without the lock, commit a batch under the
    /// lock only if no invalidation of its pages began since its `read_begin` (see
    /// [`Region::round_stale`]), else drop it and pin it again
    /// ([`REPIN_ATTEMPTS`] times, then leave it absent). A round whose pin fails with `ENOMEM`
    /// (a failed migration out of a movable zone) is tried again, [`MIGRATE_ATTEMPTS`] times in
    /// all. Pages that cannot be pinned are skipped: holes and VMAs that refuse the access a
    /// VMA at a time, other pages one by one (see [`resume_after_fault`]).
    ///
    /// Bounded: each round pins at most `PIN_BATCH` pages, and between rounds the call stops
    /// with `ECANCELED` once the region is cancelled and with `EINTR` on a fatal signal.
    ///
    /// Returns the number of pages committed. Errors: `EFAULT` when nothing was committed and
    /// a page failed with it, or the region is dead; `ECANCELED`, `EINTR`, `ENOMEM` and other
    /// GUP errors. Sleeps; the region lock must not be held.
    pub(super) fn fill(
        &self,
        mm: &MmWithUser,
        first: usize,
        count: usize,
        cause: PinCause,
        mode: PinMode,
    ) -> RegionResult<usize> {
        // Registration's round runs before the registration is handed out, so nothing can
        // tear the region down meanwhile (teardown is the registration's `Drop`), and it is the
        // only one to fill the slots from `idx` on (no access or prefetch can reach the
        // region yet; the verify pass refills only slots this round committed): it needs
        // neither the count of rounds that teardown waits for nor a look for the next gap.
        let register = cause == PinCause::Register;
        let _active = if register {
            None
        } else {
            Some(FillGuard::enter(self)?)
        };
        let mut st = FillState {
            end: first + count,
            idx: first,
            committed: 0,
            faulted: false,
        };
        while st.idx < st.end {
            self.check_interrupted()?;
            let next = if cause.known_gap(st.idx, first) {
                Some((st.idx, st.end.min(st.idx + PIN_BATCH)))
            } else {
                self.next_gap(st.idx, st.end, mode)?
            };
            let Some((gap, gap_end)) = next else {
                break;
            };
            st.idx = gap;
            // The region's rounds never pin the same pages at once (see `PinTurn`): the batch
            // is cut where another round's claim starts, and waits only when its first page
            // is claimed; an access's window past its own pages does not wait at all (it ends
            // there). Registration's round claims nothing (a verify pass meanwhile pins only
            // slots it already committed).
            let (_turn, gap_end) = if register {
                (None, gap_end)
            } else {
                match PinTurn::take(self, gap, gap_end, !cause.optional(gap))? {
                    Some((turn, cut)) => (Some(turn), cut),
                    None => break,
                }
            };
            match self.fill_batch(mm, &mut st, first, gap_end, cause, mode)? {
                Next::Gap => {}
                Next::Stop => break,
            }
        }
        self.fill_counted(first, count, &st, cause, mode)
    }

    /// Pins and commits the batch `[st.idx, gap_end)` of a [`Region::fill`], trying again
    /// after a lost race ([`REPIN_ATTEMPTS`] in all, then the page is left absent) and after
    /// a failed migration ([`MIGRATE_ATTEMPTS`]); moves `st` on. Errors: as `fill`.
    fn fill_batch(
        &self,
        mm: &MmWithUser,
        st: &mut FillState,
        first: usize,
        mut gap_end: usize,
        cause: PinCause,
        mode: PinMode,
    ) -> RegionResult<Next> {
        let mut failed_migrations = 0;
        for attempt in 0..REPIN_ATTEMPTS {
            let round = self.round_begin();
            let va = self.start + st.idx * PAGE_SIZE;
            let (must, fault) = cause.needs(st.idx, gap_end);
            let pinned = pin_user_range(mm, va, gap_end - st.idx, must, fault, mode);
            let pins = match pinned.map_err(RegionError::from_pin) {
                Ok(pins) => pins,
                Err(RegionError::NoPage) => return self.fill_skip(mm, st, first, va, cause, mode),
                // A failed migration out of a movable zone is tried again: see
                // `MIGRATE_ATTEMPTS`. Counted as a lost race.
                Err(RegionError::Errno(e))
                    if e == ENOMEM
                        && !cause.optional(st.idx)
                        && failed_migrations + 1 < MIGRATE_ATTEMPTS =>
                {
                    failed_migrations += 1;
                    self.stats.add(Kind::RepinRetries, 1);
                    self.check_interrupted()?;
                    continue;
                }
                // Past the access's own pages the rest is an optimisation: what fails there
                // (`ENOMEM`, `EINTR`...) ends the slow path, not the access.
                Err(_) if cause.optional(st.idx) => return Ok(Next::Stop),
                Err(e) => return Err(e),
            };
            let n = pins.len();
            if let Some(c) = self.commit(st.idx, pins, round)? {
                st.committed += c;
                st.idx += n;
                return Ok(if st.idx < gap_end && cause.ends_when_short(st.idx) {
                    Next::Stop
                } else {
                    Next::Gap
                });
            }
            self.stats.add(Kind::RepinRetries, 1);
            self.check_interrupted()?;
            // A batch's first lost race is retried as it was: a long-term pin of pages in
            // ZONE_MOVABLE (or CMA) migrates them before it pins, and the migration invalidates
            // the round's own pages, so such a round always loses once; the retry pins the
            // migrated pages. After that, an access that lost a race pins only its own pages:
            // retrying its window would hold `mmap_lock` longer against the invalidations that
            // keep winning.
            if let (PinCause::Access { until, .. }, 1..) = (cause, attempt) {
                if st.idx >= until {
                    return Ok(Next::Stop);
                }
                st.end = st.end.min(until);
                gap_end = gap_end.min(st.end);
            }
        }
        // Invalidations kept winning: leave this page absent (pinned on demand later).
        st.idx += 1;
        Ok(Next::Gap)
    }

    /// After page `st.idx` (at `va`) failed with `EFAULT`: an access fails there if nothing
    /// was pinned before it (and stops otherwise); any other cause skips the page, the hole
    /// after it up to the next VMA, or the whole VMA when its protection refuses the access.
    fn fill_skip(
        &self,
        mm: &MmWithUser,
        st: &mut FillState,
        first: usize,
        va: usize,
        cause: PinCause,
        mode: PinMode,
    ) -> RegionResult<Next> {
        if matches!(cause, PinCause::Access { .. }) {
            if st.committed == 0 && st.idx == first {
                self.stats.add(Kind::AccessFaults, 1);
                return Err(RegionError::NoPage);
            }
            return Ok(Next::Stop);
        }
        st.faulted = true;
        let resume = resume_after_fault(mm, va, mode.write);
        let next = resume.saturating_sub(self.start).div_ceil(PAGE_SIZE);
        st.idx = next.clamp(st.idx + 1, st.end);
        Ok(Next::Gap)
    }

    /// The end of a [`Region::fill`]: counts what it committed and returns it, or `EFAULT`
    /// when nothing was and a page failed with it.
    fn fill_counted(
        &self,
        first: usize,
        count: usize,
        st: &FillState,
        cause: PinCause,
        mode: PinMode,
    ) -> RegionResult<usize> {
        match cause {
            PinCause::Verify => self.stats.add(Kind::PinsSwapped, st.committed as u64),
            PinCause::OnDemand | PinCause::Access { .. } => {
                self.stats.add(Kind::OnDemandRepins, st.committed as u64);
                let access = matches!(cause, PinCause::Access { .. });
                let va = self.start + first * PAGE_SIZE;
                crate::trace::repin(self.start, va, count, st.committed, mode.write, access);
            }
            PinCause::Register => {}
        }
        if st.committed == 0 && st.faulted {
            return Err(RegionError::NoPage);
        }
        Ok(st.committed)
    }

    /// Commits `pins` (the pages from index `idx` on) into the absent slots, in place of
    /// suspect pins, and in place of read pins when they are write pins, unless the round is
    /// stale ([`Region::round_stale`]: an invalidation that began since the round's
    /// `read_begin` covered one of these pages; else every pin of the round is the page mapped
    /// now). Returns the number committed, or `None` when the round must be retried. Pins not
    /// committed, and the pins replaced, are dropped after the lock is released. Errors:
    /// `Dead`, `ENOMEM`.
    fn commit(&self, idx: usize, mut pins: Pins, round: Round) -> RegionResult<Option<usize>> {
        // Room for the pins that the commit displaces or does not use, allocated outside the
        // locks (no allocation under them), and only when a slot of the range is taken: a
        // round over absent slots (registration, fresh memory) allocates nothing here.
        let mut extra: KVec<PinnedPage> = KVec::new();
        let n = pins.len();
        let (inner, mut table, absent) = loop {
            let inner = self.inner.lock();
            if inner.dead {
                drop(inner);
                return Err(RegionError::Dead);
            }
            if self.round_stale(&inner, round, idx, idx + n) {
                drop(inner);
                return Ok(None);
            }
            let table = self.table.write(&inner);
            let absent = table[idx..idx + n].iter().all(Option::is_none);
            if absent || extra.capacity() >= n {
                break (inner, table, absent);
            }
            drop(table);
            drop(inner);
            extra = KVec::with_capacity(n, GFP_KERNEL_ACCOUNT)?;
        };
        if absent && pins.move_into(&mut table[idx..idx + n], PagePin::new) {
            // Every slot of the range is absent (registration, memory new since the last
            // invalidation): each pin goes to its slot in one pass, with no test per page (the
            // loop below is a noticeable share of a registration's cost per page).
            drop(table);
            drop(inner);
            self.stats.add(Kind::PagesPinned, n as u64);
            // `pins`, now empty, frees its buffer here, outside the locks.
            return Ok(Some(n));
        }
        let mut committed = 0;
        let mut added = 0u64;
        for (i, pin) in pins.into_pins().enumerate() {
            let slot = &mut table[idx + i];
            match slot {
                None => {
                    *slot = Some(PagePin::new(pin));
                    committed += 1;
                    added += 1;
                }
                Some(old) if old.suspect() || (pin.writable() && !old.page.writable()) => {
                    // The new pin is the page mapped now (the round is not stale):
                    // it replaces a suspect pin, or a read pin when it is a write pin. Cannot
                    // fail: a slot is taken, so `extra` has room for every pin (checked above,
                    // under the same locks).
                    let _ =
                        extra.push_within_capacity(core::mem::replace(old, PagePin::new(pin)).page);
                    committed += 1;
                }
                Some(_) => {
                    // Pinned meanwhile by someone else: keep theirs. Cannot fail, as above.
                    let _ = extra.push_within_capacity(pin);
                }
            }
        }
        drop(table);
        drop(inner);
        self.stats.add(Kind::PagesPinned, added);
        // `extra` is dropped (unpinned) here, outside the lock.
        Ok(Some(committed))
    }

    /// Pins the pages of `[va, va + len)` now, as `how` asks (the semantics of
    /// `ibv_advise_mr()` on an ODP MR): for reading, faulting pages in; for writing, faulting and
    /// breaking COW; or, with `nofault`, only the pages present in the page table, for reading.
    /// Returns the pages newly pinned (or upgraded to write pins).
    ///
    /// Errors ([`RegionError`]): as [`Region::copy_bounced`]'s range checks; `EACCES` for a
    /// write prefetch of a read-only region; without `nofault`, `NoPage` when no page of the
    /// range is pinned as asked afterwards (nothing mapped, or the protection refuses the
    /// access); `Dead`, `Cancelled`, `Interrupted`, `ENOMEM`; `EAGAIN` from
    /// [`Region::request_fault`]. A fault that would wait is
    /// delivered by a fault request: the owner waits for it (cancellably), a work item does not
    /// (it ends there). Sleeps; bounded as [`Region::fill`].
    pub(crate) fn prefetch(&self, va: usize, len: usize, how: Prefetch) -> RegionResult<usize> {
        if how.write && !self.access.write {
            return Err(EACCES.into());
        }
        let off = self.offset_of(va, len)?;
        let (a, b) = (off / PAGE_SIZE, (off + len).div_ceil(PAGE_SIZE));
        let mm = self.mm().mmget_not_zero().ok_or(RegionError::Dead)?;
        let mode = PinMode {
            write: how.write,
            nofault: how.nofault,
            may_wait: false,
        };
        let mut pinned = 0;
        loop {
            match self.fill(&mm, a, b - a, PinCause::OnDemand, mode) {
                Ok(n) => {
                    pinned += n;
                    break;
                }
                Err(RegionError::NoPage) => break,
                // A fault that would wait (a userfault, I/O): a fault request delivers it. The
                // owner (a synchronous advice, `/dev/vamr` PREFETCH) waits for it, cancellably,
                // and goes on: each round resolves one fault or ends (cancellation, a signal,
                // the region's death). A work item (asynchronous advice) does not wait: the
                // request is its advice for that page, and it ends there.
                Err(RegionError::NeedsFault) => match self.next_gap(a, b, mode)? {
                    Some((i, _)) if self.current_is_owner() => {
                        self.wait_for_fault(i, mode.write)?
                    }
                    Some((i, _)) => {
                        self.request_fault(i, mode.write)?;
                        break;
                    }
                    None => break,
                },
                Err(e) => return Err(e),
            }
        }
        if how.nofault {
            return Ok(pinned);
        }
        let inner = self.inner.lock();
        if inner.dead {
            return Err(RegionError::Dead);
        }
        let usable = |p: &Option<PagePin>| matches!(p, Some(pin) if pin.usable(how.write));
        // At most `TABLE_CHUNK` slots per hold of the table lock.
        let mut from = a;
        while from < b {
            let to = b.min(from + TABLE_CHUNK);
            if self.table.read()[from..to].iter().any(usable) {
                return Ok(pinned);
            }
            from = to;
        }
        Err(RegionError::NoPage)
    }
}

/// A pin round's claim on pages `[.1, .2)` of a region (`RegionInner::pinning`): taken by
/// every pin round but registration's (an access, the verify pass, a prefetch) for one batch,
/// from before its GUP call to its commit (with its retries), so that two such rounds of one
/// region never pin the same pages at the same moment and fail each other's migrations out of a movable zone (see [`MIGRATE_ATTEMPTS`]).
///
/// Rounds over other pages of the region do not wait for each other: a batch is cut short
/// where another round's claim starts, and a round waits only while the first page of its
/// batch is claimed (an access's window past its own pages does not wait: it ends there). So
/// an access waits only for a round that pins its own next page, and a long prefetch, which
/// moves on batch by batch, holds up an access over other pages not at all.
///
/// Such a round never waits on user space (`crate::pin`'s `GupPlan` asks `FOLL_NOWAIT`: a
/// userfault, a page lock held by I/O end the round with `EBUSY`, see `fault.rs`), so a
/// claim is held only while GUP works, and a round waiting for one is woken by cancellation.
/// Registration's round (which may wait on a userfault) claims nothing: nothing else can
/// reach the region's pages yet but the verify pass, and `MIGRATE_ATTEMPTS` covers that.
///
/// # Invariants
///
/// `(self.1, self.2)` is in `self.0.inner.pinning`, put there by this value, until it is
/// dropped.
pub(super) struct PinTurn<'a>(&'a Region, usize, usize);

impl<'a> PinTurn<'a> {
    /// Claims the unclaimed pages of `[a, b)` from `a` on (up to the first claim inside the
    /// range) and returns the claim with the end of what it covers. When page `a` itself is
    /// claimed by another round, waits for that claim to be given back (one batch of a round
    /// that pins the same pages) if `wait`, else returns `None`. Errors: `Cancelled` once the
    /// region is cancelled (deregistration wakes the wait), `Dead` once it is dead,
    /// `Interrupted` on a signal, `ENOMEM`. Sleeps; no lock of the region may be held.
    fn take(
        region: &'a Region,
        a: usize,
        b: usize,
        wait: bool,
    ) -> RegionResult<Option<(Self, usize)>> {
        let mut inner = region.inner.lock();
        loop {
            if inner.pinning.overlaps(a, a + 1) {
                if !wait {
                    return Ok(None);
                }
                let free = |inner: &RegionInner| !inner.pinning.overlaps(a, a + 1);
                region.wait_on(&region.claim_free, &mut inner, free)?;
            }
            let Some(want) = inner.pinning.room_wanted() else {
                break;
            };
            // Room for one more claim, allocated without the lock (no allocation under it);
            // the claims are looked at again after it.
            drop(inner);
            let more = KVec::with_capacity(want, GFP_KERNEL_ACCOUNT)?;
            inner = region.inner.lock();
            drop(inner.pinning.make_room(more));
        }
        let cut = inner.pinning.free_end(a, b);
        // Cannot fail: `a` unclaimed, nothing claimed in `(a, cut)`, and room, all checked
        // under this hold of the lock.
        let _ = inner.pinning.claim(a, cut);
        // INVARIANT: the claim is in `pinning`, taken out only by this value's `Drop`.
        Ok(Some((PinTurn(region, a, cut), cut)))
    }
}

impl Drop for PinTurn<'_> {
    /// Gives the claim back and wakes the rounds waiting for pages.
    fn drop(&mut self) {
        let mut inner = self.0.inner.lock();
        inner.pinning.release(self.1, self.2);
        if self.0.fault_waiters.load(Relaxed) != 0 {
            self.0.claim_free.notify_all();
        }
    }
}

/// One [`Region::fill`] in progress, counted in [`RegionInner::fills`].
pub(super) struct FillGuard<'a>(&'a Region);

impl<'a> FillGuard<'a> {
    /// Counts a pin round in. Errors: `Dead` when the region is dead, `Cancelled` when it is
    /// cancelled (teardown sets both before it waits, so no round starts after that).
    pub(super) fn enter(region: &'a Region) -> RegionResult<Self> {
        let mut inner = region.inner.lock();
        if inner.dead {
            return Err(RegionError::Dead);
        }
        if region.cancelled.load(Acquire) {
            return Err(RegionError::Cancelled);
        }
        inner.fills += 1;
        Ok(FillGuard(region))
    }
}

impl Drop for FillGuard<'_> {
    fn drop(&mut self) {
        let mut inner = self.0.inner.lock();
        inner.fills -= 1;
        // Only teardown waits for `fills` to reach 0, and it marks the region dead (under this
        // lock) before it waits: a live region has nobody to wake.
        if inner.fills == 0 && inner.dead {
            self.0.idle.notify_all();
        }
    }
}
