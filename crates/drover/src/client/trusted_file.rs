//! Files that decide where the password goes: `client.toml` (its `url`) and a CA file
//! (which servers are believed). Whoever can change one can send the password to a server
//! of theirs, so the client reads only files that nobody but their user (or, for a CA
//! file, root) can change, in a directory nobody else can change either.

use std::fs::Metadata;
use std::io::Read as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use super::connection::Failure;

/// What a trusted file must be like.
pub struct Rule {
    /// Mode bits the file must not have.
    forbidden: u32,
    /// What is wrong when it has them, and the command that clears them.
    exposed: &'static str,
    fix: &'static str,
    /// What to use instead of another user's file.
    instead: &'static str,
    /// Root's files (and directories) are trusted too.
    root_may_own: bool,
}

/// `client.toml`: its user's alone, it may hold a password.
pub const CONFIG: Rule = Rule {
    forbidden: 0o077,
    exposed: "is open to its group or others, who could read your password or change where it goes",
    fix: "chmod 600",
    instead: "a file of your own (mode 600)",
    root_may_own: false,
};

/// A CA file: others may read it, but only its owner (or root: a site's CA in /etc) may
/// change it, for a CA of theirs would let them pose as the server.
pub const CA: Rule = Rule {
    forbidden: 0o022,
    exposed: "can be changed by its group or others, who could pose as the server",
    fix: "chmod go-w",
    instead: "a file of your own or root's",
    root_may_own: true,
};

/// Reads `path` if `rule` lets it be trusted; `None` when there is no such file.
pub fn read(path: &Path, rule: &Rule) -> Result<Option<Vec<u8>>, Failure> {
    let cannot_read =
        |e: std::io::Error| Failure::Usage(format!("cannot read {}: {e}", path.display()));
    // The real file, so that the directory checked is the one that holds it.
    let real = match std::fs::canonicalize(path) {
        Ok(real) => real,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(cannot_read(e)),
    };
    // What is checked is what is read: the open file's own metadata.
    let mut file = match std::fs::File::open(&real) {
        Ok(file) => file,
        Err(e) => {
            // One we may not read may be another user's: say that rather than "denied".
            if let Ok(metadata) = std::fs::metadata(&real) {
                check(path, &metadata, rule)?;
            }
            return Err(cannot_read(e));
        }
    };
    let metadata = file.metadata().map_err(cannot_read)?;
    check(path, &metadata, rule)?;
    let directory = real
        .parent()
        .map_or_else(|| PathBuf::from("/"), Path::to_path_buf);
    let held_in = std::fs::metadata(&directory)
        .map_err(|e| Failure::Usage(format!("cannot read {}: {e}", directory.display())))?;
    check_directory(&directory, &held_in, path, rule)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(cannot_read)?;
    Ok(Some(bytes))
}

fn me() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn owner_trusted(rule: &Rule, uid: u32) -> bool {
    uid == me() || (rule.root_may_own && uid == 0)
}

fn check(path: &Path, file: &Metadata, rule: &Rule) -> Result<(), Failure> {
    let shown = path.display();
    if !owner_trusted(rule, file.uid()) {
        return Err(Failure::Usage(format!(
            "{shown} belongs to uid {}, not to you (uid {}): its owner could change where \
             your password goes; use {}",
            file.uid(),
            me(),
            rule.instead
        )));
    }
    let mode = file.mode() & 0o7777;
    if mode & rule.forbidden != 0 {
        return Err(Failure::Usage(format!(
            "{shown} {} (mode {mode:o}); run: {} {shown}",
            rule.exposed, rule.fix
        )));
    }
    Ok(())
}

/// Whoever can change `directory` can replace the file in it.
fn check_directory(
    directory: &Path,
    held_in: &Metadata,
    file: &Path,
    rule: &Rule,
) -> Result<(), Failure> {
    let (shown, file) = (directory.display(), file.display());
    if !owner_trusted(rule, held_in.uid()) {
        return Err(Failure::Usage(format!(
            "{shown}, which holds {file}, belongs to uid {}, not to you (uid {}): its owner \
             could replace the file; keep it in a directory of your own",
            held_in.uid(),
            me()
        )));
    }
    let mode = held_in.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(Failure::Usage(format!(
            "{shown}, which holds {file}, can be changed by its group or others (mode \
             {mode:o}), who could replace the file; run: chmod go-w {shown}"
        )));
    }
    Ok(())
}
