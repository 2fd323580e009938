//! Records the build's revision, number and date for `GET /rest/diag/about`.
//!
//! The date is the commit's (reproducible), or `SOURCE_DATE_EPOCH` when set; outside a
//! git checkout the revision is `unknown` and the date the Unix epoch.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    let revision = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let number = git(&["rev-list", "--count", "HEAD"]).unwrap_or_else(|| "0".into());
    let date = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .or_else(|| git(&["log", "-1", "--format=%ct"]))
        .unwrap_or_else(|| "0".into());
    println!("cargo:rustc-env=DROVER_REVISION={revision}");
    println!("cargo:rustc-env=DROVER_BUILD_NUMBER={number}");
    println!("cargo:rustc-env=DROVER_BUILD_EPOCH={date}");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    // Rebuild when HEAD moves: HEAD itself, and the branch it points at.
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{reference}");
        }
        println!("cargo:rerun-if-changed={dir}/packed-refs");
    }
}
