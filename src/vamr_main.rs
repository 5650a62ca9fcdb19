// SPDX-License-Identifier: GPL-2.0

//! vamr: RDMA memory regions with virtual-address semantics.
//!
//! Crate root of `vamr.ko`: module metadata, the module's workqueue and the `/dev/vamr`
//! registration. The module is a composite object of this Rust crate and a small C glue file
//! (`src/vamr_glue.c`), in the way `drivers/android/binder` builds `rust_binder.ko`.

use core::ptr::NonNull;
use core::sync::atomic::{AtomicPtr, Ordering};
use kernel::bindings;
use kernel::miscdevice::{MiscDeviceOptions, MiscDeviceRegistration};
use kernel::prelude::*;
use kernel::workqueue::Queue;

mod api;
mod device;
mod events;
mod mm_state;
mod notifier;
mod pin;
mod region;
mod stats;
mod uapi;

module! {
    type: VamrModule,
    name: "vamr",
    authors: ["The vamr developers"],
    description: "RDMA memory regions with virtual-address semantics",
    license: "GPL",
}

extern "C" {
    fn vamr_alloc_workqueue() -> *mut bindings::workqueue_struct;
}

/// The module's workqueue (the per-mm verify work). Set by [`RepinQueue::new`] before `/dev/vamr`
/// exists, cleared after it is gone.
static WORKQUEUE: AtomicPtr<bindings::workqueue_struct> = AtomicPtr::new(core::ptr::null_mut());

/// The workqueue for region work items.
///
/// Only called by regions, which exist only while the module is loaded and its workqueue set
/// (they are created through `/dev/vamr`, registered after the queue and removed before it).
pub(crate) fn workqueue_get() -> &'static Queue {
    let ptr = WORKQUEUE.load(Ordering::Acquire);
    // SAFETY: `ptr` is the live workqueue allocated by `RepinQueue::new`: regions exist only
    // between its creation and `RepinQueue::drop` (see above), which destroys it last.
    unsafe { Queue::from_raw(ptr) }
}

/// Owns the module's workqueue. Dropping it drains and destroys the queue, so no work item of
/// the module runs after the module is gone.
struct RepinQueue(NonNull<bindings::workqueue_struct>);

// SAFETY: a workqueue may be used and destroyed from any thread.
unsafe impl Send for RepinQueue {}
// SAFETY: `&RepinQueue` exposes nothing.
unsafe impl Sync for RepinQueue {}

impl RepinQueue {
    fn new() -> Result<Self> {
        // SAFETY: no preconditions; returns NULL on failure.
        let wq = NonNull::new(unsafe { vamr_alloc_workqueue() }).ok_or(ENOMEM)?;
        WORKQUEUE.store(wq.as_ptr(), Ordering::Release);
        Ok(RepinQueue(wq))
    }
}

impl Drop for RepinQueue {
    fn drop(&mut self) {
        WORKQUEUE.store(core::ptr::null_mut(), Ordering::Release);
        // SAFETY: the queue was allocated by `new` and is destroyed exactly once; no region is
        // left to queue work (the misc device, and with it every open file, is gone).
        unsafe { bindings::destroy_workqueue(self.0.as_ptr()) };
    }
}

/// The module's global tables ([`api`]'s driver regions, [`mm_state`]'s per-mm state):
/// dropping it frees what they still hold, since statics are never dropped (kmemleak reported
/// the driver-region table after unload).
struct Globals;

impl Drop for Globals {
    fn drop(&mut self) {
        api::clear_registry();
        mm_state::clear();
    }
}

/// The loaded module. Fields drop in declaration order: `/dev/vamr` first, then the queue
/// (drained), then the global tables.
#[pin_data]
struct VamrModule {
    #[pin]
    _miscdev: MiscDeviceRegistration<device::VamrFile>,
    _wq: RepinQueue,
    _globals: Globals,
}

impl kernel::InPlaceModule for VamrModule {
    fn init(_module: &'static ThisModule) -> impl PinInit<Self, Error> {
        pr_info!("ABI version {}, /dev/vamr\n", uapi::ABI_VERSION);
        api::init_registry();
        mm_state::init();
        try_pin_init!(Self {
            _wq: RepinQueue::new()?,
            _globals: Globals,
            _miscdev <- MiscDeviceRegistration::register(MiscDeviceOptions { name: c"vamr" }),
        })
    }
}
