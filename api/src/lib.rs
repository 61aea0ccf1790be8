//! The control plane: the REST API (`/api/v1`, documented by an OpenAPI document built
//! from the router itself), Postgres persistence, background replay and sweep runs, and
//! telemetry. `slicesched serve` calls [`serve`]; tests build the router with [`app`].
//!
//! Architecture Invariant: only this crate knows sqlx, axum and JSON wire formats; it
//! drives the simulator through the same `slicesched_sim::replay` the CLI uses.

pub mod auth;
pub mod config;
pub mod db;
pub mod error;
pub mod extract;
pub mod http;
pub mod jobs;
pub mod limits;
pub mod live;
pub mod plugin_host;
pub mod policies;
pub mod scenarios;
pub mod server;
pub mod state;
pub mod telemetry;
pub mod text;

pub use config::Config;
pub use http::app;
pub use server::serve;
pub use state::AppState;
