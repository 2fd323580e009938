//! Virtual containers (spec 2.10): named groups of jobs, nodes, reservations, virtual
//! machines and other containers, with their own ACL rules. The engine owns them, because
//! two flags act on scheduling: HOLDJOBS keeps the container's jobs from starting, and
//! DESTROYWHENEMPTY removes the container once nothing in it remains.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::clock::Seconds;
use crate::reservation::{AclRule, Owner};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VirtualContainer {
    pub id: String,
    pub created: Seconds,
    /// Set at creation, never changed.
    pub creator: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
    /// Affinity and comparator are not kept (they mean nothing for a container).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acl: Vec<AclRule>,
    #[serde(default)]
    pub members: Members,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub variables: BTreeMap<String, String>,
}

impl VirtualContainer {
    /// Whether `user` created it or is its USER owner: what an ordinary user may see,
    /// change, and submit jobs into.
    pub fn belongs_to(&self, user: &str) -> bool {
        crate::reservation::belongs_to(&self.creator, self.owner.as_ref(), user)
    }
}

/// What a container holds, by kind, in the order added.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Members {
    pub jobs: Vec<String>,
    pub nodes: Vec<String>,
    pub reservations: Vec<String>,
    pub virtual_containers: Vec<String>,
    pub virtual_machines: Vec<String>,
}

impl Members {
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
            && self.nodes.is_empty()
            && self.reservations.is_empty()
            && self.virtual_containers.is_empty()
            && self.virtual_machines.is_empty()
    }

    /// The lists by their wire names.
    pub fn lists_mut(&mut self) -> [(&'static str, &mut Vec<String>); 5] {
        [
            ("jobs", &mut self.jobs),
            ("nodes", &mut self.nodes),
            ("reservations", &mut self.reservations),
            ("virtualContainers", &mut self.virtual_containers),
            ("virtualMachines", &mut self.virtual_machines),
        ]
    }

    /// Adds what is not there yet.
    pub fn add(&mut self, other: Members) {
        let mut other = other;
        for ((_, mine), (_, theirs)) in self.lists_mut().into_iter().zip(other.lists_mut()) {
            for id in theirs.drain(..) {
                if !mine.contains(&id) {
                    mine.push(id);
                }
            }
        }
    }

    /// Removes what is there; what is not is named in the answer.
    pub fn remove(&mut self, other: &Members) -> Vec<String> {
        let mut other = other.clone();
        let mut missing = Vec::new();
        for ((name, mine), (_, theirs)) in self.lists_mut().into_iter().zip(other.lists_mut()) {
            for id in theirs.iter() {
                match mine.iter().position(|m| m == id) {
                    Some(at) => {
                        mine.remove(at);
                    }
                    None => missing.push(format!("{name}: '{id}' is not in the container")),
                }
            }
        }
        missing
    }
}

impl VirtualContainer {
    pub fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_added_once_and_removed_by_id() {
        let mut members = Members::default();
        members.add(Members {
            jobs: vec!["D.1".into(), "D.2".into()],
            nodes: vec!["n1".into()],
            ..Default::default()
        });
        members.add(Members {
            jobs: vec!["D.2".into(), "D.3".into()],
            ..Default::default()
        });
        assert_eq!(members.jobs, ["D.1", "D.2", "D.3"]);
        let missing = members.remove(&Members {
            jobs: vec!["D.1".into(), "D.9".into()],
            nodes: vec!["n1".into()],
            ..Default::default()
        });
        assert_eq!(missing, ["jobs: 'D.9' is not in the container"]);
        assert_eq!(members.jobs, ["D.2", "D.3"]);
        assert!(members.nodes.is_empty() && !members.is_empty());
    }
}
