//! What the reservations and virtual-containers parts share: a list of objects with ids
//! `<prefix>.<n>`, the last number given, and whether readers have seen the list. Any
//! change through it marks it changed.

use crate::request::Requester;
use crate::reservation::Reservation;
use crate::virtual_container::VirtualContainer;

/// An object an [`IdTable`] holds.
pub(crate) trait Entry: Clone {
    fn id(&self) -> &str;
    /// Whether `user` may see and act on it (besides administrators).
    fn belongs_to(&self, user: &str) -> bool;
}

impl Entry for Reservation {
    fn id(&self) -> &str {
        &self.id
    }

    fn belongs_to(&self, user: &str) -> bool {
        Reservation::belongs_to(self, user)
    }
}

impl Entry for VirtualContainer {
    fn id(&self) -> &str {
        &self.id
    }

    fn belongs_to(&self, user: &str) -> bool {
        VirtualContainer::belongs_to(self, user)
    }
}

impl Entry for crate::vm::Vm {
    fn id(&self) -> &str {
        &self.id
    }

    fn belongs_to(&self, user: &str) -> bool {
        crate::vm::Vm::belongs_to(self, user)
    }
}

pub(crate) struct IdTable<T> {
    list: Vec<T>,
    /// The number of the last object made.
    last_number: u64,
    /// Changed since readers last saw the list.
    changed: bool,
}

impl<T: Entry> IdTable<T> {
    pub(super) fn new() -> IdTable<T> {
        IdTable {
            list: Vec::new(),
            last_number: 0,
            changed: true,
        }
    }

    #[inline]
    pub(super) fn all(&self) -> &[T] {
        &self.list
    }

    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    #[inline]
    pub(super) fn len(&self) -> usize {
        self.list.len()
    }

    pub(super) fn position(&self, id: &str) -> Option<usize> {
        self.list.iter().position(|e| e.id() == id)
    }

    /// The position of `id` if the caller may act on it (an administrator, or a user it
    /// belongs to).
    pub(super) fn position_for(&self, id: &str, by: &Requester) -> Option<usize> {
        self.list
            .iter()
            .position(|e| e.id() == id && (by.over_all || e.belongs_to(&by.user)))
    }

    pub(super) fn get(&self, position: usize) -> &T {
        &self.list[position]
    }

    pub(super) fn get_mut(&mut self, position: usize) -> &mut T {
        self.changed = true;
        &mut self.list[position]
    }

    pub(super) fn push(&mut self, entry: T) {
        self.list.push(entry);
        self.changed = true;
    }

    pub(super) fn remove(&mut self, position: usize) -> T {
        self.changed = true;
        self.list.remove(position)
    }

    /// Keeps only the objects `keep` says to.
    pub(super) fn retain(&mut self, keep: impl FnMut(&T) -> bool) {
        self.list.retain(keep);
        self.changed = true;
    }

    /// The number of a new object: one more than the last.
    pub(super) fn next_number(&mut self) -> u64 {
        self.last_number += 1;
        self.last_number
    }

    /// Replaces the whole list (loaded from the store); numbers go on after `last_number`
    /// (or after the last given, if higher).
    pub(super) fn replace_all(&mut self, list: Vec<T>, last_number: u64) {
        self.list = list;
        // Never lower: a number given before a reload was seen.
        self.last_number = self.last_number.max(last_number);
        self.changed = true;
    }

    /// The list, if it changed since the last call.
    pub(super) fn take_changed(&mut self) -> Option<Vec<T>> {
        std::mem::take(&mut self.changed).then(|| self.list.clone())
    }
}
