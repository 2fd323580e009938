//! The data directory holds the store (jobs' environments among it), users' password
//! hashes, the event log and the job spools: the service's alone. At start group and
//! other permissions are taken away from it and from what it holds (a new one is made
//! 0700), and a directory, or an entry in it, that belongs to another user is refused:
//! whoever owns it could swap what the service reads as root.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Prepares `dir` (and, when `sqlite` is given, the database file in it) and says what
/// was tightened, one warning a line.
pub fn prepare_data_dir(dir: &Path, sqlite: Option<&Path>) -> Result<Vec<String>, String> {
    let shown = dir.display();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create {shown}: {e}"))?;
    let mut warnings = Vec::new();
    let facts = std::fs::metadata(dir).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let me = unsafe { libc::geteuid() };
    if facts.uid() != me {
        return Err(format!(
            "the data directory {shown} belongs to uid {}, not to the service's user (uid {me}); \
             give it to the service or choose another",
            facts.uid()
        ));
    }
    tighten(dir, facts.mode(), &mut warnings)?;
    if let Some(database) = sqlite
        && !database.exists()
    {
        // SQLite gives its WAL and shared-memory files the database file's mode.
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(database)
            .map_err(|e| format!("cannot create {}: {e}", database.display()))?;
    }
    let entries = std::fs::read_dir(dir).map_err(|e| format!("cannot list {shown}: {e}"))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(facts) = path.symlink_metadata() else {
            continue;
        };
        if facts.uid() != me {
            return Err(format!(
                "{} belongs to uid {}, not to the service's user (uid {me}): remove it or \
                 give it to the service",
                path.display(),
                facts.uid()
            ));
        }
        if facts.is_dir() || facts.is_file() {
            tighten(&path, facts.mode(), &mut warnings)?;
        }
    }
    Ok(warnings)
}

/// Takes group and other permissions away from `path` when it has any (the owner's
/// stay as they are).
fn tighten(path: &Path, mode: u32, warnings: &mut Vec<String>) -> Result<(), String> {
    if mode & 0o077 == 0 {
        return Ok(());
    }
    let private = mode & 0o700;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(private))
        .map_err(|e| format!("cannot make {} private: {e}", path.display()))?;
    warnings.push(format!(
        "{} was open to other users (mode {:o}); it is now {private:o}",
        path.display(),
        mode & 0o777
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loose_data_directory_is_tightened_and_a_new_one_is_private() {
        let top = tempfile::tempdir().unwrap();
        let fresh = top.path().join("fresh/data");
        let database = fresh.join("drover.db");
        assert!(
            prepare_data_dir(&fresh, Some(&database))
                .unwrap()
                .is_empty()
        );
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
        assert_eq!(mode(&fresh), 0o700);
        assert_eq!(mode(&database), 0o600);

        let loose = top.path().join("loose");
        std::fs::create_dir(&loose).unwrap();
        std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o755)).unwrap();
        let log = loose.join("events.log");
        std::fs::write(&log, "x").unwrap();
        std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o644)).unwrap();
        let warnings = prepare_data_dir(&loose, None).unwrap();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert_eq!(mode(&loose), 0o700);
        assert_eq!(mode(&log), 0o600);

        // Another user's entry in it is refused (root only can make one to try).
        if unsafe { libc::geteuid() } == 0 {
            let theirs = loose.join("drover.db");
            std::fs::write(&theirs, "").unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
            let refused = prepare_data_dir(&loose, None).unwrap_err();
            assert!(refused.contains("belongs to uid 65534"), "{refused}");
        }
    }
}
