//! The reservations part of the engine: the advance reservations in force, oldest
//! first (an [`IdTable`]), and what the scheduling pass and new reservations need of
//! them.

use crate::job::Job;
use crate::node::Node;
use crate::place::{self, Room};
use crate::policy::planner::{Access, SetAside};
use crate::reservation::{Held, Reservation};

use super::id_table::IdTable;
use super::node_pool::NodePool;

/// The advance reservations in force, oldest first.
pub(crate) type ReservationTable = IdTable<Reservation>;

impl IdTable<Reservation> {
    /// The id of a new reservation: `<prefix>.<next number>`.
    pub(super) fn new_id(&mut self, prefix: &str) -> String {
        format!("{prefix}.{}", self.next_number())
    }

    /// Puts `reservation` in place of the one of the same id, or adds it.
    pub(super) fn put(&mut self, reservation: Reservation) {
        match self.position(&reservation.id) {
            Some(at) => *self.get_mut(at) = reservation,
            None => self.push(reservation),
        }
    }

    /// Reservations the user `user` created (standing ones are nobody's).
    pub(super) fn count_created_by(&self, user: &str) -> usize {
        self.all()
            .iter()
            .filter(|r| !r.standing && r.creator == user)
            .count()
    }

    /// A reservation holding `node` in the window `start..end`, if any.
    pub(super) fn overlapping(&self, node: &str, start: i64, end: i64) -> Option<&Reservation> {
        self.all().iter().find(|r| r.overlaps(node, start, end))
    }

    /// Processors of `node` held by reservations overlapping `start..end`.
    pub(super) fn held_on(&self, node: &Node, start: i64, end: i64) -> Room {
        let taken: u32 = self
            .all()
            .iter()
            .filter(|r| r.start < end && start < r.end)
            .flat_map(|r| r.held.iter().filter(|h| h.node == node.config.id))
            .map(|h| h.processors)
            .sum();
        Room {
            processors: node.config.processors.saturating_sub(taken),
            memory: node.config.memory,
        }
    }

    /// Processors of `node` held, during `start..end`, by reservations that do not
    /// admit `user`'s VMs.
    pub(super) fn held_against(&self, node: &str, user: &str, start: i64, end: i64) -> u32 {
        self.all()
            .iter()
            .filter(|r| r.start < end && start < r.end && !r.admits_user(user))
            .flat_map(|r| r.held.iter().filter(|h| h.node == node))
            .map(|h| h.processors)
            .sum()
    }

    /// What the reservations set aside, for the planner (indices as in the list).
    pub(super) fn set_asides(&self, nodes: &NodePool) -> Vec<SetAside> {
        self.all()
            .iter()
            .map(|r| SetAside {
                nodes: r
                    .held
                    .iter()
                    .filter_map(|h| nodes.index_of(&h.node).map(|i| (i, h.processors)))
                    .collect(),
                start: r.start,
                end: r.end,
            })
            .collect()
    }

    /// What `job` may use of the reservations.
    pub(super) fn access_of(&self, job: &Job) -> Access {
        let mut access = Access::default();
        if self.is_empty() {
            return access;
        }
        let wanted = job.spec.extra.reservation_requested.as_deref();
        for (index, reservation) in self.all().iter().enumerate() {
            if !reservation.admits(job) {
                if wanted == Some(reservation.id.as_str()) {
                    // Asked for it without being admitted: it may run nowhere else.
                    access.within = Some(index);
                }
                continue;
            }
            access.admitted.push(index);
            if wanted == Some(reservation.id.as_str()) {
                access.within = Some(index);
            }
            match reservation.affinity_for(job) {
                Some("POSITIVE") => access.prefer.push(index),
                Some("NEGATIVE") => access.avoid.push(index),
                _ => {}
            }
        }
        access
    }

    /// Processors for `wanted` on suitable nodes, apart from what overlapping
    /// reservations already hold there; `None` when they are not free.
    pub(super) fn find_room(
        &self,
        wanted: &crate::job::ResourceRequest,
        nodes: &[Node],
        start: i64,
        end: i64,
    ) -> Option<Vec<Held>> {
        let accepting = (0..nodes.len()).filter(|&i| nodes[i].accepts_jobs());
        let placed = place::first_fit(wanted, nodes, accepting, |i| {
            self.held_on(&nodes[i], start, end)
        })?;
        Some(
            placed
                .into_iter()
                .map(|(index, tasks)| Held {
                    node: nodes[index].config.id.clone(),
                    processors: tasks,
                })
                .collect(),
        )
    }
}
