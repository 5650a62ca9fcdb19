// SPDX-License-Identifier: GPL-2.0

//! `/dev/vamr`: the misc device's file operations and ioctl dispatch.

use crate::uapi::{self, Query};
use kernel::fs::File;
use kernel::ioctl::_IOC_SIZE;
use kernel::miscdevice::{MiscDevice, MiscDeviceRegistration};
use kernel::prelude::*;
use kernel::uaccess::{UserPtr, UserSlice};

/// State of one open file of `/dev/vamr`.
///
/// Created by `open()`, dropped at the last `close()` of the file.
pub(crate) struct VamrFile;

#[vtable]
impl MiscDevice for VamrFile {
    type Ptr = KBox<Self>;

    /// Opens `/dev/vamr`. Process context, may sleep. Errors: `ENOMEM`.
    fn open(_file: &File, _misc: &MiscDeviceRegistration<Self>) -> Result<KBox<Self>> {
        Ok(KBox::new(VamrFile, GFP_KERNEL)?)
    }

    /// Dispatches an ioctl. Process context, may sleep.
    ///
    /// Errors: `ENOTTY` for an unknown command, otherwise those of the command.
    fn ioctl(me: &VamrFile, _file: &File, cmd: u32, arg: usize) -> Result<isize> {
        let user = UserSlice::new(UserPtr::from_addr(arg), _IOC_SIZE(cmd));
        match cmd {
            uapi::IOC_QUERY => me.query(user),
            _ => Err(ENOTTY),
        }
    }
}

impl VamrFile {
    /// `VAMR_IOC_QUERY`. Errors: `EFAULT` (unreadable or unwritable argument), `EINVAL` (see
    /// [`Query::answer`]).
    fn query(&self, user: UserSlice) -> Result<isize> {
        let (mut reader, mut writer) = user.reader_writer();
        let request: Query = reader.read()?;
        writer.write(&Query::answer(&request)?)?;
        Ok(0)
    }
}
