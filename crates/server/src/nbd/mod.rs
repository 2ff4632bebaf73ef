//! The NBD protocol: wire format and the per-connection state machine.

pub mod conn;
pub mod meta;
pub mod proto;

#[cfg(test)]
mod extended_tests;
