//! The decisions, sans-IO: every module here takes its inputs (bytes,
//! addresses, [`core::Now`]) as arguments and hands back what to do.
//! Nothing here reads a clock, opens a file or socket, or imports
//! [`crate::io`]; `tests/sans_io.rs` keeps it so.

pub mod aor_key;
pub mod auth;
pub mod binding;
pub mod branch;
mod budget;
pub mod busy;
pub mod core;
mod ctx;
mod dialog_calls;
pub mod dialogs;
pub mod effects;
pub mod flows;
pub mod fork;
pub mod guard;
mod here;
mod legs;
pub mod location;
mod loose_route;
pub mod media;
mod media_calls;
pub mod metrics;
mod metrics_counters;
mod metrics_methods;
pub mod names;
pub mod ng;
pub mod originated;
pub mod parked;
pub mod persist;
pub mod privacy;
mod proxy;
pub mod records;
mod redirect;
mod registrar;
mod relay;
pub mod reply;
pub mod shared;
pub mod shares;
pub mod stateful;
pub mod stir;
mod stir_calls;
mod targets;
pub mod tokens;
pub mod topology;
mod trunk_auth;
mod trunk_calls;
pub mod trunks;
pub mod uris;
pub mod users;
