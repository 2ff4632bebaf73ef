//! Errors that point at the file, the line and what was expected.

pub use tiervisor_conf::ConfError as WorkloadError;
