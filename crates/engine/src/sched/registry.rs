//! The scheduler registry: every scheduler's entry, by name or alias.

use super::api::Registration;
use super::{bfq, cats, cfq, deadline, fifo, kyber, mclock};

/// Every scheduler tiervisor has. Register a new one here.
pub static SCHEDULERS: &[Registration] = &[
    fifo::REGISTRATION,
    deadline::REGISTRATION,
    cfq::REGISTRATION,
    mclock::REGISTRATION,
    bfq::REGISTRATION,
    kyber::REGISTRATION,
    cats::REGISTRATION,
];

/// The registry entry for a name or alias.
pub fn lookup(name: &str) -> Option<&'static Registration> {
    SCHEDULERS
        .iter()
        .find(|r| r.name == name || r.aliases.contains(&name))
}

/// The names of every registered scheduler.
pub fn names() -> Vec<&'static str> {
    SCHEDULERS.iter().map(|r| r.name).collect()
}
