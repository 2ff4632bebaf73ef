//! Helpers shared by the simulator's integration tests.
#![allow(dead_code)] // each test binary uses a different subset

use std::path::PathBuf;

/// `../shared/traces` next to the repository, if present.
pub fn shared_traces() -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let p = root.join("../shared/traces");
    if p.join("wsrch-small.trace.xz").exists() {
        Some(p)
    } else {
        eprintln!("skipping: ../shared/traces not found next to the repository");
        None
    }
}

pub fn scenarios_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios")
}
