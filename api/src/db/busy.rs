//! A replay's whole-run busy buckets (`run_busy`): stored once with the run, read back
//! for any window summed into coarser buckets, so a timeline covers the whole run at
//! any zoom without its ops.

use slicesched_sim::BusyBuckets;
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

/// Stores the rows (one per GPU and tenant that ran something there) and the bucket
/// width on the run.
pub async fn store(tx: &mut Transaction<'_, Postgres>, run: Uuid, b: &BusyBuckets) -> Result<(), sqlx::Error> {
    let as_i32 = |v: &[u32]| v.iter().map(|&x| x.min(i32::MAX as u32) as i32).collect::<Vec<i32>>();
    for r in &b.rows {
        sqlx::query(
            "insert into run_busy (run_id, gpu, tenant, busy_ns, borrowed_ns, ops) values ($1, $2, $3, $4, $5, $6)",
        )
        .bind(run)
        .bind(r.gpu as i32)
        .bind(r.tenant as i32)
        .bind(as_i32(&r.busy_ns))
        .bind(as_i32(&r.borrowed_ns))
        .bind(as_i32(&r.ops))
        .execute(&mut **tx)
        .await?;
    }
    sqlx::query("update runs set busy_bucket_ns = $2, busy_buckets = $3 where id = $1")
        .bind(run)
        .bind(b.bucket_ns as i64)
        .bind(b.buckets as i32)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// One output bucket of one GPU: busy ns per tenant, borrowed ns and ops started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Folded {
    pub gpu: i32,
    /// Index of the output bucket (its start is `index × width`).
    pub index: i64,
    pub tenant_busy_ns: Vec<i64>,
    pub borrowed_ns: i64,
    pub ops: i64,
}

/// One (GPU, tenant) row of fine buckets: busy, borrowed and op counts.
type BusyRow = (i32, i32, Vec<i32>, Vec<i32>, Vec<i32>);

/// The stored buckets of `gpus` over `[from, to)`, summed `factor` fine buckets at a
/// time (output buckets aligned on multiples of `factor × fine width` from 0, so the
/// same zoom always gives the same buckets). Only buckets with work are returned,
/// sorted by (gpu, index).
#[allow(clippy::too_many_arguments)]
pub async fn window(
    db: &PgPool,
    run: Uuid,
    gpus: &[i32],
    tenants: usize,
    fine_ns: i64,
    from: i64,
    to: i64,
    factor: i64,
) -> Result<Vec<Folded>, sqlx::Error> {
    let width = fine_ns * factor;
    // Fine buckets [a, b): from the first output bucket's start to the last one's end.
    let a = (from / width) * factor;
    let b = (to + width - 1) / width * factor;
    let rows: Vec<BusyRow> = sqlx::query_as(
        "select gpu, tenant, busy_ns[$3:$4], borrowed_ns[$3:$4], ops[$3:$4] from run_busy \
         where run_id = $1 and gpu = any($2) order by gpu, tenant",
    )
    .bind(run)
    .bind(gpus)
    .bind((a + 1) as i32)
    .bind(b as i32)
    .fetch_all(db)
    .await?;
    let mut out: Vec<Folded> = Vec::new();
    let mut per_gpu: std::collections::BTreeMap<(i32, i64), Folded> = Default::default();
    for (gpu, tenant, busy, borrowed, ops) in rows {
        for (j, &v) in busy.iter().enumerate() {
            let (br, op) = (borrowed.get(j).copied().unwrap_or(0), ops.get(j).copied().unwrap_or(0));
            if v == 0 && op == 0 {
                continue;
            }
            let index = (a + j as i64) / factor;
            let f = per_gpu.entry((gpu, index)).or_insert_with(|| Folded {
                gpu,
                index,
                tenant_busy_ns: vec![0; tenants],
                ..Default::default()
            });
            if let Some(slot) = f.tenant_busy_ns.get_mut(tenant as usize) {
                *slot += v as i64;
            }
            f.borrowed_ns += br as i64;
            f.ops += op as i64;
        }
    }
    out.extend(per_gpu.into_values());
    Ok(out)
}

/// The output bucket factor for a span: about `target` buckets, never finer than stored.
pub fn factor_for(span_ns: i64, fine_ns: i64, target: i64) -> i64 {
    let want = (span_ns + target - 1) / target.max(1);
    ((want + fine_ns - 1) / fine_ns.max(1)).max(1)
}

#[cfg(test)]
mod tests {
    #[test]
    fn factors_give_about_the_target_and_never_finer_than_stored() {
        assert_eq!(super::factor_for(1_000_000, 1_000_000, 2000), 1);
        assert_eq!(super::factor_for(60_000_000_000, 1_000_000, 2000), 30);
        assert_eq!(super::factor_for(60_000_000_001, 1_000_000, 2000), 31);
    }
}
