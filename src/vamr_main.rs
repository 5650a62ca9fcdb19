// SPDX-License-Identifier: GPL-2.0

//! vamr: RDMA memory regions with virtual-address semantics.
//!
//! Crate root of `vamr.ko`: module metadata, the module's workqueue and the `/dev/vamr`
//! registration. The module is a composite object of this Rust crate and a small C glue file
//! (`src/vamr_glue.c`), in the way `drivers/android/binder` builds `rust_binder.ko`.

use core::ptr::NonNull;
use kernel::bindings;
use kernel::debugfs::{Dir, File};
use kernel::miscdevice::{MiscDeviceOptions, MiscDeviceRegistration};
use kernel::prelude::*;
use kernel::sync::atomic::{Acquire, Atomic, Release};
use kernel::workqueue::Queue;

mod api;
mod charge;
mod device;
mod events;
mod ffi;
mod handles;
mod limits;
mod mirror;
mod mm_state;
mod notifier;
mod pin;
mod rdma_devices;
mod region;
mod stats;
mod trace;
mod uapi;
mod watch;

module! {
    type: VamrModule,
    name: "vamr",
    authors: ["The vamr developers"],
    description: "RDMA memory regions with virtual-address semantics",
    license: "GPL",
}

/// The queue of the per-mm verify work. Set by [`ModuleQueue::new`] before `/dev/vamr` exists,
/// cleared after it is gone.
static WORKQUEUE: Atomic<*mut bindings::workqueue_struct> = Atomic::new(core::ptr::null_mut());

/// The queue of fault requests, apart from [`WORKQUEUE`]: a fault request may wait for a
/// userfaultfd handler for as long as the process lets it, and must never hold up the verify
/// pass of other processes.
static FAULT_WORKQUEUE: Atomic<*mut bindings::workqueue_struct> =
    Atomic::new(core::ptr::null_mut());

/// The queue in `slot`.
///
/// Only called by regions and per-mm state, which exist only while the module is loaded and
/// its queues set (they are created through `/dev/vamr` or the API, after the queues, and gone
/// before them).
fn queue_get(slot: &Atomic<*mut bindings::workqueue_struct>) -> &'static Queue {
    let ptr = slot.load(Acquire);
    // SAFETY: `ptr` is a live workqueue allocated by `ModuleQueue::new`: its users exist only
    // between its creation and `ModuleQueue::drop` (see above), which destroys it last.
    unsafe { Queue::from_raw(ptr) }
}

/// The queue for the per-mm verify work.
pub(crate) fn workqueue_get() -> &'static Queue {
    queue_get(&WORKQUEUE)
}

/// The queue for fault requests.
pub(crate) fn fault_workqueue_get() -> &'static Queue {
    queue_get(&FAULT_WORKQUEUE)
}

/// Owns one of the module's workqueues. Dropping it drains and destroys the queue, so no work
/// item of the module runs after the module is gone.
struct ModuleQueue {
    wq: NonNull<bindings::workqueue_struct>,
    slot: &'static Atomic<*mut bindings::workqueue_struct>,
}

// SAFETY: a workqueue may be used and destroyed from any thread.
unsafe impl Send for ModuleQueue {}
// SAFETY: `&ModuleQueue` exposes nothing.
unsafe impl Sync for ModuleQueue {}

impl ModuleQueue {
    fn new(
        name: &'static CStr,
        slot: &'static Atomic<*mut bindings::workqueue_struct>,
    ) -> Result<Self> {
        // SAFETY: `name` is a NUL-terminated string that lives forever; returns NULL on failure.
        let wq = unsafe { ffi::vamr_alloc_workqueue(name.as_char_ptr()) };
        let wq = NonNull::new(wq).ok_or(ENOMEM)?;
        slot.store(wq.as_ptr(), Release);
        Ok(ModuleQueue { wq, slot })
    }
}

impl Drop for ModuleQueue {
    fn drop(&mut self) {
        self.slot.store(core::ptr::null_mut(), Release);
        // SAFETY: the queue was allocated by `new` and is destroyed exactly once; no region is
        // left to queue work (the misc device, and with it every open file, is gone).
        unsafe { bindings::destroy_workqueue(self.wq.as_ptr()) };
    }
}

/// The module's global tables ([`api`]'s driver regions, [`mm_state`]'s per-mm state):
/// dropping it frees what they still hold, since statics are never dropped (kmemleak reported
/// the driver-region table after unload).
struct Globals;

impl Drop for Globals {
    fn drop(&mut self) {
        rdma_devices::clear();
        mm_state::clear();
        limits::clear();
    }
}

/// Waits at module exit until no verify timer is armed ([`mm_state::wait_for_timers`]), so
/// that the queue it would queue work on is still there when it fires.
struct VerifyTimers;

impl Drop for VerifyTimers {
    fn drop(&mut self) {
        mm_state::wait_for_timers();
    }
}

/// The loaded module. Fields drop in declaration order: `/dev/vamr` first, then the verify
/// timers (waited for), then the queue (drained), then the global tables.
#[pin_data]
struct VamrModule {
    #[pin]
    _miscdev: MiscDeviceRegistration<device::VamrFile>,
    _verify_timers: VerifyTimers,
    _wq: ModuleQueue,
    _fault_wq: ModuleQueue,
    _globals: Globals,
    /// debugfs `vamr/users` (each user's counts under the per-user limits,
    /// `limits::debugfs_users`; `None` when it could not be allocated: a diagnostic only),
    /// then its directory.
    _users: Option<Pin<KBox<File<()>>>>,
    _debugfs: Dir,
}

impl kernel::InPlaceModule for VamrModule {
    fn init(_module: &'static ThisModule) -> impl PinInit<Self, Error> {
        pr_info!("ABI version {}, /dev/vamr\n", uapi::ABI_VERSION);
        rdma_devices::init();
        mm_state::init();
        limits::init();
        let debugfs = Dir::new(c"vamr");
        let users = KBox::pin_init(
            debugfs.read_callback_file(c"users", (), &limits::debugfs_users),
            GFP_KERNEL,
        )
        .ok();
        try_pin_init!(Self {
            _verify_timers: VerifyTimers,
            _wq: ModuleQueue::new(c"vamr", &WORKQUEUE)?,
            _fault_wq: ModuleQueue::new(c"vamr_fault", &FAULT_WORKQUEUE)?,
            _globals: Globals,
            _users: users,
            _debugfs: debugfs,
            _miscdev <- MiscDeviceRegistration::register(MiscDeviceOptions { name: c"vamr" }),
        })
    }
}
