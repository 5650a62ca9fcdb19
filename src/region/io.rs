// SPDX-License-Identifier: GPL-2.0

//! Accesses to a region: copies in both directions and 8-byte atomics, page by page through
//! the pins under the region lock, pinning on demand what is absent (see
//! `Documentation/vamr.rst`, "Access").

use super::{PinCause, Region, REPIN_ATTEMPTS};
use crate::pin::{PinMode, PIN_BATCH};
use crate::stats::Kind;
use core::ptr::NonNull;
use core::sync::atomic::Ordering;
use kernel::bindings;
use kernel::page::{BorrowedPage, PAGE_SIZE};
use kernel::prelude::*;

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

impl Region {
    /// Runs `f` on the pinned page with index `idx`, pinning it on demand first (for writing
    /// when `write`, upgrading a read pin) together with the pages of the same access up to
    /// index `last` (at most [`PIN_BATCH`] in one GUP call), with the region lock held (so no
    /// invalidation can unpin it meanwhile). `f` must not sleep, allocate or touch user
    /// memory.
    ///
    /// Errors: `EFAULT` when nothing is mapped there, the protection forbids the access, or the
    /// region is dead (process exit); `ECANCELED` once the region is cancelled (deregistration);
    /// `EAGAIN` when invalidations keep winning.
    fn with_page<R>(
        &self,
        idx: usize,
        last: usize,
        write: bool,
        f: impl FnOnce(NonNull<bindings::page>) -> R,
    ) -> Result<R> {
        for _ in 0..REPIN_ATTEMPTS {
            {
                let slots = self.pages.lock();
                if slots.dead {
                    return Err(EFAULT);
                }
                if self.cancelled.load(Ordering::Acquire) {
                    return Err(ECANCELED);
                }
                match &slots.pins[idx] {
                    Some(pin) if pin.usable(write) => {
                        // A pinned page pointer is never NULL.
                        let page = NonNull::new(pin.page.as_ptr()).ok_or(EFAULT)?;
                        return Ok(f(page));
                    }
                    _ => {}
                }
            }
            let mm = self.mm.mmget_not_zero().ok_or(EFAULT)?;
            let mode = PinMode {
                write,
                nofault: false,
                owner: self.current_is_owner(),
            };
            let count = (last + 1 - idx).min(PIN_BATCH);
            let pinned = self.fill(&mm, idx, count, PinCause::Access, mode);
            drop(mm);
            if pinned == Err(EBUSY) {
                // A userfault that this context must not wait for: a work item delivers it
                // to the handler, and this access waits for it, cancellably.
                self.wait_for_fault(idx, write)?;
                continue;
            }
            pinned?;
        }
        Err(EAGAIN)
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

    /// Moves `n` bytes between the pinned page `idx` (from byte `in_page`) and `io`'s buffer,
    /// under the region lock, pinning the page on demand first (with the rest of the access, up
    /// to page `last`). Errors: see [`Region::with_page`].
    ///
    /// The callers split copies at page boundaries, so `[in_page, in_page + n)` lies in the
    /// page. User space and devices may access the page at the same time; as for every copy to
    /// or from user memory, that is outside Rust's model (no Rust reference to it exists).
    fn page_io(&self, idx: usize, last: usize, in_page: usize, n: usize, io: PageIo) -> Result {
        let write = matches!(io, PageIo::Write(_));
        self.with_page(idx, last, write, |page| {
            // SAFETY: the region lock (held inside `with_page`) keeps the page pinned; the range
            // lies in it and `io` points to `n` bytes (`PageIo` contract); see above for races.
            unsafe {
                let page = BorrowedPage::from_raw(page);
                match io {
                    PageIo::Read(dst) => page.read_raw(dst, in_page, n),
                    PageIo::Write(src) => page.write_raw(src, in_page, n),
                }
            }
        })?
    }

    /// Checks a copy of `len` bytes at `va` and calls `step(idx, last, in_page, done, n)` for
    /// each page-bounded piece, in order (`last` is the index of the copy's last page); then
    /// counts the bytes. Errors: `EINVAL` (range outside
    /// the region), `EACCES` (write to a read-only region), and those of `step`.
    fn walk(
        &self,
        va: usize,
        len: usize,
        dir: Dir,
        mut step: impl FnMut(usize, usize, usize, usize, usize) -> Result,
    ) -> Result {
        if dir == Dir::Write && !self.access.write {
            return Err(EACCES);
        }
        let mut off = self.offset_of(va, len)?;
        let last = (off + len - 1) / PAGE_SIZE;
        let mut done = 0;
        while done < len {
            let in_page = off % PAGE_SIZE;
            let n = (PAGE_SIZE - in_page).min(len - done);
            step(off / PAGE_SIZE, last, in_page, done, n)?;
            done += n;
            off += n;
        }
        match dir {
            Dir::Read => self.stats.add(Kind::BytesRead, len as u64),
            Dir::Write => self.stats.add(Kind::BytesWritten, len as u64),
        }
        Ok(())
    }

    /// Copies `len` bytes between the region at `va` and a buffer the caller cannot touch under
    /// a lock (user memory), through a page-sized bounce buffer. Any alignment and length.
    ///
    /// For each page-bounded piece, `chunk(bounce)` moves data between `bounce` and the
    /// caller's buffer, in order: for [`Dir::Write`] it fills `bounce` before the page is
    /// written, for [`Dir::Read`] it consumes `bounce` after the page was read. It runs without
    /// the region lock and may sleep or fault.
    ///
    /// Errors: `EINVAL` (range outside the region), `EACCES` (write to a read-only region),
    /// `EFAULT`, `ECANCELED` (see [`Region::with_page`]), `EINTR` (fatal signal), `ENOMEM`, and
    /// the errors of `chunk`. On error some bytes may have been copied. Sleeps.
    pub(crate) fn copy_bounced(
        &self,
        va: usize,
        len: usize,
        dir: Dir,
        mut chunk: impl FnMut(&mut [u8]) -> Result,
    ) -> Result {
        let mut bounce = KVec::<u8>::from_elem(0u8, PAGE_SIZE.min(len.max(1)), GFP_KERNEL)?;
        self.walk(va, len, dir, |idx, last, in_page, _done, n| {
            // A copy for user space may span a large region: stop on cancellation and on a
            // fatal signal between pages.
            self.check_interrupted()?;
            let buf = &mut bounce[..n];
            if dir == Dir::Write {
                chunk(buf)?;
            }
            let io = match dir {
                Dir::Read => PageIo::Read(buf.as_mut_ptr()),
                Dir::Write => PageIo::Write(buf.as_ptr()),
            };
            self.page_io(idx, last, in_page, n, io)?;
            if dir == Dir::Read {
                chunk(buf)?;
            }
            Ok(())
        })
    }

    /// Copies from the region at `va` into the kernel buffer `buf` (`buf.len()` bytes), straight
    /// from the pinned pages. Errors and context: as [`Region::copy_bounced`].
    pub(crate) fn read_into(&self, va: usize, buf: &mut [u8]) -> Result {
        let ptr = buf.as_mut_ptr();
        self.walk(va, buf.len(), Dir::Read, |idx, last, in_page, done, n| {
            // `done + n <= buf.len()`: `walk` splits exactly `buf.len()` bytes.
            self.page_io(idx, last, in_page, n, PageIo::Read(ptr.wrapping_add(done)))
        })
    }

    /// Copies the kernel buffer `buf` into the region at `va`, straight into the pinned pages.
    /// Errors and context: as [`Region::copy_bounced`].
    pub(crate) fn write_from(&self, va: usize, buf: &[u8]) -> Result {
        let ptr = buf.as_ptr();
        self.walk(va, buf.len(), Dir::Write, |idx, last, in_page, done, n| {
            // `done + n <= buf.len()`: `walk` splits exactly `buf.len()` bytes.
            self.page_io(idx, last, in_page, n, PageIo::Write(ptr.wrapping_add(done)))
        })
    }

    /// Performs an 8-byte atomic at `va` (8-byte aligned, inside the region) and returns the
    /// value found before it (for [`AtomicOp::Write`]: the value overwritten).
    ///
    /// Errors: `EINVAL` (misaligned or outside), `EACCES` (read-only region), `EFAULT` (see
    /// [`Region::with_page`]). Sleeps (may pin on demand); the atomic itself runs under the
    /// region lock.
    pub(crate) fn atomic(&self, va: usize, op: AtomicOp) -> Result<u64> {
        if va % 8 != 0 {
            return Err(EINVAL);
        }
        if !self.access.write {
            return Err(EACCES);
        }
        let off = self.offset_of(va, 8)?;
        let old = self.with_page(off / PAGE_SIZE, off / PAGE_SIZE, true, |page| {
            // Nothing between the map and the matching `kunmap_local` sleeps or maps a page.
            // SAFETY: the region lock (held inside `with_page`) keeps the page pinned.
            let base = unsafe { bindings::kmap_local_page(page.as_ptr()) };
            // `off` is 8-byte aligned (checked above), so the word lies within the mapped page.
            // SAFETY: valid and aligned for an `AtomicU64`; other users of the word (user space,
            // devices) use machine accesses, as with any shared user memory.
            let word = unsafe {
                core::sync::atomic::AtomicU64::from_ptr(
                    base.cast::<u8>().add(off % PAGE_SIZE).cast::<u64>(),
                )
            };
            let old = match op {
                AtomicOp::CmpSwap { compare, swap } => {
                    match word.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                        Ok(v) | Err(v) => v,
                    }
                }
                AtomicOp::FetchAdd { add } => word.fetch_add(add, Ordering::SeqCst),
                AtomicOp::Write { value } => word.swap(value, Ordering::SeqCst),
            };
            // SAFETY: `base` came from the `kmap_local_page` above, on this CPU, and is unmapped
            // exactly once.
            unsafe { bindings::kunmap_local(base) };
            old
        })?;
        self.stats.add(Kind::BytesWritten, 8);
        Ok(old)
    }
}
