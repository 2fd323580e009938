//! Reservations in the engine: creating one (choosing what it sets aside), changing its
//! variables and ACL rules, releasing it, charging it, and its windows ending.

use drover_store::{Body, Write};

use super::acl_edit;
use super::core::Engine;
use crate::clock::Seconds;
use crate::job::{Job, ResourceRequest};
use crate::limits::carried_bytes;
use crate::place;
use crate::request::summary::{self, RESERVATION_NOT_CREATED as REFUSED};
use crate::request::{ChangeMode, Requester, ReservationChange, ReservationRequest, SchedError};
use crate::reservation::{Held, Owner, Reservation};

/// The store collection of reservations.
pub(crate) const RESERVATIONS: &str = "reservations";

fn invalid(reason: String) -> SchedError {
    SchedError::invalid(REFUSED, reason)
}

impl Engine {
    pub(crate) fn reserve(
        &mut self,
        request: ReservationRequest,
        by: &Requester,
    ) -> Result<String, SchedError> {
        let now = self.now();
        let (start, end) = window(&request, now)?;
        if !by.over_all {
            self.check_user_reservation(&request, by, end - start)?;
        }
        check_reservation_fields(&request)?;
        let held = if request.hosts.is_empty() {
            self.find_room(&request, start, end)?
        } else {
            self.hosts_held(&request, start, end)?
        };
        let processors: u32 = held.iter().map(|h| h.processors).sum();
        if let Some(cap) = self.config.limits.user_reservation_max_processors
            && !by.over_all
            && processors > cap
        {
            return Err(invalid(format!(
                "the reservation would hold {processors} processors, more than the {cap} an \
                 ordinary user may reserve ([scheduler.limits] user_reservation_max_processors)"
            )));
        }
        let id = self
            .reservations
            .new_id(request.id_prefix.as_deref().unwrap_or("res"));
        self.remember_number(RESERVATIONS, &id);
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
        self.needs_schedule = true;
        self.emit(
            "reservationcreate",
            "reservation",
            &id,
            Some(by),
            Vec::new(),
        );
        Ok(id)
    }

    /// What an ordinary user may reserve: if anything at all, for themselves, up to a
    /// number of reservations and a length of window.
    fn check_user_reservation(
        &self,
        request: &ReservationRequest,
        by: &Requester,
        seconds: Seconds,
    ) -> Result<(), SchedError> {
        let limits = &self.config.limits;
        if limits.user_reservation_max_seconds == 0 {
            return Err(SchedError::Forbidden(format!(
                "{REFUSED}: only administrators may create reservations here \
                 ([scheduler.limits] user_reservation_max_seconds)"
            )));
        }
        if let Some(owner) = &request.owner
            && !by.may_name_owners
            && !owner.is_user(&by.user)
        {
            return Err(SchedError::Forbidden(format!(
                "{REFUSED}: only administrators may name another owner than themselves"
            )));
        }
        let theirs = self.reservations.count_created_by(&by.user);
        if theirs >= limits.user_reservation_max_count {
            return Err(invalid(format!(
                "{} already has {theirs} reservations, the most an ordinary user may have \
                 ([scheduler.limits] user_reservation_max_count)",
                by.user
            )));
        }
        if seconds > limits.user_reservation_max_seconds {
            return Err(invalid(format!(
                "duration: {seconds} seconds is longer than the {} an ordinary user may reserve \
                 ([scheduler.limits] user_reservation_max_seconds)",
                limits.user_reservation_max_seconds
            )));
        }
        Ok(())
    }

    /// The whole named nodes, once each; a DEDICATEDRESOURCE reservation shares none of
    /// them with another in its window.
    fn hosts_held(
        &self,
        request: &ReservationRequest,
        start: Seconds,
        end: Seconds,
    ) -> Result<Vec<Held>, SchedError> {
        let dedicated = request.flags.iter().any(|f| f == "DEDICATEDRESOURCE");
        let mut held = Vec::new();
        for host in &request.hosts {
            let Some(index) = self.nodes.index_of(host) else {
                return Err(invalid(format!("hostListExpression: no node '{host}'")));
            };
            if dedicated && let Some(other) = self.reservations.overlapping(host, start, end) {
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
                    processors: self.nodes.all()[index].config.processors,
                });
            }
        }
        Ok(held)
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
        if let Some(reason) = place::never(&wanted, self.nodes.all()) {
            return Err(invalid(format!("requirements: {reason}")));
        }
        self.reservations
            .find_room(&wanted, self.nodes.all(), start, end)
            .ok_or_else(|| {
                SchedError::Conflict(vec![
                    REFUSED.into(),
                    format!(
                        "{} processor(s) are not free of other reservations in that window",
                        wanted.task_count
                    ),
                ])
            })
    }

    pub(crate) fn change_reservation(
        &mut self,
        id: &str,
        change: ReservationChange,
        by: &Requester,
    ) -> Result<Vec<String>, SchedError> {
        let Some(position) = self.reservations.position_for(id, by) else {
            return Err(SchedError::NotFound(format!("No reservation '{id}'")));
        };
        let before = self.reservations.get(position).clone();
        let refuse =
            |reason: &str| SchedError::refused(summary::reservation_not_changed(id), reason);
        if before.standing {
            return Err(refuse(standing_refusal(&change)));
        }
        let message = match change {
            ReservationChange::Delete => return Ok(vec![self.release_reservation(position, by)]),
            change => self.apply_reservation_change(position, change)?,
        };
        let reservation = self.reservations.get(position).clone();
        let carried = carried_bytes(&reservation.variables, &reservation.acl, None);
        let limit = self.config.limits.max_submission_bytes;
        if !by.over_all
            && let Some(reason) = acl_edit::over_limit(carried, limit, "variables and ACL rules")
        {
            *self.reservations.get_mut(position) = before;
            return Err(SchedError::invalid(
                summary::reservation_not_changed(id),
                reason,
            ));
        }
        self.store_reservation(&reservation);
        self.needs_schedule = true;
        self.emit("reservationmodify", "reservation", id, Some(by), Vec::new());
        Ok(vec![message])
    }

    /// Applies a change of variables or ACL rules; answers what was done.
    fn apply_reservation_change(
        &mut self,
        position: usize,
        change: ReservationChange,
    ) -> Result<String, SchedError> {
        let reservation = self.reservations.get_mut(position);
        let id = reservation.id.clone();
        Ok(match change {
            ReservationChange::Delete => unreachable!("released by the caller"),
            ReservationChange::Variables(mode, variables) => {
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
                if let Some(problem) = rules.iter().find_map(|r| r.problem()) {
                    return Err(SchedError::invalid(
                        summary::reservation_rules_not_changed(&id),
                        format!("aclRules: {problem}"),
                    ));
                }
                let count = rules.len();
                reservation.put_rules(rules);
                format!("{count} ACL rule(s) of reservation {id} were written")
            }
            ReservationChange::DeleteRule(key) => {
                acl_edit::delete_rule(&mut reservation.acl, &key, "reservation", &id)?
            }
        })
    }

    /// Releases the reservation at `position`; answers what was done.
    fn release_reservation(&mut self, position: usize, by: &Requester) -> String {
        let id = self.reservations.remove(position).id;
        self.journal.write(Write::Delete {
            collection: RESERVATIONS.into(),
            id: id.clone(),
            expected_version: None,
        });
        self.needs_schedule = true;
        self.emit(
            "reservationdestroy",
            "reservation",
            &id,
            Some(by),
            Vec::new(),
        );
        format!("Reservation {id} was released")
    }

    fn store_reservation(&mut self, reservation: &Reservation) {
        if reservation.standing {
            return;
        }
        self.journal.write(Write::Put {
            collection: RESERVATIONS.into(),
            id: reservation.id.clone(),
            name: None,
            body: Body::serialize(reservation).expect("a reservation serializes"),
        });
    }

    /// A job that asked for a reservation ran `processor_seconds` in it.
    pub(crate) fn charge_reservation(&mut self, job: &Job, processor_seconds: f64) {
        let Some(wanted) = job.spec.extra.reservation_requested.as_deref() else {
            return;
        };
        if let Some(position) = self.reservations.position(wanted) {
            let reservation = self.reservations.get_mut(position);
            reservation.used_processor_seconds += processor_seconds;
            let reservation = reservation.clone();
            self.store_reservation(&reservation);
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
            .all()
            .iter()
            .filter(|r| r.end <= now && !r.standing)
            .map(|r| r.id.clone())
            .collect();
        for id in ended {
            self.reservations.retain(|r| r.id != id);
            self.journal.write(Write::Delete {
                collection: RESERVATIONS.into(),
                id: id.clone(),
                expected_version: None,
            });
            self.emit("reservationend", "reservation", &id, None, Vec::new());
            self.needs_schedule = true;
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
                .all()
                .iter()
                .any(|r| r.id == standing.id && r.start == start && r.end == end)
            {
                continue;
            }
            let mut held = Vec::new();
            for host in &standing.hosts {
                let index = self.nodes.index_of(host).ok_or_else(|| {
                    format!("standing reservation '{}': no node '{host}'", standing.id)
                })?;
                held.push(Held {
                    node: host.clone(),
                    processors: self.nodes.all()[index].config.processors,
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
            self.reservations.put(reservation);
            self.needs_schedule = true;
        }
        Ok(())
    }

    /// Loads the stored reservations (at start and after a failed journal write).
    pub(crate) fn load_reservations(&mut self) -> Result<(), String> {
        let mut reservations: Vec<Reservation> = self.load_all(RESERVATIONS, "reservation")?;
        let number = |r: &Reservation| super::recovery::id_number(&r.id);
        reservations.sort_by_key(|r| (r.created, number(r)));
        let last_number = reservations.iter().map(number).max().unwrap_or(0);
        let last_number = last_number.max(self.remembered_number(RESERVATIONS)?);
        self.reservations.replace_all(reservations, last_number);
        self.needs_schedule = true;
        let now = self.now();
        self.refresh_standing(now)
    }
}

/// The window `start..end` a request asks for (starting now if it names no start).
fn window(request: &ReservationRequest, now: Seconds) -> Result<(Seconds, Seconds), SchedError> {
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
    Ok((start, end))
}

/// The ACL rules and the id prefix of a request must be well formed.
fn check_reservation_fields(request: &ReservationRequest) -> Result<(), SchedError> {
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
    Ok(())
}

/// Why a standing reservation (configured) refuses `change`.
fn standing_refusal(change: &ReservationChange) -> &'static str {
    match change {
        ReservationChange::Delete => {
            "it is a standing reservation (configured), which the API cannot release"
        }
        ReservationChange::Variables(..) => {
            "it is a standing reservation (configured), which the API cannot change"
        }
        ReservationChange::PutRules(_) | ReservationChange::DeleteRule(_) => {
            "ACL rules of a standing reservation cannot be changed"
        }
    }
}
