//! The credentials part of the engine: the names of each kind seen so far (configured,
//! or named by a job), and whether readers have seen them.

use std::collections::{BTreeMap, BTreeSet};

use super::CredentialKind;

pub(crate) struct CredentialNames {
    names: BTreeMap<CredentialKind, BTreeSet<String>>,
    /// Changed since readers last saw the names.
    changed: bool,
}

impl CredentialNames {
    pub(super) fn new() -> CredentialNames {
        CredentialNames {
            names: BTreeMap::new(),
            changed: true,
        }
    }

    /// Forgets every name.
    pub(super) fn clear(&mut self) {
        self.names = BTreeMap::new();
    }

    /// Adds `name` (if there is one) to the names of `kind`.
    pub(super) fn remember(&mut self, kind: CredentialKind, name: Option<&str>) {
        if let Some(name) = name.filter(|n| !n.is_empty()) {
            let names = self.names.entry(kind).or_default();
            if !names.contains(name) {
                names.insert(name.to_string());
                self.changed = true;
            }
        }
    }

    /// The names, if they changed since the last call.
    pub(super) fn take_changed(&mut self) -> Option<BTreeMap<CredentialKind, BTreeSet<String>>> {
        std::mem::take(&mut self.changed).then(|| self.names.clone())
    }
}
