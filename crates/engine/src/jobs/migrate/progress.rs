//! A chunk's copy progress in a job: named by the job's state and by the pause's sweep
//! (`sweep.rs`), so a leaf of its own.

/// Per-chunk copy progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Progress {
    Uncopied,
    Copying,
    Copied,
}
