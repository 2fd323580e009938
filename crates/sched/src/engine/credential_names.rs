//! The credentials part of the engine: the names of each kind seen so far (configured,
//! or named by a job), and whether readers have seen them.

use std::collections::{BTreeMap, BTreeSet};

use super::{ConfiguredCredentials, CredentialKind};
use crate::job::JobSpec;

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

    /// The names a job gives: its user (else `submitter`), group, account, class and QOS.
    pub(super) fn remember_job(&mut self, spec: &JobSpec, submitter: &str) {
        for (kind, name) in [
            (
                CredentialKind::Users,
                Some(spec.user.as_deref().unwrap_or(submitter)),
            ),
            (CredentialKind::Groups, spec.group.as_deref()),
            (CredentialKind::Accounts, spec.account.as_deref()),
            (CredentialKind::Classes, spec.job_class.as_deref()),
            (CredentialKind::Qoses, spec.qos_requested.as_deref()),
        ] {
            self.remember(kind, name);
        }
    }

    /// The names the configuration gives.
    pub(super) fn remember_configured(&mut self, configured: &ConfiguredCredentials) {
        for (kind, names) in [
            (CredentialKind::Accounts, &configured.accounts),
            (CredentialKind::Classes, &configured.classes),
            (CredentialKind::Groups, &configured.groups),
            (CredentialKind::Qoses, &configured.qoses),
            (CredentialKind::Users, &configured.users),
        ] {
            for name in names {
                self.remember(kind, Some(name));
            }
        }
    }

    /// The names, if they changed since the last call.
    pub(super) fn take_changed(&mut self) -> Option<BTreeMap<CredentialKind, BTreeSet<String>>> {
        std::mem::take(&mut self.changed).then(|| self.names.clone())
    }
}
