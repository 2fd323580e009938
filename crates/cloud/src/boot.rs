//! Boot paths of images: relative paths (checked by
//! [`drover_domain::image::boot_path_problem`]) resolved only inside the images
//! directory.

use std::path::{Path, PathBuf};

use drover_domain::image::boot_path_problem;

/// Why a boot path does not name a file of the images directory.
#[derive(Debug, thiserror::Error)]
pub enum BootPathError {
    #[error("boot path '{path}' {why}")]
    Invalid { path: String, why: &'static str },
    /// It leads out of the images directory (through a symbolic link).
    #[error("boot path '{0}' leads outside the images directory")]
    Outside(String),
    #[error("boot path '{path}': {error}")]
    Io {
        path: String,
        #[source]
        error: std::io::Error,
    },
}

/// The file `relative` names inside `image_dir`: refused when it is empty, absolute,
/// has `..` components or NUL, or when, symbolic links followed, it is not inside the
/// directory (both are canonicalized, so the file and the directory must exist).
pub fn resolve(image_dir: &Path, relative: &str) -> Result<PathBuf, BootPathError> {
    let invalid = |why| BootPathError::Invalid {
        path: relative.into(),
        why,
    };
    if relative.is_empty() {
        return Err(invalid("is empty"));
    }
    if let Some(why) = boot_path_problem(relative) {
        return Err(invalid(why));
    }
    if Path::new(relative).is_absolute() {
        return Err(invalid(
            "must be relative to the images directory, not absolute",
        ));
    }
    let io = |error| BootPathError::Io {
        path: relative.into(),
        error,
    };
    let base = image_dir.canonicalize().map_err(io)?;
    let resolved = base.join(relative).canonicalize().map_err(io)?;
    if resolved.starts_with(&base) {
        Ok(resolved)
    } else {
        Err(BootPathError::Outside(relative.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn paths_resolve_inside_the_images_directory_only() {
        let root = tempfile::tempdir().unwrap();
        let images = root.path().join("images");
        std::fs::create_dir_all(images.join("centos")).unwrap();
        std::fs::write(images.join("centos/vmlinuz"), b"k").unwrap();
        std::fs::write(root.path().join("secret"), b"s").unwrap();
        symlink(root.path().join("secret"), images.join("escape")).unwrap();
        symlink(images.join("centos/vmlinuz"), images.join("current")).unwrap();

        let canonical = images.canonicalize().unwrap();
        assert_eq!(
            resolve(&images, "centos/vmlinuz").unwrap(),
            canonical.join("centos/vmlinuz")
        );
        assert_eq!(
            resolve(&images, "./current").unwrap(),
            canonical.join("centos/vmlinuz")
        );
        for bad in [
            "",
            "/etc/passwd",
            "../secret",
            "centos/../../secret",
            "a\0b",
        ] {
            assert!(
                matches!(resolve(&images, bad), Err(BootPathError::Invalid { .. })),
                "{bad:?}"
            );
        }
        assert!(matches!(
            resolve(&images, "escape"),
            Err(BootPathError::Outside(_))
        ));
        assert!(matches!(
            resolve(&images, "missing"),
            Err(BootPathError::Io { .. })
        ));
    }
}
