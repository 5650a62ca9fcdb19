// SPDX-License-Identifier: GPL-2.0

//! A mirror's hold on its device and on each page it maps for it: [`DevRef`] (a reference to
//! the driver's `struct device`) and [`DmaPin`] (a pinned page and its DMA mapping on that
//! device, unmapped before it is unpinned).

use crate::ffi;
use crate::pin::PinnedPage;
use core::mem::ManuallyDrop;
use core::ptr::NonNull;
use kernel::bindings;

/// A reference to the driver's `struct device` (`get_device()`), given back when dropped
/// (`put_device()`): the device every page of the mirror is mapped on.
///
/// # Invariants
///
/// `dev` points to a device on which this value holds one reference.
pub(super) struct DevRef {
    dev: NonNull<bindings::device>,
}

// A device's release may run on any thread (as `kernel::device::Device` assumes).
// SAFETY: a device reference may be dropped on any thread; the pointer only goes to the DMA API,
// which may be called from any thread.
unsafe impl Send for DevRef {}
// SAFETY: as for `Send`.
unsafe impl Sync for DevRef {}

impl DevRef {
    /// Takes a reference to `dev`.
    ///
    /// # Safety
    ///
    /// `dev` is a valid device on which the caller holds a reference during the call.
    pub(super) unsafe fn get(dev: NonNull<bindings::device>) -> Self {
        // SAFETY: per the contract the device is valid and its count is not 0.
        unsafe { bindings::get_device(dev.as_ptr()) };
        // INVARIANT: the reference just taken.
        DevRef { dev }
    }

    pub(super) fn as_raw(&self) -> *mut bindings::device {
        self.dev.as_ptr()
    }
}

impl Drop for DevRef {
    fn drop(&mut self) {
        // SAFETY: the reference this value holds (type invariant), given back once.
        unsafe { bindings::put_device(self.dev.as_ptr()) };
    }
}

/// One page of a mirror: pinned, and mapped for the mirror's device.
///
/// # Invariants
///
/// `pin` owns the page's `FOLL_PIN` reference and `dma` is the address of one mapping of that
/// page (`vamr_dma_map_page`) on the mirror's device in the mirror's direction.
/// [`DmaPin::release`] unmaps, then unpins. A `DmaPin` dropped without it keeps both (the pin
/// is `ManuallyDrop`): a page whose mapping is live is never unpinned, so the device can only
/// ever reach a page that is still pinned, not a freed one; a leak is the worst outcome of a
/// missed release.
pub(super) struct DmaPin {
    pub(super) pin: ManuallyDrop<PinnedPage>,
    pub(super) dma: bindings::dma_addr_t,
}

impl DmaPin {
    /// Unmaps the page on `dev` (the mirror's device; `write`: the mirror's direction), then
    /// unpins it: with `set_page_dirty()` inside an invalidate callback (`in_invalidation`,
    /// does not sleep), else as `PinnedPage`'s `Drop` (may sleep on the folio lock).
    pub(super) fn release(self, dev: &DevRef, write: bool, in_invalidation: bool) {
        // SAFETY: `dma` is a live mapping on the mirror's device, which `dev` holds, made with
        // `write` (type invariant); unmapped once, here.
        unsafe { ffi::vamr_dma_unmap_page(dev.as_raw(), self.dma, write) };
        let pin = ManuallyDrop::into_inner(self.pin);
        if in_invalidation {
            pin.release_in_invalidation();
        } else {
            drop(pin);
        }
    }
}
