//! Who may do what.
//!
//! - [`password`]: argon2id hashes (the only form in which a password is ever kept) and
//!   generated passwords.
//! - [`users`]: the local users (from configuration and from the data directory's
//!   `users.toml`, which `drover user add` and the first start write).
//! - [`Authenticator`]: checks a Basic login, remembering verified logins briefly so a
//!   busy client does not pay argon2 on every request.
//! - [`Permission`]: a resource + action that every route declares.
//! - [`roles`]: roles (sets of grants), principals (users and groups → roles) and the
//!   [`Authority`](roles::Authority) that decides what an identity may do.
//! - [`access_store`]: the stored roles and principals, and the authority they make.
//! - [`tokens`]: the stored bearer tokens of the OAuth 2 token endpoint (digests only).
//! - [`request_keys`]: the stored idempotency keys of creating requests, and their answers.

pub mod access_store;
mod authenticator;
pub mod directory;
pub mod known_sources;
pub mod password;
mod permission;
pub mod request_keys;
pub mod roles;
pub mod throttle;
pub mod tokens;
pub mod users;

pub use authenticator::{Authenticator, Identity, Origin, basic_credentials};
pub use directory::{DirectoryConfig, DirectoryError, SecurityType};
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
