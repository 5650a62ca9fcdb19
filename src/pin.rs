// SPDX-License-Identifier: GPL-2.0

//! Long-term page pins: [`PinnedPage`] owns one `FOLL_PIN` reference and drops it in `Drop`.
//!
//! Pins are taken with `pin_user_pages_remote(FOLL_LONGTERM [| FOLL_WRITE])`, never with
//! `get_user_pages`: `FOLL_PIN` is what fork's copy-on-pin (`page_maybe_dma_pinned()`) and the
//! `FOLL_LONGTERM` migration out of movable zones depend on (Documentation/core-api/pin_user_pages.rst).

use core::ptr::NonNull;
use kernel::bindings;
use kernel::mm::MmWithUser;
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;

/// Most pages pinned by one `pin_user_pages_remote()` call; bounds the temporary array to 4 KiB.
const PIN_BATCH: usize = 512;

/// One user page pinned with `FOLL_PIN | FOLL_LONGTERM`.
///
/// # Invariants
///
/// `page` holds one `FOLL_PIN` reference owned by this value, released exactly once in `Drop`.
pub(crate) struct PinnedPage {
    page: NonNull<bindings::page>,
    /// Mark the page dirty before unpinning (the pin allowed writes).
    dirty: bool,
}

// SAFETY: a pin reference may be dropped on any thread (`unpin_user_page` has no thread
// affinity), and the `struct page` pointer is only used through thread-safe kernel functions.
unsafe impl Send for PinnedPage {}
// SAFETY: `&PinnedPage` only hands out the page pointer; see `Send`.
unsafe impl Sync for PinnedPage {}

impl PinnedPage {
    /// The pinned `struct page`. Valid (and mapping the same physical page) while `self` lives.
    pub(crate) fn as_ptr(&self) -> *mut bindings::page {
        self.page.as_ptr()
    }
}

impl Drop for PinnedPage {
    /// Dirties (when the pin allowed writes) and unpins the page. Does not sleep: it uses
    /// `set_page_dirty()` rather than `set_page_dirty_lock()` because invalidations can arrive
    /// with the folio locked (truncate); like `ib_umem_odp_unmap_dma_pages()`, we rely on our own
    /// lock, which the invalidation holds, to keep the mapping from being torn down meanwhile.
    fn drop(&mut self) {
        // SAFETY: by the type invariant `page` holds our pin, released only here.
        unsafe {
            if self.dirty {
                bindings::set_page_dirty(self.page.as_ptr());
            }
            bindings::unpin_user_page(self.page.as_ptr());
        }
    }
}

/// Pins the pages of `[start, start + npages * PAGE_SIZE)` of `mm`, in order, appending them to
/// `out`, and stops at the first page that cannot be pinned.
///
/// `start` must be page aligned. `write` asks for `FOLL_WRITE` (breaking COW, and failing on
/// read-only mappings). Returns the number of pages pinned (`< npages` when it stopped early).
///
/// Errors: `ENOMEM` (no memory for the array or `out`), and when the very first page fails, the
/// error of `pin_user_pages_remote()`: `EFAULT` (nothing mapped there, or the protection
/// forbids the access), `ENOMEM`, `EINTR`, ... Context: process or work item, may sleep; takes
/// `mmap_lock` for reading. Must not be called with a region lock held: the pin can fault and
/// trigger invalidations of the region.
pub(crate) fn pin_user_range(
    mm: &MmWithUser,
    start: usize,
    npages: usize,
    write: bool,
    out: &mut KVec<PinnedPage>,
) -> Result<usize> {
    let mut flags = bindings::FOLL_LONGTERM;
    if write {
        flags |= bindings::FOLL_WRITE;
    }
    let mut raw: KVec<*mut bindings::page> =
        KVec::with_capacity(npages.min(PIN_BATCH), GFP_KERNEL)?;
    out.reserve(npages, GFP_KERNEL)?;
    let mut done = 0;
    while done < npages {
        let batch = (npages - done).min(PIN_BATCH);
        let addr = start + done * PAGE_SIZE;
        let ret = {
            let _mmap = mm.mmap_read_lock();
            // SAFETY: `mm` has a user reference (`MmWithUser`) and its mmap lock is held for
            // reading; `raw` has room for `batch` pointers; `locked` is NULL, so GUP keeps the
            // lock held and never drops it.
            unsafe {
                bindings::pin_user_pages_remote(
                    mm.as_raw(),
                    addr,
                    batch,
                    flags,
                    raw.as_mut_ptr(),
                    core::ptr::null_mut(),
                )
            }
        };
        if ret <= 0 {
            if done == 0 {
                return Err(if ret < 0 {
                    Error::from_errno(ret as i32)
                } else {
                    EFAULT
                });
            }
            break;
        }
        let got = ret as usize;
        let mut kept = 0;
        for i in 0..got {
            // SAFETY: `pin_user_pages_remote()` filled the first `got` entries with pinned pages.
            let page = unsafe { *raw.as_ptr().add(i) };
            // GUP never reports success with a NULL page. Should it, keep the pages before it
            // (so `out` stays in address order) and unpin the ones after it.
            let Some(page) = NonNull::new(page) else {
                continue;
            };
            // INVARIANT: each page comes with one pin from the call above, now owned by the
            // `PinnedPage`; dropping it unpins.
            let pinned = PinnedPage { page, dirty: write };
            if kept == i {
                // Cannot fail: `out` has room for `npages` more entries (reserved above). Were it
                // to fail, the returned value is dropped, which unpins, so nothing leaks.
                if out.push_within_capacity(pinned).is_ok() {
                    kept += 1;
                }
            }
        }
        done += kept;
        if kept < batch {
            break;
        }
    }
    Ok(done)
}
