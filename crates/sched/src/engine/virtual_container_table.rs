//! The virtual-containers part of the engine: the containers by number (an
//! [`IdTable`]), and what jobs need of them.

use std::collections::HashSet;

use super::id_table::IdTable;
use crate::virtual_container::VirtualContainer;

/// The virtual containers, by number.
pub(crate) type ContainerTable = IdTable<VirtualContainer>;

impl IdTable<VirtualContainer> {
    /// The id of a new container: `vc.<next number>`.
    pub(super) fn new_id(&mut self) -> String {
        format!("vc.{}", self.next_number())
    }

    /// The container holding job `job_id`, if any.
    pub(super) fn position_of_job(&self, job_id: &str) -> Option<usize> {
        self.all()
            .iter()
            .position(|c| c.members.jobs.iter().any(|j| j == job_id))
    }

    pub(super) fn count_created_by(&self, user: &str) -> usize {
        self.all().iter().filter(|c| c.creator == user).count()
    }

    /// Jobs of HOLDJOBS containers: they do not start.
    pub(super) fn held_jobs(&self) -> HashSet<String> {
        self.all()
            .iter()
            .filter(|c| c.has_flag("HOLDJOBS"))
            .flat_map(|c| c.members.jobs.iter().cloned())
            .collect()
    }
}
