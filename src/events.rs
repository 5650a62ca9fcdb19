// SPDX-License-Identifier: GPL-2.0

//! The invalidation-event queue of one `/dev/vamr` file and its events files.
//!
//! Every invalidation that overlaps a region of the file queues one [`uapi::Event`] record,
//! whatever the region's pins: a user-space registration cache reads them (read()/poll() on the
//! file returned by `VAMR_IOC_EVENTS_OPEN`) to drop stale entries, for MRs of any device. The
//! queue is a ring allocated when the `/dev/vamr` file is opened (and resized only by
//! `VAMR_IOC_EVENTS_OPEN_EX`, in process context), because records are queued from the
//! invalidate callback, which must not allocate; when it is full, records are counted as lost
//! and reported by one `VAMR_EVENT_OVERFLOW` record. Monitor-mode watches (`src/watch.rs`)
//! queue their records on the same ring.

use crate::uapi;
use core::ffi::c_void;
use kernel::bindings;
use kernel::fs::File;
use kernel::prelude::*;
use kernel::sync::poll::{PollCondVar, PollTable};
use kernel::sync::{Arc, SpinLock};
use kernel::uaccess::{UserPtr, UserSlice};
use kernel::{new_poll_condvar, new_spinlock};

/// Records a new ring holds before it overflows.
pub(crate) const QUEUE_RECORDS: usize = uapi::EVENTS_RING_DEFAULT;

/// Records copied to user space per batch (on the stack, 640 bytes).
const READ_BATCH: usize = 16;

// Pointers to C structs only (see `src/notifier.rs`). Declarations: src/vamr_glue.h.
#[allow(improper_ctypes)]
extern "C" {
    fn vamr_events_file(
        queue: *mut c_void,
        nonblock: bool,
        cloexec: bool,
        fd: *mut i32,
    ) -> *mut bindings::file;
    fn vamr_events_install(fd: i32, file: *mut bindings::file);
    fn vamr_events_discard(fd: i32, file: *mut bindings::file);
}

/// The ring. `records` has between 1 and `EVENTS_RING_MAX` entries (its length is the ring's
/// size); the queued ones are `len` entries from `head`, wrapping.
struct Ring {
    records: KVVec<uapi::Event>,
    head: usize,
    len: usize,
    /// Records dropped because the ring was full, not yet reported.
    lost: u64,
    /// Records queued or lost so far; the last record's `generation`.
    generation: u64,
}

/// The event queue of one `/dev/vamr` file.
#[pin_data]
pub(crate) struct EventQueue {
    /// Lock rules: a spinlock, taken by the invalidate callback (inside the region lock) and by
    /// readers; held only to move records in or out of the ring, never across user copies.
    #[pin]
    ring: SpinLock<Ring>,
    /// Readers blocked in read() and pollers wait here.
    #[pin]
    readers: PollCondVar,
}

impl EventQueue {
    /// A new, empty queue. Errors: `ENOMEM`. May sleep.
    pub(crate) fn new() -> Result<Arc<Self>> {
        let records = KVVec::from_elem(uapi::Event::default(), QUEUE_RECORDS, GFP_KERNEL_ACCOUNT)?;
        Arc::pin_init(
            pin_init!(EventQueue {
                ring <- new_spinlock!(
                    Ring { records, head: 0, len: 0, lost: 0, generation: 0 },
                    "vamr_events_ring"
                ),
                readers <- new_poll_condvar!("vamr_events_readers"),
            }),
            GFP_KERNEL,
        )
    }

    /// Queues one record (its `generation` is assigned here) and wakes readers. Never sleeps or
    /// allocates: callable from the invalidate callback in any context.
    pub(crate) fn push(&self, mut record: uapi::Event) {
        {
            let mut ring = self.ring.lock();
            ring.generation += 1;
            let size = ring.records.len();
            if ring.len == size {
                ring.lost += 1;
            } else {
                record.generation = ring.generation;
                let tail = (ring.head + ring.len) % size;
                ring.records[tail] = record;
                ring.len += 1;
            }
        }
        self.readers.notify_all();
    }

    /// Takes up to `out.len()` records, then (if room is left) the overflow report. Returns how
    /// many entries of `out` were filled.
    fn take(&self, out: &mut [uapi::Event]) -> usize {
        let mut ring = self.ring.lock();
        let mut n = 0;
        let size = ring.records.len();
        while n < out.len() && ring.len > 0 {
            out[n] = ring.records[ring.head];
            ring.head = (ring.head + 1) % size;
            ring.len -= 1;
            n += 1;
        }
        if n < out.len() && ring.len == 0 && ring.lost > 0 {
            out[n] = uapi::Event {
                len: ring.lost,
                generation: ring.generation,
                kind: uapi::EVENT_OVERFLOW,
                ..uapi::Event::default()
            };
            ring.lost = 0;
            n += 1;
        }
        n
    }

    /// Makes the ring `size` records long (1..=[`uapi::EVENTS_RING_MAX`]), keeping the queued
    /// records, oldest first; those that do not fit count as lost. Returns the new size.
    /// Errors: `EINVAL` (size out of range), `ENOMEM`. Process context, may sleep (allocates
    /// outside the lock, charged to the caller's memory cgroup).
    pub(crate) fn resize(&self, size: usize) -> Result<usize> {
        if size == 0 || size > uapi::EVENTS_RING_MAX {
            return Err(EINVAL);
        }
        let mut records = KVVec::from_elem(uapi::Event::default(), size, GFP_KERNEL_ACCOUNT)?;
        {
            let mut ring = self.ring.lock();
            let old = ring.records.len();
            let keep = ring.len.min(size);
            for (i, slot) in records.iter_mut().enumerate().take(keep) {
                *slot = ring.records[(ring.head + i) % old];
            }
            ring.lost += (ring.len - keep) as u64;
            ring.head = 0;
            ring.len = keep;
            core::mem::swap(&mut ring.records, &mut records);
        }
        // The old ring is freed outside the spinlock.
        drop(records);
        Ok(size)
    }

    /// The ring's size in records.
    pub(crate) fn size(&self) -> usize {
        self.ring.lock().records.len()
    }

    fn is_empty(&self) -> bool {
        let ring = self.ring.lock();
        ring.len == 0 && ring.lost == 0
    }

    /// Opens an events file reading this queue: reserves a descriptor, creates the file, calls
    /// `publish(fd)` (which tells the caller the descriptor) and installs the file only if that
    /// succeeded. Errors: those of `publish`, `EMFILE`, `ENFILE`, `ENOMEM`. Process context, may
    /// sleep.
    pub(crate) fn open_file(
        self: &Arc<Self>,
        nonblock: bool,
        cloexec: bool,
        publish: impl FnOnce(i32) -> Result,
    ) -> Result {
        let raw = Arc::into_raw(self.clone()).cast_mut().cast::<c_void>();
        let mut fd = -1;
        // SAFETY: `raw` is a counted reference; on success the new file owns it (dropped by
        // `vamr_events_release`), on failure it is still ours. `fd` is a valid out pointer.
        let file = unsafe { vamr_events_file(raw, nonblock, cloexec, &mut fd) };
        if let Err(e) = kernel::error::from_err_ptr(file) {
            // SAFETY: no file was created: take the reference back.
            drop(unsafe { Arc::from_raw(raw.cast::<EventQueue>()) });
            return Err(e);
        }
        match publish(fd) {
            // SAFETY: `fd` and `file` come from `vamr_events_file` and are used once.
            Ok(()) => unsafe { vamr_events_install(fd, file) },
            Err(e) => {
                // SAFETY: as above; dropping the file releases the queue reference.
                unsafe { vamr_events_discard(fd, file) };
                return Err(e);
            }
        }
        Ok(())
    }
}

/// Borrows the queue behind an events file's `private_data`.
///
/// # Safety
///
/// `queue` must be the `private_data` of a live events file (a counted reference made by
/// [`EventQueue::open_file`] and not yet released).
unsafe fn queue_ref<'a>(queue: *mut c_void) -> &'a EventQueue {
    // SAFETY: per the function's contract the reference is alive for the call.
    unsafe { &*queue.cast::<EventQueue>() }
}

/// read() of an events file: whole records only, blocking unless `nonblock`.
/// Returns bytes read or a negative errno: `EINVAL` (buffer smaller than a record), `EAGAIN`,
/// `EINTR` (signal while blocked, restarted when the handler allows), `EFAULT`.
#[no_mangle]
extern "C" fn vamr_events_read(
    queue: *mut c_void,
    buf: *mut u8,
    len: usize,
    nonblock: bool,
) -> isize {
    // SAFETY: called by `vamr_events_fop_read` with the file's `private_data`.
    let queue = unsafe { queue_ref(queue) };
    let rec = core::mem::size_of::<uapi::Event>();
    let want = len / rec;
    if want == 0 {
        return EINVAL.to_errno() as isize;
    }
    let mut writer = UserSlice::new(UserPtr::from_addr(buf as usize), want * rec).writer();
    let mut batch = [uapi::Event::default(); READ_BATCH];
    let mut done = 0;
    while done < want {
        let n = queue.take(&mut batch[..(want - done).min(READ_BATCH)]);
        if n == 0 {
            if done > 0 {
                break;
            }
            // Nothing yet: wait for a record (another reader may take it first; then wait again).
            let mut ring = queue.ring.lock();
            while ring.len == 0 && ring.lost == 0 {
                if nonblock {
                    return EAGAIN.to_errno() as isize;
                }
                if queue.readers.wait_interruptible(&mut ring) {
                    return ERESTARTSYS.to_errno() as isize;
                }
            }
            continue;
        }
        for r in &batch[..n] {
            if let Err(e) = writer.write(r) {
                // Records already taken are lost to this reader; report what was copied.
                return if done > 0 {
                    (done * rec) as isize
                } else {
                    e.to_errno() as isize
                };
            }
            done += 1;
        }
    }
    (done * rec) as isize
}

/// poll() of an events file: registers the poller and returns whether records (or an overflow
/// report) are queued; the glue turns that into `EPOLLIN | EPOLLRDNORM`.
#[no_mangle]
extern "C" fn vamr_events_poll(
    queue: *mut c_void,
    file: *mut bindings::file,
    pt: *mut bindings::poll_table,
) -> bool {
    // SAFETY: called by `vamr_events_fop_poll` with the file's `private_data`.
    let queue = unsafe { queue_ref(queue) };
    // SAFETY: `file` is the file being polled, valid for the call; `pt` is NULL or a valid poll
    // table for the call.
    let (file, table) = unsafe { (File::from_raw_file(file), PollTable::from_raw(pt)) };
    table.register_wait(file, &queue.readers);
    !queue.is_empty()
}

/// release() of an events file: drops its reference to the queue.
#[no_mangle]
extern "C" fn vamr_events_release(queue: *mut c_void) {
    // SAFETY: `queue` is the file's counted reference made by `open_file`; release runs once.
    drop(unsafe { Arc::from_raw(queue.cast::<EventQueue>()) });
}

#[kunit_tests(vamr_kunit_events)]
mod tests {
    use super::*;

    fn record(n: u64) -> uapi::Event {
        uapi::Event {
            addr: 0x1000 * n,
            len: n,
            cookie: n ^ 0xc0ffee,
            ..uapi::Event::default()
        }
    }

    #[test]
    fn records_come_out_in_order_with_generations() {
        let q = EventQueue::new().unwrap();
        assert!(q.is_empty());
        for n in 1..=3 {
            q.push(record(n));
        }
        let mut out = [uapi::Event::default(); 2];
        assert_eq!(q.take(&mut out), 2);
        assert_eq!((out[0].addr, out[0].generation), (0x1000, 1));
        assert_eq!((out[1].cookie, out[1].generation), (2 ^ 0xc0ffee, 2));
        assert_eq!(q.take(&mut out), 1);
        assert_eq!((out[0].len, out[0].generation), (3, 3));
        assert_eq!(q.take(&mut out), 0);
        assert!(q.is_empty());
    }

    #[test]
    fn overflow_is_reported_once_after_the_ring() {
        let q = EventQueue::new().unwrap();
        let extra = 5u64;
        for n in 0..QUEUE_RECORDS as u64 + extra {
            q.push(record(n));
        }
        let mut out = [uapi::Event::default(); 64];
        let mut seen = 0u64;
        let mut overflow = None;
        loop {
            let n = q.take(&mut out);
            if n == 0 {
                break;
            }
            for r in &out[..n] {
                if r.kind == uapi::EVENT_OVERFLOW {
                    overflow = Some(*r);
                } else {
                    seen += 1;
                    assert_eq!(r.generation, seen);
                }
            }
        }
        assert_eq!(seen, QUEUE_RECORDS as u64);
        let o = overflow.unwrap();
        assert_eq!(o.len, extra);
        assert_eq!(o.generation, QUEUE_RECORDS as u64 + extra);
        // The ring wraps and works again after draining.
        q.push(record(9));
        assert_eq!(q.take(&mut out), 1);
        assert_eq!(out[0].generation, QUEUE_RECORDS as u64 + extra + 1);
    }

    #[test]
    fn resize_keeps_the_oldest_records_and_counts_the_rest_lost() {
        let q = EventQueue::new().unwrap();
        assert_eq!(q.size(), QUEUE_RECORDS);
        assert_eq!(q.resize(0), Err(EINVAL));
        assert_eq!(q.resize(uapi::EVENTS_RING_MAX + 1), Err(EINVAL));
        for n in 1..=5 {
            q.push(record(n));
        }
        assert_eq!(q.resize(3), Ok(3));
        assert_eq!(q.size(), 3);
        q.push(record(6));
        let mut out = [uapi::Event::default(); 8];
        assert_eq!(q.take(&mut out), 4);
        assert_eq!([out[0].len, out[1].len, out[2].len], [1, 2, 3]);
        // Two dropped by the resize, one more when the full ring got record 6.
        assert_eq!(
            (out[3].kind, out[3].len, out[3].generation),
            (uapi::EVENT_OVERFLOW, 3, 6)
        );
        // A small ring wraps; a larger one takes more.
        for n in 7..=11 {
            q.push(record(n));
        }
        assert_eq!(q.resize(uapi::EVENTS_RING_MAX), Ok(uapi::EVENTS_RING_MAX));
        assert_eq!(q.take(&mut out), 4);
        assert_eq!([out[0].len, out[1].len, out[2].len], [7, 8, 9]);
        assert_eq!((out[3].kind, out[3].len), (uapi::EVENT_OVERFLOW, 2));
    }
}
