//! Changing a node's overrides (`PUT /rest/nodes/<id>`).

use super::core::Engine;
use crate::clock::Seconds;
use crate::node::{GenericEvent, NodeMessage, NodeOverrides};
use crate::request::summary;
use crate::request::{NodeChanges, Requester, SchedError};
use crate::validate;

impl Engine {
    pub(crate) fn modify_node(
        &mut self,
        id: &str,
        changes: NodeChanges,
        by: &Requester,
    ) -> Result<Vec<String>, SchedError> {
        may_change_nodes(by)?;
        let index = self
            .nodes
            .all()
            .iter()
            .position(|n| n.config.id == id)
            .ok_or_else(|| SchedError::NotFound(format!("No node '{id}'")))?;
        for name in changes.variables.keys() {
            validate::variable_name(name)
                .map_err(|p| SchedError::invalid(summary::node_not_modified(id), p))?;
        }
        room_for(&self.nodes.all()[index].overrides, &changes)
            .map_err(|p| SchedError::invalid(summary::node_not_modified(id), p))?;
        let changed = self.change_overrides(index, changes, by);
        Ok(vec![if changed.is_empty() {
            format!("Node {id} was not changed: the request named nothing to modify")
        } else {
            format!("Node {id} was modified: {}", changed.join(", "))
        }])
    }
}

impl Engine {
    /// Applies `changes` to the overrides of the node at `index`, journals them and says
    /// so in a `nodemodify` event; answers the names of the fields changed.
    pub(super) fn change_overrides(
        &mut self,
        index: usize,
        changes: NodeChanges,
        by: &Requester,
    ) -> Vec<&'static str> {
        let now = self.now();
        let node = self.nodes.node_mut(index);
        let id = node.id().to_string();
        let overrides = &mut node.overrides;
        let changed = apply_node_changes(overrides, changes, now);
        overrides.version += 1;
        overrides.last_update = now;
        let body = drover_store::Body::serialize(&*overrides).expect("node overrides serialize");
        self.journal.write(drover_store::Write::Put {
            collection: super::core::NODES.into(),
            id: id.clone(),
            name: None,
            body,
        });
        self.needs_schedule = true;
        self.emit(
            "nodemodify",
            "node",
            &id,
            Some(by),
            vec![("fields".into(), changed.join(","))],
        );
        changed
    }
}

/// Only administrators change nodes.
pub(super) fn may_change_nodes(by: &Requester) -> Result<(), SchedError> {
    if by.over_all {
        Ok(())
    } else {
        Err(SchedError::Forbidden(format!(
            "{} may not change nodes",
            by.user
        )))
    }
}

/// The most messages and generic events a node keeps (the newest): they come from
/// administrators and from plugins that report on every poll, and must not grow without
/// bound.
pub(super) const MAX_NODE_MESSAGES: usize = 100;

/// The most generic metrics and variables a node holds: each new name stays for good.
pub(super) const MAX_NODE_NAMES: usize = 256;

/// Whether `changes` leaves a node within [`MAX_NODE_NAMES`] metrics and variables.
pub(super) fn room_for(overrides: &NodeOverrides, changes: &NodeChanges) -> Result<(), String> {
    let metrics = overrides.generic_metrics.len()
        + changes
            .generic_metrics
            .keys()
            .filter(|name| !overrides.generic_metrics.contains_key(*name))
            .count();
    if metrics > MAX_NODE_NAMES {
        return Err(format!(
            "genericMetrics: a node holds at most {MAX_NODE_NAMES} metrics; this would make {metrics}"
        ));
    }
    let variables = overrides.variables.len()
        + changes
            .variables
            .iter()
            .filter(|(name, value)| value.is_some() && !overrides.variables.contains_key(*name))
            .count();
    if variables > MAX_NODE_NAMES {
        return Err(format!(
            "variables: a node holds at most {MAX_NODE_NAMES} variables; this would make {variables}"
        ));
    }
    Ok(())
}

/// Applies `changes` to a node's overrides; answers the names of the fields changed.
fn apply_node_changes(
    overrides: &mut NodeOverrides,
    changes: NodeChanges,
    now: Seconds,
) -> Vec<&'static str> {
    let mut changed = Vec::new();
    if let Some(state) = changes.state {
        overrides.state = if state.follows_load() {
            None
        } else {
            Some(state)
        };
        overrides.state_updated = now;
        changed.push("state");
    }
    if let Some(off) = changes.power_off {
        overrides.power_off = Some(off);
        changed.push("power");
    }
    if let Some(os) = changes.os {
        overrides.os = Some(os);
        changed.push("os");
    }
    if let Some(partition) = changes.partition {
        overrides.partition = Some(partition);
        changed.push("partition");
    }
    if !changes.messages.is_empty() {
        overrides.messages.extend(
            changes
                .messages
                .into_iter()
                .map(|text| NodeMessage { text, created: now }),
        );
        let excess = overrides.messages.len().saturating_sub(MAX_NODE_MESSAGES);
        overrides.messages.drain(..excess);
        changed.push("messages");
    }
    if !changes.generic_events.is_empty() {
        overrides
            .generic_events
            .extend(
                changes
                    .generic_events
                    .into_iter()
                    .map(|(name, message)| GenericEvent {
                        name,
                        message,
                        created: now,
                    }),
            );
        let excess = overrides
            .generic_events
            .len()
            .saturating_sub(MAX_NODE_MESSAGES);
        overrides.generic_events.drain(..excess);
        changed.push("genericEvents");
    }
    if !changes.generic_metrics.is_empty() {
        overrides.generic_metrics.extend(changes.generic_metrics);
        changed.push("genericMetrics");
    }
    if !changes.variables.is_empty() {
        for (name, value) in changes.variables {
            match value {
                Some(value) => overrides.variables.insert(name, value),
                None => overrides.variables.remove(&name),
            };
        }
        changed.push("variables");
    }
    changed
}
