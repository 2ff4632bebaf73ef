//! The clean-stop marker's state: plain data engine.rs holds, apart from the glue in
//! `stopmark.rs` that writes it (issue 11's import cycle).

/// The marker's state in a running engine.
#[derive(Debug, Default)]
pub(crate) struct CleanStop {
    /// The stop is writing the marker: checkpoints from now on carry it.
    pub(crate) marking: bool,
    /// Volumes whose marker checkpoint failed. Their data was durable before it was
    /// written (the marker waits for that), so nothing is lost; but a failed write may
    /// still have landed (whole or torn), so the next mount may find the marker or not.
    pub(crate) unmarked: Vec<String>,
    /// Volumes whose final commit failed at the stop: writes they acknowledged are lost,
    /// as after a crash, and they stay unclean.
    pub(crate) lost: Vec<String>,
}

impl CleanStop {
    pub(crate) fn marking(&self) -> bool {
        self.marking
    }
}
