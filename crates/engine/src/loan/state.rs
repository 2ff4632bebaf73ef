//! Space loans between shards, as recorded: plain data engine.rs holds, apart from the glue
//! in `loan.rs` that makes and returns them (issue 11's import cycle).

use crate::layout::LoanRecord;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    Add(LoanRecord),
    Remove(LoanRecord),
}

/// The loan records being made durable.
#[derive(Default)]
pub(crate) struct Loans {
    pub(crate) pending: Vec<Change>,
}
