//! Reservations in the engine: creating one (choosing what it sets aside), changing its
//! variables and ACL rules, releasing it, and what the scheduling pass needs from them.

use drover_store::{Body, Write};

use super::core::Engine;
use crate::clock::Seconds;
use crate::job::{Job, ResourceRequest};
use crate::limits::carried_bytes;
use crate::place::{self, Room};
use crate::policy::plan::{Access, SetAside};
use crate::request::{ChangeMode, Requester, ReservationChange, ReservationRequest, SchedError};
use crate::reservation::{Held, Owner, Reservation};

/// The store collection of reservations.
pub(crate) const RESERVATIONS: &str = "reservations";

const REFUSED: &str = "The reservation was not created";

impl Engine {
    pub(crate) fn reserve(
        &mut self,
        request: ReservationRequest,
        by: &Requester,
    ) -> Result<String, SchedError> {
        let invalid = |reason: String| SchedError::invalid(REFUSED, reason);
        let now = self.now();
        let start = request.start.unwrap_or(now);
        let end = match (request.end, request.duration) {
            (Some(end), _) => end,
            (None, Some(duration)) if duration > 0 => start.saturating_add(duration),
            (None, Some(_)) => return Err(invalid("duration: must be positive".into())),
            (None, None) => {
                return Err(invalid(
                    "duration or endDate: one of them is required".into(),
                ));
            }
        };
        if end <= start {
            return Err(invalid("endDate: must be after startDate".into()));
        }
        if end <= now {
            return Err(invalid("endDate: the window has already ended".into()));
        }
        let limits = &self.config.limits;
        if !by.admin {
            if limits.user_reservation_max_seconds == 0 {
                return Err(SchedError::Forbidden(format!(
                    "{REFUSED}: only administrators may create reservations here \
                     ([scheduler.limits] user_reservation_max_seconds)"
                )));
            }
            if let Some(owner) = &request.owner
                && !owner.is_user(&by.user)
            {
                return Err(SchedError::Forbidden(format!(
                    "{REFUSED}: only administrators may name another owner than themselves"
                )));
            }
            let theirs = self
                .reservations
                .iter()
                .filter(|r| !r.standing && r.creator == by.user)
                .count();
            if theirs >= limits.user_reservation_max_count {
                return Err(invalid(format!(
                    "{} already has {theirs} reservations, the most an ordinary user may have \
                     ([scheduler.limits] user_reservation_max_count)",
                    by.user
                )));
            }
            if end - start > limits.user_reservation_max_seconds {
                return Err(invalid(format!(
                    "duration: {} seconds is longer than the {} an ordinary user may reserve \
                     ([scheduler.limits] user_reservation_max_seconds)",
                    end - start,
                    limits.user_reservation_max_seconds
                )));
            }
        }
        if let Some(rule) = request.acl.iter().find_map(|r| r.problem()) {
            return Err(invalid(format!("aclRules: {rule}")));
        }
        if let Some(prefix) = &request.id_prefix
            && (prefix.is_empty()
                || prefix.len() > 64
                || !prefix
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_".contains(c)))
        {
            return Err(invalid(format!(
                "idPrefix: '{prefix}' must be 1 to 64 letters, digits, - and _"
            )));
        }
        let dedicated = request.flags.iter().any(|f| f == "DEDICATEDRESOURCE");
        let held = if request.hosts.is_empty() {
            self.find_room(&request, start, end)?
        } else {
            let mut held = Vec::new();
            for host in &request.hosts {
                let Some(&index) = self.node_index.get(host) else {
                    return Err(invalid(format!("hostListExpression: no node '{host}'")));
                };
                if dedicated
                    && let Some(other) = self
                        .reservations
                        .iter()
                        .find(|r| r.overlaps(host, start, end))
                {
                    return Err(SchedError::Conflict(vec![
                        REFUSED.into(),
                        format!(
                            "node {host} is already reserved by {} in that window (DEDICATEDRESOURCE)",
                            other.id
                        ),
                    ]));
                }
                if !held.iter().any(|h: &Held| &h.node == host) {
                    held.push(Held {
                        node: host.clone(),
                        processors: self.nodes[index].config.processors,
                    });
                }
            }
            held
        };
        let processors: u32 = held.iter().map(|h| h.processors).sum();
        if let Some(cap) = limits.user_reservation_max_processors
            && !by.admin
            && processors > cap
        {
            return Err(invalid(format!(
                "the reservation would hold {processors} processors, more than the {cap} an \
                 ordinary user may reserve ([scheduler.limits] user_reservation_max_processors)"
            )));
        }
        self.next_reservation += 1;
        let id = format!(
            "{}.{}",
            request.id_prefix.as_deref().unwrap_or("res"),
            self.next_reservation
        );
        let reservation = Reservation {
            id: id.clone(),
            created: now,
            start,
            end,
            creator: by.user.clone(),
            owner: Some(request.owner.clone().unwrap_or(Owner {
                name: by.user.clone(),
                kind: "USER".into(),
            })),
            flags: request.flags,
            acl: request.acl,
            held,
            task_count: request.task_count.unwrap_or(processors),
            standing: false,
            variables: request.variables,
            given: request.given,
            used_processor_seconds: 0.0,
        };
        self.store_reservation(&reservation);
        self.reservations.push(reservation);
        self.reservations_changed();
        self.emit(
            "reservationcreate",
            "reservation",
            &id,
            Some(by),
            Vec::new(),
        );
        Ok(id)
    }

    /// Processors for `task_count` tasks on suitable nodes, apart from what overlapping
    /// reservations already hold there.
    fn find_room(
        &self,
        request: &ReservationRequest,
        start: Seconds,
        end: Seconds,
    ) -> Result<Vec<Held>, SchedError> {
        let wanted = ResourceRequest {
            task_count: request.task_count.unwrap_or(1).max(1),
            features: request.features.clone(),
            architecture: request.architecture.clone(),
            os: request.os.clone(),
            partition: request.partition.clone(),
            memory_per_task: request.memory,
            ..ResourceRequest::default()
        };
        if let Some(reason) = place::never(&wanted, &self.nodes) {
            return Err(SchedError::invalid(
                REFUSED,
                format!("requirements: {reason}"),
            ));
        }
        let nodes = &self.nodes;
        let accepting = (0..nodes.len()).filter(|&i| nodes[i].accepts_jobs());
        let placed = place::first_fit(&wanted, nodes, accepting, |i| {
            let node = &nodes[i];
            let taken: u32 = self
                .reservations
                .iter()
                .filter(|r| r.start < end && start < r.end)
                .flat_map(|r| r.held.iter().filter(|h| h.node == node.config.id))
                .map(|h| h.processors)
                .sum();
            Room {
                processors: node.config.processors.saturating_sub(taken),
                memory: node.config.memory,
            }
        })
        .ok_or_else(|| {
            SchedError::Conflict(vec![
                REFUSED.into(),
                format!(
                    "{} processor(s) are not free of other reservations in that window",
                    wanted.task_count
                ),
            ])
        })?;
        Ok(placed
            .into_iter()
            .map(|(index, tasks)| Held {
                node: nodes[index].config.id.clone(),
                processors: tasks,
            })
            .collect())
    }

    pub(crate) fn change_reservation(
        &mut self,
        id: &str,
        change: ReservationChange,
        by: &Requester,
    ) -> Result<Vec<String>, SchedError> {
        let Some(position) = self
            .reservations
            .iter()
            .position(|r| r.id == id && (by.admin || r.belongs_to(&by.user)))
        else {
            return Err(SchedError::NotFound(format!("No reservation '{id}'")));
        };
        let before = self.reservations[position].clone();
        let refuse = |reason: &str| {
            SchedError::refused(format!("The reservation {id} was not changed"), reason)
        };
        let standing = self.reservations[position].standing;
        let message = match change {
            ReservationChange::Delete => {
                if standing {
                    return Err(refuse(
                        "it is a standing reservation (configured), which the API cannot release",
                    ));
                }
                self.reservations.remove(position);
                self.batch.writes.push(Write::Delete {
                    collection: RESERVATIONS.into(),
                    id: id.to_string(),
                    expected_version: None,
                });
                self.reservations_changed();
                self.emit(
                    "reservationdestroy",
                    "reservation",
                    id,
                    Some(by),
                    Vec::new(),
                );
                return Ok(vec![format!("Reservation {id} was released")]);
            }
            ReservationChange::Variables(mode, variables) => {
                if standing {
                    return Err(refuse(
                        "it is a standing reservation (configured), which the API cannot change",
                    ));
                }
                let reservation = &mut self.reservations[position];
                match mode {
                    ChangeMode::Add => reservation.variables.extend(variables),
                    ChangeMode::Remove => {
                        for name in variables.keys() {
                            reservation.variables.remove(name);
                        }
                    }
                    ChangeMode::Set => reservation.variables = variables,
                }
                format!("The variables of reservation {id} were changed")
            }
            ReservationChange::PutRules(rules) => {
                if standing {
                    return Err(refuse(
                        "ACL rules of a standing reservation cannot be changed",
                    ));
                }
                if let Some(problem) = rules.iter().find_map(|r| r.problem()) {
                    return Err(SchedError::invalid(
                        format!("The ACL rules of reservation {id} were not changed"),
                        format!("aclRules: {problem}"),
                    ));
                }
                let count = rules.len();
                self.reservations[position].put_rules(rules);
                format!("{count} ACL rule(s) of reservation {id} were written")
            }
            ReservationChange::DeleteRule(key) => {
                if standing {
                    return Err(refuse(
                        "ACL rules of a standing reservation cannot be changed",
                    ));
                }
                let acl = &mut self.reservations[position].acl;
                let Some(at) = acl.iter().position(|r| r.key() == key) else {
                    return Err(SchedError::NotFound(format!(
                        "Reservation {id} has no ACL rule '{key}'"
                    )));
                };
                acl.remove(at);
                format!("The ACL rule {key} of reservation {id} was removed")
            }
        };
        let reservation = self.reservations[position].clone();
        let limit = self.config.limits.max_submission_bytes;
        let carried = carried_bytes(&reservation.variables, &reservation.acl, None);
        if !by.admin && carried > limit {
            self.reservations[position] = before;
            return Err(SchedError::invalid(
                format!("The reservation {id} was not changed"),
                format!(
                    "its variables and ACL rules would add up to {carried} bytes, more than {limit} \
                     ([scheduler.limits] max_submission_bytes)"
                ),
            ));
        }
        self.store_reservation(&reservation);
        self.reservations_changed();
        self.emit("reservationmodify", "reservation", id, Some(by), Vec::new());
        Ok(vec![message])
    }

    fn store_reservation(&mut self, reservation: &Reservation) {
        if reservation.standing {
            return;
        }
        self.batch.writes.push(Write::Put {
            collection: RESERVATIONS.into(),
            id: reservation.id.clone(),
            name: None,
            body: Body::serialize(reservation).expect("a reservation serializes"),
        });
    }

    fn reservations_changed(&mut self) {
        self.reservations_dirty = true;
        self.needs_schedule = true;
    }

    /// What the reservations set aside, for the planner (indices as in `reservations`).
    pub(crate) fn set_asides(&self) -> Vec<SetAside> {
        self.reservations
            .iter()
            .map(|r| SetAside {
                nodes: r
                    .held
                    .iter()
                    .filter_map(|h| self.node_index.get(&h.node).map(|&i| (i, h.processors)))
                    .collect(),
                start: r.start,
                end: r.end,
            })
            .collect()
    }

    /// What `job` may use of the reservations.
    pub(crate) fn access_of(&self, job: &Job) -> Access {
        let mut access = Access::default();
        if self.reservations.is_empty() {
            return access;
        }
        let wanted = job.spec.extra.reservation_requested.as_deref();
        for (index, reservation) in self.reservations.iter().enumerate() {
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

    /// A job that asked for a reservation ran `processor_seconds` in it.
    pub(crate) fn charge_reservation(&mut self, job: &Job, processor_seconds: f64) {
        let Some(wanted) = job.spec.extra.reservation_requested.as_deref() else {
            return;
        };
        if let Some(position) = self.reservations.iter().position(|r| r.id == wanted) {
            self.reservations[position].used_processor_seconds += processor_seconds;
            let reservation = self.reservations[position].clone();
            self.store_reservation(&reservation);
            self.reservations_dirty = true;
        }
    }
}

impl Engine {
    /// Reservations whose window has ended are released.
    pub(crate) fn expire_reservations(&mut self, now: Seconds) {
        if let Err(e) = self.refresh_standing(now) {
            eprintln!("drover: {e}");
        }
        let ended: Vec<String> = self
            .reservations
            .iter()
            .filter(|r| r.end <= now && !r.standing)
            .map(|r| r.id.clone())
            .collect();
        for id in ended {
            self.reservations.retain(|r| r.id != id);
            self.batch.writes.push(Write::Delete {
                collection: RESERVATIONS.into(),
                id: id.clone(),
                expected_version: None,
            });
            self.emit("reservationend", "reservation", &id, None, Vec::new());
            self.reservations_changed();
        }
    }

    /// Puts each standing reservation's window in force now (or its next one) in the
    /// list, replacing the one that ended.
    pub(crate) fn refresh_standing(&mut self, now: Seconds) -> Result<(), String> {
        for standing in self.config.standing_reservations.clone() {
            let Some((start, end)) = standing.window(now) else {
                continue;
            };
            if self
                .reservations
                .iter()
                .any(|r| r.id == standing.id && r.start == start && r.end == end)
            {
                continue;
            }
            let mut held = Vec::new();
            for host in &standing.hosts {
                let index = *self.node_index.get(host).ok_or_else(|| {
                    format!("standing reservation '{}': no node '{host}'", standing.id)
                })?;
                held.push(Held {
                    node: host.clone(),
                    processors: self.nodes[index].config.processors,
                });
            }
            let reservation = Reservation {
                id: standing.id.clone(),
                created: start,
                start,
                end,
                creator: String::new(),
                owner: None,
                flags: standing.flags.clone(),
                acl: standing.rules(),
                task_count: held.iter().map(|h| h.processors).sum(),
                held,
                standing: true,
                variables: Default::default(),
                given: Default::default(),
                used_processor_seconds: 0.0,
            };
            match self.reservations.iter().position(|r| r.id == standing.id) {
                Some(at) => self.reservations[at] = reservation,
                None => self.reservations.push(reservation),
            }
            self.reservations_changed();
        }
        Ok(())
    }

    /// Loads the stored reservations (at start and after a failed journal write).
    pub(crate) fn load_reservations(&mut self) -> Result<(), String> {
        let mut reservations: Vec<Reservation> = self.load_all(RESERVATIONS, "reservation")?;
        let number = |r: &Reservation| super::recovery::id_number(&r.id);
        reservations.sort_by_key(|r| (r.created, number(r)));
        self.next_reservation = reservations.iter().map(number).max().unwrap_or(0);
        self.reservations = reservations;
        self.reservations_changed();
        let now = self.now();
        self.refresh_standing(now)
    }
}
