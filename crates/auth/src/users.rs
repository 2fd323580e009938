//! Local users and the data directory's `users.toml`.
//!
//! Users come from two places: the configuration file (`[[users]]`, written by the
//! operator) and `users.toml` in the data directory (written by `drover user add` and by
//! the first start, which generates the administrator). Both hold argon2 hashes only.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{AuthError, password};

/// The name of the user file in the data directory.
pub const USER_FILE: &str = "users.toml";

/// A local user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct User {
    pub name: String,
    /// An argon2 hash in PHC form (`drover hash-password` makes one).
    pub password_hash: String,
    /// Administrators have every permission.
    #[serde(default)]
    pub admin: bool,
}

impl User {
    /// Refuses names that cannot be typed in a Basic login and hashes that are not argon2.
    pub fn validate(&self) -> Result<(), AuthError> {
        validate_name(&self.name)?;
        password::validate(&self.password_hash)
            .map_err(|e| AuthError::Invalid(format!("user '{}': {e}", self.name)))
    }
}

/// User names: letters, digits, `.`, `-`, `_`, `@`; 1 to 64 characters.
pub fn validate_name(name: &str) -> Result<(), AuthError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '@'));
    if ok {
        Ok(())
    } else {
        Err(AuthError::Invalid(format!(
            "invalid user name '{name}': use 1 to 64 letters, digits, '.', '-', '_' or '@'"
        )))
    }
}

#[derive(Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct UserFile {
    #[serde(default)]
    users: Vec<User>,
}

fn file_error(path: &Path, reason: impl ToString) -> AuthError {
    AuthError::File {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// The users in `dir/users.toml`; none when the file does not exist.
pub fn load(dir: &Path) -> Result<Vec<User>, AuthError> {
    let path = dir.join(USER_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(file_error(&path, e)),
    };
    let file: UserFile = toml::from_str(&text).map_err(|e| file_error(&path, e))?;
    for user in &file.users {
        user.validate().map_err(|e| file_error(&path, e))?;
    }
    Ok(file.users)
}

/// Adds `user` to `dir/users.toml`, replacing a user of the same name. The file is
/// written whole to a temporary file and renamed, readable by its owner only.
pub fn save(dir: &Path, user: User) -> Result<(), AuthError> {
    user.validate()?;
    let mut users = load(dir)?;
    users.retain(|u| u.name != user.name);
    users.push(user);
    let text = format!(
        "# Local users of this Drover data directory (argon2 hashes only).\n\
         # Managed by `drover user add`; see docs/configuration.md.\n\n{}",
        toml::to_string(&UserFile { users }).map_err(|e| AuthError::Invalid(e.to_string()))?
    );
    std::fs::create_dir_all(dir).map_err(|e| file_error(dir, e))?;
    let path = dir.join(USER_FILE);
    let temporary = dir.join(format!("{USER_FILE}.tmp"));
    write_private(&temporary, text.as_bytes()).map_err(|e| file_error(&temporary, e))?;
    std::fs::rename(&temporary, &path).map_err(|e| file_error(&path, e))
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::password::{Cost, hash};

    #[test]
    fn saved_users_load_back_and_replace_by_name() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(dir.path()).unwrap().is_empty());
        let alice = User {
            name: "alice".into(),
            password_hash: hash("a", Cost::Minimal),
            admin: false,
        };
        save(dir.path(), alice.clone()).unwrap();
        let admin = User {
            name: "admin".into(),
            password_hash: hash("b", Cost::Minimal),
            admin: true,
        };
        save(dir.path(), admin.clone()).unwrap();
        let again = User {
            admin: true,
            ..alice.clone()
        };
        save(dir.path(), again.clone()).unwrap();
        assert_eq!(load(dir.path()).unwrap(), vec![admin, again]);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(USER_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn bad_names_and_hashes_are_refused() {
        for name in ["", "a:b", "a b", &"x".repeat(65)] {
            assert!(validate_name(name).is_err(), "{name}");
        }
        let user = User {
            name: "bob".into(),
            password_hash: "secret".into(),
            admin: false,
        };
        assert!(user.validate().is_err());
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(USER_FILE), "[[users]]\nname = 1\n").unwrap();
        let error = load(dir.path()).unwrap_err().to_string();
        assert!(error.contains("users.toml"), "{error}");
    }
}
