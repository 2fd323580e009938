//! The reservations part of the engine: the advance reservations in force, oldest
//! first, the last reservation number given, and whether readers have seen the list.
//! Any change through it marks it changed.

use crate::job::Job;
use crate::node::Node;
use crate::place::{self, Room};
use crate::policy::plan::{Access, SetAside};
use crate::request::Requester;
use crate::reservation::{Held, Reservation};

use super::node_pool::NodePool;

pub(crate) struct ReservationTable {
    list: Vec<Reservation>,
    /// The number of the last reservation made (ids are `<prefix>.<n>`).
    last_number: u64,
    /// Changed since readers last saw the list.
    changed: bool,
}

impl ReservationTable {
    pub(super) fn new() -> ReservationTable {
        ReservationTable {
            list: Vec::new(),
            last_number: 0,
            changed: true,
        }
    }

    #[inline]
    pub(super) fn all(&self) -> &[Reservation] {
        &self.list
    }

    pub(super) fn position(&self, id: &str) -> Option<usize> {
        self.list.iter().position(|r| r.id == id)
    }

    /// The position of reservation `id` if the caller may see it (an administrator, or
    /// a user it belongs to).
    pub(super) fn position_for(&self, id: &str, by: &Requester) -> Option<usize> {
        self.list
            .iter()
            .position(|r| r.id == id && (by.admin || r.belongs_to(&by.user)))
    }

    pub(super) fn get(&self, position: usize) -> &Reservation {
        &self.list[position]
    }

    pub(super) fn get_mut(&mut self, position: usize) -> &mut Reservation {
        self.changed = true;
        &mut self.list[position]
    }

    pub(super) fn push(&mut self, reservation: Reservation) {
        self.list.push(reservation);
        self.changed = true;
    }

    pub(super) fn remove(&mut self, position: usize) -> Reservation {
        self.changed = true;
        self.list.remove(position)
    }

    /// Removes every reservation of id `id`.
    pub(super) fn remove_all(&mut self, id: &str) {
        self.list.retain(|r| r.id != id);
        self.changed = true;
    }

    /// Puts `reservation` in place of the one of the same id, or adds it.
    pub(super) fn put(&mut self, reservation: Reservation) {
        match self.position(&reservation.id) {
            Some(at) => self.list[at] = reservation,
            None => self.list.push(reservation),
        }
        self.changed = true;
    }

    /// The id of a new reservation: `<prefix>.<next number>`.
    pub(super) fn new_id(&mut self, prefix: &str) -> String {
        self.last_number += 1;
        format!("{prefix}.{}", self.last_number)
    }

    /// Replaces the whole list (loaded from the store); numbers go on after `last_number`.
    pub(super) fn replace_all(&mut self, list: Vec<Reservation>, last_number: u64) {
        self.list = list;
        self.last_number = last_number;
        self.changed = true;
    }

    /// The list, if it changed since the last call.
    pub(super) fn take_changed(&mut self) -> Option<Vec<Reservation>> {
        std::mem::take(&mut self.changed).then(|| self.list.clone())
    }

    /// Reservations the user `user` created (standing ones are nobody's).
    pub(super) fn count_created_by(&self, user: &str) -> usize {
        self.list
            .iter()
            .filter(|r| !r.standing && r.creator == user)
            .count()
    }

    /// A reservation holding `node` in the window `start..end`, if any.
    pub(super) fn overlapping(&self, node: &str, start: i64, end: i64) -> Option<&Reservation> {
        self.list.iter().find(|r| r.overlaps(node, start, end))
    }

    /// Processors of `node` held by reservations overlapping `start..end`.
    pub(super) fn held_on(&self, node: &Node, start: i64, end: i64) -> Room {
        let taken: u32 = self
            .list
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

    /// What the reservations set aside, for the planner (indices as in the list).
    pub(super) fn set_asides(&self, nodes: &NodePool) -> Vec<SetAside> {
        self.list
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
        if self.list.is_empty() {
            return access;
        }
        let wanted = job.spec.extra.reservation_requested.as_deref();
        for (index, reservation) in self.list.iter().enumerate() {
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
