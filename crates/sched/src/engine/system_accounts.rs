//! The system-accounts part of the engine: accounts looked up lately, the service's own
//! account, and what submissions found of the file system for a moment.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::fsfacts::FileFacts;
use crate::sysuser::SystemUser;

/// How long an account looked up stays good.
const ACCOUNT_FRESHNESS: Duration = Duration::from_secs(30);

pub(crate) struct SystemAccounts {
    /// Accounts looked up lately (`None`: no such account), with when, shared: a
    /// submission only reads one. Looked up again after `ACCOUNT_FRESHNESS`, so that a
    /// group membership taken away stops counting.
    looked_up: HashMap<String, (Instant, Option<Arc<SystemUser>>)>,
    service_user: Arc<SystemUser>,
    /// What submissions found of working directories and command files, for a moment.
    file_facts: FileFacts,
}

impl SystemAccounts {
    pub(super) fn new(service_user: SystemUser) -> SystemAccounts {
        SystemAccounts {
            looked_up: HashMap::new(),
            service_user: Arc::new(service_user),
            file_facts: FileFacts::default(),
        }
    }

    /// The system account `name`, looked up once a while.
    pub(super) fn lookup(&mut self, name: &str) -> Option<Arc<SystemUser>> {
        if let Some((when, found)) = self.looked_up.get(name)
            && when.elapsed() < ACCOUNT_FRESHNESS
        {
            return found.clone();
        }
        let found = SystemUser::lookup(name).map(Arc::new);
        self.looked_up
            .insert(name.to_string(), (Instant::now(), found.clone()));
        found
    }

    /// The account the service runs as.
    #[inline]
    pub(super) fn service_user(&self) -> &Arc<SystemUser> {
        &self.service_user
    }

    #[inline]
    pub(super) fn file_facts(&mut self) -> &mut FileFacts {
        &mut self.file_facts
    }
}
