//! The tiervisor runtime: serves engine volumes to NBD clients from file or block-device
//! pools, with the real clock.

pub mod activation;
pub mod admin;
pub mod admin_migrate;
pub mod admin_volume;
pub mod budget;
pub mod config;
pub mod io;
mod loans;
pub mod local;
pub mod nbd;
pub mod pools;
pub mod preflight;
pub mod ratelimit;
pub mod server;
pub mod shard;
mod slowlog;
pub mod space;
mod stream;
mod threaded;
pub mod tls;
pub mod vhost;

pub use config::{DEFAULT_CONFIG, ServerConfig};
pub use preflight::StartOptions;
pub use server::Server;
