//! Nodes as a resource-manager plugin reports them (the Native type's `getNodes`):
//! a report lays its description (processors, memory, disk, architecture, features)
//! over the configured node of that id, or adds a node the configuration lacks, and sets
//! state, messages and metrics as an administrator's `PUT` would. What was reported of
//! descriptions is kept in the `reported_nodes` collection, so that added nodes (and the
//! jobs placed on them) are there again after a restart.
//!
//! A report repeats itself on every poll: only what differs from the node as it is is
//! applied, so an unchanged report writes nothing, and a message or generic event equal
//! to the node's newest one is not added again.

use std::collections::{HashMap, HashSet};

use drover_query::ListQuery;
use drover_store::{Body, Write};

use super::core::Engine;
use crate::node::{Node, NodeState, ReportedNode};
use crate::request::{
    ExternalUse, ExternalUseOutcome, NodeChanges, NodeReportItem, NodeReportOutcome, Requester,
    SchedError,
};

/// The store collection of reported node descriptions (one document per node id).
pub(crate) const REPORTED_NODES: &str = "reported_nodes";
/// The most nodes reports may add beyond the configured ones: each costs every pass.
pub const MAX_ADDED_NODES: usize = 1024;
/// The longest node id a report may add.
const MAX_NODE_ID: usize = 64;

impl Engine {
    /// Applies a plugin's report of nodes, as `by` (an administrator).
    pub(crate) fn report_nodes(
        &mut self,
        items: Vec<NodeReportItem>,
        by: &Requester,
    ) -> Result<NodeReportOutcome, SchedError> {
        super::node_changes::may_change_nodes(by)?;
        let mut outcome = NodeReportOutcome::default();
        let reporter = items.first().map(|item| item.node.reporter.clone());
        let mut named = HashSet::new();
        for item in items {
            let id = item.node.id.clone();
            match self.report_node(item, by) {
                Ok(Reported::Added) => outcome.added.push(id.clone()),
                Ok(Reported::Updated) => outcome.updated += 1,
                Ok(Reported::Unchanged) => outcome.unchanged += 1,
                Err(why) => outcome.refused.push(format!("{id}: {why}")),
            }
            if let Some(index) = self.nodes.index_of(&id) {
                named.insert(index);
            }
        }
        if let Some(reporter) = reporter {
            outcome.down = self.down_unless_reported(&reporter, &named);
        }
        Ok(outcome)
    }

    /// A report is of all its reporter's nodes (as a resource manager's is): a node it
    /// described before and no longer names is down, until it names it again.
    fn down_unless_reported(&mut self, reporter: &str, named: &HashSet<usize>) -> Vec<String> {
        let gone = format!("{reporter} no longer reports this node");
        let mut down = Vec::new();
        for index in 0..self.nodes.all().len() {
            if self
                .nodes
                .reported(index)
                .is_none_or(|r| r.reporter != reporter)
            {
                continue;
            }
            let node = &self.nodes.all()[index];
            let marked = node.rm_reason.as_deref() == Some(gone.as_str());
            if !named.contains(&index) {
                if !marked {
                    down.push(node.config.id.clone());
                }
                self.set_rm_state(index, Some(NodeState::Down), Some(gone.clone()));
            } else if marked {
                self.set_rm_state(index, None, None);
            }
        }
        down
    }

    fn report_node(&mut self, item: NodeReportItem, by: &Requester) -> Result<Reported, String> {
        let NodeReportItem {
            node: report,
            changes,
        } = item;
        sizes(&report)?;
        let (index, added) = match self.nodes.index_of(&report.id) {
            Some(index) => (index, false),
            None => (self.add_reported_node(&report)?, true),
        };
        let described = self.describe_node(index, report);
        let changes = news(&self.nodes.all()[index], changes);
        super::node_changes::room_for(&self.nodes.all()[index].overrides, &changes)?;
        let changed = !changes_nothing(&changes);
        if changed {
            self.change_overrides(index, changes, by);
        }
        if described {
            self.needs_schedule = true;
        }
        Ok(if added {
            Reported::Added
        } else if described || changed {
            Reported::Updated
        } else {
            Reported::Unchanged
        })
    }

    /// Sets the processors work outside this service uses on the nodes `report` names,
    /// as `by` (an administrator); nodes its reporter named before and not now use none.
    /// Its jobs become (or update) records of the book (`plugin_jobs`).
    pub(crate) fn report_external_use(
        &mut self,
        report: ExternalUse,
        by: &Requester,
    ) -> Result<ExternalUseOutcome, SchedError> {
        super::node_changes::may_change_nodes(by)?;
        let (added, ended) = self.reported_jobs(&report.reporter, report.jobs, by);
        let mut named = HashSet::new();
        let mut unknown = Vec::new();
        for (id, processors) in report.processors {
            match self.nodes.index_of(&id) {
                Some(index) => {
                    named.insert(index);
                    self.set_external(index, processors);
                }
                None => unknown.push(id),
            }
        }
        for index in self.nodes.externally_used_by(&report.reporter, named) {
            self.set_external(index, 0);
        }
        Ok(ExternalUseOutcome {
            unknown,
            added,
            ended,
        })
    }

    fn set_external(&mut self, index: usize, processors: u32) {
        if self.nodes.all()[index].external_processors != Some(processors) {
            self.nodes.node_mut(index).external_processors = Some(processors);
            self.needs_schedule = true;
        }
    }

    /// Adds the node `report` describes; answers its index.
    pub(super) fn add_reported_node(&mut self, report: &ReportedNode) -> Result<usize, String> {
        node_id(&report.id)?;
        if self.nodes.added_count() >= MAX_ADDED_NODES {
            return Err(format!(
                "not added: reports may add at most {MAX_ADDED_NODES} nodes"
            ));
        }
        let config = report.new_config()?;
        self.emit(
            "nodemodify",
            "node",
            &report.id,
            None,
            vec![("fields".into(), "added".into())],
        );
        Ok(self.nodes.add(config))
    }

    /// Merges `report` into what was reported of the node at `index` before, lays it
    /// over the node's description and keeps it; answers whether anything changed.
    pub(super) fn describe_node(&mut self, index: usize, report: ReportedNode) -> bool {
        let before = self.nodes.reported(index);
        let merged = match before {
            Some(before) => merge(before, report),
            None if report.describes() => report,
            None => return false,
        };
        if before == Some(&merged) {
            return false;
        }
        let id = merged.id.clone();
        let body = Body::serialize(&merged).expect("a reported node serializes");
        self.nodes.set_reported(index, merged);
        self.journal.write(Write::Put {
            collection: REPORTED_NODES.into(),
            id,
            name: None,
            body,
        });
        true
    }

    /// The reported descriptions, from the store: laid over their nodes again, and the
    /// nodes only reports know added (after a restart, or a reload after a failure).
    pub(super) fn restore_reported_nodes(&mut self) -> Result<(), String> {
        let stored = self
            .store
            .list(REPORTED_NODES, &ListQuery::default())
            .map_err(|e| format!("cannot read the reported nodes: {e}"))?;
        let reports: HashMap<String, ReportedNode> = stored
            .items
            .into_iter()
            .filter_map(|d| serde_json::from_value(d.body).ok().map(|r| (d.id, r)))
            .collect();
        for (id, report) in reports {
            let index = match self.nodes.index_of(&id) {
                Some(index) => index,
                None => match report.new_config() {
                    Ok(config) => self.nodes.add(config),
                    Err(_) => continue,
                },
            };
            self.nodes.set_reported(index, report);
        }
        Ok(())
    }
}

enum Reported {
    Added,
    Updated,
    Unchanged,
}

/// A node id a report may add: a host name's characters, not too long.
fn node_id(id: &str) -> Result<(), String> {
    let fine = !id.is_empty()
        && id.len() <= MAX_NODE_ID
        && id.starts_with(|c: char| c.is_ascii_alphanumeric())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    if fine {
        Ok(())
    } else {
        Err(format!(
            "not added: a node id is 1 to {MAX_NODE_ID} letters, digits, '.', '-' or '_', \
             starting with a letter or digit"
        ))
    }
}

/// The most processors, and megabytes of memory or disk, a report may give a node.
const MAX_REPORTED_PROCESSORS: u32 = 1 << 20;
const MAX_REPORTED_MEGABYTES: u64 = 1 << 40;
/// The most features a report may give a node.
const MAX_REPORTED_FEATURES: usize = 256;

/// Whether the sizes `report` gives are within reason (sums of them must not overflow).
fn sizes(report: &ReportedNode) -> Result<(), String> {
    if report
        .processors
        .is_some_and(|p| p > MAX_REPORTED_PROCESSORS)
    {
        return Err(format!(
            "CPROC: at most {MAX_REPORTED_PROCESSORS} processors"
        ));
    }
    for (key, value) in [("CMEMORY", report.memory), ("CDISK", report.disk)] {
        if value.is_some_and(|v| v > MAX_REPORTED_MEGABYTES) {
            return Err(format!("{key}: at most {MAX_REPORTED_MEGABYTES} MB"));
        }
    }
    if report
        .features
        .as_ref()
        .is_some_and(|f| f.len() > MAX_REPORTED_FEATURES)
    {
        return Err(format!("FEATURE: at most {MAX_REPORTED_FEATURES} features"));
    }
    Ok(())
}

/// What was reported before, with what `now` reports in its place.
fn merge(before: &ReportedNode, now: ReportedNode) -> ReportedNode {
    ReportedNode {
        id: now.id,
        processors: now.processors.or(before.processors),
        memory: now.memory.or(before.memory),
        disk: now.disk.or(before.disk),
        architecture: now.architecture.or_else(|| before.architecture.clone()),
        features: now.features.or_else(|| before.features.clone()),
        partition: now.partition.or_else(|| before.partition.clone()),
        reporter: now.reporter,
    }
}

/// Of `changes`, what would change `node`: a state it is not in, messages and generic
/// events other than its newest, metrics of other values, an os or partition of another.
fn news(node: &Node, mut changes: NodeChanges) -> NodeChanges {
    let overrides = &node.overrides;
    if let Some(state) = changes.state {
        let kept = if state.follows_load() {
            None
        } else {
            Some(state)
        };
        if kept == overrides.state {
            changes.state = None;
        }
    }
    if changes
        .os
        .as_deref()
        .is_some_and(|os| node.os() == Some(os))
    {
        changes.os = None;
    }
    if changes
        .partition
        .as_deref()
        .is_some_and(|p| node.partition() == p)
    {
        changes.partition = None;
    }
    // The same messages as the node's newest: the report repeats itself.
    let tail = overrides
        .messages
        .len()
        .checked_sub(changes.messages.len())
        .map(|from| &overrides.messages[from..]);
    if tail.is_some_and(|tail| tail.iter().map(|m| &m.text).eq(changes.messages.iter())) {
        changes.messages.clear();
    }
    changes.generic_events.retain(|(name, message)| {
        overrides
            .generic_events
            .iter()
            .rev()
            .find(|e| e.name == *name)
            .is_none_or(|e| e.message != *message)
    });
    changes
        .generic_metrics
        .retain(|name, value| overrides.generic_metrics.get(name) != Some(value));
    changes
}

fn changes_nothing(changes: &NodeChanges) -> bool {
    changes.state.is_none()
        && changes.power_off.is_none()
        && changes.os.is_none()
        && changes.partition.is_none()
        && changes.messages.is_empty()
        && changes.generic_events.is_empty()
        && changes.generic_metrics.is_empty()
        && changes.variables.is_empty()
}
