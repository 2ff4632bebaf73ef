//! Background jobs that move data between pools.
//!
//! The mechanism is shared: [`copy`] reads a range from one place and writes it to another
//! as background I/O, and [`switch`] points a chunk's map entry at its new home, journals
//! it and frees the old location once that is durable and nothing still reads it. Policy
//! lives with the callers: tier migration (`tiering.rs`) decides *which* chunk moves, the
//! live storage migration job moves a whole volume by one of seed 004's
//! schemes.

pub(crate) mod copy;
pub mod migrate;
pub(crate) mod switch;
