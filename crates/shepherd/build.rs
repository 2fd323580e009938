//! Records a digest of the shepherd's source (`DROVER_SHEPHERD_SOURCE`): the service runs
//! the `drover-shepherd` program beside it only if that program was built from the same
//! source as the service's own copy of the plan format (`cargo run -p drover` rebuilds
//! `drover`, not the program beside it).

use std::hash::{DefaultHasher, Hash, Hasher};

fn main() {
    println!("cargo:rerun-if-changed=src/lib.rs");
    let source = std::fs::read("src/lib.rs").expect("the shepherd's source");
    let mut hasher = DefaultHasher::new();
    source.hash(&mut hasher);
    println!(
        "cargo:rustc-env=DROVER_SHEPHERD_SOURCE={:016x}",
        hasher.finish()
    );
}
