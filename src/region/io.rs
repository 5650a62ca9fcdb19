// SPDX-License-Identifier: GPL-2.0

//! Accesses to a region, the data path: copies in both directions and 8-byte atomics through
//! the pins, under the region's table spinlock once per run of pages (one packet), pinning on
//! demand what is absent (see `Documentation/vamr.rst`, "Access").

use super::{PinCause, Region, RegionError, RegionResult, REPIN_ATTEMPTS};
use crate::pin::{PinMode, PIN_BATCH};
use crate::stats::Kind;
use core::ptr::NonNull;
use kernel::bindings;
use kernel::page::{BorrowedPage, PAGE_SIZE};
use kernel::prelude::*;
use kernel::sync::atomic::{Acquire, Atomic, Full};

/// Direction of a copy.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    /// From the region into a buffer.
    Read,
    /// From a buffer into the region.
    Write,
}

/// The buffer side of one page copy.
///
/// The pointer must be valid for the length of the copy (reads for `Write`, writes for `Read`)
/// and must not point into the page itself.
#[derive(Clone, Copy)]
enum PageIo {
    /// Copy out of the page into this buffer.
    Read(*mut u8),
    /// Copy from this buffer into the page.
    Write(*const u8),
}

/// An 8-byte atomic operation on a region (the IB atomic verbs plus ATOMIC_WRITE).
#[derive(Clone, Copy)]
pub(crate) enum AtomicOp {
    /// Compare-and-swap: if the value equals `compare`, store `swap`.
    CmpSwap { compare: u64, swap: u64 },
    /// Fetch-and-add.
    FetchAdd { add: u64 },
    /// Store, atomically (IB ATOMIC_WRITE).
    Write { value: u64 },
}

/// Most pages an access copies per hold of the region's table lock (a *run*). A packet of the
/// largest RoCE MTU (4096 bytes) spans at most two pages, so one packet is one run; the bound
/// keeps the time an invalidation waits for a run in flight to 16 page copies (64 KiB) when the
/// in-kernel API copies more at once.
pub(super) const RUN_PAGES: usize = 16;

/// The on-demand window of a region's accesses, in pages (256 KiB): pages after its own that an
/// access that must pin may fault in, in the same GUP call (for its direction): the absent
/// slots right after the access, up to the first slot that holds a pin, at most this many from
/// the access's first missing page. Absent slots after the window, up to [`ROUND_MAX`] pages
/// from that page, are pinned too when the page table maps them already (lockless, `FOLL_NOFAULT`:
/// nothing is allocated or faulted there), unless the window itself had to be faulted in (the
/// slow path then ends with it). A stream of packets over freshly mapped or remapped
/// memory then takes one slow path per window (per [`ROUND_MAX`] pages, when the process wrote
/// the memory) instead of one per packet, and the fixed cost of the slow path (mm reference,
/// `kthread_use_mm()` in a device's work item, read_begin, commit) is spread over it. mlx5
/// does the same after a responder page fault (`MAX_PREFETCH_LEN`, 4 MiB,
/// drivers/infiniband/hw/mlx5/odp.c).
///
/// Suspect pins are not in the window: the verify pass keeps them without GUP when their page
/// did not change (a VMA split marks a whole 2 MiB block suspect), and re-pinning 512 of them in
/// the path of one packet would delay its response while the process keeps remapping. Bounded
/// by the region's end; a page of the window that cannot be pinned ends it. Like ODP's
/// prefetch, this may fault in pages that the process released (MADV_DONTNEED) next to the
/// page the peer touches, once the verify pass found them gone; the verify pass itself never
/// faults. Fixed, not adaptive: a slow path inside a window that an invalidation took back
/// re-faults at most this many pages.
pub(super) const AHEAD_PAGES: usize = 64;

/// Most pages one slow path of an access pins, in pages (4 MiB, mlx5's `MAX_PREFETCH_LEN`):
/// the access's own pages and its window ([`AHEAD_PAGES`]) may be faulted in, the rest
/// only if present; in pin rounds of at most [`PIN_BATCH`] (two when every page is present).
/// Two batches, not one: most of a slow path's extra cost over a registration's is paid once
/// per slow path (the first touch of the page tables, `struct page`s and code after the
/// worker adopted the mm), so a longer slow path spreads it (row [3b] of
/// `Documentation/bench-results.rst`).
pub(super) const ROUND_MAX: usize = 2 * PIN_BATCH;

impl Region {
    /// The data path: calls `f(page, in_page, done, n)` for each page-bounded piece of the `len`
    /// bytes at byte offset `off` from `start`, in order, where `page` is the pinned page,
    /// `in_page` the offset in it, `done` the bytes before the piece and `n` its length.
    ///
    /// Fast path: the region's table lock (a spinlock) is taken once per run of up to
    /// [`RUN_PAGES`] pieces, and each piece goes through a usable pin while it is held. `f`
    /// therefore runs with a spinlock held: it must not sleep, allocate, or touch user memory;
    /// and an invalidation, which marks pins under the same lock, waits for the run in flight,
    /// so no byte moves to or from a page after the invalidation covering it returned.
    ///
    /// Slow path: a piece whose page has no usable pin (absent, suspect, or a read pin for a
    /// write) ends the run; the page is pinned on demand (for writing when `write`, upgrading a
    /// read pin) together with the rest of the access and the slots after it, at most
    /// [`ROUND_MAX`] pages in GUP calls of at most [`PIN_BATCH`] (see [`AHEAD_PAGES`]), then the
    /// runs go on.
    ///
    /// Errors ([`RegionError`]): `NoPage` when nothing is mapped at a page or the protection
    /// forbids the access; `Dead` (process exit); `Cancelled` once the region is cancelled
    /// (deregistration); `EAGAIN` when invalidations keep winning against the pins of one page
    /// ([`REPIN_ATTEMPTS`] slow rounds without progress), or past a bound on fault requests;
    /// `Interrupted`, `ENOMEM`. On error, the
    /// pieces before the failing page were done. Sleeps (slow path only).
    fn access(
        &self,
        off: usize,
        len: usize,
        write: bool,
        mut f: impl FnMut(NonNull<bindings::page>, usize, usize, usize),
    ) -> RegionResult {
        let last = (off + len - 1) / PAGE_SIZE;
        let mut done = 0;
        let mut misses = 0;
        while done < len {
            // One load of a flag that is written once: no shared line is dirtied.
            if self.cancelled.load(Acquire) {
                let e = RegionError::Cancelled;
                return Err(self.access_error(off + done, len, write, e));
            }
            let before = done;
            {
                let table = self.table.read();
                for _ in 0..RUN_PAGES {
                    if done == len {
                        break;
                    }
                    let pos = off + done;
                    let (idx, in_page) = (pos / PAGE_SIZE, pos % PAGE_SIZE);
                    let n = (PAGE_SIZE - in_page).min(len - done);
                    // Teardown empties the table: `get` then finds nothing (slow path, dead).
                    let page = match table.get(idx) {
                        Some(Some(pin)) if pin.usable(write) => NonNull::new(pin.page.as_ptr()),
                        _ => None,
                    };
                    let Some(page) = page else {
                        break;
                    };
                    f(page, in_page, done, n);
                    done += n;
                }
            }
            if done > before {
                misses = 0;
                continue;
            }
            misses += 1;
            if misses > REPIN_ATTEMPTS {
                let e = RegionError::Errno(EAGAIN);
                return Err(self.access_error(off + done, len, write, e));
            }
            if let Err(e) = self.pin_for_access((off + done) / PAGE_SIZE, last, write) {
                return Err(self.access_error(off + done, len, write, e));
            }
        }
        Ok(())
    }

    /// Reports a failed access (trace event `vamr_access_error`) at byte offset `off` from
    /// `start`, of an access of `len` bytes, and returns `err`.
    fn access_error(&self, off: usize, len: usize, write: bool, err: RegionError) -> RegionError {
        crate::trace::access_error(self.start, self.start + off, len, write, err.to_errno());
        err
    }

    /// The slow path of [`Region::access`]: pins page `idx` for the access (for writing when
    /// `write`) together with the pages of the same access up to index `last` and the absent
    /// slots right after it (suspect pins there are left to the verify pass, which keeps them
    /// without GUP), at most [`ROUND_MAX`] pages in all (pin rounds of at most [`PIN_BATCH`]),
    /// faulting in only the access's pages and the [`AHEAD_PAGES`] from `idx`. Success
    /// does not promise a usable pin (an invalidation may have won): the caller looks again.
    /// Errors: as [`Region::access`]. Sleeps.
    fn pin_for_access(&self, idx: usize, last: usize, write: bool) -> RegionResult {
        let mm = self.mm().mmget_not_zero().ok_or(RegionError::Dead)?;
        let mode = PinMode {
            write,
            nofault: false,
            may_wait: false,
        };
        let own = last + 1 - idx;
        // The slow path: the access's own pages, and the absent slots right after them up to
        // `ROUND_MAX` pages from `idx`, of which the window's pages may be faulted in and the
        // rest are pinned if present (see `AHEAD_PAGES`). Page `idx` needs a pin (the access
        // found it unusable); when every slot after it up to the end is absent, the first
        // batch's gap is known and `fill` does not look for it again (it does for the second).
        // `get`: a teardown that ran since the access looked has emptied the table (then
        // `fill` finds the region dead).
        let end = self.npages.min(idx + ROUND_MAX);
        let absent = 1 + self
            .table
            .read()
            .get(idx + 1..end)
            .map_or(0, |run| run.iter().take_while(|p| p.is_none()).count());
        let (count, known_gap) = if absent >= own {
            (absent, true)
        } else {
            (own.min(ROUND_MAX), false)
        };
        let fault = own.max(AHEAD_PAGES).min(count);
        let cause = PinCause::Access {
            until: last + 1,
            fault_until: idx + fault,
            known_gap,
        };
        let pinned = self.fill(&mm, idx, count, cause, mode);
        drop(mm);
        match pinned {
            // A fault that would wait (a userfault, I/O): a work item delivers it, and this
            // access waits for it, cancellably (a device task within its mm's budget). The round may have
            // pinned the access's first pages before it met the fault: the request is for the
            // first page of the access still without a usable pin (as a prefetch's), not for
            // `idx` (which would be a request for a present page, then a second one).
            Err(RegionError::NeedsFault) => match self.next_gap(idx, last + 1, mode)? {
                Some((i, _)) => self.wait_for_fault(i, write),
                None => Ok(()),
            },
            Err(e) => Err(e),
            Ok(_) => Ok(()),
        }
    }

    /// Checks that `[va, va + len)` lies inside the registered byte range and returns the
    /// offset of `va` from `start`. Errors: `EINVAL` (outside, overflow, or `len` 0).
    pub(super) fn offset_of(&self, va: usize, len: usize) -> Result<usize> {
        let end = va.checked_add(len).ok_or(EINVAL)?;
        if len == 0 || va < self.addr || end > self.addr + self.len {
            return Err(EINVAL);
        }
        Ok(va - self.start)
    }

    /// Copies one page-bounded piece between the pinned `page` (from byte `in_page`, `n` bytes)
    /// and `io`'s buffer. Runs under the table lock (see [`Region::access`]).
    ///
    /// User space and devices may access the page at the same time; as for every copy to or
    /// from user memory, that is outside Rust's model (no Rust reference to it exists).
    fn page_io(page: NonNull<bindings::page>, in_page: usize, n: usize, io: PageIo) -> Result {
        // The table lock, held by the caller, keeps the page pinned; pieces are page-bounded,
        // so `[in_page, in_page + n)` lies in the page. See above for races.
        // SAFETY: pinned page, in-page range, and `io` points to `n` bytes (`PageIo` contract).
        unsafe {
            let page = BorrowedPage::from_raw(page);
            match io {
                PageIo::Read(dst) => page.read_raw(dst, in_page, n),
                PageIo::Write(src) => page.write_raw(src, in_page, n),
            }
        }
    }

    /// Checks a copy of `len` bytes at `va` in direction `dir` and returns its offset from
    /// `start`. Errors: `EINVAL` (range outside the region, or `len` 0), `EACCES` (write to a
    /// read-only region).
    fn check_copy(&self, va: usize, len: usize, dir: Dir) -> Result<usize> {
        if dir == Dir::Write && !self.access.write {
            return Err(EACCES);
        }
        self.offset_of(va, len)
    }

    /// Counts `len` bytes moved in direction `dir`.
    fn count_bytes(&self, dir: Dir, len: usize) {
        match dir {
            Dir::Read => self.stats.add_bytes(Kind::BytesRead, len as u64),
            Dir::Write => self.stats.add_bytes(Kind::BytesWritten, len as u64),
        }
    }

    /// Copies `len` bytes between the region at `va` and a buffer the caller cannot touch under
    /// a lock (user memory), through a page-sized bounce buffer. Any alignment and length.
    ///
    /// For each page-bounded piece, `chunk(bounce)` moves data between `bounce` and the
    /// caller's buffer, in order: for [`Dir::Write`] it fills `bounce` before the page is
    /// written, for [`Dir::Read`] it consumes `bounce` after the page was read. It runs without
    /// the region's locks and may sleep or fault.
    ///
    /// Errors: `EINVAL` (range outside the region), `EACCES` (write to a read-only region),
    /// and those of [`Region::access`] and of `chunk`. On error some bytes may have been copied. Sleeps.
    pub(crate) fn copy_bounced(
        &self,
        va: usize,
        len: usize,
        dir: Dir,
        mut chunk: impl FnMut(&mut [u8]) -> Result,
    ) -> RegionResult {
        let off = self.check_copy(va, len, dir)?;
        let mut bounce = KVec::<u8>::from_elem(0u8, PAGE_SIZE.min(len), GFP_KERNEL_ACCOUNT)?;
        let mut done = 0;
        while done < len {
            // A copy for user space may span a large region: stop on cancellation and on a
            // fatal signal between pages.
            self.check_interrupted()?;
            let pos = off + done;
            let n = (PAGE_SIZE - pos % PAGE_SIZE).min(len - done);
            let buf = &mut bounce[..n];
            if dir == Dir::Write {
                chunk(buf)?;
            }
            let io = match dir {
                Dir::Read => PageIo::Read(buf.as_mut_ptr()),
                Dir::Write => PageIo::Write(buf.as_ptr()),
            };
            let mut res = Ok(());
            self.access(pos, n, dir == Dir::Write, |page, in_page, _, n| {
                res = Self::page_io(page, in_page, n, io);
            })?;
            res?;
            if dir == Dir::Read {
                chunk(buf)?;
            }
            done += n;
        }
        self.count_bytes(dir, len);
        Ok(())
    }

    /// Copies between the region at `va` and the kernel buffer at `ptr` (`len` bytes), straight
    /// through the pinned pages (see [`Region::access`]).
    ///
    /// `ptr` must be valid for `len` bytes (writes for [`Dir::Read`], reads for [`Dir::Write`])
    /// and not point into the region's pages.
    fn copy_kernel(&self, va: usize, len: usize, dir: Dir, ptr: *mut u8) -> RegionResult {
        let off = self.check_copy(va, len, dir)?;
        let mut res = Ok(());
        self.access(off, len, dir == Dir::Write, |page, in_page, done, n| {
            // `done + n <= len`: `access` splits exactly `len` bytes.
            let buf = ptr.wrapping_add(done);
            let io = match dir {
                Dir::Read => PageIo::Read(buf),
                Dir::Write => PageIo::Write(buf),
            };
            if res.is_ok() {
                res = Self::page_io(page, in_page, n, io);
            }
        })?;
        res?;
        self.count_bytes(dir, len);
        Ok(())
    }

    /// Copies from the region at `va` into the kernel buffer `buf` (`buf.len()` bytes), straight
    /// from the pinned pages. Errors and context: as [`Region::copy_bounced`].
    pub(crate) fn read_into(&self, va: usize, buf: &mut [u8]) -> RegionResult {
        self.copy_kernel(va, buf.len(), Dir::Read, buf.as_mut_ptr())
    }

    /// Copies the kernel buffer `buf` into the region at `va`, straight into the pinned pages.
    /// Errors and context: as [`Region::copy_bounced`].
    pub(crate) fn write_from(&self, va: usize, buf: &[u8]) -> RegionResult {
        // Only read through: `Dir::Write` copies from the buffer into the pages.
        self.copy_kernel(va, buf.len(), Dir::Write, buf.as_ptr().cast_mut())
    }

    /// Performs an 8-byte atomic at `va` (8-byte aligned, inside the region) and returns the
    /// value found before it (for [`AtomicOp::Write`]: the value overwritten).
    ///
    /// Errors: `EINVAL` (misaligned or outside), `EACCES` (read-only region), and those of
    /// [`Region::access`]. Sleeps (may pin on demand); the atomic itself runs under the table
    /// lock.
    pub(crate) fn atomic(&self, va: usize, op: AtomicOp) -> RegionResult<u64> {
        if va % 8 != 0 {
            return Err(EINVAL.into());
        }
        let off = self.check_copy(va, 8, Dir::Write)?;
        let mut old = 0;
        self.access(off, 8, true, |page, in_page, _, _| {
            // Nothing between the map and the matching `kunmap_local` sleeps or maps a page.
            // SAFETY: the table lock (held inside `access`) keeps the page pinned.
            let base = unsafe { bindings::kmap_local_page(page.as_ptr()) };
            // `in_page` is 8-byte aligned (`va` is, and pages are), so the word lies within
            // the mapped page, valid until the `kunmap_local` below (after the last use). The
            // word is user memory: user space, devices and other copies (`page_io`) may access
            // it at the same time with plain accesses, which no lock of ours can exclude; as
            // for the C atomics RDMA drivers perform on user pages, avoiding such races is the
            // application's part of the RDMA contract, and they touch no memory of the kernel.
            // SAFETY: mapped, aligned for a `u64`, valid while mapped; races as said above.
            let word = unsafe { Atomic::<u64>::from_ptr(base.cast::<u8>().add(in_page).cast()) };
            // `Full`: fully ordered, as the C `atomic64_*()` read-modify-write operations
            // without a suffix.
            old = match op {
                AtomicOp::CmpSwap { compare, swap } => match word.cmpxchg(compare, swap, Full) {
                    Ok(v) | Err(v) => v,
                },
                AtomicOp::FetchAdd { add } => word.fetch_add(add, Full),
                AtomicOp::Write { value } => word.xchg(value, Full),
            };
            // SAFETY: `base` came from the `kmap_local_page` above, on this CPU, and is unmapped
            // exactly once.
            unsafe { bindings::kunmap_local(base) };
        })?;
        self.count_bytes(Dir::Write, 8);
        Ok(old)
    }
}
