//! Issue 16: texts at the boundary: a plugin's NUL-laden, 24 MiB message cannot make the
//! quarantine or audit write fail, nor grow without bound.

use crate::common::*;
use sqlx::PgPool;

#[sqlx::test(migrator = "slicesched_api::db::MIGRATOR")]
async fn quarantine_and_audit_writes_survive_nul_and_24_mib_texts(pool: PgPool) {
    use slicesched_api::plugin_host::{write_back_quarantine, Quarantined};
    let _ = state(pool.clone()).await;
    let (plugin,): (uuid::Uuid,) =
        sqlx::query_as("select id from plugins where name = 'dedicated'").fetch_one(&pool).await.unwrap();
    let nul = "no\0way\u{1b}[31m nul!".repeat(24 << 20 >> 4);
    let q = Quarantined {
        name: "dedicated".into(),
        version: "1\0".into(),
        calls: 3,
        failures: 3,
        fallback_decisions: 3,
        cause: nul.clone(),
        errors: vec![nul.clone(), nul],
    };
    let run = uuid::Uuid::new_v4();
    assert!(write_back_quarantine(&pool, plugin, run, &q).await.expect("the write cannot fail on the text"));
    let (state,): (String,) =
        sqlx::query_as("select state from plugins where id = $1").bind(plugin).fetch_one(&pool).await.unwrap();
    assert_eq!(state, "quarantined");
    let (len, cause): (i32, String) = sqlx::query_as(
        "select length(detail::text), detail->>'cause' from audit_log where action = 'plugin.quarantine'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(len < 16 * 1024, "the audit entry is bounded: {len} characters");
    assert!(cause.starts_with("no\u{FFFD}way\u{FFFD}[31m") && cause.contains("[truncated:"), "{}", &cause[..64]);
}
