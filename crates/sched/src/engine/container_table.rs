//! The virtual-containers part of the engine: the containers by number, the last
//! number given, and whether readers have seen the list. Any change through it marks it
//! changed.

use std::collections::HashSet;

use crate::container::VirtualContainer;
use crate::request::Requester;

pub(crate) struct ContainerTable {
    list: Vec<VirtualContainer>,
    /// The number of the last container made (ids are `vc.<n>`).
    last_number: u64,
    /// Changed since readers last saw the list.
    changed: bool,
}

impl ContainerTable {
    pub(super) fn new() -> ContainerTable {
        ContainerTable {
            list: Vec::new(),
            last_number: 0,
            changed: true,
        }
    }

    #[inline]
    pub(super) fn all(&self) -> &[VirtualContainer] {
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
        self.list.iter().position(|c| c.id == id)
    }

    /// The position of container `id` if the caller may act on it (an administrator,
    /// or a user it belongs to).
    pub(super) fn position_for(&self, id: &str, by: &Requester) -> Option<usize> {
        self.list
            .iter()
            .position(|c| c.id == id && (by.admin || c.belongs_to(&by.user)))
    }

    /// The container holding job `job_id`, if any.
    pub(super) fn position_of_job(&self, job_id: &str) -> Option<usize> {
        self.list
            .iter()
            .position(|c| c.members.jobs.iter().any(|j| j == job_id))
    }

    pub(super) fn get(&self, position: usize) -> &VirtualContainer {
        &self.list[position]
    }

    pub(super) fn get_mut(&mut self, position: usize) -> &mut VirtualContainer {
        self.changed = true;
        &mut self.list[position]
    }

    pub(super) fn push(&mut self, container: VirtualContainer) {
        self.list.push(container);
        self.changed = true;
    }

    pub(super) fn remove(&mut self, position: usize) -> VirtualContainer {
        self.changed = true;
        self.list.remove(position)
    }

    /// The id of a new container: `vc.<next number>`.
    pub(super) fn new_id(&mut self) -> String {
        self.last_number += 1;
        format!("vc.{}", self.last_number)
    }

    /// Replaces the whole list (loaded from the store); numbers go on after `last_number`.
    pub(super) fn replace_all(&mut self, list: Vec<VirtualContainer>, last_number: u64) {
        self.list = list;
        self.last_number = last_number;
        self.changed = true;
    }

    /// The list, if it changed since the last call.
    pub(super) fn take_changed(&mut self) -> Option<Vec<VirtualContainer>> {
        std::mem::take(&mut self.changed).then(|| self.list.clone())
    }

    pub(super) fn count_created_by(&self, user: &str) -> usize {
        self.list.iter().filter(|c| c.creator == user).count()
    }

    /// Jobs of HOLDJOBS containers: they do not start.
    pub(super) fn held_jobs(&self) -> HashSet<String> {
        self.list
            .iter()
            .filter(|c| c.has_flag("HOLDJOBS"))
            .flat_map(|c| c.members.jobs.iter().cloned())
            .collect()
    }
}
