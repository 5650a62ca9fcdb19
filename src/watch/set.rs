// SPDX-License-Identifier: GPL-2.0

//! The watches of one `/dev/vamr` file: its watch table by slot, the groups its watches are
//! members of by range, and its generation counters.

use super::{Generations, Watch, WatchGroup};
use crate::charge::Charge;
use crate::events::EventQueue;
use crate::handles::HandleTable;
use crate::uapi;
use kernel::mm::Mm;
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::rbtree::RBTree;
use kernel::sync::{aref::ARef, Arc, Mutex};

/// A group of a [`WatchSet`] and the count of its users.
struct GroupEntry {
    group: Arc<WatchGroup>,
    users: usize,
}

/// The watches of one `/dev/vamr` file, by slot (the lowest free slot first, at most
/// [`uapi::WATCH_MAX`]; the slot is also the watch's counter), and the groups they are members
/// of, by range.
///
/// # Invariants
///
/// Each live watch in `slots` is a member of the group `groups` holds for its range, and is
/// counted by that entry's `users`, which also counts each [`WatchSet::add`] in progress that
/// joined the group; an entry with no user is removed. Every watch and group is of `mm`, and
/// queues its records on `events`.
#[pin_data(PinnedDrop)]
pub(crate) struct WatchSet {
    /// The file's address space (`mmgrab`).
    mm: ARef<Mm>,
    /// The file's event queue.
    events: Arc<EventQueue>,
    /// The watches by slot. A slot stays reserved while its watch is made (until it is
    /// published) and while it is ended.
    #[pin]
    slots: HandleTable<Arc<Watch>, { uapi::WATCH_MAX }>,
    /// The groups by range. Lock rules: held only to look up, insert or take out an entry or to
    /// count a user (allocating is fine); never across notifier insertion or removal (they take
    /// `mmap_lock`, and the mmap path takes `gens` under it): a new group is made without it,
    /// and a group left without a user is dropped after it.
    #[pin]
    groups: Mutex<RBTree<(usize, usize), GroupEntry>>,
    /// The generation counters of the watches, allocated by the first [`WatchSet::add`] or
    /// `mmap`, then never replaced or taken out: the counter mappings' VMAs point at them (see
    /// [`super::map_counters`]). Lock rules: a leaf lock, taken under `mmap_lock` by `mmap`;
    /// allocates under it.
    #[pin]
    gens: Mutex<Option<Arc<Generations>>>,
}

#[pinned_drop]
impl PinnedDrop for WatchSet {
    /// Stops every watch (a watch is in its group's member list, which holds a reference to
    /// it, until stopped); the groups, and with them their notifiers, go after. Sleeps.
    fn drop(self: Pin<&mut Self>) {
        for watch in self.project().slots.drain() {
            watch.stop();
        }
    }
}

impl WatchSet {
    /// An empty set of watches of `mm`, whose records go to `events`.
    pub(crate) fn new(mm: &Mm, events: Arc<EventQueue>) -> impl PinInit<Self> {
        let mm = ARef::from(mm);
        pin_init!(WatchSet {
            mm,
            events,
            slots <- HandleTable::new(c"vamr_file_watches", kernel::static_lock_class!()),
            groups <- new_mutex!(RBTree::new(), "vamr_file_watch_groups"),
            gens <- new_mutex!(None, "vamr_file_gens"),
        })
    }

    /// The generation counters, allocated on first use. Errors: `ENOMEM`. May sleep.
    pub(crate) fn generations(&self) -> Result<Arc<Generations>> {
        let mut gens = self.gens.lock();
        if let Some(g) = gens.as_ref() {
            return Ok(g.clone());
        }
        let g = Generations::new()?;
        *gens = Some(g.clone());
        Ok(g)
    }

    /// The watch in `slot`. Errors: `ENOENT`.
    pub(crate) fn get(&self, slot: usize) -> Result<Arc<Watch>> {
        self.slots.get(slot, Arc::clone)
    }

    /// Adds a watch over `[addr, end)` (checked by [`super::check_range`]) with `cookie`,
    /// holding `charge`, in the lowest free slot: made, a member of the set's group of that
    /// range, then handed to `publish` (which tells user space its slot), and in the table
    /// once `publish` succeeded; on any error it is ended and dropped, with its charge, and
    /// the slot is free again.
    ///
    /// Errors: `ENOSPC` past [`uapi::WATCH_MAX`] watches, `ENOMEM`, those of `publish`.
    /// Process context, sleeps.
    pub(crate) fn add(
        &self,
        addr: usize,
        end: usize,
        cookie: u64,
        charge: Charge,
        publish: impl FnOnce(&Watch) -> Result,
    ) -> Result {
        let slot = self.slots.reserve()?;
        let group = self.join(addr, end)?;
        let watch = Watch::new(&group, cookie, slot.handle(), charge)
            .inspect_err(|_| self.leave(&group))?;
        // Published before it is in the table: a caller that cannot learn the slot never used
        // it.
        if let Err(e) = publish(&watch) {
            self.end(&watch);
            return Err(e);
        }
        slot.fill(watch);
        Ok(())
        // On error the watch (if made) was ended and dropped, with its charge, before the
        // slot was freed.
    }

    /// Ends the watch in `slot` (no callback touches it once this returns; its counter is
    /// bumped once more). Errors: `ENOENT`. Process context, sleeps.
    pub(crate) fn remove(&self, slot: usize) -> Result {
        let (watch, reserved) = self.slots.take_reserved(slot)?;
        // The slot stays reserved until the watch has ended, even if a `VAMR_IOC_WATCH_SYNC`
        // on it still holds a reference: so no later watch of the slot sees a bump or a
        // record of this one. A group left without a watch goes outside the locks.
        self.end(&watch);
        drop(reserved);
        drop(watch);
        Ok(())
    }

    /// Joins the group over `[start, end)` if there is one (one more user).
    fn join_existing(&self, start: usize, end: usize) -> Option<Arc<WatchGroup>> {
        let mut groups = self.groups.lock();
        let entry = groups.get_mut(&(start, end))?;
        entry.users += 1;
        Some(entry.group.clone())
    }

    /// The group over `[start, end)`, joined (one more user): the existing one, or a new one.
    /// Errors: `ENOMEM`. Process context, sleeps (a new group's notifier insertion may take
    /// `mmap_lock`: without the groups lock).
    fn join(&self, start: usize, end: usize) -> Result<Arc<WatchGroup>> {
        if let Some(group) = self.join_existing(start, end) {
            return Ok(group);
        }
        let gens = self.generations()?;
        let group = WatchGroup::new(&self.mm, start, end, gens, self.events.clone())?;
        let mut groups = self.groups.lock();
        if let Some(entry) = groups.get_mut(&(start, end)) {
            // Another thread made the group meanwhile: ours goes (after the lock).
            entry.users += 1;
            let existing = entry.group.clone();
            drop(groups);
            drop(group);
            return Ok(existing);
        }
        let entry = GroupEntry {
            group: group.clone(),
            users: 1,
        };
        groups.try_create_and_insert((start, end), entry, GFP_KERNEL_ACCOUNT)?;
        Ok(group)
        // On error the groups lock goes before the group.
    }

    /// Leaves `group` (one user less); a group left without a user goes, after the groups
    /// lock. Sleeps.
    fn leave(&self, group: &Arc<WatchGroup>) {
        let last = {
            let mut groups = self.groups.lock();
            let key = group.range();
            match groups.get_mut(&key) {
                Some(entry) if Arc::ptr_eq(&entry.group, group) => {
                    entry.users -= 1;
                    if entry.users == 0 {
                        groups.remove(&key)
                    } else {
                        None
                    }
                }
                _ => None,
            }
        };
        drop(last);
    }

    /// Ends `watch` ([`Watch::stop`]) and leaves its group. Sleeps.
    fn end(&self, watch: &Watch) {
        watch.stop();
        self.leave(watch.group());
    }
}
