//! Records a digest of the shepherd's source (`DROVER_SHEPHERD_SOURCE`): the service runs
//! the `drover-shepherd` program beside it only if that program was built from the same
//! source as the service's own copy of the plan format (`cargo run -p drover` rebuilds
//! `drover`, not the program beside it).

use std::hash::{DefaultHasher, Hash, Hasher};

fn main() {
    println!("cargo:rerun-if-changed=src");
    let mut files: Vec<_> = std::fs::read_dir("src")
        .expect("the shepherd's source")
        .map(|entry| entry.expect("the shepherd's source").path())
        .collect();
    files.sort();
    let mut hasher = DefaultHasher::new();
    for file in files {
        std::fs::read(&file)
            .expect("the shepherd's source")
            .hash(&mut hasher);
    }
    println!(
        "cargo:rustc-env=DROVER_SHEPHERD_SOURCE={:016x}",
        hasher.finish()
    );
}
