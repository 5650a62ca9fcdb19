// SPDX-License-Identifier: GPL-2.0

//! vamr: RDMA memory regions with virtual-address semantics.
//!
//! Crate root of `vamr.ko`: module metadata and the `/dev/vamr` registration. The module is a
//! composite object of this Rust crate and a small C glue file (`src/vamr_glue.c`), in the way
//! `drivers/android/binder` builds `rust_binder.ko`.

use kernel::miscdevice::{MiscDeviceOptions, MiscDeviceRegistration};
use kernel::prelude::*;

mod device;
mod uapi;

module! {
    type: VamrModule,
    name: "vamr",
    authors: ["The vamr developers"],
    description: "RDMA memory regions with virtual-address semantics",
    license: "GPL",
}

/// The loaded module: owns the `/dev/vamr` registration for as long as the module is loaded.
#[pin_data]
struct VamrModule {
    #[pin]
    _miscdev: MiscDeviceRegistration<device::VamrFile>,
}

impl kernel::InPlaceModule for VamrModule {
    fn init(_module: &'static ThisModule) -> impl PinInit<Self, Error> {
        pr_info!("ABI version {}, /dev/vamr\n", uapi::ABI_VERSION);
        try_pin_init!(Self {
            _miscdev <- MiscDeviceRegistration::register(MiscDeviceOptions { name: c"vamr" }),
        })
    }
}
