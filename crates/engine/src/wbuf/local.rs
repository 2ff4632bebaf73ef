//! Operations the write buffer completes itself, and what it did with one dispatched:
//! plain data engine.rs keeps, apart from the glue in `hook.rs` (issue 11's import cycle).

use std::collections::VecDeque;

use bytes::Bytes;

use crate::types::Errno;

/// A device operation the engine completes itself.
pub(crate) enum Local {
    /// An absorbed write: never reached the scheduler or the device.
    Absorbed(usize),
    /// Dispatched, but answered from RAM (a read covered by the buffer, a failed FLUSH).
    Served {
        key: usize,
        result: Result<(), Errno>,
        data: Option<Bytes>,
    },
}

#[derive(Default)]
pub(crate) struct LocalQueue(pub VecDeque<Local>);

/// What the buffer did with an operation the scheduler dispatched.
pub(crate) enum EmitAction {
    /// Send it to the device.
    Device,
    /// Held (parked, or completed locally): do not send.
    Held,
}
