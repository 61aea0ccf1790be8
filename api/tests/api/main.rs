//! The API's integration tests: one binary (zero2prod style), every test on a fresh
//! Postgres database with the migrations applied (`#[sqlx::test]`; needs DATABASE_URL).

mod admin;
mod bad_input;
mod common;
mod export;
mod fuzz;
mod hardening_budgets;
mod hardening_http_guard;
mod hardening_outages;
mod hardening_texts;
mod http;
mod live;
mod matrix;
mod plugins;
mod runs;
mod truth;
