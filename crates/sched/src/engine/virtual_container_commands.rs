//! Virtual containers in the engine: creating, changing and deleting them, jobs joining
//! the container named at submission, HOLDJOBS (its queued jobs do not start) and
//! DESTROYWHENEMPTY (it goes once nothing in it remains: no members, or only jobs that
//! have ended).

use drover_store::{Body, Write};

use super::acl_edit;
use super::core::Engine;
use crate::limits::carried_bytes;
use crate::request::summary::{self, CONTAINER_NOT_CREATED};
use crate::request::{ContainerChange, ContainerRequest, Requester, SchedError};
use crate::reservation::{AclRule, Owner};
use crate::virtual_container::{Members, VirtualContainer};

/// The store collection of virtual containers.
pub(crate) const CONTAINERS: &str = "vcs";

impl Engine {
    pub(crate) fn create_container(
        &mut self,
        request: ContainerRequest,
        by: &Requester,
    ) -> Result<String, SchedError> {
        may_name_owner(request.owner.as_ref(), by)?;
        let limit = self.config.limits.user_container_max_count;
        if !by.over_all && self.containers.count_created_by(&by.user) >= limit {
            return Err(SchedError::invalid(
                CONTAINER_NOT_CREATED,
                format!(
                    "{} already has {limit} virtual containers, the most an ordinary user may \
                     have ([scheduler.limits] user_container_max_count)",
                    by.user
                ),
            ));
        }
        let id = self.containers.new_id();
        self.remember_number(CONTAINERS, &id);
        let container = VirtualContainer {
            id: id.clone(),
            created: self.now(),
            creator: request.creator,
            description: request.description,
            owner: Some(request.owner.unwrap_or(Owner {
                name: by.user.clone(),
                kind: "USER".into(),
            })),
            flags: Vec::new(),
            acl: Vec::new(),
            members: Members::default(),
            variables: Default::default(),
        };
        self.store_container(&container);
        self.containers.push(container);
        self.needs_schedule = true;
        Ok(id)
    }

    pub(crate) fn change_container(
        &mut self,
        id: &str,
        change: ContainerChange,
        by: &Requester,
    ) -> Result<Vec<String>, SchedError> {
        let Some(position) = self.containers.position_for(id, by) else {
            return Err(SchedError::NotFound(format!("No virtual container '{id}'")));
        };
        let before = self.containers.get(position).clone();
        let message = match change {
            ContainerChange::Delete => {
                self.delete_container(position);
                return Ok(vec![format!("Virtual container {id} was deleted")]);
            }
            change => self.apply_container_change(position, change, by)?,
        };
        let container = self.containers.get(position).clone();
        let carried = carried_bytes(
            &container.variables,
            &container.acl,
            container.description.as_deref(),
        );
        let limit = self.config.limits.max_submission_bytes;
        let parts = "description, variables and ACL rules";
        if !by.over_all
            && let Some(reason) = acl_edit::over_limit(carried, limit, parts)
        {
            *self.containers.get_mut(position) = before;
            return Err(refused(id, vec![reason]));
        }
        self.store_container(&container);
        self.needs_schedule = true;
        let mut messages = vec![message];
        if self.destroy_if_empty(position) {
            messages.push(format!(
                "Virtual container {id} was empty and was deleted (DESTROYWHENEMPTY)"
            ));
        }
        Ok(messages)
    }

    /// Applies a change other than deletion; answers what was done.
    fn apply_container_change(
        &mut self,
        position: usize,
        change: ContainerChange,
        by: &Requester,
    ) -> Result<String, SchedError> {
        let id = self.containers.get(position).id.clone();
        let id = id.as_str();
        Ok(match change {
            ContainerChange::Delete => unreachable!("deleted by the caller"),
            ContainerChange::Add(members) => {
                let problems = self.member_problems(id, &members, by);
                if !problems.is_empty() {
                    return Err(refused(id, problems));
                }
                self.containers.get_mut(position).members.add(members);
                format!("Members were added to virtual container {id}")
            }
            ContainerChange::Remove(members) => {
                let mut container = self.containers.get(position).clone();
                let missing = container.members.remove(&members);
                if !missing.is_empty() {
                    return Err(refused(id, missing));
                }
                *self.containers.get_mut(position) = container;
                format!("Members were removed from virtual container {id}")
            }
            ContainerChange::Set {
                description,
                flags,
                owner,
                variables,
            } => {
                may_name_owner(owner.as_ref(), by)?;
                let container = self.containers.get_mut(position);
                if let Some(description) = description {
                    container.description = Some(description);
                }
                if let Some(flags) = flags {
                    container.flags = flags;
                }
                if let Some(owner) = owner {
                    container.owner = Some(owner);
                }
                if let Some(variables) = variables {
                    container.variables = variables;
                }
                format!("Virtual container {id} was changed")
            }
            ContainerChange::PutRules(rules) => {
                if let Some(problem) = rules.iter().find_map(AclRule::problem) {
                    return Err(refused(id, vec![format!("aclRules: {problem}")]));
                }
                let count = rules.len();
                // Affinity and comparator mean nothing for a container: not kept.
                let rules = rules
                    .into_iter()
                    .map(|r| AclRule {
                        affinity: None,
                        comparator: None,
                        ..r
                    })
                    .collect();
                crate::reservation::put_rules(&mut self.containers.get_mut(position).acl, rules);
                format!("{count} ACL rule(s) of virtual container {id} were written")
            }
            ContainerChange::DeleteRule(key) => {
                let acl = &mut self.containers.get_mut(position).acl;
                acl_edit::delete_rule(acl, &key, "virtual container", id)?
            }
        })
    }

    /// Why `members` cannot join container `id`, if they cannot. An ordinary user adds
    /// only what is theirs (a container's HOLDJOBS holds its jobs): another user's job,
    /// reservation or container is answered as not found, and nodes are the
    /// administrators'.
    fn member_problems(&self, id: &str, members: &Members, by: &Requester) -> Vec<String> {
        let mut problems = Vec::new();
        for job in &members.jobs {
            let theirs = self
                .position(job)
                .is_some_and(|p| by.over_all || self.job_at(p).user() == by.user);
            if !theirs {
                problems.push(format!("jobs: no job '{job}'"));
            } else if let Some(other) = self
                .containers
                .all()
                .iter()
                .find(|c| c.id != id && c.members.jobs.contains(job))
            {
                problems.push(format!(
                    "jobs: '{job}' is already in virtual container {} (a job is in at most one)",
                    other.id
                ));
            }
        }
        if !by.over_all && !members.nodes.is_empty() {
            problems.push("nodes: only administrators may add nodes to a container".into());
        }
        for node in &members.nodes {
            if self.nodes.index_of(node).is_none() {
                problems.push(format!("nodes: no node '{node}'"));
            }
        }
        for reservation in &members.reservations {
            if self.reservations.position_for(reservation, by).is_none() {
                problems.push(format!("reservations: no reservation '{reservation}'"));
            }
        }
        for container in &members.virtual_containers {
            if container == id {
                problems.push("virtualContainers: a container cannot contain itself".into());
            } else if self.containers.position_for(container, by).is_none() {
                problems.push(format!(
                    "virtualContainers: no virtual container '{container}'"
                ));
            }
        }
        for vm in &members.virtual_machines {
            let theirs = self
                .vms
                .position(vm)
                .is_some_and(|p| by.over_all || self.vms.get(p).owner == by.user);
            if !theirs {
                problems.push(format!("virtualMachines: no virtual machine '{vm}'"));
            }
        }
        problems
    }

    fn delete_container(&mut self, position: usize) {
        let container = self.containers.remove(position);
        self.journal.write(Write::Delete {
            collection: CONTAINERS.into(),
            id: container.id.clone(),
            expected_version: None,
        });
        // It is no longer a member of other containers.
        for other in 0..self.containers.len() {
            let lists = &self.containers.get(other).members.virtual_containers;
            if lists.contains(&container.id) {
                let changed = self.containers.get_mut(other);
                changed
                    .members
                    .virtual_containers
                    .retain(|c| *c != container.id);
                let changed = changed.clone();
                self.store_container(&changed);
            }
        }
        self.needs_schedule = true;
    }

    /// Deletes the container at `position` if it is DESTROYWHENEMPTY and nothing in it
    /// remains (no members, or only jobs that have ended); says whether it did.
    fn destroy_if_empty(&mut self, position: usize) -> bool {
        let container = self.containers.get(position);
        if !container.has_flag("DESTROYWHENEMPTY") {
            return false;
        }
        let members = &container.members;
        let only_ended_jobs = members.nodes.is_empty()
            && members.reservations.is_empty()
            && members.virtual_containers.is_empty()
            && members.virtual_machines.is_empty()
            && members.jobs.iter().all(|job| {
                self.position(job)
                    .is_none_or(|p| self.job_at(p).status.state.is_final())
            });
        if only_ended_jobs {
            self.delete_container(position);
        }
        only_ended_jobs
    }

    /// A VM is gone: it is no longer a member of any container (and a DESTROYWHENEMPTY
    /// container it was the last of goes).
    pub(crate) fn vm_left_containers(&mut self, vm: &str) {
        for position in (0..self.containers.len()).rev() {
            if self
                .containers
                .get(position)
                .members
                .virtual_machines
                .iter()
                .any(|v| v == vm)
            {
                let container = self.containers.get_mut(position);
                container.members.virtual_machines.retain(|v| v != vm);
                let container = container.clone();
                self.store_container(&container);
                self.destroy_if_empty(position);
            }
        }
    }

    /// A job has ended: a DESTROYWHENEMPTY container it was the last of goes.
    pub(crate) fn job_ended_in_container(&mut self, job_id: &str) {
        if let Some(position) = self.containers.position_of_job(job_id) {
            self.destroy_if_empty(position);
        }
    }

    /// Puts a newly submitted job in the container it named (checked to exist before).
    pub(crate) fn join_container(&mut self, job_id: &str, container: &str) {
        if let Some(position) = self.containers.position(container) {
            let changed = self.containers.get_mut(position);
            changed.members.jobs.push(job_id.to_string());
            let changed = changed.clone();
            self.store_container(&changed);
            self.needs_schedule = true;
        }
    }

    fn store_container(&mut self, container: &VirtualContainer) {
        self.journal.write(Write::Put {
            collection: CONTAINERS.into(),
            id: container.id.clone(),
            name: None,
            body: Body::serialize(container).expect("a container serializes"),
        });
    }

    pub(crate) fn load_containers(&mut self) -> Result<(), String> {
        let mut containers: Vec<VirtualContainer> =
            self.load_all(CONTAINERS, "virtual container")?;
        let number = |c: &VirtualContainer| super::recovery::id_number(&c.id);
        containers.sort_by_key(number);
        let last_number = containers.iter().map(number).max().unwrap_or(0);
        let last_number = last_number.max(self.remembered_number(CONTAINERS)?);
        self.containers.replace_all(containers, last_number);
        self.needs_schedule = true;
        Ok(())
    }
}

/// An ordinary user may name only themselves as a container's owner (an owner sees and
/// changes it); an administrator, also when acting for an ordinary user, anyone.
fn may_name_owner(owner: Option<&Owner>, by: &Requester) -> Result<(), SchedError> {
    match owner {
        Some(owner) if !by.may_name_owners && !owner.is_user(&by.user) => {
            Err(SchedError::Forbidden(format!(
                "only administrators may name another owner than themselves, not '{}'",
                owner.name
            )))
        }
        _ => Ok(()),
    }
}

/// A change of container `id` refused for `reasons`.
fn refused(id: &str, reasons: Vec<String>) -> SchedError {
    let mut messages = vec![summary::container_not_changed(id)];
    messages.extend(reasons);
    SchedError::Invalid(messages)
}
