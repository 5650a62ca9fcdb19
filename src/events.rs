// SPDX-License-Identifier: GPL-2.0

//! The invalidation-event queue of one `/dev/vamr` file and its events files.
//!
//! Every invalidation that overlaps a region of the file queues one [`uapi::EventRecord`],
//! whatever the region's pins: a user-space registration cache reads them (read()/poll() on the
//! file returned by `VAMR_IOC_EVENTS_OPEN`) to drop stale entries, for MRs of any device. The
//! queue is a ring allocated when the `/dev/vamr` file is opened (and resized only by
//! `VAMR_IOC_EVENTS_OPEN_EX`, in process context), because records are queued from the
//! invalidate callback, which must not allocate; when it is full, records are counted as lost
//! and reported by one `VAMR_EVENT_OVERFLOW` record. Monitor-mode watches (`src/watch.rs`)
//! queue their records on the same ring.
//!
//! Bounded. A ring's records count under the `max_event_records_per_mm` and
//! `max_event_records_per_user` limits (`src/limits.rs`) of the file's address space and
//! opener, from the file's open (the default size) and at each resize; they are given back
//! when the queue goes (the `/dev/vamr` file and its events files all closed). A batch of
//! records (one invalidation seen by the watches of a group, `src/watch.rs`) is queued under
//! one hold of the ring lock with one wakeup, and only as many records as the ring has room
//! for are written: the rest are counted as lost in one step.
//!
//! No record is lost on the way out: a reader copies records out of the ring under its lock
//! into a kernel buffer, copies them to user space without the lock, and only then removes,
//! under the lock, the records whose copy succeeded. One reader at a time does this (the
//! ring's *read token*), so that two readers never deliver the same record; the records a
//! faulting copy did not reach stay queued.
//!
//! The queue *hangs up* when its `/dev/vamr` file is released or the file's address space has
//! exited: no record can be queued any more. poll() then reports `EPOLLHUP`, and read() returns
//! 0 once the queued records are read; blocked readers and pollers are woken.

use crate::charge::Charge;
use crate::ffi;
use crate::uapi;
use core::ffi::c_void;
use kernel::bindings;
use kernel::fs::File;
use kernel::mm::Mm;
use kernel::prelude::*;
use kernel::sync::poll::{PollCondVar, PollTable};
use kernel::sync::{aref::ARef, Arc, SpinLock};
use kernel::uaccess::{UserPtr, UserSlice};
use kernel::{new_poll_condvar, new_spinlock};

/// Records a new ring holds before it overflows.
pub(crate) const QUEUE_RECORDS: usize = uapi::EVENTS_RING_DEFAULT;

/// Records copied to user space per batch (on the stack, 640 bytes).
const READ_BATCH: usize = 16;

/// Bits of [`vamr_events_poll`]'s answer (`VAMR_EVENTS_POLL_*` in src/vamr_glue.h).
const POLL_IN: u32 = 1 << 0;
const POLL_HUP: u32 = 1 << 1;

/// The ring. `records` has between 1 and `EVENTS_RING_MAX` entries (its length is the ring's
/// size); the queued ones are `len` entries from `head`, wrapping.
///
/// # Invariants
///
/// The queued records have increasing `generation`s, all at most `generation`. While `reading`
/// is set, only the token's holder removes records and the ring is not resized.
struct Ring {
    records: KVVec<uapi::EventRecord>,
    head: usize,
    len: usize,
    /// Records dropped because the ring was full, not yet reported.
    lost: u64,
    /// Records queued or lost so far; the last record's `generation`.
    generation: u64,
    /// The read token: a reader is between [`Ring::peek`] and [`Ring::consume`].
    reading: bool,
    /// The `/dev/vamr` file was released: no record will be queued any more.
    closed: bool,
    /// The ring's records under the per-mm and per-user limits (`records.len()` units); `None`
    /// for a queue of no file (KUnit).
    charge: Option<Charge>,
}

impl Ring {
    /// Whether a read would return something: records or an overflow report.
    fn readable(&self) -> bool {
        self.len > 0 || self.lost > 0
    }

    /// Queues `record` with the next generation, or counts it lost when the ring is full.
    fn push(&mut self, mut record: uapi::EventRecord) {
        self.generation += 1;
        let size = self.records.len();
        if self.len == size {
            self.lost += 1;
        } else {
            record.generation = self.generation;
            let tail = (self.head + self.len) % size;
            self.records[tail] = record;
            self.len += 1;
        }
    }

    /// Queues `n` records, those `records` yields, as `n` calls of [`Ring::push`] would: the
    /// first ones while there is room, the others counted lost. Writes at most the ring's free
    /// room, whatever `n`; `records` is not asked for more.
    fn push_many(&mut self, n: usize, records: impl Iterator<Item = uapi::EventRecord>) {
        let room = self.records.len() - self.len;
        let mut queued = 0;
        for record in records.take(n.min(room)) {
            self.push(record);
            queued += 1;
        }
        let lost = (n - queued) as u64;
        self.generation += lost;
        self.lost += lost;
    }

    /// Copies up to `out.len()` records from the head into `out`, leaving them queued, then (if
    /// room is left and every queued record fitted) the overflow report. Returns how many
    /// entries of `out` were filled.
    fn peek(&self, out: &mut [uapi::EventRecord]) -> usize {
        let size = self.records.len();
        let n = out.len().min(self.len);
        for (i, slot) in out.iter_mut().enumerate().take(n) {
            *slot = self.records[(self.head + i) % size];
        }
        if n < out.len() && n == self.len && self.lost > 0 {
            out[n] = uapi::EventRecord {
                len: self.lost,
                generation: self.generation,
                kind: uapi::EVENT_OVERFLOW,
                ..uapi::EventRecord::default()
            };
            return n + 1;
        }
        n
    }

    /// Removes what `delivered` (a prefix of what [`Ring::peek`] gave, with the ring unchanged
    /// since but for pushes) holds: its records from the head, and the losses its overflow
    /// report counted (records lost since stay counted for the next report).
    fn consume(&mut self, delivered: &[uapi::EventRecord]) {
        let size = self.records.len();
        for r in delivered {
            if r.kind == uapi::EVENT_OVERFLOW {
                self.lost -= r.len.min(self.lost);
            } else if self.len > 0 {
                debug_assert_eq!(self.records[self.head].generation, r.generation);
                self.head = (self.head + 1) % size;
                self.len -= 1;
            }
        }
    }
}

/// The event queue of one `/dev/vamr` file.
#[pin_data]
pub(crate) struct EventQueue {
    /// Lock rules: a spinlock, taken by the invalidate callback (inside the region lock) and by
    /// readers; held only to move records in or out of the ring, never across user copies
    /// (readers copy into a kernel buffer under it and to user space after it is dropped).
    /// The read token in it serialises readers over that copy.
    #[pin]
    ring: SpinLock<Ring>,
    /// Readers blocked in read(), readers waiting for the read token, a resize waiting for it,
    /// and pollers wait here.
    #[pin]
    readers: PollCondVar,
    /// The address space of the `/dev/vamr` file (`mmgrab`): once it has exited, no record
    /// comes any more. `None` for a queue without one (KUnit).
    owner: Option<ARef<Mm>>,
}

/// The read token of an [`EventQueue`], held by one reader; dropping it hands the ring to the
/// next reader.
///
/// # Invariants
///
/// `queue.ring.reading` was set by [`EventQueue::begin_read`] for this token.
struct ReadToken<'a> {
    queue: &'a EventQueue,
}

impl ReadToken<'_> {
    /// See [`Ring::peek`].
    fn peek(&self, out: &mut [uapi::EventRecord]) -> usize {
        self.queue.ring.lock().peek(out)
    }

    /// See [`Ring::consume`]. The token keeps other readers and resizes away since the peek.
    fn consume(&self, delivered: &[uapi::EventRecord]) {
        self.queue.ring.lock().consume(delivered);
    }
}

impl Drop for ReadToken<'_> {
    fn drop(&mut self) {
        self.queue.ring.lock().reading = false;
        self.queue.readers.notify_all();
    }
}

impl EventQueue {
    /// A new, empty queue of [`QUEUE_RECORDS`] records, of a file opened in `owner`. `charge`
    /// holds those records under the limits (see the module documentation; its size must be
    /// [`QUEUE_RECORDS`]). Errors: `ENOMEM`. May sleep.
    pub(crate) fn new(owner: Option<&Mm>, charge: Option<Charge>) -> Result<Arc<Self>> {
        let records = KVVec::from_elem(
            uapi::EventRecord::default(),
            QUEUE_RECORDS,
            GFP_KERNEL_ACCOUNT,
        )?;
        Arc::pin_init(
            pin_init!(EventQueue {
                ring <- new_spinlock!(
                    Ring {
                        records,
                        head: 0,
                        len: 0,
                        lost: 0,
                        generation: 0,
                        reading: false,
                        closed: false,
                        charge,
                    },
                    "vamr_events_ring"
                ),
                readers <- new_poll_condvar!("vamr_events_readers"),
                owner: owner.map(ARef::from),
            }),
            GFP_KERNEL_ACCOUNT,
        )
    }

    /// Queues one record (its `generation` is assigned here) and wakes readers. Never sleeps or
    /// allocates: callable from the invalidate callback in any context.
    pub(crate) fn push(&self, record: uapi::EventRecord) {
        self.ring.lock().push(record);
        self.readers.notify_all();
    }

    /// Queues `n` records, those `records` yields (see [`Ring::push_many`]: at most the ring's
    /// free room is written), under one hold of the ring lock, and wakes readers once. Never
    /// sleeps or allocates: callable from the invalidate callback in any context.
    pub(crate) fn push_many(&self, n: usize, records: impl Iterator<Item = uapi::EventRecord>) {
        if n == 0 {
            return;
        }
        self.ring.lock().push_many(n, records);
        self.readers.notify_all();
    }

    /// Hangs the queue up: its `/dev/vamr` file is released (called after its regions and
    /// watches are gone). Wakes every reader and poller. Never sleeps.
    pub(crate) fn hang_up(&self) {
        self.ring.lock().closed = true;
        self.readers.notify_all();
    }

    /// Whether no record can come any more: the file is released or its address space exited
    /// (whose `MMU_NOTIFY_RELEASE` records woke the readers of its regions and watches).
    fn hung_up(&self, ring: &Ring) -> bool {
        ring.closed
            || self.owner.as_ref().is_some_and(|mm| {
                // SAFETY: `mm` is a counted (`mmgrab`) `mm_struct`; reading `mm_users` is safe
                // whatever its value.
                unsafe { ffi::vamr_mm_exited(mm.as_raw()) }
            })
    }

    /// Waits until there is something to read and takes the read token. Returns `None` when the
    /// queue is hung up and empty (end of file). Errors: `EAGAIN` (`nonblock` and nothing to
    /// read, or another reader holds the token), `ERESTARTSYS` (a signal while waiting).
    /// Process context; sleeps unless `nonblock`.
    fn begin_read(&self, nonblock: bool) -> Result<Option<ReadToken<'_>>> {
        let mut ring = self.ring.lock();
        loop {
            if ring.readable() && !ring.reading {
                ring.reading = true;
                // INVARIANT: `reading` was set just now, for this token.
                return Ok(Some(ReadToken { queue: self }));
            }
            if !ring.readable() && self.hung_up(&ring) {
                return Ok(None);
            }
            if nonblock {
                return Err(EAGAIN);
            }
            // Woken by a push, by the token's release or by the hang-up.
            if self.readers.wait_interruptible(&mut ring) {
                return Err(ERESTARTSYS);
            }
        }
    }

    /// Makes the ring `size` records long (1..=[`uapi::EVENTS_RING_MAX`]), keeping the queued
    /// records, oldest first; those that do not fit count as lost. Waits until no reader is
    /// copying records out. Returns the new size. Errors: `EINVAL` (size out of range),
    /// `ENOSPC` (the new size would pass `max_event_records_per_mm` or `_per_user`: the ring
    /// stays as it was), `ENOMEM`, `ERESTARTSYS` (a signal while a reader copies). Process
    /// context, may sleep (allocates outside the lock, charged to the caller's memory
    /// cgroup).
    pub(crate) fn resize(&self, size: usize) -> Result<usize> {
        if size == 0 || size > uapi::EVENTS_RING_MAX {
            return Err(EINVAL);
        }
        let mut records = KVVec::from_elem(uapi::EventRecord::default(), size, GFP_KERNEL_ACCOUNT)?;
        {
            let mut ring = self.ring.lock();
            // A reader's peeked records must stay where it left them (type invariant).
            while ring.reading {
                if self.readers.wait_interruptible(&mut ring) {
                    drop(ring);
                    drop(records);
                    return Err(ERESTARTSYS);
                }
            }
            // Never sleeps: only the counts change.
            if let Some(Err(e)) = ring.charge.as_mut().map(|c| c.resize(size)) {
                drop(ring);
                drop(records);
                return Err(e);
            }
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
        let file = unsafe { ffi::vamr_events_file(raw, nonblock, cloexec, &mut fd) };
        if let Err(e) = kernel::error::from_err_ptr(file) {
            // SAFETY: no file was created: take the reference back.
            drop(unsafe { Arc::from_raw(raw.cast::<EventQueue>()) });
            return Err(e);
        }
        match publish(fd) {
            // SAFETY: `fd` and `file` come from `vamr_events_file` and are used once.
            Ok(()) => unsafe { ffi::vamr_events_install(fd, file) },
            Err(e) => {
                // SAFETY: as above; dropping the file releases the queue reference.
                unsafe { ffi::vamr_events_discard(fd, file) };
                return Err(e);
            }
        }
        Ok(())
    }

    /// read() of the queue into `len` bytes at `buf`: see [`vamr_events_read`].
    fn read(&self, buf: usize, len: usize, nonblock: bool) -> Result<usize> {
        let rec = core::mem::size_of::<uapi::EventRecord>();
        let want = len / rec;
        if want == 0 {
            return Err(EINVAL);
        }
        let Some(token) = self.begin_read(nonblock)? else {
            return Ok(0);
        };
        let mut writer = UserSlice::new(UserPtr::from_addr(buf), want * rec).writer();
        let mut batch = [uapi::EventRecord::default(); READ_BATCH];
        let mut done = 0;
        while done < want {
            let n = token.peek(&mut batch[..(want - done).min(READ_BATCH)]);
            if n == 0 {
                break;
            }
            // No lock held: the copy may fault, sleep, or invalidate a region of this file
            // (whose record is pushed meanwhile).
            let copied = batch[..n]
                .iter()
                .position(|r| writer.write(r).is_err())
                .unwrap_or(n);
            token.consume(&batch[..copied]);
            done += copied;
            if copied < n {
                // The records not copied stay queued for the next read.
                return if done > 0 {
                    Ok(done * rec)
                } else {
                    Err(EFAULT)
                };
            }
        }
        Ok(done * rec)
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

/// read() of an events file: whole records only (`len / sizeof(struct vamr_event)` at most),
/// blocking unless `nonblock`. A record leaves the queue only once it was copied to `buf`.
/// Returns bytes read, 0 when the queue is hung up and empty (end of file), or a negative
/// errno: `EINVAL` (buffer smaller than a record), `EAGAIN` (`nonblock`, nothing to read or
/// another reader is copying), `ERESTARTSYS` (signal while blocked, restarted when the handler
/// allows), `EFAULT` (not even the first record could be copied; a fault after some records
/// returns their bytes). Process context, may sleep; no lock held.
#[no_mangle]
extern "C" fn vamr_events_read(
    queue: *mut c_void,
    buf: *mut u8,
    len: usize,
    nonblock: bool,
) -> isize {
    // SAFETY: called by `vamr_events_fop_read` with the file's `private_data`.
    let queue = unsafe { queue_ref(queue) };
    match queue.read(buf as usize, len, nonblock) {
        // At most `len`, which fits in `isize` (the VFS caps reads at `MAX_RW_COUNT`).
        Ok(n) => n as isize,
        Err(e) => e.to_errno() as isize,
    }
}

/// poll() of an events file: registers the poller and returns `POLL_IN` while records (or an
/// overflow report) are queued, `POLL_HUP` once the queue is hung up; the glue turns them into
/// `EPOLLIN | EPOLLRDNORM` and `EPOLLHUP`. Never sleeps.
#[no_mangle]
extern "C" fn vamr_events_poll(
    queue: *mut c_void,
    file: *mut bindings::file,
    pt: *mut bindings::poll_table,
) -> u32 {
    // SAFETY: called by `vamr_events_fop_poll` with the file's `private_data`.
    let queue = unsafe { queue_ref(queue) };
    // SAFETY: `file` is the file being polled, valid for the call; `pt` is NULL or a valid poll
    // table for the call.
    let (file, table) = unsafe { (File::from_raw_file(file), PollTable::from_raw(pt)) };
    table.register_wait(file, &queue.readers);
    let ring = queue.ring.lock();
    let mut mask = 0;
    if ring.readable() {
        mask |= POLL_IN;
    }
    if queue.hung_up(&ring) {
        mask |= POLL_HUP;
    }
    mask
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

    fn record(n: u64) -> uapi::EventRecord {
        uapi::EventRecord {
            addr: 0x1000 * n,
            len: n,
            cookie: n ^ 0xc0ffee,
            ..uapi::EventRecord::default()
        }
    }

    /// What a read of `out.len()` records whose copy always succeeds removes.
    fn take(q: &EventQueue, out: &mut [uapi::EventRecord]) -> usize {
        let mut ring = q.ring.lock();
        let n = ring.peek(out);
        ring.consume(&out[..n]);
        n
    }

    fn is_empty(q: &EventQueue) -> bool {
        !q.ring.lock().readable()
    }

    #[test]
    fn records_come_out_in_order_with_generations() {
        let q = EventQueue::new(None, None).unwrap();
        assert!(is_empty(&q));
        for n in 1..=3 {
            q.push(record(n));
        }
        let mut out = [uapi::EventRecord::default(); 2];
        assert_eq!(take(&q, &mut out), 2);
        assert_eq!((out[0].addr, out[0].generation), (0x1000, 1));
        assert_eq!((out[1].cookie, out[1].generation), (2 ^ 0xc0ffee, 2));
        assert_eq!(take(&q, &mut out), 1);
        assert_eq!((out[0].len, out[0].generation), (3, 3));
        assert_eq!(take(&q, &mut out), 0);
        assert!(is_empty(&q));
    }

    #[test]
    fn a_record_leaves_only_when_consumed() {
        let q = EventQueue::new(None, None).unwrap();
        for n in 1..=5 {
            q.push(record(n));
        }
        let mut out = [uapi::EventRecord::default(); 4];
        let mut ring = q.ring.lock();
        assert_eq!(ring.peek(&mut out), 4);
        // A copy that faulted after two records: the other three stay, in order.
        ring.consume(&out[..2]);
        assert_eq!(ring.len, 3);
        assert_eq!(ring.peek(&mut out), 3);
        assert_eq!([out[0].len, out[1].len, out[2].len], [3, 4, 5]);
        // Nothing copied: nothing removed.
        ring.consume(&[]);
        assert_eq!(ring.peek(&mut out[..1]), 1);
        assert_eq!(out[0].generation, 3);
    }

    #[test]
    fn overflow_is_reported_once_after_the_ring() {
        let q = EventQueue::new(None, None).unwrap();
        let extra = 5u64;
        for n in 0..QUEUE_RECORDS as u64 + extra {
            q.push(record(n));
        }
        let mut out = [uapi::EventRecord::default(); 64];
        let mut seen = 0u64;
        let mut overflow = None;
        loop {
            let n = take(&q, &mut out);
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
        assert_eq!(take(&q, &mut out), 1);
        assert_eq!(out[0].generation, QUEUE_RECORDS as u64 + extra + 1);
    }

    #[test]
    fn losses_during_a_copy_stay_counted() {
        let q = EventQueue::new(None, None).unwrap();
        assert_eq!(q.resize(2), Ok(2));
        for n in 1..=3 {
            q.push(record(n));
        }
        let mut out = [uapi::EventRecord::default(); 4];
        let mut ring = q.ring.lock();
        assert_eq!(ring.peek(&mut out), 3);
        assert_eq!(
            (out[2].kind, out[2].len, out[2].generation),
            (uapi::EVENT_OVERFLOW, 1, 3)
        );
        // Two more lost while the reader copies (the ring is still full), then it consumes.
        ring.push(record(4));
        ring.push(record(5));
        ring.consume(&out[..3]);
        assert_eq!((ring.len, ring.lost), (0, 2));
        assert_eq!(ring.peek(&mut out), 1);
        assert_eq!(
            (out[0].kind, out[0].len, out[0].generation),
            (uapi::EVENT_OVERFLOW, 2, 5)
        );
        // An overflow report that was not copied stays whole.
        ring.consume(&[]);
        assert_eq!(ring.lost, 2);
        // A report that did not fit behind the records waits for them.
        drop(ring);
        q.push(record(6));
        assert_eq!(q.ring.lock().peek(&mut out[..1]), 1);
        assert_eq!(out[0].len, 6);
    }

    #[test]
    fn hang_up_ends_reads_once_drained() {
        let q = EventQueue::new(None, None).unwrap();
        q.push(record(1));
        q.hang_up();
        assert!(q.hung_up(&q.ring.lock()));
        let t = q.begin_read(true).unwrap().unwrap();
        assert!(q.begin_read(true).is_err());
        let mut out = [uapi::EventRecord::default(); 2];
        assert_eq!(t.peek(&mut out), 1);
        t.consume(&out[..1]);
        drop(t);
        assert!(q.begin_read(true).unwrap().is_none());
        assert!(q.begin_read(false).unwrap().is_none());
    }

    #[test]
    fn resize_keeps_the_oldest_records_and_counts_the_rest_lost() {
        let q = EventQueue::new(None, None).unwrap();
        assert_eq!(q.size(), QUEUE_RECORDS);
        assert_eq!(q.resize(0), Err(EINVAL));
        assert_eq!(q.resize(uapi::EVENTS_RING_MAX + 1), Err(EINVAL));
        for n in 1..=5 {
            q.push(record(n));
        }
        assert_eq!(q.resize(3), Ok(3));
        assert_eq!(q.size(), 3);
        q.push(record(6));
        let mut out = [uapi::EventRecord::default(); 8];
        assert_eq!(take(&q, &mut out), 4);
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
        assert_eq!(take(&q, &mut out), 4);
        assert_eq!([out[0].len, out[1].len, out[2].len], [7, 8, 9]);
        assert_eq!((out[3].kind, out[3].len), (uapi::EVENT_OVERFLOW, 2));
    }

    #[test]
    fn a_batch_writes_only_the_room_and_counts_the_rest_lost() {
        let q = EventQueue::new(None, None).unwrap();
        assert_eq!(q.resize(4), Ok(4));
        q.push(record(1));
        let mut asked = 0;
        q.push_many(
            10,
            (2..12).map(|n| {
                asked += 1;
                record(n)
            }),
        );
        // Only the room (3 records) was asked for; the other 7 are lost in one step.
        assert_eq!(asked, 3);
        q.push_many(0, core::iter::empty());
        let mut out = [uapi::EventRecord::default(); 8];
        assert_eq!(take(&q, &mut out), 5);
        for (i, r) in out[..4].iter().enumerate() {
            assert_eq!((r.len, r.generation), (i as u64 + 1, i as u64 + 1));
        }
        assert_eq!(
            (out[4].kind, out[4].len, out[4].generation),
            (uapi::EVENT_OVERFLOW, 7, 11)
        );
        // Generations go on after the batch as after single pushes.
        q.push(record(12));
        assert_eq!(take(&q, &mut out), 1);
        assert_eq!(out[0].generation, 12);
    }
}
