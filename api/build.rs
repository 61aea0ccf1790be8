//! Rebuilds the crate when a migration changes (sqlx embeds `migrations/`).

// `sqlx::migrate!` embeds ../migrations at compile time; without this a new migration
// file would not rebuild the crate and the binary would miss it.
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
