//! Permissions: what a route needs, as a resource and an action.

use std::fmt;

/// What is done to a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    Read,
    Create,
    Update,
    Delete,
    /// Using a capability that is not a route (acting for another user).
    Use,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Read => "read",
            Action::Create => "create",
            Action::Update => "update",
            Action::Delete => "delete",
            Action::Use => "use",
        }
    }
}

/// A resource family (e.g. `jobs`, `diag`) and an action on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Permission {
    pub resource: &'static str,
    pub action: Action,
}

impl Permission {
    pub const fn new(resource: &'static str, action: Action) -> Self {
        Self { resource, action }
    }

    pub const fn read(resource: &'static str) -> Self {
        Self::new(resource, Action::Read)
    }

    pub const fn create(resource: &'static str) -> Self {
        Self::new(resource, Action::Create)
    }

    pub const fn update(resource: &'static str) -> Self {
        Self::new(resource, Action::Update)
    }

    pub const fn delete(resource: &'static str) -> Self {
        Self::new(resource, Action::Delete)
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.resource, self.action.as_str())
    }
}
