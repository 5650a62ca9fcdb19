// SPDX-License-Identifier: GPL-2.0

//! Handle tables: the small integers by which user space names what one open `/dev/vamr` file
//! holds (its regions, its watches).
//!
//! A handle is *free*, *reserved* or *live*. A creation reserves the lowest free handle first
//! ([`HandleTable::reserve`]), so that it can hand the handle out (in the ioctl's reply, in the
//! events of the new object) before the object is in the table, and then fills it or lets the
//! [`Reservation`] go, which frees it. Handles come from an [`IdPool`] (binder's pattern: no
//! scan of the table, the bitmap grows outside the lock).

use kernel::id_pool::IdPool;
use kernel::prelude::*;
use kernel::sync::{LockClassKey, Mutex};

/// An entry of a [`HandleTable`]; the index is the handle.
enum Slot<T> {
    /// A free handle.
    Free,
    /// Taken by a [`Reservation`].
    Reserved,
    /// A live entry.
    Live(T),
}

/// The entries of a [`HandleTable`] and their pool of handles.
///
/// # Invariants
///
/// A handle's bit is set in `ids` exactly when `slots[handle]` is not [`Slot::Free`]; each
/// [`Slot::Reserved`] belongs to exactly one [`Reservation`].
struct Slots<T> {
    slots: KVec<Slot<T>>,
    ids: IdPool,
}

impl<T> Slots<T> {
    /// Takes the live entry `handle` out, leaving its slot `Reserved` (the caller frees it or
    /// hands it to a [`Reservation`]); `None` when it is not live.
    fn take_live(&mut self, handle: usize) -> Option<T> {
        match self.slots.get_mut(handle) {
            Some(slot @ Slot::Live(_)) => match core::mem::replace(slot, Slot::Reserved) {
                Slot::Live(value) => Some(value),
                _ => None,
            },
            _ => None,
        }
    }

    /// Frees `handle` (its slot leaves `Reserved` or `Live`); returns what it held.
    fn free(&mut self, handle: usize) -> Slot<T> {
        let old = core::mem::replace(&mut self.slots[handle], Slot::Free);
        // INVARIANT: the bit is cleared together with the slot becoming `Free`.
        self.ids.release_id(handle);
        old
    }
}

/// `T`s by handle, at most `MAX` of them (handles `0..MAX`), the lowest free handle first.
///
/// # Invariants
///
/// Every handle that is not free is below `MAX` (and `slots` has an entry for it).
#[pin_data]
pub(crate) struct HandleTable<T, const MAX: usize> {
    /// The entries. Lock rules: held only inside the methods of this type and of
    /// [`Reservation`], to look up, reserve, fill or take out an entry (allocating under it is
    /// fine: no path that reclaim or an invalidation runs takes it); no `T` is dropped under it
    /// (an entry taken out is handed to the caller, to drop after the lock), so a `T` whose
    /// drop sleeps or takes other locks is fine. Nothing but the closure of
    /// [`HandleTable::get`] runs under it.
    #[pin]
    slots: Mutex<Slots<T>>,
}

impl<T, const MAX: usize> HandleTable<T, MAX> {
    /// An empty table whose lock is named `name` for lockdep, in the class `key`.
    pub(crate) fn new(name: &'static CStr, key: Pin<&'static LockClassKey>) -> impl PinInit<Self> {
        pin_init!(HandleTable {
            slots <- Mutex::new(
                Slots {
                    slots: KVec::new(),
                    ids: IdPool::new(),
                },
                name,
                key
            ),
        })
    }

    /// Reserves the lowest free handle. Errors: `ENOSPC` when handles `0..MAX` are all taken,
    /// `ENOMEM`. Process context, may sleep.
    pub(crate) fn reserve(&self) -> Result<Reservation<'_, T, MAX>> {
        let mut guard = self.slots.lock();
        loop {
            let Slots { slots, ids } = &mut *guard;
            if let Some(unused) = ids.find_unused_id(0) {
                let handle = unused.as_usize();
                if handle >= MAX {
                    return Err(ENOSPC);
                }
                while slots.len() <= handle {
                    slots.push(Slot::Free, GFP_KERNEL_ACCOUNT)?;
                }
                // INVARIANT: the bit is set together with the slot leaving `Free`, for the one
                // reservation made here; below `MAX`.
                unused.acquire();
                slots[handle] = Slot::Reserved;
                return Ok(Reservation {
                    table: self,
                    handle,
                });
            }
            let request = ids.grow_request().ok_or(ENOSPC)?;
            drop(guard);
            let resizer = request.realloc(GFP_KERNEL_ACCOUNT)?;
            guard = self.slots.lock();
            guard.ids.grow(resizer);
        }
    }

    /// `f` of the live entry `handle`. `f` runs under the table lock: it must not sleep for long
    /// or take a lock held around a call of this table. Errors: `ENOENT` (no live entry).
    pub(crate) fn get<R>(&self, handle: usize, f: impl FnOnce(&T) -> R) -> Result<R> {
        match self.slots.lock().slots.get(handle) {
            Some(Slot::Live(value)) => Ok(f(value)),
            _ => Err(ENOENT),
        }
    }

    /// Takes the live entry `handle` out and frees the handle. Errors: `ENOENT` (no live
    /// entry). Process context, may sleep.
    pub(crate) fn take(&self, handle: usize) -> Result<T> {
        let mut slots = self.slots.lock();
        let value = slots.take_live(handle).ok_or(ENOENT)?;
        let _ = slots.free(handle);
        Ok(value)
    }

    /// Takes the live entry `handle` out, keeping the handle reserved until the returned
    /// [`Reservation`] goes: so no later entry gets the handle while the caller still ends what
    /// it took out. Errors: `ENOENT` (no live entry). Process context, may sleep.
    pub(crate) fn take_reserved(&self, handle: usize) -> Result<(T, Reservation<'_, T, MAX>)> {
        let value = self.slots.lock().take_live(handle).ok_or(ENOENT)?;
        // INVARIANT: `take_live` left the slot `Reserved`, for this reservation.
        let reservation = Reservation {
            table: self,
            handle,
        };
        Ok((value, reservation))
    }

    /// Takes every entry out and frees every handle (no [`Reservation`] exists: each borrows
    /// the table); the caller gets the entries without the table lock held.
    pub(crate) fn drain(self: Pin<&mut Self>) -> impl Iterator<Item = T> {
        let mut guard = self.slots.lock();
        let slots = core::mem::take(&mut guard.slots);
        // INVARIANT: no slot is left, and no handle is taken.
        guard.ids = IdPool::new();
        drop(guard);
        slots.into_iter().filter_map(|slot| match slot {
            Slot::Live(value) => Some(value),
            _ => None,
        })
    }
}

/// A reserved handle of a [`HandleTable`]: [`Reservation::fill`] makes it live; dropping the
/// reservation frees it (process context, may sleep: it takes the table lock).
///
/// # Invariants
///
/// `table`'s slot `handle` is [`Slot::Reserved`], for this reservation only.
pub(crate) struct Reservation<'a, T, const MAX: usize> {
    table: &'a HandleTable<T, MAX>,
    handle: usize,
}

impl<T, const MAX: usize> Reservation<'_, T, MAX> {
    /// The handle (below `MAX`).
    pub(crate) fn handle(&self) -> usize {
        self.handle
    }

    /// Makes the handle live with `value`. Process context, may sleep.
    pub(crate) fn fill(self, value: T) {
        let this = core::mem::ManuallyDrop::new(self);
        // The slot is this reservation's (type invariant), and the reservation goes here.
        this.table.slots.lock().slots[this.handle] = Slot::Live(value);
    }
}

impl<T, const MAX: usize> Drop for Reservation<'_, T, MAX> {
    fn drop(&mut self) {
        // The slot is `Reserved`: nothing of a `T` is dropped under the lock.
        let _ = self.table.slots.lock().free(self.handle);
    }
}

#[kunit_tests(vamr_kunit_handles)]
mod tests {
    use super::*;

    fn table<const MAX: usize>() -> Pin<KBox<HandleTable<u64, MAX>>> {
        let new = HandleTable::new(c"vamr_test_handles", kernel::static_lock_class!());
        KBox::pin_init(new, GFP_KERNEL).unwrap()
    }

    #[test]
    fn lowest_free_handle_first_until_max() {
        let t = table::<3>();
        let a = t.reserve().unwrap();
        let b = t.reserve().unwrap();
        assert_eq!((a.handle(), b.handle()), (0, 1));
        a.fill(10);
        // A reservation let go frees its handle; a reserved one is not live.
        drop(b);
        let b = t.reserve().unwrap();
        assert_eq!(b.handle(), 1);
        assert_eq!(t.get(1, |v| *v), Err(ENOENT));
        let c = t.reserve().unwrap();
        assert_eq!(c.handle(), 2);
        assert_eq!(t.reserve().err(), Some(ENOSPC));
        assert_eq!(t.get(0, |v| *v), Ok(10));
        b.fill(11);
        c.fill(12);
        assert_eq!(t.take(1), Ok(11));
        assert_eq!(t.take(1), Err(ENOENT));
        assert_eq!(t.reserve().map(|r| r.handle()), Ok(1));
    }

    #[test]
    fn a_handle_taken_out_reserved_stays_taken_until_let_go() {
        let t = table::<1>();
        t.reserve().unwrap().fill(7);
        let (value, reserved) = t.take_reserved(0).unwrap();
        assert_eq!(value, 7);
        assert_eq!(t.get(0, |v| *v), Err(ENOENT));
        assert_eq!(t.reserve().err(), Some(ENOSPC));
        drop(reserved);
        assert_eq!(t.reserve().map(|r| r.handle()), Ok(0));
    }

    #[test]
    fn the_pool_grows_past_its_inline_bitmap() {
        let mut t = table::<200>();
        for i in 0..200 {
            let r = t.reserve().unwrap();
            assert_eq!(r.handle(), i);
            r.fill(i as u64);
        }
        assert_eq!(t.reserve().err(), Some(ENOSPC));
        assert_eq!(t.get(150, |v| *v), Ok(150));
        assert_eq!(t.as_mut().drain().sum::<u64>(), 199 * 200 / 2);
        assert_eq!(t.reserve().map(|r| r.handle()), Ok(0));
    }
}
