// SPDX-License-Identifier: GPL-2.0

//! The C functions of vamr.ko that the Rust side calls, declared once each and grouped by the
//! C file that defines them: shims over what Rust cannot reach by itself (static inlines,
//! macros, tracepoints, module parameters). The prototypes are in `src/vamr_glue.h` and
//! `src/vamr_limits.h`; these declarations must match them.
//!
//! Each doc line says what the function does and in which context it may be called; every call
//! is `unsafe`, and its `// SAFETY:` comment shows that the pointers it passes are valid as
//! stated here. Callers name them `ffi::vamr_*` (after `use crate::ffi;`).
//!
//! The kernel's own `bindings` crate allows `improper_ctypes` for the C structs named here too:
//! they are only passed by pointer.

use core::ffi::c_void;
use kernel::bindings;
use kernel::ffi::c_char;

// `src/vamr_glue.c`: static inlines of `<linux/mmu_notifier.h>` and `<linux/hmm.h>`.
#[allow(improper_ctypes)]
extern "C" {
    /// `mmu_interval_set_seq()`: marks the readers that began before this invalidation as
    /// stale. Only from the `invalidate` callback `sub` is delivered to, under the lock that
    /// `vamr_mmu_interval_read_retry` callers hold; does not sleep.
    pub(crate) fn vamr_mmu_interval_set_seq(
        sub: *mut bindings::mmu_interval_notifier,
        cur_seq: usize,
    );

    /// `mmu_interval_read_retry()`: whether an invalidation of `sub` (initialized by
    /// `mmu_interval_notifier_insert()`) began since `seq` was read. Any context.
    pub(crate) fn vamr_mmu_interval_read_retry(
        sub: *mut bindings::mmu_interval_notifier,
        seq: usize,
    ) -> bool;

    /// `mmu_notifier_range_blockable()`: whether the invalidation of `range` (valid for the
    /// callback it is delivered to) may sleep. Any context.
    pub(crate) fn vamr_mmu_notifier_range_blockable(
        range: *const bindings::mmu_notifier_range,
    ) -> bool;

    /// A snapshot of the page table over `npages` pages from `start` of `sub`'s mm into
    /// `hmm_pfns` (room for `npages` entries): `hmm_range_fault()` with no request flags, no
    /// fault, no page reference. Returns 0, `-EBUSY` when an invalidation of `sub` began since
    /// `seq`, or another errno. Takes `mmap_lock` for reading, may sleep; `sub` is inserted and
    /// the caller holds a user reference (`mmget`) on its mm.
    pub(crate) fn vamr_snapshot(
        sub: *mut bindings::mmu_interval_notifier,
        seq: usize,
        start: usize,
        npages: usize,
        hmm_pfns: *mut usize,
    ) -> i32;

    /// The page an entry of `vamr_snapshot` maps, or NULL when nothing usable is mapped there;
    /// sets `*write` when it is mapped writable. Only decodes bits; any context.
    pub(crate) fn vamr_hmm_pfn_page(hmm_pfn: usize, write: *mut bool) -> *mut bindings::page;
}

// `src/vamr_glue.c`: the GUP shims of the pin rounds (`src/pin.rs` holds the policy).
#[allow(improper_ctypes)]
extern "C" {
    /// How current may use lockless GUP on `mm`: 1 in `mm`'s own context, 2 as a kernel thread
    /// without an mm (it must adopt `mm`, `kthread_use_mm()`), 0 not at all. Any context.
    pub(crate) fn vamr_lockless_context(mm: *mut bindings::mm_struct) -> i32;

    /// `pin_user_pages_fast()` of `npages` pages from `start` of `mm` into `pages` (room for
    /// `npages`), adopting `mm` first when `adopt`; `FOLL_NOWAIT` is dropped. Returns the pages
    /// pinned or a negative errno. May sleep unless `FOLL_NOFAULT`; the caller holds a user
    /// reference on `mm`.
    pub(crate) fn vamr_pin_fast(
        mm: *mut bindings::mm_struct,
        start: usize,
        npages: usize,
        gup_flags: u32,
        pages: *mut *mut bindings::page,
        adopt: bool,
    ) -> isize;

    /// `pin_user_pages_remote()` of at most `npages` pages from `start` of `mm` into `pages`
    /// (room for `npages`), within the VMA of `start` and at most `uffd_max` in a
    /// userfaultfd-armed one (unless `FOLL_NOFAULT`); `-EBUSY` when `FOLL_NOWAIT` meets a fault
    /// that would wait. Returns the pages pinned or a negative errno (`-EINTR`: killed while
    /// taking `mmap_lock`). Takes `mmap_lock` for reading, may sleep; the caller holds a user
    /// reference on `mm`.
    pub(crate) fn vamr_pin_remote(
        mm: *mut bindings::mm_struct,
        start: usize,
        npages: usize,
        uffd_max: usize,
        gup_flags: u32,
        pages: *mut *mut bindings::page,
    ) -> isize;

    /// `fixup_user_fault()` with retry of the page at `addr` of `mm` (for writing when
    /// `write`), waiting for a userfaultfd handler if there is one. Returns 0 or a negative
    /// errno. Takes `mmap_lock` for reading, may sleep for long; the caller holds a user
    /// reference on `mm`.
    pub(crate) fn vamr_fault_in(mm: *mut bindings::mm_struct, addr: usize, write: bool) -> i32;

    /// `cond_resched()`. May sleep: process context, no spinlock held.
    pub(crate) fn vamr_cond_resched();
}

// `src/vamr_glue.c`: the DMA mappings of mirrors (`src/mirror.rs`), static inlines of
// `<linux/dma-mapping.h>`.
#[allow(improper_ctypes)]
extern "C" {
    /// `dma_map_page()` of the whole `page` (offset 0, `PAGE_SIZE` bytes) on `dev`,
    /// `DMA_BIDIRECTIONAL` when `write`, else `DMA_TO_DEVICE`, checked with
    /// `dma_mapping_error()`: 0 with the address in `*dma`, or `-ENOMEM`. `dev` is a device the
    /// caller holds a reference to, `page` a page it holds a reference (a pin) to. Does not
    /// sleep (any context but hard IRQ); takes the IOMMU's and DMA-API debug's locks.
    pub(crate) fn vamr_dma_map_page(
        dev: *mut bindings::device,
        page: *mut bindings::page,
        write: bool,
        dma: *mut u64,
    ) -> i32;

    /// `dma_unmap_page()` of a mapping that `vamr_dma_map_page` made with the same `dev` and
    /// `write`, each mapping once. Does not sleep (an invalidate callback calls it); with a
    /// strict IOMMU it waits for the IOTLB invalidation.
    pub(crate) fn vamr_dma_unmap_page(dev: *mut bindings::device, dma: u64, write: bool);
}

// `src/vamr_glue.c`: fields and limits of the mm, the task and the module.
#[allow(improper_ctypes)]
extern "C" {
    /// `RLIMIT_MEMLOCK` of current, in pages (the unit of `mm->pinned_vm`). Any context.
    pub(crate) fn vamr_memlock_limit_pages() -> usize;

    /// Adds `npages` to `mm->pinned_vm` (atomically) and returns the new total, in pages. `mm`
    /// is a valid (at least `mmgrab`ed) mm; any context.
    pub(crate) fn vamr_pinned_vm_add(mm: *mut bindings::mm_struct, npages: isize) -> i64;

    /// Subtracts `npages` from `mm->pinned_vm` (atomically). As `vamr_pinned_vm_add`.
    pub(crate) fn vamr_pinned_vm_sub(mm: *mut bindings::mm_struct, npages: isize);

    /// `TASK_SIZE` of current: the end of the user address space, in bytes. Any context.
    pub(crate) fn vamr_task_size() -> usize;

    /// `fatal_signal_pending(current)`. Any context.
    pub(crate) fn vamr_fatal_signal_pending() -> bool;

    /// `page_address()`: the permanent kernel address of `page`, a valid page not in high
    /// memory. Any context.
    pub(crate) fn vamr_page_address(page: *mut bindings::page) -> *mut c_void;

    /// The module's own workqueue (`WQ_UNBOUND`) named `name`, a NUL-terminated string that
    /// outlives it; NULL on failure. Process context, may sleep.
    pub(crate) fn vamr_alloc_workqueue(name: *const c_char) -> *mut bindings::workqueue_struct;
}

// `src/vamr_glue.c`: the per-CPU module-wide counters and the task clock (`src/stats.rs`).
extern "C" {
    /// Adds `n` to this CPU's module-wide counter `idx` (`this_cpu_add()`; an `idx` out of
    /// range is ignored). Any context.
    pub(crate) fn vamr_global_add(idx: u32, n: u64);

    /// The module-wide counter `idx` summed over the possible CPUs; 0 for an `idx` out of
    /// range. Any context.
    pub(crate) fn vamr_global_sum(idx: u32) -> u64;
}

// `src/vamr_glue.c`: the events file, whose read, poll and release are in `src/events.rs`.
#[allow(improper_ctypes)]
extern "C" {
    /// Reserves a descriptor (`*fd`) and creates the events file of `queue`, a counted
    /// reference the file takes over; not installed yet. Returns the file, or an `ERR_PTR`
    /// (then no descriptor is reserved and the reference is still the caller's). Process
    /// context, may sleep.
    pub(crate) fn vamr_events_file(
        queue: *mut c_void,
        nonblock: bool,
        cloexec: bool,
        fd: *mut i32,
    ) -> *mut bindings::file;

    /// `fd_install()` of a `fd` and `file` pair from `vamr_events_file`, each pair once.
    /// Process context.
    pub(crate) fn vamr_events_install(fd: i32, file: *mut bindings::file);

    /// Undoes `vamr_events_file` for a pair not installed (`put_unused_fd()`, `fput()`: the
    /// file's release drops the queue reference), each pair once. Process context.
    pub(crate) fn vamr_events_discard(fd: i32, file: *mut bindings::file);

    /// Whether the address space of `mm`, a valid (at least `mmgrab`ed) mm, has exited
    /// (`mm_users` is 0). Any context.
    pub(crate) fn vamr_mm_exited(mm: *mut bindings::mm_struct) -> bool;
}

// `src/vamr_glue.c`: the C view of the uapi header, compared with `src/uapi.rs` by the KUnit
// suite `vamr_kunit_uapi`. `const` objects, never written: reading them is always sound.
extern "C" {
    /// `VAMR_ABI_VERSION`.
    pub(crate) static vamr_c_abi_version: u32;
    /// `VAMR_FEATURES_KNOWN`.
    pub(crate) static vamr_c_features_known: u64;
    /// `VAMR_ACCESS_KNOWN`.
    pub(crate) static vamr_c_access_known: u32;
    /// `VAMR_EVENT_COUNT`.
    pub(crate) static vamr_c_event_count: u32;
    /// The ioctl numbers, `VAMR_IOC_QUERY` to `VAMR_IOC_WATCH_SYNC` in the header's order.
    pub(crate) static vamr_c_ioc: [u32; 14];
    /// `VAMR_EVENT_WATCH`, `VAMR_EVENTS_RING_DEFAULT`, `VAMR_EVENTS_RING_MAX`,
    /// `VAMR_WATCH_MAX`, `VAMR_WATCH_MAP_LEN`.
    pub(crate) static vamr_c_watch_consts: [u32; 5];
}

// `src/vamr_trace.c`: emit vamr's trace events (`src/vamr_trace.h`), plain values only. Any
// context, never sleep; a call and a static branch while the event is disabled.
extern "C" {
    /// Event `vamr_register`.
    pub(crate) fn vamr_trace_register(
        start: usize,
        npages: usize,
        write: bool,
        pinned: usize,
        err: i32,
    );

    /// Event `vamr_invalidate`.
    pub(crate) fn vamr_trace_invalidate(
        start: usize,
        range_start: usize,
        range_end: usize,
        event: u32,
        marked: usize,
        dropped: usize,
        blockable: bool,
    );

    /// Event `vamr_verify`.
    pub(crate) fn vamr_trace_verify(
        start: usize,
        first: usize,
        npages: usize,
        kept: usize,
        swapped: usize,
        dropped: usize,
    );

    /// Event `vamr_repin`.
    pub(crate) fn vamr_trace_repin(
        start: usize,
        va: usize,
        npages: usize,
        pinned: usize,
        write: bool,
        access: bool,
    );

    /// Event `vamr_fault_request`.
    pub(crate) fn vamr_trace_fault_request(start: usize, va: usize, write: bool);

    /// Event `vamr_access_error`.
    pub(crate) fn vamr_trace_access_error(
        start: usize,
        va: usize,
        len: usize,
        write: bool,
        err: i32,
    );
}

// `src/vamr_limits.c`: the module parameters that bound what users create and the work in
// flight (`src/limits.rs`), read with `READ_ONCE()`. Any context.
extern "C" {
    /// The limit in force for `object` (`enum vamr_object`) per address space, or per user when
    /// `per_user`; 0 for an unknown object.
    pub(crate) fn vamr_limit(object: u32, per_user: bool) -> u32;

    /// The parameter's name (a static string) of `vamr_limit(object, per_user)`; NULL for an
    /// unknown object.
    pub(crate) fn vamr_limit_name(object: u32, per_user: bool) -> *const c_char;

    /// The per-user bound of `budget` (`enum vamr_budget`); 0 for an unknown one.
    pub(crate) fn vamr_budget_limit(budget: u32) -> u32;

    /// The parameter's name (a static string) of `vamr_budget_limit(budget)`; NULL for an
    /// unknown budget.
    pub(crate) fn vamr_budget_name(budget: u32) -> *const c_char;
}
