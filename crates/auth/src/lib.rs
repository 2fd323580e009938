//! Who may do what.
//!
//! - [`password`]: argon2id hashes (the only form in which a password is ever kept) and
//!   generated passwords.
//! - [`users`]: the local users (from configuration and from the data directory's
//!   `users.toml`, which `drover user add` and the first start write).
//! - [`Authenticator`]: checks a Basic login, remembering verified logins briefly so a
//!   busy client does not pay argon2 on every request.
//! - [`Permission`]: a resource + action that every route declares.
//!
//! Roles, principals and directory (LDAP) logins build on these (issue #9).

mod authenticator;
pub mod directory;
pub mod password;
mod permission;
pub mod users;

pub use authenticator::{Authenticator, Identity, basic_credentials};
pub use directory::{DirectoryConfig, SecurityType};
pub use permission::{Action, Permission};
pub use users::User;

/// Why users could not be loaded or saved.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("{0}")]
    Invalid(String),
    #[error("{path}: {reason}")]
    File { path: String, reason: String },
}
