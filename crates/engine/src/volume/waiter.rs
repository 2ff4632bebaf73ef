//! A request parked for a chunk: named by the volume and by its log state
//! (`log/vol.rs`), so a leaf apart from both (issue 11's import cycle).

/// A piece of a request parked until its chunk is free.
#[derive(Clone, Copy, Debug)]
pub struct Waiter {
    pub req: usize,
    pub start: u64,
    pub end: u64,
}
