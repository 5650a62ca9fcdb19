// SPDX-License-Identifier: GPL-2.0

//! Long-term page pins: [`PinnedPage`] owns one `FOLL_PIN` reference and drops it in `Drop`.
//!
//! Pins are taken with `pin_user_pages_remote(FOLL_LONGTERM [| FOLL_WRITE] [| FOLL_NOFAULT])`, never with
//! `get_user_pages`: `FOLL_PIN` is what fork's copy-on-pin (`page_maybe_dma_pinned()`) and the
//! `FOLL_LONGTERM` migration out of movable zones depend on (Documentation/core-api/pin_user_pages.rst).

use crate::ffi;
use core::ptr::NonNull;
use kernel::bindings;
use kernel::mm::virt::{flags, VmaRef};
use kernel::mm::MmWithUser;
use kernel::prelude::*;

/// A resched point (`cond_resched()`) for loops whose length a user controls (the size of a
/// region): called once per batch of table slots, it bounds how long such a loop keeps the CPU
/// on a kernel without preemption. Context: may sleep; the caller holds no spinlock.
pub(crate) fn cond_resched() {
    // SAFETY: no preconditions; the caller holds no spinlock (see above).
    unsafe { ffi::vamr_cond_resched() };
}

/// Faults the page at `addr` of `mm` in (for writing when `write`) without pinning it, waiting
/// for a userfaultfd handler if the VMA has one (`fixup_user_fault()` with retry). Used by a
/// fault request on behalf of an access that cannot wait itself. Errors: `EFAULT`, `EINTR`,
/// `ENOMEM`... Context: a work item or process context, may sleep for as long as the handler
/// takes (or until the userfaultfd is closed).
pub(crate) fn fault_in(mm: &MmWithUser, addr: usize, write: bool) -> Result {
    // SAFETY: `mm` has a user reference (`MmWithUser`).
    kernel::error::to_result(unsafe { ffi::vamr_fault_in(mm.as_raw(), addr, write) })
}

/// Most pages pinned by one [`pin_user_range`] call: bounds the temporary arrays (4 KiB of page
/// pointers, 4 KiB of pins) and the work lost when an invalidation races with a pin round.
pub(crate) const PIN_BATCH: usize = 512;

/// `PinnedPage` tag: mark the page dirty before unpinning (the pin was taken for writing).
const TAG_DIRTY: usize = 1 << 0;
/// `PinnedPage` tag: writes may go through the pin (taken with `FOLL_WRITE`, not downgraded).
const TAG_WRITE: usize = 1 << 1;
/// `PinnedPage` tag kept for its owner (the pin table's *suspect* flag, see
/// [`PinnedPage::marked`]).
const TAG_MARK: usize = 1 << 2;
/// All tag bits: the low bits of a `struct page` address, which are zero because a
/// `struct page` is at least 8-byte aligned.
const TAG_MASK: usize = TAG_DIRTY | TAG_WRITE | TAG_MARK;
const _: () = assert!(core::mem::align_of::<bindings::page>() > TAG_MASK);
// One pointer: a region's pin table costs 8 bytes per page (`Option` uses the null niche).
const _: () = assert!(core::mem::size_of::<Option<PinnedPage>>() == 8);
// `pin_user_range` lets GUP fill the pins' own buffer with page pointers, then tags them in place.
const _: () =
    assert!(core::mem::size_of::<PinnedPage>() == core::mem::size_of::<*mut bindings::page>());

/// One user page pinned with `FOLL_PIN | FOLL_LONGTERM`, in one word: the `struct page`
/// pointer with three flags in its low bits (dirty at unpin, writes allowed, and a mark for
/// the pin's owner), so that a region's pin table costs 8 bytes per page.
///
/// # Invariants
///
/// `tagged` is a `struct page` pointer plus a combination of the `TAG_*` bits (the page
/// address has them clear); the page holds one `FOLL_PIN` reference owned by this value,
/// released exactly once, by `Drop`, by [`PinnedPage::release_in_invalidation`], or by
/// [`unpin_table`] for the pins of a table given up to it.
#[repr(transparent)]
pub(crate) struct PinnedPage {
    tagged: NonNull<bindings::page>,
}

// SAFETY: a pin reference may be dropped on any thread (`unpin_user_page` has no thread
// affinity), and the `struct page` pointer is only used through thread-safe kernel functions.
unsafe impl Send for PinnedPage {}
// SAFETY: `&PinnedPage` only hands out the page pointer; see `Send`.
unsafe impl Sync for PinnedPage {}

impl PinnedPage {
    /// Takes ownership of one `FOLL_PIN` reference on `page`, taken for writing when `write`.
    ///
    /// # Safety
    ///
    /// `page` holds a `FOLL_PIN` reference that the caller gives to the new value.
    unsafe fn from_pinned(page: NonNull<bindings::page>, write: bool) -> Self {
        let tags = if write { TAG_DIRTY | TAG_WRITE } else { 0 };
        // `page` is a `struct page` address: its `TAG_MASK` bits are clear (alignment), so the
        // tagged pointer is non-null and keeps the pointer's provenance.
        let tagged = page.as_ptr().wrapping_byte_add(tags);
        // INVARIANT: page address plus tags; the pin is now ours (safety requirement).
        PinnedPage {
            // SAFETY: a non-null, 8-byte aligned address plus at most 7 is not null.
            tagged: unsafe { NonNull::new_unchecked(tagged) },
        }
    }

    fn tags(&self) -> usize {
        self.tagged.as_ptr() as usize & TAG_MASK
    }

    fn set_tag(&mut self, tag: usize, on: bool) {
        let ptr = self.tagged.as_ptr();
        let now = ptr as usize & tag;
        let ptr = if on {
            ptr.wrapping_byte_add(tag - now)
        } else {
            ptr.wrapping_byte_sub(now)
        };
        // INVARIANT: only the bits of `tag` (a `TAG_*` bit) changed.
        // SAFETY: the page address stays in the pointer, so it is not null.
        self.tagged = unsafe { NonNull::new_unchecked(ptr) };
    }

    /// The pinned `struct page`. Valid (and mapping the same physical page) while `self` lives.
    pub(crate) fn as_ptr(&self) -> *mut bindings::page {
        self.tagged.as_ptr().wrapping_byte_sub(self.tags())
    }

    /// Whether the page is dirtied when unpinned (the pin was taken for writing).
    fn dirty(&self) -> bool {
        self.tags() & TAG_DIRTY != 0
    }

    /// Whether writes may go through the pin: it was taken with `FOLL_WRITE` (COW broken, so
    /// writes reach the page the process sees) and the mapping still allows writing.
    pub(crate) fn writable(&self) -> bool {
        self.tags() & TAG_WRITE != 0
    }

    /// Stops writes through the pin (the page table no longer maps the page writable, e.g.
    /// after `mprotect(PROT_READ)`); a later write must pin for writing again. The page is
    /// still dirtied at unpin if the pin was taken for writing.
    pub(crate) fn forbid_writes(&mut self) {
        self.set_tag(TAG_WRITE, false);
    }

    /// The owner's mark (clear on a new pin): the pin table uses it as the pin's *suspect*
    /// flag.
    pub(crate) fn marked(&self) -> bool {
        self.tags() & TAG_MARK != 0
    }

    /// Sets or clears the owner's mark (see [`PinnedPage::marked`]).
    pub(crate) fn set_mark(&mut self, on: bool) {
        self.set_tag(TAG_MARK, on);
    }

    /// Unpins from inside an invalidate callback, without sleeping: dirties with
    /// `set_page_dirty()`, not `set_page_dirty_lock()`, because invalidations can arrive with the
    /// folio locked (truncate). As in `ib_umem_odp_unmap_dma_pages()`, the mapping cannot be torn
    /// down meanwhile: the invalidation that is running is what would tear it down.
    pub(crate) fn release_in_invalidation(self) {
        let this = core::mem::ManuallyDrop::new(self);
        // SAFETY: by the type invariant the page holds our pin; `ManuallyDrop` keeps `Drop`
        // from releasing it a second time.
        unsafe {
            if this.dirty() {
                bindings::set_page_dirty(this.as_ptr());
            }
            bindings::unpin_user_page(this.as_ptr());
        }
    }
}

impl Drop for PinnedPage {
    /// Dirties (when the pin was taken for writing, even if writes were forbidden since) and
    /// unpins the page, outside invalidations: may sleep on the folio lock
    /// (`unpin_user_pages_dirty_lock()`), so no spinlock and no region lock may be held.
    fn drop(&mut self) {
        let mut page = self.as_ptr();
        // SAFETY: by the type invariant `page` holds our pin, released only here; the array has
        // exactly one entry.
        unsafe { bindings::unpin_user_pages_dirty_lock(&mut page, 1, self.dirty()) };
    }
}

/// Slots [`unpin_table`] goes through per chunk: one `unpin_user_pages_dirty_lock()` call
/// per chunk for its scattered pins, and a rescheduling point between two chunks (as
/// `ib_umem_release()` has every 4096 entries).
const UNPIN_CHUNK: usize = 4096;

/// The shortest run of consecutive page frames that [`unpin_table`] releases with a call of
/// its own (`unpin_user_page_range_dirty_lock()`); the pins of shorter runs are compacted.
const RANGE_MIN: usize = 16;

/// The size of a `struct page` in bytes: the distance between the `struct page`s of two
/// consecutive page frames (the kernel's `page + 1`). A multiple of the tag bits' span, so
/// adding it to a tagged pointer keeps the tags.
const PAGE_STRUCT: usize = core::mem::size_of::<bindings::page>();
const _: () = assert!(PAGE_STRUCT % (TAG_MASK + 1) == 0);

/// Unpins every pin of a pin table being torn down: `len` slots at `slots`, `None` for an
/// absent page; returns the number of pins released. Pages pinned for writing are dirtied.
///
/// Goes through the table in chunks of [`UNPIN_CHUNK`] slots, reading each slot once or
/// twice in the usual layouts, at most [`RANGE_MIN`] + 1 times in the worst one (a broken
/// run that each earlier slot's look-ahead takes for a long one, so each scans up to the
/// break). A pin taken for writing (the common case) that starts a run of at least
/// [`RANGE_MIN`] consecutive page frames, with the same tags, is released with the whole run
/// by one `unpin_user_page_range_dirty_lock(.., true)` call, as `ib_umem_release()` releases
/// a scatterlist entry; the slot [`RANGE_MIN`] - 1 on is looked at first, so a page that
/// starts no such run costs one more load. A run is a run of `struct page` pointers
/// `PAGE_STRUCT` apart, exactly the pages `unpin_user_page_range_dirty_lock()` walks (`start +
/// i` in `gup_folio_range_next()`, mm/gup.c of 7.3), so what is detected is what is released
/// whatever the memory model. The other write pins are compacted in place, as
/// untagged page pointers, to the start of the chunk, and one
/// `unpin_user_pages_dirty_lock(.., true)` call releases them. Read pins (rare: read
/// prefetch, on-demand reads, read-only regions) go through a 64-entry array on the stack.
/// Outside invalidations only: may sleep on folio locks and reschedules, so no lock may be
/// held.
///
/// Why both: a call costs about as much as unpinning a page and freshly faulted anonymous
/// memory often comes in runs of one or two pages, where one call per run (as
/// `ib_umem_release()` makes) costs most; where the pages are contiguous, the stores of the
/// compaction cost most. Row [2] of `Documentation/bench-results.rst` shows the result.
///
/// # Safety
///
/// `slots` is valid for reads and writes of `len` initialized `Option<PinnedPage>` values,
/// which the caller gives up to this call (their pins are released here): afterwards the
/// memory holds no valid value and must be freed without being read or dropped.
pub(crate) unsafe fn unpin_table(slots: *mut Option<PinnedPage>, len: usize) -> usize {
    // The slots as page pointers: an `Option<PinnedPage>` is one (asserted at the top),
    // `None` the null pointer and `Some` the tagged `struct page` pointer.
    let base = slots.cast::<*mut bindings::page>();
    // Created at the first read pin: a table of write pins (the common case) then does not
    // pay for setting the batch up.
    let mut clean: Option<CleanBatch> = None;
    let mut count = 0;
    let mut done = 0;
    while done < len {
        let n = (len - done).min(UNPIN_CHUNK);
        // SAFETY: `done + n <= len`: both pointers are within (or one past) the slots;
        // `peek_end` is at most `n` slots before `end`, so not below `chunk`.
        let (chunk, end, peek_end) = unsafe {
            let end = base.add(done + n);
            (base.add(done), end, end.sub(n.min(RANGE_MIN - 1)))
        };
        let (mut src, mut dst) = (chunk, chunk);
        while src != end {
            // SAFETY: `src` is in `[chunk, end)`, an initialized slot whose pin is still there
            // (`dst` is not ahead of `src`, so the compaction only wrote slots behind it).
            let tagged = unsafe { src.read() };
            if tagged as usize & TAG_DIRTY != 0 {
                // The pin's page pointer, as in `PinnedPage::as_ptr`.
                let page = tagged.wrapping_byte_sub(tagged as usize & TAG_MASK);
                let last = (tagged as usize).wrapping_add((RANGE_MIN - 1) * PAGE_STRUCT);
                // SAFETY: below `peek_end`, `src + RANGE_MIN - 1` is a slot of the chunk, not
                // written yet (it is ahead of `src`); only compared.
                if src < peek_end && unsafe { src.add(RANGE_MIN - 1).read() } as usize == last {
                    // SAFETY: `src < end`, the slots from `src` to `end` are unread or only
                    // compared, so `run_end` reads initialized slots.
                    let next = unsafe { run_end(src, end, tagged as usize) };
                    // SAFETY: both derived from `chunk`, `src < next <= end`.
                    let run = unsafe { next.offset_from(src) } as usize;
                    if run >= RANGE_MIN {
                        // The loop goes on after slots `src..next` and never reads them again.
                        // SAFETY: they hold one write pin each of `page`, `page + 1`, ...
                        // (given up to this call), released exactly once, here.
                        unsafe { bindings::unpin_user_page_range_dirty_lock(page, run, true) };
                        count += run;
                        src = next;
                        continue;
                    }
                }
                // The pin now belongs to the compacted pointers. `dst` is not ahead of `src`,
                // so this overwrites this slot or one already read.
                // SAFETY: `chunk <= dst <= src < end`: within the slots.
                unsafe {
                    dst.write(page);
                    dst = dst.add(1);
                }
            } else if !tagged.is_null() {
                // SAFETY: `tagged` is a pin given up to this call (see above), not used again.
                count += unsafe { clean.get_or_insert_with(CleanBatch::new).push(tagged) };
            }
            // SAFETY: `src < end`, so the result is at most `end`.
            src = unsafe { src.add(1) };
        }
        // SAFETY: `dst` was derived from `chunk` and is not below it.
        let dirty = unsafe { dst.offset_from(chunk) } as usize;
        if dirty > 0 {
            // SAFETY: `[chunk, dst)` holds one untagged page pointer per pin taken for writing
            // outside the long runs (written above), each released exactly once, here.
            unsafe { bindings::unpin_user_pages_dirty_lock(chunk, dirty, true) };
            count += dirty;
        }
        done += n;
        if done < len {
            // Teardown may sleep and holds no lock here.
            cond_resched();
        }
    }
    count + clean.map_or(0, |mut c| c.flush())
}

/// The end of the run of page frames that slot `src` (holding the tagged pointer `tagged`)
/// starts: the first slot after it, at most `end`, that does not hold `tagged +
/// PAGE_STRUCT`, `tagged + 2 * PAGE_STRUCT`, ... in turn (the same tags, the next frame's
/// `struct page`).
///
/// # Safety
///
/// `src < end`, both in one allocation, and the slots in `(src, end)` are initialized (only
/// read).
unsafe fn run_end(
    src: *mut *mut bindings::page,
    end: *mut *mut bindings::page,
    tagged: usize,
) -> *mut *mut bindings::page {
    // SAFETY: `src < end` (the contract).
    let mut next = unsafe { src.add(1) };
    let mut want = tagged.wrapping_add(PAGE_STRUCT);
    // SAFETY: `next < end`: an initialized slot (the contract).
    while next != end && unsafe { next.read() } as usize == want {
        // SAFETY: `next < end`, so the result is at most `end`.
        next = unsafe { next.add(1) };
        want = want.wrapping_add(PAGE_STRUCT);
    }
    next
}

/// The read pins of [`unpin_table`], unpinned (not dirtied) 64 at a time.
///
/// # Invariants
///
/// `pages[..len]` are initialized, each an untagged page pointer holding one pin owned by the
/// batch; `len < 64` between calls.
struct CleanBatch {
    pages: [core::mem::MaybeUninit<*mut bindings::page>; 64],
    len: usize,
}

impl CleanBatch {
    fn new() -> Self {
        // Not initialized: a small region's teardown then does not clear 512 bytes of stack.
        // INVARIANT: empty.
        CleanBatch {
            pages: [core::mem::MaybeUninit::uninit(); 64],
            len: 0,
        }
    }

    /// Takes the pin of `tagged` (a tagged `PinnedPage` pointer, not null), unpinning the batch
    /// when full; returns the number of pins released. Out of line and cold: teardown's loop
    /// stays short for the common pins, those taken for writing.
    ///
    /// # Safety
    ///
    /// `tagged` holds one pin that the caller gives to the batch.
    #[cold]
    #[inline(never)]
    unsafe fn push(&mut self, tagged: *mut bindings::page) -> usize {
        let page = tagged.wrapping_byte_sub(tagged as usize & TAG_MASK);
        // INVARIANT: `len < 64`; the entry holds the pin given to us.
        self.pages[self.len] = core::mem::MaybeUninit::new(page);
        self.len += 1;
        if self.len < self.pages.len() {
            return 0;
        }
        self.flush()
    }

    /// Unpins what the batch holds; returns how many pins that was.
    fn flush(&mut self) -> usize {
        let n = self.len;
        if n > 0 {
            // SAFETY: by the type invariant the first `n` entries hold one pin each, owned by
            // the batch and released exactly once, here (`len` is reset below).
            unsafe {
                bindings::unpin_user_pages_dirty_lock(self.pages.as_mut_ptr().cast(), n, false)
            };
        }
        // INVARIANT: empty again.
        self.len = 0;
        n
    }
}

impl Drop for CleanBatch {
    /// Releases what is left (nothing after [`CleanBatch::flush`]): no pin outlives the batch.
    fn drop(&mut self) {
        self.flush();
    }
}

/// How a pin round takes its pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PinMode {
    /// `FOLL_WRITE`: pin for writing (breaks COW; fails on mappings without `VM_WRITE`).
    pub(crate) write: bool,
    /// `FOLL_NOFAULT`: pin only pages present in the page table; never fault one in.
    pub(crate) nofault: bool,
    /// The round may wait for any fault, a userfault included (killably): registration only,
    /// which runs in the owner's context before anything can deregister the region. Every
    /// other round gets `EBUSY` for a page whose fault would wait (a userfault, a page lock
    /// held by I/O, a swap-in, a FUSE read) and has it delivered by a fault request that it waits for
    /// cancellably (see `src/region/fault.rs`).
    pub(crate) may_wait: bool,
}

/// Pins up to [`PIN_BATCH`] pages of `[start, start + npages * PAGE_SIZE)` of `mm`, in order,
/// and stops at the first page that cannot be pinned. Only the first `must` pages are needed
/// by the caller (0: none, an access's window past its own pages), and only the first `fault`
/// (at least `must`; 0: none, as with `nofault`) may be faulted in: the pages after them are
/// pinned only if present in the page table, so pinning ahead allocates no memory and raises
/// no userfault.
/// When the first page must be faulted in, at most `fault` pages are pinned, within its VMA,
/// and in a userfaultfd-registered VMA at most `must` (with `must` 0 none: `EFAULT`), so that
/// no userfault is raised for a page nobody accesses. The result may stop
/// short of `must` (the present pages before the first absent one): the caller asks again
/// from there. `start` must be page aligned and `npages > 0`. `mode` selects `FOLL_WRITE` and
/// `FOLL_NOFAULT` (nothing faulted in at all); `FOLL_LONGTERM` is always set.
///
/// GUP may drop `mmap_lock` and retry (`VM_FAULT_RETRY`), so userfaultfd MISSING, MINOR and
/// WP faults reach their handler: a `may_wait` caller waits for it (killable); any other
/// caller gets `EBUSY` for any page whose fault would wait, instead of waiting.
///
/// Returns the pins (at least one, see [`Pins`]).
/// Errors: when the first page fails, the error of
/// `pin_user_pages_remote()`: `EFAULT` (nothing mapped there, the protection forbids the
/// access, or with `nofault` the page is not present), `EBUSY` (a fault that a caller without
/// `may_wait` must not wait for), `ENOMEM`, `EINTR` (fatal signal), `EHWPOISON`, ...
/// Context: process or work item, may sleep; takes `mmap_lock` for reading. Must not be called
/// with a region lock held: the pin can fault and trigger invalidations of the region.
pub(crate) fn pin_user_range(
    mm: &MmWithUser,
    start: usize,
    npages: usize,
    must: usize,
    fault: usize,
    mode: PinMode,
) -> Result<Pins> {
    let batch = npages.min(PIN_BATCH);
    let plan = GupPlan::new(mode, batch, must, fault);
    // One buffer: GUP writes page pointers into it, and each becomes, in place, the
    // `PinnedPage` that owns its pin (same size, asserted above).
    let mut out: KVec<PinnedPage> = KVec::with_capacity(batch, GFP_KERNEL_ACCOUNT)?;
    // SAFETY: `out` has room for `batch` entries of a page pointer's size.
    let got = unsafe { plan.pin(mm, start, out.as_mut_ptr().cast()) }?;
    many_pins(out, got, mode.write)
}

/// What one GUP call of a pin round may do, decided from its [`PinMode`] and counts: the
/// policy of the round (the calls themselves are `src/vamr_glue.c`'s shims).
struct GupPlan {
    /// `FOLL_*` flags of the calls that may fault.
    flags: u32,
    /// Pages of the batch.
    batch: usize,
    /// Pages needed (at most `fault`); the most a userfaultfd-armed VMA is asked for.
    must: usize,
    /// Pages that may be faulted in (at most `batch`; 0: none).
    fault: usize,
    /// Whether the lockless call may fault too (registration in the owner's context, which
    /// needs every page of the batch, as `ib_umem_get()`: GUP then takes the slow path itself).
    fault_lockless: bool,
}

impl GupPlan {
    fn new(mode: PinMode, batch: usize, must: usize, fault: usize) -> Self {
        let mut flags = bindings::FOLL_LONGTERM;
        if mode.write {
            flags |= bindings::FOLL_WRITE;
        }
        let fault = if mode.nofault {
            0
        } else {
            fault.clamp(must.min(batch), batch)
        };
        if fault == 0 {
            flags |= bindings::FOLL_NOFAULT;
        }
        // Only registration waits for a fault; every other round gets `EBUSY` instead.
        if !mode.may_wait {
            flags |= bindings::FOLL_NOWAIT;
        }
        GupPlan {
            flags,
            batch,
            must: must.min(fault),
            fault,
            fault_lockless: mode.may_wait && must.min(batch) == batch,
        }
    }

    /// Pins up to `batch` pages from `start` into `pages`, as the plan says: present pages
    /// locklessly where current may (its own mm, or a kernel thread adopting it), then the
    /// fault path for the first page if it is absent. Returns the number pinned (0: none).
    ///
    /// # Safety
    ///
    /// `pages` has room for `self.batch` page pointers.
    unsafe fn pin(
        &self,
        mm: &MmWithUser,
        start: usize,
        pages: *mut *mut bindings::page,
    ) -> Result<usize> {
        let raw = mm.as_raw();
        let nofault = self.flags | bindings::FOLL_NOFAULT;
        // SAFETY: `mm` has a user reference (`MmWithUser`).
        let context = unsafe { ffi::vamr_lockless_context(raw) };
        let adopt = context == 2;
        if adopt && self.fault > 0 {
            // A work item that may fault: its first page, looked up under `mmap_lock`, decides
            // the path. Present, the rest goes lockless; absent, the fault path.
            // SAFETY: `mm` has a user reference; `pages` has room for `batch >= 1` pointers
            // (the caller's contract).
            let first = unsafe { ffi::vamr_pin_remote(raw, start, 1, 1, nofault, pages) };
            if first == 1 {
                if self.batch == 1 {
                    return Ok(1);
                }
                let next = start + kernel::page::PAGE_SIZE;
                // SAFETY: `mm` has a user reference; `pages + 1` has room for `batch - 1`
                // pointers.
                let rest = unsafe {
                    ffi::vamr_pin_fast(raw, next, self.batch - 1, nofault, pages.add(1), true)
                };
                return Ok(1 + rest.max(0) as usize);
            }
        } else if context != 0 {
            let flags = if self.fault_lockless {
                self.flags
            } else {
                nofault
            };
            // SAFETY: `mm` has a user reference; `pages` has room for `batch` pointers.
            let ret = unsafe { ffi::vamr_pin_fast(raw, start, self.batch, flags, pages, adopt) };
            // Nothing pinned (`EFAULT` or 0: the first page is absent): the fault path, if
            // the plan allows one.
            if ret > 0 || self.fault == 0 || self.fault_lockless {
                return to_count(ret);
            }
        }
        // The fault path (for at most `fault` pages), or, for a caller that cannot pin
        // locklessly, the present pages of the batch.
        let n = if self.fault == 0 {
            self.batch
        } else {
            self.fault
        };
        // SAFETY: `mm` has a user reference; `pages` has room for `batch >= n` pointers.
        to_count(unsafe { ffi::vamr_pin_remote(raw, start, n, self.must, self.flags, pages) })
    }
}

/// A GUP shim's result as a count of pages.
fn to_count(ret: isize) -> Result<usize> {
    if ret < 0 {
        return Err(Error::from_errno(ret as i32));
    }
    Ok(ret as usize)
}

/// The pins of a round: GUP wrote `got` page pointers into `out`'s buffer, each of which
/// becomes, in place, the `PinnedPage` that owns its pin.
fn many_pins(mut out: KVec<PinnedPage>, got: usize, write: bool) -> Result<Pins> {
    let mut in_order = true;
    for i in 0..got {
        // SAFETY: GUP filled the first `got` entries with pinned pages; entry `i` is read
        // before the push below writes entry `out.len() <= i`.
        let page = unsafe { out.as_mut_ptr().cast::<*mut bindings::page>().add(i).read() };
        // GUP never reports success with a NULL page. Should it, keep the pages before it (so
        // the result stays in address order) and unpin the ones after it.
        let Some(page) = NonNull::new(page) else {
            in_order = false;
            continue;
        };
        // SAFETY: each page comes with one pin from GUP, now given to the `PinnedPage`;
        // dropping it unpins.
        let pinned = unsafe { PinnedPage::from_pinned(page, write) };
        if in_order {
            // Cannot fail: `out` has room for `batch >= got` entries. Were it to fail, the
            // returned value is dropped, which unpins, so nothing leaks.
            let _ = out.push_within_capacity(pinned);
        }
    }
    if out.is_empty() {
        return Err(EFAULT);
    }
    // INVARIANT: `out[i]` is the page at `start + i` pages (pushed in order, up to the first
    // hole in GUP's result).
    Ok(Pins(out))
}

/// The pins of one [`pin_user_range`] round, in address order, in a `KVec`. Dropping it
/// unpins what it still holds.
///
/// # Invariants
///
/// - `self.0[i]` is the page at the round's start address plus `i` pages: the region's commit
///   puts it in slot `idx + i` (`src/region/fill.rs`).
/// - Only [`pin_user_range`] makes one, with at least one pin; [`Pins::move_into`] leaves it
///   empty, to be dropped.
pub(crate) struct Pins(KVec<PinnedPage>);

impl Pins {
    /// Number of pins (at least one for a round's result).
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Moves the pins, in address order, into `slots`, the `i`-th as `Some(wrap(pin))` into
    /// `slots[i]`, overwriting what is there (the caller makes sure it is `None`), and leaves
    /// `self` empty; returns `true`. `slots.len()` must be [`Pins::len`]: otherwise nothing
    /// moves (the pins stay in `self`, unpinned when it is dropped) and the result is `false`.
    pub(crate) fn move_into<T>(
        &mut self,
        slots: &mut [Option<T>],
        wrap: impl Fn(PinnedPage) -> T,
    ) -> bool {
        if slots.len() != self.len() {
            return false;
        }
        // Equal lengths: every drained pin lands in a slot, none is dropped here.
        for (slot, pin) in slots.iter_mut().zip(self.0.drain_all()) {
            *slot = Some(wrap(pin));
        }
        true
    }

    /// The pins, in address order.
    pub(crate) fn into_pins(self) -> impl Iterator<Item = PinnedPage> {
        self.0.into_iter()
    }
}

/// Where pinning can resume after the page at `addr` (page aligned) failed with `EFAULT`, so
/// that a range that cannot be pinned is skipped in one step, not crawled page by page:
///
/// - `addr` in a hole: the start of the next VMA (`usize::MAX` when there is none);
/// - `addr` in a VMA that refuses the access as a whole (`VM_IO` or `VM_PFNMAP`, no `VM_WRITE`
///   for a `write` pin, no `VM_READ` for a read pin: the checks of `check_vma_flags()` in
///   mm/gup.c that do not depend on the page): the end of that VMA;
/// - otherwise (one page could not be faulted in, or was not present for a `FOLL_NOFAULT` pin):
///   the next page.
///
/// Takes `mmap_lock` for reading; may sleep.
pub(crate) fn resume_after_fault(mm: &MmWithUser, addr: usize, write: bool) -> usize {
    let _mmap = mm.mmap_read_lock();
    // SAFETY: the mmap lock of `mm` is held for reading, as `find_vma` requires.
    let vma = unsafe { bindings::find_vma(mm.as_raw(), addr) };
    if vma.is_null() {
        return usize::MAX;
    }
    // SAFETY: `vma` is a VMA of `mm` returned by `find_vma` while the mmap read lock is held,
    // and the reference does not outlive the guard.
    let vma = unsafe { VmaRef::from_raw(vma) };
    if vma.start() > addr {
        return vma.start();
    }
    let f = vma.flags();
    let refused = f & (flags::IO | flags::PFNMAP) != 0
        || if write {
            f & flags::WRITE == 0
        } else {
            f & flags::READ == 0
        };
    if refused {
        vma.end()
    } else {
        addr + kernel::page::PAGE_SIZE
    }
}
