//! Borrowed runs being given back: plain data engine.rs holds, apart from the glue in
//! `give_back.rs` (issue 11's import cycle).

use crate::layout::LoanRecord;

/// After a give-back, the shard keeps at least this many times its low-water mark of
/// available chunks, as a donor does when it lends: it gives back only what it could
/// lend. It asks for space below 1x, so between a give-back and its next ask it uses a
/// low-water mark's worth (an eighth of its chunks, at least 8), besides the hold
/// (hysteresis: no run goes back and forth with every write).
pub const GIVE_BACK_KEEP: u64 = 2;

/// On a hint that another shard was refused space (`Control::GiveBackNow`), the shard
/// keeps only its low-water mark: it does not give itself into asking at once, but the
/// margin above it that the timer keeps (a donor's, for lending) is for space nobody is
/// waiting for; here a shard is out of space now. In DST's tight pools the 2x rule let
/// no hinted run go back (seeds 0..256: every hinted free last run left its holder
/// between 1x and 2x its mark).
pub const GIVE_BACK_KEEP_ON_HINT: u64 = 1;

/// How often a give-back under way looks whether the checkpoints it waits for are
/// durable (engine time).
pub const GIVE_BACK_POLL_NS: u64 = 10_000_000;

/// A run being given back: out of the allocator, waiting for every volume's checkpoint
/// to pass it (`recording == false`), then its record's removal being written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Active {
    pub(crate) rec: LoanRecord,
    /// The engine chunk of the guard before the run (the run follows it, to the end of
    /// the pool's address space).
    pub(crate) guard: u64,
    pub(crate) recording: bool,
}

#[derive(Default)]
pub(crate) struct GiveBacks {
    /// The next look at the borrowed runs (or, under way, at the checkpoints).
    pub(crate) timer_at: Option<u64>,
    /// Per pool: the last borrowed run, seen wholly free at the last look. A run goes
    /// back only once two looks a hold apart saw it free.
    pub(crate) seen: Vec<Option<LoanRecord>>,
    pub(crate) active: Option<Active>,
    /// Runs given back (their records removed) and give-backs called off (space needed).
    pub(crate) given: u64,
    pub(crate) cancelled: u64,
    /// `Control::GiveBackNow` hints received, and the give-backs they started.
    pub(crate) hints: u64,
    pub(crate) on_hint: u64,
    /// Borrowed runs a look saw wholly free behind a run in use (only the last run can
    /// go back: docs/ARCHITECTURE.md, "More than the last run"), each once: what a
    /// tombstone record would let go back. Measured, not acted on.
    pub(crate) stuck: Vec<LoanRecord>,
}
